//! `maglev`: weighted shares of the keys, churn that moves few keys, picks among candidates,
//! concurrency, per-method isolation, warm-up and feedback that never move keys.

use crate::common::*;
use crate::helpers::*;
use polylb::{Balancer, Invoker, Outcome, Status};
use std::collections::BTreeMap;

fn key(k: u64) -> [u8; 8] {
    k.to_le_bytes()
}

/// The invoker of each of `keys` keys (selected and reported at once).
fn owners(b: &Balancer, method: u32, keys: u64) -> Vec<u64> {
    (0..keys)
        .map(|k| {
            let id = b.select(method, &key(k), NOW).unwrap();
            b.report(method, id, 1000, Outcome::Success, NOW).unwrap();
            id
        })
        .collect()
}

fn shares(owners: &[u64]) -> BTreeMap<u64, usize> {
    let mut c = BTreeMap::new();
    for &id in owners {
        *c.entry(id).or_insert(0) += 1;
    }
    c
}

#[test]
fn keys_spread_in_proportion_to_weight() {
    let invokers = [
        provider(1).weight(100),
        provider(2).weight(200),
        provider(3).weight(300),
        provider(4).weight(400),
        provider(5).weight(0),
    ];
    let b = lb("loadbalance=maglev", &invokers);
    let draws = 40_000;
    let c = shares(&owners(&b, 0, draws as u64));
    assert_eq!(
        c.get(&5),
        None,
        "weight 0 takes no key while others weigh more"
    );
    for (id, p) in [(1, 0.1), (2, 0.2), (3, 0.3), (4, 0.4)] {
        // The table's shares are within 1/65537 of the weights'; the keys a binomial draw.
        assert_binomial(c[&id], draws, p, 5.0, &format!("maglev id {id}"));
    }
    // Every invoker at weight 0: all share the keys equally.
    let zero: Vec<Invoker> = (1..=4).map(|i| provider(i).weight(0)).collect();
    let b = lb("loadbalance=maglev", &zero);
    let c = shares(&owners(&b, 0, draws as u64));
    for id in 1..=4 {
        assert_binomial(c[&id], draws, 0.25, 5.0, &format!("all zero, id {id}"));
    }
}

#[test]
fn the_same_key_goes_to_the_same_invoker_whatever_the_set_order_or_ids() {
    let set: Vec<Invoker> = (1..=8).map(provider).collect();
    let a = lb("loadbalance=maglev", &set);
    // Another consumer: the same addresses in reverse order, under other ids.
    let reversed: Vec<Invoker> = set
        .iter()
        .rev()
        .map(|i| Invoker::new(i.id + 100, i.address.clone()))
        .collect();
    let b = lb("loadbalance=maglev&seed=9", &reversed);
    for k in 0..2000 {
        let x = a.select(0, &key(k), NOW).unwrap();
        let y = b.select(0, &key(k), NOW).unwrap();
        assert_eq!(y, x + 100, "key {k}");
    }
}

#[test]
fn churn_moves_the_leaving_invokers_keys_and_few_others_and_no_state_stays() {
    let set: Vec<Invoker> = (1..=10).map(provider).collect();
    let b = lb("loadbalance=maglev", &set);
    let keys = 20_000;
    let before = owners(&b, 0, keys);
    // Invoker 4 leaves.
    let without: Vec<Invoker> = set.iter().filter(|i| i.id != 4).cloned().collect();
    b.update(&without).unwrap();
    let after = owners(&b, 0, keys);
    let mut others_moved = 0;
    for (k, (&was, &now)) in before.iter().zip(&after).enumerate() {
        assert_ne!(now, 4, "key {k} still on the invoker that left");
        if was != 4 && was != now {
            others_moved += 1;
        }
    }
    // Maglev's disruption beyond the leaving invoker's tenth: a few per cent of the keys.
    assert!(
        (others_moved as f64) < 0.03 * keys as f64,
        "{others_moved} other keys moved"
    );
    let moved: BTreeMap<u64, usize> = shares(
        &before
            .iter()
            .zip(&after)
            .filter(|(&was, _)| was == 4)
            .map(|(_, &now)| now)
            .collect::<Vec<_>>(),
    );
    assert!(
        moved.len() >= 5,
        "its keys spread over the others: {moved:?}"
    );
    // It comes back: every key returns to where it was (the table is a function of the set),
    // and its counters start again from 0.
    b.update(&set).unwrap();
    assert_eq!(stat(&b, NOW, 4, "selected"), 0);
    assert_eq!(owners(&b, 0, keys), before);
}

#[test]
fn a_failover_moves_only_the_failed_invokers_keys() {
    let set: Vec<Invoker> = (1..=6).map(provider).collect();
    let b = lb("loadbalance=maglev", &set);
    for k in 0..3000 {
        let first = b.select(0, &key(k), NOW).unwrap();
        b.report(0, first, 1000, Outcome::Failure, NOW).unwrap();
        let retry = b.select_among(0, &key(k), &[], &[first], NOW).unwrap();
        assert_ne!(retry, first);
        b.report(0, retry, 1000, Outcome::Success, NOW).unwrap();
        // The retry equals the pick of a set without the failed invoker whenever that set
        // leaves the key's owner in place: here, compared with a second failover.
        let again = b.select_among(0, &key(k), &[], &[first], NOW).unwrap();
        assert_eq!(
            again, retry,
            "key {k}: a failover's pick is a function of the key"
        );
        b.report(0, again, 1000, Outcome::Success, NOW).unwrap();
        // Excluding another invoker leaves the key where it was.
        let other = set.iter().map(|i| i.id).find(|&id| id != first).unwrap();
        let kept = b.select_among(0, &key(k), &[], &[other], NOW).unwrap();
        assert_eq!(kept, first, "key {k}: excluding {other} moved it");
        b.report(0, kept, 1000, Outcome::Success, NOW).unwrap();
    }
}

#[test]
fn warm_up_failures_and_methods_never_move_keys() {
    let now_ms = NOW / 1000;
    // Invoker 2 started a second ago with a 10-minute warm-up: its weight is about 0 by
    // Dubbo's formula, but the table follows configured weights only.
    let warming = [
        provider(1),
        provider(2).start_time_ms(now_ms - 1000).warmup_ms(600_000),
        provider(3),
    ];
    let cold = [provider(1), provider(2), provider(3)];
    let w = lb("loadbalance=maglev", &warming);
    let c = lb("loadbalance=maglev", &cold);
    let keys = 3000;
    let expected = owners(&c, 0, keys);
    assert_eq!(owners(&w, 0, keys), expected, "warm-up moved keys");
    assert!(expected.contains(&2));
    // Failures, timeouts and provider metrics are not maglev's business (outlier ejection is).
    for _ in 0..50 {
        w.report(0, 2, 5_000_000, Outcome::Timeout, NOW).unwrap();
        w.report(0, 1, 1, Outcome::Failure, NOW).unwrap();
    }
    assert_eq!(owners(&w, 0, keys), expected, "failures moved keys");
    // Per-method isolation: a method's calls (many, all left in flight on one invoker) change
    // no other method's picks, and each method picks alike.
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

#[test]
fn outlier_ejection_moves_the_ejected_invokers_keys_until_it_returns() {
    let set: Vec<Invoker> = (1..=5).map(provider).collect();
    let b = lb(
        "loadbalance=maglev&outlier.consecutiveFailures=1&outlier.baseEjectionMs=1000\
         &outlier.maxEjectionPercent=20",
        &set,
    );
    let keys = 5000;
    let before = owners(&b, 0, keys);
    b.report(0, 3, 10, Outcome::Failure, NOW).unwrap();
    let during = owners(&b, 0, keys);
    for (k, (&was, &now)) in before.iter().zip(&during).enumerate() {
        if was == 3 {
            assert_ne!(now, 3, "key {k} on the ejected invoker");
        } else {
            assert_eq!(now, was, "key {k} moved though its invoker was not ejected");
        }
    }
    // Two seconds later the ejection is over: the keys are back.
    let later = NOW + 2_000_000;
    let back: Vec<u64> = (0..keys)
        .map(|k| b.select(0, &key(k), later).unwrap())
        .collect();
    assert_eq!(back, before);
}

#[test]
fn concurrent_picks_agree_while_the_set_changes() {
    let set: Vec<Invoker> = (1..=8).map(provider).collect();
    let b = lb("loadbalance=maglev", &set);
    let expected = owners(&b, 0, 500);
    let mut with = set.clone();
    with.push(provider(9));
    let with_nine = owners(&lb("loadbalance=maglev", &with), 0, 500);
    std::thread::scope(|s| {
        for _ in 0..3 {
            s.spawn(|| {
                for round in 0..20 {
                    for (k, &want) in expected.iter().enumerate() {
                        let id = b.select(0, &key(k as u64), NOW).unwrap();
                        // The set is one of the two an update swaps in: the pick is that
                        // set's, never a mix or a stale table's.
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

#[test]
fn table_size_is_checked() {
    for (text, why) in [
        ("loadbalance=maglev&maglev.tableSize=65535", "not a prime"),
        (
            "loadbalance=maglev&maglev.tableSize=5",
            "outside 7..=16777213",
        ),
        (
            "loadbalance=maglev&maglev.tableSize=16777259",
            "outside 7..=16777213",
        ),
        (
            "loadbalance=consistenthash&maglev.tableSize=101",
            "maglev only",
        ),
        ("loadbalance=maglev&slowstart.windowMs=1000", "slowstart"),
    ] {
        let Err(e) = Balancer::new(text) else {
            panic!("{text} accepted")
        };
        assert_eq!(e.status, Status::InvalidConfig, "{text}");
        assert!(e.message.contains(why), "{text}: {}", e.message);
    }
    // A set larger than the table is refused, and the previous set stays.
    let b = lb(
        "loadbalance=maglev&maglev.tableSize=7",
        &[provider(1), provider(2)],
    );
    let eight: Vec<Invoker> = (1..=8).map(provider).collect();
    let e = b.update(&eight).unwrap_err();
    assert_eq!(e.status, Status::LimitExceeded);
    assert!(e.message.contains("maglev.tableSize"), "{}", e.message);
    let c = shares(&owners(&b, 0, 200));
    assert_eq!(c.keys().copied().collect::<Vec<_>>(), vec![1, 2]);
    // hash.nodes sizes Dubbo's ring, not maglev's table: 70,000 invokers × 65536 nodes would
    // be past a ring's limit, and are no limit here.
    let many: Vec<Invoker> = (1..=70_000).map(provider).collect();
    lb(
        "loadbalance=maglev&hash.nodes=65536&maglev.tableSize=1000003",
        &many,
    );
    // Empty addresses are refused, as for the other hashing strategies.
    let e = b
        .update(&[provider(1), Invoker::new(2, String::new())])
        .unwrap_err();
    assert_eq!(e.status, Status::InvalidArgument);
}
