//! Live per-(invoker, method) counters, created on first use and kept while the invoker stays
//! in the set. Reads and writes are lock-free atomics, except the small latency model that
//! adaptive-style strategies update together under a per-entry lock.
//!
//! The parts: [`CallStats`] here (an invoker's counters for one method: counting a call's select
//! and end, and reading the totals), [`counts`] (the counters and the cells they spread into),
//! [`spread`] (counting and reading for the strategies whose picks never read calls in flight),
//! [`words`] (what one strategy keeps per invoker and method) and [`table`] (an invoker's
//! counters by method, [`MethodStats`], and [`InvokerState`]).

mod counts;
mod group;
mod spread;
mod table;
mod words;

pub(crate) use counts::NO_COUNTER;
pub(crate) use table::{InvokerState, MethodStats, BYPASS};
pub(crate) use words::{EwmaCell, LatencyModel};

use counts::{Cells, Counts};
use words::StrategyWords;

use crate::invoker::Outcome;
use std::sync::atomic::{
    AtomicU32, AtomicU64,
    Ordering::{AcqRel, Acquire, Relaxed, Release},
};

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
    /// Their other counts are statistics, counted as `random`'s are (see [`counts`]).
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
    /// see [`counts`]); `counts` keeps what was counted before.
    cells: Cells,
}

// Two lines: the counters every call writes, then the strategy's words and the cells.
const _: () = assert!(std::mem::size_of::<CallStats>() == 128);

const _: () = assert!(std::mem::offset_of!(CallStats, inline_key) + 4 <= 64);

impl CallStats {
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
    /// not: the two cancel out. Only the first seal counts: a later one (the update and a pick
    /// on the replaced set may both seal, see `InvokerState::left_set`) returns 0.
    pub fn seal(&self) -> i64 {
        let selected = self.counts.selected.fetch_or(SEALED_SELECTS, AcqRel);
        if selected & SEALED_SELECTS != 0 {
            return 0;
        }
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
    #[inline(always)]
    pub fn end(&self, counter: u32, outcome: Outcome, elapsed_us: u64) -> bool {
        // A report without a call counts its outcome, not an end: it must not hide a later call.
        // The end is claimed, not just checked then added: two reports racing for the last call
        // in flight (a double report) would otherwise both end it, and hide the next call.
        // Claimed with Release: a thread whose Acquire load sees this end must also see the
        // select it matched, or it could read `selected` from before that select, find no call
        // of its own in flight and leave it counted for good.
        let mut ended = self.ended.load(Acquire);
        let matched = loop {
            if self.counts.selected.load(Acquire).wrapping_sub(ended) as i64 <= 0 {
                break false;
            }
            match self
                .ended
                .compare_exchange_weak(ended, ended.wrapping_add(1), Release, Acquire)
            {
                Ok(_) => break true,
                Err(now) => ended = now,
            }
        };
        self.count_end(counter, outcome, elapsed_us);
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
                .compare_exchange_weak(ended, ended.wrapping_add(1), Release, Acquire)
            {
                Ok(_) => break,
                Err(now) => ended = now,
            }
        }
        self.count_end(counter, outcome, elapsed_us);
        true
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

    /// Calls selected. The mark a [`CallStats::seal`] adds is left out: the stats of a set
    /// read while an update takes an invoker out of it (the set they began with) showed the
    /// leaving invoker's `selected` 2^61 above its count.
    pub fn selected(&self) -> u64 {
        self.total(|c| &c.selected) & !SEALED_SELECTS
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

    /// Calls in flight, for a strategy that reads them (counted by `begin` and `end`): two
    /// loads of one line.
    #[inline]
    pub fn active(&self) -> i64 {
        // `ended` first (Acquire orders the later load of `selected` after it): a select
        // counted meanwhile can only raise the result, never push it below zero.
        // The seal's mark left out of `selected`: a read between its two adds (`ended` loaded
        // before, `selected` after) counted the mark, 2^61, as calls in flight. Once sealed,
        // ends outnumber selects by far and the result is 0, as before.
        let ended = self.ended.load(Acquire);
        let selected = self.counts.selected.load(Acquire) & !SEALED_SELECTS;
        (selected.wrapping_sub(ended) as i64).max(0)
    }
}

/// What [`CallStats::seal`] adds to `selected`, and to `ended`: far beyond any real count (a
/// select a nanosecond would take 73 years to reach 2^61), and ends then exceed selects by
/// 2^61, so that no report after the seal matches a call.
const SEALED_SELECTS: u64 = 1 << 61;
const SEALED_ENDS: u64 = 1 << 62;

#[cfg(test)]
mod tests {
    use super::*;

    /// A seal is the invoker leaving the set: stats of the set they began with, read while an
    /// update seals, show its counts, not the mark the seal adds (2^61 more selects, and as
    /// many calls in flight between the seal's two adds).
    #[test]
    fn a_sealed_invokers_counts_read_without_the_mark() {
        let s = CallStats::default();
        for _ in 0..3 {
            s.begin();
        }
        assert!(s.end(1, Outcome::Success, 5));
        // Half sealed, as a reader between the seal's two adds sees it.
        s.counts.selected.fetch_or(SEALED_SELECTS, AcqRel);
        assert_eq!((s.selected(), s.active()), (3, 2));
        s.counts.selected.fetch_and(!SEALED_SELECTS, AcqRel);
        assert_eq!(s.seal(), 2);
        assert_eq!((s.selected(), s.active(), s.succeeded()), (3, 0, 1));
        // A select on the replaced set after the seal is still a select.
        assert!(CallStats::sealed(s.begin()));
        assert_eq!((s.selected(), s.active()), (4, 0));
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

#[cfg(test)]
mod weak_memory {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

    /// Thread X selects call x, thread C selects and reports call c; X, having seen C's report
    /// (through nothing that synchronizes), reports x. x must be matched: no call may stay in
    /// flight once every call has been reported once. Fails only under a weak memory model
    /// (scripts/miri.sh: 25 of 64 schedules failed with the end claimed `Relaxed`).
    #[test]
    fn a_report_matches_its_call_after_another_threads_report() {
        let s = CallStats::default();
        s.begin(); // x, first in `selected`'s order
        let c_reported = AtomicBool::new(false);
        let matched = std::thread::scope(|scope| {
            scope.spawn(|| {
                s.begin(); // c
                assert!(s.end(2, Outcome::Success, 1));
                c_reported.store(true, Relaxed);
            });
            while !c_reported.load(Relaxed) {
                std::thread::yield_now();
            }
            s.end(1, Outcome::Success, 1) // x's report
        });
        // Both threads joined: every call was reported once.
        assert!(matched, "x's report matched no call");
        assert_eq!(s.active(), 0, "a call stays in flight for good");
    }
}
