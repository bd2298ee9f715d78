//! Live per-(invoker, method) counters, created on first use and kept while the invoker stays
//! in the set. Reads and writes are lock-free atomics, except the small latency model that
//! adaptive-style strategies update together under a per-entry lock.

use crate::invoker::Outcome;
use parking_lot::Mutex;
use std::sync::atomic::{
    AtomicBool, AtomicI64, AtomicU32, AtomicU64,
    Ordering::{Acquire, Relaxed},
};
use std::sync::OnceLock;

/// Counters of one invoker for one method.
///
/// A select costs one atomic add and a successful report two: calls in flight are not a counter
/// of their own but `selected - ended`, so that select and report never both write one hot
/// word. Readers load the ended counters before `selected`, which can only overestimate the
/// in-flight count by calls selected meanwhile, never report it below zero.
#[derive(Default)]
pub struct CallStats {
    pub selected: AtomicU64,
    pub succeeded: AtomicU64,
    /// Failures and timeouts.
    pub failed: AtomicU64,
    pub cancelled: AtomicU64,
    /// Reports that found no call of theirs in flight (a double report, or one for a call
    /// selected before the invoker left and came back): counted above, not as ended calls.
    pub unmatched: AtomicU64,
    pub timeouts: AtomicU64,
    pub succeeded_elapsed_us: AtomicU64,
    /// shortestresponse only: the sum of successful latencies truncated to whole ms per call,
    /// as Dubbo's RpcStatus keeps it, and where its current window starts.
    pub succeeded_elapsed_ms: AtomicU64,
    pub window_succeeded: AtomicU64,
    pub window_elapsed_ms: AtomicU64,
    /// State that a strategy updates as a unit (latency estimates, provider metrics).
    pub model: Mutex<LatencyModel>,
    /// adaptive: a provider has reported metrics for this invoker and method (until then its
    /// load is 0 whatever the model says, so picks need not lock it).
    pub has_provider_metrics: AtomicBool,
    /// adaptive: when the invoker was last picked (ms; 0 = not yet), Dubbo's pickTime.
    pub pick_time_ms: AtomicI64,
    /// peakewma's lock-free latency estimate (unused by other strategies).
    pub ewma: EwmaCell,
}

/// peakewma's per-(invoker, method) state: plain atomics, so that a pick reads it without a
/// lock. Times are the caller's `now_us` timeline (Unix µs); 0 = never.
#[derive(Default)]
pub struct EwmaCell {
    /// Latency estimate in µs as `f64` bits; 0 = no sample yet.
    pub estimate_bits: AtomicU64,
    /// When the last sample was taken.
    pub sampled_us: AtomicI64,
    /// When the estimate last jumped up to a sample (a peak).
    pub peak_us: AtomicI64,
    /// When this invoker was last probed while it looked slow.
    pub probed_us: AtomicI64,
    /// Current wait between probes (doubles while probes find it still slow; 0 = not backing off).
    pub probe_gap_us: AtomicI64,
    /// Last sign of progress: a call ended, or the invoker went from idle to busy. While calls
    /// are in flight, the oldest of them is at least `now - progress_us` old.
    pub progress_us: AtomicI64,
}

/// Latency/load model fields; each strategy documents which ones it uses.
#[derive(Default, Clone, Debug)]
pub struct LatencyModel {
    // Dubbo adaptive (AdaptiveMetrics), times in ms.
    pub provider_time_ms: i64,
    pub current_time_ms: i64,
    pub cpu_load: f64,
    pub last_latency_ms: i64,
    pub ewma: f64,
}

impl CallStats {
    pub fn begin(&self) {
        self.selected.fetch_add(1, Relaxed);
    }

    /// Records the end of a call. True when a call was in flight (the report matched one);
    /// a report without a matching select never drives the in-flight count below zero.
    pub fn end(&self, outcome: Outcome, elapsed_us: u64) -> bool {
        let matched = self.active() > 0;
        match outcome {
            Outcome::Success => {
                self.succeeded.fetch_add(1, Relaxed);
                let before = self.succeeded_elapsed_us.fetch_add(elapsed_us, Relaxed);
                if before.checked_add(elapsed_us).is_none() {
                    // Saturate rather than wrap: a wrapped sum would read as a small mean.
                    self.succeeded_elapsed_us.store(u64::MAX, Relaxed);
                }
            }
            Outcome::Failure => {
                self.failed.fetch_add(1, Relaxed);
            }
            Outcome::Timeout => {
                self.failed.fetch_add(1, Relaxed);
                self.timeouts.fetch_add(1, Relaxed);
            }
            Outcome::Cancelled => {
                self.cancelled.fetch_add(1, Relaxed);
            }
        }
        if !matched {
            self.unmatched.fetch_add(1, Relaxed);
        }
        matched
    }

    /// Calls in flight (selected, not yet reported).
    #[inline]
    pub fn active(&self) -> i64 {
        // Ended counters first (Acquire orders the later load of `selected` after them).
        let ended = self
            .succeeded
            .load(Acquire)
            .wrapping_add(self.failed.load(Acquire))
            .wrapping_add(self.cancelled.load(Acquire))
            .wrapping_sub(self.unmatched.load(Acquire));
        (self.selected.load(Acquire).wrapping_sub(ended) as i64).max(0)
    }
}

const EMPTY: u32 = u32::MAX;
const FIRST_CAPACITY: usize = 8;

/// A table of open addressing that never deletes: a key slot, once claimed by CAS, belongs to
/// that method for the table's life, and its stats start zeroed, so readers need no lock and
/// no initialisation handshake. A full table chains to one four times larger.
struct Table {
    keys: Box<[AtomicU32]>,
    values: Box<[CallStats]>,
    next: OnceLock<Box<Table>>,
}

impl Table {
    fn new(capacity: usize) -> Table {
        Table {
            keys: (0..capacity).map(|_| AtomicU32::new(EMPTY)).collect(),
            values: (0..capacity).map(|_| CallStats::default()).collect(),
            next: OnceLock::new(),
        }
    }

    fn start(&self, method: u32) -> usize {
        // Capacities are powers of two: a mask instead of a division on every lookup.
        (method.wrapping_mul(0x9E37_79B9) as usize) & (self.keys.len() - 1)
    }
}

/// Methods whose counters live inline in the invoker's own allocation: a scan over invokers
/// (leastactive, shortestresponse) then touches one object per invoker instead of three.
const INLINE: usize = 2;

/// Per-invoker map from method id to its counters: sparse (memory only for methods used on
/// this invoker) and lock-free. The first methods used live inline; more overflow into tables.
pub struct MethodStats {
    inline_keys: [AtomicU32; INLINE],
    inline: [CallStats; INLINE],
    overflow: OnceLock<Box<Table>>,
}

impl Default for MethodStats {
    fn default() -> Self {
        MethodStats {
            inline_keys: std::array::from_fn(|_| AtomicU32::new(EMPTY)),
            inline: Default::default(),
            overflow: OnceLock::new(),
        }
    }
}

impl MethodStats {
    #[inline]
    pub fn get(&self, method: u32) -> Option<&CallStats> {
        match self.inline_keys[0].load(std::sync::atomic::Ordering::Acquire) {
            k if k == method => Some(&self.inline[0]),
            EMPTY => None,
            _ => self.get_slow(method),
        }
    }

    #[inline(never)]
    fn get_slow(&self, method: u32) -> Option<&CallStats> {
        for slot in 0..INLINE {
            match self.inline_keys[slot].load(std::sync::atomic::Ordering::Acquire) {
                k if k == method => return Some(&self.inline[slot]),
                EMPTY => return None,
                _ => {}
            }
        }
        let mut table = self.overflow.get()?;
        loop {
            let n = table.keys.len();
            let start = table.start(method);
            for i in 0..n {
                let slot = (start + i) & (n - 1);
                match table.keys[slot].load(std::sync::atomic::Ordering::Acquire) {
                    k if k == method => return Some(&table.values[slot]),
                    EMPTY => return None,
                    _ => {}
                }
            }
            table = table.next.get()?;
        }
    }

    /// The method's counters, created on first use.
    #[inline]
    pub fn get_or_insert(&self, method: u32) -> &CallStats {
        // The first method used on an invoker is the common one: no call, one compare.
        if self.inline_keys[0].load(std::sync::atomic::Ordering::Acquire) == method {
            return &self.inline[0];
        }
        self.get_or_insert_slow(method)
    }

    #[inline(never)]
    fn get_or_insert_slow(&self, method: u32) -> &CallStats {
        for slot in 0..INLINE {
            if claim(&self.inline_keys[slot], method) {
                return &self.inline[slot];
            }
        }
        let mut table = self
            .overflow
            .get_or_init(|| Box::new(Table::new(FIRST_CAPACITY)));
        loop {
            let n = table.keys.len();
            let start = table.start(method);
            for i in 0..n {
                let slot = (start + i) & (n - 1);
                if claim(&table.keys[slot], method) {
                    return &table.values[slot];
                }
            }
            let bigger = n * 4;
            table = table.next.get_or_init(|| Box::new(Table::new(bigger)));
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = (u32, &CallStats)> {
        let inline = self.inline_keys.iter().zip(self.inline.iter());
        let mut table: Option<&Table> = self.overflow.get().map(|b| &**b);
        let tables = std::iter::from_fn(move || {
            let t = table?;
            table = t.next.get().map(|b| &**b);
            Some(t)
        })
        .flat_map(|t| t.keys.iter().zip(t.values.iter()));
        inline.chain(tables).filter_map(|(k, v)| {
            let k = k.load(std::sync::atomic::Ordering::Acquire);
            (k != EMPTY).then_some((k, v))
        })
    }
}

/// True when `key` holds `method`, claiming it first if it was empty.
fn claim(key: &AtomicU32, method: u32) -> bool {
    let current = key.load(std::sync::atomic::Ordering::Acquire);
    if current == method {
        return true;
    }
    current == EMPTY
        && match key.compare_exchange(
            EMPTY,
            method,
            std::sync::atomic::Ordering::AcqRel,
            std::sync::atomic::Ordering::Acquire,
        ) {
            Ok(_) => true,
            Err(actual) => actual == method,
        }
}

/// Everything kept about one invoker while its id stays in the set.
#[derive(Default)]
pub struct InvokerState {
    pub methods: MethodStats,
    /// Outlier ejection: failures and ejections of the invoker (all methods together).
    pub outlier: crate::filter::OutlierState,
    /// Slow start: when this invoker joined the set (Unix ms, stamped by the first pick that
    /// sees it); 0 = not yet stamped, -1 = part of the first set (no slow start).
    pub joined_ms: AtomicI64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn sparse_map_grows_and_finds() {
        let m = MethodStats::default();
        assert!(m.get(0).is_none());
        for k in (0..500).rev() {
            m.get_or_insert(k * 7).selected.fetch_add(k as u64, Relaxed);
        }
        for k in 0..500 {
            assert_eq!(m.get(k * 7).unwrap().selected.load(Relaxed), k as u64);
            assert!(m.get(k * 7 + 1).is_none());
        }
        assert_eq!(m.iter().count(), 500);
    }

    #[test]
    fn concurrent_inserts_agree() {
        let m = Arc::new(MethodStats::default());
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let m = m.clone();
                std::thread::spawn(move || {
                    for k in 0..200 {
                        m.get_or_insert(k).begin();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        for k in 0..200 {
            assert_eq!(m.get(k).unwrap().active(), 4);
        }
        assert_eq!(m.iter().count(), 200);
    }

    #[test]
    fn end_never_goes_negative() {
        let s = CallStats::default();
        assert!(!s.end(Outcome::Success, 5));
        assert_eq!(s.active(), 0);
        s.begin();
        assert_eq!(s.active(), 1);
        assert!(s.end(Outcome::Failure, 0));
        assert!(!s.end(Outcome::Cancelled, 0));
        assert_eq!(s.active(), 0);
        // The unmatched reports do not absorb a later call's in-flight count.
        s.begin();
        assert_eq!(s.active(), 1);
        assert_eq!(s.unmatched.load(Relaxed), 2);
    }
}
