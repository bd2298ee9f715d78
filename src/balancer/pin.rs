//! The thread-local snapshot cache: pinning the current snapshot for one call (from this thread's
//! cache while it is current), forgetting it on update, and emptying cached sets on drop.

use super::{Inner, Snapshot};
use crate::rng::fresh_seed;
use crate::stats::NO_COUNTER;
use std::cell::{Cell, UnsafeCell};
use std::marker::PhantomData;
use std::sync::atomic::{
    AtomicU64,
    Ordering::{Acquire, Relaxed},
};
use std::sync::{Arc, Weak};

impl Inner {
    /// Pins the current snapshot for one call. The thread's cached one is used while its
    /// generation is current; otherwise (first call, after an update, nested call, or during
    /// thread teardown) `pin_slow` refreshes the cache or loads from the arc-swap.
    #[inline]
    pub(super) fn pin(&self) -> Pinned<'_> {
        let generation = self.generation.load(Acquire);
        // One thread-local lookup per call (in a shared library each is a function call).
        if let Ok(cache) = CACHE.try_with(|cell| cell.get()) {
            // SAFETY: `cache` is this thread's own cache, alive until the thread exits (not
            // during this call); `in_call` keeps a nested call (none exists today) off it.
            unsafe {
                if !(*cache).in_call {
                    let slot = &(*cache).slots[self.uid as usize % CACHED];
                    if let Some(snap) = &slot.snapshot {
                        // The generation alone says it is this balancer's current one.
                        if snap.generation == generation {
                            (*cache).in_call = true;
                            return Pinned {
                                snapshot: Arc::as_ptr(snap),
                                counter: (*cache).counter,
                                cache,
                                _loaded: None,
                                _inner: PhantomData,
                            };
                        }
                    }
                }
            }
        }
        self.pin_slow()
    }

    #[cold]
    #[inline(never)]
    fn pin_slow(&self) -> Pinned<'_> {
        let loaded = |inner: &Inner| {
            let guard = inner.snapshot.load();
            Pinned {
                snapshot: Arc::as_ptr(&guard),
                counter: NO_COUNTER,
                cache: std::ptr::null_mut(),
                _loaded: Some(guard),
                _inner: PhantomData,
            }
        };
        let Ok(cache) = CACHE.try_with(|cell| cell.get()) else {
            return loaded(self);
        };
        // SAFETY: as in `pin`; the slot borrow ends before the replaced snapshot is dropped.
        let (snapshot, replaced) = unsafe {
            if (*cache).in_call {
                return loaded(self);
            }
            if (*cache).counter == 0 {
                // This thread's first call.
                (*cache).counter = next_counter();
                (*cache).rng.set(fresh_seed());
            }
            let slot = &mut (*cache).slots[self.uid as usize % CACHED];
            slot.uid = self.uid;
            let replaced = slot.snapshot.replace(self.snapshot.load_full());
            let snapshot = slot.snapshot.as_ref().map_or(std::ptr::null(), Arc::as_ptr);
            (*cache).in_call = true;
            (snapshot, replaced)
        };
        drop(replaced);
        Pinned {
            snapshot,
            // SAFETY: `cache` is this thread's cache cell, live for the thread; no borrow of it
            // is held here.
            counter: unsafe { (*cache).counter },
            cache,
            _loaded: None,
            _inner: PhantomData,
        }
    }
}

/// This thread's cached snapshot of a balancer while it is current, for the common calls: no
/// `in_call` flag to set and clear and nothing to drop. Sound because those calls make no call
/// that could come back into a balancer on this thread (and so replace the slot) while they
/// hold it.
pub(super) struct CachedPin<'a> {
    pub(super) snapshot: &'a Snapshot,
    /// The thread's cache, for its counter id and random state: read from it where the call
    /// uses them. Carried as two fields (the id loaded at the pin, the state's address) they
    /// were two more values to keep across the call: `random`'s select+report took 214
    /// instructions in process instead of 201 (bench/HISTORY.md part 24).
    cache: &'a SnapshotCache,
    /// See `CachedSnapshot::hint`.
    pub(super) hint: &'a Cell<u32>,
}

impl<'a> CachedPin<'a> {
    /// This thread's counter id (see `SnapshotCache::counter`).
    #[inline(always)]
    pub(super) fn counter(&self) -> u32 {
        self.cache.counter
    }

    /// This thread's random state.
    #[inline(always)]
    pub(super) fn rng(&self) -> &'a Cell<u64> {
        &self.cache.rng
    }
}

impl Inner {
    /// The thread's cached snapshot when it is current and no call on this thread is under way;
    /// otherwise None (the caller then takes the general path, which pins with `pin`).
    #[inline]
    pub(super) fn pin_cached(&self) -> Option<CachedPin<'_>> {
        let generation = self.generation.load(Acquire);
        let cache = CACHE.try_with(|cell| cell.get()).ok()?;
        // SAFETY: this thread's own cache, alive until the thread exits (not during this call).
        // With `in_call` false no outer call reads a slot, and the holder of the pin makes no
        // call that could replace the slot (see `CachedPin`).
        unsafe {
            if (*cache).in_call {
                return None;
            }
            let slot = &(*cache).slots[self.uid as usize % CACHED];
            let snapshot = slot.snapshot.as_deref()?;
            // Generations are unique among balancers: no compare of the slot's uid.
            if snapshot.generation != generation {
                return None;
            }
            Some(CachedPin {
                snapshot,
                cache: &*cache,
                hint: &slot.hint,
            })
        }
    }
}

/// A snapshot held for the length of one call: from this thread's cache (which keeps its Arc
/// until this thread's next call on the balancer; `in_call` is set until the pin drops) or
/// loaded from the arc-swap.
pub(super) struct Pinned<'a> {
    snapshot: *const Snapshot,
    /// This thread's counter id (`NO_COUNTER` without a cache).
    pub(super) counter: u32,
    /// This thread's cache when the snapshot is its slot's; its `in_call` is cleared on drop.
    cache: *mut SnapshotCache,
    _loaded: Option<arc_swap::Guard<Arc<Snapshot>>>,
    _inner: PhantomData<&'a Inner>,
}

impl Pinned<'_> {
    /// This thread's random state (without a thread-local lookup of its own), if it has one.
    #[inline]
    pub(super) fn rng_state(&self) -> Option<&Cell<u64>> {
        // SAFETY: this thread's own cache, alive while `self` is; nothing else on this thread
        // takes a reference to its `rng` during the call.
        (!self.cache.is_null()).then(|| unsafe { &(*self.cache).rng })
    }

    #[inline]
    pub(super) fn get(&self) -> &Snapshot {
        // SAFETY: the cache slot or `loaded` keeps the snapshot alive while `self` lives (no
        // call can replace the slot while `in_call` is set).
        unsafe { &*self.snapshot }
    }
}

impl Drop for Pinned<'_> {
    #[inline]
    fn drop(&mut self) {
        if !self.cache.is_null() {
            // SAFETY: this thread's own cache (a pin never leaves its thread: it is !Send).
            unsafe { (*self.cache).in_call = false };
        }
    }
}

impl Inner {
    /// Drops this thread's cached snapshot of this balancer, if it holds one. Called on update
    /// (so that the updating thread does not keep the replaced set alive until its next call,
    /// which may never come: an update to an empty set is how bindings release a closed
    /// balancer's state) and on drop. Other threads' copies go at their next call on it, or are
    /// emptied by the drop.
    pub(super) fn forget_cached_snapshot(&self) {
        let _ = CACHE.try_with(|cell| {
            // SAFETY: this thread's own cache; neither caller runs inside a call on it.
            let cache = unsafe { &mut *cell.get() };
            if cache.in_call {
                return None;
            }
            let slot = &mut cache.slots[self.uid as usize % CACHED];
            (slot.uid == self.uid)
                .then(|| slot.snapshot.take())
                .flatten()
        });
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Free this thread's cached snapshot now rather than at its next reuse of the slot.
        self.forget_cached_snapshot();
        // Other threads keep the sets they cached until their slot goes to another balancer
        // or they exit, which may be never: what those sets hold (invokers, their counters,
        // rings, tables) goes now, and each thread's slot keeps an empty snapshot.
        let current = self.snapshot.load_full();
        let replaced = std::mem::take(self.update_lock.get_mut());
        for snapshot in replaced
            .iter()
            .filter_map(Weak::upgrade)
            .chain(Some(current))
        {
            // SAFETY: the balancer is being dropped, so no call on it runs or will run, and a
            // thread's cache reads a snapshot's body only after finding its generation (a field
            // outside the body) to be the current one of the balancer called, which a dropped
            // balancer's snapshots never are: generations are unique in the process. Holding
            // the snapshot here, no other thread drops it meanwhile.
            unsafe { snapshot.empty_out() };
        }
    }
}

/// Makes a child of `fork` draw apart from its parent and its siblings: the forking thread
/// is the child's only thread, and its random state is a copy of the parent's; without a new
/// seed every child of a pre-forking server (gunicorn, celery) would pick the same invokers in
/// the same order as the others.
#[cfg(unix)]
pub(crate) fn reseed_after_fork() {
    crate::rng::reseed_uncached();
    let _ = CACHE.try_with(|cell| {
        // SAFETY: this thread's own cache. A fork from inside a call (a signal handler) may
        // run this while that call holds a reference to `rng`: a `Cell`, which that allows.
        let cache = unsafe { &*cell.get() };
        if cache.counter != 0 {
            cache.rng.set(fresh_seed());
        }
    });
}

/// Counter ids given out so far (see `stats::NO_COUNTER`).
static COUNTERS_GIVEN: AtomicU64 = AtomicU64::new(0);

/// A new thread's counter id, in `1..NO_COUNTER`: unique among live threads unless the process
/// has started about four billion threads, and in turn, so that threads spread over the cells.
fn next_counter() -> u32 {
    (COUNTERS_GIVEN.fetch_add(1, Relaxed) % u64::from(NO_COUNTER - 1)) as u32 + 1
}

/// Snapshots cached per thread, direct-mapped by balancer uid (given out in turn, so the last 64
/// balancers created never share a slot). A program calling more balancers than this from one
/// thread takes the slow pin (a reference count and an arc-swap load) on every call that finds
/// another balancer in the slot: with 8 slots, 16 balancers used in turn made `random`'s
/// select+report 1.8× slower than with 64, and 64 balancers 1.4×. A slot costs 24 B per thread
/// and keeps at most one snapshot.
const CACHED: usize = 64;

struct CachedSnapshot {
    uid: u64,
    snapshot: Option<Arc<Snapshot>>,
    /// The position of this thread's last pick on a short path, a hint for its report: a
    /// report on the selecting thread then finds its invoker without the id index (at
    /// n = 1000, a cache miss). Checked against the id before use, so a stale hint only costs
    /// the lookup it would have made anyway.
    hint: Cell<u32>,
}

struct SnapshotCache {
    /// Set while this thread runs a call on a cached snapshot: a nested call (none today) must
    /// not replace the slot that the outer one reads.
    in_call: bool,
    /// This thread's counter id (0 = not assigned yet): it owns the counts of the (invoker,
    /// method)s it counted on first, and picks its cell of spread counters.
    counter: u32,
    /// This thread's random state (unseeded balancers draw from it).
    rng: Cell<u64>,
    slots: [CachedSnapshot; CACHED],
}

thread_local! {
    /// Each thread keeps the snapshot it last used of up to `CACHED` balancers, so that a call
    /// costs a generation compare instead of arc-swap's atomic read-modify-writes. A cached
    /// snapshot outlives an update only until this thread's next call on that balancer (or a
    /// call on another balancer mapped to the same slot, or the balancer's drop, which empties
    /// it): ids that left are never served from it, and their state is freed then.
    static CACHE: UnsafeCell<SnapshotCache> = const {
        UnsafeCell::new(SnapshotCache {
            in_call: false,
            counter: 0,
            rng: Cell::new(0),
            slots: [const {
                CachedSnapshot {
                    uid: 0,
                    snapshot: None,
                    hint: Cell::new(u32::MAX),
                }
            }; CACHED],
        })
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::balancer::tests::four_invokers;
    use crate::balancer::Balancer;
    use crate::invoker::{Invoker, Outcome};

    /// Two balancers whose snapshots a thread caches in one slot, called in turn with as many
    /// updates each: each call is served from its own balancer's set. The pin tells them apart
    /// by generation alone, so this fails if two balancers' snapshots could share one.
    #[test]
    fn balancers_sharing_a_cache_slot_never_serve_each_others_set() {
        // Balancers until two map to one slot (other tests create balancers meanwhile).
        let mut made: Vec<Balancer> = Vec::new();
        let (first, second) = loop {
            let b = Balancer::new("loadbalance=random").unwrap();
            let slot = b.inner.uid as usize % CACHED;
            if let Some(i) = made
                .iter()
                .position(|m| m.inner.uid as usize % CACHED == slot)
            {
                break (made.swap_remove(i), b);
            }
            made.push(b);
        };
        for (k, b) in [&first, &second].into_iter().enumerate() {
            let set: Vec<Invoker> = (0..3)
                .map(|j| {
                    let id = 100 * (k as u64 + 1) + j;
                    Invoker::new(id, format!("10.0.{k}.{j}:20880"))
                })
                .collect();
            b.update(&set).unwrap();
        }
        for _ in 0..200 {
            for (k, b) in [&first, &second].into_iter().enumerate() {
                let owner = 100 * (k as u64 + 1);
                // The short path (the cached pin) and the general one (a candidate subset).
                let id = b.select(0, b"", 0).unwrap();
                assert_eq!(
                    id / 100 * 100,
                    owner,
                    "a pick from the other balancer's set"
                );
                b.report(0, id, 10, Outcome::Success, 0).unwrap();
                let id = b.select_among(0, b"", &[owner + 1, owner + 2], &[], 0);
                let id = id.unwrap();
                assert!(
                    id == owner + 1 || id == owner + 2,
                    "picked {id} for {owner}"
                );
                b.report(0, id, 10, Outcome::Success, 0).unwrap();
            }
        }
    }

    #[test]
    fn an_update_frees_the_replaced_set_cached_by_the_updating_thread() {
        let b = Balancer::new("loadbalance=leastactive").unwrap();
        b.update(&[
            Invoker::new(1, "10.0.0.1:20880"),
            Invoker::new(2, "10.0.0.2:20880"),
        ])
        .unwrap();
        // A select caches the snapshot on this thread.
        let id = b.select(0, b"", 0).unwrap();
        b.report(0, id, 10, Outcome::Success, 0).unwrap();
        let state = Arc::downgrade(&b.inner.snapshot.load().members[0].state);
        // An empty set is how the bindings' close() releases a balancer's state: no further call
        // on this thread would ever replace the cached copy.
        b.update(&[]).unwrap();
        assert!(
            state.upgrade().is_none(),
            "the replaced set is still alive after the update"
        );
    }

    /// Dropping a balancer frees the sets that other threads cached, the current one and older
    /// ones, though those threads make no further call: each keeps only an empty husk of its
    /// snapshot (bounded below) until its slot goes to another balancer or it exits.
    #[test]
    fn dropping_a_balancer_frees_the_sets_other_threads_cached() {
        use std::sync::mpsc;
        let b = Balancer::new("loadbalance=consistenthash").unwrap();
        let set = four_invokers();
        b.update(&set).unwrap();
        let states: Vec<_> = b.inner.snapshot.load().members[..]
            .iter()
            .map(|m| Arc::downgrade(&m.state))
            .collect();
        // A thread that selects once, caching the set, then waits without another call until
        // told to exit.
        let caller = |b: &Balancer| {
            let b = b.clone();
            let (cached, cached_rx) = mpsc::channel();
            let (exit, exit_rx) = mpsc::channel::<()>();
            let thread = std::thread::spawn(move || {
                b.select(0, b"key", 0).unwrap();
                drop(b);
                cached.send(()).unwrap();
                let _ = exit_rx.recv();
            });
            cached_rx.recv().unwrap();
            (thread, exit)
        };
        let first = caller(&b);
        let older = Arc::downgrade(&b.inner.snapshot.load_full());
        // Invoker 4's state is now only in the set the first thread cached.
        b.update(&set[..3]).unwrap();
        let second = caller(&b);
        let current = Arc::downgrade(&b.inner.snapshot.load_full());
        assert!(states.iter().all(|s| s.upgrade().is_some()));
        drop(b);
        let kept: Vec<usize> = (0..states.len())
            .filter(|&i| states[i].upgrade().is_some())
            .collect();
        assert!(
            kept.is_empty(),
            "invokers' state kept after the drop: {kept:?}"
        );
        for husk in [&older, &current] {
            let husk = husk.upgrade().expect("the threads' slots still hold it");
            assert!(husk.members.is_empty() && husk.all.is_empty());
            assert!(husk.prepared.is_none() && husk.local.is_none());
        }
        assert!(
            std::mem::size_of::<Snapshot>() + 2 * 8 + 32 <= 272,
            "the husk left per thread and dropped balancer is larger than documented"
        );
        for (thread, exit) in [first, second] {
            exit.send(()).unwrap();
            thread.join().unwrap();
        }
        assert!(older.upgrade().is_none() && current.upgrade().is_none());
    }
}
