//! `maglev`: weighted shares of the keys, churn that moves few keys, picks among candidates,
//! concurrency, per-method isolation, warm-up and feedback that never move keys.

use crate::common::*;
use crate::helpers::*;
use crate::keyed::{self, key, owners, shares};
use polylb::{Balancer, Invoker, Outcome, Status};
use std::collections::BTreeMap;

#[test]
fn keys_spread_in_proportion_to_weight() {
    keyed::keys_spread_in_proportion_to_weight("loadbalance=maglev");
}

#[test]
fn the_same_key_goes_to_the_same_invoker_whatever_the_set_order_or_ids() {
    let set: Vec<Invoker> = (1..=8).map(provider).collect();
    keyed::the_same_key_goes_to_the_same_address("loadbalance=maglev", &set);
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
        keyed::assert_excluding_another_keeps_the_key(&b, k, &set, first);
    }
}

#[test]
fn a_failover_never_goes_to_a_drained_invoker_while_a_weighted_one_is_left() {
    // Invoker 2 owns about 6 of the 65,537 slots: most failovers from 1 find none of its
    // slots in the scan, and the fallback picked by the hash alone, sending about a third
    // of them to the drained invoker 3.
    let b = lb(
        "loadbalance=maglev",
        &[
            provider(1).weight(10_000),
            provider(2).weight(1),
            provider(3).weight(0),
        ],
    );
    for k in 0..10_000 {
        let id = b.select_among(0, &key(k), &[], &[1], NOW).unwrap();
        assert_eq!(id, 2, "key {k}");
        b.report(0, id, 0, Outcome::Cancelled, NOW).unwrap();
    }
}

#[test]
fn warm_up_failures_and_methods_never_move_keys() {
    keyed::warm_up_failures_and_methods_never_move_keys("loadbalance=maglev");
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
    keyed::assert_keys_back_after_the_ejection(&b, &before);
}

#[test]
fn concurrent_picks_agree_while_the_set_changes() {
    keyed::concurrent_picks_agree_while_the_set_changes("loadbalance=maglev");
}

#[test]
fn table_size_is_checked() {
    for (text, why) in [
        ("loadbalance=maglev&maglev.tableSize=65535", "not a prime"),
        (
            "loadbalance=maglev&maglev.tableSize=5",
            "(accepted: a prime in 7..=16777213)",
        ),
        (
            "loadbalance=maglev&maglev.tableSize=16777259",
            "(accepted: a prime in 7..=16777213)",
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

/// The table is a function of the set's addresses and weights, and the same in every polylb
/// version: consumers of one service on different versions must agree on each key's invoker.
/// Placements pinned from the tables built before the turns of many distinct weights were
/// ordered by a calendar instead of a heap (2026-12-05), for equal weights, three weights
/// (turns merged by weight) and twelve distinct ones (the calendar): the first 24 keys'
/// invokers, and an FNV-1a digest of 20,000 keys' invokers.
#[test]
fn placements_are_the_same_in_every_version() {
    let cases: [(&str, Vec<i32>, [u64; 24], u64); 3] = [
        (
            "equal",
            vec![100; 7],
            [
                2, 6, 4, 6, 2, 4, 1, 7, 2, 5, 2, 2, 2, 1, 5, 2, 4, 6, 4, 6, 6, 1, 1, 4,
            ],
            0x8509_c9dc_5915_15e9,
        ),
        (
            "three weights",
            (0..9).map(|i| 100 + 50 * (i % 3)).collect(),
            [
                2, 8, 6, 6, 2, 4, 1, 7, 2, 5, 2, 2, 2, 1, 5, 9, 4, 6, 6, 6, 6, 1, 8, 8,
            ],
            0x6d54_40ee_a7d3_6ef5,
        ),
        (
            "distinct",
            (0..12).map(|i| 37 * (i + 1) + i * i).collect(),
            [
                10, 8, 6, 6, 11, 4, 8, 7, 9, 5, 11, 8, 2, 12, 8, 9, 10, 6, 12, 8, 6, 4, 8, 8,
            ],
            0xcff1_d49d_cc9a_f06f,
        ),
    ];
    for (name, weights, first, digest) in cases {
        let set: Vec<Invoker> = (1..)
            .zip(&weights)
            .map(|(id, &w)| provider(id).weight(w))
            .collect();
        let placed = owners(&lb("loadbalance=maglev", &set), 0, 20_000);
        let fnv = placed.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &id| {
            (h ^ id).wrapping_mul(0x0100_0000_01b3)
        });
        assert_eq!(placed[..24], first, "{name}");
        assert_eq!(fnv, digest, "{name}");
    }
}
