//! Where a thread counts in a [`CallStats`]: in the counts it owns while it is the only one
//! counting there, else in its group's cell. For the statistics of every strategy, and for the
//! selects too of those whose picks never read calls in flight (`begin_spread`, `end_spread`),
//! whose calls in flight are read back here (`in_flight`), finding the reports that matched no
//! select.

use super::counts::{Cell, Counts, NO_COUNTER, SPREAD};
use super::group;
use super::CallStats;
use crate::invoker::Outcome;
use std::sync::atomic::{
    AtomicU64,
    Ordering::{AcqRel, Acquire, Relaxed, Release},
};

impl CallStats {
    /// `end` on the shared counts by their owner, for a strategy whose picks never read calls
    /// in flight while one thread counts here.
    #[inline(always)]
    fn end_owned(&self, outcome: Outcome, elapsed_us: u64) -> bool {
        if self.counted_in_flight() > 0 {
            self.counts.end::<true>(outcome, elapsed_us);
            return true;
        }
        self.end_unmatched(outcome, elapsed_us);
        false
    }

    /// `end_owned` of a report that matched no call in flight.
    #[cold]
    #[inline(never)]
    fn end_unmatched(&self, outcome: Outcome, elapsed_us: u64) {
        // Unmatched before it is ended: a reader of spread counts (created by another thread
        // meanwhile) that saw it ended but not yet unmatched would find fewer than no calls in
        // flight and count it as unmatched itself, then this add would count it again and
        // leave a call "in flight" for good. The fence makes a reader that sees the end see
        // this add too, so that its compensating exchange fails. The add is marked as half
        // done until the end is counted too: a reader that saw it unmatched but not yet ended
        // would have counted a call in flight that was never selected.
        self.unmatched().fetch_add(1 | COUNTING, Relaxed);
        std::sync::atomic::fence(Release);
        self.counts.end::<true>(outcome, elapsed_us);
        self.unmatched().fetch_sub(COUNTING, Release);
    }

    /// `begin` for a strategy whose picks never read calls in flight: once a second thread
    /// counts here, each adds to the cell of its group. `counter` is the calling thread's id.
    // Always inline: libpolylb.so's select called it (8 instructions more than the owner's
    // add of 3). Its other threads' path inline too: out of line, it cost the in-process
    // loops 3-4 instructions (their registers).
    #[inline(always)]
    pub fn begin_spread(&self, counter: u32) {
        // The owner's test first, on its own: matching on one function's (counts, owned) pair
        // instead left a flag to build and test (3 instructions) on this, the common path.
        let home = self.home.load(Relaxed);
        if home == counter {
            self.counts.begin::<true>();
            return;
        }
        match self.counts_elsewhere(home, counter) {
            (counts, true) => counts.begin::<true>(),
            (cell, false) => cell.begin::<false>(),
        };
    }

    /// `end` for a strategy whose picks never read calls in flight. While one thread counts
    /// here it is `end`; once the counts are spread it does not look for the call's select
    /// (that would read every thread's cell): a report without one is found when the counters
    /// are next read with nothing in flight (see [`CallStats::in_flight`]).
    #[inline(always)]
    pub fn end_spread(&self, counter: u32, outcome: Outcome, elapsed_us: u64) {
        // The only thread counting here so far: its reports are matched, as `end`'s are.
        // Tested on its own, as in `begin_spread` (here it also spares comparing pointers).
        let home = self.home.load(Relaxed);
        if home == counter {
            self.end_owned(outcome, elapsed_us);
            return;
        }
        match self.counts_elsewhere(home, counter) {
            // Claimed just now (`counts_of_slow`): the only thread counting here, as above.
            (counts, true) if std::ptr::eq(counts, &self.counts) => {
                self.end_owned(outcome, elapsed_us);
            }
            (counts, true) => counts.end::<true>(outcome, elapsed_us),
            (counts, false) => counts.end::<false>(outcome, elapsed_us),
        }
    }

    /// Counts the outcome of a call's end where this thread counts (see `counts_elsewhere`).
    #[inline(always)]
    pub(super) fn count_end(&self, counter: u32, outcome: Outcome, elapsed_us: u64) {
        // The owner's test on its own, as in `begin_spread`.
        let home = self.home.load(Relaxed);
        if home == counter {
            return self.counts.end::<true>(outcome, elapsed_us);
        }
        match self.counts_elsewhere(home, counter) {
            (counts, true) => counts.end::<true>(outcome, elapsed_us),
            (counts, false) => counts.end::<false>(outcome, elapsed_us),
        }
    }

    /// Where this thread counts, and whether it owns those counts (is their only writer), when
    /// it is not the only thread counting here (`home`, loaded by the caller, is not
    /// `counter`): its group's cell, created when a second thread comes; or the shared counts,
    /// claimed if nobody counted yet. Callers test `home == counter` first (one load and
    /// compare): the shared counts are that thread's then.
    #[inline(always)]
    fn counts_elsewhere(&self, home: u32, counter: u32) -> (&Counts, bool) {
        if home == SPREAD {
            // Marked only once the cells exist (`create_cells`).
            if let Some(cells) = self.cells.get() {
                return in_group(cells, counter).counts_of(counter);
            }
        }
        self.counts_of_slow(counter)
    }

    /// `counts_elsewhere` when this thread is not (yet) the one counting here: claims the counts for
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
        in_group(cells, counter).counts_of(counter)
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
        group::decide();
        let cells = self.cells.get_or_init();
        self.home.store(SPREAD, Relaxed);
        cells
    }

    /// For a strategy whose picks never read calls in flight: the reports counted without a
    /// matching select (kept in `ended`, which such a strategy does not count), with
    /// `COUNTING` set while the owner counts one (see `end_owned`).
    #[inline]
    fn unmatched(&self) -> &AtomicU64 {
        &self.ended
    }

    /// Calls in flight (selected, not yet reported) of a strategy whose picks never read them
    /// (`stats`): spread counts included.
    pub fn in_flight(&self) -> i64 {
        if self.cells.get().is_some() {
            return self.active_spread();
        }
        // Read between two loads of the unmatched count that agree and find no report half
        // counted; a few tries, then with the report being counted left out. The counts may
        // spread meanwhile, and a spread read's compensation (for reports counted in the
        // cells) would then be subtracted from the shared counts' ends alone: the cells are
        // looked for again after the count is read (the compensating exchange is AcqRel, so
        // a count that holds one comes with the cells).
        let mut in_flight = None;
        for _ in 0..SETTLE_TRIES {
            let unmatched = self.unmatched().load(Acquire);
            if unmatched & COUNTING == 0 {
                let read = self.in_flight_with(unmatched);
                if self.unmatched().load(Acquire) == unmatched {
                    in_flight = Some(read);
                    break;
                }
            }
            std::hint::spin_loop();
        }
        // Still counting: that report left out (a call in flight may read as none).
        let in_flight =
            in_flight.unwrap_or_else(|| self.in_flight_with(self.unmatched().load(Acquire)));
        if self.cells.get().is_some() {
            return self.active_spread();
        }
        in_flight
    }

    /// Calls in flight as the shared counts hold them, for a strategy whose picks never read
    /// them: the calls counted before the spread (what `end_owned` matches reports against;
    /// its caller, the owner, is the one that marks an unmatched report half counted, so it
    /// never finds one).
    #[inline]
    fn counted_in_flight(&self) -> i64 {
        // The unmatched count after the others (loaded first, as `in_flight_with` has it, it
        // cost the owner's report an instruction).
        self.in_flight_by(|| self.unmatched().load(Acquire))
    }

    /// `counted_in_flight` for a reader with the unmatched count (see `unmatched`) loaded
    /// before the counts.
    #[inline]
    fn in_flight_with(&self, unmatched: u64) -> i64 {
        self.in_flight_by(|| unmatched_settled(unmatched))
    }

    /// The shared counts' calls in flight, with `unmatched` read after the ended counters.
    #[inline(always)]
    fn in_flight_by(&self, unmatched: impl FnOnce() -> u64) -> i64 {
        // Ended counters first (Acquire orders the later load of `selected` after them).
        let c = &self.counts;
        let ended = c
            .succeeded
            .load(Acquire)
            .wrapping_add(c.failed.load(Acquire))
            .wrapping_add(c.cancelled.load(Acquire))
            .wrapping_sub(unmatched());
        (c.selected.load(Acquire).wrapping_sub(ended) as i64).max(0)
    }

    /// `in_flight` over spread counters. Their reports did not look for a matching select, so a
    /// report without one shows here as fewer calls in flight than none: it is counted as
    /// unmatched then, and hides no later call. (Until then, a call in flight at the same time
    /// may go uncounted: these are statistics of a strategy that never reads them to pick.)
    #[cold]
    fn active_spread(&self) -> i64 {
        // A report the former owner is counting is waited for, briefly: seen unmatched
        // but not yet ended, it would read as a call in flight that was never selected.
        let mut unmatched = self.unmatched().load(Acquire);
        for _ in 0..SETTLE_TRIES {
            if unmatched & COUNTING == 0 {
                break;
            }
            std::hint::spin_loop();
            unmatched = self.unmatched().load(Acquire);
        }
        // The ends are summed before the selects, so a read counts every call that ended
        // before it as selected, and the calls selected and ended while it sums (all the
        // cells' lines, twice) as in flight: a reader descheduled between the two sums read
        // every call the other threads made meanwhile as in flight (two threads with at most
        // one call each in flight: 288,071 in one read). Each read is such an upper bound, so
        // the lowest of a few is one too, and only one that was descheduled as well counts
        // what another thread did for that long.
        let mut active = i64::MAX;
        for _ in 0..SPREAD_READS {
            let ended = self
                .succeeded()
                .wrapping_add(self.failed())
                .wrapping_add(self.total(|c| &c.cancelled))
                .wrapping_sub(unmatched_settled(unmatched));
            #[cfg(test)]
            if let Some(meanwhile) = BETWEEN_SUMS.with(std::cell::Cell::take) {
                meanwhile(self);
            }
            active = active.min(self.selected().wrapping_sub(ended) as i64);
        }
        if active < 0 && unmatched & COUNTING == 0 {
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

/// Set in the unmatched count while a report is counted in it but not yet as ended (far above
/// any count: 2^63 reports).
const COUNTING: u64 = 1 << 63;

/// The reports of an unmatched count that are counted as ended too: one being counted
/// (`COUNTING`) is left out, as its end may not be counted yet.
#[inline]
fn unmatched_settled(unmatched: u64) -> u64 {
    (unmatched & !COUNTING).wrapping_sub(unmatched >> 63)
}

/// How many times a stats read looks again for a report being counted without a matching
/// select (its two adds are a few instructions apart, unless the thread is descheduled
/// between them: then the read goes ahead, and may miss one call in flight, never count one
/// that was not selected).
const SETTLE_TRIES: usize = 64;

/// How many times `active_spread` sums the counts, keeping the lowest reading.
const SPREAD_READS: usize = 3;

#[cfg(test)]
thread_local! {
    /// What other threads do while a test's `active_spread` is between its two sums (once).
    static BETWEEN_SUMS: std::cell::Cell<Option<fn(&CallStats)>> = const { std::cell::Cell::new(None) };
}

/// The cell of the calling thread's group.
#[inline(always)]
fn in_group(cells: &[Cell], counter: u32) -> &Cell {
    &cells[group::of(counter) & (cells.len() - 1)]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::counts::cell_count;

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

    /// A read descheduled between its sums of the ends and of the selects, while other
    /// threads made 1,000 calls one at a time: the one call in flight, not 1,001.
    #[test]
    fn calls_made_while_a_read_sums_are_not_read_as_in_flight() {
        let s = CallStats::default();
        s.begin_spread(1);
        s.begin_spread(2);
        s.end_spread(2, Outcome::Success, 1);
        assert!(s.cells.get().is_some());
        BETWEEN_SUMS.with(|b| {
            b.set(Some(|s: &CallStats| {
                for i in 0..1_000 {
                    s.begin_spread(2 + i % 3);
                    s.end_spread(2 + i % 3, Outcome::Success, 1);
                }
            }))
        });
        assert_eq!(s.in_flight(), 1);
        assert_eq!(s.selected(), 1_002);
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

    /// Reports without a select, read meanwhile by another thread: never a call in flight
    /// (the unmatched count was added before the end, and a read between the two found one).
    #[test]
    fn reports_without_a_select_never_read_as_a_call_in_flight() {
        let s = CallStats::default();
        let done = std::sync::atomic::AtomicBool::new(false);
        let phantoms = std::thread::scope(|scope| {
            let reader = scope.spawn(|| {
                let mut phantoms = 0;
                while !done.load(Acquire) {
                    phantoms += (s.in_flight() != 0) as usize;
                }
                phantoms
            });
            for _ in 0..2_000_000 {
                s.end_spread(1, Outcome::Success, 10);
            }
            done.store(true, Release);
            reader.join().unwrap()
        });
        assert_eq!(phantoms, 0, "reads that found a call in flight");
        assert_eq!((s.in_flight(), s.succeeded()), (0, 2_000_000));
    }

    /// Reads that began before the counts spread (and found no cells), racing the spread and
    /// a read that compensates for a report counted in a cell: that compensation is not the
    /// shared counts' alone (the first of them, re-enacted, reads 1 from them), and no read may
    /// show a call in flight (nothing is ever selected here). The race is a window of a few
    /// instructions: many rounds (a review's run found it in 16 % of them before the fix).
    #[test]
    fn reads_that_began_before_the_spread_count_the_cells() {
        use std::sync::atomic::{AtomicBool, AtomicUsize};
        let s = CallStats::default();
        s.end_spread(1, Outcome::Success, 1);
        s.end_spread(2, Outcome::Failure, 0);
        assert_eq!(s.in_flight(), 0);
        assert_eq!(s.in_flight_with(s.unmatched().load(Acquire)), 1);

        let mut phantoms = 0;
        for _ in 0..1_000 {
            let s = CallStats::default();
            s.end_spread(1, Outcome::Success, 1);
            let (ready, stop) = (AtomicUsize::new(0), AtomicBool::new(false));
            let start = || {
                ready.fetch_add(1, AcqRel);
                while ready.load(Acquire) < 3 {
                    std::hint::spin_loop();
                }
            };
            phantoms += std::thread::scope(|scope| {
                scope.spawn(|| {
                    start();
                    for _ in 0..200 {
                        s.end_spread(1, Outcome::Success, 1);
                    }
                });
                let reader = scope.spawn(|| {
                    start();
                    let mut phantoms = 0;
                    while !stop.load(Acquire) {
                        phantoms += (s.in_flight() > 0) as usize;
                    }
                    phantoms
                });
                start();
                for _ in 0..50 {
                    std::hint::spin_loop();
                }
                s.end_spread(2, Outcome::Failure, 0);
                for _ in 0..50 {
                    s.in_flight();
                }
                stop.store(true, Release);
                reader.join().unwrap()
            });
            assert_eq!(s.in_flight(), 0);
        }
        assert_eq!(phantoms, 0, "reads that found a call in flight");
    }

    /// A cell's owner selects and reports one call while another thread reads the spread
    /// counts: once both are done nothing stays in flight. (A reader that saw the report but
    /// not the select would compensate for a report that had its select; the counters' adds
    /// are Release so that it cannot. x86 never shows it; Miri does: scripts/miri.sh.)
    #[test]
    fn a_read_racing_a_cells_call_leaves_nothing_in_flight() {
        let s = CallStats::default();
        s.begin_spread(1);
        s.end_spread(1, Outcome::Success, 1);
        s.begin_spread(2);
        s.end_spread(2, Outcome::Success, 1);
        assert!(s.cells.get().is_some());
        std::thread::scope(|scope| {
            scope.spawn(|| {
                s.begin_spread(2);
                s.end_spread(2, Outcome::Success, 1);
            });
            scope.spawn(|| s.in_flight());
        });
        assert_eq!(
            s.in_flight(),
            0,
            "a call in flight for good after every report"
        );
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
        // In the cells, the former owner owns the one of its group; another thread counts in
        // its own group's cell (by processor: maybe the same one, beside the owner's line), and
        // the totals include every cell.
        let cells = s.cells.get().unwrap();
        assert!(cells.iter().any(|c| c.owner.load(Relaxed) == 8));
        s.begin_spread(9);
        s.end_spread(9, Outcome::Success, 4);
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

    /// In a cell the first thread to count owns the line; the others of its group count
    /// atomically beside it, and a call without a thread id never owns it.
    #[test]
    fn a_cell_is_owned_by_its_first_thread_and_shared_by_the_others() {
        let cell = Cell::default();
        let (owned, is_owner) = cell.counts_of(NO_COUNTER);
        assert!(!is_owner && std::ptr::eq(owned, &cell.others.0));
        assert_eq!(cell.owner.load(Relaxed), 0);
        let (owned, is_owner) = cell.counts_of(8);
        assert!(is_owner && std::ptr::eq(owned, &cell.owned));
        let (other, is_owner) = cell.counts_of(16);
        assert!(!is_owner && std::ptr::eq(other, &cell.others.0));
        assert_eq!(cell.owner.load(Relaxed), 8);
        other.begin::<false>();
        owned.begin::<true>();
        owned.begin::<true>();
        assert_eq!(cell.sum(|c| &c.selected), 3);
    }
}
