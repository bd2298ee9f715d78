//! `leastactive`: fewest calls in flight, weighted random among ties (Dubbo's LeastActive).
//!
//! Dubbo scans every candidate. While some invoker is idle the least count is 0 and the ties
//! are exactly the idle invokers, so a draw from the whole set's weighted distribution that
//! lands on an idle invoker is a draw from Dubbo's distribution over the ties (weighted among
//! them, uniform when their weights are equal). A couple of such draws are tried first; when
//! they land on busy invokers (or only zero-weight invokers are idle) the exact scan decides.
//! Same distribution, O(1) instead of O(n) whenever the cluster has idle capacity. Over the
//! whole set at static weights the balancer makes those draws itself (`WholeSetDraw::FirstIdle`),
//! without calling the strategy; `Ctx::drawn` tells `select` that they were made and missed.
//! While invokers warm up the draws are by effective weight (Dubbo's walk by runs,
//! `WarmingWalk`): the weights by which the scan weighs its ties then.

use super::random::WholeSet;
use super::{ties::least_by, Ctx, Prepared, PreparedData, Strategy, StrategyKind, WholeSetDraw};
use crate::balancer::{Member, Snapshot};
use crate::error::Status;

/// Draws tried before the scan.
const IDLE_DRAWS: usize = 2;

pub(crate) struct LeastActive;

impl Strategy for LeastActive {
    fn kind(&self) -> StrategyKind {
        StrategyKind::LeastActive
    }

    fn tracks_reports(&self) -> bool {
        false
    }

    fn prepare(&self, members: &[Member], _previous: &Snapshot) -> Prepared {
        Some(PreparedData::new(WholeSet::new(members)))
    }

    fn whole_set_draw(&self) -> WholeSetDraw {
        WholeSetDraw::FirstIdle {
            draws: IDLE_DRAWS as u32,
        }
    }

    fn select(&self, ctx: &Ctx<'_>) -> Result<usize, Status> {
        if let Some(subset) = ctx.subset {
            if ctx.weights_static() && !ctx.drawn {
                // A filter's subset (the local zone, or the invokers not ejected) has its own
                // draw table: the same idle draws over it.
                for _ in 0..IDLE_DRAWS {
                    let pos = subset.draw(ctx.candidates, &ctx.rng);
                    if ctx.active(pos) == 0 {
                        return Ok(pos);
                    }
                }
            }
        }
        if ctx.is_all && !ctx.drawn {
            if let Some(whole) = ctx.prepared::<WholeSet>() {
                if ctx.weights_static() {
                    for _ in 0..IDLE_DRAWS {
                        let pos = whole.draw(ctx.candidates.len(), &ctx.rng);
                        if ctx.active(pos) == 0 {
                            return Ok(pos);
                        }
                    }
                } else if let Some(walk) = whole.warming() {
                    // While invokers warm up, the same draws by effective weight (the weights
                    // the scan weighs its ties by), without walking every invoker.
                    let now_ms = ctx.clock.now_ms();
                    for _ in 0..IDLE_DRAWS {
                        let drawn = walk.pick(&ctx.snapshot.members, now_ms, |b| ctx.rng.below(b));
                        match drawn {
                            Some(pos) if ctx.active(pos) == 0 => return Ok(pos),
                            Some(_) => {}
                            None => break,
                        }
                    }
                }
            }
        }
        Ok(least_by(ctx, |pos| ctx.active(pos)))
    }
}
