//! Discovery's changes and polylb's set stay in step; a set polylb refuses leaves the previous
//! one in place.

mod common;

use common::*;
use polylb::{Invoker, Status};
use polylb_tower::{Balance, Builder, Error};
use std::collections::HashMap;
use std::time::Duration;
use tokio_test::{assert_pending, assert_ready_err, task};
use tower::discover::Change;
use tower::{Service, ServiceExt};

type Discovery = Changes<&'static str, Gated>;

async fn answers(
    balance: &mut Balance<Discovery, &'static str>,
    n: usize,
) -> HashMap<&'static str, usize> {
    let mut seen = HashMap::new();
    for _ in 0..n {
        let answer = balance.ready().await.unwrap().call("x").await.unwrap();
        *seen.entry(answer).or_default() += 1;
    }
    seen
}

#[tokio::test]
async fn inserts_and_removes_change_who_gets_calls() {
    let (tx, discover) = changes();
    for key in ["a", "b", "c"] {
        tx.send(Change::Insert(key, Gated::new(key, Gate::Open)))
            .unwrap();
    }
    let mut balance = Balance::builder(discover).build().unwrap();
    let seen = answers(&mut balance, 300).await;
    assert_eq!(seen.len(), 3, "{seen:?}");

    tx.send(Change::Remove("b")).unwrap();
    let seen = answers(&mut balance, 300).await;
    assert!(!seen.contains_key("b"), "{seen:?}");
    assert_eq!(seen.len(), 2, "{seen:?}");
    let mut addresses: Vec<String> = stats(balance.balancer()).into_keys().collect();
    addresses.sort();
    assert_eq!(addresses, ["a", "c"]);

    // A new "b" is a new service: the old one is gone for good.
    let old_b = Gated::new("old b", Gate::Open);
    tx.send(Change::Insert("b", old_b.clone())).unwrap();
    tx.send(Change::Insert("b", Gated::new("b", Gate::Open)))
        .unwrap();
    let seen = answers(&mut balance, 300).await;
    assert!(seen["b"] > 0 && !seen.contains_key("old b"), "{seen:?}");
    assert_eq!(old_b.calls(), 0);
    assert_eq!(balance.len(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_key_back_within_60_s_keeps_its_id_and_later_gets_a_new_one() {
    let (tx, discover) = changes();
    tx.send(Change::Insert("a", Gated::new("a", Gate::Open)))
        .unwrap();
    tx.send(Change::Insert("b", Gated::new("b", Gate::Open)))
        .unwrap();
    let mut balance = Balance::builder(discover)
        .clock(tokio_clock)
        .build()
        .unwrap();
    balance.ready().await.unwrap();
    let id_of_b =
        |balance: &Balance<Discovery, &'static str>| stats(balance.balancer())["b"]["id"].clone();
    let first = id_of_b(&balance);

    tx.send(Change::Remove("b")).unwrap();
    balance.ready().await.unwrap();
    tokio::time::advance(Duration::from_secs(59)).await;
    tx.send(Change::Insert("b", Gated::new("b", Gate::Open)))
        .unwrap();
    balance.ready().await.unwrap();
    assert_eq!(id_of_b(&balance), first);

    tx.send(Change::Remove("b")).unwrap();
    balance.ready().await.unwrap();
    tokio::time::advance(Duration::from_secs(61)).await;
    tx.send(Change::Insert("b", Gated::new("b", Gate::Open)))
        .unwrap();
    balance.ready().await.unwrap();
    assert_ne!(id_of_b(&balance), first);
}

#[tokio::test]
async fn an_empty_set_waits_for_discovery_and_fails_once_discovery_ends() {
    let (tx, discover) = changes::<&'static str, Gated>();
    let mut balance = Balance::builder(discover).build().unwrap();
    {
        let mut ready = task::spawn(std::future::poll_fn(|cx| balance.poll_ready(cx)));
        assert_pending!(ready.poll());
        tx.send(Change::Insert("a", Gated::new("a", Gate::Open)))
            .unwrap();
        assert!(ready.is_woken());
        assert!(ready.poll().is_ready());
    }
    assert_eq!(balance.call("x").await.unwrap(), "a");

    tx.send(Change::Remove("a")).unwrap();
    drop(tx);
    let mut ready = task::spawn(std::future::poll_fn(|cx| balance.poll_ready(cx)));
    let error = assert_ready_err!(ready.poll());
    assert!(
        matches!(error.downcast_ref(), Some(Error::NoEndpoints)),
        "{error}"
    );
}

#[tokio::test]
async fn a_discovery_error_is_returned_after_the_changes_before_it() {
    let discover = listed(vec![
        Ok(Change::Insert("a", Gated::new("a", Gate::Open))),
        Err("registry unreachable"),
    ]);
    let mut balance = Balance::builder(discover).build().unwrap();
    let error = balance.ready().await.unwrap_err();
    assert_eq!(error.to_string(), "registry unreachable");
    assert_eq!(balance.len(), 1);
    // Then discovery has ended, and the set it left serves.
    assert_eq!(balance.ready().await.unwrap().call("x").await.unwrap(), "a");
}

#[tokio::test]
async fn a_refused_set_keeps_the_previous_one_but_its_removals() {
    let (tx, discover) = changes();
    tx.send(Change::Insert("a", Gated::new("a", Gate::Open)))
        .unwrap();
    tx.send(Change::Insert("c", Gated::new("c", Gate::Open)))
        .unwrap();
    let weight_of = |key: &&str| if key.starts_with("bad") { -1 } else { 100 };
    let mut balance = Builder::new(discover, move |key: &&'static str| {
        Invoker::new(0, *key).weight(weight_of(key))
    })
    .build()
    .unwrap();
    balance.ready().await.unwrap();
    assert_eq!(balance.len(), 2);

    let bad = Gated::new("bad", Gate::Open);
    tx.send(Change::Insert("bad", bad.clone())).unwrap();
    tx.send(Change::Insert("b", Gated::new("b", Gate::Open)))
        .unwrap();
    tx.send(Change::Remove("c")).unwrap();
    let error = balance.ready().await.unwrap_err();
    match error.downcast_ref() {
        Some(Error::Update(e)) => assert_eq!(e.status, Status::NegativeWeight, "{e}"),
        _ => panic!("{error}"),
    }
    assert!(
        error.to_string().contains("new endpoints are dropped"),
        "{error}"
    );
    // The insertions of the refused batch are dropped; its removal is not: discovery will not
    // say again that "c" left.
    assert_eq!(balance.len(), 1);
    let addresses: Vec<String> = stats(balance.balancer()).into_keys().collect();
    assert_eq!(addresses, ["a"]);
    let seen = answers(&mut balance, 50).await;
    assert_eq!(seen, HashMap::from([("a", 50)]));
    assert_eq!(bad.calls(), 0);
}

#[test]
fn a_bad_config_is_refused_with_polylbs_message() {
    let (_tx, discover) = changes::<&'static str, Gated>();
    let error = Balance::<_, &'static str>::builder(discover)
        .config("loadbalance=fastest")
        .build()
        .unwrap_err();
    match &error {
        Error::Config(e) => assert_eq!(e.status, Status::InvalidConfig),
        _ => panic!("{error}"),
    }
    assert!(error.to_string().contains("fastest"), "{error}");
}
