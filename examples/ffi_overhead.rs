//! Times one `Balancer::select` + `Balancer::report` pair through the Rust API, for random and
//! leastactive over 10 and 100 invokers: the same calls, set and loop as examples/c/bench.c,
//! so that examples/c/bench.sh can print the cost of going through the C ABI as a ratio.
//!
//! Output, one line per case: `<strategy> <n> <median ns/op> <min ns/op>`.
//!
//! Run: `cargo run --release --example ffi_overhead` (or examples/c/bench.sh for the ratio).

use polylb::{Balancer, Invoker, Outcome};
use std::hint::black_box;
use std::time::Instant;

const ITERS: u32 = 1_000_000;
const REPS: usize = 9;

/// The same set as bench.c: ids 1..n, weights 50, 100, 150, 200, 50, ...
fn setup(strategy: &str, n: usize) -> Balancer {
    let b = Balancer::new(&format!("loadbalance={strategy}")).expect("valid config");
    let set: Vec<Invoker> = (0..n)
        .map(|i| {
            Invoker::new(i as u64 + 1, format!("10.0.{}.{}:20880", i / 256, i % 256))
                .weight(50 * (1 + (i % 4) as i32))
        })
        .collect();
    b.update(&set).expect("valid set");
    b
}

/// ns per select + report pair over ITERS pairs.
fn run(b: &Balancer, sink: &mut u64) -> f64 {
    let start = Instant::now();
    for _ in 0..ITERS {
        let id = b.select(0, b"", 0).unwrap_or(0);
        let _ = b.report(0, id, 1000, Outcome::Success, 0);
        *sink = sink.wrapping_add(black_box(id));
    }
    start.elapsed().as_nanos() as f64 / ITERS as f64
}

fn main() {
    let mut sink = 0u64;
    for strategy in ["random", "leastactive"] {
        for n in [10, 100] {
            let b = setup(strategy, n);
            run(&b, &mut sink); // warm-up
            let mut t: Vec<f64> = (0..REPS).map(|_| run(&b, &mut sink)).collect();
            t.sort_by(f64::total_cmp);
            println!("{strategy} {n} {:.2} {:.2}", t[REPS / 2], t[0]);
        }
    }
    eprintln!("(checksum {sink})");
}
