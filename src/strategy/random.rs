//! `random`: weighted random with warm-up (Dubbo's RandomLoadBalance).

use super::alias::Alias;
use super::warming::WarmingWalk;
use super::{Ctx, Prepared, PreparedData, Strategy, StrategyKind, WholeSetDraw};
use crate::balancer::{Member, Snapshot};
use crate::error::Status;
use crate::rng::Rng;

pub(crate) struct Random;

/// The configured weights of the whole set as an alias table, for the common case: no subset
/// and no warm-up in progress. None: uniform (equal or all-zero weights). Totals are 64-bit
/// (Dubbo's int total overflows above 2^31).
pub(crate) struct WholeSet {
    pub alias: Option<Alias>,
    /// For `random` over the whole set while invokers warm up (None when no invoker has a
    /// start time).
    warming: Option<WarmingWalk>,
}

impl WholeSet {
    pub fn new(members: &[Member]) -> WholeSet {
        WholeSet {
            alias: Alias::new(members.iter().map(|m| m.weight.max(0) as u64)),
            warming: WarmingWalk::new(members),
        }
    }

    /// Dubbo's walk while invokers warm up (None when no invoker has a start time).
    pub fn warming(&self) -> Option<&WarmingWalk> {
        self.warming.as_ref()
    }

    /// A position of the whole set with Dubbo's weighted-random distribution.
    #[inline]
    pub fn draw(&self, n: usize, rng: &Rng) -> usize {
        Alias::draw_or_uniform(self.alias.as_ref(), n, rng)
    }
}

impl Strategy for Random {
    fn kind(&self) -> StrategyKind {
        StrategyKind::Random
    }

    fn tracks_reports(&self) -> bool {
        false
    }

    fn reads_in_flight(&self) -> bool {
        false
    }

    fn whole_set_draw(&self) -> WholeSetDraw {
        WholeSetDraw::One
    }

    fn prepare(&self, members: &[Member], _previous: &Snapshot) -> Prepared {
        Some(PreparedData::new(WholeSet::new(members)))
    }

    fn select(&self, ctx: &Ctx<'_>) -> Result<usize, Status> {
        if let Some(subset) = ctx.subset {
            if ctx.weights_static() {
                // A filter's subset (the local zone, or the invokers not ejected) comes with
                // its own draw table: Dubbo's distribution over it in O(1), not a walk.
                return Ok(subset.draw(ctx.candidates, &ctx.rng));
            }
        }
        if ctx.is_all {
            if let Some(whole) = ctx.prepared::<WholeSet>() {
                if ctx.weights_static() {
                    return Ok(whole.draw(ctx.candidates.len(), &ctx.rng));
                }
                // Warm-up in progress: the same walk, by runs of settled invokers.
                if let Some(walk) = whole.warming() {
                    let members = &ctx.snapshot.members;
                    let now_ms = ctx.clock.now_ms();
                    if let Some(pos) = walk.pick(members, now_ms, |bound| ctx.rng.below(bound)) {
                        return Ok(pos);
                    }
                }
            }
        }
        Ok(weighted_pick(ctx))
    }
}

/// The general path: two passes over the candidates with effective weights, no allocation.
fn weighted_pick(ctx: &Ctx<'_>) -> usize {
    let cands = ctx.candidates;
    let first = ctx.weight(cands[0] as usize);
    let mut total = 0i64;
    let mut same = true;
    for &pos in cands {
        let w = ctx.weight(pos as usize);
        total += w as i64;
        same &= w == first;
    }
    if total > 0 && !same {
        let mut offset = ctx.rng.below(total as u64) as i64;
        for &pos in cands {
            offset -= ctx.weight(pos as usize) as i64;
            if offset < 0 {
                return pos as usize;
            }
        }
    }
    cands[ctx.rng.below(cands.len() as u64) as usize] as usize
}
