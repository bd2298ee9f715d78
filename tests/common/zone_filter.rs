//! What outlier ejection and zone preference leave of a call's allowed invokers
//! (docs/strategies.md), as the property tests and the model sequences both predict it.

use std::collections::BTreeSet;

/// The balancer's zone, as the model sees it.
pub struct Zoning<'a> {
    pub is_local: &'a dyn Fn(u64) -> bool,
    pub weighs: &'a dyn Fn(u64) -> bool,
    pub min_healthy_percent: u32,
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
    let local_total = allowed.iter().filter(|&&x| is_local(x)).count();
    let local_healthy: Vec<u64> = healthy.iter().copied().filter(|&x| is_local(x)).collect();
    if local_healthy.is_empty() {
        (spill, true)
    } else if local_healthy.len() * 100 >= local_total * min_healthy_percent as usize {
        (local_healthy, true)
    } else {
        (spill, false)
    }
}
