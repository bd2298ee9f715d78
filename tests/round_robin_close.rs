//! roundrobin through updates to the empty set (a binding's close) and back, against the Dubbo
//! model: with warm-up, subsets (candidates and exclusions), zones, sets pushed again, updates
//! no select saw, time jumps, and weight or membership changes while the set is away; and with
//! selects on other threads racing them.

mod common;
use common::*;
use polylb::{Balancer, Invoker};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

const WARM_UP_MS: i32 = 60_000;

#[derive(Clone, Copy)]
struct Opts {
    zoned: bool,
    warm: bool,
    big_weights: bool,
}

fn run(seed: u64, o: Opts) {
    let mut rng = Lcg(seed);
    let config = if o.zoned {
        "loadbalance=roundrobin&zone=here"
    } else {
        "loadbalance=roundrobin"
    };
    let b = Balancer::new(config).unwrap();
    let m = b.method("m").unwrap();
    let mut model = DubboRoundRobin::default();
    let mut now_ms = 1_700_000_000_000i64;
    let weight = |rng: &mut Lcg| -> i32 {
        if o.big_weights {
            match rng.next(8) {
                0 => 0,
                _ => 100_000 + rng.next(100_000) as i32,
            }
        } else {
            1 + rng.next(6) as i32
        }
    };
    let n = 3 + rng.next(6) as usize;
    // (id, weight, start time)
    let mut set: Vec<(u64, i32, i64)> =
        (1..=n as u64).map(|id| (id, weight(&mut rng), 0)).collect();
    let publish = |b: &Balancer, set: &[(u64, i32, i64)]| {
        let invokers: Vec<Invoker> = set
            .iter()
            .map(|&(id, w, t)| {
                let mut inv = Invoker::new(id, format!("h{id}:1")).weight(w);
                if o.zoned {
                    inv = inv.zone(if id % 3 == 0 { "remote" } else { "here" });
                }
                if t != 0 {
                    inv = inv.start_time_ms(t).warmup_ms(WARM_UP_MS);
                }
                inv
            })
            .collect();
        b.update(&invokers).unwrap();
    };
    let effective = |set: &[(u64, i32, i64)], now_ms: i64| -> Vec<(u64, i32)> {
        set.iter()
            .map(|&(id, w, t)| {
                if t != 0 {
                    (id, polylb::effective_weight(w, t, WARM_UP_MS, now_ms))
                } else {
                    (id, w)
                }
            })
            .collect()
    };
    let narrow = |list: Vec<(u64, i32)>| -> Vec<(u64, i32)> {
        let local: Vec<(u64, i32)> = list.iter().copied().filter(|e| e.0 % 3 != 0).collect();
        let drained = local.iter().all(|e| e.1 <= 0) && list.iter().any(|e| e.1 > 0);
        match o.zoned && !local.is_empty() && !drained {
            true => local,
            false => list,
        }
    };
    publish(&b, &set);
    for step in 0..500 {
        match rng.next(16) {
            0 | 1 => {
                // Empty, maybe twice, maybe time passes, maybe the set changes, then back.
                b.update(&[]).unwrap();
                if rng.next(2) == 0 {
                    b.update(&[]).unwrap();
                }
                assert!(b.select(m, b"", now_ms * 1000).is_err());
                match rng.next(4) {
                    0 => now_ms += 61_000,
                    1 => now_ms += rng.next(70_000) as i64,
                    _ => {}
                }
                match rng.next(6) {
                    0 => {
                        let i = rng.next(set.len() as u64) as usize;
                        set[i].1 = weight(&mut rng);
                    }
                    1 if set.len() > 2 => {
                        set.remove(rng.next(set.len() as u64) as usize);
                    }
                    2 => {
                        let id = 1 + rng.next(12);
                        if !set.iter().any(|e| e.0 == id) {
                            set.push((id, weight(&mut rng), 0));
                        }
                    }
                    3 if o.warm => {
                        let i = rng.next(set.len() as u64) as usize;
                        set[i].2 = now_ms - rng.next(30_000) as i64;
                    }
                    _ => {}
                }
                publish(&b, &set);
            }
            2 => now_ms += 61_000,
            3 => now_ms += rng.next(30_000) as i64,
            4 => {
                // Pushed again unchanged.
                publish(&b, &set);
            }
            5 if set.len() > 2 => {
                // A failover retry.
                let tried = set[rng.next(set.len() as u64) as usize].0;
                let rest: Vec<(u64, i32)> = effective(&set, now_ms)
                    .into_iter()
                    .filter(|e| e.0 != tried)
                    .collect();
                let want = model.select(&narrow(rest), now_ms, false);
                let got = b
                    .select_among(m, b"", &[], &[tried], now_ms * 1000)
                    .unwrap();
                assert_eq!(got, want, "seed {seed} step {step} (excluding {tried})");
            }
            6 | 7 if !o.zoned && set.len() > 2 => {
                // A burst over one subset of candidates.
                let k = 2 + rng.next(set.len() as u64 - 1) as usize;
                let cands: Vec<u64> = set.iter().take(k).map(|e| e.0).collect();
                for _ in 0..1 + rng.next(10) {
                    let list: Vec<(u64, i32)> = effective(&set, now_ms)
                        .into_iter()
                        .filter(|e| cands.contains(&e.0))
                        .collect();
                    let want = model.select(&list, now_ms, false);
                    let got = b.select_among(m, b"", &cands, &[], now_ms * 1000).unwrap();
                    assert_eq!(got, want, "seed {seed} step {step} (among {cands:?})");
                }
            }
            8 if o.warm => {
                let i = rng.next(set.len() as u64) as usize;
                set[i].2 = now_ms - rng.next(30_000) as i64;
                publish(&b, &set);
            }
            9 => {
                // An update no select sees, then the set again.
                let passing: Vec<(u64, i32, i64)> =
                    set.iter().map(|&(id, w, t)| (id, w + 1, t)).collect();
                publish(&b, &passing);
                if rng.next(2) == 0 {
                    b.update(&[]).unwrap();
                }
                publish(&b, &set);
            }
            _ => {
                for _ in 0..1 + rng.next(30) {
                    now_ms += rng.next(3) as i64;
                    let want = model.select(&narrow(effective(&set, now_ms)), now_ms, false);
                    let got = b.select(m, b"", now_ms * 1000).unwrap();
                    assert_eq!(got, want, "seed {seed} step {step} at {now_ms}");
                }
            }
        }
    }
}

/// Seeds `seeds` of [`run`] with the options (zoned, warm, big weights).
fn runs(seeds: std::ops::RangeInclusive<u64>, (zoned, warm, big_weights): (bool, bool, bool)) {
    for seed in seeds {
        run(
            seed,
            Opts {
                zoned,
                warm,
                big_weights,
            },
        );
    }
}

#[test]
fn plain() {
    runs(1..=60, (false, false, false));
}

#[test]
fn big_weights() {
    runs(1..=30, (false, false, true));
}

#[test]
fn zoned() {
    runs(1..=60, (true, false, false));
    runs(61..=80, (true, false, true));
}

#[test]
fn warm() {
    runs(1..=60, (false, true, false));
    runs(61..=80, (true, true, false));
}

/// Updates to the empty set and back racing roundrobin selects on other threads: no panic
/// (debug assertions on the parked record), and once the races end the picks are Dubbo's
/// sequence from the counters left (each invoker picked its weight's share over a period).
#[test]
fn empty_updates_racing_selects() {
    for weights in [vec![1, 2, 3, 4], vec![100_001, 100_003, 100_007, 99_991, 5]] {
        let b = Arc::new(Balancer::new("loadbalance=roundrobin").unwrap());
        let set: Vec<Invoker> = weights
            .iter()
            .enumerate()
            .map(|(i, &w)| Invoker::new(i as u64, format!("10.0.0.{i}:1")).weight(w))
            .collect();
        b.update(&set).unwrap();
        let methods: Vec<u32> = (0..4)
            .map(|i| b.method(&format!("m{i}")).unwrap())
            .collect();
        let stop = Arc::new(AtomicBool::new(false));
        let threads: Vec<_> = (0..3)
            .map(|t| {
                let (b, stop, methods) = (b.clone(), stop.clone(), methods.clone());
                std::thread::spawn(move || {
                    let mut k = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let m = methods[(k as usize + t) % methods.len()];
                        let now = 1_700_000_000_000_000 + (k as i64) * 1000;
                        if k % 7 == 0 {
                            let _ = b.select_among(m, b"", &[], &[k % 4], now);
                        } else if k % 11 == 0 {
                            let _ = b.select_among(m, b"", &[1, 2, 3], &[], now);
                        } else {
                            let _ = b.select(m, b"", now);
                        }
                        k += 1;
                    }
                })
            })
            .collect();
        for r in 0..2000 {
            b.update(&[]).unwrap();
            if r % 3 == 0 {
                b.update(&[]).unwrap();
            }
            b.update(&set).unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        for t in threads {
            t.join().unwrap();
        }
    }
}
