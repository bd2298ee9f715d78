//! `roundrobin`: smooth weighted round robin, exactly Dubbo's sequence (RoundRobinLoadBalance).
//!
//! Dubbo walks every invoker on every pick (O(n)). With static weights the sequence from a given
//! state is periodic with period Σw/gcd(w), so polylb computes one period ahead (on update, or once
//! enough O(n) picks have paid for it) and then serves picks in O(1) from it, producing the
//! identical sequence. A live period is published for lock-free picks: each takes a ticket from one
//! atomic cursor, so threads do not serialise on the method's lock. Where a period is too long to
//! keep (weights with a large sum and gcd 1) or the state is not yet on its cycle, picks come from
//! a tournament over the counters under the lock, the same sequence: one heap per distinct weight
//! when there are at most 8 ([`ClassWrr`], O(k + log n) for k weights), else a kinetic tournament
//! ([`SmoothWrr`], O(log n) amortised). A tournament's picks are counted in a sliding window of a
//! period, so the first pick that brings the counters back to where they were a period earlier
//! hands the method over to that period. While invokers warm up (weights that change with time),
//! whole-set picks step the warming invokers' counters one by one and the others in the tournament
//! ([`WarmingWrr`]): O(k + log n) for k in warm-up. With a zone preference every whole-set pick
//! narrows to the local zone (while nothing is ejected), so the zone is the set that periods and
//! the tournaments (the warm-up one too) serve ([`PickSet`]); the remote invokers' counters age towards recycling as
//! Dubbo's walk over the local ones leaves them. A subset that comes twice in a row (a router's
//! candidates) gets a tournament of its own ([`Subset`]); other subsets, and subsets while invokers
//! warm up, take Dubbo's O(m) walk. Counters are per method, keyed by invoker id; an invoker that
//! leaves keeps its counter until a select finds it unused for more than 60 s (Dubbo's recycling),
//! so one re-added within that period resumes where it was.
//!
//! The code: [`period`] computes periods ([`by_weight`] the one from all-zero counters over few
//! distinct weights), [`live`] publishes and serves a live period
//! lock-free, [`state`] holds the per-method counters, [`fast_path`] sets up and serves the
//! period or tournament under the lock, [`tournaments`] serves subsets and warm-up, [`parked`]
//! keeps the counters compact while the set is empty (a binding's close);
//! [`weight_classes`], [`smooth_wrr`] and [`warming_wrr`] are the tournaments themselves.
//!
//! [`ClassWrr`]: weight_classes::ClassWrr
//! [`SmoothWrr`]: smooth_wrr::SmoothWrr
//! [`WarmingWrr`]: warming_wrr::WarmingWrr
//! [`Subset`]: tournaments::Subset

mod by_weight;
#[cfg(test)]
mod concurrency_tests;
mod fast_path;
mod live;
mod parked;
mod period;
mod smooth_wrr;
mod state;
mod tournaments;
mod warming_wrr;
mod weight_classes;

pub(crate) use live::serve_live;

use super::{Ctx, Prepared, PreparedData, Strategy, StrategyKind};
use crate::balancer::{Member, MethodState, Snapshot};
use crate::clock::Clock;
use crate::error::Status;
use crate::filter::LocalZone;
use crate::once_box::OnceBox;
use live::LiveSlots;
use parking_lot::Mutex;
use period::{fresh_period, FreshPeriod};
use state::PerMethod;
use std::sync::atomic::{AtomicU8, Ordering::Relaxed};

pub(crate) struct RoundRobin;

/// Dubbo's RECYCLE_PERIOD: a constant, not configurable.
const RECYCLE_MS: i64 = 60_000;

const UNDECIDED: u8 = 0;
const SAME: u8 = 1;
const CHANGED: u8 = 2;

/// What a snapshot carries for round robin.
struct SnapshotData {
    /// None when no period fits the set.
    fresh: Option<FreshPeriod>,
    lives: LiveSlots,
    /// The generation of the previous snapshot when every member kept its id, weight, start
    /// time and warm-up in the same place (a registry that pushes the set again unchanged).
    unchanged_from: Option<u64>,
    /// Whether the pick set (with the local zone) is also the previous one's, decided by the
    /// first method the update reaches so that the others do not compare the zone again:
    /// `UNDECIDED`, `SAME` or `CHANGED`. Not a `OnceLock`, whose racing readers wait for its
    /// initialiser (for ever in the child of a `fork` taken meanwhile): racing methods both
    /// compare, and find the same.
    same_pick_set: AtomicU8,
    /// The invokers of the previous snapshot's pick set that are not in this one's, found by
    /// the first method the update reaches for the others (each method's entries of them join
    /// its `departed`, where finding them costs O(n) a method).
    left_pick_set: OnceBox<LeftPickSet>,
}

struct LeftPickSet {
    /// The generation of the snapshot they left.
    from: u64,
    ids: Box<[u64]>,
}

impl SnapshotData {
    fn of(snapshot: &Snapshot) -> Option<&SnapshotData> {
        snapshot.prepared.as_ref()?.downcast_ref::<SnapshotData>()
    }

    /// The invokers of `previous`'s pick set that are not in `snapshot`'s (None when
    /// `snapshot` is not round robin's).
    fn left_pick_set<'a>(snapshot: &'a Snapshot, previous: &Snapshot) -> Option<&'a [u64]> {
        let left = SnapshotData::of(snapshot)?.left_pick_set.get_or_init(|| {
            let (from, to) = (PickSet::of(previous), PickSet::of(snapshot));
            Box::new(LeftPickSet {
                from: previous.generation,
                ids: from
                    .members()
                    .map(|m| m.id)
                    .filter(|&id| !to.contains(id))
                    .collect(),
            })
        });
        (left.from == previous.generation).then_some(&*left.ids)
    }

    /// True when picks on `snapshot` go on exactly as on `previous`: the same invokers in
    /// the same places, with the same weights, and the same local zone.
    fn continues(snapshot: &Snapshot, previous: &Snapshot) -> bool {
        let Some(data) = SnapshotData::of(snapshot) else {
            return false;
        };
        if data.unchanged_from != Some(previous.generation) {
            return false;
        }
        match data.same_pick_set.load(Relaxed) {
            SAME => true,
            CHANGED => false,
            _ => {
                let positions = |s: &Snapshot| s.local.as_ref().map(|l| l.positions.clone());
                let same = positions(snapshot) == positions(previous);
                data.same_pick_set
                    .store(if same { SAME } else { CHANGED }, Relaxed);
                same
            }
        }
    }
}

/// True when `members` are `previous`'s members with what round robin reads unchanged.
fn unchanged(members: &[Member], previous: &Snapshot) -> bool {
    members.len() == previous.members.len()
        && members.iter().zip(previous.members.iter()).all(|(a, b)| {
            a.id == b.id
                && a.weight == b.weight
                && a.start_time_ms == b.start_time_ms
                && a.warmup_ms == b.warmup_ms
        })
}

/// The invokers a whole-set select of a snapshot picks among: the whole set, or its local zone
/// when a zone preference narrows every such pick (`Snapshot::local`, nothing ejected). Its
/// picks are the ones a period or the set's tournament serves.
#[derive(Clone, Copy)]
struct PickSet<'a> {
    snapshot: &'a Snapshot,
    /// None: the whole set.
    local: Option<&'a LocalZone>,
}

impl<'a> PickSet<'a> {
    fn of(snapshot: &'a Snapshot) -> PickSet<'a> {
        PickSet {
            snapshot,
            local: snapshot.local.as_ref(),
        }
    }

    /// The whole set, where a local zone is the pick set (a spill-over's picks).
    fn whole(snapshot: &'a Snapshot) -> PickSet<'a> {
        PickSet {
            snapshot,
            local: None,
        }
    }

    /// True when `ctx`'s candidates are this pick set (the local zone is recognised by
    /// identity: the filter hands out the snapshot's own positions).
    fn is_candidates_of(ctx: &Ctx<'_>) -> bool {
        match &ctx.snapshot.local {
            None => ctx.is_all,
            Some(local) => std::ptr::eq(&*local.positions, ctx.candidates),
        }
    }

    /// The position in the set of each index of the pick set.
    fn each_position(&self) -> impl Iterator<Item = u32> + 'a {
        let local = self.local;
        (0..self.members().len() as u32).map(move |j| local.map_or(j, |l| l.positions[j as usize]))
    }

    fn members(&self) -> impl ExactSizeIterator<Item = &'a Member> + 'a {
        let members = &self.snapshot.members;
        let local = self.local;
        (0..local.map_or(members.len(), |l| l.positions.len()))
            .map(move |j| &members[local.map_or(j, |l| l.positions[j] as usize)])
    }

    /// Whether the invoker `id` is in the pick set (its entry is updated by every pick).
    fn contains(&self, id: u64) -> bool {
        let Some(pos) = self.snapshot.position(id) else {
            return false;
        };
        self.local.is_none_or(|l| l.contains(pos))
    }
}

impl Strategy for RoundRobin {
    fn kind(&self) -> StrategyKind {
        StrategyKind::RoundRobin
    }

    fn tracks_reports(&self) -> bool {
        false
    }

    fn reads_in_flight(&self) -> bool {
        false
    }

    fn prepare(&self, members: &[Member], previous: &Snapshot) -> Prepared {
        // A set pushed again unchanged keeps its period from all-zero counters (simulating it
        // costs up to about 20 ms).
        let kept = SnapshotData::of(previous).filter(|_| unchanged(members, previous));
        Some(PreparedData::new(SnapshotData {
            fresh: match kept {
                Some(data) => data.fresh.clone(),
                None => fresh_period(members),
            },
            lives: LiveSlots::new(),
            unchanged_from: kept.map(|_| previous.generation),
            same_pick_set: AtomicU8::new(UNDECIDED),
            left_pick_set: OnceBox::new(),
        }))
    }

    fn select(&self, ctx: &Ctx<'_>) -> Result<usize, Status> {
        let per_method = ctx.method.ext(|| PerMethod {
            method_id: ctx.method_id,
            state: Mutex::default(),
        });
        let now_ms = ctx.clock.now_ms();
        let static_weights = ctx.weights_static();
        let fast = static_weights && PickSet::is_candidates_of(ctx);
        if fast {
            if let Some(pos) = serve_live(ctx.snapshot, ctx.method_id, now_ms) {
                return Ok(pos);
            }
        }
        let mut st = per_method.state.lock();
        st.close_live();
        if fast {
            if let Some(pos) = st.serve_fast(per_method.method_id, ctx.snapshot, now_ms) {
                return Ok(pos);
            }
            st.materialize();
            // A fresh method, or one whose period or tournament a failover's pick (or warm-up)
            // interrupted: rebuild first (O(n)), so that this pick is served from it too. Only
            // while every weight is zero does this wait, and walk.
            if st.slow_picks >= st.rebuild_at {
                st.rebuild_fast_path(ctx.snapshot, now_ms);
                if let Some(pos) = st.serve_fast(per_method.method_id, ctx.snapshot, now_ms) {
                    return Ok(pos);
                }
            }
            st.slow_picks += 1;
        } else if !static_weights && (ctx.is_all || PickSet::is_candidates_of(ctx)) {
            let is_pick_set = PickSet::is_candidates_of(ctx);
            return Ok(st.serve_warming(ctx.snapshot, is_pick_set, now_ms));
        } else if static_weights {
            if let Some(pos) = st.serve_subset(ctx, now_ms) {
                return Ok(pos);
            }
        } else {
            st.materialize();
        }
        Ok(st.walk(ctx, now_ms))
    }

    fn after_update(
        &self,
        method: &MethodState,
        _method_id: u32,
        snapshot: &Snapshot,
        previous: &Snapshot,
        clock: &Clock,
    ) {
        let Some(per_method) = method.ext_if_present::<PerMethod>() else {
            return;
        };
        let mut st = per_method.state.lock();
        st.close_live();
        // The time of the latest select, which may be the caller's own, not the library's.
        let now_ms = if st.last_select_ms != 0 {
            st.last_select_ms
        } else {
            clock.now_ms()
        };
        // Building resets the counter of an invoker whose weight changed, as the next select
        // would: only right if that select finds the weights static. Judged on the selects'
        // timeline: a caller passing its own time may still be within a warm-up that the
        // library's clock has long passed.
        let until = snapshot.time_dependent_until_ms;
        let static_weights = until == i64::MIN || now_ms >= until;
        // The same set again: the period or tournament serving it goes on as it is, where
        // rebuilding it costs O(n) per method (seconds for a thousand methods over 10,000
        // invokers).
        if static_weights
            && SnapshotData::continues(snapshot, previous)
            && st.carry_over(previous.generation, snapshot.generation)
        {
            // The same pick set: the entries outside it are the same.
            if st.departed_of == Some(previous.generation) {
                st.departed_of = Some(snapshot.generation);
            }
            st.open_live(snapshot, per_method.method_id);
            return;
        }
        if snapshot.members.is_empty() {
            st.park();
            return;
        }
        let idle = !st.picked_since_build;
        st.materialize();
        if !static_weights || idle {
            // The first whole-set select at static weights builds it; likewise for a method
            // no select was served to since the last build, which may see none before the
            // next update either (an update built every method's picks, about 31 µs a method at
            // n = 1,000, most of them rarely called).
            st.slow_picks = st.rebuild_at;
        } else if !st.build_fast_path(snapshot, now_ms) {
            st.forget_departed();
            return;
        }
        // The invokers that left the pick set join the entries known to be outside it, so
        // that recycling needs no walk of the entries kept for 60 s (thousands per method
        // under steady churn, walked by the first select after every update).
        match SnapshotData::left_pick_set(snapshot, previous) {
            Some(left) if st.carry_departed(previous.generation, left, snapshot.generation) => {
                st.oldest_departed_ms = st.oldest_known_departed();
            }
            _ => st.forget_departed(),
        }
        if static_weights && !idle {
            st.open_live(snapshot, per_method.method_id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fast_path::BUILDS;
    use super::state::PerMethod;
    use crate::{Balancer, Invoker};

    fn builds() -> u64 {
        BUILDS.with(|b| b.get())
    }

    /// A registry pushes the same set again: no method's period or tournament is rebuilt
    /// (O(n) each), and the sequence goes on exactly as without the update.
    fn same_set_again(config: &str, set: &[Invoker], picks: usize) {
        let (once, twice) = (
            Balancer::new(config).unwrap(),
            Balancer::new(config).unwrap(),
        );
        once.update(set).unwrap();
        twice.update(set).unwrap();
        let now_us = 1_700_000_000_000_000;
        let methods: Vec<u32> = (0..20)
            .map(|m| once.method(&format!("m{m}")).unwrap())
            .collect();
        for b in [&once, &twice] {
            assert_eq!(
                methods,
                (0..20)
                    .map(|m| b.method(&format!("m{m}")).unwrap())
                    .collect::<Vec<_>>()
            );
        }
        let seq = |b: &Balancer, round: usize| -> Vec<u64> {
            let mut out = Vec::new();
            for (k, &m) in methods.iter().enumerate() {
                for _ in 0..picks + k + round {
                    out.push(b.select(m, b"", now_us).unwrap());
                }
            }
            out
        };
        assert_eq!(seq(&once, 0), seq(&twice, 0));
        let before = builds();
        twice.update(set).unwrap();
        assert_eq!(
            builds(),
            before,
            "{config}: an unchanged set rebuilt a method's picks"
        );
        assert_eq!(seq(&once, 1), seq(&twice, 1), "{config}");
        // A changed set still rebuilds each method's picks.
        let mut changed = set.to_vec();
        changed[0].weight += 1;
        once.update(&changed).unwrap();
        twice.update(&changed).unwrap();
        assert!(builds() >= before + 2 * methods.len() as u64);
        assert_eq!(seq(&once, 2), seq(&twice, 2), "{config}");
    }

    fn set(n: u64, weight: impl Fn(u64) -> i32, zoned: bool) -> Vec<Invoker> {
        (0..n)
            .map(|i| {
                let inv = Invoker::new(i, format!("10.0.0.{i}:1")).weight(weight(i));
                if zoned {
                    inv.zone(if i % 3 == 0 { "far" } else { "near" })
                } else {
                    inv
                }
            })
            .collect()
    }

    /// A set pushed again unchanged carries each method's period into a snapshot whose share
    /// of live periods is its own: a period that the previous snapshot refused (its share used
    /// up by another method's failovers) goes lock-free there, and an order recorded from the
    /// method's counters is counted in the new share.
    #[test]
    fn a_carried_period_is_offered_to_the_new_snapshot_and_counted_there() {
        use super::live::LiveSlots;
        let b = Balancer::new("loadbalance=roundrobin").unwrap();
        let now_us = 1_700_000_000_000_000;
        let (m0, m1) = (b.method("m0").unwrap(), b.method("m1").unwrap());
        b.update(&set(3, |i| 1 + i as i32, false)).unwrap();
        b.select(m0, b"", now_us).unwrap();
        b.select(m0, b"", now_us).unwrap();
        // A weight changes while m0's counters are not zero: its next period is recorded from
        // them (9 picks), not the set's fresh one.
        let changed = set(3, |i| if i == 0 { 4 } else { 1 + i as i32 }, false);
        b.update(&changed).unwrap();
        for _ in 0..9 {
            b.select(m0, b"", now_us).unwrap();
        }
        assert_eq!(LiveSlots::usage(&b.snapshot_for_tests(), m0), (true, 1, 9));
        // Each failover of m0 ends its period, and the next one its tournament records is
        // published, until the snapshot's share is used up; m1's period is then refused.
        for _ in 0..600 {
            for _ in 0..10 {
                b.select(m0, b"", now_us).unwrap();
            }
            b.select_among(m0, b"", &[0, 1], &[], now_us).unwrap();
        }
        // m0's last recorded period and m1's are refused.
        for _ in 0..10 {
            b.select(m0, b"", now_us).unwrap();
            b.select(m1, b"", now_us).unwrap();
        }
        let first = b.snapshot_for_tests();
        let (m1_live, lives, _) = LiveSlots::usage(&first, m1);
        assert!(!m1_live && lives == 512, "the share is used up");
        b.update(&changed).unwrap();
        let again = b.snapshot_for_tests();
        assert_ne!(first.generation, again.generation);
        assert!(
            LiveSlots::usage(&again, m1).0,
            "m1's period, refused before, is published"
        );
        // m0's recorded order is counted in the new snapshot's share; m1's, the snapshot's
        // fresh period, is not.
        assert_eq!(LiveSlots::usage(&again, m0), (true, 2, 9));
    }

    /// The set at the i-th update of a steady churn: five invokers, two of them new at each
    /// update, weighted so that counters stay non-zero between picks (entries are kept).
    fn churned(i: u64) -> Vec<Invoker> {
        (0..5)
            .map(|k| {
                let id = i * 2 + k;
                Invoker::new(id, format!("10.0.{}.{}:1", id / 250, id % 250))
                    .weight(1 + (id % 3) as i32)
            })
            .collect()
    }

    fn entries_walked() -> u64 {
        super::state::ENTRIES_WALKED.with(|w| w.get())
    }

    /// Under steady churn each method keeps the entries of invokers that left for 60 s: an
    /// update, which builds every method's picks, does not walk them (it did, milliseconds
    /// per update for 100 methods), nor does the first select of a method after it.
    #[test]
    fn an_update_does_not_walk_the_entries_of_invokers_that_left() {
        let b = Balancer::new("loadbalance=roundrobin").unwrap();
        let methods: Vec<u32> = (0..20)
            .map(|m| b.method(&format!("m{m}")).unwrap())
            .collect();
        let base_us = 1_700_000_000_000_000;
        let mut i = 0;
        let step = |b: &Balancer, i: &mut u64| {
            b.update(&churned(*i)).unwrap();
            for &m in &methods {
                for _ in 0..2 {
                    b.select(m, b"", base_us + *i as i64 * 1000).unwrap();
                }
            }
            *i += 1;
        };
        for _ in 0..300 {
            step(&b, &mut i);
        }
        let before = entries_walked();
        b.update(&churned(i)).unwrap();
        let by_update = entries_walked() - before;
        assert!(
            by_update <= 5 * methods.len() as u64,
            "an update walked {by_update} entries"
        );
        let before = entries_walked();
        b.select(methods[0], b"", base_us + i as i64 * 1000)
            .unwrap();
        let by_select = entries_walked() - before;
        let kept = b
            .method_state_for_tests(methods[0])
            .unwrap()
            .ext_if_present::<PerMethod>()
            .unwrap()
            .state
            .lock()
            .entries
            .len();
        assert!(kept > 100, "only {kept} entries kept: too few for the test");
        // Nothing is due for recycling yet: the select walks none of them either.
        assert!(
            by_select <= 5,
            "the first select walked {by_select} entries"
        );
    }

    /// One method selected after every update of a steadily churning set keeps the entries of
    /// the invokers that left for 60 s (thousands): recycling them takes only the due ones, not
    /// a walk of them all after every update (1 ms per update at 1,000 updates/s), and entries
    /// older than 60 s still go.
    #[test]
    fn selects_under_churn_do_not_walk_the_entries_of_invokers_that_left() {
        churn_walks(false, false);
    }

    /// The same while the invokers warm up (as they do through a rolling deployment).
    #[test]
    fn warming_selects_under_churn_do_not_walk_the_entries_of_invokers_that_left() {
        churn_walks(true, false);
    }

    /// The same while the invokers warm up and a zone narrows the picks to its own: the picks
    /// came from Dubbo's walk over the zone, which went through every entry kept (62 µs an
    /// update at 1,000 updates/s).
    #[test]
    fn zoned_warming_selects_under_churn_do_not_walk_the_entries_of_invokers_that_left() {
        churn_walks(true, true);
    }

    fn churn_walks(warming: bool, zoned: bool) {
        let b = Balancer::new(match zoned {
            true => "loadbalance=roundrobin&zone=z0",
            false => "loadbalance=roundrobin",
        })
        .unwrap();
        let m = b.method("m").unwrap();
        let base_us = 1_700_000_000_000_000;
        // 100 s of updates 10 ms apart, a select after each.
        let steps = 10_000u64;
        let mut walked_late = 0;
        for i in 0..steps {
            if i == steps - 1_000 {
                walked_late = entries_walked();
            }
            let mut set = churned(i);
            if zoned {
                // Three of the five in the local zone; one of them leaves at each update. Weights
                // that warm-up does not flatten to 1, whose counters would be back at zero at
                // every departure (and kept as no entry).
                for inv in &mut set {
                    *inv = inv
                        .clone()
                        .zone(["z0", "z1"][inv.id as usize % 2])
                        .weight(inv.weight * 1_000);
                }
            }
            if warming {
                // Started at the run's start, warming up for longer than it lasts.
                for inv in &mut set {
                    *inv = inv
                        .clone()
                        .start_time_ms(base_us / 1000)
                        .warmup_ms(1_000_000);
                }
            }
            b.update(&set).unwrap();
            b.select(m, b"", base_us + i as i64 * 10_000).unwrap();
        }
        let walked_late = entries_walked() - walked_late;
        let kept = {
            let per_method = b
                .method_state_for_tests(m)
                .unwrap()
                .ext_if_present::<PerMethod>()
                .unwrap();
            let st = per_method.state.lock();
            st.entries.len()
        };
        // 60 s at 2 departures per 10 ms (1 from the local zone, where the picks are): about
        // 12,000 entries kept (6,000), none older.
        let most = if zoned { 6_010 } else { 12_010 };
        assert!(kept > most / 2 && kept <= most, "{kept} entries kept");
        // The last 1,000 selects each recycle the two entries that came due.
        assert!(
            walked_late <= 10 * 1_000,
            "the last 1,000 selects walked {walked_late} entries ({kept} kept)"
        );
    }

    /// An update builds the picks of the methods called since the last one only: the others
    /// build at their next select, whose sequence is Dubbo's from the counters they had.
    #[test]
    fn an_update_builds_only_the_methods_called_since_the_last() {
        use crate::dubbo_round_robin::DubboRoundRobin;
        let b = Balancer::new("loadbalance=roundrobin").unwrap();
        let now_us = 1_700_000_000_000_000;
        let first = set(30, |i| 100 + 50 * (i % 3) as i32, false);
        let mut second = first.clone();
        second[4] = Invoker::new(99, "10.0.1.99:1").weight(170);
        let mut third = second.clone();
        third[7].weight = 20;
        let list =
            |s: &[Invoker]| -> Vec<(u64, i32)> { s.iter().map(|i| (i.id, i.weight)).collect() };
        let methods: Vec<u32> = (0..20)
            .map(|m| b.method(&format!("m{m}")).unwrap())
            .collect();
        let mut models = vec![DubboRoundRobin::default(); methods.len()];
        b.update(&first).unwrap();
        for (k, &m) in methods.iter().enumerate() {
            for _ in 0..3 + k {
                let want = models[k].select(&list(&first), now_us / 1000, false);
                assert_eq!(b.select(m, b"", now_us).unwrap(), want);
            }
        }
        let before = builds();
        b.update(&second).unwrap();
        assert_eq!(
            builds(),
            before + methods.len() as u64,
            "every method was called"
        );
        let before = builds();
        b.update(&third).unwrap();
        assert_eq!(
            builds(),
            before,
            "no method was called since the last update"
        );
        for (k, &m) in methods.iter().enumerate() {
            let before = builds();
            for _ in 0..200 {
                let want = models[k].select(&list(&third), now_us / 1000, false);
                assert_eq!(b.select(m, b"", now_us).unwrap(), want, "method {k}");
            }
            assert_eq!(builds(), before + 1, "method {k} built at its next select");
        }
    }

    #[test]
    fn an_unchanged_set_keeps_every_methods_period() {
        same_set_again(
            "loadbalance=roundrobin",
            &set(50, |i| 100 + 50 * (i % 3) as i32, false),
            7,
        );
    }

    #[test]
    fn an_unchanged_set_keeps_every_methods_tournament() {
        // Weights with gcd 1 and a large sum: no period fits, the tournament serves.
        same_set_again(
            "loadbalance=roundrobin",
            &set(300, |i| 100_000 + 7 * i as i32, false),
            7,
        );
    }

    #[test]
    fn an_unchanged_zoned_set_keeps_every_methods_period() {
        same_set_again(
            "loadbalance=roundrobin&zone=near",
            &set(30, |i| 100 + 50 * (i % 3) as i32, true),
            5,
        );
    }
}
