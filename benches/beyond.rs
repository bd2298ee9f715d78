//! The strategies beyond Dubbo: select + report at n = 2, 10, 100, 1000, each beside floors
//! measured in the same run:
//! - `floor/p2c`: the bare P2C pick of research/floors.md — two distinct random indices (the same
//!   wyrand-style generator as the library), two relaxed loads, `fetch_add` and `fetch_sub` on
//!   the winner;
//! - `floor/md5_ring`: MD5 of a 16-byte key and a binary search over 160·n points (boundedhash);
//! - `floor/hash_table`: a multiply-xorshift hash of the same key scaled to a 65537-entry table,
//!   one u32 read (maglev);
//! - `floor/hrw_scan`: the same key hash, then a 64-bit mix of it with each of n address hashes,
//!   keeping the highest (rendezvous: its unweighted scan, bare);
//! - `floor/stride`: a bare stride round robin over the same weights, one shared `fetch_add`
//!   per turn (orca's schedule, without reports or in-flight accounting);
//! - `beyond/random`: Dubbo's `random` through the same `Balancer` plumbing (snapshot load,
//!   method lookup, in-flight and outcome counters), the cost every strategy pays before its own.
//!
//! `p2c` and `peakewma` are judged against `floor/p2c`, `maglev` against `floor/hash_table`,
//! `rendezvous` (on these weights 100/150/200, its weighted pick) against `floor/hrw_scan`,
//! `orca` (no reports: the configured weights in turn) and `orca+load` (a load report per call
//! as well, the weights then dealt by reports) against `floor/stride`;
//! the ratio to `beyond/random` shows what the strategy itself adds to the plumbing. Filtered
//! rows (`p2c+zone+outlier`) run with zone preference and outlier ejection configured (one
//! invoker ejected for the whole run).

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion};
use polylb::{Balancer, Outcome};
use std::time::Duration;

const SIZES: [usize; 4] = [2, 10, 100, 1000];

mod common;
use common::{invokers, keys, Wy};

fn floors(c: &mut Criterion) {
    let mut g = c.benchmark_group("floor");
    let keys = keys();
    for n in SIZES {
        let mut wy = Wy(1);
        common::bench_p2c(&mut g, n, &mut wy);
        common::bench_md5_ring(&mut g, n, &keys, &mut wy);
        common::bench_hash_table(&mut g, n, &keys, &mut wy);
        common::bench_hrw_scan(&mut g, n, &keys, &mut wy);
        common::bench_stride(&mut g, n);
    }
    g.finish();
}

fn select_report(c: &mut Criterion) {
    let keys = keys();
    let mut g = c.benchmark_group("beyond");
    let configs: [(&str, &str); 10] = [
        ("random", "loadbalance=random"),
        ("p2c", "loadbalance=p2c"),
        ("peakewma", "loadbalance=peakewma"),
        ("boundedhash", "loadbalance=boundedhash"),
        ("maglev", "loadbalance=maglev"),
        ("rendezvous", "loadbalance=rendezvous"),
        ("orca", "loadbalance=orca"),
        // With a per-call load report (ORCA in the response's trailers) between select and
        // report, as the gRPC policies make it.
        ("orca+load", "loadbalance=orca"),
        (
            "p2c+zone+outlier",
            "loadbalance=p2c&zone=a&outlier.consecutiveFailures=5&outlier.maxEjectionPercent=50\
             &outlier.baseEjectionMs=100000000&outlier.maxEjectionMs=100000000",
        ),
        (
            "peakewma+zone+outlier",
            "loadbalance=peakewma&zone=a&outlier.consecutiveFailures=5\
             &outlier.maxEjectionPercent=50&outlier.baseEjectionMs=100000000\
             &outlier.maxEjectionMs=100000000",
        ),
    ];
    for (name, config) in configs {
        for n in SIZES {
            let b = Balancer::new(config).unwrap();
            b.update(&invokers(n)).unwrap();
            let now = polylb::wall_clock_us();
            if config.contains("outlier") {
                // One local invoker ejected for the whole run: the filtered path, not the
                // no-ejection shortcut.
                for _ in 0..5 {
                    b.report(0, 0, 1000, Outcome::Failure, now).unwrap();
                }
            }
            let mut k = 0;
            let with_load = name.ends_with("+load");
            g.bench_with_input(BenchmarkId::new(name, n), &n, |bench, _| {
                bench.iter(|| {
                    k = (k + 1) & 4095;
                    let id = b.select(0, &keys[k], now).unwrap();
                    if with_load {
                        let load = polylb::LoadReport {
                            qps: 100.0 + k as f64,
                            eps: 0.0,
                            utilization: 0.5,
                        };
                        b.report_load(id, load, now).unwrap();
                    }
                    b.report(0, id, 1000 + k as i64, Outcome::Success, now)
                        .unwrap();
                    black_box(id)
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

criterion_group! { name = benches; config = config(); targets = floors, select_report }
criterion_main!(benches);
