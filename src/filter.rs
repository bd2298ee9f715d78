//! Candidate filters every strategy can use: outlier ejection and zone preference. The balancer
//! applies them to a call's candidates before the strategy runs, so a strategy sees a smaller
//! candidate set and nothing else changes. With neither option configured none of this runs,
//! and Dubbo's strategies behave exactly as Dubbo's.
//!
//! - **Outlier ejection**: after `outlier.consecutiveFailures` failures in a row, or a failure
//!   rate of `outlier.failureRate` % over a window, an invoker is skipped for a back-off that
//!   grows with repeated ejections (`base × n`, capped). At most `outlier.maxEjectionPercent` of
//!   the set is ejected at once (at least one invoker, never all; 0 % never ejects), so a bad
//!   network cannot eject everyone; and when a call's own candidates are all ejected, they are
//!   used anyway.
//! - **Zone preference**: with `zone=Z`, calls go to invokers of zone Z while at least
//!   `zone.minHealthyPercent` % of them are healthy (not ejected). Below that, the local share
//!   shrinks in proportion (healthy fraction / threshold) and the rest spills over to every
//!   healthy invoker; with no healthy local invoker, everything spills over. A zone whose
//!   healthy invokers all weigh 0 while other healthy ones do not is drained: it is preferred
//!   no more (also when its weighted invokers are the ones ejected).
//!
//! Hot path: while nothing is ejected (always, without outlier ejection) a whole-set call
//! narrows at most to the set's local zone, built once on update (`LocalZone`, kept in the
//! snapshot), so the balancer's short paths draw from it directly. While invokers are ejected
//! the filtered candidate list depends on which, so each thread caches it (no allocation once
//! its buffers have grown) and rebuilds it only when an ejection starts or ends (an epoch
//! counter) or the set changes. Ejection decisions and the sweep that lifts expired
//! ejections take a per-balancer lock; they are rare events, never part of an ordinary pick.

use crate::balancer::{Member, Snapshot};
use crate::clock::Clock;
use crate::config::{Config, OutlierConfig};
use crate::invoker::Outcome;
use crate::rng::Rng;
use crate::scratch::with_scratch;
use crate::strategy::SubsetWeights;
use parking_lot::Mutex;
use std::cell::RefCell;
use std::sync::atomic::{
    AtomicI64, AtomicU32, AtomicU64,
    Ordering::{Acquire, Relaxed, Release},
};

/// Outlier state of one invoker (all methods together: an invoker is healthy or not).
#[derive(Default)]
pub struct OutlierState {
    consecutive: AtomicU32,
    /// Ejected until this instant (Unix ms); 0 = not ejected. An expired ejection stays set
    /// until a sweep lifts it (the next pick after it expires).
    ejected_until_ms: AtomicI64,
    /// Ejections in a row: the back-off multiplier.
    ejections: AtomicU32,
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
        start == 0 || now_ms.saturating_sub(start) >= window_ms
    }

    /// The (calls, failures) of the window that a call counted at `now_ms` would join: (0, 0)
    /// when it would start a new one.
    fn window_at(&self, window_ms: i64, now_ms: i64) -> (u32, u32) {
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

static NEXT_UID: AtomicU64 = AtomicU64::new(1);

/// The filters of one balancer and the shared bookkeeping of its ejections.
pub(crate) struct Filter {
    zone: Option<Box<str>>,
    min_healthy_percent: u64,
    outlier: Option<OutlierConfig>,
    /// Process-unique: keys the per-thread view cache.
    uid: u64,
    /// Ejected invokers of the current set (expired ones included until a sweep lifts them).
    live: AtomicU32,
    /// Earliest end of a live ejection (Unix ms); `i64::MAX` when none.
    next_expiry_ms: AtomicI64,
    /// Changes whenever the set of ejected invokers changes.
    epoch: AtomicU64,
    /// Serialises ejections and sweeps; holds the generation of the set that `live` and
    /// `next_expiry_ms` were counted from. A report or pick still running on a replaced set
    /// neither ejects nor sweeps there: its counts would stand for a set that is gone (an
    /// invoker ejected after it left kept every pick off the short paths until it expired).
    lock: Mutex<u64>,
}

/// The most invokers of a set of `n` that may be ejected at once.
fn ejection_budget(n: usize, percent: u32) -> usize {
    if n < 2 || percent == 0 {
        return 0;
    }
    (n * percent as usize / 100).max(1).min(n - 1)
}

impl Filter {
    /// None when no filter is configured (the balancer then skips all of this).
    pub fn new(config: &Config) -> Option<Filter> {
        let outlier = config.outlier.enabled().then(|| config.outlier.clone());
        if config.zone.is_none() && outlier.is_none() {
            return None;
        }
        Some(Filter {
            zone: config.zone.as_deref().map(Box::from),
            min_healthy_percent: config.zone_min_healthy_percent as u64,
            outlier,
            uid: NEXT_UID.fetch_add(1, Relaxed),
            live: AtomicU32::new(0),
            next_expiry_ms: AtomicI64::new(i64::MAX),
            epoch: AtomicU64::new(0),
            lock: Mutex::new(0),
        })
    }

    /// True while some invoker is ejected (expired ejections included, until a filtered pick
    /// lifts them), so that the pick takes the filtered path; otherwise the filter narrows a
    /// pick at most to the set's local zone (`Snapshot::local`).
    #[inline]
    pub fn restricts_now(&self) -> bool {
        self.live.load(Acquire) > 0
    }

    /// Whether this pick needs filtering at all; lifts expired ejections first. Reads the clock
    /// only while some invoker is ejected.
    pub fn needed(&self, snapshot: &Snapshot, clock: &Clock) -> bool {
        if self.live.load(Acquire) > 0 {
            if clock.now_ms() >= self.next_expiry_ms.load(Relaxed) {
                self.sweep(snapshot, clock.now_ms());
            }
            return true;
        }
        self.zone.is_some()
    }

    /// The local zone of a new set, for its snapshot. None when a pick with nothing ejected
    /// takes the whole set: no zone configured, or no invoker (or every invoker) local.
    pub fn local_zone(&self, members: &[Member]) -> Option<LocalZone> {
        self.zone.as_ref()?;
        if self.drained(members) {
            return None;
        }
        let positions: Box<[u32]> = (0..members.len() as u32)
            .filter(|&p| self.is_local(&members[p as usize]))
            .collect();
        if positions.is_empty() || positions.len() == members.len() {
            return None;
        }
        let mut mask = vec![0u64; members.len().div_ceil(64)];
        for &p in positions.iter() {
            mask[p as usize / 64] |= 1 << (p % 64);
        }
        Some(LocalZone {
            weights: SubsetWeights::new(members, &positions),
            mask: mask.into(),
            positions,
        })
    }

    fn is_local(&self, member: &Member) -> bool {
        matches!((&self.zone, &member.zone), (Some(z), Some(m)) if **z == **m)
    }

    fn is_ejected(&self, member: &Member) -> bool {
        self.outlier.is_some() && member.state.outlier.is_ejected()
    }

    /// Every local invoker weighs 0 while some other invoker does not: the zone is drained (its
    /// weights were set to 0 to move its traffic away), so it is preferred no more and calls
    /// go where the weights are, as a set's zero weights send them.
    fn drained<'m>(&self, members: impl IntoIterator<Item = &'m Member>) -> bool {
        let (mut local, mut local_weight, mut other_weight) = (false, false, false);
        for m in members {
            if self.is_local(m) {
                local = true;
                local_weight |= m.weight > 0;
            } else {
                other_weight |= m.weight > 0;
            }
        }
        local && !local_weight && other_weight
    }

    /// The local share as a 32-bit fixed-point probability: 1 << 32 = always local.
    fn local_share(&self, local_total: u64, local_healthy: u64) -> u64 {
        if local_total == 0 || local_healthy == 0 {
            return 0;
        }
        let needed = local_total * self.min_healthy_percent;
        if local_healthy * 100 >= needed {
            1 << 32
        } else {
            ((local_healthy * 100) << 32) / needed
        }
    }

    fn stays_local(share: u64, rng: &Rng) -> bool {
        share >= 1 << 32 || (share > 0 && rng.below(1 << 32) < share)
    }

    /// Runs `pick` over the filtered whole set (positions in set order, whether that is the
    /// whole set, and the membership mask).
    pub fn with_view<R>(
        &self,
        snapshot: &Snapshot,
        rng: &Rng,
        pick: impl FnOnce(&[u32], bool, &[u64], Option<&SubsetWeights>) -> R,
    ) -> R {
        if self.live.load(Acquire) == 0 {
            // Nothing ejected: every local invoker is healthy, so the local share is whole,
            // and the set's own local zone (or the whole set) is the view.
            return match &snapshot.local {
                Some(local) => pick(&local.positions, false, &local.mask, Some(&local.weights)),
                None => pick(&snapshot.all, true, &[], None),
            };
        }
        with_scratch(&VIEWS, |views| {
            self.pick_in_view(views, snapshot, rng, pick)
        })
    }

    /// `with_view` with this thread's views (or fresh ones).
    fn pick_in_view<R>(
        &self,
        views: &mut Views,
        snapshot: &Snapshot,
        rng: &Rng,
        pick: impl FnOnce(&[u32], bool, &[u64], Option<&SubsetWeights>) -> R,
    ) -> R {
        let epoch = self.epoch.load(Acquire);
        let slot = views.slot(self.uid, snapshot.generation, epoch);
        let view = &mut views.entries[slot];
        if !view.matches(self.uid, snapshot.generation, epoch) {
            self.build(view, snapshot);
            view.key = Some((self.uid, snapshot.generation, epoch));
        }
        let n = snapshot.members.len();
        if Self::stays_local(view.local_share, rng) {
            let is_all = view.local.len() == n;
            let weights = view.local_weights.as_ref().filter(|_| !is_all);
            pick(&view.local, is_all, &view.local_mask, weights)
        } else if view.healthy.len() == n {
            pick(&snapshot.all, true, &[], None)
        } else {
            let weights = view.healthy_weights.as_ref();
            pick(&view.healthy, false, &view.healthy_mask, weights)
        }
    }

    fn build(&self, view: &mut View, snapshot: &Snapshot) {
        let n = snapshot.members.len();
        let words = n.div_ceil(64);
        view.healthy.clear();
        view.local.clear();
        view.healthy_mask.clear();
        view.healthy_mask.resize(words, 0);
        view.local_mask.clear();
        view.local_mask.resize(words, 0);
        let mut local_total = 0u64;
        // Drained among the invokers a pick can get: a zone whose weighted invokers are all
        // ejected is left with zero weights only, which must not draw its share of the calls.
        let drained = self.drained(snapshot.members.iter().filter(|m| !self.is_ejected(m)));
        for (pos, m) in snapshot.members.iter().enumerate() {
            let local = !drained && self.is_local(m);
            local_total += local as u64;
            if self.is_ejected(m) {
                continue;
            }
            view.healthy.push(pos as u32);
            view.healthy_mask[pos / 64] |= 1 << (pos % 64);
            if local {
                view.local.push(pos as u32);
                view.local_mask[pos / 64] |= 1 << (pos % 64);
            }
        }
        if view.healthy.is_empty() {
            // Cannot happen with the ejection budget, but never leave a pick without candidates.
            view.healthy.extend(0..n as u32);
            view.healthy_mask.fill(u64::MAX);
        }
        view.local_share = self.local_share(local_total, view.local.len() as u64);
        view.healthy_weights = Some(SubsetWeights::new(&snapshot.members, &view.healthy));
        view.local_weights = Some(SubsetWeights::new(&snapshot.members, &view.local));
    }

    /// Filters a subset call's candidates in place (positions in set order and their mask):
    /// ejected invokers leave unless none would remain, then the zone preference applies.
    pub fn restrict(
        &self,
        snapshot: &Snapshot,
        mask: &mut [u64],
        positions: &mut Vec<u32>,
        rng: &Rng,
    ) {
        let members = &snapshot.members;
        let ejected = |p: u32| self.is_ejected(&members[p as usize]);
        // Zone health counts the caller's local candidates, ejected ones included; drained is
        // decided among those not ejected, as for the whole set.
        let (mut local_total, mut local_healthy) = (0u64, 0u64);
        let healthy = positions.iter().filter(|&&p| !ejected(p));
        if self.zone.is_some() && !self.drained(healthy.map(|&p| &members[p as usize])) {
            for &p in positions.iter() {
                if self.is_local(&members[p as usize]) {
                    local_total += 1;
                    local_healthy += !ejected(p) as u64;
                }
            }
        }
        let mut keep_local = false;
        if local_healthy > 0 {
            keep_local = Self::stays_local(self.local_share(local_total, local_healthy), rng);
        }
        let any_ejected = self.outlier.is_some() && self.live.load(Acquire) > 0;
        if !keep_local && !any_ejected {
            return;
        }
        let keep = |p: u32| !ejected(p) && (!keep_local || self.is_local(&members[p as usize]));
        // Decide once per candidate (another thread may eject meanwhile), in the mask.
        let mut kept = 0;
        for &p in positions.iter() {
            if keep(p) {
                kept += 1;
            } else {
                mask[p as usize / 64] &= !(1 << (p % 64));
            }
        }
        if kept == 0 {
            // Never leave the call without a candidate: if all of its own candidates are
            // ejected, they are used anyway.
            for &p in positions.iter() {
                mask[p as usize / 64] |= 1 << (p % 64);
            }
            return;
        }
        positions.retain(|&p| mask[p as usize / 64] & (1 << (p % 64)) != 0);
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
        let members = &snapshot.members;
        let ejected = members
            .iter()
            .filter(|m| m.state.outlier.is_ejected())
            .count();
        if ejected >= ejection_budget(members.len(), cfg.max_ejection_percent) {
            // Over budget: the invoker stays; its next failure tries again.
            return;
        }
        let mut n = state.ejections.load(Relaxed);
        let lifted = state.lifted_ms.load(Relaxed);
        if lifted > 0 {
            // One step of back-off is forgiven per base period without an ejection.
            let forgiven = now_ms.saturating_sub(lifted).max(0) / cfg.base_ejection_ms;
            n = n.saturating_sub(forgiven.min(u32::MAX as i64) as u32);
        }
        n = n.saturating_add(1);
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
        self.epoch.fetch_add(1, Release);
    }

    /// Lifts the ejections that are over. Skipped when another thread holds the lock (it is
    /// sweeping or ejecting; the next pick checks again).
    fn sweep(&self, snapshot: &Snapshot, now_ms: i64) {
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
            if until != 0 && until <= now_ms {
                state.reset_counts();
                state.lifted_ms.store(now_ms.max(1), Relaxed);
                state.ejected_until_ms.store(0, Relaxed);
                lifted = true;
            }
        }
        lifted
    }

    /// Live count and next expiry from the members' states (caller holds the lock).
    fn recount(&self, snapshot: &Snapshot) {
        let mut live = 0;
        let mut next = i64::MAX;
        for m in snapshot.members.iter() {
            let until = m.state.outlier.ejected_until_ms.load(Relaxed);
            if until != 0 {
                live += 1;
                next = next.min(until);
            }
        }
        self.next_expiry_ms.store(next, Relaxed);
        self.live.store(live, Release);
    }

    /// A new set was swapped in: ejections of departed invokers are gone, and a smaller set
    /// may hold more ejections than its budget (the ones ending first are lifted).
    pub fn after_update(&self, snapshot: &Snapshot) {
        let Some(cfg) = &self.outlier else { return };
        let mut current = self.lock.lock();
        *current = (*current).max(snapshot.generation);
        let budget = ejection_budget(snapshot.members.len(), cfg.max_ejection_percent);
        loop {
            let ejected: Vec<&Member> = snapshot
                .members
                .iter()
                .filter(|m| m.state.outlier.is_ejected())
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

    /// Extra JSON fields of one invoker in `stats` at `now_ms`.
    pub fn stats_fields(&self, member: &Member, now_ms: i64, out: &mut String) {
        if self.zone.is_some() {
            out.push_str(if self.is_local(member) {
                ",\"local\":true"
            } else {
                ",\"local\":false"
            });
        }
        if self.outlier.is_some() {
            let s = &member.state.outlier;
            out.push_str(&format!(
                ",\"ejected\":{},\"ejected_until_ms\":{},\"ejections\":{},\"consecutive_failures\":{}",
                s.is_ejected(),
                s.ejected_until_ms.load(Relaxed),
                s.ejections.load(Relaxed),
                s.consecutive.load(Relaxed)
            ));
        }
        if let Some(cfg) = self.outlier.as_ref().filter(|c| c.failure_rate_percent > 0) {
            // What the failure-rate rule will add the next report to, so that a reader can
            // tell whether that report can eject.
            let (calls, failures) = member.state.outlier.window_at(cfg.window_ms, now_ms);
            out.push_str(&format!(
                ",\"window_requests\":{calls},\"window_failures\":{failures}"
            ));
        }
    }
}

/// The local zone's invokers of one set, built on update: what a pick over the whole set
/// narrows to while no invoker is ejected (always, without outlier ejection), with no
/// per-thread view to look up.
pub(crate) struct LocalZone {
    /// Positions in set order (at least one, fewer than the whole set).
    pub positions: Box<[u32]>,
    /// Membership bitset over positions.
    pub mask: Box<[u64]>,
    pub weights: SubsetWeights,
}

/// One balancer's filtered whole set, as cached by one thread.
#[derive(Default)]
struct View {
    key: Option<(u64, u64, u64)>,
    healthy: Vec<u32>,
    healthy_mask: Vec<u64>,
    /// Draw tables of the two subsets (None until built).
    healthy_weights: Option<SubsetWeights>,
    local: Vec<u32>,
    local_mask: Vec<u64>,
    local_weights: Option<SubsetWeights>,
    local_share: u64,
}

impl View {
    fn matches(&self, uid: u64, generation: u64, epoch: u64) -> bool {
        self.key == Some((uid, generation, epoch))
    }
}

/// A few balancers' views per thread (a simulator may drive many balancers from one thread).
const CACHED: usize = 4;

#[derive(Default)]
struct Views {
    entries: [View; CACHED],
    next: usize,
}

impl Views {
    /// The entry of balancer `uid` (current or stale), or the one to reuse for it.
    fn slot(&mut self, uid: u64, _generation: u64, _epoch: u64) -> usize {
        if let Some(i) = self
            .entries
            .iter()
            .position(|v| v.key.is_some_and(|k| k.0 == uid))
        {
            return i;
        }
        let i = self.next;
        self.next = (self.next + 1) % CACHED;
        self.entries[i].key = None;
        i
    }
}

thread_local! {
    static VIEWS: RefCell<Views> = RefCell::new(Views::default());
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
