//! Warm-up, slow start, churn.

use crate::common::*;
use crate::helpers::*;
use polylb::{Balancer, Invoker, Outcome, Status};

#[test]
fn a_warming_invoker_is_not_flooded() {
    // Invoker 4 started 6 s ago with the default 10 min warm-up: effective weight 1 of 100.
    let now_ms = NOW / 1000;
    for name in ["p2c", "peakewma"] {
        let b = lb(
            &format!("loadbalance={name}&seed=11"),
            &[
                provider(1),
                provider(2),
                provider(3),
                provider(4).start_time_ms(now_ms - 6_000),
            ],
        );
        // Under load (30 in flight) and idle alike, it gets about its weight (1 / 301), never
        // the flood a least-loaded rule would give an empty invoker.
        let c = closed_loop(&b, 30, 30_000);
        let s = c.get(&4).copied().unwrap_or(0) as f64 / 30_000.0;
        assert!(
            s < 0.02,
            "{name}: warming invoker's share under load {s:.4}"
        );
        let c = counts(&b, 0, 30_000, NOW);
        assert_binomial(
            c.get(&4).copied().unwrap_or(0),
            30_000,
            1.0 / 301.0,
            5.0,
            name,
        );
    }
}

#[test]
fn slow_start_ramps_an_invoker_that_joins() {
    for name in NEW {
        let config = format!(
            "loadbalance={name}&seed=12&slowstart.windowMs=60000&slowstart.minWeightPercent=10"
        );
        let first: Vec<Invoker> = (1..=3).map(provider).collect();
        let b = lb(&config, &first);
        // The first set does not ramp.
        let draws = 40_000;
        if name != "boundedhash" {
            let c = counts(&b, 0, draws, NOW);
            for id in 1..=3 {
                assert_binomial(c[&id], draws, 1.0 / 3.0, 5.0, "first set");
            }
        }
        let mut all = first.clone();
        all.push(provider(4));
        b.update(&all).unwrap();
        if name == "boundedhash" {
            // The joining invoker's capacity ramps: with 300 keys in flight it holds at most its
            // ramped share (10 % weight at t = 0 → 10 of 310 → ⌈1.25 × 301 × 10 / 310⌉ = 13).
            for k in 0..300u32 {
                b.select(0, &k.to_le_bytes(), NOW).unwrap();
            }
            assert!(
                active(&b, 4) <= 13,
                "joining invoker holds {}",
                active(&b, 4)
            );
            continue;
        }
        // At t = 0: 10 % of the weight; at 30 s: 50 % (linear); after 60 s: full.
        for (dt, w) in [(0, 10.0), (30_000_000, 50.0), (61_000_000, 100.0)] {
            let c = counts(&b, 0, draws, NOW + dt);
            let p = w / (300.0 + w);
            assert_binomial(
                c.get(&4).copied().unwrap_or(0),
                draws,
                p,
                5.0,
                &format!("{name} at +{dt} µs"),
            );
        }
    }
}

/// A joining invoker's ramp is the invoker's, not a method's: started by a pick of one
/// method, it has run as long for another method's first picks (30 s of 60: 50 %, not the
/// 10 % of a ramp that would start there).
#[test]
fn slow_start_ramp_is_per_invoker_across_methods() {
    for name in ["p2c", "peakewma"] {
        let config = format!(
            "loadbalance={name}&seed=17&slowstart.windowMs=60000&slowstart.minWeightPercent=10"
        );
        let mut all: Vec<Invoker> = (1..=3).map(provider).collect();
        let b = lb(&config, &all);
        let (first, other) = (b.method("first").unwrap(), b.method("other").unwrap());
        all.push(provider(4));
        b.update(&all).unwrap();
        let id = b.select(first, b"", NOW).unwrap();
        b.report(first, id, 1000, Outcome::Success, NOW).unwrap();
        let draws = 40_000;
        let c = counts(&b, other, draws, NOW + 30_000_000);
        assert_binomial(
            c.get(&4).copied().unwrap_or(0),
            draws,
            50.0 / 350.0,
            5.0,
            &format!("{name}, the other method at +30 s"),
        );
    }
}

#[test]
fn slow_start_does_not_hold_a_ramp_for_as_long_as_a_clock_step_back() {
    // An invoker joins and its ramp starts; then the wall clock (the library's clock) steps
    // back an hour. The join lay an hour ahead of every later call, which held the invoker at
    // the lowest weight (10 %) for that hour.
    for name in ["p2c", "peakewma"] {
        let config = format!(
            "loadbalance={name}&seed=13&slowstart.windowMs=60000&slowstart.minWeightPercent=10"
        );
        let mut all: Vec<Invoker> = (1..=3).map(provider).collect();
        let b = lb(&config, &all);
        all.push(provider(4));
        b.update(&all).unwrap();
        let draws = 40_000;
        let c = counts(&b, 0, draws, NOW);
        assert_binomial(
            c[&4],
            draws,
            10.0 / 310.0,
            5.0,
            &format!("{name} at the join"),
        );
        let c = counts(&b, 0, draws, NOW - 3_600_000_000);
        assert_binomial(c[&4], draws, 0.25, 5.0, &format!("{name} after the step"));
    }
}

#[test]
fn a_ramp_over_at_a_clock_step_back_stays_over_and_later_joins_still_ramp() {
    // After the step, the ramp that began an hour ahead is over: not begun again, from the
    // lowest weight, when the clock catches up with its join; and an invoker joining after the
    // step ramps, though an earlier join still lies an hour ahead.
    const HOUR_US: i64 = 3_600_000_000;
    for name in ["p2c", "peakewma"] {
        let config = format!(
            "loadbalance={name}&seed=14&slowstart.windowMs=60000&slowstart.minWeightPercent=10"
        );
        let mut all: Vec<Invoker> = (1..=3).map(provider).collect();
        let b = lb(&config, &all);
        all.push(provider(4));
        b.update(&all).unwrap();
        let draws = 40_000;
        counts(&b, 0, 100, NOW); // stamps 4's join
        counts(&b, 0, 100, NOW - HOUR_US); // after the step
        let c = counts(&b, 0, draws, NOW - 30_000_000);
        assert_binomial(
            c[&4],
            draws,
            0.25,
            5.0,
            &format!("{name} when the clock caught up"),
        );
        let b = lb(&config, &all[..3]);
        b.update(&all).unwrap();
        counts(&b, 0, 100, NOW);
        all.push(provider(5));
        b.update(&all).unwrap();
        let c = counts(&b, 0, draws, NOW - HOUR_US);
        assert_binomial(
            c[&5],
            draws,
            10.0 / 410.0,
            5.0,
            &format!("{name}: a join after the step"),
        );
        let v: serde_json::Value = serde_json::from_str(&b.stats_json(NOW - HOUR_US)).unwrap();
        let percent = |id: u64| {
            v["invokers"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["id"] == id)
                .unwrap()["slow_start_percent"]
                .as_f64()
        };
        assert_eq!(
            (percent(4), percent(5)),
            (Some(100.0), Some(10.0)),
            "{name}"
        );
    }
}

#[test]
fn stats_show_the_slow_start_ramp() {
    // effective_weight is Dubbo's warm-up only; slow_start_percent is what the ramp leaves.
    for name in NEW {
        let config = format!(
            "loadbalance={name}&seed=12&slowstart.windowMs=60000&slowstart.minWeightPercent=10&slowstart.aggression=2"
        );
        let b = lb(&config, &(1..=3).map(provider).collect::<Vec<_>>());
        b.update(&(1..=4).map(provider).collect::<Vec<_>>())
            .unwrap();
        // Before any pick the newcomer waits at the ramp's lowest share, not at 100.
        let v: serde_json::Value = serde_json::from_str(&b.stats_json(NOW)).unwrap();
        for row in v["invokers"].as_array().unwrap() {
            let expected = if row["id"] == 4 { 10.0 } else { 100.0 };
            assert_eq!(
                row["slow_start_percent"].as_f64(),
                Some(expected),
                "{name} before the first pick: {row}"
            );
        }
        // The first pick after the update stamps the ramp's start.
        let id = b.select(0, b"k", NOW).unwrap();
        b.report(0, id, 1000, Outcome::Success, NOW).unwrap();
        for (dt, percent) in [(0, 10.0), (15_000_000, 50.0), (60_000_000, 100.0)] {
            let v: serde_json::Value = serde_json::from_str(&b.stats_json(NOW + dt)).unwrap();
            let rows = v["invokers"].as_array().unwrap();
            for row in rows {
                let expected = if row["id"] == 4 { percent } else { 100.0 };
                assert_eq!(
                    row["slow_start_percent"].as_f64(),
                    Some(expected),
                    "{name} at +{dt} µs: {row}"
                );
                assert_eq!(row["effective_weight"], 100, "{name}");
            }
        }
        let plain = lb(&format!("loadbalance={name}"), &[provider(1)]);
        assert!(
            !plain.stats_json(NOW).contains("slow_start_percent"),
            "{name}"
        );
    }
}

#[test]
fn slow_start_does_not_ramp_an_invoker_that_served_alone() {
    // The set is replaced by a single invoker, 3, which takes every call (without the strategy,
    // so no ramp is stamped) for two minutes; then 4 joins. 3 has nothing to ramp from, and 4
    // is the one to protect: 4 starts at 10 % of 3's weight, not both at 10 % (which would
    // split the calls evenly at once).
    for name in ["p2c", "peakewma"] {
        let config = format!(
            "loadbalance={name}&seed=13&slowstart.windowMs=60000&slowstart.minWeightPercent=10"
        );
        let b = lb(&config, &[provider(1), provider(2)]);
        b.update(&[provider(3)]).unwrap();
        counts(&b, 0, 100, NOW);
        b.update(&[provider(3), provider(4)]).unwrap();
        let draws = 40_000;
        let c = counts(&b, 0, draws, NOW + 120_000_000);
        let joined = c.get(&4).copied().unwrap_or(0);
        assert_binomial(joined, draws, 10.0 / 110.0, 5.0, name);
    }
}

#[test]
fn slow_start_ramp_starts_at_a_single_candidate_pick() {
    // Invoker 4 joins and is first reached through picks among it alone (a router's subset),
    // which skip the strategy. Its ramp starts at the first of them: at +30 s it is at 50 %
    // (linear), and after the window it takes its full share once the whole set is offered.
    // Left unstamped, it read 100 % and then began ramping from 10 % at the first pick among
    // several, a minute after it started taking calls.
    for name in NEW {
        let config = format!(
            "loadbalance={name}&seed=14&slowstart.windowMs=60000&slowstart.minWeightPercent=10"
        );
        let b = lb(&config, &(1..=3).map(provider).collect::<Vec<_>>());
        b.update(&(1..=4).map(provider).collect::<Vec<_>>())
            .unwrap();
        for _ in 0..10 {
            let id = b.select_among(0, b"k", &[4], &[], NOW).unwrap();
            assert_eq!(id, 4);
            b.report(0, id, 1000, Outcome::Success, NOW).unwrap();
        }
        let v: serde_json::Value = serde_json::from_str(&b.stats_json(NOW + 30_000_000)).unwrap();
        let row = v["invokers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["id"] == 4)
            .unwrap()
            .clone();
        assert_eq!(
            row["slow_start_percent"].as_f64(),
            Some(50.0),
            "{name}: {row}"
        );
        if name == "boundedhash" {
            continue;
        }
        let draws = 40_000;
        let c = counts(&b, 0, draws, NOW + 61_000_000);
        let joined = c.get(&4).copied().unwrap_or(0);
        assert_binomial(joined, draws, 0.25, 5.0, name);
    }
}

#[test]
fn invokers_added_and_removed_leave_no_stale_state() {
    for name in NEW {
        let b = lb(
            &format!("loadbalance={name}&seed=13"),
            &(1..=4).map(provider).collect::<Vec<_>>(),
        );
        // Invoker 2 gets calls in flight and a slow estimate, then leaves with them.
        for _ in 0..10 {
            b.select_among(0, b"k", &[2], &[], NOW).unwrap();
        }
        b.report(0, 2, 900_000, Outcome::Success, NOW).unwrap();
        b.update(&[provider(1), provider(3), provider(4)]).unwrap();
        // Reports for the departed id are harmless.
        for _ in 0..20 {
            b.report(0, 2, 1000, Outcome::Success, NOW).unwrap();
        }
        // Back again: a fresh start (nothing in flight, no estimate, no ejection).
        b.update(&(1..=4).map(provider).collect::<Vec<_>>())
            .unwrap();
        assert_eq!(active(&b, 2), 0, "{name}");
        let v: serde_json::Value = serde_json::from_str(&b.stats_json(NOW)).unwrap();
        if name == "peakewma" {
            assert_eq!(v["invokers"][1]["latency_estimate_us"], 0, "{name}");
        }
        // And it takes its share again (keys for boundedhash: the departed calls were taken out
        // of the total in flight, so capacities are not inflated by them).
        let picks = |b: &Balancer| -> Vec<u64> {
            (0..20_000u32)
                .map(|k| {
                    let id = b.select(0, &k.to_le_bytes(), NOW).unwrap();
                    b.report(0, id, 1000, Outcome::Success, NOW).unwrap();
                    id
                })
                .collect()
        };
        let got = picks(&b);
        if name == "boundedhash" {
            // Keys with nothing in flight are deterministic: exactly what a balancer that never
            // saw invoker 2's history picks, key by key.
            let fresh = lb(
                &format!("loadbalance={name}&seed=13"),
                &(1..=4).map(provider).collect::<Vec<_>>(),
            );
            assert!(
                got == picks(&fresh),
                "{name}: history changed key placement"
            );
            // Under load the bound decides: one hot key held 40 times walks on along the ring
            // where the fresh balancer's does only if the departed calls left the in-flight
            // total (with them, every capacity is larger and the key stays longer).
            let hot = |b: &Balancer| -> Vec<u64> {
                (0..40).map(|_| b.select(0, b"hot", NOW).unwrap()).collect()
            };
            let held = hot(&b);
            assert_eq!(held, hot(&fresh), "{name}: departed calls still count");
            for id in held {
                b.report(0, id, 1000, Outcome::Success, NOW).unwrap();
            }
        } else {
            // Nothing in flight and equal estimates: each pick is uniform over the four, so
            // invoker 2's count is Binomial(20 000, 1/4); 5 sigma is 5 * 61 = 306 picks.
            let n = got.iter().filter(|&&id| id == 2).count();
            assert_binomial(
                n,
                got.len(),
                0.25,
                5.0,
                &format!("{name}: re-added invoker"),
            );
        }
        // Removing everything and selecting is the usual error.
        b.update(&[]).unwrap();
        assert_eq!(b.select(0, b"", NOW), Err(Status::NoProvider));
    }
}

#[test]
fn methods_are_isolated() {
    for name in NEW {
        let b = lb(
            &format!("loadbalance={name}&seed=14"),
            &[provider(1), provider(2)],
        );
        let (m1, m2) = (b.method("a").unwrap(), b.method("b").unwrap());
        // Method a: invoker 1 is loaded and slow.
        for _ in 0..50 {
            b.select_among(m1, b"k", &[1], &[], NOW).unwrap();
        }
        b.select_among(m1, b"k", &[1], &[], NOW).unwrap();
        b.report(m1, 1, 500_000, Outcome::Failure, NOW).unwrap();
        // Method b does not see it: both invokers share b's calls.
        let picks = |b: &Balancer, m: u32| -> Vec<u64> {
            (0..4000u32)
                .map(|k| {
                    let id = b.select(m, &k.to_le_bytes(), NOW).unwrap();
                    b.report(m, id, 1000, Outcome::Success, NOW).unwrap();
                    id
                })
                .collect()
        };
        let got = picks(&b, m2);
        if name == "boundedhash" {
            // Key placement with nothing in flight is deterministic: key by key what a balancer
            // that never saw method a's calls picks.
            let fresh = lb(
                &format!("loadbalance={name}&seed=14"),
                &[provider(1), provider(2)],
            );
            let m = fresh.method("b").unwrap();
            assert!(
                got == picks(&fresh, m),
                "{name}: method b sees method a's state"
            );
        } else {
            // Uniform over two: Binomial(4000, 1/2), 5 sigma = 5 * 31.6 = 158 picks.
            let n = got.iter().filter(|&&id| id == 1).count();
            assert_binomial(
                n,
                got.len(),
                0.5,
                5.0,
                &format!("{name}: method b, invoker 1"),
            );
        }
        // And method a does avoid invoker 1.
        let c = counts(&b, m1, 1000, NOW);
        assert!(c.get(&1).copied().unwrap_or(0) < 100, "{name}: {c:?}");
    }
}
