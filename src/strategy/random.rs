//! `random`: weighted random with warm-up (Dubbo's RandomLoadBalance).

use super::{Ctx, Prepared, Strategy, StrategyKind};
use crate::balancer::{Member, Snapshot};
use crate::error::Status;
use std::sync::Arc;

pub(crate) struct Random;

/// Prefix sums of the configured weights of the whole set, for the common case: no subset and
/// no warm-up in progress. Totals are 64-bit (Dubbo's int total overflows above 2^31).
struct PrefixSums {
    prefix: Box<[i64]>,
    weighted: bool,
}

impl Strategy for Random {
    fn kind(&self) -> StrategyKind {
        StrategyKind::Random
    }

    fn prepare(&self, members: &[Member], _previous: &Snapshot) -> Prepared {
        let mut sum = 0i64;
        let prefix: Box<[i64]> = members
            .iter()
            .map(|m| {
                sum += m.weight as i64;
                sum
            })
            .collect();
        let same = members.iter().all(|m| m.weight == members[0].weight);
        Some(Arc::new(PrefixSums {
            weighted: sum > 0 && !same,
            prefix,
        }))
    }

    fn select(&self, ctx: &Ctx<'_>) -> Result<usize, Status> {
        if ctx.is_all && ctx.weights_static() {
            if let Some(p) = ctx
                .snapshot
                .prepared
                .as_ref()
                .and_then(|p| p.downcast_ref::<PrefixSums>())
            {
                let n = p.prefix.len();
                if !p.weighted {
                    return Ok(ctx.rng.below(n as u64) as usize);
                }
                let offset = ctx.rng.below(p.prefix[n - 1] as u64) as i64;
                // The first position whose prefix sum exceeds the offset: zero weights are never
                // picked (their prefix equals the previous one).
                return Ok(p.prefix.partition_point(|&s| s <= offset));
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
