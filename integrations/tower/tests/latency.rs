//! Latency-aware strategies steer away from a slow endpoint. Time is tokio's paused clock, so
//! every latency is exact and the runs are the same on a loaded machine.

mod common;

use common::*;
use polylb_tower::Balance;
use std::convert::Infallible;
use std::time::Duration;
use tower::discover::ServiceList;
use tower::util::BoxService;
use tower::{service_fn, Service, ServiceExt};

const SLOW: usize = 0;
type Endpoint = BoxService<(), usize, Infallible>;

/// Endpoint 0 answers in `slow`, the others in 1 ms; each answers its index.
fn endpoints(n: usize, slow: Duration) -> Vec<Endpoint> {
    (0..n)
        .map(|index| {
            let latency = if index == SLOW {
                slow
            } else {
                Duration::from_millis(1)
            };
            BoxService::new(service_fn(move |()| async move {
                tokio::time::sleep(latency).await;
                Ok::<_, Infallible>(index)
            }))
        })
        .collect()
}

fn balance(config: &str, endpoints: Vec<Endpoint>) -> Balance<ServiceList<Vec<Endpoint>>, ()> {
    Balance::builder(ServiceList::new(endpoints))
        .config(config)
        .clock(tokio_clock)
        .build()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn peakewma_sends_few_calls_to_a_slow_endpoint() {
    let n = 4;
    let mut balance = balance(
        "loadbalance=peakewma",
        endpoints(n, Duration::from_millis(50)),
    );
    let mut calls = vec![0; n];
    for _ in 0..2000 {
        let index = balance.ready().await.unwrap().call(()).await.unwrap();
        calls[index] += 1;
    }
    let fastest_share = calls.iter().skip(1).min().unwrap();
    // Each endpoint would get 500 by chance; the slow one gets far fewer than any fast one.
    assert!(calls[SLOW] * 4 < *fastest_share, "{calls:?}");
}

#[tokio::test(start_paused = true)]
async fn leastactive_sends_few_calls_to_an_endpoint_whose_calls_pile_up() {
    let n = 4;
    let mut balance = balance(
        "loadbalance=leastactive",
        endpoints(n, Duration::from_millis(100)),
    );
    let mut answers = Vec::new();
    // Four calls a millisecond, none awaited before the next: the slow endpoint's calls stay
    // in flight for 100 ms.
    for _ in 0..500 {
        for _ in 0..4 {
            let response = balance.ready().await.unwrap().call(());
            answers.push(tokio::spawn(response));
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let mut calls = vec![0; n];
    for answer in answers {
        calls[answer.await.unwrap().unwrap()] += 1;
    }
    let fastest_share = calls.iter().skip(1).min().unwrap();
    assert!(calls[SLOW] * 4 < *fastest_share, "{calls:?}");
    let active: i64 = stats(balance.balancer())
        .values()
        .map(|e| e["active"].as_i64().unwrap())
        .sum();
    assert_eq!(active, 0);
}
