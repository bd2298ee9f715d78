//! Reports handed over through shared memory instead of a call: for bindings whose every
//! foreign call is expensive (a cgo call costs 30–50 ns, more than a whole select), so that an
//! RPC costs one crossing (the select) instead of two.
//!
//! A bounded multi-producer queue in the layout of `plb_report_queue` (Dmitry Vyukov's
//! sequence-numbered ring): each slot's `seq` says whose turn it is. A producer claims
//! position `p` when `slots[p & mask].seq == p` by a compare-and-swap of `tail` from `p` to
//! `p + 1`, writes the report, then stores `seq = p + 1` (release). The balancer reads position
//! `p` when `seq == p + 1` (acquire), claiming it by a compare-and-swap of `head`, and hands the
//! slot back with `seq = p + 1 + mask`, its position one lap later. A full queue is the
//! producer's to handle (it reports by the ordinary call instead), so no report is ever lost.
//!
//! The balancer drains the queue at the start of every select and of stats, so a pick sees
//! every report handed over before it, as if each had been a call. It is offered only for
//! strategies whose reports are counters (no latency model, no outlier ejection): those need
//! no clock at the moment of the report.

use crate::ffi::{plb_report_queue, plb_report_slot};
use crate::invoker::Outcome;
use std::sync::atomic::{AtomicU64, Ordering};

/// Slots per queue: a burst of this many reports between two selects fits without falling
/// back to calls (32 KB).
pub(crate) const SLOTS: usize = 1024;

/// Owns a queue and its slots.
pub(crate) struct ReportQueue {
    header: Box<plb_report_queue>,
    slots: Box<[plb_report_slot]>,
}

// SAFETY: every field that another thread may write is accessed through atomics (`tail`,
// `head`, `seq`), and a slot's other fields only by the thread that owns its turn.
unsafe impl Send for ReportQueue {}
unsafe impl Sync for ReportQueue {}

/// A u64 of the queue read and written atomically. `AtomicU64` has the layout of `u64`.
fn atomic(p: *mut u64) -> &'static AtomicU64 {
    // SAFETY: callers pass pointers into a live queue; u64 fields of repr(C) structs are
    // 8-byte aligned on every platform polylb builds for.
    unsafe { AtomicU64::from_ptr(p) }
}

impl ReportQueue {
    pub fn new() -> ReportQueue {
        let mut slots: Box<[plb_report_slot]> = (0..SLOTS as u64)
            .map(|i| plb_report_slot {
                seq: i,
                id: 0,
                elapsed_us: 0,
                method: 0,
                outcome: 0,
            })
            .collect();
        let header = Box::new(plb_report_queue {
            mask: SLOTS as u64 - 1,
            slots: slots.as_mut_ptr(),
            _pad_read: [0; 14],
            tail: 0,
            _pad_tail: [0; 15],
            head: 0,
            _pad_head: [0; 15],
        });
        ReportQueue { header, slots }
    }

    /// The queue as producers see it; valid while `self` lives.
    pub fn as_ptr(&self) -> *mut plb_report_queue {
        &*self.header as *const plb_report_queue as *mut plb_report_queue
    }

    fn slot(&self, position: u64) -> *mut plb_report_slot {
        let index = (position & self.header.mask) as usize;
        debug_assert!(index < self.slots.len());
        // SAFETY: index <= mask < slots.len().
        unsafe { self.header.slots.add(index) }
    }

    fn field(&self, f: impl FnOnce(*mut plb_report_queue) -> *mut u64) -> &AtomicU64 {
        atomic(f(self.as_ptr()))
    }

    /// True when a report may be waiting (one load and one compare when none is).
    #[inline]
    pub fn may_have_reports(&self) -> bool {
        let head = self
            .field(|q| unsafe { &raw mut (*q).head })
            .load(Ordering::Relaxed);
        let seq = atomic(unsafe { &raw mut (*self.slot(head)).seq }).load(Ordering::Relaxed);
        seq == head.wrapping_add(1)
    }

    /// Takes every report handed over so far, in order, and gives it to `apply`.
    #[cold]
    pub fn drain(&self, mut apply: impl FnMut(u32, u64, i64, Option<Outcome>)) {
        let head = self.field(|q| unsafe { &raw mut (*q).head });
        let mut position = head.load(Ordering::Relaxed);
        loop {
            let slot = self.slot(position);
            let seq = atomic(unsafe { &raw mut (*slot).seq });
            let turn = seq.load(Ordering::Acquire);
            if turn != position.wrapping_add(1) {
                // Not written yet (or the queue is empty); another drain may have moved on.
                let now = head.load(Ordering::Relaxed);
                if now == position {
                    return;
                }
                position = now;
                continue;
            }
            match head.compare_exchange_weak(
                position,
                position.wrapping_add(1),
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    // SAFETY: this thread owns the slot's turn until it stores `seq` below.
                    let (method, id, elapsed_us, outcome) = unsafe {
                        (
                            (*slot).method,
                            (*slot).id,
                            (*slot).elapsed_us,
                            (*slot).outcome,
                        )
                    };
                    seq.store(
                        position.wrapping_add(self.header.mask + 1),
                        Ordering::Release,
                    );
                    apply(method, id, elapsed_us, Outcome::from_code(outcome));
                    position = position.wrapping_add(1);
                }
                Err(now) => position = now,
            }
        }
    }

    /// The producer's side, as bindings implement it (here for tests). False when full.
    #[cfg(test)]
    pub fn push(&self, method: u32, id: u64, elapsed_us: i64, outcome: i32) -> bool {
        let tail = self.field(|q| unsafe { &raw mut (*q).tail });
        let mut position = tail.load(Ordering::Relaxed);
        loop {
            let slot = self.slot(position);
            let seq = atomic(unsafe { &raw mut (*slot).seq });
            let turn = seq.load(Ordering::Acquire);
            if turn == position {
                match tail.compare_exchange_weak(
                    position,
                    position.wrapping_add(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        // SAFETY: this thread owns the slot's turn until it stores `seq`.
                        unsafe {
                            (*slot).method = method;
                            (*slot).id = id;
                            (*slot).elapsed_us = elapsed_us;
                            (*slot).outcome = outcome;
                        }
                        seq.store(position.wrapping_add(1), Ordering::Release);
                        return true;
                    }
                    Err(now) => position = now,
                }
            } else if (turn as i64).wrapping_sub(position as i64) < 0 {
                return false;
            } else {
                position = tail.load(Ordering::Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn reports_come_out_in_order_and_a_full_queue_refuses() {
        let q = ReportQueue::new();
        assert!(!q.may_have_reports());
        for round in 0..3u64 {
            for i in 0..SLOTS as u64 {
                assert!(q.push(1, round * 10_000 + i, i as i64, 0));
            }
            assert!(!q.push(1, 99, 0, 0), "a full queue refuses");
            assert!(q.may_have_reports());
            let mut seen = Vec::new();
            q.drain(|m, id, e, o| seen.push((m, id, e, o)));
            assert_eq!(seen.len(), SLOTS);
            for (i, &(m, id, e, o)) in seen.iter().enumerate() {
                assert_eq!(
                    (m, id, e, o),
                    (
                        1,
                        round * 10_000 + i as u64,
                        i as i64,
                        Some(Outcome::Success)
                    )
                );
            }
            assert!(!q.may_have_reports());
        }
    }

    #[test]
    fn concurrent_producers_and_drainers_lose_nothing() {
        let q = Arc::new(ReportQueue::new());
        let total = std::sync::atomic::AtomicU64::new(0);
        let count = std::sync::atomic::AtomicU64::new(0);
        std::thread::scope(|s| {
            for t in 0..3u64 {
                let q = &q;
                s.spawn(move || {
                    for i in 0..50_000u64 {
                        while !q.push(0, t * 1_000_000 + i, 1, 1) {
                            std::hint::spin_loop();
                        }
                    }
                });
            }
            for _ in 0..2 {
                let (q, total, count) = (&q, &total, &count);
                s.spawn(move || {
                    while count.load(Ordering::Relaxed) < 150_000 {
                        q.drain(|_, id, _, o| {
                            assert_eq!(o, Some(Outcome::Failure));
                            total.fetch_add(id, Ordering::Relaxed);
                            count.fetch_add(1, Ordering::Relaxed);
                        });
                    }
                });
            }
        });
        let expected: u64 = (0..3u64)
            .map(|t| (0..50_000u64).map(|i| t * 1_000_000 + i).sum::<u64>())
            .sum();
        assert_eq!(count.load(Ordering::Relaxed), 150_000);
        assert_eq!(total.load(Ordering::Relaxed), expected);
    }
}
