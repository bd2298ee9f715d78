//! select and report (also through `Balancer::call`) never touch the heap in steady state, for
//! every strategy, through the Rust API and the C ABI (a counting global allocator proves it).
//! This file holds one test so no other thread allocates meanwhile.

use polylb::{Balancer, Invoker, Outcome, StrategyKind};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

struct Counting;
static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Relaxed);
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Relaxed);
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn round(b: &Balancer, method: u32, i: u64, subset: bool, now_us: i64) {
    let key = i.to_le_bytes();
    let id = if subset {
        b.select_among(method, &key, &[2, 3, 5, 7, 11], &[3], now_us)
            .unwrap()
    } else {
        b.select(method, &key, now_us).unwrap()
    };
    let outcome = if i % 10 == 0 {
        Outcome::Failure
    } else {
        Outcome::Success
    };
    b.report(method, id, 1000 + (i % 50) as i64 * 100, outcome, now_us)
        .unwrap();
    b.report_provider_metrics(method, id, now_us / 1000, 1.5, 2000, now_us)
        .unwrap();
    let load = polylb::LoadReport {
        qps: 100.0 + (i % 7) as f64,
        eps: (i % 3) as f64,
        utilization: 0.5,
    };
    b.report_load(id, load, now_us).unwrap();
    if i % 97 == 0 {
        // A reconnect (orca's run of reports restarts) now and then.
        b.report_reconnect(id, now_us).unwrap();
    }
}

#[test]
fn no_heap_allocation_in_select_or_report() {
    let now = 1_700_000_000_000_000i64;
    for kind in StrategyKind::ALL {
        // Two invokers still warming up exercise the time-dependent weight paths as well.
        let invokers: Vec<Invoker> = (1..=12)
            .map(|id| {
                let inv = Invoker::new(id, format!("10.0.0.{id}:20880")).weight(10 * id as i32);
                if id <= 2 {
                    inv.start_time_ms(now / 1000 - 30_000)
                } else {
                    inv
                }
            })
            .collect();
        // orca recomputes its weights every millisecond here (a pick in 1,000 does).
        let options = if *kind == StrategyKind::Orca {
            "&orca.updateMs=1&orca.blackoutMs=0"
        } else {
            ""
        };
        let b = Balancer::new(&format!("loadbalance={}&seed=1{options}", kind.name())).unwrap();
        b.update(&invokers).unwrap();
        let m = b.method("sayHello").unwrap();
        // Warm up: per-(invoker, method) counters, scratch buffers, round robin's period.
        for subset in [false, true] {
            for i in 0..20_000 {
                round(&b, m, i, subset, now + i as i64);
            }
        }
        let before = ALLOCATIONS.load(Relaxed);
        for i in 0..20_000 {
            round(&b, m, i, false, now + 40_000 + i as i64);
        }
        // Then failover picks (a subset) and whole-set picks in turn: round robin's walk over
        // the subset hands its warm-up tournament's counters back, and the next whole-set pick
        // rebuilds it in the memory it kept. (Without invokers in warm-up, its subset picks
        // leave the precomputed period instead, whose rebuild allocates, amortised over a
        // period.)
        for i in 0..20_000 {
            round(&b, m, i, i % 4 == 0, now + 80_000 + i as i64);
        }
        let allocated = ALLOCATIONS.load(Relaxed) - before;
        assert_eq!(
            allocated,
            0,
            "{}: {allocated} allocations in steady state",
            kind.name()
        );
        // Balancer::call at the library's clock: finished, finished by a result, and dropped
        // unfinished; over the whole set and a failover's candidates.
        let timed_out: Result<(), std::io::Error> = Err(std::io::ErrorKind::TimedOut.into());
        let calls = |from: u64| {
            for i in from..from + 20_000 {
                let key = i.to_le_bytes();
                let call = if i % 3 == 0 {
                    b.call_among(m, &key, &[2, 3, 5, 7, 11], &[3]).unwrap()
                } else {
                    b.call(m, &key).unwrap()
                };
                match i % 5 {
                    0 => {}
                    1 => call.finish_with_error(&timed_out).unwrap(),
                    _ => call.finish(Outcome::Success).unwrap(),
                }
            }
        };
        calls(0);
        let before = ALLOCATIONS.load(Relaxed);
        calls(20_000);
        let allocated = ALLOCATIONS.load(Relaxed) - before;
        assert_eq!(
            allocated,
            0,
            "{}: {allocated} allocations in Balancer::call",
            kind.name()
        );
    }
    no_heap_allocation_in_round_robin_without_a_period();
    no_heap_allocation_over_the_local_zone();
    no_heap_allocation_in_round_robin_past_its_share_of_live_periods();
    no_heap_allocation_hashing_few_candidates();
    no_heap_allocation_while_invokers_are_ejected();
    no_heap_allocation_through_the_c_abi();
}

/// The hot exports of the C ABI, every strategy: the calls a binding makes per RPC (both select
/// and report forms, a failover's `plb_select_among`, the feedback calls) allocate nothing in
/// steady state either.
fn no_heap_allocation_through_the_c_abi() {
    use polylb::ffi::*;
    use std::ptr::{null, null_mut};
    // The 32-bit forms read the library's clock: the caller's time is that clock too, so that
    // the warming invokers' weights are what they are (a clock years away would change them at
    // every call, and roundrobin's period with them).
    let now = polylb::wall_clock_us();
    let addresses: Vec<String> = (1..=12).map(|id| format!("10.0.0.{id}:20880")).collect();
    let invokers: Vec<plb_invoker> = (1..=12u64)
        .map(|id| plb_invoker {
            id,
            address: addresses[id as usize - 1].as_ptr(),
            address_len: addresses[id as usize - 1].len(),
            weight: 10 * id as i32,
            start_time_ms: if id <= 2 { now / 1000 - 30_000 } else { 0 },
            warmup_ms: -1,
            zone: null(),
            zone_len: 0,
        })
        .collect();
    let candidates = [2u64, 3, 5, 7, 11];
    for kind in StrategyKind::ALL {
        let options = if *kind == StrategyKind::Orca {
            "&orca.blackoutMs=0"
        } else {
            ""
        };
        let config = format!("loadbalance={}&seed=1{options}", kind.name());
        let mut b: *mut plb_balancer = null_mut();
        let calls = |from: u64, b: *const plb_balancer| unsafe {
            for i in from..from + 20_000 {
                let key = i.to_le_bytes();
                let t = polylb::wall_clock_us();
                let id = match i % 3 {
                    0 => plb_select_among(
                        b,
                        0,
                        key.as_ptr(),
                        key.len(),
                        candidates.as_ptr(),
                        candidates.len(),
                        candidates[1..].as_ptr(),
                        1,
                        t,
                    ),
                    1 => plb_select32(b, 0, key.as_ptr(), key.len() as u32),
                    _ => plb_select(b, 0, key.as_ptr(), key.len(), t),
                };
                assert!(id > 0, "{}: select gave {id}", kind.name());
                let id = id as u64;
                let status = match i % 4 {
                    0 => plb_report32(b, 0, 0, id as u32, 1_500, PLB_OUTCOME_SUCCESS),
                    1 => plb_report(b, 0, id, 25_000, PLB_OUTCOME_FAILURE, t),
                    2 => plb_report(b, 0, id, 900, PLB_OUTCOME_SUCCESS, t),
                    _ => plb_report(b, 0, id, 0, PLB_OUTCOME_CANCELLED, t),
                };
                assert_eq!(status, PLB_OK);
                let feedback = match i % 10 {
                    0 => plb_report_provider_metrics(b, 0, id, t / 1000, 0.7, 2_000, t),
                    1 => plb_report_load(b, id, 120.0, 1.0, 0.6, t),
                    2 if i % 97 == 2 => plb_report_reconnect(b, id, t),
                    _ => PLB_OK,
                };
                assert_eq!(feedback, PLB_OK);
            }
        };
        unsafe {
            let status = plb_balancer_new(
                config.as_ptr(),
                config.len(),
                &mut b,
                null_mut(),
                0,
                null_mut(),
            );
            assert_eq!(status, PLB_OK, "{config}");
            let status = plb_balancer_update(
                b,
                invokers.as_ptr(),
                invokers.len(),
                null_mut(),
                0,
                null_mut(),
            );
            assert_eq!(status, PLB_OK);
            calls(0, b);
            let before = ALLOCATIONS.load(Relaxed);
            calls(20_000, b);
            let allocated = ALLOCATIONS.load(Relaxed) - before;
            plb_balancer_free(b);
            assert_eq!(
                allocated,
                0,
                "{}: {allocated} allocations through the C ABI",
                kind.name()
            );
        }
    }
}

/// The ring strategies among few candidates of many invokers hash the candidates' addresses
/// again instead of walking the ring (one digest each with hash.nodes=4, so 400 invokers are
/// enough for two candidates): that must not allocate either.
fn no_heap_allocation_hashing_few_candidates() {
    let now = 1_700_000_000_000_000i64;
    let invokers: Vec<Invoker> = (1..=400)
        .map(|id| Invoker::new(id, format!("10.0.{}.{}:20880", id / 250, id % 250)))
        .collect();
    for kind in ["consistenthash", "boundedhash"] {
        let b = Balancer::new(&format!("loadbalance={kind}&hash.nodes=4")).unwrap();
        b.update(&invokers).unwrap();
        let m = b.method("sayHello").unwrap();
        let rounds = |from: u64| {
            for i in from..from + 5_000 {
                let id = b
                    .select_among(m, &i.to_le_bytes(), &[17, 301], &[], now)
                    .unwrap();
                b.report(m, id, 1000, Outcome::Success, now).unwrap();
            }
        };
        rounds(0);
        let before = ALLOCATIONS.load(Relaxed);
        rounds(5_000);
        let allocated = ALLOCATIONS.load(Relaxed) - before;
        assert_eq!(
            allocated, 0,
            "{kind}: {allocated} allocations hashing candidates"
        );
    }
}

/// roundrobin after many failovers on a set that stays: each one ends the method's period, and
/// the next is published for lock-free picks until the snapshot's share of them is used up;
/// picks then come from the period behind the method's lock, which must not allocate either
/// (a live period was built, refused and dropped on every such pick).
fn no_heap_allocation_in_round_robin_past_its_share_of_live_periods() {
    let now = 1_700_000_000_000_000i64;
    let invokers: Vec<Invoker> = (1..=3)
        .map(|id| Invoker::new(id, format!("10.0.0.{id}:20880")).weight(id as i32))
        .collect();
    let b = Balancer::new("loadbalance=roundrobin").unwrap();
    b.update(&invokers).unwrap();
    let m = b.method("sayHello").unwrap();
    // A period of 6 picks, recorded anew after each failover: 1,000 of them use up the share
    // (512 live periods per snapshot).
    for i in 0..1_000u64 {
        for j in 0..30 {
            round(&b, m, i * 31 + j, false, now);
        }
        let id = b.select(m, b"", now).unwrap();
        let retry = b.select_among(m, b"", &[], &[id], now).unwrap();
        b.report(m, retry, 1000, Outcome::Success, now).unwrap();
    }
    // The period recorded after the last failover (allocated once, as after every failover).
    for i in 0..100 {
        round(&b, m, i, false, now);
    }
    let before = ALLOCATIONS.load(Relaxed);
    for i in 0..20_000 {
        round(&b, m, i, false, now);
    }
    let allocated = ALLOCATIONS.load(Relaxed) - before;
    assert_eq!(
        allocated, 0,
        "{allocated} allocations past the live periods' share"
    );
}

/// roundrobin over a set whose period is too long to precompute (weights with gcd 1 and a sum
/// of 3.6 M): picks come from the kinetic tournament, which must not allocate either. Called by
/// the file's one test (the harness's other threads would allocate during a second one).
fn no_heap_allocation_in_round_robin_without_a_period() {
    let now = 1_700_000_000_000_000i64;
    let invokers: Vec<Invoker> = (0..1000)
        .map(|id| {
            Invoker::new(id, format!("10.0.{}.{}:20880", id / 250, id % 250))
                .weight(100 + 7 * id as i32)
        })
        .collect();
    let b = Balancer::new("loadbalance=roundrobin").unwrap();
    b.update(&invokers).unwrap();
    let m = b.method("sayHello").unwrap();
    for i in 0..2_000 {
        round(&b, m, i, false, now + i as i64);
    }
    let before = ALLOCATIONS.load(Relaxed);
    for i in 0..20_000 {
        round(&b, m, i, false, now + 10_000 + i as i64);
    }
    let allocated = ALLOCATIONS.load(Relaxed) - before;
    assert_eq!(allocated, 0, "{allocated} allocations in steady state");
}

/// Every strategy with zone preference (and with a subset): whole-set picks narrow to the set's local zone
/// (prepared on update; roundrobin serves it as it serves a whole set), which must not
/// allocate, nor must the failover picks over other subsets in between (roundrobin: a walk,
/// then a tournament rebuilt in the memory it kept; a period rebuilt after an interruption
/// allocates, amortised over a period, so this set has none).
fn no_heap_allocation_over_the_local_zone() {
    let now = 1_700_000_000_000_000i64;
    // Weights whose period over the local zone (Σw ≈ 205,000 picks of 100 invokers) is too
    // long to precompute.
    let invokers: Vec<Invoker> = (0..300)
        .map(|id| {
            Invoker::new(id, format!("10.0.{}.{}:20880", id / 250, id % 250))
                .weight(1000 + 7 * id as i32)
                .zone(["a", "b", "c"][id as usize % 3])
        })
        .collect();
    // And a subset of the zone, which takes the zone's place, for the strategies that take one.
    let configs = StrategyKind::ALL.iter().flat_map(|kind| {
        let zoned = format!("loadbalance={}&zone=b", kind.name());
        // random and roundrobin take subsets dealt by index only.
        let subset = if kind.takes_subset() {
            Some(format!("{zoned}&subset.size=40&subset.key=consumer-1"))
        } else {
            (!kind.hashes_keys()).then(|| format!("{zoned}&subset.size=40&subset.index=3"))
        };
        std::iter::once(zoned).chain(subset)
    });
    for config in configs {
        let b = Balancer::new(&config).unwrap();
        b.update(&invokers).unwrap();
        let m = b.method("sayHello").unwrap();
        let round = |i: u64, now_us: i64| {
            let key = i.to_le_bytes();
            let id = if i % 16 == 0 {
                b.select_among(m, &key, &[], &[1 + 3 * (i % 100)], now_us)
            } else {
                b.select(m, &key, now_us)
            }
            .unwrap();
            b.report(m, id, 1000, Outcome::Success, now_us).unwrap();
        };
        for i in 0..2_000 {
            round(i, now + i as i64);
        }
        let before = ALLOCATIONS.load(Relaxed);
        for i in 0..20_000 {
            round(i, now + 10_000 + i as i64);
        }
        let allocated = ALLOCATIONS.load(Relaxed) - before;
        assert_eq!(
            allocated, 0,
            "{config}: {allocated} allocations in steady state"
        );
    }
}

/// Outlier ejection: while an invoker is ejected each thread picks from its own view of the
/// filtered set, rebuilt when an ejection starts or ends. With more balancers on one thread than
/// it keeps views of (two then take turns in one, rebuilding it on every pick), and with
/// ejections starting and ending every few milliseconds, those rebuilds must not allocate, in
/// every strategy, with and without a zone preference. (Except `roundrobin` while ejections
/// come and go: each change of the set it serves ends its period, and the next one is built as
/// after an update, allocating once per change.)
fn no_heap_allocation_while_invokers_are_ejected() {
    let now = 1_700_000_000_000_000i64;
    let invokers: Vec<Invoker> = (1..=8)
        .map(|id| {
            Invoker::new(id, format!("10.0.0.{id}:20880"))
                .weight(100 + 50 * (id as i32 % 3))
                .zone(["a", "b"][id as usize % 2])
        })
        .collect();
    // Invoker 4 fails every call: three in a row eject it (for 30 s by default, or for 5 ms).
    let outcome = |id: u64| {
        if id == 4 {
            Outcome::Failure
        } else {
            Outcome::Success
        }
    };
    let flapping = "&outlier.baseEjectionMs=5&outlier.maxEjectionMs=5";
    for kind in StrategyKind::ALL {
        for (zone, timing) in [
            ("", ""),
            ("&zone=a", ""),
            ("", flapping),
            ("&zone=a", flapping),
        ] {
            if *kind == StrategyKind::RoundRobin && !timing.is_empty() {
                continue;
            }
            let config = format!(
                "loadbalance={}{zone}&outlier.consecutiveFailures=3\
                 &outlier.maxEjectionPercent=20{timing}",
                kind.name()
            );
            // More balancers than a thread keeps views of (16).
            let balancers: Vec<Balancer> = (0..20)
                .map(|_| {
                    let b = Balancer::new(&config).unwrap();
                    b.update(&invokers).unwrap();
                    b
                })
                .collect();
            let mut picks_of_4 = 0u64;
            let mut rounds = |from: u64, count: u64| {
                for i in from..from + count {
                    let now_us = now + 100 * i as i64;
                    for b in &balancers {
                        let id = b.select(0, &i.to_le_bytes(), now_us).unwrap();
                        picks_of_4 += (id == 4) as u64;
                        b.report(0, id, 1000, outcome(id), now_us).unwrap();
                    }
                }
            };
            rounds(0, 2_000);
            let before = ALLOCATIONS.load(Relaxed);
            rounds(2_000, 3_000);
            let allocated = ALLOCATIONS.load(Relaxed) - before;
            assert_eq!(
                allocated, 0,
                "{config}: {allocated} allocations with invokers ejected"
            );
            // The ejections happened: invoker 4 (an eighth of the set by count, less by
            // weight) got well under its share, though picked again after each 5 ms ejection.
            let picks = 5_000 * 20;
            assert!(
                picks_of_4 < picks / 10,
                "{config}: invoker 4 picked {picks_of_4} times in {picks}"
            );
        }
    }
}
