//! Outlier ejection.

use crate::common::*;
use crate::helpers::*;
use polylb::{Balancer, Invoker, Outcome, StrategyKind};
use std::collections::BTreeMap;

/// Three failures in a row eject for 1 s, twice as long the next time, at most 2.5 s; failures
/// do not also look slow to `peakewma` (ejection alone is under test).
fn three_failures_eject(kind: StrategyKind, seed: u64) -> String {
    format!(
        "loadbalance={}&seed={seed}&outlier.consecutiveFailures=3&outlier.baseEjectionMs=1000\
         &outlier.maxEjectionMs=2500&outlier.maxEjectionPercent=50{}",
        kind.name(),
        if kind == StrategyKind::PeakEwma {
            "&peakewma.failurePenalty=0"
        } else {
            ""
        }
    )
}

#[test]
fn outlier_ejection_backs_off_and_returns() {
    for kind in StrategyKind::ALL {
        let b = lb(
            &three_failures_eject(*kind, 17),
            &(1..=4).map(provider).collect::<Vec<_>>(),
        );
        let name = kind.name();
        let ms = |t: i64| NOW + t * 1000;
        let picks = |t: i64| -> BTreeMap<u64, usize> {
            let mut c = BTreeMap::new();
            for k in 0..400u32 {
                let id = b.select(0, &k.to_le_bytes(), ms(t)).unwrap();
                b.report(0, id, 1000, Outcome::Success, ms(t)).unwrap();
                *c.entry(id).or_insert(0) += 1;
            }
            c
        };
        // Two failures, a success, two failures: never 3 in a row.
        for outcome in [
            Outcome::Failure,
            Outcome::Timeout,
            Outcome::Success,
            Outcome::Failure,
            Outcome::Failure,
        ] {
            b.report(0, 1, 10, outcome, ms(0)).unwrap();
        }
        assert!(picks(0).contains_key(&1), "{name}: ejected too early");
        for _ in 0..3 {
            b.report(0, 1, 10, Outcome::Failure, ms(0)).unwrap();
        }
        assert!(!picks(1).contains_key(&1), "{name}: not ejected");
        assert!(!picks(999).contains_key(&1), "{name}: back too early");
        assert!(picks(1000).contains_key(&1), "{name}: not back after 1 s");
        // Ejected again at once: twice as long.
        for _ in 0..3 {
            b.report(0, 1, 10, Outcome::Failure, ms(1000)).unwrap();
        }
        assert!(
            !picks(2999).contains_key(&1),
            "{name}: second ejection too short"
        );
        assert!(
            picks(3000).contains_key(&1),
            "{name}: second ejection too long"
        );
        // Third in a row: capped at 2.5 s.
        for _ in 0..3 {
            b.report(0, 1, 10, Outcome::Failure, ms(3000)).unwrap();
        }
        assert!(
            !picks(5499).contains_key(&1),
            "{name}: third ejection too short"
        );
        assert!(picks(5500).contains_key(&1), "{name}: cap not applied");
        let v: serde_json::Value = serde_json::from_str(&b.stats_json(ms(5500))).unwrap();
        assert_eq!(v["invokers"][0]["ejections"], 3, "{name}");
    }
}

/// One step of back-off is forgiven per base period without an ejection, counted from when
/// the ejection ended, whether or not a call came just then: before, the lift was stamped at
/// the call that noticed it, so a quiet hour after the ejection forgave nothing and the next
/// ejection lasted twice as long (with a pick just after the expiry, 1 s as it should).
#[test]
fn back_off_is_forgiven_for_the_quiet_time_after_an_ejection() {
    for pick_at_expiry in [true, false] {
        let b = lb(
            "loadbalance=roundrobin&outlier.consecutiveFailures=1&outlier.baseEjectionMs=1000\
             &outlier.maxEjectionPercent=50",
            &(1..=2).map(provider).collect::<Vec<_>>(),
        );
        b.report(0, 1, 10, Outcome::Failure, NOW).unwrap(); // ejected for 1 s
        assert_eq!(stat(&b, NOW, 1, "ejected_until_ms"), NOW / 1000 + 1000);
        if pick_at_expiry {
            let id = b.select(0, b"", NOW + 1_000_000).unwrap();
            b.report(0, id, 10, Outcome::Success, NOW + 1_000_000)
                .unwrap();
        }
        let later = NOW + 100_000_000; // 100 s on
        let id = b.select(0, b"", later).unwrap();
        b.report(0, id, 10, Outcome::Success, later).unwrap();
        b.report(0, 1, 10, Outcome::Failure, later).unwrap();
        assert_eq!(
            stat(&b, later, 1, "ejected_until_ms"),
            later / 1000 + 1000,
            "pick at the expiry: {pick_at_expiry}: the second ejection is a first again"
        );
    }
}

#[test]
fn outlier_failure_rate_rule() {
    let b = lb(
        "loadbalance=p2c&seed=18&outlier.failureRate=50&outlier.minRequests=10\
         &outlier.windowMs=1000&outlier.maxEjectionPercent=50",
        &(1..=4).map(provider).collect::<Vec<_>>(),
    );
    // 30 % failures (never 50 % once the window has 10 calls): stays.
    for k in 0..50 {
        let outcome = if k % 10 < 3 {
            Outcome::Failure
        } else {
            Outcome::Success
        };
        b.report(0, 1, 10, outcome, NOW).unwrap();
    }
    assert_eq!(stat(&b, NOW, 1, "ejections"), 0);
    // A new window at 60 %: ejected once it has 10 calls.
    let t = NOW + 2_000_000;
    for k in 0..10 {
        let outcome = if k % 5 >= 2 {
            Outcome::Failure
        } else {
            Outcome::Success
        };
        b.report(0, 1, 10, outcome, t).unwrap();
    }
    assert_eq!(stat(&b, t, 1, "ejections"), 1);
    let c = counts(&b, 0, 1000, t);
    assert_eq!(c.get(&1), None);
}

#[test]
fn a_clock_stepping_back_does_not_prolong_an_ejection_or_a_window() {
    // The wall clock (the library's clock) steps back an hour. An ejection made before the
    // step ended an hour ahead of every later call, and a failure-rate window begun before it
    // stayed open for that hour.
    const HOUR_US: i64 = 3_600_000_000;
    for kind in StrategyKind::ALL {
        let b = lb(
            &three_failures_eject(*kind, 19),
            &(1..=4).map(provider).collect::<Vec<_>>(),
        );
        // Keys vary, for the hashing strategies.
        let picks_of_1 = |now: i64| {
            (0..400u32)
                .filter(|k| {
                    let id = b.select(0, &k.to_le_bytes(), now).unwrap();
                    b.report(0, id, 1000, Outcome::Success, now).unwrap();
                    id == 1
                })
                .count()
        };
        for _ in 0..3 {
            b.report(0, 1, 10, Outcome::Failure, NOW).unwrap();
        }
        assert_eq!(picks_of_1(NOW), 0, "{}: not ejected", kind.name());
        // Over at most the longest ejection (2.5 s) after the step; here at once, as nothing
        // says how long it has left.
        assert!(
            picks_of_1(NOW - HOUR_US) > 0,
            "{}: still ejected after the step",
            kind.name()
        );
    }
    let b = lb(
        "loadbalance=p2c&seed=20&outlier.failureRate=50&outlier.minRequests=10\
         &outlier.windowMs=1000&outlier.maxEjectionPercent=50",
        &(1..=4).map(provider).collect::<Vec<_>>(),
    );
    // 9 calls, 5 failed, then the step: the next failure starts a window of its own rather
    // than making 6 of 10 in a window an hour long.
    for k in 0..9 {
        let outcome = if k < 5 {
            Outcome::Failure
        } else {
            Outcome::Success
        };
        b.report(0, 1, 10, outcome, NOW).unwrap();
    }
    b.report(0, 1, 10, Outcome::Failure, NOW - HOUR_US).unwrap();
    assert_eq!(stat(&b, NOW - HOUR_US, 1, "ejections"), 0);
}

/// Two ejections, then the clock steps back 2.2 s: the later one now ends more than the
/// longest ejection and a second ahead (made before the step: over), the earlier one does not
/// (still running). The earliest end has not come, yet the later ejection must be lifted.
#[test]
fn an_ejection_from_before_a_clock_step_is_lifted_while_an_earlier_ending_one_runs() {
    for kind in StrategyKind::ALL {
        let b = lb(
            &format!(
                "loadbalance={}&seed=21&outlier.consecutiveFailures=1&outlier.baseEjectionMs=1000\
                 &outlier.maxEjectionMs=2500&outlier.maxEjectionPercent=50{}",
                kind.name(),
                // Failures do not also look slow to peakewma (ejection alone is under test).
                if *kind == StrategyKind::PeakEwma {
                    "&peakewma.failurePenalty=0"
                } else {
                    ""
                }
            ),
            &(1..=4).map(provider).collect::<Vec<_>>(),
        );
        // 1 ejected until NOW + 1 s, 2 until NOW + 1.5 s.
        b.report(0, 1, 10, Outcome::Failure, NOW).unwrap();
        b.report(0, 2, 10, Outcome::Failure, NOW + 500_000).unwrap();
        // 2.2 s back: 1 ends 3.2 s ahead (within 2.5 s + 1 s), 2 ends 3.7 s ahead.
        let back = NOW - 2_200_000;
        let picked: Vec<u64> = (0..400u32)
            .map(|k| {
                let id = b.select(0, &k.to_le_bytes(), back).unwrap();
                b.report(0, id, 1000, Outcome::Success, back).unwrap();
                id
            })
            .collect();
        assert!(!picked.contains(&1), "{}: 1 not ejected", kind.name());
        assert!(
            picked.contains(&2),
            "{}: 2 still ejected though its ejection was made before the step",
            kind.name()
        );
    }
}

#[test]
fn outlier_ejection_never_ejects_everyone() {
    for percent in [0, 10, 50, 100] {
        let b = lb(
            &format!(
                "loadbalance=random&seed=19&outlier.consecutiveFailures=1\
                 &outlier.maxEjectionPercent={percent}"
            ),
            &(1..=10).map(provider).collect::<Vec<_>>(),
        );
        // A bad network: every invoker fails.
        for round in 0..5 {
            for id in 1..=10 {
                b.report(0, id, 10, Outcome::Failure, NOW + round).unwrap();
            }
        }
        let ejected = (1..=10).filter(|&id| active_ejected(&b, id)).count();
        // 0 % never ejects; otherwise at least one invoker and never all.
        let budget = if percent == 0 {
            0
        } else {
            (10 * percent / 100).clamp(1, 9)
        };
        assert_eq!(ejected, budget, "maxEjectionPercent={percent}");
        let c = counts(&b, 0, 2000, NOW);
        assert_eq!(c.len(), 10 - budget);
        // A caller subset made only of ejected invokers is still answered.
        let ejected_ids: Vec<u64> = (1..=10).filter(|&id| active_ejected(&b, id)).collect();
        if !ejected_ids.is_empty() {
            let id = b.select_among(0, b"", &ejected_ids, &[], NOW).unwrap();
            assert!(ejected_ids.contains(&id));
        }
    }
    // A set shrinking below its ejections lifts the extra ones.
    let b = lb(
        "loadbalance=p2c&outlier.consecutiveFailures=1&outlier.maxEjectionPercent=50",
        &(1..=10).map(provider).collect::<Vec<_>>(),
    );
    for id in 1..=5 {
        b.report(0, id, 10, Outcome::Failure, NOW).unwrap();
    }
    b.update(&(1..=4).map(provider).collect::<Vec<_>>())
        .unwrap();
    let ejected = (1..=4).filter(|&id| active_ejected(&b, id)).count();
    assert_eq!(ejected, 2);
}

/// The budget protects serving capacity: it counts the weighted invokers while the set has
/// any. Counted over every member, it let failures eject the only weighted invokers of a set
/// whose other members were being drained (weight 0), and every call then went to those.
#[test]
fn ejection_never_leaves_only_drained_invokers_to_serve() {
    for kind in StrategyKind::ALL {
        if matches!(
            kind,
            StrategyKind::ConsistentHash
                | StrategyKind::Adaptive
                | StrategyKind::LeastActive
                | StrategyKind::ShortestResponse
        ) {
            continue; // weight 0 does not drain there: below
        }
        let name = kind.name();
        // One weighted invoker and one drained: the weighted one is the whole capacity.
        let b = lb(
            &format!("loadbalance={name}&seed=5&outlier.consecutiveFailures=5"),
            &[provider(1), provider(2).weight(0)],
        );
        for _ in 0..5 {
            b.report(0, 1, 10, Outcome::Failure, NOW).unwrap();
        }
        assert!(
            !active_ejected(&b, 1),
            "{name}: the only weighted invoker ejected"
        );
        // (Before: none. `shortestresponse` still tries each drained one once, while its
        // window is empty, as Dubbo's does: an invoker with no success in the window wins.)
        let c = counts(&b, 0, 200, NOW + 1000);
        assert!(c.get(&1).copied().unwrap_or(0) >= 150, "{name}: {c:?}");
        // Two weighted of twenty at 10 %: the budget is one of the two, not two of twenty.
        let mut set: Vec<Invoker> = (1..=20).map(|id| provider(id).weight(0)).collect();
        set[0] = provider(1);
        set[1] = provider(2);
        let b = lb(
            &format!("loadbalance={name}&seed=5&outlier.consecutiveFailures=1"),
            &set,
        );
        b.report(0, 1, 10, Outcome::Failure, NOW).unwrap();
        b.report(0, 2, 10, Outcome::Failure, NOW).unwrap();
        assert!(active_ejected(&b, 1) && !active_ejected(&b, 2), "{name}");
        let c = counts(&b, 0, 200, NOW + 1000);
        assert!(c.get(&2).copied().unwrap_or(0) >= 150, "{name}: {c:?}");
        // A drained invoker that fails is ejected outside the budget (it is no capacity).
        b.report(0, 7, 10, Outcome::Failure, NOW).unwrap();
        assert!(
            active_ejected(&b, 7),
            "{name}: a failing drained invoker kept"
        );
        // An update that leaves more weighted ejections than the new budget lifts the extra.
        let b = lb(
            &format!(
                "loadbalance={name}&seed=5&outlier.consecutiveFailures=1\
                 &outlier.maxEjectionPercent=50"
            ),
            &(1..=4).map(provider).collect::<Vec<_>>(),
        );
        b.report(0, 1, 10, Outcome::Failure, NOW).unwrap();
        b.report(0, 2, 10, Outcome::Failure, NOW + 1).unwrap();
        assert!(active_ejected(&b, 1) && active_ejected(&b, 2), "{name}");
        // 3 and 4 drained: the weighted are 1 and 2, and one of two may be out.
        b.update(&[
            provider(1),
            provider(2),
            provider(3).weight(0),
            provider(4).weight(0),
        ])
        .unwrap();
        assert!(!active_ejected(&b, 1) && active_ejected(&b, 2), "{name}");
    }
    // consistenthash's ring ignores weights, adaptive's load formula only discounts them, and
    // leastactive and shortestresponse return their one least loaded (or fastest) invoker
    // whatever its weight (as Dubbo's do): a weight-0 invoker still takes calls, so every
    // invoker counts, as when all weigh 0.
    for name in [
        "consistenthash",
        "adaptive",
        "leastactive",
        "shortestresponse",
    ] {
        let b = lb(
            &format!(
                "loadbalance={name}&seed=5&outlier.consecutiveFailures=1\
                 &outlier.maxEjectionPercent=50"
            ),
            &[
                provider(1),
                provider(2).weight(0),
                provider(3).weight(0),
                provider(4).weight(0),
            ],
        );
        if name == "leastactive" {
            // Calls held in flight spread over all four, weight 0 or not.
            let held = hold(&b, 0, 40, NOW);
            assert!(held.iter().filter(|&&id| id != 1).count() >= 20, "{held:?}");
            for id in held {
                b.report(0, id, 10, Outcome::Cancelled, NOW).unwrap();
            }
        }
        for id in [2, 3, 4, 1] {
            b.report(0, id, 10, Outcome::Failure, NOW).unwrap();
        }
        assert_eq!(
            (1..=4).map(|id| active_ejected(&b, id)).collect::<Vec<_>>(),
            [false, true, true, false],
            "{name}"
        );
    }
    // maxEjectionPercent=0 never ejects, drained invokers included.
    let b = lb(
        "loadbalance=random&outlier.consecutiveFailures=1&outlier.maxEjectionPercent=0",
        &[provider(1), provider(2), provider(3).weight(0)],
    );
    for id in 1..=3 {
        b.report(0, id, 10, Outcome::Failure, NOW).unwrap();
    }
    assert!((1..=3).all(|id| !active_ejected(&b, id)));
    // Every weight 0: all of them serve (uniformly), and all of them count.
    let b = lb(
        "loadbalance=random&seed=5&outlier.consecutiveFailures=1&outlier.maxEjectionPercent=50",
        &(1..=4).map(|id| provider(id).weight(0)).collect::<Vec<_>>(),
    );
    for id in 1..=4 {
        b.report(0, id, 10, Outcome::Failure, NOW).unwrap();
    }
    assert_eq!((1..=4).filter(|&id| active_ejected(&b, id)).count(), 2);
}

/// An ejection that is over frees its place in the budget even when no pick came between to
/// lift it: reports alone (a consumer whose calls all fail fast, say) must not be refused.
#[test]
fn an_ejection_that_is_over_leaves_the_budget_without_a_pick_between() {
    // 10 invokers at 10 %: one ejection at a time; a first ejection lasts 1 s.
    let b = lb(
        "loadbalance=random&seed=3&outlier.consecutiveFailures=1&outlier.baseEjectionMs=1000",
        &(1..=10).map(provider).collect::<Vec<_>>(),
    );
    b.report(0, 1, 10, Outcome::Failure, NOW).unwrap();
    assert!(active_ejected(&b, 1));
    b.report(0, 2, 10, Outcome::Failure, NOW + 500_000).unwrap();
    assert!(!active_ejected(&b, 2), "over budget while 1 is out");
    // 1's ejection ended at NOW + 1 s; nothing was picked since.
    b.report(0, 2, 10, Outcome::Failure, NOW + 1_500_000)
        .unwrap();
    assert!(!active_ejected(&b, 1), "1's ejection is over");
    assert!(active_ejected(&b, 2), "2 takes the freed place");
    let c = counts(&b, 0, 2000, NOW + 1_600_000);
    assert_eq!(c.get(&2), None);
    assert!(c.contains_key(&1));
}

/// A method's typical latency starts from its first success's own latency, not from an
/// estimate that a failure penalty inflated: seeded at the penalty (1 s), a fast invoker that
/// failed once would look typical at about 1 s and come back only at the decay's pace (10 s).
#[test]
fn peakewma_a_failure_before_the_first_success_does_not_seed_the_typical_latency() {
    let b = lb("loadbalance=peakewma", &[provider(1), provider(2)]);
    let mut t = NOW;
    let mut call = |outcome| {
        assert_eq!(b.select_among(0, b"", &[1], &[], t).unwrap(), 1);
        b.report(0, 1, 1000, outcome, t + 1000).unwrap();
        t += 2000;
    };
    call(Outcome::Failure);
    for _ in 0..4 {
        call(Outcome::Success);
    }
    let v: serde_json::Value = serde_json::from_str(&b.stats_json(t)).unwrap();
    let estimate = v["invokers"][0]["latency_estimate_us"].as_i64().unwrap();
    // 1 s after the failure, then halfway to 1 ms in log space per success: 31.6, 5.6, 2.4 ms,
    // then the typical 1 ms.
    assert!(estimate <= 2_500, "estimate {estimate} µs");
}

pub(crate) fn active_ejected(b: &Balancer, id: u64) -> bool {
    let v: serde_json::Value = serde_json::from_str(&b.stats_json(NOW)).unwrap();
    v["invokers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["id"] == id)
        .unwrap()["ejected"]
        .as_bool()
        .unwrap()
}

#[test]
fn consistenthash_with_ejection_moves_only_the_ejected_keys() {
    let invokers: Vec<Invoker> = (1..=5).map(provider).collect();
    let b = lb(
        "loadbalance=consistenthash&outlier.consecutiveFailures=1&outlier.maxEjectionPercent=20",
        &invokers,
    );
    let keys: Vec<String> = (0..2000).map(|k| format!("k{k}")).collect();
    let before: Vec<u64> = keys
        .iter()
        .map(|k| b.select(0, k.as_bytes(), NOW).unwrap())
        .collect();
    b.report(0, 3, 10, Outcome::Failure, NOW).unwrap();
    for (k, &was) in keys.iter().zip(&before) {
        let now = b.select(0, k.as_bytes(), NOW).unwrap();
        if was == 3 {
            assert_ne!(now, 3);
        } else {
            assert_eq!(now, was, "key {k} moved");
        }
    }
}

#[test]
fn an_ejection_of_the_longest_length_is_not_lifted_by_a_call_a_moment_earlier() {
    // Threads read the time a little apart (a call that read the clock just before another
    // thread's report ejected an invoker, or callers passing their own times): an ejection
    // that lasts `maxEjectionMs` (here every one: base = max) lies a moment more than that
    // ahead of such a call, which is no clock step and must not lift it.
    let b = lb(
        "loadbalance=random&seed=7&outlier.consecutiveFailures=3&outlier.baseEjectionMs=30000\
         &outlier.maxEjectionMs=30000&outlier.maxEjectionPercent=50",
        &(1..=4).map(provider).collect::<Vec<_>>(),
    );
    for _ in 0..3 {
        b.report(0, 1, 10, Outcome::Failure, NOW).unwrap();
    }
    let earlier = NOW - 2_000; // 2 ms
    for k in 0..400u32 {
        let id = b.select(0, &k.to_le_bytes(), earlier).unwrap();
        b.report(0, id, 1000, Outcome::Success, earlier).unwrap();
        assert_ne!(id, 1, "the ejection was lifted by a call 2 ms earlier");
    }
    assert!(
        stat(&b, NOW, 1, "ejected_until_ms") > 0,
        "no longer ejected"
    );
}

/// The back-off stops growing once an ejection reaches `outlier.maxEjectionMs`: the steps past
/// it lengthen nothing, and kept they each had to be forgiven too, so an invoker that flapped
/// for a long time was ejected for the longest time again after as long a time of health.
#[test]
fn back_off_steps_past_the_longest_ejection_are_not_kept() {
    let b = lb(
        "loadbalance=random&seed=3&outlier.consecutiveFailures=1&outlier.maxEjectionPercent=50\
         &outlier.baseEjectionMs=1000&outlier.maxEjectionMs=3000",
        &(1..=4).map(provider).collect::<Vec<_>>(),
    );
    let ms = |t: i64| NOW + t * 1000;
    let until = |t: i64| stat(&b, ms(t), 1, "ejected_until_ms") - ms(t) / 1000;
    // Flaps 20 times: ejected again as each ejection ends (1, 2, then 3 s each).
    let mut t = 0;
    for _ in 0..20 {
        b.report(0, 1, 10, Outcome::Failure, ms(t)).unwrap();
        t += until(t);
        b.select(0, b"", ms(t)).unwrap();
    }
    assert!(stat(&b, ms(t), 1, "ejections") <= 3);
    // Healthy for three base periods: the three steps to the longest ejection are forgiven.
    t += 3000;
    b.report(0, 1, 10, Outcome::Failure, ms(t)).unwrap();
    assert_eq!(
        until(t),
        1000,
        "ejected for longer than the base after 3 quiet periods"
    );
}
