//! An invoker's counters by method: a sparse, lock-free map whose first methods live inline in
//! the invoker's own allocation and the rest in tables of open addressing ([`MethodStats`]);
//! and [`InvokerState`], everything kept about one invoker.

use super::CallStats;
use std::sync::atomic::{AtomicI64, AtomicU32};
use std::sync::OnceLock;

const EMPTY: u32 = u32::MAX;

/// Added to a method id, the key under which an `adaptive` balancer counts that method's calls
/// picked among a single candidate: Dubbo returns a lone invoker without running its strategy,
/// so none of its AdaptiveMetrics (requests, successes, errors) sees those calls. Kept in the
/// overflow tables only (see [`MethodStats::get_slow`]).
pub const BYPASS: u32 = 1 << 31;

const _: () = assert!(
    crate::balancer::MAX_METHODS <= BYPASS && (crate::balancer::MAX_METHODS - 1) | BYPASS != EMPTY
);
const FIRST_CAPACITY: usize = 8;

/// A table of open addressing that never deletes: a key slot, once claimed by CAS, belongs to
/// that method for the table's life, and its stats start zeroed, so readers need no lock and
/// no initialisation handshake. A full table chains to one four times larger.
struct Table {
    keys: Box<[AtomicU32]>,
    values: Box<[Slot]>,
    next: OnceLock<Box<Table>>,
}

/// A method's counters in a table, on lines of their own.
#[derive(Default)]
#[repr(align(64))]
struct Slot(CallStats);

impl Table {
    fn new(capacity: usize) -> Table {
        Table {
            keys: (0..capacity).map(|_| AtomicU32::new(EMPTY)).collect(),
            values: (0..capacity).map(|_| Slot::default()).collect(),
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
#[repr(C)]
pub struct MethodStats {
    inline: [CallStats; INLINE],
    overflow: OnceLock<Box<Table>>,
}

impl Default for MethodStats {
    fn default() -> Self {
        MethodStats {
            inline: std::array::from_fn(|_| CallStats {
                inline_key: AtomicU32::new(EMPTY),
                ..CallStats::default()
            }),
            overflow: OnceLock::new(),
        }
    }
}

impl MethodStats {
    #[inline]
    pub fn get(&self, method: u32) -> Option<&CallStats> {
        // The inline methods without a call (see `get_or_insert`); slots fill in order, so an
        // empty one ends the search.
        for stats in &self.inline {
            match stats.inline_key.load(std::sync::atomic::Ordering::Acquire) {
                k if k == method => return Some(stats),
                EMPTY => return None,
                _ => {}
            }
        }
        self.get_slow(method)
    }

    /// The counters of `method` in the overflow tables only (where [`BYPASS`] keys live).
    #[inline(never)]
    pub fn get_slow(&self, method: u32) -> Option<&CallStats> {
        // The inline slots are all another method's (see `get`), or `method` never lives there.
        let mut table = self.overflow.get()?;
        loop {
            let n = table.keys.len();
            let start = table.start(method);
            for i in 0..n {
                let slot = (start + i) & (n - 1);
                match table.keys[slot].load(std::sync::atomic::Ordering::Acquire) {
                    k if k == method => return Some(&table.values[slot].0),
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
        // The first two methods used on an invoker are the common ones: no call, a compare
        // each (a call to the slow path cost the second method about 20 instructions a call).
        for stats in &self.inline {
            if stats.inline_key.load(std::sync::atomic::Ordering::Acquire) == method {
                return stats;
            }
        }
        self.get_or_insert_slow(method)
    }

    #[inline(never)]
    fn get_or_insert_slow(&self, method: u32) -> &CallStats {
        for slot in 0..INLINE {
            if claim(&self.inline[slot].inline_key, method) {
                return &self.inline[slot];
            }
        }
        self.get_or_insert_in_tables(method)
    }

    /// The counters of `method` in the overflow tables, created on first use: for [`BYPASS`]
    /// keys, which must not take an inline slot from a method that every call reads.
    #[inline(never)]
    pub fn get_or_insert_in_tables(&self, method: u32) -> &CallStats {
        let mut table = self
            .overflow
            .get_or_init(|| Box::new(Table::new(FIRST_CAPACITY)));
        loop {
            let n = table.keys.len();
            let start = table.start(method);
            for i in 0..n {
                let slot = (start + i) & (n - 1);
                if claim(&table.keys[slot], method) {
                    return &table.values[slot].0;
                }
            }
            let bigger = n * 4;
            table = table.next.get_or_init(|| Box::new(Table::new(bigger)));
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = (u32, &CallStats)> {
        let inline = self.inline.iter().map(|v| (&v.inline_key, v));
        let mut table: Option<&Table> = self.overflow.get().map(|b| &**b);
        let tables = std::iter::from_fn(move || {
            let t = table?;
            table = t.next.get().map(|b| &**b);
            Some(t)
        })
        .flat_map(|t| t.keys.iter().zip(t.values.iter().map(|v| &v.0)));
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

/// Everything kept about one invoker while its id stays in the set. Aligned to a line, with
/// the inline counters first, so that each of those starts a line and what every call touches
/// is in one; the rest fills the line after them.
#[derive(Default)]
#[repr(C, align(64))]
pub struct InvokerState {
    pub methods: MethodStats,
    /// Outlier ejection: failures and ejections of the invoker (all methods together).
    pub outlier: crate::filter::OutlierState,
    /// Slow start: when this invoker joined the set (Unix ms, stamped by the first pick that
    /// sees it); 0 = not yet stamped, -1 = part of the first set (no slow start).
    pub joined_ms: AtomicI64,
}

// Five lines: two methods' counters, then the overflow table, outlier ejection and slow start.
const _: () = assert!(
    std::mem::size_of::<InvokerState>() == 320
        && std::mem::offset_of!(InvokerState, methods) == 0
        && std::mem::offset_of!(MethodStats, inline) == 0
        && std::mem::size_of::<CallStats>() % 64 == 0
);

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn sparse_map_grows_and_finds() {
        let m = MethodStats::default();
        assert!(m.get(0).is_none());
        for k in (0..500).rev() {
            let stats = m.get_or_insert(k * 7);
            for _ in 0..k % 5 {
                stats.begin();
            }
        }
        for k in 0..500 {
            assert_eq!(m.get(k * 7).unwrap().selected(), (k % 5) as u64);
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
}
