//! The short paths against the general path: seeded alike and fed the same reports, a
//! balancer that takes its short path must deal the same sequence as one whose every select
//! goes through the strategy's own `select`.

use super::Balancer;
use crate::invoker::{Invoker, Outcome};

const NOW: i64 = 1_700_000_000_000_000; // µs

/// One call in flight: who serves it, when it ends, and how.
struct Open {
    id: u64,
    started: i64,
    ends: i64,
    outcome: Outcome,
}

/// `peakewma`'s short path (`select_peak_pair`) makes the strategy's draws and decisions:
/// against a balancer whose selects all take the general path, over thousands of picks whose
/// reports vary latencies and outcomes. Two invokers of five are slow (a pair of them makes
/// the pick escalate, and idle ones that look slow are probed), one stalls for a while (its
/// oldest call's age, dated by `on_select`, makes it look slow before any call returns), calls
/// fail, time out and are cancelled, and with warm-up or slow start the weights depend on
/// time for the first part of the run (the short path leaves those picks to the general path,
/// then takes over). The full scans (every candidate compared) take the short path too, over
/// sets that fit each of the scan's fields (5 and 40 invokers on the stack, 150 in the
/// thread's buffer). The estimates each side reads back must agree too.
#[test]
fn the_peakewma_short_path_and_the_strategy_deal_the_same_sequence() {
    let t_ms = NOW / 1000;
    for (options, size, started_ms, joins) in [
        ("seed=5", 5, None, false),
        ("seed=6&peakewma.preferenceMs=40", 5, None, false),
        // Warming up until 300 ms into the run.
        ("seed=7&warmup=400", 5, Some(t_ms - 100), false),
        // A sixth invoker joins 200 ms into the run and ramps for 300 ms.
        ("seed=8&slowstart.windowMs=300", 5, None, true),
        ("seed=9&peakewma.choices=0", 5, None, false),
        // The recommended configuration.
        (
            "seed=10&peakewma.choices=0&peakewma.preferenceMs=40",
            40,
            None,
            false,
        ),
        ("seed=11&peakewma.choices=0", 150, None, false),
        // More choices than invokers: a full scan as well.
        ("seed=12&peakewma.choices=8", 5, None, false),
        (
            "seed=13&peakewma.choices=0&warmup=400",
            40,
            Some(t_ms - 100),
            false,
        ),
        (
            "seed=14&peakewma.choices=0&slowstart.windowMs=300",
            5,
            None,
            true,
        ),
        // Weights all 0 (every invoker weighs 1) and all equal: the first look drawn
        // uniformly.
        ("seed=15&peakewma.choices=0", 0, None, false),
        ("seed=16&peakewma.choices=0", 1, None, false),
    ] {
        let config = &format!("loadbalance=peakewma&{options}");
        // Sizes 0 and 1 stand for five invokers of weight 0, and of weight 100.
        let (size, weights) = match size {
            0 => (5, [0; 5]),
            1 => (5, [100; 5]),
            n => (n, [100, 150, 200, 100, 50]),
        };
        let set: Vec<Invoker> = (1..=size as u64)
            .map(|id| {
                let invoker = Invoker::new(id, format!("10.0.{}.{}:20880", id / 250, id % 250))
                    .weight(weights[(id as usize - 1) % 5]);
                match started_ms {
                    Some(ms) => invoker.start_time_ms(ms),
                    None => invoker,
                }
            })
            .collect();
        let (short, mut general) = (
            Balancer::new(config).unwrap(),
            Balancer::new(config).unwrap(),
        );
        // Every select of `general` through the strategy's own `select`.
        let inner =
            std::sync::Arc::get_mut(&mut general.inner).expect("a new balancer's only reference");
        inner.peak_pair = false;
        inner.peak_scan = false;
        for b in [&short, &general] {
            b.update(&set).unwrap();
        }
        let mut open: Vec<Open> = Vec::new();
        let (mut served_short, mut picks) = (0, 0);
        for i in 0..6_000i64 {
            let now = NOW + i * 250;
            if joins && i == 800 {
                let mut more = set.clone();
                let id = size as u64 + 1;
                more.push(Invoker::new(id, format!("10.0.9.{id}:20880")).weight(120));
                for b in [&short, &general] {
                    b.update(&more).unwrap();
                }
            }
            // Reports of the calls ended by now, in the order they ended.
            open.sort_by_key(|c| (c.ends, c.id));
            let ended = open.partition_point(|c| c.ends <= now);
            for call in open.drain(..ended) {
                let elapsed = call.ends - call.started;
                for b in [&short, &general] {
                    b.report(0, call.id, elapsed, call.outcome, call.ends.max(now))
                        .unwrap();
                }
            }
            let short_path = if short.inner.peak_pair {
                short.inner.select_peak_pair(0, now)
            } else {
                short.inner.select_peak_scan(0, now)
            };
            let a = match short_path {
                Some(result) => {
                    served_short += 1;
                    result
                }
                None => short.select_general(0, b"", &[], &[], now).unpack(),
            };
            let b = general.select_general(0, b"", &[], &[], now).unpack();
            assert_eq!(a, b, "{config}: pick {i}");
            let id = a.unwrap();
            picks += 1;
            // Invokers 2 and 4 answer in about 40 ms, the others in about 1 ms; invoker 3
            // stalls from 0.5 s to 0.8 s into the run (its calls end when the stall does).
            let jitter = (i * 7919 % 13) * 50;
            let mut ends = now
                + match id {
                    2 | 4 => 40_000 + jitter * 10,
                    _ => 900 + jitter,
                };
            if id == 3 && (2_000..3_200).contains(&i) {
                ends = ends.max(NOW + 3_200 * 250);
            }
            // Invoker 5 fails one call in three for a while, invokers 1 and 3 time out one in
            // five for a shorter while; some calls are cancelled (never sent).
            let outcome = match (id, i) {
                (5, 1_000..1_400) if i % 3 == 0 => Outcome::Failure,
                (1 | 3, 4_000..4_100) if i % 5 == 0 => Outcome::Timeout,
                _ if i % 31 == 7 => Outcome::Cancelled,
                _ => Outcome::Success,
            };
            open.push(Open {
                id,
                started: now,
                ends,
                outcome,
            });
        }
        let end = NOW + 6_000 * 250;
        assert_eq!(short.stats_json(end), general.stats_json(end), "{config}");
        // The short path served the picks it can (not those while weights depend on time,
        // nor the first, which caches the snapshot on this thread), and the general path the
        // others.
        let time_dependent = started_ms.is_some() || joins;
        if time_dependent {
            assert!(served_short > picks / 2 && served_short < picks, "{config}");
        } else {
            assert_eq!(served_short, picks - 1, "{config}");
        }
    }
}
