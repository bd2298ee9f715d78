//! Live per-(invoker, method) counters, created on first use and kept while the invoker stays
//! in the set. Reads and writes are lock-free atomics, except the small latency model that
//! adaptive-style strategies update together under a per-entry lock.

use crate::invoker::Outcome;
use std::sync::atomic::{
    AtomicBool, AtomicI64, AtomicPtr, AtomicU32, AtomicU64,
    Ordering::{AcqRel, Acquire, Relaxed, Release},
};
use std::sync::OnceLock;

/// Counters of one invoker for one method.
///
/// A select adds to one counter and a successful report to two: calls in flight are not a
/// counter of their own but `selected - ended`, so that select and report never both write one
/// hot word. For strategies that never read calls in flight, the first thread to count here
/// owns `counts` and adds with a plain load and store (a locked add costs about 5 ns on these
/// VMs: three of them were most of a select+report); then the first thread of each group owns
/// its group's cell, and the others add atomically beside it (see `begin_spread`). Strategies
/// that read calls in flight count `selected` and `ended` on one shared line, atomically, and
/// the outcome and latency as those statistics. Readers load the ended counters before
/// `selected`, which can only overestimate the in-flight count by calls selected meanwhile,
/// never report it below zero.
// `repr(C)`: what every call touches first, in the first line. The struct is two whole lines
// but not itself aligned to one: where it lives is (`InvokerState` and `Slot`), so that the
// invoker's own fields can fill the rest of its last line.
#[derive(Default)]
#[repr(C)]
pub struct CallStats {
    /// What was counted while a single thread counted here (all of it, for strategies that read
    /// calls in flight).
    counts: Counts,
    /// For strategies that read calls in flight: the reports that ended a call counted in
    /// `counts.selected` (those were `selected - ended`), written by every thread atomically.
    /// Their other counts are statistics, counted as `random`'s are (below).
    ///
    /// For the other strategies, which count no `ended`: the reports that found no call of theirs
    /// in flight (a double report, or one for a call selected before the invoker left and came
    /// back), counted as ended by their outcome and subtracted here. One word for both, as a
    /// balancer's counters are only ever of one of the two kinds.
    ended: AtomicU64,
    /// The counter id (see [`NO_COUNTER`]) of the only thread that has counted here, which
    /// alone writes `counts`; 0 = none yet, and `SPREAD` once a second one came (the cells
    /// exist then).
    home: AtomicU32,
    /// The method these counters belong to, when they sit inline in [`MethodStats`]; `EMPTY`
    /// until claimed. Here rather than in an array of keys so that finding a method's counters
    /// and counting touch one cache line, not two. Unused in overflow tables, whose probes
    /// read a dense key array instead.
    inline_key: AtomicU32,
    /// adaptive's provider metrics, peakewma's estimate or shortestresponse's window (see
    /// [`StrategyWords`]).
    words: StrategyWords,
    /// The counts of each group of threads once a second thread counted here (spread counters,
    /// below); `counts` keeps what was counted before.
    cells: Cells,
}

// Two lines: the counters every call writes, then the strategy's words and the cells.
const _: () = assert!(std::mem::size_of::<CallStats>() == 128);

const _: () = assert!(std::mem::offset_of!(CallStats, inline_key) + 4 <= 64);

/// The call counters.
#[derive(Default)]
#[repr(C)]
struct Counts {
    selected: AtomicU64,
    succeeded: AtomicU64,
    /// Failures and timeouts.
    failed: AtomicU64,
    cancelled: AtomicU64,
    timeouts: AtomicU64,
    succeeded_elapsed_us: AtomicU64,
}

/// Adds `v` to a counter and returns what it held. `OWNED`: the caller is the only thread that
/// ever writes this counter, so a load and a store do, without the locked read-modify-write
/// (about 5 ns on these VMs, most of a select+report when three of them are on its path).
#[inline(always)]
fn add<const OWNED: bool>(counter: &AtomicU64, v: u64) -> u64 {
    if OWNED {
        let before = counter.load(Relaxed);
        counter.store(before.wrapping_add(v), Relaxed);
        before
    } else {
        counter.fetch_add(v, Relaxed)
    }
}

impl Counts {
    #[inline]
    fn begin<const OWNED: bool>(&self) -> u64 {
        add::<OWNED>(&self.selected, 1)
    }

    #[inline]
    fn end<const OWNED: bool>(&self, outcome: Outcome, elapsed_us: u64) {
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
struct Cell {
    owned: Counts,
    /// The owner's counter id; 0 = none yet.
    owner: AtomicU32,
    others: Line,
}

#[derive(Default)]
#[repr(align(64))]
struct Line(Counts);

impl Cell {
    /// Where `counter` counts in this cell, and whether it owns those counts.
    #[inline(always)]
    fn counts_of(&self, counter: u32) -> (&Counts, bool) {
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

    fn sum(&self, of: impl Fn(&Counts) -> &AtomicU64) -> u64 {
        of(&self.owned)
            .load(Acquire)
            .wrapping_add(of(&self.others.0).load(Acquire))
    }
}

/// The cells of a spread counter set, created once: one pointer (a `OnceLock<Box<[Cell]>>`
/// took 24 B), as every set has `cell_count()` cells.
#[derive(Default)]
struct Cells(AtomicPtr<Cell>);

impl Cells {
    #[inline]
    fn get(&self) -> Option<&[Cell]> {
        let cells = self.0.load(Acquire);
        // SAFETY: a non-null pointer is a leaked `Box<[Cell]>` of `cell_count()` cells, freed
        // only by `drop`.
        (!cells.is_null()).then(|| unsafe { std::slice::from_raw_parts(cells, cell_count()) })
    }

    fn get_or_init(&self) -> &[Cell] {
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

/// Thread cells are numbered below this; a set of cells has a power of two of them, at most
/// this many, and a thread uses its number modulo that count.
const CELLS: usize = 8;
const SPREAD: u32 = u32::MAX;

/// The counter id of a call made without one (a nested call, or one during thread teardown):
/// it never owns counts. A thread's own id is unique among the process's threads (in
/// `1..NO_COUNTER`, given out in turn), so that the owner of an (invoker, method)'s counts is one
/// thread, never two that share a number.
pub const NO_COUNTER: u32 = u32::MAX - 1;

/// Cells per spread counter set: the machine's parallelism, rounded up to a power of two,
/// between 2 and [`CELLS`] (128 B each; more cells than cores mostly cost memory).
fn cell_count() -> usize {
    static COUNT: OnceLock<usize> = OnceLock::new();
    *COUNT.get_or_init(|| {
        std::thread::available_parallelism()
            .map_or(CELLS, |n| n.get())
            .next_power_of_two()
            .clamp(2, CELLS)
    })
}

/// Words that one strategy keeps per (invoker, method). A balancer has one strategy, so
/// adaptive's metrics, peakewma's estimate and shortestresponse's window never live in the
/// same `CallStats` and share its space.
#[repr(C)]
union StrategyWords {
    adaptive: std::mem::ManuallyDrop<AdaptiveWords>,
    ewma: std::mem::ManuallyDrop<EwmaCell>,
    window: std::mem::ManuallyDrop<ResponseWindow>,
}

// Initialised through the widest view, which has no padding: every byte of every view starts
// initialised, and zero (`all_strategy_words_start_at_zero`).
const _: () = assert!(
    std::mem::size_of::<StrategyWords>() == std::mem::size_of::<AdaptiveWords>()
        && std::mem::size_of::<AdaptiveWords>() == 56
);

impl Default for StrategyWords {
    fn default() -> Self {
        StrategyWords {
            adaptive: Default::default(),
        }
    }
}

/// adaptive's per-(invoker, method) state: Dubbo's AdaptiveMetrics, behind a one-byte lock.
/// (A `parking_lot::Mutex<LatencyModel>` is the same lock, but its padding would leave the
/// union two words wider and this struct a line longer.)
#[repr(C)]
pub struct AdaptiveWords {
    lock: parking_lot::RawMutex,
    /// A provider has reported metrics for this invoker and method (until then its load is 0
    /// whatever the model says, so picks need not lock it).
    pub has_provider_metrics: AtomicBool,
    /// Explicit, so that no byte of the union is padding.
    _reserved: [u8; 6],
    /// When the invoker was last picked (ms; 0 = not yet), Dubbo's pickTime.
    pub pick_time_ms: AtomicI64,
    model: std::cell::UnsafeCell<LatencyModel>,
}

// SAFETY: `model` is only reached through `ModelGuard`, which holds `lock`.
unsafe impl Sync for AdaptiveWords {}

impl Default for AdaptiveWords {
    fn default() -> Self {
        AdaptiveWords {
            lock: <parking_lot::RawMutex as parking_lot::lock_api::RawMutex>::INIT,
            has_provider_metrics: AtomicBool::new(false),
            _reserved: [0; 6],
            pick_time_ms: AtomicI64::new(0),
            model: Default::default(),
        }
    }
}

impl AdaptiveWords {
    /// The model, locked until the guard drops.
    pub fn model(&self) -> ModelGuard<'_> {
        parking_lot::lock_api::RawMutex::lock(&self.lock);
        ModelGuard(self)
    }
}

/// adaptive's model, locked.
pub struct ModelGuard<'a>(&'a AdaptiveWords);

impl std::ops::Deref for ModelGuard<'_> {
    type Target = LatencyModel;
    fn deref(&self) -> &LatencyModel {
        // SAFETY: this guard holds the lock.
        unsafe { &*self.0.model.get() }
    }
}

impl std::ops::DerefMut for ModelGuard<'_> {
    fn deref_mut(&mut self) -> &mut LatencyModel {
        // SAFETY: this guard holds the lock, and `&mut self` makes this the only reference.
        unsafe { &mut *self.0.model.get() }
    }
}

impl Drop for ModelGuard<'_> {
    fn drop(&mut self) {
        // SAFETY: the lock was taken by `AdaptiveWords::model` for this guard.
        unsafe { parking_lot::lock_api::RawMutex::unlock(&self.0.lock) };
    }
}

/// shortestresponse's per-(invoker, method) window: what Dubbo's RpcStatus counts less the
/// offsets its window keeps, in one word (see `strategy::shortest_response`).
#[derive(Default)]
#[repr(C)]
pub struct ResponseWindow {
    /// The window's successes and the sum of their latencies, truncated to whole ms per call
    /// (kept here, not read from the spread statistics: those would be many lines to sum for
    /// each candidate of every pick).
    pub successes: AtomicU64,
}

/// peakewma's per-(invoker, method) state: plain atomics, so that a pick reads it without a
/// lock. Times are the caller's `now_us` timeline (Unix µs); 0 = never.
#[derive(Default)]
#[repr(C)]
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
    /// Successful reports (every 8th moves the method's typical estimate). Here rather than
    /// read from the spread statistics, whose sum is a line per group of threads; counted with
    /// a plain load and store, as a lost count under a race only shifts that cadence.
    pub successes: AtomicU64,
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
    /// adaptive's metrics (only an adaptive balancer calls this).
    #[inline]
    pub fn adaptive(&self) -> &AdaptiveWords {
        // SAFETY: every view of the union is valid for the zero bits it starts with (integer
        // atomics; a lock that is free at zero and plain numbers behind it), and a balancer's
        // one strategy only ever uses one view, so no view reads what another wrote.
        unsafe { &self.words.adaptive }
    }

    /// peakewma's estimate (only a peakewma balancer calls this).
    #[inline]
    pub fn ewma(&self) -> &EwmaCell {
        // SAFETY: as in `adaptive`.
        unsafe { &self.words.ewma }
    }

    /// shortestresponse's window (only a shortestresponse balancer calls this).
    #[inline]
    pub fn window(&self) -> &ResponseWindow {
        // SAFETY: as in `ewma`.
        unsafe { &self.words.window }
    }

    /// Counts a select, for a strategy that reads calls in flight: every thread adds to the
    /// shared `selected` (atomically), so that a read of the calls in flight is one cache line.
    /// (Owned counts with a cell for the other threads, as `begin_spread` has them, made one
    /// thread 35 % faster and two threads 11-33 % slower: reads then add up two lines.)
    /// Returns the selects counted before this one (for [`CallStats::was_idle`]).
    #[inline]
    pub fn begin(&self) -> u64 {
        self.counts.begin::<false>()
    }

    /// Takes these counters (of a strategy that reads calls in flight) out of use when their
    /// invoker leaves the set, and returns the calls in flight at that instant, as a strategy
    /// that keeps its own total of them must take out. Calls that pinned the replaced set
    /// before the update may still count here after it: each is told which side of the seal
    /// it fell on, so that the strategy counts it exactly once. A select counted after it
    /// sees `selected_before` at or above `SEALED_SELECTS` ([`CallStats::sealed`]); a report
    /// counted after it finds ends outnumbering selects by far, so `end` matches no call.
    /// A call in between (selected after the first add, ended before the second) has its end
    /// but not its select in the value returned, and its report counts but its select does
    /// not: the two cancel out. Call it once per counters.
    pub fn seal(&self) -> i64 {
        let selected = self.counts.selected.fetch_add(SEALED_SELECTS, AcqRel);
        let ended = self.ended.fetch_add(SEALED_ENDS, AcqRel);
        selected.wrapping_sub(ended) as i64
    }

    /// True when the select that `begin` answered `selected_before` was counted after
    /// [`CallStats::seal`]: the strategy's own total left it out.
    #[inline]
    pub fn sealed(selected_before: u64) -> bool {
        selected_before >= SEALED_SELECTS
    }

    /// Whether nothing was in flight when the select that `begin` answered `selected_before`
    /// counted itself. Calls that ended since count as ended then: racing selects each see
    /// the others' calls (`active() == 1` after the fact saw none idle when two raced).
    #[inline]
    pub fn was_idle(&self, selected_before: u64) -> bool {
        self.ended.load(Acquire) >= selected_before
    }

    /// Records the end of a call, for a strategy that reads calls in flight. True when a call
    /// was in flight (the report matched one): it alone leaves the shared line, atomically;
    /// the outcome and latency are statistics, counted where `end_spread` counts them (without
    /// locked instructions while one thread counts here). A report without a matching select
    /// never drives the in-flight count below zero.
    #[inline]
    pub fn end(&self, counter: u32, outcome: Outcome, elapsed_us: u64) -> bool {
        // A report without a call counts its outcome, not an end: it must not hide a later call.
        // The end is claimed, not just checked then added: two reports racing for the last call
        // in flight (a double report) would otherwise both end it, and hide the next call.
        let mut ended = self.ended.load(Acquire);
        let matched = loop {
            if self.counts.selected.load(Acquire).wrapping_sub(ended) as i64 <= 0 {
                break false;
            }
            match self
                .ended
                .compare_exchange_weak(ended, ended.wrapping_add(1), Relaxed, Acquire)
            {
                Ok(_) => break true,
                Err(now) => ended = now,
            }
        };
        match self.counts_of(counter) {
            (counts, true) => counts.end::<true>(outcome, elapsed_us),
            (counts, false) => counts.end::<false>(outcome, elapsed_us),
        }
        matched
    }

    /// `end` only when a call is in flight here (true then); otherwise counts nothing, so that
    /// the caller can end the call elsewhere.
    pub fn try_end(&self, counter: u32, outcome: Outcome, elapsed_us: u64) -> bool {
        let mut ended = self.ended.load(Acquire);
        loop {
            if self.counts.selected.load(Acquire).wrapping_sub(ended) as i64 <= 0 {
                return false;
            }
            match self
                .ended
                .compare_exchange_weak(ended, ended.wrapping_add(1), Relaxed, Acquire)
            {
                Ok(_) => break,
                Err(now) => ended = now,
            }
        }
        match self.counts_of(counter) {
            (counts, true) => counts.end::<true>(outcome, elapsed_us),
            (counts, false) => counts.end::<false>(outcome, elapsed_us),
        }
        true
    }

    /// `end` on the shared counts by their owner, for a strategy whose picks never read calls
    /// in flight while one thread counts here.
    #[inline]
    fn end_owned(&self, outcome: Outcome, elapsed_us: u64) -> bool {
        let matched = self.counted_in_flight() > 0;
        if !matched {
            // Unmatched before it is ended: a reader of spread counts (created by another
            // thread meanwhile) that saw it ended but not yet unmatched would find fewer than
            // no calls in flight and count it as unmatched itself, then this add would count
            // it again and leave a call "in flight" for good. The fence makes a reader that
            // sees the end see this add too, so that its compensating exchange fails.
            self.unmatched().fetch_add(1, Relaxed);
            std::sync::atomic::fence(Release);
        }
        self.counts.end::<true>(outcome, elapsed_us);
        matched
    }

    /// `begin` for a strategy whose picks never read calls in flight: once a second thread
    /// counts here, each adds to the cell of its group. `counter` is the calling thread's id.
    #[inline]
    pub fn begin_spread(&self, counter: u32) {
        match self.counts_of(counter) {
            (counts, true) => counts.begin::<true>(),
            (cell, false) => cell.begin::<false>(),
        };
    }

    /// `end` for a strategy whose picks never read calls in flight. While one thread counts
    /// here it is `end`; once the counts are spread it does not look for the call's select
    /// (that would read every thread's cell): a report without one is found when the counters
    /// are next read with nothing in flight (see [`CallStats::in_flight`]).
    #[inline]
    pub fn end_spread(&self, counter: u32, outcome: Outcome, elapsed_us: u64) {
        match self.counts_of(counter) {
            // The only thread counting here so far: its reports are matched, as `end`'s are.
            (counts, true) if std::ptr::eq(counts, &self.counts) => {
                self.end_owned(outcome, elapsed_us);
            }
            (counts, true) => counts.end::<true>(outcome, elapsed_us),
            (counts, false) => counts.end::<false>(outcome, elapsed_us),
        }
    }

    /// Where this thread counts, and whether it owns those counts (is their only writer): the
    /// shared counts while it is the only thread counting here (one load and compare), else its
    /// group's cell, created when a second thread comes.
    #[inline(always)]
    fn counts_of(&self, counter: u32) -> (&Counts, bool) {
        let home = self.home.load(Relaxed);
        if home == counter {
            return (&self.counts, true);
        }
        if home == SPREAD {
            // Marked only once the cells exist (`create_cells`).
            if let Some(cells) = self.cells.get() {
                return cells[counter as usize & (cells.len() - 1)].counts_of(counter);
            }
        }
        self.counts_of_slow(counter)
    }

    /// `counts_of` when this thread is not (yet) the one counting here: claims the counts for
    /// it if nobody counted yet, else spreads. Once spread, nobody writes `counts` again (the
    /// former owner may finish one last write: it is still their only writer).
    #[cold]
    #[inline(never)]
    fn counts_of_slow(&self, counter: u32) -> (&Counts, bool) {
        let home = self.home.load(Relaxed);
        if counter != NO_COUNTER
            && (home == counter
                || (home == 0
                    && self
                        .home
                        .compare_exchange(0, counter, Relaxed, Relaxed)
                        .is_ok()))
        {
            return (&self.counts, true);
        }
        let cells = self.spread();
        cells[counter as usize & (cells.len() - 1)].counts_of(counter)
    }

    /// The cells, created by the first thread that finds another one's counts here.
    #[inline]
    fn spread(&self) -> &[Cell] {
        match self.cells.get() {
            Some(cells) => cells,
            None => self.create_cells(),
        }
    }

    #[cold]
    #[inline(never)]
    fn create_cells(&self) -> &[Cell] {
        let cells = self.cells.get_or_init();
        self.home.store(SPREAD, Relaxed);
        cells
    }

    /// One counter summed over the shared counts and every cell.
    #[inline]
    fn total(&self, of: impl Fn(&Counts) -> &AtomicU64) -> u64 {
        let mut sum = of(&self.counts).load(Acquire);
        if let Some(cells) = self.cells.get() {
            for cell in cells.iter() {
                sum = sum.wrapping_add(cell.sum(&of));
            }
        }
        sum
    }

    pub fn selected(&self) -> u64 {
        self.total(|c| &c.selected)
    }

    /// [`CallStats::selected`] for a strategy that reads calls in flight: `begin` counts every
    /// select on the shared line, so the cells (one or two lines per group of threads) need
    /// not be summed.
    #[inline]
    pub fn selected_by_begin(&self) -> u64 {
        self.counts.selected.load(Acquire)
    }

    pub fn succeeded(&self) -> u64 {
        self.total(|c| &c.succeeded)
    }

    /// Failures and timeouts.
    pub fn failed(&self) -> u64 {
        self.total(|c| &c.failed)
    }

    pub fn timeouts(&self) -> u64 {
        self.total(|c| &c.timeouts)
    }

    /// Calls reported as never sent.
    pub fn cancelled(&self) -> u64 {
        self.total(|c| &c.cancelled)
    }

    /// For a strategy whose picks never read calls in flight: the reports counted without a
    /// matching select (kept in `ended`, which such a strategy does not count).
    #[inline]
    fn unmatched(&self) -> &AtomicU64 {
        &self.ended
    }

    /// Sum of successful calls' latencies (saturates at `u64::MAX`).
    pub fn succeeded_elapsed_us(&self) -> u64 {
        let base = self.counts.succeeded_elapsed_us.load(Relaxed);
        let Some(cells) = self.cells.get() else {
            return base;
        };
        cells.iter().fold(base, |sum, c| {
            sum.saturating_add(c.owned.succeeded_elapsed_us.load(Relaxed))
                .saturating_add(c.others.0.succeeded_elapsed_us.load(Relaxed))
        })
    }

    /// Calls in flight (selected, not yet reported) of a strategy whose picks never read them
    /// (`stats`): spread counts included.
    pub fn in_flight(&self) -> i64 {
        if self.cells.get().is_some() {
            return self.active_spread();
        }
        self.counted_in_flight()
    }

    /// Calls in flight, for a strategy that reads them (counted by `begin` and `end`): two
    /// loads of one line.
    #[inline]
    pub fn active(&self) -> i64 {
        // `ended` first (Acquire orders the later load of `selected` after it): a select
        // counted meanwhile can only raise the result, never push it below zero.
        let ended = self.ended.load(Acquire);
        (self.counts.selected.load(Acquire).wrapping_sub(ended) as i64).max(0)
    }

    /// Calls in flight as the shared counts hold them, for a strategy whose picks never read
    /// them: the calls counted before the spread (what `end_owned` matches reports against).
    #[inline]
    fn counted_in_flight(&self) -> i64 {
        // Ended counters first (Acquire orders the later load of `selected` after them).
        let c = &self.counts;
        let ended = c
            .succeeded
            .load(Acquire)
            .wrapping_add(c.failed.load(Acquire))
            .wrapping_add(c.cancelled.load(Acquire))
            .wrapping_sub(self.unmatched().load(Acquire));
        (c.selected.load(Acquire).wrapping_sub(ended) as i64).max(0)
    }

    /// `in_flight` over spread counters. Their reports did not look for a matching select, so a
    /// report without one shows here as fewer calls in flight than none: it is counted as
    /// unmatched then, and hides no later call. (Until then, a call in flight at the same time
    /// may go uncounted: these are statistics of a strategy that never reads them to pick.)
    #[cold]
    fn active_spread(&self) -> i64 {
        let unmatched = self.unmatched().load(Acquire);
        let ended = self
            .succeeded()
            .wrapping_add(self.failed())
            .wrapping_add(self.total(|c| &c.cancelled))
            .wrapping_sub(unmatched);
        let active = self.selected().wrapping_sub(ended) as i64;
        if active < 0 {
            // Another reader may have counted the same reports meanwhile: then this one's
            // exchange fails and it leaves them to it.
            let _ = self.unmatched().compare_exchange(
                unmatched,
                unmatched.wrapping_add(active.unsigned_abs()),
                AcqRel,
                Relaxed,
            );
        }
        active.max(0)
    }
}

/// What [`CallStats::seal`] adds to `selected`, and to `ended`: far beyond any real count (a
/// select a nanosecond would take 73 years to reach 2^61), and ends then exceed selects by
/// 2^61, so that no report after the seal matches a call.
const SEALED_SELECTS: u64 = 1 << 61;
const SEALED_ENDS: u64 = 1 << 62;

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

    #[test]
    fn counts_spread_when_a_second_thread_counts() {
        let s = CallStats::default();
        // One thread: the shared counts, each report matched against the calls in flight.
        s.begin_spread(3);
        s.end_spread(3, Outcome::Success, 10);
        assert_eq!(
            s.home.load(Relaxed),
            3,
            "the first thread owns the shared counts"
        );
        assert!(s.cells.get().is_none());
        // A second thread: cells, one per group of threads; the totals include both.
        s.begin_spread(5);
        assert!(s.cells.get().is_some());
        s.begin_spread(3);
        s.end_spread(5, Outcome::Timeout, 0);
        assert_eq!(
            (s.selected(), s.succeeded(), s.failed(), s.timeouts()),
            (3, 1, 1, 1)
        );
        assert_eq!(s.in_flight(), 1);
        s.end_spread(3, Outcome::Success, 30);
        assert_eq!((s.in_flight(), s.succeeded_elapsed_us()), (0, 40));
    }

    #[test]
    fn a_spread_report_without_a_select_hides_no_later_call() {
        let s = CallStats::default();
        s.begin_spread(2);
        s.begin_spread(1);
        s.end_spread(1, Outcome::Success, 1);
        s.end_spread(2, Outcome::Success, 1);
        // Nothing in flight, then a report for no call: read as none in flight, and counted.
        s.end_spread(1, Outcome::Failure, 1);
        assert_eq!(s.in_flight(), 0);
        assert_eq!(s.unmatched().load(Relaxed), 1);
        s.begin_spread(2);
        assert_eq!(s.in_flight(), 1);
    }

    /// The only thread counting reports a call it never selected while a second thread spreads
    /// the counts and reads them: the reader may find that report counted as ended before it
    /// is counted as unmatched, and compensates for it; the owner must not compensate again,
    /// or a call stays "in flight" forever.
    #[test]
    fn an_unmatched_report_racing_the_spread_is_compensated_once() {
        use std::sync::atomic::AtomicUsize;
        const ROUNDS: usize = 100_000;
        let round = AtomicUsize::new(0);
        let done = AtomicUsize::new(0);
        let slots: Vec<CallStats> = (0..ROUNDS).map(|_| CallStats::default()).collect();
        for s in &slots {
            // Thread 1 owns the counts; nothing in flight.
            s.begin_spread(1);
            s.end_spread(1, Outcome::Success, 1);
        }
        std::thread::scope(|scope| {
            scope.spawn(|| {
                for (i, s) in slots.iter().enumerate() {
                    while round.load(Acquire) < i {
                        std::hint::spin_loop();
                    }
                    // Matched against nothing in flight: unmatched.
                    s.end_spread(1, Outcome::Failure, 0);
                    done.store(i + 1, Release);
                }
            });
            scope.spawn(|| {
                for (i, s) in slots.iter().enumerate() {
                    round.store(i, Release);
                    // Spread, then read while the owner reports.
                    s.begin_spread(2);
                    s.end_spread(2, Outcome::Success, 1);
                    while done.load(Acquire) <= i {
                        s.in_flight();
                    }
                }
            });
        });
        let phantom = slots.iter().filter(|s| s.in_flight() != 0).count();
        assert_eq!(phantom, 0, "rounds that left a call in flight");
    }

    #[test]
    fn end_never_goes_negative() {
        let s = CallStats::default();
        assert!(!s.end(1, Outcome::Success, 5));
        assert_eq!(s.active(), 0);
        s.begin();
        assert_eq!(s.active(), 1);
        assert!(s.end(1, Outcome::Failure, 0));
        assert!(!s.end(1, Outcome::Cancelled, 0));
        assert_eq!(s.active(), 0);
        // The unmatched reports do not absorb a later call's in-flight count, and their
        // outcomes still count.
        s.begin();
        assert_eq!(s.active(), 1);
        assert_eq!(s.ended.load(Relaxed), 1);
        assert_eq!((s.succeeded(), s.failed()), (1, 1));
    }

    #[test]
    fn the_only_thread_counting_owns_the_counts_and_then_one_per_cell() {
        let s = CallStats::default();
        s.begin_spread(7);
        assert_eq!(s.home.load(Relaxed), 7);
        assert!(s.cells.get().is_none());
        s.begin_spread(8);
        assert_eq!(s.home.load(Relaxed), SPREAD);
        assert_eq!(s.cells.get().map(|c| c.len()), Some(cell_count()));
        assert_eq!((s.in_flight(), s.selected()), (2, 2));
        // The former owner now counts in its cell; its counts keep what it counted.
        s.end_spread(7, Outcome::Success, 3);
        s.end_spread(8, Outcome::Timeout, 0);
        assert_eq!(
            (s.in_flight(), s.succeeded(), s.failed(), s.timeouts()),
            (0, 1, 1, 1)
        );
        assert_eq!(s.succeeded_elapsed_us(), 3);
        // In the cells, the first thread of each group owns its cell; the others of the group
        // count atomically beside it.
        let cells = s.cells.get().unwrap();
        let cell = &cells[8 & (cells.len() - 1)];
        assert_eq!(cell.owner.load(Relaxed), 8);
        let same_group = 8 + cells.len() as u32;
        s.begin_spread(same_group);
        assert_eq!(cell.owner.load(Relaxed), 8);
        assert_eq!(cell.others.0.selected.load(Relaxed), 1);
        s.end_spread(same_group, Outcome::Success, 4);
        assert_eq!(
            (s.in_flight(), s.succeeded(), s.succeeded_elapsed_us()),
            (0, 2, 7)
        );
        // A call without a thread id never owns counts.
        let t = CallStats::default();
        t.begin_spread(NO_COUNTER);
        assert_eq!(t.home.load(Relaxed), SPREAD);
        assert_eq!((t.in_flight(), t.selected()), (1, 1));
        let cells = t.cells.get().unwrap();
        assert!(cells.iter().all(|c| c.owner.load(Relaxed) == 0));
    }

    #[test]
    fn calls_in_flight_stay_on_the_shared_line_and_outcomes_spread() {
        let s = CallStats::default();
        s.begin();
        s.begin();
        assert!(s.end(4, Outcome::Success, 10));
        // One thread reporting: it owns the statistics, as a spread strategy's only thread.
        assert_eq!(s.home.load(Relaxed), 4);
        assert!(s.cells.get().is_none());
        assert_eq!(s.active(), 1);
        // Another thread's report spreads the statistics, not the calls in flight.
        assert!(s.end(5, Outcome::Timeout, 0));
        assert!(s.cells.get().is_some());
        assert_eq!(s.counts.selected.load(Relaxed), 2);
        assert_eq!(s.ended.load(Relaxed), 2);
        assert_eq!(s.active(), 0);
        assert_eq!(
            (s.selected(), s.succeeded(), s.failed(), s.timeouts()),
            (2, 1, 1, 1)
        );
        assert_eq!(
            s.selected_by_begin(),
            s.selected(),
            "no select in the cells"
        );
        assert_eq!(s.succeeded_elapsed_us(), 10);
        // A report without a call neither ends one nor hides a later one.
        assert!(!s.end(4, Outcome::Success, 1));
        assert_eq!(s.ended.load(Relaxed), 2);
        s.begin();
        assert_eq!(s.active(), 1);
    }

    #[test]
    fn all_strategy_words_start_at_zero() {
        let s = CallStats::default();
        let e = s.ewma();
        for word in [
            &e.sampled_us,
            &e.peak_us,
            &e.probed_us,
            &e.probe_gap_us,
            &e.progress_us,
        ] {
            assert_eq!(word.load(Relaxed), 0);
        }
        assert_eq!(e.estimate_bits.load(Relaxed), 0);
        assert_eq!(e.successes.load(Relaxed), 0);
        assert_eq!(s.window().successes.load(Relaxed), 0);
        let a = s.adaptive();
        assert!(!a.has_provider_metrics.load(Relaxed));
        assert_eq!(a.pick_time_ms.load(Relaxed), 0);
        let m = a.model();
        assert_eq!(
            (m.provider_time_ms, m.current_time_ms, m.last_latency_ms),
            (0, 0, 0)
        );
        assert_eq!((m.cpu_load, m.ewma), (0.0, 0.0));
    }

    /// adaptive's model is behind a lock of its own making: updates from several threads at
    /// once are not lost.
    #[test]
    fn the_adaptive_model_lock_excludes() {
        let s = CallStats::default();
        let threads = 4;
        let rounds = 20_000;
        let start = std::sync::Barrier::new(threads);
        std::thread::scope(|scope| {
            for _ in 0..threads {
                scope.spawn(|| {
                    start.wait();
                    for _ in 0..rounds {
                        let mut m = s.adaptive().model();
                        // A read, then a write: without the lock, threads overwrite each other.
                        let seen = m.last_latency_ms;
                        m.last_latency_ms = std::hint::black_box(seen) + 1;
                    }
                });
            }
        });
        assert_eq!(
            s.adaptive().model().last_latency_ms,
            (threads * rounds) as i64
        );
    }

    /// Threads selecting and reporting at once, one of them the owner writing without locked
    /// instructions: no count is lost (a lost one would leave calls "in flight" forever). Eight
    /// threads, so that (with fewer cells than eight) several non-owners share a cell's line.
    #[test]
    fn concurrent_counting_loses_nothing() {
        const THREADS: u32 = 8;
        const CALLS: u64 = 200_000;
        for spread in [false, true] {
            let s = CallStats::default();
            // Started together, so that the threads overlap (else the first may be done
            // before the last starts, and nothing concurrent is tested).
            let start = std::sync::Barrier::new(THREADS as usize);
            std::thread::scope(|scope| {
                for counter in 1..=THREADS {
                    let (s, start) = (&s, &start);
                    scope.spawn(move || {
                        start.wait();
                        for i in 0..CALLS {
                            if spread {
                                s.begin_spread(counter);
                                s.end_spread(counter, Outcome::Success, i % 3);
                            } else {
                                s.begin();
                                assert!(s.active() >= 1, "its own call is in flight");
                                assert!(s.end(counter, Outcome::Success, i % 3));
                            }
                        }
                    });
                }
            });
            let calls = u64::from(THREADS) * CALLS;
            assert_eq!(
                (s.selected(), s.succeeded()),
                (calls, calls),
                "spread: {spread}"
            );
            // Each kind of counters as its strategies read them.
            if spread {
                assert_eq!(s.in_flight(), 0);
            } else {
                assert_eq!(s.active(), 0);
            }
            let elapsed = u64::from(THREADS) * (0..CALLS).map(|i| i % 3).sum::<u64>();
            assert_eq!(s.succeeded_elapsed_us(), elapsed, "spread: {spread}");
        }
    }
}
