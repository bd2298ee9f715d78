//! select + report per strategy at n = 2, 10, 100, 1000 on 1 thread (random, leastactive,
//! roundrobin and adaptive also on 2 threads at n = 10 and 1000), each beside a
//! floor measured in the same run (research/floors.md): a bounded random pick, a weighted pick
//! by binary search, the P2C pick with in-flight accounting, MD5 of the key + ring lookup, the
//! O(n) nginx smooth-WRR loop, and Dubbo's adaptive pick done plainly.
//! `python3 benches/ratios.py` prints every strategy as a ratio to its floor.

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion};
use polylb::{Balancer, Outcome};
use std::time::{Duration, Instant};

const SIZES: [usize; 4] = [2, 10, 100, 1000];
const STRATEGIES: [&str; 6] = [
    "random",
    "roundrobin",
    "leastactive",
    "shortestresponse",
    "consistenthash",
    "adaptive",
];

mod common;
use common::adaptive_floor::{self, DubboMetrics};
use common::{invokers, keys, Wy};

/// A balancer of `strategy` over [`invokers`]`(n)`; for `adaptive`, with every provider's
/// metrics in, as its floor has them (without them every load is 0 and a pick is a weighted
/// coin).
fn balancer(strategy: &str, n: usize) -> Balancer {
    let b = Balancer::new(&format!("loadbalance={strategy}")).unwrap();
    b.update(&invokers(n)).unwrap();
    if strategy == "adaptive" {
        let now_ms = polylb::wall_clock_us() / 1000;
        for i in 0..n {
            let (cpu, rt_us) = DubboMetrics::report_of(i);
            b.report_provider_metrics(0, i as u64, now_ms, cpu, rt_us, 0)
                .unwrap();
        }
    }
    b
}

fn floors(c: &mut Criterion) {
    let mut g = c.benchmark_group("floor");
    let keys = keys();
    for n in SIZES {
        let weights: Vec<i64> = invokers(n).iter().map(|i| i.weight as i64).collect();
        let prefix: Vec<i64> = weights
            .iter()
            .scan(0, |s, w| {
                *s += w;
                Some(*s)
            })
            .collect();
        let total = *prefix.last().unwrap();
        let mut wy = Wy(1);
        g.bench_with_input(BenchmarkId::new("uniform", n), &n, |b, &n| {
            b.iter(|| black_box(wy.below(n as u64)))
        });
        g.bench_with_input(BenchmarkId::new("weighted", n), &n, |b, _| {
            b.iter(|| {
                let off = wy.below(total as u64) as i64;
                black_box(prefix.partition_point(|&s| s <= off))
            })
        });
        let mut current = vec![0i64; n];
        g.bench_with_input(BenchmarkId::new("swrr_loop", n), &n, |b, _| {
            b.iter(|| {
                let (mut best, mut max) = (0, i64::MIN);
                for (j, c) in current.iter_mut().enumerate() {
                    *c += weights[j];
                    if *c > max {
                        max = *c;
                        best = j;
                    }
                }
                current[best] -= total;
                black_box(best)
            })
        });
        common::bench_md5_ring(&mut g, n, &keys, &mut wy);
        common::bench_p2c(&mut g, n, &mut wy);
        let metrics: Vec<DubboMetrics> = (0..n).map(DubboMetrics::reported).collect();
        let weights: Vec<u64> = weights.iter().map(|&w| w as u64).collect();
        // At a fixed time, as `select_report` passes one to the balancer.
        let now_ms = polylb::wall_clock_us() / 1000;
        g.bench_with_input(BenchmarkId::new("adaptive_pair", n), &n, |b, _| {
            b.iter(|| {
                let below = |k| wy.below(k);
                black_box(adaptive_floor::select_report(
                    &metrics, &weights, now_ms, below,
                ))
            })
        });
    }
    g.finish();
}

fn select_report(c: &mut Criterion) {
    let keys = keys();
    let mut g = c.benchmark_group("select_report");
    for strategy in STRATEGIES {
        for n in SIZES {
            let b = balancer(strategy, n);
            let now = polylb::wall_clock_us();
            let mut k = 0;
            g.bench_with_input(BenchmarkId::new(strategy, n), &n, |bench, _| {
                bench.iter(|| {
                    k = (k + 1) & 4095;
                    let id = b.select(0, &keys[k], now).unwrap();
                    b.report(0, id, 1000, Outcome::Success, now).unwrap();
                    black_box(id)
                })
            });
        }
    }
    g.finish();
}

/// Two threads on one shared balancer: wall time per operation over both threads. Each call as
/// in `select_report` (the caller's time, keys in rotation): with `now_us = 0` every call would
/// also read the library's clock (roundrobin, adaptive), which the 1-thread rows do not.
fn two_threads(c: &mut Criterion) {
    let keys = keys();
    let mut g = c.benchmark_group("select_report_2threads");
    for strategy in ["random", "leastactive", "roundrobin", "adaptive"] {
        for n in [10, 1000] {
            let b = balancer(strategy, n);
            let now = polylb::wall_clock_us();
            g.bench_with_input(BenchmarkId::new(strategy, n), &n, |bench, _| {
                bench.iter_custom(|iters| {
                    let start = Instant::now();
                    std::thread::scope(|s| {
                        for t in 0..2 {
                            let (b, keys) = (&b, &keys);
                            s.spawn(move || {
                                let mut k = t * 2048;
                                for _ in 0..iters.div_ceil(2) {
                                    k = (k + 1) & 4095;
                                    let id = b.select(0, &keys[k], now).unwrap();
                                    b.report(0, id, 1000, Outcome::Success, now).unwrap();
                                }
                            });
                        }
                    });
                    start.elapsed()
                })
            });
        }
    }
    g.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_millis(900))
        .sample_size(20)
        .without_plots()
}

criterion_group! { name = benches; config = config(); targets = floors, select_report, two_threads }
criterion_main!(benches);
