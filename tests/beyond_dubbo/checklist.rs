//! The options against the remaining checklist: weights, churn, methods, warm-up, outcomes.

use crate::common::*;
use crate::helpers::*;
use crate::outlier::active_ejected;
use polylb::{Balancer, Invoker, Outcome, Status};
use std::collections::BTreeMap;

#[test]
fn options_keep_weights_within_what_they_leave() {
    // Zone a holds invokers 1 (weight 300) and 2 (weight 100): local picks follow the weights.
    let invokers = [
        provider(1).zone("a").weight(300),
        provider(2).zone("a"),
        provider(3).zone("b").weight(500),
    ];
    for name in ["random", "p2c", "peakewma"] {
        let b = lb(&format!("loadbalance={name}&zone=a&seed=22"), &invokers);
        let draws = 40_000;
        let c = counts(&b, 0, draws, NOW);
        assert_eq!(c.get(&3), None, "{name}");
        assert_binomial(c[&1], draws, 0.75, 5.0, &format!("{name} in zone"));
    }
    // With invoker 3 of 1..=4 ejected, the others keep their relative weights.
    let invokers = [
        provider(1).weight(100),
        provider(2).weight(200),
        provider(3),
        provider(4).weight(700),
    ];
    let b = lb(
        "loadbalance=p2c&seed=23&outlier.consecutiveFailures=1&outlier.maxEjectionPercent=25",
        &invokers,
    );
    b.report(0, 3, 10, Outcome::Timeout, NOW).unwrap();
    let draws = 40_000;
    let c = counts(&b, 0, draws, NOW);
    assert_eq!(c.get(&3), None);
    assert_binomial(c[&2], draws, 0.2, 5.0, "weight 200 of 1000 left");
    assert_binomial(c[&4], draws, 0.7, 5.0, "weight 700 of 1000 left");
}

#[test]
fn options_follow_churn() {
    let b = lb(
        "loadbalance=p2c&seed=24&zone=a&outlier.consecutiveFailures=1&outlier.maxEjectionPercent=50",
        &[provider(1).zone("a"), provider(2).zone("a"), provider(3).zone("b"), provider(4).zone("b")],
    );
    b.report(0, 1, 10, Outcome::Failure, NOW).unwrap();
    assert!(active_ejected(&b, 1));
    // Invoker 1 leaves while ejected and comes back: a fresh start, not ejected.
    b.update(&[
        provider(2).zone("a"),
        provider(3).zone("b"),
        provider(4).zone("b"),
    ])
    .unwrap();
    b.update(&[
        provider(1).zone("a"),
        provider(2).zone("a"),
        provider(3).zone("b"),
        provider(4).zone("b"),
    ])
    .unwrap();
    assert!(!active_ejected(&b, 1));
    let c = counts(&b, 0, 2000, NOW);
    assert!(c[&1] > 700 && c[&2] > 700 && c.len() == 2, "{c:?}");
    // Invokers change zones: the preference follows at once.
    b.update(&[
        provider(1).zone("b"),
        provider(2).zone("b"),
        provider(3).zone("a"),
        provider(4).zone("a"),
    ])
    .unwrap();
    let c = counts(&b, 0, 2000, NOW);
    assert!(c.keys().all(|&id| id >= 3), "{c:?}");
}

#[test]
fn outlier_state_is_per_invoker_not_per_method() {
    // An invoker is healthy or not: failures of any method count, and an ejection applies to
    // every method (strategy state such as in-flight counts stays per method).
    let b = lb(
        "loadbalance=p2c&seed=25&outlier.consecutiveFailures=3&outlier.maxEjectionPercent=50",
        &[provider(1), provider(2), provider(3)],
    );
    let (m1, m2) = (b.method("a").unwrap(), b.method("b").unwrap());
    b.report(m1, 1, 10, Outcome::Failure, NOW).unwrap();
    b.report(m2, 1, 10, Outcome::Timeout, NOW).unwrap();
    b.report(m1, 1, 10, Outcome::Failure, NOW).unwrap();
    for m in [0, m1, m2] {
        assert_eq!(counts(&b, m, 500, NOW).get(&1), None, "method {m}");
    }
}

/// A balancer over invokers 1-3 that invoker 4 then joins, warming up too (60 s of a 10 min
/// warm-up: weight 10 of 100) and ramping (slow start 30 s from 20 %): effective weight
/// 10 × 0.2 = 2 at first, and 15 (90 s of 600) once the ramp is over.
fn joined_warming_and_ramping(strategy: &str) -> Balancer {
    let now_ms = NOW / 1000;
    let b = lb(
        &format!(
            "loadbalance={strategy}&seed=26&slowstart.windowMs=30000&slowstart.minWeightPercent=20"
        ),
        &[provider(1), provider(2), provider(3)],
    );
    b.update(&[
        provider(1),
        provider(2),
        provider(3),
        provider(4).start_time_ms(now_ms - 60_000),
    ])
    .unwrap();
    b
}

#[test]
fn slow_start_and_options_compose_with_warmup() {
    for strategy in ["p2c", "peakewma"] {
        let b = joined_warming_and_ramping(strategy);
        let draws = 60_000;
        let c = counts(&b, 0, draws, NOW);
        assert_binomial(
            c.get(&4).copied().unwrap_or(0),
            draws,
            2.0 / 302.0,
            5.0,
            &format!("{strategy}: warm-up x ramp"),
        );
        // After the ramp, the warm-up alone.
        let c = counts(&b, 0, draws, NOW + 30_000_000);
        assert_binomial(
            c.get(&4).copied().unwrap_or(0),
            draws,
            15.0 / 315.0,
            5.0,
            &format!("{strategy}: warm-up only"),
        );
    }
}

/// 20,000 keys, and which of them Dubbo's ring over invokers 1-4 gives to `id`.
fn keys_the_ring_gives(id: u64) -> (Vec<[u8; 4]>, Vec<bool>) {
    let ring = lb(
        "loadbalance=consistenthash",
        &(1..=4).map(provider).collect::<Vec<_>>(),
    );
    let keys: Vec<[u8; 4]> = (0..20_000u32).map(|k| k.to_le_bytes()).collect();
    let owned = keys
        .iter()
        .map(|k| ring.select(0, k, NOW).unwrap() == id)
        .collect();
    (keys, owned)
}

/// For each key, whether a call with it (made and reported at `t`) went to `id`.
fn taken_by(b: &Balancer, keys: &[[u8; 4]], id: u64, t: i64) -> Vec<bool> {
    keys.iter()
        .map(|k| {
            let got = b.select(0, k, t).unwrap();
            b.report(0, got, 100, Outcome::Success, t).unwrap();
            got == id
        })
        .collect()
}

/// boundedhash weighs a warming, ramping invoker by the same product: under light load it
/// takes that fraction of the keys the ring gives it (2 of the warmest's 100, then 15), keeps
/// the keys it took, and under load holds its capacity ⌈1.25 × calls × w / W⌉ and no more.
#[test]
fn boundedhash_composes_slow_start_with_warmup() {
    let b = joined_warming_and_ramping("boundedhash");
    let (keys, owned) = keys_the_ring_gives(4);
    let owned_n = owned.iter().filter(|&&o| o).count();
    let taken_at = |t: i64| taken_by(&b, &keys, 4, t);
    let (early, later) = (taken_at(NOW), taken_at(NOW + 30_000_000));
    assert!(
        early.iter().zip(&owned).all(|(e, o)| !e || *o),
        "a key the ring does not give invoker 4 went to it"
    );
    for (taken, fraction, what) in [(&early, 0.02, "ramping"), (&later, 0.15, "warm-up only")] {
        let n = taken.iter().filter(|&&t| t).count();
        assert_binomial(n, owned_n, fraction, 5.0, what);
    }
    assert!(
        early.iter().zip(&later).all(|(e, l)| !e || *l),
        "a key taken early moved away later"
    );

    // Under load: 400 calls in flight, each with a key invoker 4 takes at that time. Its
    // capacity grows by less than one a call, so it holds exactly the capacity of the last.
    for (dt, taken, w, total) in [
        (0i64, &early, 2.0, 302.0),
        (30_000_000, &later, 15.0, 315.0),
    ] {
        let b = joined_warming_and_ramping("boundedhash");
        // The ramp starts at the first pick after the join.
        let id = b.select(0, b"start", NOW).unwrap();
        b.report(0, id, 100, Outcome::Success, NOW).unwrap();
        let its_keys: Vec<&[u8; 4]> = keys
            .iter()
            .zip(taken)
            .filter(|(_, &t)| t)
            .map(|(k, _)| k)
            .collect();
        for k in its_keys.iter().cycle().take(400) {
            b.select(0, *k, NOW + dt).unwrap();
        }
        let capacity = (1.25f64 * 400.0 * w / total).ceil() as i64;
        assert_eq!(
            active(&b, 4),
            capacity,
            "at +{dt} µs (weight {w} of {total})"
        );
    }
}

#[test]
fn p2c_and_boundedhash_count_calls_in_flight_whatever_the_outcome() {
    // p2c's only signal is the caller's own in-flight count: failures and timeouts end calls
    // like successes, cancelled calls undo the count; the outcome itself is outlier ejection's
    // business.
    for name in ["p2c", "boundedhash"] {
        let b = lb(
            &format!("loadbalance={name}&seed=27"),
            &[provider(1), provider(2)],
        );
        for outcome in [
            Outcome::Success,
            Outcome::Failure,
            Outcome::Timeout,
            Outcome::Cancelled,
        ] {
            let ids = hold(&b, 0, 40, NOW);
            assert!(active(&b, 1) + active(&b, 2) == 40);
            for id in ids {
                b.report(0, id, 5000, outcome, NOW).unwrap();
            }
            assert_eq!(active(&b, 1) + active(&b, 2), 0, "{name} {outcome:?}");
        }
        if name == "p2c" {
            let c = counts(&b, 0, 4000, NOW);
            assert!(c[&1] > 1000 && c[&2] > 1000, "{name}: {c:?}");
        }
    }
}

#[test]
fn boundedhash_gives_a_warming_invoker_its_keys_gradually_and_keeps_them() {
    // Invoker 4 started 60 s ago (10 % of its weight with the default 10 min warm-up): it takes
    // about 10 % of the keys the ring gives it; at 300 s, about 50 % — a superset.
    let now_ms = NOW / 1000;
    let mut invokers: Vec<Invoker> = (1..=3).map(provider).collect();
    invokers.push(provider(4).start_time_ms(now_ms - 60_000));
    let b = lb("loadbalance=boundedhash", &invokers);
    let (keys, own) = keys_the_ring_gives(4);
    let pick = |t: i64| taken_by(&b, &keys, 4, t);
    let early = pick(NOW);
    let later = pick(NOW + 240_000_000);
    let owned = own.iter().filter(|&&o| o).count();
    let early_n = early.iter().filter(|&&o| o).count();
    let later_n = later.iter().filter(|&&o| o).count();
    assert_binomial(early_n, owned, 0.10, 5.0, "keys taken at 10 % weight");
    assert_binomial(later_n, owned, 0.50, 5.0, "keys taken at 50 % weight");
    assert!(
        early.iter().zip(&later).all(|(e, l)| !e || *l),
        "a key taken early moved away later"
    );
}

#[test]
fn boundedhash_keeps_the_ring_when_every_invoker_warms_up_together() {
    // A full redeploy: every invoker 60 s into Dubbo's 10-min warm-up (10 % of its weight), or
    // every id new under slow start. Relative to each other they weigh the same, so under light
    // load every key stays where consistenthash puts it (a share relative to full weight made
    // most keys skip every owner and fall back to the first invoker of the set).
    let now_ms = NOW / 1000;
    let warming: Vec<Invoker> = (1..=4)
        .map(|i| {
            provider(i)
                .start_time_ms(now_ms - 60_000)
                .warmup_ms(600_000)
        })
        .collect();
    let ramped = lb(
        "loadbalance=boundedhash&slowstart.windowMs=60000",
        &(1..=4).map(provider).collect::<Vec<_>>(),
    );
    let green: Vec<Invoker> = (5..=8).map(provider).collect();
    ramped.update(&green).unwrap();
    for (b, set) in [
        (lb("loadbalance=boundedhash", &warming), &warming),
        (ramped, &green),
    ] {
        let ch = lb("loadbalance=consistenthash", set);
        for k in 0..2_000u32 {
            let key = format!("key-{k}");
            let got = b.select(0, key.as_bytes(), NOW).unwrap();
            b.report(0, got, 1000, Outcome::Success, NOW).unwrap();
            let ring = ch.select(0, key.as_bytes(), NOW).unwrap();
            ch.report(0, ring, 1000, Outcome::Success, NOW).unwrap();
            assert_eq!(got, ring, "key {key}");
        }
    }
}

#[test]
fn boundedhash_bound_is_the_exact_ceiling() {
    // ⌈factor × (in flight + 1) / n⌉ at equal weights, computed exactly: in f64, 1.25 × 28 / 5
    // is 7.000000000000001, and its ceiling let an invoker take an 8th call.
    for (factor, num, den, n) in [
        ("1.25", 5i64, 4i64, 5u64),
        ("1.5", 3, 2, 3),
        ("1.1", 11, 10, 4),
    ] {
        let b = lb(
            &format!("loadbalance=boundedhash&boundedhash.factor={factor}"),
            &(1..=n).map(provider).collect::<Vec<_>>(),
        );
        let mut active: BTreeMap<u64, i64> = BTreeMap::new();
        let mut reached = false;
        for calls in 1..=80i64 {
            // Nothing is reported: `calls` are in flight after this select.
            let id = b.select(0, b"hot-key", NOW).unwrap();
            let held = active.entry(id).or_insert(0);
            *held += 1;
            let d = den * n as i64;
            let bound = (num * calls + d - 1) / d;
            assert!(
                *held <= bound,
                "factor {factor}, {n} invokers: invoker {id} holds {held} of {calls}, bound {bound}"
            );
            reached |= *held == bound && (num * calls) % d == 0;
        }
        // The bound was met exactly where factor × calls / n is whole (the rounding case);
        // 1.1 (not a binary fraction) is checked for the bound only.
        assert!(
            reached || factor == "1.1",
            "factor {factor}: no whole bound was reached"
        );
    }
}

/// Provider metrics are adaptive's: any other strategy accepts and ignores them. (Each
/// strategy's per-method words share their space, so metrics written for a peakewma or
/// shortestresponse balancer would overwrite its latency estimates.)
#[test]
fn provider_metrics_leave_other_strategies_unchanged() {
    let invokers: Vec<Invoker> = (1..=4).map(provider).collect();
    for strategy in ["peakewma", "shortestresponse", "leastactive", "random"] {
        let config = format!("loadbalance={strategy}&seed=21");
        let (plain, fed) = (lb(&config, &invokers), lb(&config, &invokers));
        let run = |b: &Balancer, metrics: bool| -> Vec<u64> {
            (0..2_000i64)
                .map(|k| {
                    let now = NOW + k * 1_000;
                    let id = b.select(0, b"", now).unwrap();
                    // Invoker 1 is slow, so the latency-aware strategies have estimates to lose.
                    let rt = if id == 1 { 40_000 } else { 1_000 + k % 7 };
                    b.report(0, id, rt, Outcome::Success, now).unwrap();
                    if metrics {
                        for other in 1..=4 {
                            b.report_provider_metrics(0, other, now / 1000, 5.0, 7, now)
                                .unwrap();
                        }
                    }
                    id
                })
                .collect()
        };
        let (a, b) = (run(&plain, false), run(&fed, true));
        assert_eq!(a, b, "{strategy}: the picks changed");
        let end = NOW + 2_000 * 1_000;
        assert_eq!(plain.stats_json(end), fed.stats_json(end), "{strategy}");
        // Bad metrics are still rejected with a clear error.
        assert_eq!(
            fed.report_provider_metrics(0, 1, 1, -1.0, 0, end),
            Err(Status::InvalidArgument)
        );
    }
}
