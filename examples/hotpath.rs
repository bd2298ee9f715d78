//! Runs select+report in a loop for one strategy, for profiling:
//! `cargo run --release --example hotpath -- leastactive 100 10000000 [select|report|both] [flat|ramp|equal] [threads] [balancers]`.
//! Weights are 100/150/200 in turn, with `ramp` 100 + 7i (the Java benchmark's set: gcd 1,
//! so roundrobin's period is too long to precompute at large n), with `equal` all 100. With several threads, each runs
//! the loop on the shared balancer and the time is wall time per operation over all of them.
//! With several balancers (each over the same set), consecutive calls go to them in turn, as a
//! program calling many services does. Calls pass a fixed `now_us`; with `LIBCLOCK=1` in the
//! environment they pass 0 (the library reads its own clock, as the benchmarks' calls do).
//! `STARTED=<ms>` gives every invoker a start time that long ago (as Dubbo URLs carry a
//! `timestamp`), and `WARMING=1` then makes the first one start a minute ago: in its warm-up.
//! `ZONES=<k>` puts invoker i in zone `z{i % k}` and prefers zone `z0` (zone preference).
//! `INFLIGHT=<k>` keeps k calls open per thread (each select is reported k selects later), as a
//! busy client does: with k beyond n, no invoker is idle. `FAILOVER=<k>` fails every k-th call
//! and retries it as a failover does (`select_among` excluding the invoker that failed).
//! `METRICS=1` has every provider report its load once before the loop (`adaptive` then weighs
//! loads by Dubbo's formula instead of tossing a coin between two loads of 0).
use polylb::{Balancer, Invoker, Outcome};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let strategy = args.get(1).map_or("random", |s| s.as_str());
    let n: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(10);
    let iters: u64 = args
        .get(3)
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000_000);
    let mode = args.get(4).map_or("both", |s| s.as_str());
    let ramp = args.get(5).is_some_and(|s| s == "ramp");
    let equal = args.get(5).is_some_and(|s| s == "equal");
    let threads: u64 = args.get(6).and_then(|s| s.parse().ok()).unwrap_or(1);
    let count: usize = args.get(7).and_then(|s| s.parse().ok()).unwrap_or(1).max(1);
    let started_ago: Option<i64> = std::env::var("STARTED").ok().and_then(|s| s.parse().ok());
    let warming = std::env::var_os("WARMING").is_some();
    let wall_ms = polylb::wall_clock_us() / 1000;
    let zones: Option<u64> = std::env::var("ZONES").ok().and_then(|s| s.parse().ok());
    let set: Vec<Invoker> = (0..n)
        .map(|i| {
            let invoker = Invoker::new(i, format!("10.0.0.{i}:20880")).weight(if ramp {
                100 + 7 * i as i32
            } else if equal {
                100
            } else {
                100 + (i % 3) as i32 * 50
            });
            let invoker = match zones {
                Some(k) => invoker.zone(format!("z{}", i % k)),
                None => invoker,
            };
            match started_ago {
                Some(_) if warming && i == 0 => invoker.start_time_ms(wall_ms - 60_000),
                Some(ago) => invoker.start_time_ms(wall_ms - ago),
                None => invoker,
            }
        })
        .collect();
    let zone_option = if zones.is_some() { "&zone=z0" } else { "" };
    let balancers: Vec<Balancer> = (0..count)
        .map(|_| {
            let b = Balancer::new(&format!("loadbalance={strategy}{zone_option}")).unwrap();
            b.update(&set).unwrap();
            if std::env::var_os("METRICS").is_some() {
                let method = b.method("").unwrap();
                for invoker in &set {
                    let (id, load) = (invoker.id, 0.2 + (invoker.id % 7) as f64 * 0.1);
                    b.report_provider_metrics(method, id, wall_ms, load, 2000, 0)
                        .unwrap();
                }
            }
            b
        })
        .collect();
    let now = if std::env::var_os("LIBCLOCK").is_some() {
        0
    } else {
        polylb::wall_clock_us()
    };
    let start = std::time::Instant::now();
    // The mode is decided once, outside the loop, so that the loop holds only library calls.
    let (select, report) = (mode != "report", mode != "select");
    let failover: u64 = std::env::var("FAILOVER")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let run = || {
        let mut sum = 0u64;
        let mut next = 0;
        for i in 0..iters {
            let b = &balancers[next];
            next = if next + 1 == count { 0 } else { next + 1 };
            let id = if select {
                b.select(0, &i.to_le_bytes(), now).unwrap()
            } else {
                i % n
            };
            if report {
                b.report(0, id, 1000, Outcome::Success, now).unwrap();
            }
            sum = sum.wrapping_add(id);
        }
        sum
    };
    // With failovers: every `failover`-th call fails and is retried without its invoker.
    let run_failover = || {
        let mut sum = 0u64;
        for i in 0..iters {
            let b = &balancers[(i % count as u64) as usize];
            let key = i.to_le_bytes();
            let id = b.select(0, &key, now).unwrap();
            if i % failover == 0 {
                b.report(0, id, 1000, Outcome::Failure, now).unwrap();
                let retry = b.select_among(0, &key, &[], &[id], now).unwrap();
                b.report(0, retry, 1000, Outcome::Success, now).unwrap();
                sum = sum.wrapping_add(retry);
            } else {
                b.report(0, id, 1000, Outcome::Success, now).unwrap();
            }
            sum = sum.wrapping_add(id);
        }
        sum
    };
    let in_flight: usize = std::env::var("INFLIGHT")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    // With calls kept open: report the call made `in_flight` selects ago.
    let run_open = || {
        let mut sum = 0u64;
        let mut next = 0;
        let mut open = std::collections::VecDeque::with_capacity(in_flight + 1);
        for i in 0..iters {
            let b = next;
            next = if next + 1 == count { 0 } else { next + 1 };
            let id = balancers[b].select(0, &i.to_le_bytes(), now).unwrap();
            open.push_back((b, id));
            if open.len() > in_flight {
                let (b, id) = open.pop_front().unwrap();
                balancers[b]
                    .report(0, id, 1000, Outcome::Success, now)
                    .unwrap();
            }
            sum = sum.wrapping_add(id);
        }
        for (b, id) in open {
            balancers[b]
                .report(0, id, 1000, Outcome::Success, now)
                .unwrap();
        }
        sum
    };
    let sum = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                if in_flight > 0 {
                    s.spawn(run_open)
                } else if failover > 0 {
                    s.spawn(run_failover)
                } else {
                    s.spawn(run)
                }
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().unwrap())
            .fold(0u64, u64::wrapping_add)
    });
    let ns = start.elapsed().as_nanos() as f64 / (iters * threads) as f64;
    println!("{strategy} n={n} {mode}: {ns:.1} ns per iteration (checksum {sum})");
}
