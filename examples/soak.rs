//! Soak driver: churns what a long-lived client churns and prints the live heap (a counting
//! allocator) at intervals, to tell state that follows the current set from state that follows
//! the history. `cargo run --release --example soak -- <scenario> [config] [rounds]`.
//!
//! - `invokers <config>`: a set of 50; each round 5 invokers leave and 5 new ones (new ids and
//!   addresses, as restarted pods) join, then 200 calls over three methods (every 10th call a
//!   failure, every 25th a failover retry), virtual time +200 ms a round. A fourth method is
//!   picked from only in the first round. With `SUBSET=1` in the environment, 100 more calls a
//!   round pick among the newer half of the set (a router's candidates).
//! - `threads <config>`: each round a new thread makes 20 calls and exits.
//! - `balancers <config>`: each round a balancer is created, updated, called from this thread and
//!   from a pool thread that stays alive, then dropped.
//! - `failovers <config>`: 100 invokers weighing BASE + STEP·i (100 + 7i), never updated;
//!   CALLS - 1 calls (999) and a failover's retry each round.
//! - `stats <config>`: `stats_json` each round on a fixed set.
use polylb::{Balancer, Invoker, Outcome};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering::Relaxed};

struct Counting;
static LIVE: AtomicIsize = AtomicIsize::new(0);
static ALLOCS: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Relaxed);
        LIVE.fetch_add(l.size() as isize, Relaxed);
        System.alloc(l)
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as isize, Relaxed);
        System.dealloc(p, l)
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as isize, Relaxed);
        System.alloc_zeroed(l)
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        LIVE.fetch_add(n as isize - l.size() as isize, Relaxed);
        System.realloc(p, l, n)
    }
}

#[global_allocator]
static A: Counting = Counting;

fn rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn report(round: u64) {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let start = START.get_or_init(std::time::Instant::now);
    println!(
        "round {round:>8}  live {:>12} B  allocations {:>10}  rss {:>8} kB  at {:>8.3} s",
        LIVE.load(Relaxed),
        ALLOCS.load(Relaxed),
        rss_kb(),
        start.elapsed().as_secs_f64()
    );
}

fn invoker(id: u64, zoned: bool) -> Invoker {
    let inv = Invoker::new(
        id,
        format!("10.{}.{}.{}:20880", id >> 16 & 255, id >> 8 & 255, id & 255),
    )
    .weight(100 + (id % 3) as i32 * 50);
    if zoned {
        inv.zone(if id % 2 == 0 { "a" } else { "b" })
    } else {
        inv
    }
}

fn calls(b: &Balancer, methods: &[u32], now_us: i64, n: u64, seq: &mut u64) {
    for _ in 0..n {
        *seq += 1;
        let m = methods[(*seq % methods.len() as u64) as usize];
        let key = seq.to_le_bytes();
        let id = b.select(m, &key, now_us).unwrap();
        let outcome = if *seq % 10 == 0 {
            Outcome::Failure
        } else {
            Outcome::Success
        };
        b.report(m, id, 1000 + (*seq % 7) as i64 * 100, outcome, now_us)
            .unwrap();
        if *seq % 25 == 0 {
            let retry = b.select_among(m, &key, &[], &[id], now_us).unwrap();
            b.report(m, retry, 900, Outcome::Success, now_us).unwrap();
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let scenario = args.get(1).map_or("invokers", |s| s.as_str());
    let config = args.get(2).map_or("", |s| s.as_str());
    let rounds: u64 = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(20_000);
    let zoned = config.contains("zone=");
    let subset = std::env::var_os("SUBSET").is_some();
    let t0: i64 = 1_700_000_000_000_000;
    let mut seq = 0u64;
    match scenario {
        "invokers" => {
            let b = Balancer::new(config).unwrap();
            let methods: Vec<u32> = ["a", "b", "c"]
                .iter()
                .map(|n| b.method(n).unwrap())
                .collect();
            let rare = b.method("rare").unwrap();
            let mut next = 0u64;
            let mut set: Vec<Invoker> = (0..50)
                .map(|_| {
                    next += 1;
                    invoker(next, zoned)
                })
                .collect();
            b.update(&set).unwrap();
            calls(&b, &[rare], t0, 50, &mut seq);
            for round in 0..rounds {
                let now = t0 + round as i64 * 200_000;
                set.drain(..5);
                for _ in 0..5 {
                    next += 1;
                    set.push(invoker(next, zoned));
                }
                b.update(&set).unwrap();
                if subset {
                    // A router's candidates: the newer half of the set.
                    let among: Vec<u64> = set[25..].iter().map(|i| i.id).collect();
                    for _ in 0..100 {
                        seq += 1;
                        let m = methods[(seq % 3) as usize];
                        let id = b.select_among(m, &seq.to_le_bytes(), &among, &[], now);
                        b.report(m, id.unwrap(), 1000, Outcome::Success, now)
                            .unwrap();
                    }
                }
                calls(&b, &methods, now, 200, &mut seq);
                if round % (rounds / 10).max(1) == 0 || round + 1 == rounds {
                    report(round);
                }
            }
        }
        "threads" => {
            let b = Balancer::new(config).unwrap();
            let methods: Vec<u32> = ["a", "b"].iter().map(|n| b.method(n).unwrap()).collect();
            b.update(&(1..=20).map(|i| invoker(i, zoned)).collect::<Vec<_>>())
                .unwrap();
            for round in 0..rounds {
                let b2 = b.clone();
                let methods = methods.clone();
                std::thread::spawn(move || {
                    let mut seq = round;
                    calls(&b2, &methods, t0 + round as i64 * 1000, 20, &mut seq);
                })
                .join()
                .unwrap();
                if round % (rounds / 10).max(1) == 0 || round + 1 == rounds {
                    report(round);
                }
            }
        }
        "balancers" => {
            let (tx, rx) = std::sync::mpsc::channel::<Balancer>();
            let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
            let pool = std::thread::spawn(move || {
                let mut seq = 0;
                for b in rx {
                    let m = b.method("a").unwrap();
                    calls(&b, &[m], t0, 10, &mut seq);
                    drop(b);
                    done_tx.send(()).unwrap();
                }
            });
            for round in 0..rounds {
                let b = Balancer::new(config).unwrap();
                let m = b.method("a").unwrap();
                b.update(&(1..=20).map(|i| invoker(i, zoned)).collect::<Vec<_>>())
                    .unwrap();
                calls(&b, &[m], t0, 10, &mut seq);
                tx.send(b).unwrap();
                done_rx.recv().unwrap();
                if round % (rounds / 10).max(1) == 0 || round + 1 == rounds {
                    report(round);
                }
            }
            drop(tx);
            pool.join().unwrap();
        }
        "stats" => {
            let b = Balancer::new(config).unwrap();
            let m = b.method("a").unwrap();
            b.update(&(1..=50).map(|i| invoker(i, zoned)).collect::<Vec<_>>())
                .unwrap();
            for round in 0..rounds {
                calls(&b, &[m], t0, 10, &mut seq);
                std::hint::black_box(b.stats_json(t0));
                if round % (rounds / 10).max(1) == 0 || round + 1 == rounds {
                    report(round);
                }
            }
        }
        "failovers" => {
            // One set, never updated; weights 100 + 7i (gcd 1: long periods); a failover's
            // retry every 1000th call.
            let b = Balancer::new(config).unwrap();
            let m = b.method("a").unwrap();
            let env = |k: &str, d: u64| {
                std::env::var(k)
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(d)
            };
            let (base, step, per_round) = (env("BASE", 100), env("STEP", 7), env("CALLS", 1000));
            let set: Vec<Invoker> = (0..100)
                .map(|i| {
                    Invoker::new(i, format!("10.0.0.{i}:20880")).weight((base + step * i) as i32)
                })
                .collect();
            b.update(&set).unwrap();
            for round in 0..rounds {
                for _ in 1..per_round {
                    let id = b.select(m, b"", t0).unwrap();
                    b.report(m, id, 1000, Outcome::Success, t0).unwrap();
                }
                let id = b.select(m, b"", t0).unwrap();
                let retry = b.select_among(m, b"", &[], &[id], t0).unwrap();
                b.report(m, retry, 1000, Outcome::Success, t0).unwrap();
                if round % (rounds / 10).max(1) == 0 || round + 1 == rounds {
                    report(round);
                }
            }
        }
        other => panic!("unknown scenario {other}"),
    }
}
