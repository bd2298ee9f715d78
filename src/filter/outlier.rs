//! Outlier ejection: the per-invoker failure counts, the ejection decision and its budget,
//! and the sweep that lifts ejections once they are over.

use super::Filter;
use crate::balancer::{Member, Snapshot};
use crate::clock::{Clock, STEP_BACK_MS};
use crate::config::OutlierConfig;
use crate::invoker::Outcome;
use std::sync::atomic::{
    AtomicI64, AtomicU32,
    Ordering::{Relaxed, Release},
};

/// Outlier state of one invoker (all methods together: an invoker is healthy or not).
#[derive(Default)]
pub struct OutlierState {
    pub(super) consecutive: AtomicU32,
    /// Ejected until this instant (Unix ms); 0 = not ejected. An expired ejection stays set
    /// until a sweep lifts it (the next pick after it expires).
    pub(super) ejected_until_ms: AtomicI64,
    /// Ejections in a row: the back-off multiplier.
    pub(super) ejections: AtomicU32,
    /// When the last ejection was lifted (Unix ms).
    lifted_ms: AtomicI64,
    window_start_ms: AtomicI64,
    window_calls: AtomicU32,
    window_failures: AtomicU32,
}

impl OutlierState {
    pub fn is_ejected(&self) -> bool {
        self.ejected_until_ms.load(Relaxed) != 0
    }

    fn reset_counts(&self) {
        self.consecutive.store(0, Relaxed);
        self.window_calls.store(0, Relaxed);
        self.window_failures.store(0, Relaxed);
        self.window_start_ms.store(0, Relaxed);
    }

    /// Whether a window that started at `start` (0: none started) is over at `now_ms`.
    #[inline]
    fn window_over(start: i64, window_ms: i64, now_ms: i64) -> bool {
        // A start more than a window (and `STEP_BACK_MS`) ahead: the clock stepped back since
        // (the window would otherwise last as long as the step).
        start == 0
            || now_ms.saturating_sub(start) >= window_ms
            || start.saturating_sub(now_ms) > window_ms.saturating_add(STEP_BACK_MS)
    }

    /// The (calls, failures) of the window that a call counted at `now_ms` would join: (0, 0)
    /// when it would start a new one.
    pub(super) fn window_at(&self, window_ms: i64, now_ms: i64) -> (u32, u32) {
        if Self::window_over(self.window_start_ms.load(Relaxed), window_ms, now_ms) {
            return (0, 0);
        }
        (
            self.window_calls.load(Relaxed),
            self.window_failures.load(Relaxed),
        )
    }

    /// Counts one call in the failure-rate window (rolling it over when it is over); returns
    /// the window's (calls, failures) including this one.
    fn count(&self, window_ms: i64, now_ms: i64, failed: bool) -> (u32, u32) {
        let start = self.window_start_ms.load(Relaxed);
        if Self::window_over(start, window_ms, now_ms)
            && self
                .window_start_ms
                .compare_exchange(start, now_ms.max(1), Relaxed, Relaxed)
                .is_ok()
        {
            self.window_calls.store(0, Relaxed);
            self.window_failures.store(0, Relaxed);
        }
        let calls = self.window_calls.fetch_add(1, Relaxed) + 1;
        let failures = if failed {
            self.window_failures.fetch_add(1, Relaxed) + 1
        } else {
            self.window_failures.load(Relaxed)
        };
        (calls, failures)
    }
}

/// The most invokers of a set of `n` that may be ejected at once.
fn ejection_budget(n: usize, percent: u32) -> usize {
    if n < 2 || percent == 0 {
        return 0;
    }
    (n * percent as usize / 100).max(1).min(n - 1)
}

/// Whether a member is capacity the budget protects: a weighted one while the set has any
/// (`any_weighted`, for a strategy whose weights drain). A weight-0 invoker then takes no calls
/// (it is being drained), so ejecting it costs nothing, and counting it would let the budget
/// eject every weighted one and send all calls to the drained ones.
fn serves(member: &Member, any_weighted: bool) -> bool {
    !any_weighted || member.weight > 0
}

impl Filter {
    /// Whether the set has a weighted member that drained ones make way for (see `serves`),
    /// and the budget: the most of the members that serve that may be ejected at once.
    fn serving_budget(&self, members: &[Member], percent: u32) -> (bool, usize) {
        let any_weighted = self.weights_drain && members.iter().any(|m| m.weight > 0);
        let serving = members.iter().filter(|m| serves(m, any_weighted)).count();
        (any_weighted, ejection_budget(serving, percent))
    }
}

impl Filter {
    pub(super) fn is_ejected(&self, member: &Member) -> bool {
        self.outlier.is_some() && member.state.outlier.is_ejected()
    }

    /// Outlier bookkeeping for an ended call of the invoker at `pos`.
    pub fn on_report(&self, snapshot: &Snapshot, pos: usize, outcome: Outcome, clock: &Clock) {
        let Some(cfg) = &self.outlier else { return };
        let state = &snapshot.members[pos].state.outlier;
        match outcome {
            Outcome::Cancelled => {}
            Outcome::Success => {
                if state.consecutive.load(Relaxed) != 0 {
                    state.consecutive.store(0, Relaxed);
                }
                if cfg.failure_rate_percent > 0 && !state.is_ejected() {
                    state.count(cfg.window_ms, clock.now_ms(), false);
                }
            }
            Outcome::Failure | Outcome::Timeout => {
                if state.is_ejected() {
                    // Calls sent before the ejection: nothing more to learn.
                    return;
                }
                let consecutive = state.consecutive.fetch_add(1, Relaxed) + 1;
                let mut eject =
                    cfg.consecutive_failures > 0 && consecutive >= cfg.consecutive_failures;
                if cfg.failure_rate_percent > 0 {
                    let (calls, failures) = state.count(cfg.window_ms, clock.now_ms(), true);
                    eject |= calls >= cfg.min_requests
                        && failures as u64 * 100 >= cfg.failure_rate_percent as u64 * calls as u64;
                }
                if eject {
                    self.eject(snapshot, pos, cfg, clock.now_ms());
                }
            }
        }
    }

    fn eject(&self, snapshot: &Snapshot, pos: usize, cfg: &OutlierConfig, now_ms: i64) {
        let current = self.lock.lock();
        if snapshot.generation < *current {
            // Its next failure, on the current set, tries again.
            return;
        }
        let state = &snapshot.members[pos].state.outlier;
        if state.is_ejected() {
            return;
        }
        // Ejections that are over count against the budget no more, whether or not a pick has
        // swept them yet (reports may come in with no pick between).
        if self.lift_expired(snapshot, now_ms) {
            self.recount(snapshot);
            self.epoch.fetch_add(1, Release);
        }
        if cfg.max_ejection_percent == 0 {
            return; // never eject, drained invokers included
        }
        let members = &snapshot.members;
        let (any_weighted, budget) = self.serving_budget(members, cfg.max_ejection_percent);
        let ejected_serving = members
            .iter()
            .filter(|m| serves(m, any_weighted) && m.state.outlier.is_ejected())
            .count();
        if serves(&members[pos], any_weighted) && ejected_serving >= budget {
            // Over budget: the invoker stays; its next failure tries again.
            return;
        }
        let ejected = members
            .iter()
            .filter(|m| m.state.outlier.is_ejected())
            .count();
        let mut n = state.ejections.load(Relaxed);
        let lifted = state.lifted_ms.load(Relaxed);
        if lifted > 0 && lifted.saturating_sub(now_ms) > STEP_BACK_MS {
            // Lifted before the clock stepped back: how long ago cannot be told, and counted
            // from the stamp nothing would be forgiven for as long as the step (the first
            // ejection after a 1 h step lasted up to the longest one after an hour of health).
            // As an ejection made before a step ends at once, the back-off starts over.
            n = 0;
        } else if lifted > 0 {
            // One step of back-off is forgiven per base period without an ejection.
            let forgiven = now_ms.saturating_sub(lifted).max(0) / cfg.base_ejection_ms;
            n = n.saturating_sub(forgiven.min(u32::MAX as i64) as u32);
        }
        // Steps past the one that reaches the longest ejection lengthen nothing; kept, each
        // would also have to be forgiven (a base period apiece), so an invoker that flapped
        // for hours was ejected for the longest time again after hours of health.
        let steps_to_cap = (cfg.max_ejection_ms - 1) / cfg.base_ejection_ms + 1;
        n = n
            .saturating_add(1)
            .min(steps_to_cap.min(u32::MAX as i64) as u32);
        let length = cfg
            .base_ejection_ms
            .saturating_mul(n as i64)
            .min(cfg.max_ejection_ms);
        let until = now_ms.saturating_add(length).max(1);
        state.ejections.store(n, Relaxed);
        state.reset_counts();
        state.ejected_until_ms.store(until, Relaxed);
        self.live.store(ejected as u32 + 1, Release);
        self.next_expiry_ms.fetch_min(until, Relaxed);
        self.last_expiry_ms.fetch_max(until, Relaxed);
        self.epoch.fetch_add(1, Release);
    }

    /// Lifts the ejections that are over. Skipped when another thread holds the lock (it is
    /// sweeping or ejecting; the next pick checks again).
    pub(super) fn sweep(&self, snapshot: &Snapshot, now_ms: i64) {
        let Some(current) = self.lock.try_lock() else {
            return;
        };
        if snapshot.generation < *current {
            return;
        }
        let lifted = self.lift_expired(snapshot, now_ms);
        self.recount(snapshot);
        if lifted {
            self.epoch.fetch_add(1, Release);
        }
    }

    /// Lifts every ejection over at `now_ms` (caller holds the lock); true if any was.
    fn lift_expired(&self, snapshot: &Snapshot, now_ms: i64) -> bool {
        let mut lifted = false;
        for m in snapshot.members.iter() {
            let state = &m.state.outlier;
            let until = state.ejected_until_ms.load(Relaxed);
            if until != 0 && ejection_over(until, now_ms, self.max_ejection_ms()) {
                state.reset_counts();
                // Lifted when it ended, not when a call happened to notice: the healthy time
                // since counts towards forgiving the back-off (a step back lifts it now).
                state.lifted_ms.store(until.min(now_ms).max(1), Relaxed);
                state.ejected_until_ms.store(0, Relaxed);
                lifted = true;
            }
        }
        lifted
    }

    /// Live count and first and last expiry from the members' states (caller holds the lock).
    fn recount(&self, snapshot: &Snapshot) {
        let mut live = 0;
        let (mut next, mut last) = (i64::MAX, i64::MIN);
        for m in snapshot.members.iter() {
            let until = m.state.outlier.ejected_until_ms.load(Relaxed);
            if until != 0 {
                live += 1;
                next = next.min(until);
                last = last.max(until);
            }
        }
        self.next_expiry_ms.store(next, Relaxed);
        self.last_expiry_ms.store(last, Relaxed);
        self.live.store(live, Release);
    }

    /// A new set was swapped in: ejections of departed invokers are gone, and a smaller set
    /// may hold more ejections than its budget (the ones ending first are lifted).
    pub fn after_update(&self, snapshot: &Snapshot) {
        let Some(cfg) = &self.outlier else { return };
        let mut current = self.lock.lock();
        *current = (*current).max(snapshot.generation);
        let (any_weighted, budget) =
            self.serving_budget(&snapshot.members, cfg.max_ejection_percent);
        loop {
            let ejected: Vec<&Member> = snapshot
                .members
                .iter()
                .filter(|m| serves(m, any_weighted) && m.state.outlier.is_ejected())
                .collect();
            if ejected.len() <= budget {
                break;
            }
            let first = ejected
                .iter()
                .min_by_key(|m| m.state.outlier.ejected_until_ms.load(Relaxed))
                .expect("more ejected than the budget, so at least one");
            let state = &first.state.outlier;
            state.reset_counts();
            state
                .lifted_ms
                .store(state.ejected_until_ms.load(Relaxed).max(1), Relaxed);
            state.ejected_until_ms.store(0, Relaxed);
        }
        self.recount(snapshot);
        self.epoch.fetch_add(1, Release);
    }
}

/// Whether an ejection until `until_ms` is over at `now_ms`. One that ends further ahead than
/// the longest ejection (and `STEP_BACK_MS`: an ejection of the longest length lies a little
/// more than that ahead of a call that read the time a moment before it was made) was made
/// before the clock stepped back: lifted now rather than kept for as long as the step (hours,
/// for a wall clock set back by hours).
#[inline]
pub(super) fn ejection_over(until_ms: i64, now_ms: i64, max_ejection_ms: i64) -> bool {
    until_ms <= now_ms
        || until_ms.saturating_sub(now_ms) > max_ejection_ms.saturating_add(STEP_BACK_MS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_keeps_one_and_never_all() {
        assert_eq!(ejection_budget(0, 10), 0);
        assert_eq!(ejection_budget(1, 100), 0);
        assert_eq!(ejection_budget(2, 10), 1);
        assert_eq!(ejection_budget(4, 10), 1);
        assert_eq!(ejection_budget(20, 10), 2);
        assert_eq!(ejection_budget(4, 100), 3);
        assert_eq!(ejection_budget(10, 0), 0);
    }
}
