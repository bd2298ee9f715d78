//! What outlier ejection and zone preference leave of a call's allowed invokers
//! (docs/strategies.md), as the property tests and the model sequences both predict it.

use std::collections::BTreeSet;

/// The balancer's zone, as the model sees it.
pub struct Zoning<'a> {
    pub is_local: &'a dyn Fn(u64) -> bool,
    pub weighs: &'a dyn Fn(u64) -> bool,
    pub min_healthy_percent: u32,
    /// Whether weight 0 drains an invoker under the strategy (every one but `consistenthash`,
    /// `adaptive`, `leastactive` and `shortestresponse`): the zone's health then counts its
    /// weighted invokers while an allowed one weighs something.
    pub weights_drain: bool,
}

impl Zoning<'_> {
    /// Whether weight 0 drains an invoker under `strategy`.
    pub fn weights_drain(strategy: polylb::StrategyKind) -> bool {
        use polylb::StrategyKind::*;
        !matches!(
            strategy,
            ConsistentHash | Adaptive | LeastActive | ShortestResponse
        )
    }
}

/// The invokers a pick may return, and whether the strategy picks among exactly those (false
/// when the zone's share of the calls is drawn at random).
pub fn filtered(
    allowed: &[u64],
    ejected: &BTreeSet<u64>,
    zoning: Option<Zoning>,
) -> (Vec<u64>, bool) {
    let healthy: Vec<u64> = allowed
        .iter()
        .copied()
        .filter(|x| !ejected.contains(x))
        .collect();
    // A call whose candidates are all ejected uses them anyway.
    let spill = if healthy.is_empty() {
        allowed.to_vec()
    } else {
        healthy.clone()
    };
    let Some(Zoning {
        is_local,
        weighs,
        min_healthy_percent,
        weights_drain,
    }) = zoning
    else {
        return (spill, true);
    };
    // Drained: the healthy local invokers all weigh 0 while another healthy one does not.
    let drained = healthy.iter().any(|&x| is_local(x))
        && !healthy.iter().any(|&x| is_local(x) && weighs(x))
        && healthy.iter().any(|&x| !is_local(x) && weighs(x));
    if drained {
        return (spill, true);
    }
    // Health counts the invokers that take calls: the weighted ones where weights drain.
    let any_weighted = weights_drain && allowed.iter().any(|&x| weighs(x));
    let counts = |x: u64| !any_weighted || weighs(x);
    let local_total = allowed
        .iter()
        .filter(|&&x| is_local(x) && counts(x))
        .count();
    let local_healthy: Vec<u64> = healthy.iter().copied().filter(|&x| is_local(x)).collect();
    let counted_healthy = local_healthy.iter().filter(|&&x| counts(x)).count();
    if counted_healthy == 0 {
        (spill, true)
    } else if counted_healthy * 100 >= local_total * min_healthy_percent as usize {
        (local_healthy, true)
    } else {
        (spill, false)
    }
}
