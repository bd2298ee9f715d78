//! polylb beside the Rust peers a user would otherwise pick, on the same invoker sets, in one
//! process, beside floors measured in the same run (research/floors.md, rust-peers-perf.md):
//!
//! - pingora-load-balancing 0.9.1: the public `LoadBalancer<S>::select(key, 256)` for
//!   `Weighted<fnv>` (FNVHash), `RoundRobin`, `Random` and `KetamaHashing`;
//! - tower 0.5 `PeakEwma`: power of two choices over `Load::load()`, then `call()` and the
//!   response future polled to completion (which drops the handle: the RTT update).
//!
//! Output: one JSON object per line on stdout (bench/report.py turns them into BENCHMARKS.md).
//! `--smoke`: tiny samples, only checks that everything runs.
//!
//! Floors of the hashing picks: `md5_ring` (Dubbo's `consistenthash`: MD5 of the key, a binary
//! search over 160·n points) and `hash_table` (a table pick as polylb's `maglev`: a simple
//! 64-bit multiply-xorshift hash of the same key bytes, scaled to a 65537-entry table, one u32
//! read). Both are written here, not taken from polylb. `orca`'s floor, `stride`: a bare stride
//! round robin over the same weights, one shared `fetch_add` a turn (as benches/common's).
//!
//! Timing: a hand-written loop, `black_box` on the input, the result accumulated. Each sample is
//! calibrated to `SAMPLE_MS`; 1 warm-up sample, then `SAMPLES` samples, the median reported.
//! Two-thread rows: both threads start behind a barrier on one shared balancer (tower: one
//! private set of endpoints per thread, because `Service::call` takes `&mut self`); ns/op is wall
//! time over both threads' operations.

#[path = "../../../benches/common/adaptive_floor.rs"]
mod adaptive_floor;

use adaptive_floor::DubboMetrics;
use md5::{Digest, Md5};
use pingora_load_balancing::discovery::ServiceDiscovery;
use pingora_load_balancing::selection::{
    consistent::KetamaHashing, BackendIter, BackendSelection, FNVHash, Random, RoundRobin,
};
use pingora_load_balancing::{Backend, Backends, LoadBalancer};
use polylb::{Balancer, Invoker, Outcome};
use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::{BTreeSet, HashMap};
use std::convert::Infallible;
use std::future::Future;
use std::hint::black_box;
use std::pin::pin;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};
use tower::load::{CompleteOnResponse, Load, PeakEwma};
use tower::Service;

// ---------- a counting allocator (memory per invoker) ----------
struct Counting;
static LIVE: AtomicI64 = AtomicI64::new(0);
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as i64, Ordering::Relaxed);
        System.alloc(l)
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as i64, Ordering::Relaxed);
        System.dealloc(p, l)
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as i64, Ordering::Relaxed);
        System.alloc_zeroed(l)
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        LIVE.fetch_add(new as i64 - l.size() as i64, Ordering::Relaxed);
        System.realloc(p, l, new)
    }
}
#[global_allocator]
static GLOBAL: Counting = Counting;
fn live() -> i64 {
    LIVE.load(Ordering::SeqCst)
}

// ---------- timing ----------
struct Cfg {
    sample: Duration,
    samples: usize,
    update_reps: usize,
}

/// One timed pass of `iters` operations on `threads` threads; wall ns per operation.
fn pass<M, F>(threads: usize, iters: u64, make: &M) -> f64
where
    M: Fn() -> F + Sync,
    F: FnMut(u64) -> u64,
{
    if threads == 1 {
        let mut f = make();
        let mut acc = 0u64;
        let t = Instant::now();
        for i in 0..iters {
            acc = acc.wrapping_add(f(black_box(i)));
        }
        let e = t.elapsed();
        black_box(acc);
        return e.as_nanos() as f64 / iters as f64;
    }
    let barrier = Barrier::new(threads);
    let first_start = AtomicU64::new(u64::MAX);
    let last_end = AtomicU64::new(0);
    let origin = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                let mut f = make();
                let mut acc = 0u64;
                barrier.wait();
                let t0 = origin.elapsed().as_nanos() as u64;
                for i in 0..iters {
                    acc = acc.wrapping_add(f(black_box(i)));
                }
                let t1 = origin.elapsed().as_nanos() as u64;
                black_box(acc);
                first_start.fetch_min(t0, Ordering::SeqCst);
                last_end.fetch_max(t1, Ordering::SeqCst);
            });
        }
    });
    (last_end.into_inner() - first_start.into_inner()) as f64 / (iters * threads as u64) as f64
}

fn measure<M, F>(cfg: &Cfg, threads: usize, make: &M) -> f64
where
    M: Fn() -> F + Sync,
    F: FnMut(u64) -> u64,
{
    // calibrate on one thread: iterations so one sample takes about cfg.sample
    let mut iters = 16u64;
    loop {
        let ns = pass(1, iters, make) * iters as f64;
        if ns >= 2e6 || iters >= 1 << 30 {
            iters = ((iters as f64) * cfg.sample.as_nanos() as f64 / ns.max(1.0)).max(16.0) as u64;
            break;
        }
        iters *= 4;
    }
    let per_thread = (iters / threads as u64).max(16);
    pass(threads, per_thread, make); // warm-up
    let mut v: Vec<f64> = (0..cfg.samples)
        .map(|_| pass(threads, per_thread, make))
        .collect();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn emit(kind: &str, imp: &str, name: &str, n: usize, threads: usize, value: f64, unit: &str) {
    println!(
        "{{\"suite\":\"rust\",\"kind\":\"{kind}\",\"impl\":\"{imp}\",\"name\":\"{name}\",\"n\":{n},\"threads\":{threads},\"value\":{value:.3},\"unit\":\"{unit}\"}}"
    );
    eprintln!("rust {kind:<8} {imp:<8} {name:<34} n={n:<5} t={threads} {value:>12.2} {unit}");
}

// ---------- shared inputs ----------
#[derive(Clone, Copy)]
struct Wy(u64);
impl Wy {
    #[inline(always)]
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0xa076_1d64_78bd_642f);
        let t = (self.0 as u128).wrapping_mul((self.0 ^ 0xe703_7ed1_a0b4_28db) as u128);
        ((t >> 64) as u64) ^ (t as u64)
    }
    #[inline(always)]
    fn below(&mut self, n: u64) -> u64 {
        ((self.next() as u128 * n as u128) >> 64) as u64
    }
}
static SEED: AtomicU64 = AtomicU64::new(1);
fn wy() -> Wy {
    Wy(SEED.fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed))
}

fn weight(i: usize) -> usize {
    100 + (i % 3) * 50
}
fn addr(i: usize) -> String {
    format!("10.0.{}.{}:20880", i / 250, i % 250)
}
/// The polylb set: ids 0..n, weights 100/150/200 (as benches/select.rs).
fn invokers(n: usize) -> Vec<Invoker> {
    (0..n)
        .map(|i| Invoker::new(i as u64, addr(i)).weight(weight(i) as i32))
        .collect()
}
/// The same set for pingora. Weighted selectors expand each backend `weight` times, so the
/// weights are divided by their gcd 50 (2/3/4: the same proportions, a 50× smaller table).
/// Ketama multiplies its 160 points by the weight, so it gets weight 1 (160 points each, as
/// polylb's unweighted Dubbo ring with hash.nodes=160).
fn backends(n: usize, ketama: bool) -> BTreeSet<Backend> {
    (0..n)
        .map(|i| {
            Backend::new_with_weight(&addr(i), if ketama { 1 } else { weight(i) / 50 }).unwrap()
        })
        .collect()
}
fn keys() -> Vec<[u8; 16]> {
    let mut w = Wy(7);
    (0..4096)
        .map(|_| (w.next() as u128 | ((w.next() as u128) << 64)).to_le_bytes())
        .collect()
}

/// Slots of the `hash_table` floor's table: polylb's default `maglev.tableSize`.
const HASH_TABLE_SIZE: usize = 65537;

/// The `hash_table` floor's hash: each 8-byte little-endian word of the key folded in by a
/// multiply and an xorshift (a 16-byte key: two words).
#[inline(always)]
fn mul_xorshift(key: &[u8; 16]) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let lo = u64::from_le_bytes(key[..8].try_into().unwrap());
    let hi = u64::from_le_bytes(key[8..].try_into().unwrap());
    let mut h = (lo ^ 16).wrapping_mul(K);
    h ^= h >> 32;
    h = (h ^ hi).wrapping_mul(K);
    h ^ (h >> 29)
}

/// The `hash_table` floor's table: 65537 slots, each owned by one of n invokers.
fn hash_table(n: usize) -> Vec<u32> {
    let mut w = Wy(5);
    (0..HASH_TABLE_SIZE)
        .map(|_| w.below(n as u64) as u32)
        .collect()
}

fn block_on<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
    }
}

/// A discovery that alternates between two sets, so every `update()` is a membership change.
struct Alt {
    sets: [BTreeSet<Backend>; 2],
    next: AtomicUsize,
    staged: Mutex<Option<BTreeSet<Backend>>>,
}
impl Alt {
    fn new(sets: [BTreeSet<Backend>; 2]) -> Arc<Alt> {
        Arc::new(Alt {
            sets,
            next: AtomicUsize::new(0),
            staged: Mutex::new(None),
        })
    }
    /// Builds the set the next `discover()` hands over, before the timed update: polylb's
    /// update is timed on a set its caller built beforehand, so pingora's must not pay for
    /// building (cloning) its own.
    fn stage(&self) {
        let i = self.next.load(Ordering::Relaxed) & 1;
        *self.staged.lock().unwrap() = Some(self.sets[i].clone());
    }
}
struct Alternating(Arc<Alt>);
#[async_trait::async_trait]
impl ServiceDiscovery for Alternating {
    async fn discover(&self) -> pingora_error::Result<(BTreeSet<Backend>, HashMap<u64, bool>)> {
        let i = self.0.next.fetch_add(1, Ordering::Relaxed) & 1;
        let staged = self.0.staged.lock().unwrap().take();
        Ok((
            staged.unwrap_or_else(|| self.0.sets[i].clone()),
            HashMap::new(),
        ))
    }
}
fn pingora_lb<S>(n: usize, ketama: bool) -> (LoadBalancer<S>, Arc<Alt>)
where
    S: BackendSelection + 'static,
    S::Iter: BackendIter,
{
    let b = backends(n + 1, ketama);
    let extra = b.iter().next_back().unwrap().clone();
    let small = {
        let mut s = b.clone();
        s.remove(&extra);
        s
    };
    let alt = Alt::new([small, b]);
    let d = Alternating(alt.clone());
    let lb = LoadBalancer::<S>::from_backends(Backends::new(Box::new(d)));
    block_on(lb.update()).unwrap(); // now the n-backend set
    (lb, alt)
}

// ---------- tower ----------
type Svc = tower::util::ServiceFn<fn(()) -> std::future::Ready<Result<u64, Infallible>>>;
fn ok_svc(_: ()) -> std::future::Ready<Result<u64, Infallible>> {
    std::future::ready(Ok(1))
}
fn tower_set(n: usize) -> Vec<PeakEwma<Svc>> {
    (0..n)
        .map(|_| {
            let s: Svc = tower::service_fn(ok_svc as fn(()) -> _);
            // tower's defaults in balance::p2c examples: 30 ms default RTT, 10 s decay
            PeakEwma::new(
                s,
                Duration::from_millis(30),
                10e9,
                CompleteOnResponse::default(),
            )
        })
        .collect()
}

fn main() {
    let smoke = std::env::args().any(|a| a == "--smoke");
    let cfg = if smoke {
        Cfg {
            sample: Duration::from_millis(1),
            samples: 3,
            update_reps: 3,
        }
    } else {
        Cfg {
            sample: Duration::from_millis(15),
            samples: 7,
            update_reps: 15,
        }
    };
    let only: Option<String> = std::env::args().skip(1).find(|a| !a.starts_with("--"));
    let want = |s: &str| only.as_deref().is_none_or(|o| s.contains(o));
    let sizes = [10usize, 100, 1000];
    let keys = keys();
    let keys = &keys;

    if want("select") {
        for n in sizes {
            for threads in [1usize, 2] {
                // ----- floors -----
                let prefix: Vec<u64> = (0..n)
                    .scan(0u64, |s, i| {
                        *s += weight(i) as u64;
                        Some(*s)
                    })
                    .collect();
                let total = *prefix.last().unwrap();
                let mut points: Vec<u32> = {
                    let mut w = Wy(3);
                    (0..n * 160).map(|_| w.next() as u32).collect()
                };
                points.sort_unstable();
                // Each point's invoker, struct-of-arrays beside the points (floors.md).
                let ring_nodes: Vec<u32> = {
                    let mut w = Wy(5);
                    (0..n * 160).map(|_| w.below(n as u64) as u32).collect()
                };
                let counters: Vec<AtomicU64> = (0..n).map(|_| AtomicU64::new(0)).collect();
                let r = measure(&cfg, threads, &|| {
                    let mut w = wy();
                    move |_| w.below(n as u64)
                });
                emit("select", "floor", "uniform", n, threads, r, "ns");
                let r = measure(&cfg, threads, &|| {
                    let mut w = wy();
                    let p = &prefix;
                    move |_| {
                        let off = w.below(total);
                        p.partition_point(|&s| s <= off) as u64
                    }
                });
                emit("select", "floor", "weighted", n, threads, r, "ns");
                let r = measure(&cfg, threads, &|| {
                    let mut w = wy();
                    let c = &counters;
                    move |_| {
                        let a = w.below(n as u64) as usize;
                        let mut b = w.below(n as u64 - 1) as usize;
                        if b >= a {
                            b += 1;
                        }
                        let pick = if c[a].load(Ordering::Relaxed) <= c[b].load(Ordering::Relaxed) {
                            a
                        } else {
                            b
                        };
                        c[pick].fetch_add(1, Ordering::AcqRel);
                        c[pick].fetch_sub(1, Ordering::AcqRel);
                        pick as u64
                    }
                });
                emit("select", "floor", "p2c", n, threads, r, "ns");
                // Dubbo's least active is O(n) by definition: scan every in-flight count for
                // the minimum, then count the call in and out on the winner. The first minimum
                // wins (no tie-break): a scan from a random invoker, which spreads ties as
                // Dubbo's random tie-break does, was slower on 1 thread and on 2 (13.4 against
                // 8.2 ns at n = 10; 237 against 120-129 ns at n = 1000 on 2 threads), so this is
                // the cheaper floor.
                let r = measure(&cfg, threads, &|| {
                    let c = &counters;
                    move |_| {
                        let (mut best, mut min) = (0usize, u64::MAX);
                        for (j, a) in c.iter().enumerate() {
                            let v = a.load(Ordering::Relaxed);
                            if v < min {
                                min = v;
                                best = j;
                            }
                        }
                        c[best].fetch_add(1, Ordering::AcqRel);
                        c[best].fetch_sub(1, Ordering::AcqRel);
                        best as u64
                    }
                });
                emit("select", "floor", "leastactive_scan", n, threads, r, "ns");
                // adaptive's floor (benches/common/adaptive_floor.rs).
                let metrics: Vec<DubboMetrics> = (0..n).map(DubboMetrics::reported).collect();
                let weights: Vec<u64> = (0..n).map(|i| weight(i) as u64).collect();
                let r = measure(&cfg, threads, &|| {
                    let (m, w8) = (&metrics, &weights);
                    let mut w = wy();
                    move |_| {
                        // The time read each call, as the balancer reads it (`now_us = 0`).
                        let now = polylb::wall_clock_us() / 1000;
                        adaptive_floor::select_report(m, w8, now, |k| w.below(k)) as u64
                    }
                });
                emit("select", "floor", "adaptive_pair", n, threads, r, "ns");
                let r = measure(&cfg, threads, &|| {
                    let (pts, nodes) = (&points, &ring_nodes);
                    let mut k = 0usize;
                    move |_| {
                        k = (k + 1) & 4095;
                        let d = Md5::digest(keys[k]);
                        let h = u32::from_le_bytes([d[0], d[1], d[2], d[3]]);
                        let i = pts.partition_point(|&p| p < h);
                        // The lookup ends at the point's invoker (floors.md), wrapping past the end.
                        u64::from(nodes[if i == pts.len() { 0 } else { i }])
                    }
                });
                emit("select", "floor", "md5_ring", n, threads, r, "ns");
                // maglev's floor: hash the key, scale it to the table (multiply-high), read one
                // slot; the table is 65537 entries whatever n is
                let table = hash_table(n);
                let r = measure(&cfg, threads, &|| {
                    let t = &table;
                    let mut k = 0usize;
                    move |_| {
                        k = (k + 1) & 4095;
                        let h = mul_xorshift(&keys[k]);
                        let slot = ((h as u128 * HASH_TABLE_SIZE as u128) >> 64) as usize;
                        t[slot] as u64
                    }
                });
                emit("select", "floor", "hash_table", n, threads, r, "ns");
                // orca's floor: turns of one shared counter until a position's share of the
                // stride takes it (the heaviest position takes every turn it is offered)
                const STRIDE: u64 = 1 << 16;
                let heaviest = (0..n).map(weight).max().unwrap() as u64;
                let shares: Vec<u64> = (0..n)
                    .map(|i| (weight(i) as u64 * STRIDE).div_ceil(heaviest))
                    .collect();
                let turn = AtomicU64::new(0);
                let r = measure(&cfg, threads, &|| {
                    let (sh, t) = (&shares, &turn);
                    move |_| loop {
                        let k = t.fetch_add(1, Ordering::Relaxed);
                        let pos = k % n as u64;
                        let share = sh[pos as usize];
                        if ((k / n as u64).wrapping_mul(share) & (STRIDE - 1)) + share >= STRIDE {
                            break pos;
                        }
                    }
                });
                emit("select", "floor", "stride", n, threads, r, "ns");
                if threads == 1 {
                    let weights: Vec<i64> = (0..n).map(|i| weight(i) as i64).collect();
                    let r = measure(&cfg, 1, &|| {
                        let mut current = vec![0i64; n];
                        let w = &weights;
                        move |_| {
                            let (mut best, mut max) = (0, i64::MIN);
                            for (j, c) in current.iter_mut().enumerate() {
                                *c += w[j];
                                if *c > max {
                                    max = *c;
                                    best = j;
                                }
                            }
                            current[best] -= total as i64;
                            best as u64
                        }
                    });
                    emit("select", "floor", "swrr_loop", n, 1, r, "ns");
                }

                // ----- polylb: select + report on one shared balancer -----
                for strategy in [
                    "random",
                    "roundrobin",
                    "leastactive",
                    "consistenthash",
                    "maglev",
                    "p2c",
                    "peakewma",
                    "orca",
                    "adaptive",
                ] {
                    let b = Balancer::new(&format!("loadbalance={strategy}")).unwrap();
                    b.update(&invokers(n)).unwrap();
                    let m = b.method("sayHello").unwrap();
                    if strategy == "adaptive" {
                        // Every provider's metrics in, as adaptive's floor has them (without
                        // them every load is 0 and a pick is a weighted coin).
                        let now_ms = polylb::wall_clock_us() / 1000;
                        for i in 0..n {
                            let (cpu, rt_us) = DubboMetrics::report_of(i);
                            b.report_provider_metrics(m, i as u64, now_ms, cpu, rt_us, 0)
                                .unwrap();
                        }
                    }
                    let r = measure(&cfg, threads, &|| {
                        let b = &b;
                        let mut k = SEED.fetch_add(1, Ordering::Relaxed) as usize;
                        move |_| {
                            k = (k + 1) & 4095;
                            let id = b.select(m, &keys[k], 0).unwrap();
                            b.report(m, id, 1000, Outcome::Success, 0).unwrap();
                            id
                        }
                    });
                    emit("select", "polylb", strategy, n, threads, r, "ns");
                }

                // ----- pingora: public LoadBalancer::select (no feedback API to call) -----
                macro_rules! pingora_row {
                    ($ty:ty, $name:expr, $ketama:expr) => {{
                        let (lb, _) = pingora_lb::<$ty>(n, $ketama);
                        let r = measure(&cfg, threads, &|| {
                            let lb = &lb;
                            let mut k = SEED.fetch_add(1, Ordering::Relaxed) as usize;
                            move |_| {
                                k = (k + 1) & 4095;
                                let be = lb.select(&keys[k], 256).unwrap();
                                be.weight as u64
                            }
                        });
                        emit("select", "pingora", $name, n, threads, r, "ns");
                    }};
                }
                pingora_row!(FNVHash, "Weighted<fnv>", false);
                pingora_row!(Random, "Weighted<Random>", false);
                pingora_row!(RoundRobin, "RoundRobin", false);
                pingora_row!(KetamaHashing, "Ketama", true);

                // ----- tower PeakEwma: P2C over load(), then call + complete -----
                let r = measure(&cfg, threads, &|| {
                    let mut set = tower_set(n);
                    let mut w = wy();
                    let mut cx = Context::from_waker(Waker::noop());
                    move |_| {
                        let a = w.below(n as u64) as usize;
                        let mut b = w.below(n as u64 - 1) as usize;
                        if b >= a {
                            b += 1;
                        }
                        let pick = if set[a].load() <= set[b].load() { a } else { b };
                        let fut = set[pick].call(());
                        let mut fut = pin!(fut);
                        match fut.as_mut().poll(&mut cx) {
                            Poll::Ready(Ok(v)) => v + pick as u64,
                            _ => unreachable!(),
                        }
                    }
                });
                emit("select", "tower", "PeakEwma", n, threads, r, "ns");
            }
        }
    }

    // ----- the call object against the same work by hand: select, two clock reads, report -----
    if want("call") {
        let n = 10;
        for strategy in ["random", "peakewma"] {
            let b = Balancer::new(&format!("loadbalance={strategy}")).unwrap();
            b.update(&invokers(n)).unwrap();
            let m = b.method("sayHello").unwrap();
            let r = measure(&cfg, 1, &|| {
                let b = &b;
                move |_| {
                    let call = b.call(m, b"").unwrap();
                    let id = call.id();
                    call.finish(Outcome::Success).unwrap();
                    id
                }
            });
            emit("call", "call-object", strategy, n, 1, r, "ns");
            let r = measure(&cfg, 1, &|| {
                let b = &b;
                move |_| {
                    let id = b.select(m, b"", 0).unwrap();
                    let started = Instant::now();
                    let elapsed_us = started.elapsed().as_micros() as i64;
                    b.report(m, id, elapsed_us, Outcome::Success, 0).unwrap();
                    id
                }
            });
            emit("call", "by-hand", strategy, n, 1, r, "ns");
        }
    }

    // ----- update (rebuild) cost at n = 1000, membership changing every time -----
    // Two numbers per strategy: the update alone, and the update with what it leaves to the
    // calls after it (roundrobin serves them from a slower path until its counters are back on
    // a period): the time of the update and the next AFTER_UPDATE select+report calls, less
    // the time of as many calls on a set that did not change, measured in alternation.
    if want("update") {
        const AFTER_UPDATE: usize = 50_000;
        let n = 1000;
        let med = |mut v: Vec<f64>| {
            v.sort_by(|a, b| a.partial_cmp(b).unwrap());
            v[v.len() / 2]
        };
        let sets = [invokers(n), invokers(n + 1)];
        for (strategy, cfgs) in [
            (
                "consistenthash",
                "loadbalance=consistenthash&hash.nodes=160",
            ),
            ("maglev", "loadbalance=maglev"),
            ("random", "loadbalance=random"),
            ("roundrobin", "loadbalance=roundrobin"),
            ("leastactive", "loadbalance=leastactive"),
        ] {
            let b = Balancer::new(cfgs).unwrap();
            b.update(&sets[0]).unwrap();
            // Calls flow between membership changes, as in any client: an update also rebuilds
            // the state of the methods in use (roundrobin's per-method period), which an update
            // of a balancer that never served a call would skip.
            let m = b.method("sayHello").unwrap();
            let calls = |count: usize| {
                for key in keys.iter().cycle().take(count) {
                    let id = b.select(m, key, 0).unwrap();
                    b.report(m, id, 1000, Outcome::Success, 0).unwrap();
                }
            };
            let mut next = 1;
            let mut update = || {
                b.update(&sets[next]).unwrap();
                next ^= 1;
            };
            let alone: Vec<f64> = (0..cfg.update_reps * 2)
                .map(|_| {
                    calls(4);
                    let t = Instant::now();
                    update();
                    t.elapsed().as_nanos() as f64 / 1000.0
                })
                .collect();
            emit("update", "polylb", strategy, n, 1, med(alone), "us");
            let (mut changed, mut steady) = (Vec::new(), Vec::new());
            for _ in 0..cfg.update_reps * 2 {
                let t = Instant::now();
                calls(AFTER_UPDATE);
                steady.push(t.elapsed().as_nanos() as f64 / 1000.0);
                let t = Instant::now();
                update();
                calls(AFTER_UPDATE);
                changed.push(t.elapsed().as_nanos() as f64 / 1000.0);
            }
            let after = med(changed) - med(steady);
            emit("update_after", "polylb", strategy, n, 1, after, "us");
        }
        macro_rules! pingora_update {
            ($ty:ty, $name:expr, $ketama:expr) => {{
                let (lb, alt) = pingora_lb::<$ty>(n, $ketama);
                let calls = |count: usize| {
                    for key in keys.iter().cycle().take(count) {
                        black_box(lb.select(key, 256));
                    }
                };
                let alone: Vec<f64> = (0..cfg.update_reps * 2)
                    .map(|_| {
                        calls(4); // the same calls between updates as polylb's
                        alt.stage(); // untimed: the set discovery hands over
                        let t = Instant::now();
                        block_on(lb.update()).unwrap();
                        t.elapsed().as_nanos() as f64 / 1000.0
                    })
                    .collect();
                emit("update", "pingora", $name, n, 1, med(alone), "us");
                let (mut changed, mut steady) = (Vec::new(), Vec::new());
                for _ in 0..cfg.update_reps * 2 {
                    let t = Instant::now();
                    calls(AFTER_UPDATE);
                    steady.push(t.elapsed().as_nanos() as f64 / 1000.0);
                    alt.stage();
                    let t = Instant::now();
                    block_on(lb.update()).unwrap();
                    calls(AFTER_UPDATE);
                    changed.push(t.elapsed().as_nanos() as f64 / 1000.0);
                }
                let after = med(changed) - med(steady);
                emit("update_after", "pingora", $name, n, 1, after, "us");
            }};
        }
        pingora_update!(KetamaHashing, "Ketama", true);
        pingora_update!(FNVHash, "Weighted<fnv>", false);
        pingora_update!(RoundRobin, "RoundRobin", false);
    }

    // ----- memory per invoker (counting allocator) -----
    if want("memory") {
        let n = 1000;
        let methods = 1000;
        const WIDE_METHODS: usize = 10;
        for (strategy, cfgs) in [
            ("random", "loadbalance=random"),
            ("roundrobin", "loadbalance=roundrobin"),
            ("leastactive", "loadbalance=leastactive"),
            (
                "consistenthash",
                "loadbalance=consistenthash&hash.nodes=160",
            ),
            ("maglev", "loadbalance=maglev"),
            ("p2c", "loadbalance=p2c"),
            ("peakewma", "loadbalance=peakewma"),
        ] {
            let set = invokers(n);
            let names: Vec<String> = (0..methods).map(|i| format!("method{i}")).collect();
            let before = live();
            let b = Balancer::new(cfgs).unwrap();
            b.update(&set).unwrap();
            let after_update = live();
            for name in &names {
                let m = b.method(name).unwrap();
                for key in &keys[..4] {
                    let id = b.select(m, key, 0).unwrap();
                    b.report(m, id, 1000, Outcome::Success, 0).unwrap();
                }
            }
            let after_methods = live();
            drop(b);
            // The rows above call 4 of the n invokers per method, so most invokers never get
            // counters for it: what a method costs where it is used, 10 methods each calling
            // every invoker (20,000 calls, keys in rotation, reach all of them).
            let wide = Balancer::new(cfgs).unwrap();
            wide.update(&set).unwrap();
            let wide_before = live();
            for name in &names[..WIDE_METHODS] {
                let m = wide.method(name).unwrap();
                for key in keys.iter().cycle().take(20_000) {
                    let id = wide.select(m, key, 0).unwrap();
                    wide.report(m, id, 1000, Outcome::Success, 0).unwrap();
                }
            }
            let wide_after = live();
            drop(wide);
            emit(
                "memory",
                "polylb",
                strategy,
                n,
                1,
                (after_update - before) as f64 / n as f64,
                "B/invoker",
            );
            emit(
                "memory",
                "polylb",
                &format!("{strategy} +1000 methods"),
                n,
                1,
                (after_methods - after_update) as f64 / (methods * n) as f64,
                "B/invoker/method",
            );
            emit(
                "memory",
                "polylb",
                &format!("{strategy} +{WIDE_METHODS} methods, every invoker called"),
                n,
                1,
                (wide_after - wide_before) as f64 / (WIDE_METHODS * n) as f64,
                "B/invoker/method",
            );
        }
        macro_rules! pingora_mem {
            ($ty:ty, $name:expr, $ketama:expr) => {{
                let small = backends(n, $ketama);
                let d = Box::new(Alternating(Alt::new([small.clone(), small])));
                let before = live();
                let lb = LoadBalancer::<$ty>::from_backends(Backends::new(d));
                block_on(lb.update()).unwrap();
                for k in 0..4 {
                    black_box(lb.select(&keys[k], 256));
                }
                let after = live();
                emit(
                    "memory",
                    "pingora",
                    $name,
                    n,
                    1,
                    (after - before) as f64 / n as f64,
                    "B/invoker",
                );
                drop(lb);
            }};
        }
        pingora_mem!(KetamaHashing, "Ketama", true);
        pingora_mem!(FNVHash, "Weighted<fnv>", false);
        pingora_mem!(RoundRobin, "RoundRobin", false);
        let before = live();
        let set = tower_set(n);
        let after = live();
        emit(
            "memory",
            "tower",
            "PeakEwma",
            n,
            1,
            (after - before) as f64 / n as f64,
            "B/invoker",
        );
        drop(set);
    }
}
