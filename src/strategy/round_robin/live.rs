//! Live periods: a method's period published in the snapshot it is for, so that whole-set
//! picks at static weights take a ticket from one atomic cursor instead of the method's lock,
//! and the state's side of opening one and of closing it (folding the picks it served back).

use super::period::MAX_PERIOD;
use super::state::State;
use super::{SnapshotData, RECYCLE_MS};
use crate::balancer::Snapshot;
use parking_lot::Mutex;
use std::sync::atomic::{
    AtomicI64, AtomicPtr, AtomicU64,
    Ordering::{AcqRel, Acquire, Relaxed, Release},
};
use std::sync::Arc;

/// A live period as lock-free picks see it: each pick takes a ticket; the mutex holder that
/// ends the period closes the cursor first, so the picks it counts are exactly those served.
pub(super) struct Live {
    order: Arc<[u32]>,
    /// `order.len()`, and its reciprocal for a division-free ticket modulo (a 64-bit `div`
    /// was about a quarter of a pick's own time).
    len: u32,
    reciprocal: u64,
    /// Picks served since the period's first position (`CLOSED` set once it is over).
    cursor: AtomicU64,
    /// The latest pick's time (ms): every invoker of the set was "updated" then, as in Dubbo.
    last_select_ms: AtomicI64,
    /// The oldest last-update among entries of invokers that left (recycling is due 60 s later).
    oldest_departed_ms: AtomicI64,
}

const CLOSED: u64 = 1 << 63;

impl Live {
    /// A live period over `order`, its cursor at `start` (below `order.len()`).
    fn new(order: Arc<[u32]>, start: usize, last_select_ms: i64, oldest_departed_ms: i64) -> Live {
        let len = order.len() as u32;
        Live {
            order,
            len,
            reciprocal: (u64::MAX / u64::from(len)).wrapping_add(1),
            cursor: AtomicU64::new(start as u64),
            last_select_ms: AtomicI64::new(last_select_ms),
            oldest_departed_ms: AtomicI64::new(oldest_departed_ms),
        }
    }

    /// The position in `order` of a ticket: `ticket % len`, by Lemire's multiply-based modulo
    /// while the ticket fits in 32 bits (the first four billion picks of a live period).
    #[inline]
    fn position(&self, ticket: u64) -> usize {
        if ticket <= u64::from(u32::MAX) {
            let low = self.reciprocal.wrapping_mul(ticket);
            ((u128::from(low) * u128::from(self.len)) >> 64) as usize
        } else {
            (ticket % u64::from(self.len)) as usize
        }
    }
}

/// Methods with ids below this have a slot for a live period in each snapshot; picks of later
/// ones (services rarely have that many) come from the period under the method's lock.
const LIVE_SLOTS: usize = 128;
/// Live periods one snapshot may publish before further ones stay behind the lock: each method
/// publishes one per update, and again after a pick that had to take the lock (a pick on an
/// older snapshot, a tournament that settled), so this bounds the memory that churn can hold.
const MAX_LIVES_PER_SNAPSHOT: usize = 4 * LIVE_SLOTS;
/// Entries of the orders that one snapshot's live periods may hold (4 MB), besides its own
/// fresh period's. Each failover in a set that stays ends its method's period, and the period
/// its tournament records next is a new order, held until the snapshot drops: counted only by
/// lives, 512 failovers over a set whose period is the longest kept (`MAX_PERIOD`) held 512 MB.
const MAX_ORDER_ENTRIES_PER_SNAPSHOT: usize = 4 * MAX_PERIOD as usize;

/// Each method's live period, published in the snapshot it is for. A pick holds its snapshot,
/// which owns every [`Live`] its slots ever pointed to, so reading one needs no reference count
/// (an `ArcSwap` load was two locked instructions, about a fifth of a pick), and a pick on an
/// older snapshot never sees a newer set's period.
pub(super) struct LiveSlots {
    slots: Box<[AtomicPtr<Live>]>,
    owned: Mutex<Owned>,
}

#[derive(Default)]
struct Owned {
    lives: Vec<Arc<Live>>,
    /// Entries of the orders that `lives` hold, each order counted once and the snapshot's
    /// fresh period's not at all (see `Period::paid`).
    order_entries: usize,
}

impl LiveSlots {
    pub(super) fn new() -> LiveSlots {
        LiveSlots {
            slots: (0..LIVE_SLOTS)
                .map(|_| AtomicPtr::new(std::ptr::null_mut()))
                .collect(),
            owned: Mutex::new(Owned::default()),
        }
    }

    #[inline]
    fn of(snapshot: &Snapshot) -> Option<&LiveSlots> {
        Some(
            &snapshot
                .prepared
                .as_ref()?
                .downcast_ref::<SnapshotData>()?
                .lives,
        )
    }

    /// Whether `method_id` has a live period in `snapshot`, and the lives and order entries
    /// its snapshot holds (tests).
    #[cfg(test)]
    pub(super) fn usage(snapshot: &Snapshot, method_id: u32) -> (bool, usize, usize) {
        let lives = LiveSlots::of(snapshot).expect("a roundrobin snapshot");
        let owned = lives.owned.lock();
        (
            lives.get(method_id).is_some(),
            owned.lives.len(),
            owned.order_entries,
        )
    }

    /// The live period of `method_id` in this snapshot, open or closed.
    #[inline]
    fn get(&self, method_id: u32) -> Option<&Live> {
        let ptr = self.slots.get(method_id as usize)?.load(Acquire);
        // SAFETY: a non-null slot points into an `Arc<Live>` held by `owned`, which keeps
        // every one it receives until `self` drops.
        unsafe { ptr.as_ref() }
    }

    /// Publishes the live period that `make` builds in `method_id`'s slot, when it has one and
    /// the snapshot's share is not used up: by the number of lives, or by the entries of their
    /// orders (`new_entries`, what this one's order adds; 0 when already paid for). Checked
    /// before `make` runs: a pick behind the lock after the share is used up then allocates
    /// nothing.
    fn publish(
        &self,
        method_id: u32,
        new_entries: usize,
        make: impl FnOnce() -> Live,
    ) -> Option<Arc<Live>> {
        let slot = self.slots.get(method_id as usize)?;
        let mut owned = self.owned.lock();
        if owned.lives.len() >= MAX_LIVES_PER_SNAPSHOT
            || owned.order_entries + new_entries > MAX_ORDER_ENTRIES_PER_SNAPSHOT
        {
            return None;
        }
        let live = Arc::new(make());
        owned.order_entries += new_entries;
        owned.lives.push(live.clone());
        slot.store(Arc::as_ptr(&live).cast_mut(), Release);
        Some(live)
    }
}

/// The lock-free pick of a whole-set select at static weights: a ticket of the method's live
/// period in `snapshot`. None when it has none, when the period closed under us (its mutex
/// holder has moved on), or when the state of invokers that left is due for recycling: the
/// locked path then serves the pick, from the same period.
#[inline(always)]
pub(crate) fn serve_live(snapshot: &Snapshot, method_id: u32, now_ms: i64) -> Option<usize> {
    let live = LiveSlots::of(snapshot)?.get(method_id)?;
    if now_ms.saturating_sub(live.oldest_departed_ms.load(Relaxed)) > RECYCLE_MS {
        return None;
    }
    let ticket = live.cursor.fetch_add(1, AcqRel);
    if ticket & CLOSED != 0 {
        return None;
    }
    // The latest select's own time, as Dubbo stamps it (earlier too, when the clock stepped
    // back); written once per millisecond, not per pick.
    if live.last_select_ms.load(Relaxed) != now_ms {
        live.last_select_ms.store(now_ms, Relaxed);
    }
    Some(live.order[live.position(ticket)] as usize)
}

impl State {
    /// Ends the live period, if any: folds the picks it served into the state's period.
    pub(super) fn close_live(&mut self) {
        if let Some(live) = self.open.take() {
            // The cursor started at the period's position: it now is the position reached.
            let reached = live.cursor.fetch_or(CLOSED, AcqRel) & !CLOSED;
            if let Some(p) = self.period.as_mut() {
                // A set of one is never walked by Dubbo: its selects leave no trace.
                if reached != p.next as u64 && p.ids.len() > 1 {
                    self.picked_since_build = true;
                    self.last_select_ms = live.last_select_ms.load(Relaxed);
                }
                p.next = (reached % p.order.len() as u64) as usize;
            }
        }
    }

    /// Publishes the state's period for lock-free picks on `snapshot`, from its current
    /// position, when the period is of that snapshot's set.
    pub(super) fn open_live(&mut self, snapshot: &Snapshot, method_id: u32) {
        self.close_live();
        let Some(p) = self
            .period
            .as_mut()
            .filter(|p| p.generation == snapshot.generation && !p.refused)
        else {
            return;
        };
        let Some(lives) = LiveSlots::of(snapshot) else {
            return;
        };
        let new_entries = if p.paid { 0 } else { p.order.len() };
        let (last_select_ms, oldest_departed_ms) = (self.last_select_ms, self.oldest_departed_ms);
        self.open = lives.publish(method_id, new_entries, || {
            Live::new(p.order.clone(), p.next, last_select_ms, oldest_departed_ms)
        });
        p.paid |= self.open.is_some();
        p.refused = self.open.is_none();
    }
}

#[cfg(test)]
mod tests {
    use super::super::period::MAX_PERIOD;
    use super::*;

    fn live(len: u32) -> Arc<Live> {
        Arc::new(Live::new((0..len).collect(), 0, 0, i64::MAX))
    }

    #[test]
    fn ticket_positions_equal_the_remainder() {
        let lens = [1, 2, 3, 7, 10, 1000, 65_521, MAX_PERIOD as u32];
        let near_edges = [0, 1, 2, 999, 1 << 31, u64::from(u32::MAX) - 1];
        for len in lens {
            let live = live(len);
            let mut tickets: Vec<u64> = near_edges.to_vec();
            tickets.extend([u64::from(u32::MAX), u64::from(u32::MAX) + 1, CLOSED - 1]);
            // And a spread of others, by a fixed multiplicative sequence.
            tickets.extend((0..10_000u64).map(|i| i.wrapping_mul(0x9E37_79B9) & 0xFFFF_FFFF));
            for t in tickets {
                assert_eq!(
                    live.position(t),
                    (t % u64::from(len)) as usize,
                    "{t} % {len}"
                );
            }
        }
    }

    #[test]
    fn a_snapshot_publishes_a_bounded_number_of_live_periods() {
        let lives = LiveSlots::new();
        assert!(lives.get(3).is_none());
        let first = lives.publish(3, 5, || Live::new((0..5).collect(), 0, 0, i64::MAX));
        let first = first.expect("published");
        assert!(std::ptr::eq(lives.get(3).unwrap(), &*first));
        let no_slot = lives.publish(LIVE_SLOTS as u32, 0, || unreachable!("not built"));
        assert!(no_slot.is_none(), "no slot");
        for _ in 1..MAX_LIVES_PER_SNAPSHOT {
            assert!(lives
                .publish(4, 2, || Live::new((0..2).collect(), 0, 0, i64::MAX))
                .is_some());
        }
        let refused = lives.publish(4, 0, || unreachable!("not built once the share is used"));
        assert!(refused.is_none(), "the snapshot's share is used");
        assert_eq!(lives.get(4).unwrap().len, 2);
        assert!(std::ptr::eq(lives.get(3).unwrap(), &*first));
    }

    /// The orders that a snapshot's lives hold are bounded too, not only their number: each
    /// failover in a set that stays records a new period, up to `MAX_PERIOD` entries long.
    #[test]
    fn a_snapshot_holds_a_bounded_number_of_order_entries() {
        let lives = LiveSlots::new();
        let order: Arc<[u32]> = (0..MAX_PERIOD as u32).map(|i| i % 7).collect();
        let make = || Live::new(order.clone(), 0, 0, i64::MAX);
        let paid_for = MAX_ORDER_ENTRIES_PER_SNAPSHOT / MAX_PERIOD as usize;
        for _ in 0..paid_for {
            assert!(lives.publish(1, MAX_PERIOD as usize, make).is_some());
        }
        assert!(lives.publish(1, MAX_PERIOD as usize, make).is_none());
        assert!(lives.publish(1, 1, make).is_none());
        // An order already paid for (a period published again) still goes out.
        assert!(lives.publish(1, 0, make).is_some());
    }
}
