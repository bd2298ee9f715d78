//! Four threads select and report while a fifth replaces the set 10 000 times; and a small
//! version of the same races, sized to run under Miri (scripts/miri.sh).

mod common;
use common::*;
use polylb::{Balancer, Invoker, Outcome, StrategyKind};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// The ids of `set(round)`.
fn ids(round: u64) -> impl Iterator<Item = u64> {
    (0..4 + round % 8).map(move |k| 1 + (round + k) % 12)
}

fn set(round: u64) -> Vec<Invoker> {
    // Rotating membership (ids 1..=12, 4 to 11 of them) and weights, so every kind of churn
    // happens: departures, re-additions, weight changes and address changes. A third of the
    // invokers are in Dubbo's warm-up (started up to 9 minutes ago, of 10), so the picks that
    // follow warm-up weights run concurrently with the updates too.
    let n = 4 + round % 8;
    let now_ms = polylb::wall_clock_us() / 1000;
    (0..n)
        .map(|k| {
            let id = 1 + (round + k) % 12;
            // Zones matter only to the configurations that prefer one (below).
            let invoker = Invoker::new(id, format!("10.0.{}.{id}:20880", round % 3))
                .weight(((round + k) % 5) as i32 * 50)
                .zone(if id % 2 == 0 { "a" } else { "b" });
            if (round + k) % 3 == 0 {
                invoker.start_time_ms(now_ms - ((round * 7 + k) % 540) as i64 * 1000)
            } else {
                invoker
            }
        })
        .collect()
}

/// Every strategy with its defaults, and the options whose picks take paths of their own: full
/// scans, zone preference (the local zone's short paths) and outlier ejection (failures are a
/// quarter of the reports below, so invokers are ejected and return while the set changes).
fn configurations() -> Vec<String> {
    let mut configs: Vec<String> = StrategyKind::ALL
        .iter()
        .map(|kind| format!("loadbalance={}", kind.name()))
        .collect();
    configs.extend(
        [
            "loadbalance=peakewma&peakewma.choices=0&peakewma.preferenceMs=1000",
            "loadbalance=p2c&p2c.choices=0",
            "loadbalance=random&zone=a",
            "loadbalance=roundrobin&zone=a",
            "loadbalance=leastactive&zone=a&outlier.consecutiveFailures=3",
            "loadbalance=peakewma&zone=a&outlier.consecutiveFailures=3",
            "loadbalance=p2c&subset.size=4&subset.key=c1&outlier.consecutiveFailures=3",
            "loadbalance=leastactive&zone=a&subset.size=3&subset.key=c2",
        ]
        .map(String::from),
    );
    configs
}

/// Each pick is a member of a set that was current at some moment of its select (the rounds
/// whose update finished before it began, to the one begun when it ended), never an invoker
/// of an older set nor of the rejected updates that come between the rounds.
#[test]
fn select_report_under_constant_updates_ends_with_nothing_in_flight() {
    for config in configurations() {
        let b = Arc::new(Balancer::new(&config).unwrap());
        b.update(&set(0)).unwrap();
        // The last round whose update returned, and the last one begun.
        let (finished, begun) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        // All five start together: a worker that started after the updates had ended would
        // race nothing.
        let start = Arc::new(std::sync::Barrier::new(5));
        let methods: Vec<u32> = ["", "a", "b"]
            .iter()
            .map(|m| b.method(m).unwrap())
            .collect();
        let done = Arc::new(AtomicBool::new(false));
        let workers: Vec<_> = (0..4u64)
            .map(|t| {
                let (b, done, methods) = (b.clone(), done.clone(), methods.clone());
                let (finished, begun) = (finished.clone(), begun.clone());
                let (config, start) = (config.clone(), start.clone());
                std::thread::spawn(move || {
                    start.wait();
                    let mut i = 0u64;
                    let mut picks = 0u64;
                    while !done.load(Ordering::Relaxed) || i < 2000 {
                        let m = methods[(i % 3) as usize];
                        let key = (t * 1_000_003 + i).to_le_bytes();
                        let excluded = 1 + i % 12;
                        let first = finished.load(Ordering::SeqCst);
                        let r = if i % 5 == 0 {
                            b.select_among(m, &key, &[], &[excluded], 0)
                        } else {
                            b.select(m, &key, 0)
                        };
                        let last = begun.load(Ordering::SeqCst);
                        if let Ok(id) = r {
                            // A member of a set current during the select, never the one
                            // excluded, whichever set the pick saw.
                            assert!(
                                (first..=last).any(|round| ids(round).any(|x| x == id)),
                                "{config}: picked {id}, in none of rounds {first} to {last}"
                            );
                            if i % 5 == 0 {
                                assert_ne!(id, excluded, "{config}: picked the excluded id");
                            }
                            let outcome = [
                                Outcome::Success,
                                Outcome::Failure,
                                Outcome::Timeout,
                                Outcome::Cancelled,
                            ][(i % 4) as usize];
                            b.report(m, id, (i % 7) as i64 * 100, outcome, 0).unwrap();
                            picks += 1;
                        }
                        i += 1;
                    }
                    picks
                })
            })
            .collect();
        start.wait();
        for round in 1..=10_000 {
            begun.store(round, Ordering::SeqCst);
            b.update(&set(round)).unwrap();
            finished.store(round, Ordering::SeqCst);
            if round % 100 == 0 {
                // Rejected (a repeated id): the set stays round's.
                let mut bad = set(round);
                bad.push(Invoker::new(100, "10.9.9.9:1"));
                bad.push(Invoker::new(100, "10.9.9.8:1"));
                assert!(
                    b.update(&bad).is_err(),
                    "{config}: a repeated id was accepted"
                );
            }
        }
        done.store(true, Ordering::Relaxed);
        let picks: u64 = workers.into_iter().map(|w| w.join().unwrap()).sum();
        assert!(picks > 8000, "{config}: only {picks} picks");
        // Every invoker of the final set, in every method: nothing left in flight.
        let v: serde_json::Value = serde_json::from_str(&b.stats_json(0)).unwrap();
        for inv in v["invokers"].as_array().unwrap() {
            assert_eq!(inv["active"], 0, "{config}: {inv}");
        }
        // And the balancer still works on the last set.
        let id = b.select(0, b"k", 0).unwrap();
        assert!(set(10_000).iter().any(|i| i.id == id));
    }
}

#[test]
fn stable_set_in_flight_returns_to_exactly_zero() {
    for config in configurations() {
        let invokers: Vec<Invoker> = (1..=6)
            .map(|id| provider(id).zone(if id % 2 == 0 { "a" } else { "b" }))
            .collect();
        let b = Arc::new(balancer(&config, &invokers));
        let workers: Vec<_> = (0..4u64)
            .map(|t| {
                let b = b.clone();
                std::thread::spawn(move || {
                    let mut held = Vec::new();
                    for i in 0..20_000u64 {
                        held.push(b.select(0, &(t ^ i).to_le_bytes(), 0).unwrap());
                        if held.len() > 8 {
                            let id = held.remove(0);
                            b.report(0, id, 100, Outcome::Success, 0).unwrap();
                        }
                    }
                    for id in held {
                        b.report(0, id, 100, Outcome::Success, 0).unwrap();
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        for id in 1..=6 {
            assert_eq!(stat(&b, 0, id, "active"), 0, "{config}");
        }
        let total: i64 = (1..=6).map(|id| stat(&b, 0, id, "selected")).sum();
        assert_eq!(total, 80_000, "{config}");
    }
}

/// Calls selected on one thread and reported on another (an RPC client whose replies are
/// handled on I/O threads): the counters of strategies that spread them per thread still add up
/// to every call, and the calls in flight are exact while some are held.
#[test]
fn calls_reported_on_other_threads_add_up() {
    for strategy in ["random", "roundrobin", "consistenthash", "leastactive"] {
        let invokers: Vec<Invoker> = (1..=3).map(provider).collect();
        let b = Arc::new(balancer(&format!("loadbalance={strategy}"), &invokers));
        let (to_reporter, reporter_inbox) = std::sync::mpsc::sync_channel::<u64>(64);
        let reporter = {
            let b = b.clone();
            std::thread::spawn(move || {
                for id in reporter_inbox {
                    b.report(0, id, 250, Outcome::Success, 0).unwrap();
                }
            })
        };
        let selectors: Vec<_> = (0..2u64)
            .map(|t| {
                let (b, to_reporter) = (b.clone(), to_reporter.clone());
                std::thread::spawn(move || {
                    for i in 0..30_000u64 {
                        let id = b.select(0, &(t << 32 | i).to_le_bytes(), 0).unwrap();
                        to_reporter.send(id).unwrap();
                    }
                })
            })
            .collect();
        for s in selectors {
            s.join().unwrap();
        }
        drop(to_reporter);
        reporter.join().unwrap();
        // Five more held on this thread: exactly five in flight.
        let held: Vec<u64> = (0..5u64)
            .map(|i| b.select(0, &i.to_le_bytes(), 0).unwrap())
            .collect();
        let in_flight: i64 = (1..=3).map(|id| stat(&b, 0, id, "active")).sum();
        assert_eq!(in_flight, 5, "{strategy}");
        for id in held {
            b.report(0, id, 250, Outcome::Success, 0).unwrap();
        }
        for id in 1..=3 {
            assert_eq!(stat(&b, 0, id, "active"), 0, "{strategy}");
            if stat(&b, 0, id, "succeeded") > 0 {
                assert_eq!(stat(&b, 0, id, "mean_success_us"), 250, "{strategy}");
            }
        }
        let selected: i64 = (1..=3).map(|id| stat(&b, 0, id, "selected")).sum();
        let succeeded: i64 = (1..=3).map(|id| stat(&b, 0, id, "succeeded")).sum();
        assert_eq!((selected, succeeded), (60_005, 60_005), "{strategy}");
    }
}

/// Each thread caches the snapshots it uses (64 slots, by balancer); many balancers on one
/// thread, updates between calls, and balancers dropped and created must never mix sets.
#[test]
fn many_balancers_per_thread_never_serve_another_set_or_an_old_one() {
    let ids = |k: u64, round: u64| -> Vec<Invoker> {
        (0..3)
            .map(|j| provider(k * 1_000 + round * 10 + j))
            .collect()
    };
    let run = move || {
        // More than a thread's cache holds, so that balancers share slots.
        let mut balancers: Vec<Balancer> = (0..150)
            .map(|k| balancer("loadbalance=random", &ids(k, 0)))
            .collect();
        for round in 1..100u64 {
            for (k, b) in balancers.iter().enumerate() {
                let k = k as u64;
                let id = b.select(0, b"", 0).unwrap();
                // The current set only: ids of this balancer from the last update.
                let current = (round - 1) % 7;
                assert_eq!(id / 1_000, k, "a pick from another balancer's set");
                assert_eq!((id % 1_000) / 10, current, "a pick from an old set");
                b.report(0, id, 1_000, Outcome::Success, 0).unwrap();
                b.update(&ids(k, round % 7)).unwrap();
            }
            if round % 25 == 0 {
                // Drop some and create new ones: their uids (and cache slots) are new.
                balancers.truncate(75);
                for k in 75..150 {
                    balancers.push(balancer("loadbalance=random", &ids(k, round % 7)));
                }
            }
        }
    };
    let threads: Vec<_> = (0..2).map(|_| std::thread::spawn(run)).collect();
    for t in threads {
        t.join().unwrap();
    }
}

/// Two reports racing for the last call in flight (a double report, e.g. a retry layer and
/// its caller both reporting): one ends it, the other is unmatched. Both ending it would hide
/// every later call of that invoker from strategies that read calls in flight.
#[test]
fn racing_double_reports_never_hide_a_later_call() {
    let b = Arc::new(balancer("loadbalance=leastactive", &[provider(1)]));
    const NOW: i64 = 1_700_000_000_000_000;
    let barrier = Arc::new(std::sync::Barrier::new(2));
    for round in 0..20_000 {
        let id = b.select(0, b"", NOW).unwrap();
        let racer = {
            let (b, barrier) = (b.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                b.report(0, id, 10, Outcome::Success, NOW).unwrap();
            })
        };
        barrier.wait();
        b.report(0, id, 10, Outcome::Success, NOW).unwrap();
        racer.join().unwrap();
        // A new call must show as in flight.
        let next = b.select(0, b"", NOW).unwrap();
        assert_eq!(
            stat(&b, NOW, 1, "active"),
            1,
            "round {round}: a call is hidden"
        );
        b.report(0, next, 10, Outcome::Success, NOW).unwrap();
    }
}

/// adaptive's latency model is unlocked, as Dubbo's is: four threads pick (each pick decays two
/// models in place), report their calls and feed provider metrics, all on four invokers, while
/// the stats are read. A race may lose a decay step, but every number stays one that the rules
/// make from the inputs: the estimate is a blend of reported latencies (up to 40 ms) and the
/// penalty (2 × timeout = 100 ms), so within 0..=100 ms; the CPU load one that was reported;
/// the load finite and not negative. A field written with another's value (the estimate's bits
/// as a latency, a time as a load) breaks these at once.
#[test]
fn adaptive_models_under_racing_picks_and_reports_stay_in_range() {
    let b = Arc::new(balancer(
        "loadbalance=adaptive&timeout=50",
        &(1..=4).map(provider).collect::<Vec<_>>(),
    ));
    let m = b.method("m").unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let check = |b: &Balancer| {
        let v: serde_json::Value = serde_json::from_str(&b.stats_json(0)).unwrap();
        for row in v["invokers"].as_array().unwrap() {
            for method in row["methods"].as_array().unwrap() {
                let load = method["load"].as_f64().unwrap();
                assert!(load.is_finite() && load >= 0.0, "{method}");
                if method["provider_metrics"] == true {
                    let ewma = method["latency_ewma_ms"].as_f64().unwrap();
                    assert!((0.0..=100.0).contains(&ewma), "{method}");
                    let cpu = method["cpu_load"].as_f64().unwrap();
                    let reported = (1..=9).any(|k| (cpu - k as f64 / 10.0).abs() < 1e-12);
                    assert!(reported, "{method}");
                }
            }
        }
    };
    let workers: Vec<_> = (0..4u64)
        .map(|t| {
            let (b, done) = (b.clone(), done.clone());
            std::thread::spawn(move || {
                let mut i = 0u64;
                while !done.load(Ordering::Relaxed) || i < 20_000 {
                    let id = b.select(m, b"", 0).unwrap();
                    let elapsed_us = ((t * 7 + i) % 40) as i64 * 1000;
                    if i % 3 == 0 {
                        // The provider's clock: now, give or take a timeout, so that decays
                        // count 0, 1 or 2 timeouts and some reports arrive out of order.
                        let provider_ms = polylb::wall_clock_us() / 1000 - (i / 3 % 3) as i64 * 50;
                        let cpu = (1 + (t + i) % 9) as f64 / 10.0;
                        b.report_provider_metrics(m, id, provider_ms, cpu, elapsed_us, 0)
                            .unwrap();
                    }
                    b.report(m, id, elapsed_us, Outcome::Success, 0).unwrap();
                    i += 1;
                }
            })
        })
        .collect();
    for _ in 0..200 {
        check(&b);
    }
    done.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    check(&b);
    for id in 1..=4 {
        assert_eq!(stat(&b, 0, id, "active"), 0);
    }
}

/// The same races, small enough for Miri (scripts/miri.sh), which checks them for data races
/// and aliasing violations: two threads select (each caching the snapshot per thread and,
/// counting on the same invokers, spreading their thread-owned counters) and report, half of
/// their calls on the other thread, while a third updates the set; then each keeps its cached
/// snapshot while the balancer drops, and exits (freeing it) only afterwards. Last, the C ABI's
/// new/update/select/report/free with two threads on one handle.
#[test]
fn small_races_for_miri() {
    use std::sync::{mpsc, Barrier};
    const CALLS: u64 = 60;
    for config in [
        "loadbalance=random",
        "loadbalance=leastactive",
        "loadbalance=roundrobin",
        // Rings of 8 points per invoker: MD5 runs about 10^5 times slower under Miri.
        "loadbalance=consistenthash&hash.nodes=8",
        "loadbalance=boundedhash&hash.nodes=8",
        "loadbalance=peakewma",
    ] {
        let b = balancer(config, &set(0));
        let barrier = Arc::new(Barrier::new(3));
        let (to_main, from_workers) = mpsc::channel::<u64>();
        let workers: Vec<_> = (0..2u64)
            .map(|t| {
                let (b, barrier, to_main) = (b.clone(), barrier.clone(), to_main.clone());
                let (exit, exit_rx) = mpsc::channel::<()>();
                let thread = std::thread::spawn(move || {
                    let (to_other, from_other) = mpsc::channel::<u64>();
                    for i in 0..CALLS {
                        // Keys spread the hashing strategies' picks over the ring.
                        let id = b.select(0, &(i * 2 + t).to_le_bytes(), 0).unwrap();
                        if (i + t) % 2 == 0 {
                            b.report(0, id, 100, Outcome::Success, 0).unwrap();
                        } else {
                            to_other.send(id).unwrap();
                        }
                    }
                    drop(to_other);
                    // Reported on the main thread: a report from a thread that did not select.
                    for id in from_other {
                        to_main.send(id).unwrap();
                    }
                    drop(to_main);
                    // The last call cached the current snapshot; the balancer drops while this
                    // thread holds it (see below).
                    b.select(0, b"", 0)
                        .map(|id| b.report(0, id, 1, Outcome::Failure, 0))
                        .ok();
                    drop(b);
                    barrier.wait();
                    let _ = exit_rx.recv();
                });
                (thread, exit)
            })
            .collect();
        drop(to_main);
        let updater = {
            let b = b.clone();
            std::thread::spawn(move || {
                for round in 1..=6 {
                    b.update(&set(round)).unwrap();
                }
            })
        };
        // Some calls end on a set their invoker has left (fine: reports of unknown ids are
        // ignored or compensated).
        for id in from_workers {
            let _ = b.report(0, id, 200, Outcome::Success, 0);
        }
        updater.join().unwrap();
        barrier.wait();
        drop(b);
        for (thread, exit) in workers {
            exit.send(()).unwrap();
            thread.join().unwrap();
        }
    }

    // The C ABI on one handle from two threads, freed by the main thread after both.
    use polylb::ffi::*;
    use std::ptr::{null, null_mut};
    #[derive(Clone, Copy)]
    struct Handle(*mut plb_balancer);
    unsafe impl Send for Handle {}
    let config = "loadbalance=leastactive";
    let mut raw = null_mut();
    let status = unsafe {
        plb_balancer_new(
            config.as_ptr(),
            config.len(),
            &mut raw,
            null_mut(),
            0,
            null_mut(),
        )
    };
    assert_eq!(status, PLB_OK);
    let addresses: Vec<String> = (1..=3).map(|i| format!("10.1.0.{i}:20880")).collect();
    let invokers: Vec<plb_invoker> = addresses
        .iter()
        .enumerate()
        .map(|(i, a)| plb_invoker {
            id: i as u64 + 1,
            address: a.as_ptr(),
            address_len: a.len(),
            weight: 100,
            start_time_ms: 0,
            warmup_ms: -1,
            zone: null(),
            zone_len: 0,
        })
        .collect();
    let status = unsafe {
        plb_balancer_update(
            raw,
            invokers.as_ptr(),
            invokers.len(),
            null_mut(),
            0,
            null_mut(),
        )
    };
    assert_eq!(status, PLB_OK);
    let handle = Handle(raw);
    let threads: Vec<_> = (0..2)
        .map(|_| {
            std::thread::spawn(move || {
                let handle = handle;
                for _ in 0..CALLS {
                    let id = unsafe { plb_select(handle.0, 0, null(), 0, 0) };
                    assert!(id > 0, "plb_select: {id}");
                    let status =
                        unsafe { plb_report(handle.0, 0, id as u64, 10, PLB_OUTCOME_SUCCESS, 0) };
                    assert_eq!(status, PLB_OK);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    unsafe { plb_balancer_free(raw) };
}

/// Thread X selects a call; thread C selects one and reports it; X, having seen that (through
/// nothing that synchronizes), reports its own: both calls must be over. Passes on x86-64
/// whatever the orderings; under Miri's weak memory (scripts/miri.sh, 32 schedules) half the
/// schedules left X's call in flight for good while ends were claimed `Relaxed`.
#[test]
fn weak_memory_a_report_ends_its_call_after_another_threads_report() {
    for config in [
        "loadbalance=leastactive",
        "loadbalance=boundedhash&hash.nodes=8",
    ] {
        let b = Balancer::new(config).unwrap();
        b.update(&[Invoker::new(1, "10.0.0.1:20880")]).unwrap();
        let x = b.select(0, b"k", 0).unwrap();
        let c_reported = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                let c = b.select(0, b"k", 0).unwrap();
                b.report(0, c, 10, Outcome::Success, 0).unwrap();
                c_reported.store(true, Ordering::Relaxed);
            });
            while !c_reported.load(Ordering::Relaxed) {
                std::thread::yield_now();
            }
            b.report(0, x, 10, Outcome::Success, 0).unwrap();
        });
        let json = b.stats_json(0);
        // Every call over: neither the invoker nor its method counts one in flight.
        assert!(
            !json.contains("\"active\":1"),
            "{config}: a call left in flight: {json}"
        );
        assert!(json.contains("\"active\":0"), "{config}: {json}");
    }
}

/// Stats read while updates take invokers out of a `boundedhash` set (whose counters are
/// sealed when their invoker leaves) show the leaving invokers' counts as they were: the stats
/// of the set they began with showed `selected` (and between the seal's two adds `active`)
/// 2^61 above them.
#[test]
fn stats_read_during_updates_show_no_sealed_counts() {
    let b = Arc::new(Balancer::new("loadbalance=boundedhash&seed=1").unwrap());
    let all: Vec<Invoker> = (1..=50)
        .map(|i| Invoker::new(i, format!("10.0.0.{i}:20880")))
        .collect();
    b.update(&all).unwrap();
    let m = b.method("m").unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let reader = {
        let (b, done) = (b.clone(), done.clone());
        std::thread::spawn(move || {
            let mut largest = 0u64;
            while !done.load(Ordering::Relaxed) && largest < 1 << 40 {
                let v: serde_json::Value = serde_json::from_str(&b.stats_json(0)).unwrap();
                for inv in v["invokers"].as_array().unwrap() {
                    let rows = std::iter::once(inv).chain(inv["methods"].as_array().unwrap());
                    for row in rows {
                        for field in ["active", "selected", "succeeded"] {
                            largest = largest.max(row[field].as_u64().unwrap());
                        }
                    }
                }
            }
            largest
        })
    };
    for round in 0..3000 {
        for i in 0..20 {
            let id = b.select(m, format!("k{i}").as_bytes(), 0).unwrap();
            if i % 2 == 0 {
                b.report(m, id, 1000, Outcome::Success, 0).unwrap();
            }
        }
        b.update(if round % 2 == 0 { &all[..25] } else { &all })
            .unwrap();
        if reader.is_finished() {
            break;
        }
    }
    done.store(true, Ordering::Relaxed);
    let largest = reader.join().unwrap();
    assert!(largest < 1 << 40, "a stats counter read {largest}");
}
