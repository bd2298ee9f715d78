//! roundrobin against a direct model of Dubbo's algorithm (a map keyed by invoker identity,
//! O(n) walk, 60 s recycling), through updates, weight changes, subsets and time jumps.

mod common;
use common::*;
use polylb::{Balancer, Invoker};

/// Dubbo's RoundRobinLoadBalance.doSelect (the model in tests/common), every pick at the
/// caller's clock.
#[derive(Default)]
struct DubboModel(DubboRoundRobin);

impl DubboModel {
    fn select(&mut self, list: &[(u64, i32)], now_ms: i64) -> u64 {
        self.0.select(list, now_ms, false)
    }
}

#[test]
fn sequences_equal_dubbo_model_across_churn_subsets_and_time() {
    // Small weights: short periods, precomputed and served from a ticket.
    churn_against_model(1..=40, false, |rng| rng.next(6) as i32);
}

#[test]
fn sequences_equal_dubbo_model_across_churn_with_zone_preference() {
    // Dubbo's walk over the local invokers (ids not divisible by 3), or over every candidate
    // when none is local: the local zone is the set that periods and the tournament serve,
    // the remote invokers' counters age towards recycling meanwhile.
    churn_against_model(61..=100, true, |rng| rng.next(6) as i32);
    churn_against_model(101..=110, true, |rng| match rng.next(8) {
        0 => 0,
        _ => 100_000 + rng.next(100_000) as i32,
    });
}

#[test]
fn sequences_equal_dubbo_model_when_no_period_fits() {
    // Large weights with gcd 1 (periods of about a million picks, over the precomputing bound),
    // and an occasional zero: picks come from the kinetic tournament.
    churn_against_model(41..=60, false, |rng| match rng.next(8) {
        0 => 0,
        _ => 100_000 + rng.next(100_000) as i32,
    });
}

/// Random churn (membership, weights), failover exclusions and clock jumps, each select checked
/// against the model. `weight` draws a new weight. With `zoned`, invokers whose id is not a
/// multiple of 3 are in the preferred zone.
fn churn_against_model(
    seeds: std::ops::RangeInclusive<u64>,
    zoned: bool,
    weight: impl Fn(&mut Lcg) -> i32,
) {
    let provider = |id: u64| match zoned {
        true => provider(id).zone(if id % 3 == 0 { "remote" } else { "here" }),
        false => provider(id),
    };
    // The candidates a zone preference leaves (all of them healthy): the local ones, if any,
    // unless all of those weigh 0 while a remote one does not (a drained zone).
    let narrow = |list: Vec<(u64, i32)>| -> Vec<(u64, i32)> {
        let local: Vec<(u64, i32)> = list.iter().copied().filter(|e| e.0 % 3 != 0).collect();
        let drained = local.iter().all(|e| e.1 <= 0) && list.iter().any(|e| e.1 > 0);
        match zoned && !local.is_empty() && !drained {
            true => local,
            false => list,
        }
    };
    let config = match zoned {
        true => "loadbalance=roundrobin&zone=here",
        false => "loadbalance=roundrobin",
    };
    for seed in seeds {
        let mut rng = Lcg(seed);
        let b = Balancer::new(config).unwrap();
        let m = b.method("m").unwrap();
        let mut model = DubboModel::default();
        let mut now_ms = 1_700_000_000_000i64;
        let mut set: Vec<(u64, i32)> = (1..=4).map(|id| (id, 1 + weight(&mut rng))).collect();
        b.update(
            &set.iter()
                .map(|&(id, w)| provider(id).weight(w))
                .collect::<Vec<_>>(),
        )
        .unwrap();
        for step in 0..600 {
            match rng.next(40) {
                0 => {
                    // Membership and weight churn: remove one, re-add old ids, change a weight.
                    let n = 1 + rng.next(6) as usize;
                    let mut ids: Vec<u64> = Vec::new();
                    while ids.len() < n {
                        let id = 1 + rng.next(8);
                        if !ids.contains(&id) {
                            ids.push(id);
                        }
                    }
                    set = ids
                        .iter()
                        .map(|&id| {
                            let old = set.iter().find(|e| e.0 == id).map(|e| e.1);
                            let w = match old {
                                Some(w) if rng.next(3) > 0 => w,
                                _ => weight(&mut rng),
                            };
                            (id, w)
                        })
                        .collect();
                    let invokers: Vec<Invoker> =
                        set.iter().map(|&(id, w)| provider(id).weight(w)).collect();
                    b.update(&invokers).unwrap();
                }
                1 => now_ms += 61_000,
                2 => now_ms += rng.next(30_000) as i64,
                // The caller's clock steps back (or NTP moves the wall clock): Dubbo stamps
                // each select's own time, so recycling counts from the latest select's.
                4 => now_ms -= rng.next(10_000) as i64,
                5 => {
                    // Two updates with no select between them: a weight changed and changed
                    // back, or a set of one (which Dubbo never walks). No select saw either, so
                    // no counter may restart.
                    let passing: Vec<Invoker> = match rng.next(2) {
                        0 => set
                            .iter()
                            .map(|&(id, w)| provider(id).weight(w + 1 + rng.next(3) as i32))
                            .collect(),
                        _ => vec![provider(set[0].0).weight(set[0].1 + 1)],
                    };
                    b.update(&passing).unwrap();
                    if rng.next(2) == 0 {
                        // A select over the set of one: Dubbo returns it untouched.
                        let only = passing[0].id;
                        if passing.len() == 1 {
                            assert_eq!(b.select(m, b"", now_ms * 1000).unwrap(), only);
                            b.report(m, only, 1, polylb::Outcome::Success, now_ms * 1000)
                                .unwrap();
                        }
                    }
                    let invokers: Vec<Invoker> =
                        set.iter().map(|&(id, w)| provider(id).weight(w)).collect();
                    b.update(&invokers).unwrap();
                }
                7 => {
                    // Every provider goes, or the binding closes, and the set comes back
                    // (with a weight changed, or after 60 s): Dubbo's entries stay, as no
                    // select runs on an empty set to recycle them.
                    b.update(&[]).unwrap();
                    if rng.next(2) == 0 {
                        b.update(&[]).unwrap();
                    }
                    assert!(b.select(m, b"", now_ms * 1000).is_err());
                    if rng.next(3) == 0 {
                        now_ms += 61_000;
                    }
                    if rng.next(3) == 0 {
                        let changed = rng.next(set.len() as u64) as usize;
                        set[changed].1 = weight(&mut rng);
                    }
                    let invokers: Vec<Invoker> =
                        set.iter().map(|&(id, w)| provider(id).weight(w)).collect();
                    b.update(&invokers).unwrap();
                }
                6 => {
                    // The registry pushes the same set again: picks go on as they were.
                    let invokers: Vec<Invoker> =
                        set.iter().map(|&(id, w)| provider(id).weight(w)).collect();
                    b.update(&invokers).unwrap();
                }
                3 if set.len() > 2 => {
                    // A failover retry: exclude one tried invoker.
                    let tried = set[rng.next(set.len() as u64) as usize].0;
                    let rest: Vec<(u64, i32)> =
                        set.iter().copied().filter(|e| e.0 != tried).collect();
                    let want = model.select(&narrow(rest), now_ms);
                    let got = b
                        .select_among(m, b"", &[], &[tried], now_ms * 1000)
                        .unwrap();
                    assert_eq!(got, want, "seed {seed} step {step} (excluding {tried})");
                    b.report(m, got, 1, polylb::Outcome::Success, now_ms * 1000)
                        .unwrap();
                }
                _ => {
                    for _ in 0..1 + rng.next(30) {
                        let want = model.select(&narrow(set.clone()), now_ms);
                        let got = b.select(m, b"", now_ms * 1000).unwrap();
                        assert_eq!(got, want, "seed {seed} step {step}, set {set:?}");
                        b.report(m, got, 1, polylb::Outcome::Success, now_ms * 1000)
                            .unwrap();
                    }
                }
            }
        }
    }
}

#[test]
fn long_sequence_at_n_1000_equals_model() {
    let mut rng = Lcg(7);
    let set: Vec<(u64, i32)> = (0..1000)
        .map(|id| (id, 50 + rng.next(3) as i32 * 25))
        .collect();
    let invokers: Vec<Invoker> = set
        .iter()
        .map(|&(id, w)| Invoker::new(id, format!("h{id}:1")).weight(w))
        .collect();
    let b = balancer("loadbalance=roundrobin", &invokers);
    let mut model = DubboModel::default();
    for k in 0..30_000 {
        assert_eq!(
            b.select(0, b"", 1000).unwrap(),
            model.select(&set, 1),
            "pick {k}"
        );
    }
}

/// Sets large enough that periods are simulated by the kinetic tournament (weights with gcd 25)
/// or not precomputed at all (weights 100 + 7i: a period of 3.6 M picks, served by the
/// tournament), through updates that change a weight, remove and add invokers.
#[test]
fn large_sets_through_churn_equal_model() {
    for ramp in [false, true] {
        let mut rng = Lcg(if ramp { 8 } else { 9 });
        let mut set: Vec<(u64, i32)> = (0..1000)
            .map(|id| {
                let w = if ramp {
                    100 + 7 * id as i32
                } else {
                    50 + rng.next(3) as i32 * 25
                };
                (id, w)
            })
            .collect();
        let b = Balancer::new("loadbalance=roundrobin").unwrap();
        let mut model = DubboModel::default();
        for round in 0..4 {
            match round {
                0 => {}
                1 => set[17].1 += 25,
                2 => {
                    set.remove(500);
                    set.remove(3);
                }
                _ => set.push((5000, 75)),
            }
            let invokers: Vec<Invoker> = set
                .iter()
                .map(|&(id, w)| Invoker::new(id, format!("h{id}:1")).weight(w))
                .collect();
            b.update(&invokers).unwrap();
            for k in 0..4_000 {
                assert_eq!(
                    b.select(0, b"", 1000).unwrap(),
                    model.select(&set, 1),
                    "ramp {ramp}, round {round}, pick {k}"
                );
            }
        }
    }
}

#[test]
fn weight_change_resets_only_that_invoker() {
    let mut model = DubboModel::default();
    let b = balancer(
        "loadbalance=roundrobin",
        &[
            provider(1).weight(5),
            provider(2).weight(1),
            provider(3).weight(1),
        ],
    );
    let mut set = vec![(1, 5), (2, 1), (3, 1)];
    for _ in 0..3 {
        assert_eq!(b.select(0, b"", 1000).unwrap(), model.select(&set, 1));
    }
    set[1].1 = 4;
    b.update(&[
        provider(1).weight(5),
        provider(2).weight(4),
        provider(3).weight(1),
    ])
    .unwrap();
    for _ in 0..50 {
        assert_eq!(b.select(0, b"", 1000).unwrap(), model.select(&set, 1));
    }
}

#[test]
fn full_cycle_counts_equal_weights_and_ties_go_to_the_earliest() {
    let weights = [3, 7, 0, 5, 5];
    let invokers: Vec<Invoker> = weights
        .iter()
        .enumerate()
        .map(|(i, &w)| provider(i as u64).weight(w))
        .collect();
    let b = balancer("loadbalance=roundrobin", &invokers);
    let mut counts = [0; 5];
    for _ in 0..20 {
        counts[b.select(0, b"", 1000).unwrap() as usize] += 1;
    }
    assert_eq!(counts, [3, 7, 0, 5, 5]);
    let b = balancer(
        "loadbalance=roundrobin",
        &[provider(1), provider(2), provider(3)],
    );
    let seq: Vec<u64> = (0..6).map(|_| b.select(0, b"", 1000).unwrap()).collect();
    assert_eq!(seq, [1, 2, 3, 1, 2, 3]);
}

#[test]
fn readded_within_60s_resumes_after_60s_restarts() {
    let base = 1_700_000_000_000i64;
    let full = [
        provider(1).weight(1),
        provider(2).weight(2),
        provider(3).weight(3),
    ];
    let run = |gap_ms: i64| {
        let b = balancer("loadbalance=roundrobin", &full);
        let mut model = DubboModel::default();
        let list = vec![(1, 1), (2, 2), (3, 3)];
        for _ in 0..3 {
            assert_eq!(
                b.select(0, b"", base * 1000).unwrap(),
                model.select(&list, base)
            );
        }
        b.update(&full[..2]).unwrap();
        let t = base + gap_ms;
        assert_eq!(
            b.select(0, b"", t * 1000).unwrap(),
            model.select(&list[..2], t)
        );
        b.update(&full).unwrap();
        let seq: Vec<u64> = (0..12)
            .map(|_| b.select(0, b"", t * 1000).unwrap())
            .collect();
        let want: Vec<u64> = (0..12).map(|_| model.select(&list, t)).collect();
        assert_eq!(seq, want, "gap {gap_ms}");
        seq
    };
    assert_ne!(
        run(30_000),
        run(61_000),
        "recycling after 60 s must change the sequence"
    );
}

#[test]
fn methods_keep_separate_positions() {
    let b = balancer(
        "loadbalance=roundrobin",
        &[provider(1), provider(2), provider(3)],
    );
    let a = b.method("a").unwrap();
    let c = b.method("c").unwrap();
    assert_eq!(b.select(a, b"", 1000).unwrap(), 1);
    assert_eq!(b.select(a, b"", 1000).unwrap(), 2);
    assert_eq!(
        b.select(c, b"", 1000).unwrap(),
        1,
        "method c starts its own rotation"
    );
    assert_eq!(b.select(a, b"", 1000).unwrap(), 3);
}

/// Methods past the first 128 have no lock-free slot for their period and pick under the
/// method's lock: the sequence is the same, through an update, as is the split of concurrent
/// picks.
#[test]
fn methods_past_the_live_slots_pick_the_same_sequence() {
    let first: Vec<(u64, i32)> = vec![(1, 3), (2, 5), (3, 1)];
    let second: Vec<(u64, i32)> = vec![(1, 3), (2, 2), (4, 4)];
    let set = |list: &[(u64, i32)]| -> Vec<Invoker> {
        list.iter().map(|&(id, w)| provider(id).weight(w)).collect()
    };
    let b = balancer("loadbalance=roundrobin", &set(&first));
    let methods: Vec<u32> = (0..140)
        .map(|i| b.method(&format!("m{i}")).unwrap())
        .collect();
    assert!(
        methods[3] < 128 && methods[135] >= 128,
        "one method on each side"
    );
    let mut models = [DubboModel::default(), DubboModel::default()];
    for step in 0..400 {
        let (list, now) = if step < 200 {
            (&first, 1000)
        } else {
            (&second, 2000)
        };
        if step == 200 {
            b.update(&set(&second)).unwrap();
        }
        for (model, &method) in models.iter_mut().zip([methods[3], methods[135]].iter()) {
            let want = model.select(list, now);
            assert_eq!(
                b.select(method, b"", now * 1000).unwrap(),
                want,
                "method {method}, pick {step}"
            );
        }
    }
    // Concurrent picks on the late method: exactly whole periods (3 + 2 + 4 = 9 per period).
    let b = std::sync::Arc::new(b);
    let late = methods[139];
    let counts: Vec<[usize; 5]> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..4)
            .map(|_| {
                let b = b.clone();
                scope.spawn(move || {
                    let mut c = [0usize; 5];
                    for _ in 0..9_000 {
                        c[b.select(late, b"", 3_000_000).unwrap() as usize] += 1;
                    }
                    c
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    let mut total = [0usize; 5];
    for c in counts {
        for (t, v) in total.iter_mut().zip(c) {
            *t += v;
        }
    }
    assert_eq!(total, [0, 12_000, 8_000, 0, 16_000]);
}

#[test]
fn concurrent_picks_are_exact() {
    let b = std::sync::Arc::new(balancer(
        "loadbalance=roundrobin",
        &[
            provider(1).weight(1),
            provider(2).weight(9),
            provider(3).weight(6),
        ],
    ));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let b = b.clone();
            std::thread::spawn(move || {
                let mut c = [0usize; 4];
                for _ in 0..16_000 {
                    c[b.select(0, b"", 1000).unwrap() as usize] += 1;
                }
                c
            })
        })
        .collect();
    let mut total = [0usize; 4];
    for t in threads {
        for (s, v) in total.iter_mut().zip(t.join().unwrap()) {
            *s += v;
        }
    }
    // 64000 picks = 4000 full periods of 16: exact, where Dubbo is only approximately so.
    assert_eq!(total[1..], [4000, 36000, 24000]);
}

/// Where no period fits, picks come from the kinetic tournament under the method's lock: four
/// threads together take exactly the first picks of Dubbo's sequence (each pick count equals the
/// model's over the same number of picks), whatever their interleaving.
#[test]
fn concurrent_picks_without_a_period_are_exact() {
    let set: Vec<(u64, i32)> = (0..300).map(|id| (id, 100_003 + 7 * id as i32)).collect();
    let invokers: Vec<Invoker> = set
        .iter()
        .map(|&(id, w)| Invoker::new(id, format!("h{id}:1")).weight(w))
        .collect();
    let b = std::sync::Arc::new(balancer("loadbalance=roundrobin", &invokers));
    let (threads, per_thread) = (4, 5_000);
    let workers: Vec<_> = (0..threads)
        .map(|_| {
            let b = b.clone();
            std::thread::spawn(move || {
                let mut counts = vec![0usize; 300];
                for _ in 0..per_thread {
                    counts[b.select(0, b"", 1000).unwrap() as usize] += 1;
                }
                counts
            })
        })
        .collect();
    let mut got = vec![0usize; 300];
    for w in workers {
        for (g, c) in got.iter_mut().zip(w.join().unwrap()) {
            *g += c;
        }
    }
    let mut model = DubboModel::default();
    let mut want = vec![0usize; 300];
    for _ in 0..threads * per_thread {
        want[model.select(&set, 1) as usize] += 1;
    }
    assert_eq!(got, want);
}

/// While invokers warm up, whole-set picks step the warming invokers' counters one by one and
/// the rest in the tournament: the sequence stays Dubbo's through warm-ups that end, restarts
/// (a new start time), membership changes, failover exclusions and a clock that jumps, also
/// backwards — on small sets and on sets large enough for the tournament's tree to matter.
#[test]
fn sequences_equal_dubbo_model_while_invokers_warm_up() {
    const WARM_UP_MS: i32 = 60_000;
    for seed in 1..=24u64 {
        let mut rng = Lcg(seed);
        let n = if seed % 4 == 0 {
            300
        } else {
            3 + rng.next(8) as usize
        };
        let b = Balancer::new("loadbalance=roundrobin").unwrap();
        let m = b.method("m").unwrap();
        let mut model = DubboModel::default();
        let mut now_ms = 1_700_000_000_000i64;
        // (id, configured weight, start time): a few restarted recently, some long ago.
        let start = |rng: &mut Lcg, now_ms: i64| match rng.next(3) {
            0 => now_ms - rng.next(WARM_UP_MS as u64) as i64,
            1 => 0,
            _ => now_ms - 10 * WARM_UP_MS as i64,
        };
        let mut set: Vec<(u64, i32, i64)> = (0..n as u64)
            .map(|id| (id, 50 + rng.next(3) as i32 * 25, start(&mut rng, now_ms)))
            .collect();
        let publish = |b: &Balancer, set: &[(u64, i32, i64)]| {
            let invokers: Vec<Invoker> = set
                .iter()
                .map(|&(id, w, t)| {
                    Invoker::new(id, format!("h{id}:1"))
                        .weight(w)
                        .start_time_ms(t)
                        .warmup_ms(WARM_UP_MS)
                })
                .collect();
            b.update(&invokers).unwrap();
        };
        publish(&b, &set);
        let effective = |set: &[(u64, i32, i64)], now_ms: i64| -> Vec<(u64, i32)> {
            set.iter()
                .map(|&(id, w, t)| (id, polylb::effective_weight(w, t, WARM_UP_MS, now_ms)))
                .collect()
        };
        let (mut warming_picks, mut settled_picks) = (0, 0);
        for step in 0..400 {
            match rng.next(30) {
                0 if rng.next(3) == 0 => {
                    // One invoker restarts (warm-up again), one leaves, one (re)joins.
                    let i = rng.next(set.len() as u64) as usize;
                    set[i].2 = now_ms - rng.next(1_000) as i64;
                    if set.len() > 3 {
                        set.remove(rng.next(set.len() as u64) as usize);
                    }
                    let id = rng.next(n as u64 + 4);
                    if !set.iter().any(|e| e.0 == id) {
                        set.push((id, 25 + rng.next(4) as i32 * 25, now_ms));
                    }
                    publish(&b, &set);
                }
                1 => now_ms += rng.next(200_000) as i64,
                2 => now_ms -= rng.next(5_000) as i64,
                3 => {
                    // A failover retry: exclude one tried invoker (Dubbo's walk over the rest).
                    let tried = set[rng.next(set.len() as u64) as usize].0;
                    let rest: Vec<(u64, i32)> = effective(&set, now_ms)
                        .into_iter()
                        .filter(|e| e.0 != tried)
                        .collect();
                    let want = model.select(&rest, now_ms);
                    let got = b
                        .select_among(m, b"", &[], &[tried], now_ms * 1000)
                        .unwrap();
                    assert_eq!(got, want, "seed {seed} step {step} (excluding {tried})");
                }
                _ => {
                    for _ in 0..1 + rng.next(40) {
                        now_ms += rng.next(3) as i64;
                        let list = effective(&set, now_ms);
                        let warming = set.iter().zip(&list).any(|(e, l)| e.2 > 0 && l.1 != e.1);
                        if warming {
                            warming_picks += 1;
                        } else {
                            settled_picks += 1;
                        }
                        let want = model.select(&list, now_ms);
                        let got = b.select(m, b"", now_ms * 1000).unwrap();
                        assert_eq!(got, want, "seed {seed} step {step} at {now_ms}");
                    }
                }
            }
        }
        assert!(
            warming_picks > 300 && settled_picks > 300,
            "seed {seed}: {warming_picks} picks during warm-up, {settled_picks} after"
        );
    }
}

/// A subset picked from again and again — a router's candidates, or the invokers a failover
/// excludes held for a while — is served from a tournament of its own, and the invokers outside
/// it age towards Dubbo's recycling as its walk leaves them: the sequence stays the model's
/// through bursts over one subset, whole-set picks, other subsets, updates and 61-s gaps.
#[test]
fn sequences_equal_dubbo_model_over_repeated_subsets() {
    for seed in 1..=30u64 {
        let mut rng = Lcg(100 + seed);
        let n = if seed % 5 == 0 {
            200
        } else {
            3 + rng.next(9) as usize
        };
        let b = Balancer::new("loadbalance=roundrobin").unwrap();
        let m = b.method("m").unwrap();
        let mut model = DubboModel::default();
        let mut now_ms = 1_700_000_000_000i64;
        // Few distinct weights (a tournament by weight class) or many (the kinetic tree).
        let weight = |rng: &mut Lcg| match seed % 3 {
            0 => 1 + rng.next(1000) as i32,
            _ => rng.next(5) as i32 * 25,
        };
        let mut set: Vec<(u64, i32)> = (0..n as u64).map(|id| (id, weight(&mut rng))).collect();
        let publish = |b: &Balancer, set: &[(u64, i32)]| {
            let invokers: Vec<Invoker> = set
                .iter()
                .map(|&(id, w)| Invoker::new(id, format!("h{id}:1")).weight(w))
                .collect();
            b.update(&invokers).unwrap();
        };
        publish(&b, &set);
        for step in 0..300 {
            match rng.next(12) {
                0 => {
                    // Churn: a weight changes, an invoker leaves, another (re)joins.
                    let i = rng.next(set.len() as u64) as usize;
                    set[i].1 = weight(&mut rng);
                    if set.len() > 3 {
                        set.remove(rng.next(set.len() as u64) as usize);
                    }
                    let id = rng.next(n as u64 + 3);
                    if !set.iter().any(|e| e.0 == id) {
                        set.push((id, weight(&mut rng)));
                    }
                    publish(&b, &set);
                }
                1 => now_ms += 61_000,
                2..=4 => {
                    for _ in 0..1 + rng.next(20) {
                        now_ms += rng.next(2) as i64;
                        let want = model.select(&set, now_ms);
                        let got = b.select(m, b"", now_ms * 1000).unwrap();
                        assert_eq!(got, want, "seed {seed} step {step}: whole set");
                    }
                }
                _ => {
                    // A burst over one subset: a few invokers excluded, or a list of candidates.
                    let excluded: Vec<u64> = set
                        .iter()
                        .map(|e| e.0)
                        .filter(|_| rng.next(4) == 0)
                        .collect();
                    let rest: Vec<(u64, i32)> = set
                        .iter()
                        .copied()
                        .filter(|e| !excluded.contains(&e.0))
                        .collect();
                    if rest.is_empty() {
                        continue;
                    }
                    let as_candidates = rng.next(2) == 0;
                    let candidates: Vec<u64> = rest.iter().map(|e| e.0).collect();
                    for _ in 0..1 + rng.next(40) {
                        now_ms += rng.next(2) as i64;
                        let want = model.select(&rest, now_ms);
                        let got = if as_candidates {
                            b.select_among(m, b"", &candidates, &[], now_ms * 1000)
                        } else {
                            b.select_among(m, b"", &[], &excluded, now_ms * 1000)
                        }
                        .unwrap();
                        assert_eq!(got, want, "seed {seed} step {step}: subset {rest:?}");
                    }
                }
            }
        }
    }
}

/// With zone preference every pick is over the local invokers: the model's walk over them.
#[test]
fn zone_preference_keeps_dubbos_sequence_over_the_local_invokers() {
    let set: Vec<(u64, i32, &str)> = (0..30u64)
        .map(|id| {
            (
                id,
                50 + (id % 4) as i32 * 25,
                ["a", "b", "c"][id as usize % 3],
            )
        })
        .collect();
    let invokers: Vec<Invoker> = set
        .iter()
        .map(|&(id, w, z)| Invoker::new(id, format!("h{id}:1")).weight(w).zone(z))
        .collect();
    let b = balancer("loadbalance=roundrobin&zone=b", &invokers);
    let local: Vec<(u64, i32)> = set
        .iter()
        .filter(|e| e.2 == "b")
        .map(|e| (e.0, e.1))
        .collect();
    let mut model = DubboModel::default();
    for k in 0..5_000 {
        let now_ms = 1_700_000_000_000 + k / 10;
        let want = model.select(&local, now_ms);
        assert_eq!(b.select(0, b"", now_ms * 1000).unwrap(), want, "pick {k}");
    }
}

#[test]
fn a_weight_change_no_select_saw_restarts_nothing() {
    // Dubbo resets a counter when a select finds the weight changed. Changed and changed back
    // between two selects, no select saw it: the [5, 1, 1] period goes on where it was.
    let set = |w2: i32| {
        [
            provider(1).weight(5),
            provider(2).weight(w2),
            provider(3).weight(1),
        ]
    };
    let b = balancer("loadbalance=roundrobin", &set(1));
    let t = 1_000_000;
    let mut got = vec![b.select(0, b"", t).unwrap()]; // counters (-2, 1, 1)
    b.update(&set(3)).unwrap();
    b.update(&set(1)).unwrap();
    // Nor does a set of one, which Dubbo returns without walking it.
    b.update(&[provider(1).weight(7)]).unwrap();
    assert_eq!(b.select(0, b"", t).unwrap(), 1);
    b.update(&set(1)).unwrap();
    got.extend((0..6).map(|_| b.select(0, b"", t).unwrap()));
    assert_eq!(got, [1, 1, 2, 1, 3, 1, 1]);
}

#[test]
fn recycling_counts_from_the_latest_select_even_when_the_clock_stepped_back() {
    let t0 = 1_700_000_000_000i64;
    let back = t0 - 5_000;
    let all = [provider(1), provider(2), provider(3)];
    let b = balancer("loadbalance=roundrobin", &all);
    assert_eq!(b.select(0, b"", t0 * 1000).unwrap(), 1); // (-2, 1, 1)
    assert_eq!(b.select(0, b"", back * 1000).unwrap(), 2); // (-1, -1, 2), stamped `back`
    b.update(&all[..2]).unwrap();
    // 60 s after the latest select's time (not after t0): invoker 3's counter is recycled...
    let t = back + 60_001;
    assert_eq!(b.select(0, b"", t * 1000).unwrap(), 1);
    b.update(&all).unwrap();
    // ... so it restarts at 0 when it comes back: (-1, 1, 1) → 2.
    assert_eq!(b.select(0, b"", t * 1000).unwrap(), 2);
}

#[test]
fn totals_beyond_32_bits_keep_the_smooth_sequence() {
    // Dubbo's int total overflows at 2 × (2^31 − 1) and its pick then sticks to the first
    // provider; in 64 bits the two alternate, as equal weights must.
    let b = balancer(
        "loadbalance=roundrobin",
        &[provider(1).weight(i32::MAX), provider(2).weight(i32::MAX)],
    );
    let got: Vec<u64> = (0..6)
        .map(|_| b.select(0, b"", 1_000_000).unwrap())
        .collect();
    assert_eq!(got, [1, 2, 1, 2, 1, 2]);
}

/// Picks under churn on a caller's timeline that starts at `offset_us` (warm-ups, subsets and
/// gaps beyond the 60 s recycling included), from a fixed seed.
fn churn_picks(offset_us: i64, seed: u64, warm: bool) -> Vec<u64> {
    let mut s = seed;
    let mut rnd = move |n: u64| {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (s >> 33) % n
    };
    let b = Balancer::new("loadbalance=roundrobin").unwrap();
    let mut t: i64 = 1;
    let mut out = Vec::new();
    for _ in 0..60 {
        let mut set = Vec::new();
        for id in 1..=6u64 {
            if rnd(3) == 0 {
                continue;
            }
            let mut inv = Invoker::new(id, format!("10.0.0.{id}:1")).weight(1 + rnd(4) as i32);
            if warm && rnd(4) == 0 {
                let started_ms = (offset_us + t) / 1000 - rnd(5000) as i64;
                inv = inv.start_time_ms(started_ms).warmup_ms(10_000);
            }
            set.push(inv);
        }
        if set.is_empty() {
            continue;
        }
        b.update(&set).unwrap();
        for _ in 0..rnd(20) {
            t += rnd(3) as i64 * rnd(40_000) as i64 * 1000 + rnd(999) as i64;
            let now = offset_us + t;
            let pick = if rnd(3) == 0 && set.len() > 1 {
                let c: Vec<u64> = set.iter().filter(|_| rnd(2) == 0).map(|i| i.id).collect();
                b.select_among(0, b"", &c, &[], now)
            } else {
                b.select(0, b"", now)
            };
            if let Ok(id) = pick {
                out.push(id);
            }
        }
    }
    out
}

#[test]
fn updates_do_not_depend_on_where_the_callers_timeline_sits() {
    // `update` takes no time: what it prepares for the next pick (the period, recycling,
    // whether warm-ups are over) follows the latest select's time, not the library's clock.
    // The same churn on a timeline before the library's clock (2001), after it (2065) and
    // starting at 1 µs (the first selects at ms 0, where the update falls back to the clock)
    // picks the same.
    const Y2001_US: i64 = 1_000_000_000_000_000;
    for seed in 0..100 {
        assert_eq!(
            churn_picks(Y2001_US, seed, true),
            churn_picks(3 * Y2001_US, seed, true),
            "seed {seed}"
        );
        assert_eq!(
            churn_picks(0, seed, false),
            churn_picks(Y2001_US, seed, false),
            "seed {seed}, from 1 µs"
        );
    }
}
