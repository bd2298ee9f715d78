//! Dubbo's "least value, weighted random among ties" scan, shared by leastactive and
//! shortestresponse (and any strategy that ranks by a per-invoker integer).

use super::Ctx;
use crate::scratch::with_scratch;
use std::cell::RefCell;

thread_local! {
    /// Tied positions and weights, reused across calls so the scan never allocates.
    static TIES: RefCell<Vec<(u32, i32)>> = const { RefCell::new(Vec::new()) };
}

/// Scans candidates in set order. A strictly smaller value starts a new group; an equal one
/// joins it. Among a group, weighted random with the offset in `[0, total)` and a strict `< 0`
/// test (Dubbo's fixed rule: the old `<= 0` made a weight-1 last candidate unreachable), or
/// uniform when weights are equal or all zero. Weights are the effective (warm-up) weights for
/// both the total and the walk: Dubbo once mixed raw and warm weights here.
pub(crate) fn least_by(ctx: &Ctx<'_>, value: impl Fn(usize) -> i64) -> usize {
    let scan = |ties: &mut Vec<(u32, i32)>| {
        ties.clear();
        let mut least = i64::MAX;
        let mut total: i64 = 0;
        let mut same = true;
        for &pos in ctx.candidates {
            let pos_usize = pos as usize;
            let v = value(pos_usize);
            if v > least {
                continue;
            }
            let w = ctx.weight(pos_usize);
            if v < least || ties.is_empty() {
                least = v;
                ties.clear();
                total = 0;
                same = true;
            } else if w != ties[0].1 {
                same = false;
            }
            ties.push((pos, w));
            total += w as i64;
        }
        if ties.len() == 1 {
            return ties[0].0 as usize;
        }
        if !same && total > 0 {
            let mut offset = ctx.rng.below(total as u64) as i64;
            for &(pos, w) in ties.iter() {
                offset -= w as i64;
                if offset < 0 {
                    return pos as usize;
                }
            }
        }
        ties[ctx.rng.below(ties.len() as u64) as usize].0 as usize
    };
    with_scratch(&TIES, scan)
}
