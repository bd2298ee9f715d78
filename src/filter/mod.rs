//! Candidate filters: outlier ejection and zone preference (every strategy), and subsetting
//! (the strategies that take it). The balancer applies them to a call's candidates before the
//! strategy runs, so a strategy sees a smaller candidate set and nothing else changes. With
//! none configured none of this runs, and Dubbo's strategies behave exactly as Dubbo's.
//!
//! - **Outlier ejection**: after `outlier.consecutiveFailures` failures in a row, or a failure
//!   rate of `outlier.failureRate` % over a window, an invoker is skipped for a back-off that
//!   grows with repeated ejections (`base × n`, capped). At most `outlier.maxEjectionPercent` of
//!   the set is ejected at once (at least one invoker, never all; 0 % never ejects), so a bad
//!   network cannot eject everyone; where weight 0 drains an invoker, the share is of the
//!   weighted ones, and a drained one is ejected outside it; and when a call's own candidates
//!   are all ejected, they are used anyway.
//! - **Zone preference**: with `zone=Z`, calls go to invokers of zone Z while at least
//!   `zone.minHealthyPercent` % of them are healthy (not ejected; where weight 0 drains an
//!   invoker, of the weighted ones, as for the ejection budget). Below that, the local share
//!   shrinks in proportion (healthy fraction / threshold) and the rest spills over to every
//!   healthy invoker; with no healthy local invoker, everything spills over. A zone whose
//!   healthy invokers all weigh 0 while other healthy ones do not is drained: it is preferred
//!   no more (also when its weighted invokers are the ones ejected).
//! - **Subsetting**: with `subset.size=K` the consumer's subset (see `subset.rs`; taken within
//!   the zone) takes the zone's place: it is "local", with `subset.minHealthyPercent` for the
//!   threshold, and everything above applies to it unchanged.
//!
//! Hot path: while nothing is ejected (always, without outlier ejection) a whole-set call
//! narrows at most to the set's local zone, built once on update (`LocalZone`, kept in the
//! snapshot), so the balancer's short paths draw from it directly. While invokers are ejected
//! the filtered candidate list depends on which, so each thread caches it (no allocation once
//! its buffers have grown) and rebuilds it only when an ejection starts or ends (an epoch
//! counter) or the set changes. Ejection decisions and the sweep that lifts expired
//! ejections take a per-balancer lock; they are rare events, never part of an ordinary pick.

mod outlier;
mod subset;
mod views;
mod zone;

pub(crate) use outlier::OutlierState;
pub(crate) use subset::Subsetting;
pub(crate) use zone::LocalZone;

use crate::balancer::Snapshot;
use crate::clock::Clock;
use crate::config::{Config, OutlierConfig};
use crate::rng::Rng;
use crate::strategy::StrategyKind;
use parking_lot::Mutex;
use std::fmt::Write as _;
use std::sync::atomic::{
    AtomicI64, AtomicU32, AtomicU64,
    Ordering::{Acquire, Relaxed},
};

static NEXT_UID: AtomicU64 = AtomicU64::new(1);

/// The filters of one balancer and the shared bookkeeping of its ejections.
pub(crate) struct Filter {
    zone: Option<Box<str>>,
    subset: Option<Subsetting>,
    /// The subset's threshold with subsetting, else the zone's.
    min_healthy_percent: u64,
    outlier: Option<OutlierConfig>,
    /// Process-unique: keys the per-thread view cache.
    uid: u64,
    /// Ejected invokers of the current set (expired ones included until a sweep lifts them).
    live: AtomicU32,
    /// Earliest end of a live ejection (Unix ms); `i64::MAX` when none.
    next_expiry_ms: AtomicI64,
    /// Latest end of a live ejection (Unix ms); `i64::MIN` when none. After the clock steps
    /// back, the ejection to lift first (see `outlier::ejection_over`) may be the latest.
    last_expiry_ms: AtomicI64,
    /// Changes whenever the set of ejected invokers changes.
    epoch: AtomicU64,
    /// Serialises ejections and sweeps; holds the generation of the set that `live` and
    /// `next_expiry_ms` were counted from. A report or pick still running on a replaced set
    /// neither ejects nor sweeps there: its counts would stand for a set that is gone (an
    /// invoker ejected after it left kept every pick off the short paths until it expired).
    lock: Mutex<u64>,
    /// Whether a weight of 0 takes an invoker's calls away while others weigh more: every
    /// strategy but `consistenthash`, whose ring ignores weights, `adaptive`, whose load
    /// formula only discounts them (`/ (success ratio × weight + 1)`), and `leastactive` and
    /// `shortestresponse`, which return their one least loaded (or fastest) invoker whatever
    /// its weight, as Dubbo's do. Such an invoker is then no capacity for the ejection budget
    /// to keep.
    weights_drain: bool,
}

impl Filter {
    /// None when no filter is configured (the balancer then skips all of this).
    pub fn new(config: &Config) -> Option<Filter> {
        let outlier = config.outlier.enabled().then(|| config.outlier.clone());
        let subset = Subsetting::new(&config.subset);
        if config.zone.is_none() && subset.is_none() && outlier.is_none() {
            return None;
        }
        Some(Filter {
            zone: config.zone.as_deref().map(Box::from),
            min_healthy_percent: match subset {
                Some(_) => config.subset.min_healthy_percent,
                None => config.zone_min_healthy_percent,
            } as u64,
            subset,
            outlier,
            uid: NEXT_UID.fetch_add(1, Relaxed),
            live: AtomicU32::new(0),
            next_expiry_ms: AtomicI64::new(i64::MAX),
            last_expiry_ms: AtomicI64::new(i64::MIN),
            epoch: AtomicU64::new(0),
            lock: Mutex::new(0),
            weights_drain: !matches!(
                config.strategy,
                StrategyKind::ConsistentHash
                    | StrategyKind::Adaptive
                    | StrategyKind::LeastActive
                    | StrategyKind::ShortestResponse
            ),
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
            let now_ms = clock.now_ms();
            let (next, last) = (
                self.next_expiry_ms.load(Relaxed),
                self.last_expiry_ms.load(Relaxed),
            );
            // An ejection is over when its end has passed (the earliest tells) or lies too far
            // ahead for one made since the clock stepped back (the latest tells).
            let max = self.max_ejection_ms();
            if outlier::ejection_over(next, now_ms, max)
                || outlier::ejection_over(last, now_ms, max)
            {
                self.sweep(snapshot, now_ms);
            }
            return true;
        }
        self.prefers()
    }

    /// Whether calls prefer some invokers: a zone's, or a subset.
    pub fn prefers(&self) -> bool {
        self.zone.is_some() || self.subset.is_some()
    }

    /// The longest an ejection lasts (no ejection without outlier ejection configured).
    fn max_ejection_ms(&self) -> i64 {
        self.outlier
            .as_ref()
            .map_or(i64::MAX, |o| o.max_ejection_ms)
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
        let local = |p: u32| self.is_local(snapshot, p);
        // Zone (or subset) health counts the caller's local candidates, ejected ones included;
        // drained is decided among those not ejected, as for the whole set.
        let (mut local_total, mut local_healthy) = (0u64, 0u64);
        let healthy = positions.iter().copied().filter(|&p| !ejected(p));
        if self.prefers() && !self.drained(members, local, healthy) {
            let counts = self.health_counter(members, positions.iter().copied());
            for &p in positions.iter() {
                if local(p) && counts(&members[p as usize]) {
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
        let keep = |p: u32| !ejected(p) && (!keep_local || local(p));
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

    /// Extra JSON fields of the invoker at set position `p` in `stats` at `now_ms`.
    pub fn stats_fields(&self, snapshot: &Snapshot, p: u32, now_ms: i64, out: &mut String) {
        let member = &snapshot.members[p as usize];
        if self.zone.is_some() {
            out.push_str(if self.in_zone(member) {
                ",\"local\":true"
            } else {
                ",\"local\":false"
            });
        }
        if self.subset.is_some() {
            out.push_str(if self.is_local(snapshot, p) {
                ",\"in_subset\":true"
            } else {
                ",\"in_subset\":false"
            });
        }
        if self.outlier.is_some() {
            let s = &member.state.outlier;
            let _ = write!(out,
                ",\"ejected\":{},\"ejected_until_ms\":{},\"ejections\":{},\"consecutive_failures\":{}",
                s.is_ejected(),
                s.ejected_until_ms.load(Relaxed),
                s.ejections.load(Relaxed),
                s.consecutive.load(Relaxed)
            );
        }
        if let Some(cfg) = self.outlier.as_ref().filter(|c| c.failure_rate_percent > 0) {
            // What the failure-rate rule will add the next report to, so that a reader can
            // tell whether that report can eject.
            let (calls, failures) = member.state.outlier.window_at(cfg.window_ms, now_ms);
            let _ = write!(
                out,
                ",\"window_requests\":{calls},\"window_failures\":{failures}"
            );
        }
    }
}
