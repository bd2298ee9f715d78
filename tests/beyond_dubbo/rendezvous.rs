//! `rendezvous`: exact weighted shares of the keys, churn that moves only the keys it must,
//! failover retries that take the key's next choice, concurrency, per-method isolation, and
//! warm-up and feedback that never move keys.

use crate::common::*;
use crate::helpers::*;
use crate::keyed::{self, key, owners, shares};
use polylb::{Balancer, Invoker, Outcome, Status};

const CONFIG: &str = "loadbalance=rendezvous";

#[test]
fn keys_spread_in_proportion_to_weight() {
    keyed::keys_spread_in_proportion_to_weight(CONFIG);
    let draws = 40_000;
    // A weight of 1 beside 99: about 1 % of the keys, not rounded away.
    let b = lb(CONFIG, &[provider(1).weight(99), provider(2).weight(1)]);
    let c = shares(&owners(&b, 0, draws as u64));
    assert_binomial(c[&2], draws, 0.01, 5.0, "weight 1 of 100");
}

#[test]
fn the_same_key_goes_to_the_same_invoker_whatever_the_set_order_or_ids() {
    let set: Vec<Invoker> = (1..=8).map(|i| provider(i).weight(50 * i as i32)).collect();
    keyed::the_same_key_goes_to_the_same_address(CONFIG, &set);
}

#[test]
fn churn_moves_only_the_keys_it_must() {
    let set: Vec<Invoker> = (1..=10).map(provider).collect();
    let b = lb(CONFIG, &set);
    let keys = 20_000;
    let before = owners(&b, 0, keys);
    // Invoker 4 leaves: its keys spread over the others, and no other key moves.
    let without: Vec<Invoker> = set.iter().filter(|i| i.id != 4).cloned().collect();
    b.update(&without).unwrap();
    let after = owners(&b, 0, keys);
    for (k, (&was, &now)) in before.iter().zip(&after).enumerate() {
        assert_ne!(now, 4, "key {k} still on the invoker that left");
        if was != 4 {
            assert_eq!(now, was, "key {k} moved though its invoker stayed");
        }
    }
    let moved = shares(
        &before
            .iter()
            .zip(&after)
            .filter(|(&was, _)| was == 4)
            .map(|(_, &now)| now)
            .collect::<Vec<_>>(),
    );
    assert_eq!(
        moved.len(),
        9,
        "its keys spread over all the others: {moved:?}"
    );
    // It comes back: exactly its keys return, and its counters start again from 0.
    b.update(&set).unwrap();
    assert_eq!(stat(&b, NOW, 4, "selected"), 0);
    assert_eq!(owners(&b, 0, keys), before);
    // A newcomer takes keys only for itself, about its share.
    let mut grown = set.clone();
    grown.push(provider(11));
    b.update(&grown).unwrap();
    let with_new = owners(&b, 0, keys);
    let mut taken = 0;
    for (k, (&was, &now)) in before.iter().zip(&with_new).enumerate() {
        if now == 11 {
            taken += 1;
        } else {
            assert_eq!(now, was, "key {k} moved between the old invokers");
        }
    }
    assert_binomial(taken, keys as usize, 1.0 / 11.0, 5.0, "the newcomer's keys");
    // A weight change moves keys only to or from the invoker whose weight changed.
    let mut heavier = set.clone();
    heavier[2] = provider(3).weight(300);
    b.update(&heavier).unwrap();
    let reweighed = owners(&b, 0, keys);
    let mut gained = 0;
    for (k, (&was, &now)) in before.iter().zip(&reweighed).enumerate() {
        if was != now {
            assert_eq!(now, 3, "key {k} moved to {now}, not to the heavier invoker");
            gained += 1;
        }
    }
    // Its share goes from 1/10 to 3/12: 15 % of the keys move, all to it.
    assert_binomial(
        gained,
        keys as usize,
        0.25 - 0.1,
        5.0,
        "keys the heavier invoker gained",
    );
}

#[test]
fn a_failover_takes_the_keys_next_choice_the_same_on_every_consumer() {
    let set: Vec<Invoker> = (1..=6)
        .map(|i| provider(i).weight(100 + 20 * i as i32))
        .collect();
    let b = lb(CONFIG, &set);
    for k in 0..3000 {
        let first = b.select(0, &key(k), NOW).unwrap();
        b.report(0, first, 1000, Outcome::Failure, NOW).unwrap();
        let retry = b.select_among(0, &key(k), &[], &[first], NOW).unwrap();
        // The retry is where the key goes once the failed invoker is gone: another consumer,
        // told of a set without it, sends the key there too.
        let rest: Vec<Invoker> = set.iter().filter(|i| i.id != first).cloned().collect();
        let other = lb(CONFIG, &rest);
        assert_eq!(retry, other.select(0, &key(k), NOW).unwrap(), "key {k}");
        b.report(0, retry, 1000, Outcome::Success, NOW).unwrap();
        // A second retry is the third choice, again the set's without both.
        let third = b
            .select_among(0, &key(k), &[], &[first, retry], NOW)
            .unwrap();
        let rest: Vec<Invoker> = rest.into_iter().filter(|i| i.id != retry).collect();
        assert_eq!(third, lb(CONFIG, &rest).select(0, &key(k), NOW).unwrap());
        b.report(0, third, 1000, Outcome::Success, NOW).unwrap();
        // Candidates given explicitly pick the same way, and excluding another invoker leaves
        // the key where it was.
        let among = b
            .select_among(0, &key(k), &[retry, first], &[], NOW)
            .unwrap();
        assert_eq!(among, first);
        b.report(0, among, 1000, Outcome::Success, NOW).unwrap();
        keyed::assert_excluding_another_keeps_the_key(&b, k, &set, first);
    }
}

#[test]
fn warm_up_failures_and_methods_never_move_keys() {
    keyed::warm_up_failures_and_methods_never_move_keys(CONFIG);
}

#[test]
fn zones_and_outlier_ejection_take_the_keys_next_choice() {
    let set: Vec<Invoker> = (1..=6)
        .map(|i| provider(i).zone(if i <= 3 { "a" } else { "b" }))
        .collect();
    let zoned = lb("loadbalance=rendezvous&zone=a", &set);
    let local_only = lb(CONFIG, &set[..3]);
    let keys = 3000;
    assert_eq!(owners(&zoned, 0, keys), owners(&local_only, 0, keys));

    let set: Vec<Invoker> = (1..=5).map(provider).collect();
    let b = lb(
        "loadbalance=rendezvous&outlier.consecutiveFailures=1&outlier.baseEjectionMs=1000\
         &outlier.maxEjectionPercent=20",
        &set,
    );
    let before = owners(&b, 0, keys);
    b.report(0, 3, 10, Outcome::Failure, NOW).unwrap();
    let during = owners(&b, 0, keys);
    let without_3: Vec<Invoker> = set.iter().filter(|i| i.id != 3).cloned().collect();
    assert_eq!(during, owners(&lb(CONFIG, &without_3), 0, keys));
    for (k, (&was, &now)) in before.iter().zip(&during).enumerate() {
        if was != 3 {
            assert_eq!(now, was, "key {k} moved though its invoker was not ejected");
        }
    }
    keyed::assert_keys_back_after_the_ejection(&b, &before);
}

#[test]
fn concurrent_picks_agree_while_the_set_changes() {
    keyed::concurrent_picks_agree_while_the_set_changes(CONFIG);
}

#[test]
fn options_it_cannot_honour_are_refused() {
    for (text, why) in [
        (
            "loadbalance=rendezvous&slowstart.windowMs=1000",
            "slowstart",
        ),
        ("loadbalance=rendezvous&maglev.tableSize=101", "maglev only"),
        (
            "loadbalance=rendezvous&subset.size=3&subset.key=c1",
            "subset",
        ),
    ] {
        let Err(e) = Balancer::new(text) else {
            panic!("{text} accepted")
        };
        assert_eq!(e.status, Status::InvalidConfig, "{text}");
        assert!(e.message.contains(why), "{text}: {}", e.message);
    }
    // Empty addresses are refused, as for the other hashing strategies, and the set stays.
    let b = lb(CONFIG, &[provider(1), provider(2)]);
    let before = owners(&b, 0, 100);
    let e = b
        .update(&[provider(1), Invoker::new(2, String::new())])
        .unwrap_err();
    assert_eq!(e.status, Status::InvalidArgument);
    assert_eq!(owners(&b, 0, 100), before);
}
