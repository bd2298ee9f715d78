//! What the key-placing strategies (`maglev`, `rendezvous`) are tested alike for: keys under
//! warm-up, feedback and other methods, and picks while the set changes under them.

use crate::common::*;
use crate::helpers::*;
use polylb::{Balancer, Invoker, Outcome};
use std::collections::BTreeMap;

pub(crate) fn key(k: u64) -> [u8; 8] {
    k.to_le_bytes()
}

/// The invoker of each of `keys` keys (selected and reported at once).
pub(crate) fn owners(b: &Balancer, method: u32, keys: u64) -> Vec<u64> {
    (0..keys)
        .map(|k| {
            let id = b.select(method, &key(k), NOW).unwrap();
            b.report(method, id, 1000, Outcome::Success, NOW).unwrap();
            id
        })
        .collect()
}

/// Keys per invoker.
pub(crate) fn shares(owners: &[u64]) -> BTreeMap<u64, usize> {
    let mut c = BTreeMap::new();
    for &id in owners {
        *c.entry(id).or_insert(0) += 1;
    }
    c
}

/// Another consumer with the same addresses and weights in reverse order, under other ids and
/// another seed, places every key on the same address.
pub(crate) fn the_same_key_goes_to_the_same_address(config: &str, set: &[Invoker]) {
    let a = lb(config, set);
    let reversed: Vec<Invoker> = set
        .iter()
        .rev()
        .map(|i| Invoker::new(i.id + 100, i.address.clone()).weight(i.weight))
        .collect();
    let b = lb(&format!("{config}&seed=9"), &reversed);
    for k in 0..2000 {
        let x = a.select(0, &key(k), NOW).unwrap();
        let y = b.select(0, &key(k), NOW).unwrap();
        assert_eq!(y, x + 100, "{config}, key {k}");
    }
}

/// Excluding an invoker other than the key's own `owner` (a failover that tried another) leaves
/// the key on `owner`.
pub(crate) fn assert_excluding_another_keeps_the_key(
    b: &Balancer,
    k: u64,
    set: &[Invoker],
    owner: u64,
) {
    let other = set.iter().map(|i| i.id).find(|&id| id != owner).unwrap();
    let kept = b.select_among(0, &key(k), &[], &[other], NOW).unwrap();
    assert_eq!(kept, owner, "key {k}: excluding {other} moved it");
    b.report(0, kept, 1000, Outcome::Success, NOW).unwrap();
}

/// Two seconds after a one-second ejection (of `b`'s keys' owners in `before`), every key is
/// back where it was.
pub(crate) fn assert_keys_back_after_the_ejection(b: &Balancer, before: &[u64]) {
    let later = NOW + 2_000_000;
    let back: Vec<u64> = (0..before.len() as u64)
        .map(|k| b.select(0, &key(k), later).unwrap())
        .collect();
    assert_eq!(back, before);
}

/// Keys split 1:2:3:4 over weights 100 to 400 (each key a binomial draw: the placement's own
/// shares are exact or within a table slot of them), none on weight 0 beside them; and over
/// invokers all at weight 0, equally.
pub(crate) fn keys_spread_in_proportion_to_weight(config: &str) {
    let invokers = [
        provider(1).weight(100),
        provider(2).weight(200),
        provider(3).weight(300),
        provider(4).weight(400),
        provider(5).weight(0),
    ];
    let draws = 40_000;
    let c = shares(&owners(&lb(config, &invokers), 0, draws as u64));
    assert_eq!(
        c.get(&5),
        None,
        "weight 0 takes no key while others weigh more"
    );
    for (id, p) in [(1, 0.1), (2, 0.2), (3, 0.3), (4, 0.4)] {
        assert_binomial(c[&id], draws, p, 5.0, &format!("{config}, id {id}"));
    }
    let zero: Vec<Invoker> = (1..=4).map(|i| provider(i).weight(0)).collect();
    let c = shares(&owners(&lb(config, &zero), 0, draws as u64));
    for id in 1..=4 {
        assert_binomial(
            c[&id],
            draws,
            0.25,
            5.0,
            &format!("{config}, all zero, id {id}"),
        );
    }
}

/// Keys follow configured weights only: an invoker in warm-up, failures, timeouts and another
/// method's calls (all left in flight) move none, and every method places keys alike.
pub(crate) fn warm_up_failures_and_methods_never_move_keys(config: &str) {
    let now_ms = NOW / 1000;
    // Invoker 2 started a second ago with a 10-minute warm-up: its weight is about 0 by
    // Dubbo's formula.
    let warming = [
        provider(1),
        provider(2).start_time_ms(now_ms - 1000).warmup_ms(600_000),
        provider(3),
    ];
    let cold = [provider(1), provider(2), provider(3)];
    let w = lb(config, &warming);
    let c = lb(config, &cold);
    let keys = 3000;
    let expected = owners(&c, 0, keys);
    assert_eq!(owners(&w, 0, keys), expected, "warm-up moved keys");
    assert!(expected.contains(&2));
    // Failures and timeouts are outlier ejection's business, not the placement's.
    for _ in 0..50 {
        w.report(0, 2, 5_000_000, Outcome::Timeout, NOW).unwrap();
        w.report(0, 1, 1, Outcome::Failure, NOW).unwrap();
    }
    assert_eq!(owners(&w, 0, keys), expected, "failures moved keys");
    let m = w.method("other").unwrap();
    for _ in 0..1000 {
        w.select(m, &key(7), NOW).unwrap();
    }
    assert_eq!(
        owners(&w, 0, keys),
        expected,
        "another method's calls moved keys"
    );
    assert_eq!(owners(&w, m, keys), expected, "methods pick alike");
}

/// Three threads place keys while a fourth swaps two sets in and out: every pick is one of the
/// two sets' own (never a mix, never a stale placement), and nothing stays in flight.
pub(crate) fn concurrent_picks_agree_while_the_set_changes(config: &str) {
    let set: Vec<Invoker> = (1..=8).map(provider).collect();
    let b = lb(config, &set);
    let expected = owners(&b, 0, 500);
    let mut with = set.clone();
    with.push(provider(9));
    let with_nine = owners(&lb(config, &with), 0, 500);
    std::thread::scope(|s| {
        for _ in 0..3 {
            s.spawn(|| {
                for round in 0..20 {
                    for (k, &want) in expected.iter().enumerate() {
                        let id = b.select(0, &key(k as u64), NOW).unwrap();
                        assert!(
                            id == want || id == with_nine[k],
                            "round {round}, key {k}: {id}"
                        );
                        b.report(0, id, 100, Outcome::Success, NOW).unwrap();
                    }
                }
            });
        }
        s.spawn(|| {
            for _ in 0..200 {
                b.update(&with).unwrap();
                b.update(&set).unwrap();
            }
        });
    });
    assert_eq!(owners(&b, 0, 500), expected);
    let stats: serde_json::Value = serde_json::from_str(&b.stats_json(NOW)).unwrap();
    for row in stats["invokers"].as_array().unwrap() {
        assert_eq!(row["active"], 0, "{row}");
    }
}
