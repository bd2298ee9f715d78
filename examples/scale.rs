//! Measures how each API call grows with the set's size, for the scale review:
//! `cargo run --release --example scale -- '<config>' <n> <op> <iters> [arg]`.
//! Ops: `build` (new + update), `update` (the same set again), `update-weight` (one weight
//! changed), `update-churn` (one invoker replaced), `select`, `report` (select+report),
//! `report-ticking` (select+report, the clock 1 ms further at each call),
//! `among <c>` (select_among with c candidates spread over the set), `among-dup <c>` (c copies
//! of one id plus one other), `excl <e>` (excluding e ids), `excl-all`, `methods <m>` (interns
//! m names, one call each, then times updates), `methods-churn <m>` (m methods, two invokers
//! replaced per update, `STEP_US` apart, one method's select+report after each), `late-method <m>` (every invoker serves m
//! methods; times select+report of the last), `stats` (stats_json with `arg` methods used),
//! `stats-interned` (`arg` methods interned, one used), `key <bytes>` (select with a key that long).
//! Weights: `WEIGHTS=equal|mixed|onehot|ramp|max` (default mixed: 100/150/200; max: i32::MAX). `ZONES=<k>`: invoker
//! i in zone z{i%k}, local zone z0 (config must carry `zone=z0`). `WARMING=1`: every invoker
//! starts now, with a 10-minute warm-up. Prints time per op; run under
//! `valgrind --tool=cachegrind` with two iteration counts for instructions per op.
use polylb::{Balancer, Invoker, Outcome};
use std::time::Instant;

fn set(n: u64, salt: u64) -> Vec<Invoker> {
    let weights = std::env::var("WEIGHTS").unwrap_or_else(|_| "mixed".into());
    let zones: Option<u64> = std::env::var("ZONES").ok().and_then(|s| s.parse().ok());
    let warming = std::env::var_os("WARMING").is_some();
    (0..n)
        .map(|i| {
            let w = match weights.as_str() {
                "equal" => 100,
                "onehot" => i32::from(i == 0),
                "ramp" => 100 + 7 * i as i32,
                "max" => i32::MAX,
                _ => 100 + (i % 3) as i32 * 50,
            };
            let inv = Invoker::new(
                i + salt,
                format!("10.{}.{}.{}:20880", i >> 16, (i >> 8) & 255, i & 255),
            )
            .weight(w);
            let inv = match warming {
                true => inv
                    .start_time_ms(polylb::wall_clock_us() / 1000)
                    .warmup_ms(600_000),
                false => inv,
            };
            match zones {
                Some(k) => inv.zone(format!("z{}", i % k)),
                None => inv,
            }
        })
        .collect()
}

fn usage() -> ! {
    eprintln!(
        "usage: scale '<config>' <n> <op> <iters> [arg]; ops: build, update, update-weight, \
         update-churn, select, report, report-ticking, among <c>, among-dup <c>, excl <e>, excl-all, \
         methods <m>, methods-churn <m>, late-method <m>, stats <m>, stats-interned <m>, key <bytes> (examples/scale.rs)"
    );
    std::process::exit(2)
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let number = |i: usize| a.get(i).and_then(|s| s.parse::<u64>().ok());
    let (Some(config), Some(n), Some(op), Some(iters)) = (a.get(1), number(2), a.get(3), number(4))
    else {
        usage();
    };
    let op = op.as_str();
    let arg: u64 = a.get(5).and_then(|s| s.parse().ok()).unwrap_or(1);
    let now = polylb::wall_clock_us();
    let invokers = set(n, 0);
    let t0 = Instant::now();
    let b = Balancer::new(config).unwrap();
    b.update(&invokers).unwrap();
    let build = t0.elapsed();
    eprintln!("build n={n}: {:.3} ms", build.as_secs_f64() * 1e3);
    let mut sum = 0u64;
    let start = Instant::now();
    match op {
        "build" => {
            for _ in 0..iters {
                let b = Balancer::new(config).unwrap();
                b.update(&invokers).unwrap();
            }
        }
        "update" => {
            for _ in 0..iters {
                b.update(&invokers).unwrap();
            }
        }
        "update-weight" | "update-churn" => {
            let mut other = invokers.clone();
            if op == "update-weight" {
                other[0].weight += 1;
            } else {
                other[0] = Invoker::new(n + 1, "192.168.0.1:1");
            }
            for i in 0..iters {
                b.update(if i % 2 == 0 { &other } else { &invokers })
                    .unwrap();
            }
        }
        "methods" => {
            let ids: Vec<u32> = (0..arg)
                .map(|m| b.method(&format!("m{m}")).unwrap())
                .collect();
            for (k, &m) in ids.iter().enumerate() {
                for j in 0..4u64 {
                    let id = b.select(m, &(k as u64 + j).to_le_bytes(), now).unwrap();
                    b.report(m, id, 1000, Outcome::Success, now).unwrap();
                }
            }
            let mut other = invokers.clone();
            match std::env::var("CHANGE").as_deref() {
                Ok("none") => {}
                Ok("weight") => other[0].weight += 1,
                _ => other[0] = Invoker::new(n + 1, "192.168.0.1:1"),
            }
            eprintln!("setup done: {:.3} ms", start.elapsed().as_secs_f64() * 1e3);
            let start = Instant::now();
            for i in 0..iters {
                b.update(if i % 2 == 0 { &other } else { &invokers })
                    .unwrap();
            }
            eprintln!(
                "update: {:.3} ms each",
                start.elapsed().as_secs_f64() * 1e3 / iters as f64
            );
            return;
        }
        "methods-churn" => {
            // A registry replacing two of the n invokers at every update, `STEP_US` (default
            // 1,000) of virtual time apart, while `arg` methods each take a select+report in
            // turn, one per update: the state of invokers that left piles up for as long as a
            // strategy keeps it (roundrobin: 60 s). Times update plus the one call.
            let ids: Vec<u32> = (0..arg)
                .map(|m| b.method(&format!("m{m}")).unwrap())
                .collect();
            let step_us: i64 = std::env::var("STEP_US")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(1_000);
            let start = Instant::now();
            for i in 0..iters {
                b.update(&set(n, 2 * (i + 1))).unwrap();
                let m = ids[(i % arg.max(1)) as usize];
                let t = now + i as i64 * step_us;
                let id = b.select(m, &i.to_le_bytes(), t).unwrap();
                b.report(m, id, 1000, Outcome::Success, t).unwrap();
            }
            println!(
                "{config} n={n} {op} {arg} (step {step_us} µs): {:.2} µs per update",
                start.elapsed().as_secs_f64() * 1e6 / iters as f64
            );
            return;
        }
        "select" | "report" | "report-ticking" => {
            for i in 0..iters {
                // `report-ticking`: the clock moves 1 ms per call, so that periodic work
                // (`orca`'s recomputation with `orca.updateMs=1`) runs on every pick.
                let now = if op == "report-ticking" {
                    now + i as i64 * 1000
                } else {
                    now
                };
                let id = b.select(0, &i.to_le_bytes(), now).unwrap();
                if op != "select" {
                    b.report(0, id, 1000, Outcome::Success, now).unwrap();
                }
                sum = sum.wrapping_add(id);
            }
        }
        "key" => {
            let key = vec![7u8; arg as usize];
            for _ in 0..iters {
                let id = b.select(0, &key, now).unwrap();
                b.report(0, id, 1000, Outcome::Success, now).unwrap();
            }
        }
        "among" | "among-dup" | "excl" | "excl-all" => {
            let step = (n / arg.max(1)).max(1);
            let list: Vec<u64> = match op {
                "among-dup" => (0..arg).map(|i| if i == 0 { 1 } else { 0 }).collect(),
                "excl-all" => (0..n).collect(),
                _ => (0..arg).map(|i| (i * step) % n).collect(),
            };
            for i in 0..iters {
                let key = i.to_le_bytes();
                let r = if op.starts_with("among") {
                    b.select_among(0, &key, &list, &[], now)
                } else {
                    b.select_among(0, &key, &[], &list, now)
                };
                if let Ok(id) = r {
                    b.report(0, id, 1000, Outcome::Success, now).unwrap();
                    sum = sum.wrapping_add(id);
                }
            }
        }
        "late-method" => {
            // Every invoker has served `arg` methods; time the calls of the last one.
            let ids: Vec<u32> = (0..arg)
                .map(|m| b.method(&format!("m{m}")).unwrap())
                .collect();
            let setup = Instant::now();
            for &m in &ids {
                for i in 0..n {
                    let p = b.select_among(m, b"", &[i], &[], now).unwrap();
                    b.report(m, p, 1000, Outcome::Success, now).unwrap();
                }
            }
            eprintln!("setup: {:.3} ms", setup.elapsed().as_secs_f64() * 1e3);
            let m = *ids.last().unwrap();
            let start = Instant::now();
            for i in 0..iters {
                let id = b.select(m, &i.to_le_bytes(), now).unwrap();
                b.report(m, id, 1000, Outcome::Success, now).unwrap();
            }
            let ns = start.elapsed().as_nanos() as f64 / iters as f64;
            println!("{config} n={n} {op} {arg}: {ns:.1} ns per op");
            return;
        }
        "stats" | "stats-interned" => {
            for m in 0..arg {
                let id = b.method(&format!("m{m}")).unwrap();
                if op == "stats-interned" && m > 0 {
                    continue;
                }
                for i in 0..n.min(1000) {
                    let p = b
                        .select_among(id, &i.to_le_bytes(), &[i], &[], now)
                        .unwrap();
                    b.report(id, p, 1000, Outcome::Success, now).unwrap();
                }
            }
            eprintln!("setup done");
            let start = Instant::now();
            let mut len = 0;
            for _ in 0..iters {
                len += b.stats_json(now).len();
            }
            eprintln!(
                "stats: {:.3} ms each, {} bytes",
                start.elapsed().as_secs_f64() * 1e3 / iters as f64,
                len / iters as usize
            );
            return;
        }
        _ => usage(),
    }
    let ns = start.elapsed().as_nanos() as f64 / iters as f64;
    println!("{config} n={n} {op} {arg}: {ns:.1} ns per op (checksum {sum})");
}
