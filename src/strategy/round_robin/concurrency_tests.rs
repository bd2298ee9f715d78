//! Two threads pick on one method while a third updates the set: no panic, the counters keep
//! Dubbo's invariant (with every weight fixed and no recycling, each select adds the list's
//! total and takes it from one counter, so the counters of a method sum to 0 whatever the
//! order of the picks), and from the counters left the picks go on as Dubbo's would.

use super::state::PerMethod;
use crate::{Balancer, Invoker};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};

type Map = BTreeMap<u64, (i32, i64, i64)>;

/// The method's counters as Dubbo's map holds them (zero ones left out).
fn counters(b: &Balancer, m: u32) -> Map {
    let ms = b.method_state_for_tests(m).expect("method");
    let Some(pm) = ms.ext_if_present::<PerMethod>() else {
        return Map::new();
    };
    let mut st = pm.state.lock();
    st.close_live();
    st.materialize();
    st.entries
        .iter()
        .map(|(&id, e)| (id, (e.weight, e.current, e.last_update_ms)))
        .collect()
}

struct Lcg(u64);
impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

fn run(seed: u64, weight_of: fn(u64) -> i32, library: bool) {
    const IDS: u64 = 8;
    let b = Balancer::new("loadbalance=roundrobin").unwrap();
    let m = b.method("m").unwrap();
    let set = |mask: u64| -> Vec<Invoker> {
        (1..=IDS)
            .filter(|id| mask & (1 << id) != 0)
            .map(|id| Invoker::new(id, format!("10.2.0.{id}:1")).weight(weight_of(id)))
            .collect()
    };
    let full = (1..=IDS).fold(0, |a, id| a | 1 << id);
    b.update(&set(full)).unwrap();
    let base_us = if library { 0 } else { 1_700_000_000_000_000 };
    let stop = AtomicBool::new(false);
    let picks = std::thread::scope(|s| {
        let pickers: Vec<_> = (0..2)
            .map(|t| {
                let (b, stop) = (&b, &stop);
                s.spawn(move || {
                    let mut rng = Lcg(seed * 31 + t);
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) || n < 20_000 {
                        let r = match rng.below(20) {
                            0 => {
                                let tried = 1 + rng.below(IDS);
                                b.select_among(m, b"", &[], &[tried], base_us)
                            }
                            1 => b.select_among(m, b"", &[1, 2, 3, 5], &[], base_us),
                            _ => b.select(m, b"", base_us),
                        };
                        if r.is_ok() {
                            n += 1;
                        }
                        if n > 400_000 {
                            break;
                        }
                    }
                    n
                })
            })
            .collect();
        let mut rng = Lcg(seed);
        for _ in 0..3_000 {
            let mask = match rng.below(30) {
                0 => 0,
                1 => full,
                _ => rng.below(1 << (IDS + 1)) & !1,
            };
            b.update(&set(mask)).unwrap();
            for _ in 0..rng.below(200) {
                std::hint::spin_loop();
            }
        }
        b.update(&set(full)).unwrap();
        stop.store(true, Ordering::Relaxed);
        pickers.into_iter().map(|h| h.join().unwrap()).sum::<u64>()
    });
    eprintln!("seed {seed} library {library}: {picks} concurrent picks");
    let map = counters(&b, m);
    let sum: i64 = map.values().map(|e| e.1).sum();
    assert_eq!(sum, 0, "seed {seed}: counters {map:?} after {picks} picks");
    // From the counters left, single-threaded, the picks are Dubbo's: through churn,
    // subsets, and past 60 s.
    let mut now_ms = map
        .values()
        .map(|e| e.2)
        .max()
        .unwrap_or(0)
        .max(1_700_000_000_000);
    let mut model = crate::dubbo_round_robin::DubboRoundRobin::with_counters(map);
    let mut rng = Lcg(seed ^ 0xABCD);
    let mut mask = full;
    for step in 0..4_000 {
        match rng.below(30) {
            0 => {
                mask = rng.below(1 << (IDS + 1)) & !1;
                b.update(&set(mask)).unwrap();
            }
            1 => now_ms += 30_000 + rng.below(40_000) as i64,
            2 => now_ms -= rng.below(5_000) as i64,
            _ => {
                let list: Vec<(u64, i32)> = (1..=IDS)
                    .filter(|id| mask & (1 << id) != 0)
                    .map(|id| (id, weight_of(id)))
                    .collect();
                let (cands, list): (Vec<u64>, Vec<(u64, i32)>) = if rng.below(4) == 0 {
                    let l: Vec<(u64, i32)> =
                        list.iter().copied().filter(|e| e.0 % 2 == 1).collect();
                    (l.iter().map(|e| e.0).collect(), l)
                } else {
                    (vec![], list)
                };
                if list.is_empty() {
                    continue;
                }
                let want = model.select(&list, now_ms, false);
                let got = b.select_among(m, b"", &cands, &[], now_ms * 1000).unwrap();
                assert_eq!(got, want, "seed {seed} step {step}: over {list:?}");
            }
        }
    }
}

#[test]
fn two_pickers_and_an_updater_keep_dubbos_counters() {
    for seed in 0..6 {
        run(seed, |id| 1 + (id % 4) as i32, false);
        run(seed, |id| 100_000 + 7 * id as i32, false);
        run(seed, |id| [100, 200, 300][(id % 3) as usize], true);
    }
}
