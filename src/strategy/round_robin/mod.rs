//! `roundrobin`: smooth weighted round robin, exactly Dubbo's sequence (RoundRobinLoadBalance).
//!
//! Dubbo walks every invoker on every pick (O(n)). With static weights the sequence from a given
//! state is periodic with period Σw/gcd(w), so polylb computes one period ahead (on update, or
//! once enough O(n) picks have paid for it) and then serves picks in O(1) from it, producing the
//! identical sequence. A live period is published for lock-free picks: each takes a ticket from
//! one atomic cursor, so threads do not serialise on the method's lock. Where a period is too
//! long to keep (weights with a large sum and gcd 1) or the state is not yet on its cycle, picks
//! come from a kinetic tournament over the counters ([`SmoothWrr`]): the same sequence in
//! O(log n) amortised under the lock. While invokers warm up (weights that change with time),
//! whole-set picks step the warming invokers' counters one by one and the others in the
//! tournament ([`WarmingWrr`]): O(k + log n) for k in warm-up. With a zone preference every
//! whole-set pick narrows to the local zone (while nothing is ejected), so the zone is the set
//! that periods and the tournament serve ([`PickSet`]); the remote invokers' counters age
//! towards recycling as Dubbo's walk over the local ones leaves them. A subset that comes twice
//! in a row (a router's candidates) gets a tournament of its own ([`Subset`]); other subsets,
//! and subsets while invokers warm up, take Dubbo's O(m) walk. Counters are per method, keyed
//! by invoker id; an invoker that leaves keeps its counter until a select finds it unused for
//! more than 60 s (Dubbo's recycling), so one re-added within that period resumes where it was.
//!
//! The code: [`period`] computes periods, [`live`] publishes and serves a live period
//! lock-free, [`state`] holds the per-method counters, [`fast_path`] sets up and serves the
//! period or tournament under the lock, [`tournaments`] serves subsets and warm-up;
//! [`smooth_wrr`] and [`warming_wrr`] are the tournaments themselves.
//!
//! [`SmoothWrr`]: smooth_wrr::SmoothWrr
//! [`WarmingWrr`]: warming_wrr::WarmingWrr
//! [`Subset`]: tournaments::Subset

mod fast_path;
mod live;
mod period;
mod smooth_wrr;
mod state;
mod tournaments;
mod warming_wrr;

pub(crate) use live::serve_live;

use super::{Ctx, Prepared, PreparedData, Strategy, StrategyKind};
use crate::balancer::{Member, MethodState, Snapshot};
use crate::clock::Clock;
use crate::error::Status;
use crate::filter::LocalZone;
use live::LiveSlots;
use parking_lot::Mutex;
use period::{fresh_period, FreshPeriod};
use state::PerMethod;

pub(crate) struct RoundRobin;

/// Dubbo's RECYCLE_PERIOD: a constant, not configurable.
const RECYCLE_MS: i64 = 60_000;

/// What a snapshot carries for round robin.
struct SnapshotData {
    /// None when no period fits the set.
    fresh: Option<FreshPeriod>,
    lives: LiveSlots,
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
        self.local
            .map_or(true, |l| l.mask[pos / 64] & (1 << (pos % 64)) != 0)
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

    fn prepare(&self, members: &[Member], _previous: &Snapshot) -> Prepared {
        Some(PreparedData::new(SnapshotData {
            fresh: fresh_period(members),
            lives: LiveSlots::new(),
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
        } else if ctx.is_all && !static_weights {
            return Ok(st.serve_warming(ctx.snapshot, now_ms));
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
        _previous: &Snapshot,
        clock: &Clock,
    ) {
        let Some(per_method) = method.ext_if_present::<PerMethod>() else {
            return;
        };
        let mut st = per_method.state.lock();
        st.close_live();
        st.materialize();
        if snapshot.members.is_empty() {
            return;
        }
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
        if until != i64::MIN && now_ms < until {
            // The first whole-set select at static weights builds it.
            st.slow_picks = st.rebuild_at;
        } else if st.build_fast_path(snapshot, now_ms) {
            st.open_live(snapshot, per_method.method_id);
        }
    }
}
