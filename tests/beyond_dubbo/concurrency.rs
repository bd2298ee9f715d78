//! Concurrency and allocation.

use crate::allocations;
use crate::common::*;
use crate::helpers::*;
use crate::zone::zoned;
use polylb::{Invoker, Outcome, StrategyKind};
use std::sync::Arc;

#[test]
fn concurrent_selection_on_one_shared_instance() {
    let configs = [
        "loadbalance=p2c",
        "loadbalance=peakewma",
        "loadbalance=boundedhash",
        "loadbalance=p2c&zone=a&outlier.consecutiveFailures=2&outlier.maxEjectionPercent=50\
         &outlier.baseEjectionMs=1&slowstart.windowMs=1000",
        "loadbalance=peakewma&zone=b&outlier.failureRate=30&outlier.minRequests=5\
         &outlier.baseEjectionMs=1",
        "loadbalance=roundrobin&zone=a&outlier.consecutiveFailures=1&outlier.baseEjectionMs=1",
    ];
    for config in configs {
        let b = Arc::new(lb(config, &zoned()));
        let methods: Vec<u32> = ["", "x"].iter().map(|m| b.method(m).unwrap()).collect();
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                let (b, methods) = (b.clone(), methods.clone());
                std::thread::spawn(move || {
                    for i in 0..20_000u64 {
                        let m = methods[(i % 2) as usize];
                        let now = NOW + (i as i64) * 100;
                        let key = (t << 32 | i).to_le_bytes();
                        let id = if i % 5 == 0 {
                            b.select_among(m, &key, &[1, 3, 4], &[3], now).unwrap()
                        } else {
                            b.select(m, &key, now).unwrap()
                        };
                        let outcome = match (id + i) % 9 {
                            0 => Outcome::Failure,
                            1 => Outcome::Timeout,
                            2 => Outcome::Cancelled,
                            _ => Outcome::Success,
                        };
                        b.report(m, id, 500 + (i % 7) as i64 * 300, outcome, now)
                            .unwrap();
                        if i % 4000 == 0 && t == 0 {
                            b.update(&zoned()).unwrap();
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let v: serde_json::Value = serde_json::from_str(&b.stats_json(NOW)).unwrap();
        let mut selected = 0;
        for inv in v["invokers"].as_array().unwrap() {
            assert_eq!(inv["active"], 0, "{config}: calls left in flight");
            selected += inv["selected"].as_u64().unwrap();
        }
        assert_eq!(selected, 80_000, "{config}");
    }
}

#[test]
fn no_allocation_on_the_hot_path() {
    let now = NOW;
    let mut configs: Vec<String> = NEW
        .iter()
        .map(|n| format!("loadbalance={n}&seed=1"))
        .collect();
    for n in NEW {
        configs.push(format!(
            "loadbalance={n}&seed=1&zone=a&outlier.consecutiveFailures=2\
             &outlier.maxEjectionPercent=50&outlier.baseEjectionMs=1000000\
             &outlier.maxEjectionMs=1000000&slowstart.windowMs=1000000"
        ));
    }
    for kind in StrategyKind::ALL {
        configs.push(format!(
            "loadbalance={}&seed=1&zone=a&outlier.consecutiveFailures=2&outlier.failureRate=60\
             &outlier.baseEjectionMs=1000000&outlier.maxEjectionMs=1000000",
            kind.name()
        ));
    }
    // Picks that gather their looks (d choices, full scans) and the preference order.
    for options in [
        "p2c.choices=0",
        "peakewma.choices=4",
        "peakewma.choices=0&peakewma.preferenceMs=1000",
    ] {
        let strategy = options.split('.').next().unwrap();
        configs.push(format!("loadbalance={strategy}&seed=1&{options}"));
    }
    // Full scans of more candidates than a pick's field holds: a wider field on the stack,
    // then (beyond 128) the thread's reused buffer.
    for n in [40, 200] {
        let wide: Vec<Invoker> = (1..=n).map(provider).collect();
        let b = lb(
            "loadbalance=peakewma&seed=1&peakewma.choices=0&peakewma.preferenceMs=1000",
            &wide,
        );
        let round = |i: i64| {
            let id = b.select(0, b"", now + i).unwrap();
            b.report(0, id, 1000 + (i % 50) * 100, Outcome::Success, now + i)
                .unwrap();
        };
        (0..20_000).for_each(round);
        let before = allocations();
        (20_000..40_000).for_each(round);
        assert_eq!(allocations() - before, 0, "full scan of {n}: allocated");
    }
    for config in configs {
        let mut invokers = zoned();
        // Warming and (later) joining invokers exercise the time-dependent weight paths.
        invokers.push(provider(6).zone("a").start_time_ms(now / 1000 - 30_000));
        let b = lb(&config, &invokers);
        invokers.push(provider(7).zone("a"));
        b.update(&invokers).unwrap();
        let m = b.method("m").unwrap();
        // Invoker 4 fails until it is ejected (for good); everyone else is fine.
        // Round robin leaves its precomputed period on subset picks (rebuilt, amortised): whole
        // set only there.
        let subsets = !config.contains("roundrobin");
        let round = |i: u64, subset: bool| {
            let subset = subset && subsets;
            let key = i.to_le_bytes();
            let id = if subset {
                b.select_among(m, &key, &[1, 2, 4, 6, 7], &[2], now + i as i64)
                    .unwrap()
            } else {
                b.select(m, &key, now + i as i64).unwrap()
            };
            let outcome = if id == 4 {
                Outcome::Failure
            } else {
                Outcome::Success
            };
            b.report(m, id, 1000 + (i % 50) as i64 * 100, outcome, now + i as i64)
                .unwrap();
        };
        b.report(m, 4, 10, Outcome::Failure, now).unwrap();
        b.report(m, 4, 10, Outcome::Failure, now).unwrap();
        for i in 0..20_000 {
            round(i, i % 2 == 0);
        }
        let before = allocations();
        for i in 20_000..40_000 {
            round(i, i % 2 == 0);
        }
        assert_eq!(
            allocations() - before,
            0,
            "{config}: the hot path allocated"
        );
    }
}

/// Slow start while its ramp runs, on one shared instance: four threads select and report
/// across the first 60 s after invoker 4 joined while a fifth adds and removes invoker 5 and
/// reorders the set. Invoker 4's ramp is stamped once, by the first pick (every thread starts
/// at the join's time), and no update restarts it; invoker 5, dropped and added again, starts
/// a ramp of its own at its next pick, not one left from an earlier stay.
#[test]
fn slow_start_ramps_while_threads_select_and_the_set_churns() {
    let config = "slowstart.windowMs=60000&slowstart.minWeightPercent=10";
    let base: Vec<Invoker> = (1..=4).map(provider).collect();
    for name in NEW {
        let b = Arc::new(lb(&format!("loadbalance={name}&{config}"), &base[..3]));
        b.update(&base).unwrap();
        let start = Arc::new(std::sync::Barrier::new(5));
        let pickers: Vec<_> = (0..4u64)
            .map(|t| {
                let (b, start) = (b.clone(), start.clone());
                std::thread::spawn(move || {
                    start.wait();
                    for i in 0..30_000i64 {
                        // 0 to 59.998 s after the join.
                        let now = NOW + i * 2_000;
                        let key = (t << 32 | i as u64).to_le_bytes();
                        let id = b.select(0, &key, now).unwrap();
                        let outcome = if i % 11 == 0 {
                            Outcome::Failure
                        } else {
                            Outcome::Success
                        };
                        b.report(0, id, 1_000, outcome, now).unwrap();
                    }
                })
            })
            .collect();
        let churn = {
            let (b, start, base) = (b.clone(), start.clone(), base.clone());
            std::thread::spawn(move || {
                start.wait();
                for i in 0..2_000usize {
                    let mut set = base.clone();
                    set.rotate_left(i % 4);
                    if i % 2 == 0 {
                        set.push(provider(5));
                    }
                    b.update(&set).unwrap();
                }
            })
        };
        for t in pickers {
            t.join().unwrap();
        }
        churn.join().unwrap();
        let percent = |at: i64, id: u64| stat_value(&b, at, id, "slow_start_percent").as_f64();
        // Stamped at the join's time: half-way at +30 s, full at +60 s.
        assert_eq!(percent(NOW + 30_000_000, 4), Some(50.0), "{name}");
        assert_eq!(percent(NOW + 60_000_000, 4), Some(100.0), "{name}");
        for id in 1..=3 {
            assert_eq!(percent(NOW, id), Some(100.0), "{name}: invoker {id}");
        }
        for id in 1..=4 {
            assert_eq!(stat(&b, NOW, id, "active"), 0, "{name}: invoker {id}");
        }
        // Invoker 5 joins again after the churn: a fresh ramp from its next pick.
        let mut set = base.clone();
        set.push(provider(5));
        b.update(&set).unwrap();
        let later = NOW + 100_000_000;
        assert_eq!(
            percent(later, 5),
            Some(10.0),
            "{name}: before its next pick"
        );
        let id = b.select(0, b"k", later).unwrap();
        b.report(0, id, 1_000, Outcome::Success, later).unwrap();
        assert_eq!(
            percent(later + 30_000_000, 5),
            Some(50.0),
            "{name}: its new ramp"
        );
    }
}
