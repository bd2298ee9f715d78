//! The call counters of one (invoker, method), and the cells they spread into once a second
//! thread counts there: one per group of threads, each with a line its first thread owns.

use crate::invoker::Outcome;
use std::sync::atomic::{
    AtomicPtr, AtomicU32, AtomicU64, AtomicUsize,
    Ordering::{AcqRel, Acquire, Relaxed, Release},
};

/// The call counters.
#[derive(Default)]
#[repr(C)]
pub(super) struct Counts {
    pub(super) selected: AtomicU64,
    pub(super) succeeded: AtomicU64,
    /// Failures and timeouts.
    pub(super) failed: AtomicU64,
    pub(super) cancelled: AtomicU64,
    pub(super) timeouts: AtomicU64,
    pub(super) succeeded_elapsed_us: AtomicU64,
}

/// Adds `v` to a counter and returns what it held. `OWNED`: the caller is the only thread that
/// ever writes this counter, so a load and a store do, without the locked read-modify-write
/// (about 5 ns on these VMs, most of a select+report when three of them are on its path).
/// Release (free on x86): a reader that sees a call's end sees its select, else it would read
/// fewer than no calls in flight and compensate for a report that had its select.
#[inline(always)]
fn add<const OWNED: bool>(counter: &AtomicU64, v: u64) -> u64 {
    if OWNED {
        let before = counter.load(Relaxed);
        counter.store(before.wrapping_add(v), Release);
        before
    } else {
        counter.fetch_add(v, Release)
    }
}

impl Counts {
    #[inline]
    pub(super) fn begin<const OWNED: bool>(&self) -> u64 {
        add::<OWNED>(&self.selected, 1)
    }

    // Always inline: libpolylb.so's report called it (11 instructions for its 4 or 5).
    #[inline(always)]
    pub(super) fn end<const OWNED: bool>(&self, outcome: Outcome, elapsed_us: u64) {
        match outcome {
            Outcome::Success => {
                add::<OWNED>(&self.succeeded, 1);
                let before = add::<OWNED>(&self.succeeded_elapsed_us, elapsed_us);
                if before.checked_add(elapsed_us).is_none() {
                    // Saturate rather than wrap: a wrapped sum would read as a small mean.
                    self.succeeded_elapsed_us.store(u64::MAX, Relaxed);
                }
            }
            Outcome::Failure => {
                add::<OWNED>(&self.failed, 1);
            }
            Outcome::Timeout => {
                add::<OWNED>(&self.failed, 1);
                add::<OWNED>(&self.timeouts, 1);
            }
            Outcome::Cancelled => {
                add::<OWNED>(&self.cancelled, 1);
            }
        }
    }
}

// Spread counters, as `java.util.concurrent.atomic.LongAdder` spreads a sum: an (invoker,
// method)'s counters get one cell per group of threads the first time a second thread counts
// there, after which each thread adds to its own group's cell. For the statistics (outcomes,
// latency) of every strategy, and for the selects too of the strategies whose picks never read
// calls in flight (`random`, `roundrobin`, `consistenthash`): these counters are written on
// every call and read only by `stats`, and one line that every thread's select and report
// write in turn keeps two threads from being faster than one. Until then the only thread
// counting owns the counts; in a cell the first thread of the group owns one line and the
// others share a second. An owner adds without locked instructions.

/// One group of threads' counts: those of its owner (the first of them to count here), which
/// it adds to without locked instructions, and on a line of their own those of the others.
#[derive(Default)]
#[repr(C, align(64))]
pub(super) struct Cell {
    pub(super) owned: Counts,
    /// The owner's counter id; 0 = none yet.
    pub(super) owner: AtomicU32,
    pub(super) others: Line,
}

#[derive(Default)]
#[repr(align(64))]
pub(super) struct Line(pub(super) Counts);

impl Cell {
    /// Where `counter` counts in this cell, and whether it owns those counts.
    #[inline(always)]
    pub(super) fn counts_of(&self, counter: u32) -> (&Counts, bool) {
        let owner = self.owner.load(Relaxed);
        if owner == counter
            || (owner == 0
                && counter != NO_COUNTER
                && self
                    .owner
                    .compare_exchange(0, counter, Relaxed, Relaxed)
                    .is_ok())
        {
            return (&self.owned, true);
        }
        (&self.others.0, false)
    }

    pub(super) fn sum(&self, of: impl Fn(&Counts) -> &AtomicU64) -> u64 {
        of(&self.owned)
            .load(Acquire)
            .wrapping_add(of(&self.others.0).load(Acquire))
    }
}

/// The cells of a spread counter set, created once: one pointer (a `OnceLock<Box<[Cell]>>`
/// took 24 B), as every set has `cell_count()` cells.
#[derive(Default)]
pub(super) struct Cells(AtomicPtr<Cell>);

impl Cells {
    #[inline]
    pub(super) fn get(&self) -> Option<&[Cell]> {
        let cells = self.0.load(Acquire);
        // SAFETY: a non-null pointer is a leaked `Box<[Cell]>` of `cell_count()` cells, freed
        // only by `drop`.
        (!cells.is_null()).then(|| unsafe { std::slice::from_raw_parts(cells, cell_count()) })
    }

    pub(super) fn get_or_init(&self) -> &[Cell] {
        if let Some(cells) = self.get() {
            return cells;
        }
        let fresh: Box<[Cell]> = (0..cell_count()).map(|_| Cell::default()).collect();
        let fresh = Box::into_raw(fresh) as *mut Cell;
        let lost = self
            .0
            .compare_exchange(std::ptr::null_mut(), fresh, AcqRel, Acquire)
            .is_err();
        if lost {
            // Another thread's cells won.
            // SAFETY: `fresh` came from `Box::into_raw` above and was never shared.
            unsafe { Cells::free(fresh) };
        }
        self.get().expect("set above")
    }

    /// Frees cells made by `get_or_init`.
    ///
    /// # Safety
    /// `cells` is a leaked `Box<[Cell]>` of `cell_count()` cells that nothing else uses.
    unsafe fn free(cells: *mut Cell) {
        drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(
            cells,
            cell_count(),
        )));
    }
}

impl Drop for Cells {
    fn drop(&mut self) {
        let cells = *self.0.get_mut();
        if !cells.is_null() {
            // SAFETY: as in `get`; nothing else holds the cells once their owner drops.
            unsafe { Cells::free(cells) };
        }
    }
}

/// A set of cells has a power of two of them, at most this many; a thread counts in the one of
/// its group (`group::of`) modulo that count.
const CELLS: usize = 8;

pub(super) const SPREAD: u32 = u32::MAX;

/// The counter id of a call made without one (a nested call, or one during thread teardown):
/// it never owns counts. A thread's own id is unique among the process's threads (in
/// `1..NO_COUNTER`, given out in turn), so that the owner of an (invoker, method)'s counts is one
/// thread, never two that share a number.
pub const NO_COUNTER: u32 = u32::MAX - 1;

/// Cells per spread counter set: the machine's parallelism, rounded up to a power of two,
/// between 2 and [`CELLS`] (128 B each; more cells than cores mostly cost memory).
pub(super) fn cell_count() -> usize {
    // 0 until known. Not a `OnceLock`: a `fork` while another thread asked the system would
    // leave the child waiting for that thread for ever; racing threads here get one answer.
    static COUNT: AtomicUsize = AtomicUsize::new(0);
    match COUNT.load(Relaxed) {
        0 => {
            let count = std::thread::available_parallelism()
                .map_or(CELLS, |n| n.get())
                .next_power_of_two()
                .clamp(2, CELLS);
            // The first answer stays: every cell set must have the same length.
            match COUNT.compare_exchange(0, count, Relaxed, Relaxed) {
                Ok(_) => count,
                Err(first) => first,
            }
        }
        count => count,
    }
}
