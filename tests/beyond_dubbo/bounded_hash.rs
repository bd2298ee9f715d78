//! boundedhash.

use crate::common::*;
use crate::helpers::*;
use polylb::{Invoker, Outcome};
use std::collections::BTreeMap;

#[test]
fn boundedhash_matches_consistenthash_under_light_load() {
    let invokers: Vec<Invoker> = (1..=10).map(provider).collect();
    let ch = lb("loadbalance=consistenthash", &invokers);
    let bh = lb("loadbalance=boundedhash", &invokers);
    for k in 0..5_000u32 {
        let key = format!("user-{k}");
        let a = ch.select(0, key.as_bytes(), NOW).unwrap();
        let b = bh.select(0, key.as_bytes(), NOW).unwrap();
        assert_eq!(a, b, "key {key}");
        ch.report(0, a, 10, Outcome::Success, NOW).unwrap();
        bh.report(0, b, 10, Outcome::Success, NOW).unwrap();
    }
}

/// Over a subset, under light load, too: the ring is Dubbo's ring of the candidates, where a
/// candidate owns the points it lost only to invokers that are not candidates (here every point
/// of id 1, whose address id 2 repeats: a provider registered twice, id 2 excluded by a
/// failover). On a small set the pick walks the ring; among 2 candidates of 400 (one point per
/// invoker) it hashes their addresses again.
#[test]
fn boundedhash_subsets_match_consistenthash_under_light_load() {
    for (n, nodes) in [(400u64, 4), (6, 160)] {
        let mut invokers: Vec<Invoker> = (1..=n).map(provider).collect();
        invokers[1].address = invokers[0].address.clone();
        let config = |s: &str| format!("loadbalance={s}&hash.nodes={nodes}");
        let ch = lb(&config("consistenthash"), &invokers);
        let bh = lb(&config("boundedhash"), &invokers);
        let mut took = 0;
        for k in 0..2_000u32 {
            let key = format!("user-{k}");
            let (cands, excl): (&[u64], &[u64]) = match k % 3 {
                0 => (&[], &[2]),
                1 => (&[1, 3], &[]),
                _ => (&[3, 1, 2], &[2]),
            };
            let a = ch
                .select_among(0, key.as_bytes(), cands, excl, NOW)
                .unwrap();
            let b = bh
                .select_among(0, key.as_bytes(), cands, excl, NOW)
                .unwrap();
            assert_eq!(
                a, b,
                "n = {n}, key {key}, candidates {cands:?} less {excl:?}"
            );
            took += (b == 1) as u32;
            ch.report(0, a, 10, Outcome::Success, NOW).unwrap();
            bh.report(0, b, 10, Outcome::Success, NOW).unwrap();
        }
        assert!(took > 0, "id 1 took no key");
    }
}

#[test]
fn boundedhash_spreads_a_hot_key_within_the_bound_and_returns_it() {
    let invokers: Vec<Invoker> = (1..=8).map(provider).collect();
    let b = lb("loadbalance=boundedhash&boundedhash.factor=1.25", &invokers);
    let owner = b.select(0, b"hot", NOW).unwrap();
    b.report(0, owner, 10, Outcome::Success, NOW).unwrap();
    let held: Vec<u64> = (0..400)
        .map(|_| b.select(0, b"hot", NOW).unwrap())
        .collect();
    let cap = (1.25f64 * 400.0 / 8.0).ceil() as i64 + 1;
    for id in 1..=8 {
        assert!(active(&b, id) <= cap, "id {id}: {} > {cap}", active(&b, id));
    }
    // The walk went on along the ring: most invokers took part.
    assert!((1..=8).filter(|&id| active(&b, id) > 0).count() >= 6);
    for id in held {
        b.report(0, id, 10, Outcome::Success, NOW).unwrap();
    }
    // Load gone: the key is home again.
    assert_eq!(b.select(0, b"hot", NOW).unwrap(), owner);
}

#[test]
fn boundedhash_never_loops() {
    // Zero weights, a subset, exclusions, invokers with the same address (the later one owns
    // every shared point, the earlier one none), counts that disagree (reports without selects).
    let invokers = [
        Invoker::new(1, "10.0.0.1:1").weight(0),
        Invoker::new(2, "10.0.0.1:1").weight(0),
        Invoker::new(3, "10.0.0.3:1").weight(0),
    ];
    let b = lb("loadbalance=boundedhash&boundedhash.factor=1.0", &invokers);
    // On a thread, so that an endless walk fails the test (after a minute) instead of hanging
    // it: the 4,000 picks take milliseconds.
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for k in 0..2000u32 {
            b.report(0, 1 + (k % 3) as u64, 10, Outcome::Success, NOW)
                .unwrap();
            let id = b
                .select_among(0, &k.to_le_bytes(), &[1, 2], &[2], NOW)
                .unwrap();
            assert_eq!(id, 1);
            b.select(0, &k.to_le_bytes(), NOW).unwrap();
        }
        done.send(()).unwrap();
    });
    finished
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("the picks ended (no endless walk, no panic)");
}

/// The bound counts the method's own calls in flight, and that count comes back to exactly 0
/// whatever the outcomes were: after 40 calls on method `a` ended in each outcome and with 100
/// calls of method `b` still in flight, 400 calls of one hot key on `a` leave its owner exactly
/// ⌈1.25 × 400 / 2⌉ = 250 of them (a count that drifted by d would make it ⌈1.25 × (400 + d) / 2⌉).
#[test]
fn boundedhash_bound_counts_the_methods_own_calls_after_every_outcome() {
    let b = lb("loadbalance=boundedhash", &[provider(1), provider(2)]);
    let (a, other) = (b.method("a").unwrap(), b.method("b").unwrap());
    for outcome in [
        Outcome::Success,
        Outcome::Failure,
        Outcome::Timeout,
        Outcome::Cancelled,
    ] {
        for id in hold(&b, a, 40, NOW) {
            b.report(a, id, 5_000, outcome, NOW).unwrap();
        }
    }
    for k in 0..100u32 {
        b.select(other, &k.to_le_bytes(), NOW).unwrap();
    }
    let calls: Vec<u64> = (0..400)
        .map(|_| b.select(a, b"hot", NOW).unwrap())
        .collect();
    let owner = calls[0];
    let held = calls.iter().filter(|&&id| id == owner).count() as i64;
    assert_eq!(held, 250);
    assert_eq!(method_stat(&b, NOW, owner, "a", "active"), 250);
}

/// A scale-out: one warm invoker and nine that joined 30 s into Dubbo's 10-min warm-up (weight
/// 5 of 100 each). A hot key's calls, all held: the warm invoker stays within its bound
/// ⌈factor × calls × 100 / 145⌉ — once it is full the key goes to a cold invoker with room,
/// even one that would not take it under light load (its share of its keys). The least loaded
/// by weight, taken before, was the full warm invoker: 15 calls of 15 against a bound of 13 at
/// the default factor, 20 of 20 against 14 at factor 1.
#[test]
fn boundedhash_keeps_the_bound_when_the_invokers_with_room_are_warming_up() {
    let now_ms = NOW / 1000;
    let set: Vec<Invoker> = (1..=10)
        .map(|i| match i {
            1 => provider(i),
            _ => provider(i)
                .start_time_ms(now_ms - 30_000)
                .warmup_ms(600_000),
        })
        .collect();
    let weight = |id: u64| if id == 1 { 100.0 } else { 5.0 };
    for factor in [1.0, 1.25] {
        for hot in 0..20u32 {
            let key = format!("hot-{hot}");
            let b = lb(
                &format!("loadbalance=boundedhash&boundedhash.factor={factor}"),
                &set,
            );
            let mut held: BTreeMap<u64, i64> = BTreeMap::new();
            for calls in 1..=200i64 {
                let id = b.select(0, key.as_bytes(), NOW).unwrap();
                let n = held.entry(id).or_insert(0);
                *n += 1;
                let bound = (factor * calls as f64 * weight(id) / 145.0 - 1e-9).ceil() as i64;
                assert!(
                    *n <= bound,
                    "factor {factor}, key {key}: invoker {id} holds {n} of {calls}, bound {bound}"
                );
            }
        }
    }
}
