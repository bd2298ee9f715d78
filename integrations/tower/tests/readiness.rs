//! tower's readiness contract: calls go only to endpoints that said they were ready.

mod common;

use common::*;
use polylb_tower::{Balance, Error};
use tokio_test::{assert_pending, assert_ready_ok, task};
use tower::discover::Change;
use tower::{Service, ServiceExt};

fn insert(key: &'static str, gate: Gate) -> (Gated, Change<&'static str, Gated>) {
    let endpoint = Gated::new(key, gate);
    (endpoint.clone(), Change::Insert(key, endpoint))
}

#[tokio::test]
async fn a_not_ready_endpoint_gets_no_calls_until_it_is_ready() {
    let (tx, discover) = changes();
    let (a, insert_a) = insert("a", Gate::Open);
    let (b, insert_b) = insert("b", Gate::Closed);
    tx.send(insert_a).unwrap();
    tx.send(insert_b).unwrap();
    let mut balance = Balance::builder(discover).build().unwrap();
    for _ in 0..200 {
        let answer = balance.ready().await.unwrap().call("x").await.unwrap();
        assert_eq!(answer, "a");
    }
    assert_eq!((a.calls(), b.calls()), (200, 0));

    b.set(Gate::Open);
    let draws = 2000;
    for _ in 0..draws {
        balance.ready().await.unwrap().call("x").await.unwrap();
    }
    // `random` over two equal weights, now that both are ready.
    let (mean, tolerance) = binomial_bounds(draws, 0.5);
    let to_b = b.calls() as f64;
    assert!((to_b - mean).abs() <= tolerance, "b got {to_b} of {draws}");
}

#[tokio::test]
async fn poll_ready_is_pending_while_none_is_ready_and_woken_when_one_is() {
    let (tx, discover) = changes();
    let (a, insert_a) = insert("a", Gate::Closed);
    tx.send(insert_a).unwrap();
    let mut balance = Balance::builder(discover).build().unwrap();
    {
        let mut ready = task::spawn(std::future::poll_fn(|cx| balance.poll_ready(cx)));
        assert_pending!(ready.poll());
        assert!(!ready.is_woken());
        a.set(Gate::Open);
        assert!(ready.is_woken());
        assert_ready_ok!(ready.poll());
    }
    assert_eq!(balance.call("x").await.unwrap(), "a");
    // Its readiness was spent by the call: the next call needs poll_ready again.
    let refused = balance.call("x").await.unwrap_err();
    assert!(
        matches!(refused.downcast_ref(), Some(Error::NotReady)),
        "{refused}"
    );
    assert_eq!(a.calls(), 1);
}

#[tokio::test]
async fn an_endpoint_whose_poll_ready_fails_is_evicted() {
    let (tx, discover) = changes();
    let (a, insert_a) = insert("a", Gate::Open);
    let (b, insert_b) = insert("b", Gate::Broken);
    tx.send(insert_a).unwrap();
    tx.send(insert_b).unwrap();
    let mut balance = Balance::builder(discover).build().unwrap();
    balance.ready().await.unwrap();
    assert_eq!(balance.len(), 1);
    let addresses: Vec<String> = stats(balance.balancer()).into_keys().collect();
    assert_eq!(addresses, ["a"]);
    for _ in 0..50 {
        assert_eq!(balance.ready().await.unwrap().call("x").await.unwrap(), "a");
    }
    assert_eq!((a.calls(), b.calls()), (50, 0));

    // Discovery may bring it back.
    b.set(Gate::Open);
    tx.send(Change::Insert("b", b.clone())).unwrap();
    balance.ready().await.unwrap();
    assert_eq!(balance.len(), 2);
}

#[tokio::test]
async fn when_every_endpoint_fails_the_set_waits_for_discovery() {
    let (tx, discover) = changes();
    let (_, insert_a) = insert("a", Gate::Broken);
    tx.send(insert_a).unwrap();
    let mut balance = Balance::builder(discover).build().unwrap();
    let mut ready = task::spawn(std::future::poll_fn(|cx| balance.poll_ready(cx)));
    assert_pending!(ready.poll());
    let (_, insert_b) = insert("b", Gate::Open);
    tx.send(insert_b).unwrap();
    assert!(ready.is_woken());
    assert_ready_ok!(ready.poll());
}
