//! Inner's end of a call: a report's counters, and what the strategy and the filter learn from it.

use super::{Inner, Member, Snapshot};
use crate::clock::Clock;
use crate::invoker::Outcome;
use crate::stats::{CallStats, BYPASS};
use crate::strategy::Report;
use std::sync::atomic::Ordering::Relaxed;

/// One report's arguments. `Copy`, and passed by value: a report's common path then keeps them
/// in registers (taken by reference, they were stored to the stack on every report, 5
/// instructions, for the out-of-line paths that read them from there).
#[derive(Clone, Copy)]
pub(super) struct CallEnd {
    pub(super) method: u32,
    pub(super) id: u64,
    pub(super) elapsed_us: i64,
    pub(super) outcome: Outcome,
    pub(super) now_us: i64,
}

/// `Inner::end_path`'s values.
pub(super) const END_PLAIN: u8 = 0;
pub(super) const END_SPREAD: u8 = 1;
pub(super) const END_BYPASS: u8 = 2;

impl Inner {
    /// A report's work on one snapshot: the call's counters, then what the strategy and the
    /// filter learn from it (only for those that follow reports).
    #[inline]
    pub(super) fn end_call(&self, snapshot: &Snapshot, counter: u32, end: &CallEnd) {
        self.end_call_at(snapshot, snapshot.find(end.id), counter, *end);
    }

    /// `end_call` with the invoker found: its position and member (None: the id is not in the
    /// set).
    #[inline(always)]
    pub(super) fn end_call_at(
        &self,
        snapshot: &Snapshot,
        found: Option<(usize, &Member)>,
        counter: u32,
        end: CallEnd,
    ) {
        // A report for an id no longer in the set is accepted and ignored.
        let Some((pos, member)) = found else {
            return;
        };
        let path = self.end_path.load(Relaxed);
        let elapsed_us = end.elapsed_us as u64;
        let stats = member.state.methods.get_or_insert(end.method);
        let ended = if path == END_SPREAD {
            stats.end_spread(counter, end.outcome, elapsed_us);
            true
        } else if path == END_BYPASS {
            let (method, outcome, now_us) = (end.method, end.outcome, end.now_us);
            return self.end_call_with_bypass(
                snapshot,
                pos,
                counter,
                (method, end.id),
                (end.elapsed_us, outcome, now_us),
            );
        } else {
            stats.end(counter, end.outcome, elapsed_us)
        };
        if self.learns_from_reports {
            self.learn_from_report(snapshot, pos, stats, ended, end);
        }
    }

    /// `end_call_at` for an `adaptive` balancer that has counted calls under a `BYPASS` key.
    /// A report carries no token saying how its call was picked: it ends a call the strategy
    /// picked while one is in flight on this invoker, else one picked among a single
    /// candidate. The counts are exact whenever the two kinds do not overlap on an invoker;
    /// when they do, an outcome may be booked to the other kind, and that kind's count of
    /// calls in flight stays one too high until the other call's report.
    /// (The report's arguments come apart, in registers: see `end_call_pinned`.)
    #[cold]
    #[inline(never)]
    fn end_call_with_bypass(
        &self,
        snapshot: &Snapshot,
        pos: usize,
        counter: u32,
        (method, id): (u32, u64),
        (elapsed_us, outcome, now_us): (i64, Outcome, i64),
    ) {
        let end = CallEnd {
            method,
            id,
            elapsed_us,
            outcome,
            now_us,
        };
        let elapsed_us = end.elapsed_us as u64;
        let methods = &snapshot.members[pos].state.methods;
        let (stats, ended) = match self.end_with_bypass(methods, counter, &end, elapsed_us) {
            Some(stats) => (stats, true),
            // Neither had a call in flight: the method's own count the report, as for any
            // report without a call (adaptive's counters are never spread).
            None => {
                let stats = methods.get_or_insert(end.method);
                (stats, stats.end(counter, end.outcome, elapsed_us))
            }
        };
        if self.learns_from_reports {
            self.learn_from_report(snapshot, pos, stats, ended, end);
        }
    }

    /// `end_call_at`'s end of a call of an `adaptive` balancer that has counted calls under a
    /// `BYPASS` key: the counters where a call in flight was ended (the method's own first),
    /// or None when neither had one (the method's own then count the report, as for any report
    /// without a call).
    #[inline(never)]
    fn end_with_bypass<'s>(
        &self,
        methods: &'s crate::stats::MethodStats,
        counter: u32,
        end: &CallEnd,
        elapsed_us: u64,
    ) -> Option<&'s CallStats> {
        let own = methods.get(end.method);
        if let Some(stats) = own.filter(|s| s.try_end(counter, end.outcome, elapsed_us)) {
            return Some(stats);
        }
        methods
            .get_slow(end.method | BYPASS)
            .filter(|s| s.try_end(counter, end.outcome, elapsed_us))
    }

    /// `end_call` on a snapshot pinned the general way (no current cached one). The report's
    /// arguments come one by one, in registers: a `CallEnd` passed by value is passed by
    /// reference, and every report then stored its arguments to memory for this call (4
    /// instructions), also when it was not made.
    #[inline(never)]
    pub(super) fn end_call_pinned(
        &self,
        method: u32,
        id: u64,
        elapsed_us: i64,
        outcome: Outcome,
        now_us: i64,
    ) {
        let end = CallEnd {
            method,
            id,
            elapsed_us,
            outcome,
            now_us,
        };
        let pinned = self.pin();
        self.end_call(pinned.get(), pinned.counter, &end);
    }

    // Always inline: out of line (as LLVM chose once `report` was inlined), the call and its
    // arguments cost the strategies that learn from reports about 25 instructions a report.
    #[inline(always)]
    fn learn_from_report(
        &self,
        snapshot: &Snapshot,
        pos: usize,
        stats: &CallStats,
        ended: bool,
        end: CallEnd,
    ) {
        let clock = Clock::new(end.now_us);
        if self.tracks_reports {
            if let Some(method_state) = self.methods.get(end.method) {
                self.strategy.on_report(&Report {
                    method: method_state,
                    stats,
                    ended,
                    elapsed_us: end.elapsed_us,
                    outcome: end.outcome,
                    clock: &clock,
                });
            }
        }
        if let Some(filter) = &self.filter {
            filter.on_report(snapshot, pos, end.outcome, &clock);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::balancer::tests::four_invokers;
    use crate::balancer::Balancer;

    /// A failure reported on a replaced set (its report began before the update) must not eject
    /// there: the filter counted its ejections from the new set, and an ejection counted from
    /// the old one kept every pick off the short paths until it expired.
    #[test]
    fn a_failure_reported_on_a_replaced_set_ejects_nothing() {
        let b = Balancer::new("loadbalance=random&outlier.consecutiveFailures=1").unwrap();
        let set = four_invokers();
        b.update(&set).unwrap();
        let method = b.method("m").unwrap();
        let old = b.inner.snapshot.load_full();
        b.update(&set[..3]).unwrap();
        let end = CallEnd {
            method,
            id: 4,
            elapsed_us: 1000,
            outcome: Outcome::Failure,
            now_us: 1_000_000_000,
        };
        b.inner.end_call(&old, 0, &end);
        let filter = b.inner.filter.as_ref().unwrap();
        assert!(
            !filter.restricts_now(),
            "an ejection counted from the replaced set"
        );
        // A staying invoker's failure on the replaced set ejects nothing either; its next
        // failure, on the current set, does.
        let end = CallEnd { id: 2, ..end };
        b.inner.end_call(&old, 0, &end);
        assert!(!filter.restricts_now());
        let current = b.inner.snapshot.load_full();
        b.inner.end_call(&current, 0, &end);
        assert!(filter.restricts_now());
    }
}
