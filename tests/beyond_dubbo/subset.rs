//! Subsetting (`subset.size`, `subset.key`): which invokers each consumer prefers, how evenly
//! consumers spread over a fleet, how little churn moves, and how calls leave a subset.

use crate::common::*;
use crate::helpers::*;
use polylb::{Balancer, Invoker, Outcome, Status, StrategyKind};
use std::collections::BTreeSet;

/// The ids stats mark `in_subset`.
fn subset(b: &Balancer) -> BTreeSet<u64> {
    let v: serde_json::Value = serde_json::from_str(&b.stats_json(NOW)).unwrap();
    v["invokers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["in_subset"].as_bool().expect("in_subset in every row"))
        .map(|r| r["id"].as_u64().unwrap())
        .collect()
}

fn fleet(n: u64) -> Vec<Invoker> {
    (1..=n).map(provider).collect()
}

fn subset_of(key: &str, size: u32, set: &[Invoker]) -> BTreeSet<u64> {
    subset(&lb(
        &format!("loadbalance=leastactive&subset.size={size}&subset.key={key}"),
        set,
    ))
}

#[test]
fn calls_stay_in_the_subset_for_every_strategy_that_takes_one() {
    let set = fleet(12);
    for kind in StrategyKind::ALL {
        let config = format!(
            "loadbalance={}&subset.size=3&subset.key=c7&seed=3",
            kind.name()
        );
        if !kind.takes_subset() {
            let e = Balancer::new(&config).map(|_| ()).unwrap_err();
            assert_eq!(e.status, Status::InvalidConfig, "{}", kind.name());
            assert!(e.message.contains("subset.size"), "{}", e.message);
            continue;
        }
        let b = lb(&config, &set);
        let members = subset(&b);
        assert_eq!(members.len(), 3, "{}", kind.name());
        let mut seen = BTreeSet::new();
        for k in 0..3000u32 {
            let id = b.select(0, &k.to_le_bytes(), NOW).unwrap();
            b.report(0, id, 1000, Outcome::Success, NOW).unwrap();
            assert!(members.contains(&id), "{}: picked {id}", kind.name());
            seen.insert(id);
        }
        assert_eq!(seen, members, "{}: the whole subset serves", kind.name());
    }
}

#[test]
fn the_subset_is_the_keys_and_addresses_not_the_ids_or_order() {
    let set = fleet(40);
    let a = subset_of("consumer-a", 5, &set);
    assert_eq!(a.len(), 5);
    assert_eq!(a, subset_of("consumer-a", 5, &set), "deterministic");
    assert_ne!(a, subset_of("consumer-b", 5, &set), "keys differ");
    // The same addresses under other ids and in another order: the same addresses chosen.
    let renamed: Vec<Invoker> = (1..=40u64)
        .rev()
        .map(|n| Invoker::new(1000 + n, format!("10.0.0.{n}:20880")))
        .collect();
    let again: BTreeSet<u64> = subset_of("consumer-a", 5, &renamed)
        .into_iter()
        .map(|id| id - 1000)
        .collect();
    assert_eq!(a, again);
    // A subset at least as large as the set is the set.
    assert_eq!(subset_of("consumer-a", 40, &set).len(), 40);
    assert_eq!(subset_of("consumer-a", 100, &set).len(), 40);
}

#[test]
fn churn_moves_at_most_the_member_that_left_or_the_one_displaced() {
    let set = fleet(30);
    for c in 0..40 {
        let key = format!("consumer-{c}");
        let before = subset_of(&key, 4, &set);
        // An invoker outside the subset leaves: nothing changes.
        let outsider = (1..=30).find(|id| !before.contains(id)).unwrap();
        let without: Vec<Invoker> = fleet(30).into_iter().filter(|i| i.id != outsider).collect();
        assert_eq!(subset_of(&key, 4, &without), before, "{key}");
        // A member leaves: exactly one newcomer replaces it.
        let member = *before.iter().next().unwrap();
        let without: Vec<Invoker> = fleet(30).into_iter().filter(|i| i.id != member).collect();
        let after = subset_of(&key, 4, &without);
        assert_eq!(after.len(), 4);
        assert_eq!(before.difference(&after).collect::<Vec<_>>(), [&member]);
        // An invoker joins: at most one member is displaced, by the newcomer.
        let after = subset_of(&key, 4, &fleet(31));
        let gone: Vec<_> = before.difference(&after).collect();
        let came: Vec<_> = after.difference(&before).collect();
        assert!(gone.len() <= 1 && came.len() == gone.len(), "{key}");
        assert!(came.iter().all(|&&id| id == 31), "{key}: {came:?}");
    }
}

/// Each invoker is in a given consumer's subset with probability size / n, independently
/// across consumers with distinct keys: its count over C consumers is Binomial(C, size / n).
/// And two consumers' subsets overlap by size² / n on average (hypergeometric).
#[test]
fn consumers_spread_evenly_and_independently_over_the_fleet() {
    let (n, size, consumers) = (100u64, 10u32, 1000usize);
    let set = fleet(n);
    let subsets: Vec<BTreeSet<u64>> = (0..consumers)
        .map(|c| subset_of(&format!("host-{c}.example:svc"), size, &set))
        .collect();
    let p = size as f64 / n as f64;
    for id in 1..=n {
        let count = subsets.iter().filter(|s| s.contains(&id)).count();
        assert_binomial(count, consumers, p, 5.0, &format!("consumers of {id}"));
    }
    // Overlap of consecutive pairs: each hypergeometric with mean 1 and variance
    // size·(size/n)·(1 − size/n)·(n − size)/(n − 1) ≈ 0.818; the mean of 999 within 5 sd.
    let pairs = consumers - 1;
    let overlap: usize = subsets
        .windows(2)
        .map(|w| w[0].intersection(&w[1]).count())
        .sum();
    let mean = size as f64 * p;
    let var = size as f64 * p * (1.0 - p) * (n - size as u64) as f64 / (n - 1) as f64;
    let sd_of_mean = (var / pairs as f64).sqrt();
    let got = overlap as f64 / pairs as f64;
    assert!(
        (got - mean).abs() <= 5.0 * sd_of_mean,
        "mean overlap {got:.3}, expected {mean:.3} ± {:.3}",
        5.0 * sd_of_mean
    );
}

#[test]
fn the_subset_is_taken_within_the_zone_among_weighted_invokers() {
    let mut set: Vec<Invoker> = (1..=12)
        .map(|n| provider(n).zone(if n <= 6 { "a" } else { "b" }))
        .collect();
    set[0] = set[0].clone().weight(0);
    let b = lb("loadbalance=p2c&zone=a&subset.size=3&subset.key=k1", &set);
    let members = subset(&b);
    assert_eq!(members.len(), 3);
    assert!(
        members.iter().all(|&id| (2..=6).contains(&id)),
        "{members:?}"
    );
    // A zone with fewer weighted invokers than the size: all of them.
    let b = lb("loadbalance=p2c&zone=a&subset.size=8&subset.key=k1", &set);
    assert_eq!(subset(&b), (2..=6).collect());
    // Every invoker of the zone drained to weight 0: the subset comes from the other zones.
    let drained: Vec<Invoker> = set
        .iter()
        .map(|i| {
            if i.id <= 6 {
                i.clone().weight(0)
            } else {
                i.clone()
            }
        })
        .collect();
    let b = lb(
        "loadbalance=leastactive&zone=a&subset.size=3&subset.key=k1",
        &drained,
    );
    let members = subset(&b);
    assert_eq!(members.len(), 3);
    assert!(members.iter().all(|&id| id > 6), "{members:?}");
    // Nothing weighs anything: the subset is taken among all.
    let none: Vec<Invoker> = set.iter().map(|i| i.clone().weight(0)).collect();
    assert_eq!(
        subset(&lb("loadbalance=p2c&subset.size=3&subset.key=k1", &none)).len(),
        3
    );
}

#[test]
fn a_failover_leaves_the_subset_only_once_its_members_are_excluded() {
    let set = fleet(10);
    let b = lb("loadbalance=leastactive&subset.size=2&subset.key=k9", &set);
    let members: Vec<u64> = subset(&b).into_iter().collect();
    let id = b.select_among(0, b"", &[], &members[..1], NOW).unwrap();
    assert_eq!(id, members[1], "the retry stays in the subset");
    let outside: BTreeSet<u64> = (0..200)
        .map(|_| b.select_among(0, b"", &[], &members, NOW).unwrap())
        .collect();
    assert!(outside.iter().all(|id| !members.contains(id)));
    assert!(
        outside.len() > 1,
        "spills over every other invoker: {outside:?}"
    );
    // A caller's candidates without a member: they are used.
    let id = b.select_among(0, b"", &[7, 8], &[], NOW).unwrap();
    assert!(id == 7 || id == 8);
}

#[test]
fn the_subset_spills_over_in_proportion_as_its_members_are_ejected() {
    let set = fleet(10);
    let config = "loadbalance=leastactive&subset.size=4&subset.key=k3&seed=21\
                  &subset.minHealthyPercent=100&outlier.consecutiveFailures=1\
                  &outlier.maxEjectionPercent=50&outlier.baseEjectionMs=1000000\
                  &outlier.maxEjectionMs=1000000";
    let b = lb(config, &set);
    let members: Vec<u64> = subset(&b).into_iter().collect();
    b.report(0, members[0], 10, Outcome::Failure, NOW).unwrap();
    // 3 of 4 healthy < 100 %: calls stay in the subset with probability 0.75, the rest go to
    // the 9 healthy invokers (3 of them members).
    let draws = 40_000;
    let c = counts(&b, 0, draws, NOW);
    assert_eq!(c.get(&members[0]), None, "ejected member picked");
    let inside: usize = members[1..]
        .iter()
        .map(|id| c.get(id).copied().unwrap_or(0))
        .sum();
    assert_binomial(
        inside,
        draws,
        0.75 + 0.25 * 3.0 / 9.0,
        5.0,
        "calls in the subset",
    );
    for id in (1..=10).filter(|id| !members.contains(id)) {
        assert_binomial(c[&id], draws, 0.25 / 9.0, 5.0, "spill-over to one outsider");
    }
}

#[test]
fn subset_options_are_checked() {
    let rejected = [
        ("loadbalance=p2c&subset.size=3", "subset.key"),
        ("loadbalance=p2c&subset.key=a", "subset.size"),
        ("loadbalance=p2c&subset.size=0&subset.key=a", "subset.size"),
        ("loadbalance=p2c&subset.size=3&subset.key=", "subset.key"),
        (
            "loadbalance=p2c&subset.size=3&subset.key=a&subset.minHealthyPercent=50",
            "outlier",
        ),
        (
            "loadbalance=p2c&subset.size=3&subset.key=a&subset.minHealthyPercent=0&outlier.consecutiveFailures=1",
            "subset.minHealthyPercent",
        ),
        (
            "loadbalance=p2c&subset.size=3&subset.key=a&zone=z&zone.minHealthyPercent=50\
             &outlier.consecutiveFailures=1",
            "subset.minHealthyPercent",
        ),
        ("loadbalance=maglev&subset.size=3&subset.key=a", "maglev"),
        ("loadbalance=random&subset.size=3&subset.key=a", "load-blind"),
        (
            "loadbalance=roundrobin&subset.size=3&subset.key=a",
            "leastactive, shortestresponse",
        ),
        ("loadbalance=p2c&subset.size=-1&subset.key=a", "subset.size"),
    ];
    for (config, says) in rejected {
        let e = Balancer::new(config).map(|_| ()).unwrap_err();
        assert_eq!(e.status, Status::InvalidConfig, "{config}");
        assert!(e.message.contains(says), "{config}: {}", e.message);
    }
    // An explicit 0 is subsetting's "off", a setting: accepted, and no row has the field.
    let b = lb("loadbalance=p2c&subset.size=0", &fleet(3));
    let v: serde_json::Value = serde_json::from_str(&b.stats_json(NOW)).unwrap();
    assert_eq!(v["invokers"][0].get("in_subset"), None);
}
