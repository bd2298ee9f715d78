//! Zone preference.

use crate::common::zone_filter::Zoning;
use crate::sequences::*;
use crate::{seeded, strategies, BASE_US};
use polylb::{Balancer, Invoker, Outcome};
use proptest::prelude::*;
use std::collections::BTreeSet;

/// A bound that `|k - n p|` exceeds with probability below 10^-6 when k ~ Binomial(n, p):
/// Bernstein's inequality, `P(|k - n p| >= t) <= 2 exp(-t² / (2 (n p (1 - p) + t / 3)))`, solved
/// for t. Unlike a count of standard deviations it holds in the tails too, where the shares
/// drawn here (down to a few percent) put the normal approximation off.
fn binomial_tolerance(n: u64, p: f64) -> f64 {
    let l = (2.0 / 1e-6f64).ln();
    let variance = n as f64 * p * (1.0 - p);
    l / 3.0 + (l * l / 9.0 + 2.0 * variance * l).sqrt()
}

/// One invoker of a zone case: weight, in the consumer's zone, ejected.
#[derive(Clone, Debug)]
struct ZoneInv {
    weight: i32,
    local: bool,
    /// When remote: in another zone (true) or in none (false).
    other_zone: bool,
    ejected: bool,
}

/// Where the zone rules send a pick among `allowed` (indices into `set`), as documented: the
/// share of picks kept local (`[0, 1]`), and the invokers the rest spill over to.
fn zone_rule(
    set: &[ZoneInv],
    allowed: &[usize],
    min_healthy: u32,
    weights_drain: bool,
) -> (f64, Vec<usize>) {
    let healthy: Vec<usize> = allowed
        .iter()
        .copied()
        .filter(|&i| !set[i].ejected)
        .collect();
    // A call whose candidates are all ejected uses them anyway, with no preference.
    if healthy.is_empty() {
        return (0.0, allowed.to_vec());
    }
    let local_healthy = healthy.iter().filter(|&&i| set[i].local).count();
    let drained = local_healthy > 0
        && !healthy.iter().any(|&i| set[i].local && set[i].weight > 0)
        && healthy.iter().any(|&i| !set[i].local && set[i].weight > 0);
    if drained || local_healthy == 0 {
        return (0.0, healthy);
    }
    // Health counts the call's local candidates, ejected ones included: where weights drain,
    // the weighted ones while a candidate weighs something (a drained one is no capacity).
    let any_weighted = weights_drain && allowed.iter().any(|&i| set[i].weight > 0);
    let counts = |i: usize| set[i].local && (!any_weighted || set[i].weight > 0);
    let local_total = allowed.iter().filter(|&&i| counts(i)).count();
    let local_healthy = healthy.iter().filter(|&&i| counts(i)).count();
    if local_healthy == 0 {
        return (0.0, healthy);
    }
    let share = (local_healthy * 100) as f64 / (local_total * min_healthy as usize) as f64;
    (share.min(1.0), healthy)
}

/// Picks `n` times (each reported) and counts those that went to a local invoker.
fn local_picks(b: &Balancer, ids: &[u64], local: &BTreeSet<u64>, cands: &[u64], n: u64) -> u64 {
    let mut kept = 0;
    for k in 0..n {
        let id = b
            .select_among(0, &k.to_le_bytes(), cands, &[], BASE_US)
            .unwrap();
        assert!(ids.contains(&id));
        b.report(0, id, 1000, Outcome::Success, BASE_US).unwrap();
        kept += local.contains(&id) as u64;
    }
    kept
}

fn arb_zone_set() -> impl Strategy<Value = Vec<ZoneInv>> {
    proptest::collection::vec(
        (
            prop_oneof![1 => Just(0i32), 5 => 1i32..100],
            prop_oneof![3 => Just(true), 2 => Just(false)],
            any::<bool>(),
            any::<bool>(),
        )
            .prop_map(|(weight, local, other_zone, ejected)| ZoneInv {
                weight,
                local,
                other_zone,
                ejected,
            }),
        1..9,
    )
}

proptest! {
    #![proptest_config(seeded(500))]

    /// How often picks stay in the consumer's zone: with `random`, local picks out of 3000 are
    /// the documented share (all of them while at least `zone.minHealthyPercent` % of the
    /// call's local invokers are healthy; below, the healthy fraction over that threshold,
    /// plus the local invokers' part of the spill-over to every healthy invoker by weight;
    /// none when no local invoker is healthy or the healthy ones weigh 0 while others do not),
    /// exactly where that share is 0 or 1 and within `binomial_tolerance` otherwise. Every
    /// other strategy, where the rules alone decide (all local, or a spill-over with no local
    /// invoker), keeps to them on each of 300 picks. Whole-set picks and caller subsets.
    #[test]
    fn picks_stay_local_as_the_zone_rules_say(
        mut set in arb_zone_set(),
        min_healthy in prop_oneof![2 => Just(100u32), 2 => 50u32..=100, 1 => 1u32..=100],
        subset in prop_oneof![2 => Just(None), 1 => proptest::collection::vec(any::<bool>(), 8).prop_map(Some)],
        other in 0..strategies().len(),
        seed in any::<u64>(),
    ) {
        let n = set.len();
        // The budget (maxEjectionPercent=100) keeps one invoker of the set healthy: a weighted
        // one while there are any.
        let any_weighted = set.iter().any(|i| i.weight > 0);
        let counted: Vec<usize> = (0..n).filter(|&i| !any_weighted || set[i].weight > 0).collect();
        if counted.iter().all(|&i| set[i].ejected) {
            set[counted[seed as usize % counted.len()]].ejected = false;
        }
        let ids: Vec<u64> = (1..=n as u64).collect();
        let invokers: Vec<Invoker> = set
            .iter()
            .zip(&ids)
            .map(|(inv, &id)| {
                let i = Invoker::new(id, format!("10.3.0.{id}:20880")).weight(inv.weight);
                match (inv.local, inv.other_zone) {
                    (true, _) => i.zone("z0"),
                    (false, true) => i.zone("z1"),
                    (false, false) => i,
                }
            })
            .collect();
        let allowed: Vec<usize> = match &subset {
            Some(mask) if (0..n).any(|i| mask[i]) => (0..n).filter(|&i| mask[i]).collect(),
            _ => (0..n).collect(),
        };
        let cands: Vec<u64> = if allowed.len() == n && subset.is_none() {
            Vec::new()
        } else {
            allowed.iter().map(|&i| ids[i]).collect()
        };
        let local: BTreeSet<u64> = (0..n).filter(|&i| set[i].local).map(|i| ids[i]).collect();
        for (strategy, picks) in [("random", 3000u64), (strategies()[other], 300)] {
            let kind = polylb::StrategyKind::from_name(strategy).unwrap();
            let (share, spill) =
                zone_rule(&set, &allowed, min_healthy, Zoning::weights_drain(kind));
            // The spill-over's local part with `random` (by weight; uniform when all weigh 0).
            let weight = |i: &usize| set[*i].weight as u64;
            let spill_weight: u64 = spill.iter().map(weight).sum();
            let spill_local_weight: u64 =
                spill.iter().filter(|&&i| set[i].local).map(weight).sum();
            let spill_locals = spill.iter().filter(|&&i| set[i].local).count();
            let spill_local = if spill_weight > 0 {
                spill_local_weight as f64 / spill_weight as f64
            } else {
                spill_locals as f64 / spill.len() as f64
            };
            let config = format!(
                "loadbalance={strategy}&seed={seed}&zone=z0&zone.minHealthyPercent={min_healthy}\
                 &outlier.consecutiveFailures=1&outlier.maxEjectionPercent=100\
                 &outlier.baseEjectionMs=1000000&outlier.maxEjectionMs=1000000"
            );
            let b = Balancer::new(&config).unwrap();
            b.update(&invokers).unwrap();
            for (inv, &id) in set.iter().zip(&ids) {
                if inv.ejected {
                    b.report(0, id, 1000, Outcome::Failure, BASE_US).unwrap();
                }
            }
            let rows = rows(&b.stats_json(BASE_US));
            for (inv, id) in set.iter().zip(&ids) {
                prop_assert_eq!(rows[id]["ejected"] == true, inv.ejected, "{}", config);
            }
            let kept = local_picks(&b, &ids, &local, &cands, picks);
            let what = format!(
                "{strategy}: {kept} of {picks} local, share {share}, spill {spill:?}: {set:?} \
                 allowed {allowed:?}, minHealthy {min_healthy}"
            );
            if strategy == "random" {
                let all = share >= 1.0
                    || spill_locals == spill.len()
                    || (spill_weight > 0 && spill_local_weight == spill_weight);
                let none = share == 0.0 && spill_local == 0.0;
                if all {
                    prop_assert_eq!(kept, picks, "{}", what);
                } else if none {
                    prop_assert_eq!(kept, 0, "{}", what);
                } else {
                    let p = share + (1.0 - share) * spill_local;
                    let off = (kept as f64 - picks as f64 * p).abs();
                    prop_assert!(
                        off <= binomial_tolerance(picks, p),
                        "{} (expected {:.1})", what, picks as f64 * p
                    );
                }
            } else if share >= 1.0 || spill_locals == spill.len() {
                prop_assert_eq!(kept, picks, "{}", what);
            } else if share == 0.0 && spill_locals == 0 {
                prop_assert_eq!(kept, 0, "{}", what);
            }
        }
    }
}
