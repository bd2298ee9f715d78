//! polylb's weights decide the share of each ready endpoint.

mod common;

use common::*;
use polylb::Invoker;
use polylb_tower::Builder;
use tower::discover::Change;
use tower::{Service, ServiceExt};

const WEIGHTS: [(&str, i32); 3] = [("a", 100), ("b", 200), ("c", 300)];

fn weighted(
    config: &str,
    gates: [Gate; 3],
) -> (
    Vec<Gated>,
    polylb_tower::Balance<Changes<&'static str, Gated>, &'static str>,
) {
    let (tx, discover) = changes();
    let mut endpoints = Vec::new();
    for ((key, _), gate) in WEIGHTS.into_iter().zip(gates) {
        let endpoint = Gated::new(key, gate);
        endpoints.push(endpoint.clone());
        tx.send(Change::Insert(key, endpoint)).unwrap();
    }
    let balance = Builder::new(discover, |key: &&'static str| {
        let (_, weight) = WEIGHTS.iter().find(|(k, _)| k == key).unwrap();
        Invoker::new(0, *key).weight(*weight)
    })
    .config(config)
    .build()
    .unwrap();
    (endpoints, balance)
}

fn assert_shares(endpoints: &[Gated], draws: usize, shares: [f64; 3]) {
    for (endpoint, share) in endpoints.iter().zip(shares) {
        let (mean, tolerance) = binomial_bounds(draws, share);
        let got = endpoint.calls() as f64;
        assert!(
            (got - mean).abs() <= tolerance,
            "{endpoint:?}: {got} calls of {draws}, expected {mean} ± {tolerance}"
        );
    }
}

#[tokio::test]
async fn random_follows_the_weights_when_every_endpoint_is_ready() {
    let (endpoints, mut balance) = weighted("loadbalance=random", [Gate::Open; 3]);
    let draws = 30_000;
    for _ in 0..draws {
        balance.ready().await.unwrap().call("x").await.unwrap();
    }
    assert_shares(&endpoints, draws, [1.0 / 6.0, 2.0 / 6.0, 3.0 / 6.0]);
}

#[tokio::test]
async fn random_follows_the_weights_of_the_ready_endpoints() {
    let (endpoints, mut balance) =
        weighted("loadbalance=random", [Gate::Open, Gate::Open, Gate::Closed]);
    let draws = 30_000;
    for _ in 0..draws {
        balance.ready().await.unwrap().call("x").await.unwrap();
    }
    assert_shares(&endpoints, draws, [1.0 / 3.0, 2.0 / 3.0, 0.0]);
}

#[tokio::test]
async fn roundrobin_serves_each_weight_exactly_per_period() {
    let (endpoints, mut balance) = weighted("loadbalance=roundrobin", [Gate::Open; 3]);
    for _ in 0..600 {
        balance.ready().await.unwrap().call("x").await.unwrap();
    }
    let calls: Vec<usize> = endpoints.iter().map(Gated::calls).collect();
    assert_eq!(calls, [100, 200, 300]);
}
