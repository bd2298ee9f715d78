//! Zone preference.

use crate::common::*;
use crate::helpers::*;
use crate::outlier::active_ejected;
use polylb::{Balancer, Invoker, Outcome, StrategyKind};

pub(crate) fn zoned() -> Vec<Invoker> {
    vec![
        provider(1).zone("a"),
        provider(2).zone("a"),
        provider(3).zone("b"),
        provider(4).zone("b"),
        provider(5),
    ]
}

/// The C ABI and every binding read an empty zone as no zone; `Invoker::zone("")` in Rust must
/// mean the same, or the same deployment would show a zone `""` in stats from Rust only.
#[test]
fn an_empty_zone_is_no_zone_as_through_the_c_abi() {
    let b = Balancer::new("loadbalance=random&zone=a").unwrap();
    b.update(&[provider(1).zone(""), provider(2), provider(3).zone("a")])
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(&b.stats_json(NOW)).unwrap();
    let invokers = v["invokers"].as_array().unwrap();
    let of = |id: u64| invokers.iter().find(|i| i["id"] == id).unwrap();
    assert_eq!(of(1).get("zone"), None, "{}", of(1));
    assert_eq!(of(1).get("zone"), of(2).get("zone"));
    assert_eq!(of(3)["zone"], "a");
    assert_eq!(of(1)["local"], of(2)["local"]);
}

#[test]
fn zone_preference_keeps_calls_local_for_every_strategy() {
    for kind in StrategyKind::ALL {
        let b = lb(
            &format!("loadbalance={}&zone=a&seed=15", kind.name()),
            &zoned(),
        );
        for k in 0..2000u32 {
            let id = b.select(0, &k.to_le_bytes(), NOW).unwrap();
            b.report(0, id, 1000, Outcome::Success, NOW).unwrap();
            assert!(id <= 2, "{}: picked {id}", kind.name());
        }
        // Within a caller's subset too.
        let id = b.select_among(0, b"k", &[2, 3, 5], &[], NOW).unwrap();
        assert_eq!(id, 2, "{}", kind.name());
        // A subset without local invokers spills over.
        let id = b.select_among(0, b"k", &[3, 4], &[], NOW).unwrap();
        assert!(id == 3 || id == 4);
    }
}

/// The strategies that never pick a zero weight while another candidate weighs something
/// (Dubbo's ring ignores weights; its leastactive, shortestresponse and adaptive may return a
/// zero-weight invoker that is alone in being least loaded or fastest).
const NEVER_PICK_A_ZERO_WEIGHT: [StrategyKind; 5] = [
    StrategyKind::Random,
    StrategyKind::RoundRobin,
    StrategyKind::P2c,
    StrategyKind::PeakEwma,
    StrategyKind::BoundedHash,
];

#[test]
fn a_zone_drained_by_zero_weights_is_preferred_no_more() {
    // Every invoker of zone a set to weight 0 (to move its traffic away): calls go where the
    // weights are, as a set's zero weights send them, instead of staying local and spreading
    // evenly over the drained invokers (the rule for a set that weighs nothing at all).
    let drained: Vec<Invoker> = zoned()
        .into_iter()
        .map(|i| match i.id {
            1 | 2 => i.weight(0),
            _ => i,
        })
        .collect();
    for kind in NEVER_PICK_A_ZERO_WEIGHT {
        for options in ["", "&outlier.consecutiveFailures=3"] {
            let b = lb(
                &format!("loadbalance={}&zone=a&seed=15{options}", kind.name()),
                &drained,
            );
            for k in 0..500u32 {
                let id = b.select(0, &k.to_le_bytes(), NOW).unwrap();
                b.report(0, id, 1000, Outcome::Success, NOW).unwrap();
                assert!(
                    id > 2,
                    "{}{options}: picked drained invoker {id}",
                    kind.name()
                );
            }
        }
    }
    // One local invoker still weighing something keeps the zone preferred.
    let partly: Vec<Invoker> = zoned()
        .into_iter()
        .map(|i| if i.id == 1 { i.weight(0) } else { i })
        .collect();
    let b = lb("loadbalance=random&zone=a&seed=15", &partly);
    for k in 0..500u32 {
        assert_eq!(b.select(0, &k.to_le_bytes(), NOW).unwrap(), 2);
        b.report(0, 2, 1000, Outcome::Success, NOW).unwrap();
    }
}

#[test]
fn a_zone_left_with_zero_weights_by_ejections_is_preferred_no_more() {
    // Zone a: invoker 1 weighs 100, invoker 2 weighs 0. Once 1 is ejected the zone's healthy
    // invokers weigh nothing: staying local (50 % healthy, below 70 %, would keep 5 calls in
    // 7 there) would send them to the zero weight while 3, 4 and 5 weigh something. Over the
    // whole set and over a caller's subset, for the strategies that never pick a zero weight
    // while another candidate weighs something.
    let set: Vec<Invoker> = zoned()
        .into_iter()
        .map(|i| if i.id == 2 { i.weight(0) } else { i })
        .collect();
    for kind in NEVER_PICK_A_ZERO_WEIGHT {
        // One balancer for whole-set picks, one for a caller's subset (roundrobin's counters
        // are shared by both kinds of pick, and mixing them is not what is tested here).
        let [whole, subset] = [0, 1].map(|_| {
            let b = lb(
                &format!(
                    "loadbalance={}&zone=a&seed=23&outlier.consecutiveFailures=1\
                     &outlier.maxEjectionPercent=50&outlier.baseEjectionMs=1000000\
                     &outlier.maxEjectionMs=1000000",
                    kind.name()
                ),
                &set,
            );
            b.report(0, 1, 10, Outcome::Failure, NOW).unwrap();
            assert!(active_ejected(&b, 1), "{}", kind.name());
            b
        });
        for k in 0..500u32 {
            let key = k.to_le_bytes();
            let id = whole.select(0, &key, NOW).unwrap();
            whole.report(0, id, 1000, Outcome::Success, NOW).unwrap();
            assert!(id > 2, "{}: picked {id}", kind.name());
            let id = subset.select_among(0, &key, &[1, 2, 3], &[], NOW).unwrap();
            subset.report(0, id, 1000, Outcome::Success, NOW).unwrap();
            assert_eq!(id, 3, "{}: subset pick", kind.name());
        }
    }
}

/// consistenthash with a zone preference answers as its ring walked to the first local
/// invoker (what a caller naming the local invokers as candidates gets): each key keeps its
/// owner when that owner is local, and the keys of remote owners go to the local invoker that
/// follows on the ring. Also while a remote invoker is ejected (the filtered path).
#[test]
fn zone_preference_on_the_ring_is_the_walk_to_the_first_local_invoker() {
    let set: Vec<Invoker> = (1..=12)
        .map(|id| provider(id).zone(["a", "b", "c"][id as usize % 3]))
        .collect();
    let local: Vec<u64> = (1..=12).filter(|id| id % 3 == 1).collect();
    let plain = lb("loadbalance=consistenthash", &set);
    let zoned = lb("loadbalance=consistenthash&zone=b", &set);
    let ejecting = lb(
        "loadbalance=consistenthash&zone=b&outlier.consecutiveFailures=1\
         &outlier.maxEjectionPercent=10&outlier.baseEjectionMs=1000000\
         &outlier.maxEjectionMs=1000000",
        &set,
    );
    ejecting.report(0, 3, 10, Outcome::Failure, NOW).unwrap();
    assert!(ejecting.stats_json(NOW).contains("\"ejected\":true"));
    let mut kept = 0;
    for k in 0..3000u32 {
        let key = format!("key-{k}");
        let owner = plain.select(0, key.as_bytes(), NOW).unwrap();
        let walked = plain
            .select_among(0, key.as_bytes(), &local, &[], NOW)
            .unwrap();
        kept += (owner == walked) as u32;
        assert_eq!(local.contains(&owner), owner == walked, "key {key}");
        for b in [&zoned, &ejecting] {
            assert_eq!(
                b.select(0, key.as_bytes(), NOW).unwrap(),
                walked,
                "key {key}"
            );
        }
    }
    // About a third of the keys are owned by local invokers to begin with (4 of 12).
    assert!((800..1200).contains(&kept), "{kept} keys kept their owner");
}

#[test]
fn zone_preference_spills_over_as_local_health_drops() {
    let config = "loadbalance=random&zone=a&seed=16&zone.minHealthyPercent=70\
                  &outlier.consecutiveFailures=1&outlier.maxEjectionPercent=50\
                  &outlier.baseEjectionMs=1000000&outlier.maxEjectionMs=1000000";
    let b = lb(config, &zoned());
    // One of the two local invokers ejected: 50 % healthy < 70 % → stays local with probability
    // 0.5 / 0.7; the rest spills over to every healthy invoker (1 local of 4).
    b.report(0, 1, 10, Outcome::Failure, NOW).unwrap();
    let draws = 40_000;
    let c = counts(&b, 0, draws, NOW);
    assert_eq!(c.get(&1), None, "ejected invoker picked");
    let p_local = 5.0 / 7.0 + 2.0 / 7.0 * 0.25;
    assert_binomial(c[&2], draws, p_local, 5.0, "local share at 50 % health");
    // Both local invokers ejected: everything spills over.
    b.report(0, 2, 10, Outcome::Failure, NOW).unwrap();
    let c = counts(&b, 0, 3000, NOW);
    assert_eq!(c.get(&1).or(c.get(&2)), None);
    for id in 3..=5 {
        assert_binomial(c[&id], 3000, 1.0 / 3.0, 5.0, "spill-over");
    }
}

#[test]
fn filtered_subsets_are_drawn_by_weight() {
    // The local zone and the not-ejected invokers are subsets with draw tables of their own,
    // which p2c, peakewma, random and leastactive draw from: an idle cluster (each call
    // reported at once) still gets exactly the weights within them, and a zero weight is never
    // drawn while another candidate weighs something.
    let set = vec![
        provider(1).zone("a").weight(100),
        provider(2).zone("a").weight(300),
        provider(3).zone("a").weight(0),
        provider(4).zone("b").weight(100),
        provider(5).zone("b").weight(100),
    ];
    let draws = 40_000;
    for (name, seed) in [
        ("p2c", 31),
        ("peakewma", 40),
        ("random", 34),
        ("leastactive", 37),
    ] {
        let local = lb(&format!("loadbalance={name}&zone=a&seed={seed}"), &set);
        let c = counts(&local, 0, draws, NOW);
        assert_eq!(c.get(&3).or(c.get(&4)).or(c.get(&5)), None, "{name}: {c:?}");
        let what = format!("{name}: local subset, weight 100 of 400");
        assert_binomial(c[&1], draws, 0.25, 5.0, &what);

        let ejecting = format!(
            "loadbalance={name}&seed={}&outlier.consecutiveFailures=1\
             &outlier.maxEjectionPercent=50&outlier.baseEjectionMs=1000000\
             &outlier.maxEjectionMs=1000000",
            seed + 1
        );
        let healthy = lb(&ejecting, &set);
        healthy.report(0, 2, 10, Outcome::Failure, NOW).unwrap();
        let c = counts(&healthy, 0, draws, NOW);
        assert_eq!(c.get(&2).or(c.get(&3)), None, "{name}: {c:?}");
        for id in [1, 4, 5] {
            let what = format!("{name}: not-ejected subset, equal weights");
            assert_binomial(c[&id], draws, 1.0 / 3.0, 5.0, &what);
        }

        // While an invoker of the subset warms up, its effective weight applies, not the
        // table's: invoker 1 halfway through its warm-up weighs half (Dubbo's ramp is linear in
        // uptime), so 50 of 350.
        let mut warming = set.clone();
        warming[0] = warming[0]
            .clone()
            .start_time_ms(NOW / 1000 - 300_000)
            .warmup_ms(600_000);
        let ramping = lb(
            &format!("loadbalance={name}&zone=a&seed={}", seed + 2),
            &warming,
        );
        let c = counts(&ramping, 0, draws, NOW);
        let what = format!("{name}: warming invoker in the local subset");
        assert_binomial(c[&1], draws, 50.0 / 350.0, 5.0, &what);
    }
    // leastactive with the local heavyweight busy: the least count is 0 and the idle local
    // invokers are 1 (weight 100) and 3 (weight 0), so every pick is 1, although the subset's
    // draws land on the busy one three times in four.
    let local = lb("loadbalance=leastactive&zone=a&seed=36", &set);
    while local.select(0, b"", NOW).unwrap() != 2 {}
    for id in [1u64, 3] {
        for _ in 0..active(&local, id) {
            local.report(0, id, 1000, Outcome::Success, NOW).unwrap();
        }
    }
    assert_eq!(active(&local, 2), 1, "one call held on the heavyweight");
    let c = counts(&local, 0, 4_000, NOW);
    assert_eq!(
        c.get(&1),
        Some(&4_000),
        "only the idle weighted invoker: {c:?}"
    );
}

#[test]
fn options_unset_or_inert_change_nothing() {
    // A zone no invoker has, and outlier ejection that never fires, keep every Dubbo strategy's
    // sequence exactly as without them (same seed).
    for kind in StrategyKind::ALL {
        let invokers: Vec<Invoker> = (1..=6).map(|i| provider(i).weight(10 * i as i32)).collect();
        let plain = lb(&format!("loadbalance={}&seed=21", kind.name()), &invokers);
        let opts = lb(
            &format!(
                "loadbalance={}&seed=21&zone=nowhere&outlier.consecutiveFailures=1000",
                kind.name()
            ),
            &invokers,
        );
        for k in 0..3000u32 {
            let key = k.to_le_bytes();
            let a = plain.select(0, &key, NOW + k as i64).unwrap();
            let b = opts.select(0, &key, NOW + k as i64).unwrap();
            assert_eq!(a, b, "{} diverged at call {k}", kind.name());
            let outcome = if k % 7 == 0 {
                Outcome::Failure
            } else {
                Outcome::Success
            };
            let latency = 1000 + (k % 13) as i64 * 100;
            plain
                .report(0, a, latency, outcome, NOW + k as i64)
                .unwrap();
            opts.report(0, b, latency, outcome, NOW + k as i64).unwrap();
        }
    }
}

/// A zone's health counts the invokers that take calls: a drained (weight-0) invoker is no
/// capacity of its zone, ejected or not, as it is none of the ejection budget's. Counted, the
/// ejection of a drained invoker (one drained because it failed, say) spilled calls out of a
/// zone whose only weighted invoker was healthy, and drained invokers that were not ejected
/// kept every call in a zone that had lost half of its weighted invokers.
#[test]
fn a_zones_health_counts_its_weighted_invokers_where_weights_drain() {
    let config = |kind: StrategyKind| {
        format!(
            "loadbalance={}&zone=a&seed=9&outlier.consecutiveFailures=1\
             &outlier.maxEjectionPercent=50",
            kind.name()
        )
    };
    let local_share = |b: &Balancer, local: &[u64]| {
        let mut here = 0;
        for k in 0..4000u32 {
            let id = b.select(0, &k.to_le_bytes(), NOW).unwrap();
            b.report(0, id, 1000, Outcome::Success, NOW).unwrap();
            here += usize::from(local.contains(&id));
        }
        here as f64 / 4000.0
    };
    for kind in NEVER_PICK_A_ZERO_WEIGHT {
        let name = kind.name();
        // Zone a: 1 weighted, 2 drained and ejected. 1 is all of the zone's capacity, healthy.
        let b = lb(
            &config(kind),
            &[
                provider(1).zone("a"),
                provider(2).zone("a").weight(0),
                provider(3).zone("b"),
                provider(4).zone("b"),
            ],
        );
        b.report(0, 2, 10, Outcome::Failure, NOW).unwrap();
        assert_eq!(stat_value(&b, NOW, 2, "ejected"), true, "{name}");
        let share = local_share(&b, &[1]);
        assert_eq!(
            share, 1.0,
            "{name}: a drained invoker's ejection spilled calls over"
        );
        // Zone a: 1 and 2 weighted, 5, 6 and 7 drained; 1 ejected: half of the zone's
        // capacity is left, below 70 %, so 50/70 of the calls stay and the rest spill over
        // to the healthy invokers (2, 3 and 4 by weight: a third of them stays too).
        let b = lb(
            &config(kind),
            &[
                provider(1).zone("a"),
                provider(2).zone("a"),
                provider(3).zone("b"),
                provider(4).zone("b"),
                provider(5).zone("a").weight(0),
                provider(6).zone("a").weight(0),
                provider(7).zone("a").weight(0),
            ],
        );
        b.report(0, 1, 10, Outcome::Failure, NOW).unwrap();
        assert_eq!(stat_value(&b, NOW, 1, "ejected"), true, "{name}");
        let share = local_share(&b, &[2]);
        let expected = 5.0 / 7.0 + 2.0 / 7.0 / 3.0;
        assert!(
            (share - expected).abs() < 0.05,
            "{name}: {share} of the calls stayed local, expected about {expected}"
        );
    }
}
