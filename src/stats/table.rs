//! An invoker's counters by method: a sparse, lock-free map whose first methods live inline in
//! the invoker's own allocation and the rest in tables of open addressing ([`MethodStats`]);
//! and [`InvokerState`], everything kept about one invoker.

use super::CallStats;
use crate::once_box::OnceBox;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32};

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
/// Slots a lookup probes in one table before it goes on to the next. A full table has no
/// empty slot to end a search, so without a bound every method past it was searched for
/// through all of it first: a call of the last of m methods on an invoker cost O(m) (29 µs a
/// select+report with 40,000 methods). With it, O(log m): at most this many probes per table,
/// and tables grow fourfold.
const PROBES: usize = 16;

/// A table of open addressing that never deletes: a key slot, once claimed by CAS, belongs to
/// that method for the table's life, and its stats start zeroed, so readers need no lock and
/// no initialisation handshake. A method whose probe window (`PROBES` slots from its start)
/// is full goes on to the next table, four times larger.
struct Table {
    keys: Box<[AtomicU32]>,
    values: Box<[Slot]>,
    next: OnceBox<Table>,
}

/// What a search of one table's window found.
enum Probe<'a> {
    Found(&'a CallStats),
    /// An empty slot: the method is in neither this table nor a later one.
    Absent,
    /// Every slot of the window holds another method.
    Full,
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
            next: OnceBox::new(),
        }
    }

    /// The counters of `method` in this table (the first) or a later one. A method goes to
    /// the first table with a free slot in its window, so an empty slot in this table's
    /// window ends the search; past it, later tables are searched last first: the tables
    /// before the last are full (a method goes on only when its window is), so their windows
    /// end in no empty slot, while the last, the largest, holds most methods.
    #[inline]
    fn find(&self, method: u32) -> Option<&CallStats> {
        match self.probe(method) {
            Probe::Found(stats) => Some(stats),
            Probe::Absent => None,
            Probe::Full => self.next.get()?.find_later(method),
        }
    }

    /// `find` in this table or a later one, the later ones first; out of line: only invokers
    /// of many methods come here.
    #[inline(never)]
    fn find_later(&self, method: u32) -> Option<&CallStats> {
        if let Some(found) = self.next.get().and_then(|next| next.find_later(method)) {
            return Some(found);
        }
        match self.probe(method) {
            Probe::Found(stats) => Some(stats),
            Probe::Absent | Probe::Full => None,
        }
    }

    /// The slots of `method`'s window in this table, in the order searches and claims take
    /// them (the same order for both, so that two claims of one method meet in one slot).
    #[inline]
    fn window(&self, method: u32) -> impl Iterator<Item = usize> {
        let n = self.keys.len();
        let start = self.start(method);
        (0..n.min(PROBES)).map(move |i| {
            #[cfg(test)]
            PROBED.with(|p| p.set(p.get() + 1));
            (start + i) & (n - 1)
        })
    }

    /// A search of `method`'s window in this table.
    #[inline]
    fn probe(&self, method: u32) -> Probe<'_> {
        for slot in self.window(method) {
            match self.keys[slot].load(std::sync::atomic::Ordering::SeqCst) {
                k if k == method => return Probe::Found(&self.values[slot].0),
                EMPTY => return Probe::Absent,
                _ => {}
            }
        }
        Probe::Full
    }

    /// The counters of `method` in its window of this table, claiming a free slot for it
    /// first; None when every slot of the window holds another method.
    #[inline]
    fn claim(&self, method: u32) -> Option<&CallStats> {
        self.window(method)
            .find(|&slot| claim(&self.keys[slot], method))
            .map(|slot| &self.values[slot].0)
    }

    fn start(&self, method: u32) -> usize {
        // Fibonacci hashing: the product's top bits, which every bit of the id moves. Its low
        // bits depend only on the id's low bits: ids a multiple of 2^k apart (an invoker
        // serving every 64th method of its balancer) would share one start in every table of
        // up to 2^k slots, each holding only a window of them.
        let bits = self.keys.len().trailing_zeros();
        (method.wrapping_mul(0x9E37_79B9) >> (32 - bits)) as usize
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
    overflow: OnceBox<Table>,
}

impl Default for MethodStats {
    fn default() -> Self {
        MethodStats {
            inline: std::array::from_fn(|_| CallStats {
                inline_key: AtomicU32::new(EMPTY),
                ..CallStats::default()
            }),
            overflow: OnceBox::new(),
        }
    }
}

impl MethodStats {
    #[inline]
    pub fn get(&self, method: u32) -> Option<&CallStats> {
        // The inline methods without a call (see `get_or_insert`); slots fill in order, so an
        // empty one ends the search.
        for stats in &self.inline {
            match stats.inline_key.load(std::sync::atomic::Ordering::SeqCst) {
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
        self.overflow.get()?.find(method)
    }

    /// The method's counters, created on first use.
    #[inline]
    pub fn get_or_insert(&self, method: u32) -> &CallStats {
        // The first two methods used on an invoker are the common ones: no call, a compare
        // each (a call to the slow path cost the second method about 20 instructions a call).
        for stats in &self.inline {
            if stats.inline_key.load(std::sync::atomic::Ordering::SeqCst) == method {
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
        let first = self
            .overflow
            .get_or_init(|| Box::new(Table::new(FIRST_CAPACITY)));
        // A method goes to the first table with a free slot in its window, so the first
        // table's window either holds it, or has a free slot for it, or is full.
        if let Some(found) = first.claim(method) {
            return found;
        }
        // Later tables are searched last first (see `Table::find`).
        if let Some(found) = first.next.get().and_then(|next| next.find_later(method)) {
            return found;
        }
        // Then claimed in order: the same windows in the same order find the method if
        // another thread put it there meanwhile.
        let mut table = first;
        loop {
            let bigger = table.keys.len() * 4;
            table = table.next.get_or_init(|| Box::new(Table::new(bigger)));
            if let Some(found) = table.claim(method) {
                return found;
            }
        }
    }

    /// Slots of the overflow tables (tests).
    #[cfg(test)]
    fn table_slots(&self) -> usize {
        let mut slots = 0;
        let mut table = self.overflow.get();
        while let Some(t) = table {
            slots += t.keys.len();
            table = t.next.get();
        }
        slots
    }

    pub fn iter(&self) -> impl Iterator<Item = (u32, &CallStats)> {
        let inline = self.inline.iter().map(|v| (&v.inline_key, v));
        let mut table: Option<&Table> = self.overflow.get();
        let tables = std::iter::from_fn(move || {
            let t = table?;
            table = t.next.get();
            Some(t)
        })
        .flat_map(|t| t.keys.iter().zip(t.values.iter().map(|v| &v.0)));
        inline.chain(tables).filter_map(|(k, v)| {
            let k = k.load(std::sync::atomic::Ordering::Acquire);
            (k != EMPTY).then_some((k, v))
        })
    }
}

#[cfg(test)]
thread_local! {
    /// Table slots this thread's lookups probed.
    static PROBED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// True when `key` holds `method`, claiming it first if it was empty.
fn claim(key: &AtomicU32, method: u32) -> bool {
    let current = key.load(std::sync::atomic::Ordering::SeqCst);
    if current == method {
        return true;
    }
    current == EMPTY
        && match key.compare_exchange(
            EMPTY,
            method,
            std::sync::atomic::Ordering::SeqCst,
            std::sync::atomic::Ordering::SeqCst,
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
    /// Set by an update the invoker is not part of, for `boundedhash` (see its
    /// `after_update`), before it seals the counters the invoker has. Counters a pick still
    /// running on the replaced set creates after that are sealed by the pick itself, which
    /// reads this after finding them.
    ///
    /// Why every load and claim of a method's counters is `SeqCst`: the update stores this,
    /// fences, then looks the counters up; the pick finds (or claims) them, then loads this.
    /// With both sides sequentially consistent, the pick that reads `false` has its counters
    /// found by the update, and the one whose counters the update missed reads `true`. (On
    /// x86-64 and AArch64 these are the same loads and exchanges as `Acquire`/`AcqRel`.)
    pub left_set: AtomicBool,
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

    /// Methods past a full table are found in O(log m) probes, not after a search of every
    /// full table before theirs.
    #[test]
    fn many_methods_are_found_in_few_probes() {
        let m = MethodStats::default();
        let count = 20_000u32;
        for k in 0..count {
            m.get_or_insert(k).begin();
        }
        let probes = |f: &dyn Fn()| {
            PROBED.with(|p| p.set(0));
            f();
            PROBED.with(|p| p.get())
        };
        // Tables of 8, 32, ... 32768: at most 7 of them, a window each.
        let bound = 7 * 16;
        for k in [count - 1, count / 2, 2] {
            assert!(probes(&|| assert!(m.get(k).is_some())) <= bound, "get({k})");
            let begun = probes(&|| {
                m.get_or_insert(k).begin();
            });
            assert!(begun <= bound, "get_or_insert({k})");
            assert_eq!(m.get(k).unwrap().active(), 2);
        }
        assert!(probes(&|| assert!(m.get(count).is_none())) <= bound);
        assert_eq!(m.iter().count(), count as usize);
    }

    /// An invoker's methods need not be consecutive ids (it serves some of a balancer's
    /// methods): ids that share their low bits still fill the tables, rather than taking one
    /// probe window in each, a new table fourfold larger per 16 methods.
    #[test]
    fn strided_methods_fill_their_tables() {
        for stride in [1u32, 3, 64, 1024, 4096] {
            let m = MethodStats::default();
            let count = 200u32;
            for k in 0..count {
                m.get_or_insert(k * stride).begin();
            }
            for k in 0..count {
                assert_eq!(m.get(k * stride).unwrap().active(), 1);
            }
            let slots = m.table_slots();
            // Tables of 8, 32, 128 and 512 hold 198 methods at a quarter full.
            assert!(
                slots <= 680,
                "stride {stride}: {slots} slots for {count} methods"
            );
        }
    }

    /// Threads inserting the same methods in different orders while tables are made under
    /// them get one slot per method, and a method one thread has inserted is found by every
    /// later lookup of another, whichever table it went to (a reader follows each writer's
    /// published progress and looks up everything it has inserted).
    #[test]
    fn concurrent_inserts_across_tables_agree_and_are_found() {
        use std::sync::atomic::{
            AtomicU32,
            Ordering::{Acquire, Release},
        };
        const COUNT: u32 = 3_000;
        for round in 0..4u32 {
            let m = Arc::new(MethodStats::default());
            let done: Arc<[AtomicU32; 3]> = Arc::new(Default::default());
            let order = move |t: u32, i: u32| match t {
                0 => i,
                1 => COUNT - 1 - i,
                _ => (i * 7 + round * 101) % COUNT, // 7 and 3,000 are coprime
            };
            let writers: Vec<_> = (0..3u32)
                .map(|t| {
                    let (m, done) = (m.clone(), done.clone());
                    std::thread::spawn(move || {
                        for i in 0..COUNT {
                            m.get_or_insert(order(t, i) * 64).begin();
                            done[t as usize].store(i + 1, Release);
                        }
                    })
                })
                .collect();
            // Readers: what a writer has published as inserted is found.
            let mut checked = [0u32; 3];
            while checked.iter().any(|&c| c < COUNT) {
                for t in 0..3u32 {
                    let upto = done[t as usize].load(Acquire);
                    for i in checked[t as usize]..upto {
                        let k = order(t, i) * 64;
                        assert!(m.get(k).is_some(), "round {round}: {k} not found");
                    }
                    checked[t as usize] = upto;
                }
            }
            for w in writers {
                w.join().unwrap();
            }
            for k in 0..COUNT {
                assert_eq!(m.get(k * 64).unwrap().active(), 3, "round {round}");
            }
            assert_eq!(m.iter().count(), COUNT as usize);
        }
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
