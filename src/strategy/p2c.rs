//! `p2c`: weighted power of d choices on consumer-side signals only (calls in flight relative
//! to weight). No latency, no provider metrics: the strategy for when nothing but the caller's
//! own in-flight counts can be trusted.
//!
//! A pick draws a first candidate in proportion to weight (the incumbent), then `p2c.choices - 1`
//! more distinct ones, also by weight. A later candidate j replaces the incumbent i only if it is
//! still no more loaded than i after taking this call: `(active_j + 1) / w_j <= active_i / w_i`.
//! With equal weights that is ordinary P2C (take the less loaded, ties stay random). With
//! unequal weights, an idle cluster (nothing in flight) gets exactly the weights from the draw,
//! and under load the in-flight counts settle in proportion to weight — where the usual
//! "compare (active + 1) / w" gives an idle 99:1 pair a 100:0 split and uniform sampling gives a
//! 99 % invoker about 66 % (tower #696).
//!
//! `p2c.choices=0` (or any value at least the number of candidates) compares every candidate:
//! for small clusters where best-of-2 fails (two slow invokers of four share one pair in six).
//! Warm-up and slow start lower the effective weight, so a new invoker with nothing in flight is
//! drawn rarely and loses comparisons until it has its share: it is not flooded.

use super::slow_start::{Ramp, SlowStart};
use super::weighted::{Sampler, SubsetWeights, Weights};
use super::WholeSetDraw;
use super::{Ctx, Prepared, PreparedData, StatsAt, Strategy, StrategyKind};
use crate::balancer::{Member, MethodState, Snapshot};
use crate::clock::Clock;
use crate::config::Config;
use crate::error::Status;
use crate::rng::Rng;

pub(crate) struct P2c {
    /// 0 = every candidate.
    choices: usize,
    slow: Option<SlowStart>,
}

impl P2c {
    pub fn new(config: &Config) -> Self {
        P2c {
            choices: config.p2c_choices as usize,
            slow: SlowStart::new(config),
        }
    }
}

/// True when `j` (in flight `aj`, weight `wj`) should replace the incumbent `i`.
#[inline]
fn less_loaded(aj: i64, wj: u64, ai: i64, wi: u64) -> bool {
    (aj as u128 + 1) * wi as u128 <= ai as u128 * wj as u128
}

/// A candidate (position, in flight, weight) of a full scan whose `best` displaced the first
/// draw (in flight, weight): if it is as loaded as `best` relative to weight and, like it, less
/// loaded than the first draw even after this call, it joins the ties and replaces `best` with
/// probability weight / the ties' weight (a weighted reservoir of one). Returns the ties'
/// weight. Out of line with all its arithmetic: only scans whose first draw lost come here.
#[inline(never)]
fn take_tie(
    ctx: &Ctx<'_>,
    tied: u64,
    (p, a, w): (usize, i64, u64),
    (first_active, first_weight): (i64, u64),
    best: &mut (usize, i64, u64),
) -> u64 {
    let same_load = a as u128 * best.2 as u128 == best.1 as u128 * w as u128;
    if w == 0 || !same_load || !less_loaded(a, w, first_active, first_weight) {
        return tied;
    }
    let tied = tied + w;
    if ctx.rng.below(tied) < w {
        *best = (p, a, w);
    }
    tied
}

/// The common pick: a pair drawn by configured weight from the whole set, and the less loaded
/// of the two. Shared by [`P2c::select`] and the balancer's own draw path, which makes it
/// without building a [`Ctx`] or calling through the strategy (`active` = calls of the method
/// in flight at a position).
#[inline(always)]
pub(crate) fn best_of_pair(
    weights: &Weights,
    members: &[Member],
    rng: &Rng<'_>,
    active: impl Fn(usize) -> i64,
) -> usize {
    less_loaded_of(weights.pair(rng), weights.total() == 0, members, active)
}

/// [`best_of_pair`] among a filter's subset (the local zone, or the invokers not ejected):
/// the pair drawn from the subset's own table.
#[inline(always)]
pub(crate) fn best_of_subset_pair(
    subset: &SubsetWeights,
    positions: &[u32],
    members: &[Member],
    rng: &Rng<'_>,
    active: impl Fn(usize) -> i64,
) -> usize {
    less_loaded_of(
        subset.pair(positions, rng),
        subset.total() == 0,
        members,
        active,
    )
}

/// A failover's pick over the whole set at configured weights less the `excluded` positions
/// (`usize::MAX`: none), which the sampler counts as drawn already, so that the pair comes from
/// the rest exactly as from the list of the rest. None when nothing is left.
pub(crate) fn best_of_pair_excluding(
    ctx: &Ctx<'_>,
    weights: &Weights,
    excluded: &[usize],
) -> Option<usize> {
    let mut sampler = Sampler::new(ctx, weights, None);
    for &p in excluded.iter().filter(|&&p| p != usize::MAX) {
        sampler.mark(p);
    }
    let first = sampler.draw()?;
    let Some(second) = sampler.draw() else {
        return Some(first);
    };
    let (w1, w2) = (sampler.weight(first), sampler.weight(second));
    Some(
        match less_loaded(ctx.active(second), w2, ctx.active(first), w1) {
            true => second,
            false => first,
        },
    )
}

/// The pick between a drawn pair: the second only if it is less loaded (weights all 1 when
/// every candidate weighs 0, Dubbo's rule).
#[inline(always)]
fn less_loaded_of(
    (i, j): (usize, Option<usize>),
    all_zero: bool,
    members: &[Member],
    active: impl Fn(usize) -> i64,
) -> usize {
    let Some(j) = j else { return i };
    let w = |p: usize| match all_zero {
        true => 1,
        false => members[p].weight.max(0) as u64,
    };
    if less_loaded(active(j), w(j), active(i), w(i)) {
        j
    } else {
        i
    }
}

impl Strategy for P2c {
    fn kind(&self) -> StrategyKind {
        StrategyKind::P2c
    }

    fn stats_fields(&self, member: &Member, at: &StatsAt<'_>, out: &mut String) {
        SlowStart::stats_field(self.slow.as_ref(), member, at.now_ms, out);
    }

    fn whole_set_draw(&self) -> WholeSetDraw {
        // Slow start makes weights depend on time, which the balancer's draw does not evaluate.
        if self.choices == 2 && self.slow.is_none() {
            WholeSetDraw::BestOfPair
        } else {
            WholeSetDraw::No
        }
    }

    fn tracks_reports(&self) -> bool {
        false
    }

    fn sees_single_picks(&self) -> bool {
        self.slow.is_some()
    }

    fn single_pick(&self, snapshot: &Snapshot, _method: &MethodState, clock: &Clock) {
        if let Ok(weights) = Weights::of(snapshot) {
            Ramp::stamp(self.slow.as_ref(), weights.ramp.as_ref(), snapshot, clock);
        }
    }

    fn prepare(&self, members: &[Member], previous: &Snapshot) -> Prepared {
        Some(PreparedData::new(Weights::new(
            members,
            previous,
            self.slow.as_ref(),
        )))
    }

    fn select(&self, ctx: &Ctx<'_>) -> Result<usize, Status> {
        let weights = Weights::of(ctx.snapshot)?;
        let k = ctx.candidates.len();
        if self.choices == 2 || k == 2 {
            let members = &ctx.snapshot.members;
            if Sampler::exact_for(ctx, weights, self.slow.as_ref()) {
                // The common pick: the whole set at its configured weights, a pair.
                return Ok(best_of_pair(weights, members, &ctx.rng, |p| ctx.active(p)));
            }
            if let Some(subset) = ctx.subset {
                if Sampler::configured_for(ctx, weights, self.slow.as_ref()) {
                    // A filter's subset at configured weights: a pair from its own table.
                    let positions = ctx.candidates;
                    return Ok(best_of_subset_pair(
                        subset,
                        positions,
                        members,
                        &ctx.rng,
                        |p| ctx.active(p),
                    ));
                }
            }
        }
        let mut sampler = Sampler::new(ctx, weights, self.slow.as_ref());
        let Some(first) = sampler.draw() else {
            return Ok(ctx.candidates[0] as usize);
        };
        let (mut best, mut best_active, mut best_weight) =
            (first, ctx.active(first), sampler.weight(first));
        if self.choices == 0 || self.choices >= k {
            let drawn = (best_active, best_weight);
            // The weight of the candidates tied with `best` since it displaced the first draw
            // (0 while the first draw stands): the scan goes in set order, and keeping the
            // first of such ties gave the first idle invoker after a busy one in set order
            // every call the busy one lost (with many consumers each holding a call or two,
            // about a double share). Ties are drawn in proportion to weight instead.
            let mut tied = 0u64;
            for &p in ctx.candidates {
                let p = p as usize;
                if p == first || !sampler.counts(p) {
                    continue;
                }
                let (a, w) = (ctx.active(p), sampler.weight(p));
                if less_loaded(a, w, best_active, best_weight) {
                    (best, best_active, best_weight) = (p, a, w);
                    tied = w;
                } else if tied != 0 {
                    let mut pick = (best, best_active, best_weight);
                    tied = take_tie(ctx, tied, (p, a, w), drawn, &mut pick);
                    (best, best_active, best_weight) = pick;
                }
            }
        } else {
            for _ in 1..self.choices {
                let Some(p) = sampler.draw() else { break };
                let (a, w) = (ctx.active(p), sampler.weight(p));
                if less_loaded(a, w, best_active, best_weight) {
                    (best, best_active, best_weight) = (p, a, w);
                }
            }
        }
        Ok(best)
    }
}

#[cfg(test)]
mod tests {
    use super::less_loaded;

    #[test]
    fn rule() {
        // Equal weights: ordinary P2C, ties keep the incumbent.
        assert!(less_loaded(0, 1, 1, 1));
        assert!(!less_loaded(1, 1, 1, 1));
        assert!(!less_loaded(2, 1, 1, 1));
        // Idle: the incumbent stays whatever the weights.
        assert!(!less_loaded(0, 99, 0, 1));
        assert!(!less_loaded(0, 1, 0, 99));
        // 99:1 — the light one takes a call only when the heavy one has 99 per call of its own.
        assert!(!less_loaded(0, 1, 98, 99));
        assert!(less_loaded(0, 1, 99, 99));
        assert!(!less_loaded(
            i64::MAX - 1,
            u32::MAX as u64,
            0,
            u32::MAX as u64
        ));
    }
}
