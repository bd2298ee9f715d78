//! `leastactive`: fewest calls in flight, weighted random among ties (Dubbo's LeastActive).

use super::{ties::least_by, Ctx, Strategy, StrategyKind};
use crate::error::Status;

pub(crate) struct LeastActive;

impl Strategy for LeastActive {
    fn kind(&self) -> StrategyKind {
        StrategyKind::LeastActive
    }

    fn select(&self, ctx: &Ctx<'_>) -> Result<usize, Status> {
        Ok(least_by(ctx, |pos| ctx.active(pos)))
    }
}
