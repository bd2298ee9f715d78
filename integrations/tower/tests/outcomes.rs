//! Each response's outcome and latency reach polylb: successes, failures, timeouts by the
//! classifier, cancels when the response future is dropped.

mod common;

use common::*;
use polylb::Outcome;
use polylb_tower::Balance;
use std::io;
use std::time::Duration;
use tower::discover::ServiceList;
use tower::{service_fn, Service, ServiceExt};

/// Answers `Ok(status)` for a request "ok" or "503", an error for "reset" and "deadline".
async fn answer(request: &'static str) -> Result<u16, io::Error> {
    match request {
        "503" => Ok(503),
        "reset" => Err(io::ErrorKind::ConnectionReset.into()),
        "deadline" => Err(io::ErrorKind::TimedOut.into()),
        _ => Ok(200),
    }
}

fn totals(balance: &polylb::Balancer) -> [i64; 4] {
    let mut sums = [0; 4];
    for endpoint in stats(balance).values() {
        for (sum, field) in sums
            .iter_mut()
            .zip(["active", "succeeded", "failures", "timeouts"])
        {
            *sum += endpoint[field].as_i64().unwrap();
        }
    }
    sums
}

#[tokio::test]
async fn results_are_reported_and_nothing_stays_in_flight() {
    let endpoints = (0..3).map(|_| service_fn(answer));
    let mut balance = Balance::builder(ServiceList::new(endpoints))
        .config("loadbalance=leastactive")
        .build()
        .unwrap();
    for request in ["ok"; 10].into_iter().chain(["reset"; 4]) {
        let result = balance.ready().await.unwrap().call(request).await;
        assert_eq!(result.is_ok(), request == "ok");
    }
    // [active, succeeded, failures, timeouts]
    assert_eq!(totals(balance.balancer()), [0, 10, 4, 0]);
}

#[tokio::test]
async fn the_classifier_decides_and_the_caller_still_gets_the_result() {
    let mut balance = Balance::builder(ServiceList::new([service_fn(answer)]))
        .classify(|result: &Result<u16, io::Error>| match result {
            Ok(503) => Outcome::Failure,
            Ok(_) => Outcome::Success,
            Err(e) if e.kind() == io::ErrorKind::TimedOut => Outcome::Timeout,
            Err(_) => Outcome::Failure,
        })
        .build()
        .unwrap();
    for request in ["ok", "503", "deadline", "reset"] {
        balance.ready().await.unwrap().call(request).await.ok();
    }
    assert_eq!(totals(balance.balancer()), [0, 1, 3, 1]);
    let error = balance.ready().await.unwrap().call("deadline").await;
    let error = error.unwrap_err();
    let io = error.downcast_ref::<io::Error>().unwrap();
    assert_eq!(io.kind(), io::ErrorKind::TimedOut);
}

#[tokio::test]
async fn a_dropped_response_is_a_cancel() {
    let never = service_fn(|_: &'static str| std::future::pending::<Result<u16, io::Error>>());
    let mut balance = Balance::builder(ServiceList::new([never]))
        .config("loadbalance=leastactive")
        .build()
        .unwrap();
    let response = balance.ready().await.unwrap().call("ok");
    assert_eq!(totals(balance.balancer())[0], 1, "one call in flight");
    drop(response);
    let endpoint = &stats(balance.balancer())["0"];
    assert_eq!(endpoint["selected"], 1);
    // A cancel ends the call and counts neither a success nor a failure.
    assert_eq!(totals(balance.balancer()), [0, 0, 0, 0]);
}

#[tokio::test(start_paused = true)]
async fn latency_is_read_from_the_builders_clock() {
    let slow = service_fn(|_: &'static str| async {
        tokio::time::sleep(Duration::from_millis(250)).await;
        Ok::<_, io::Error>(200)
    });
    let mut balance = Balance::builder(ServiceList::new([slow]))
        .clock(tokio_clock)
        .build()
        .unwrap();
    for _ in 0..4 {
        balance.ready().await.unwrap().call("ok").await.unwrap();
    }
    let mean_us = stats(balance.balancer())["0"]["mean_success_us"]
        .as_i64()
        .unwrap();
    // Virtual time: 250 ms, plus at most the timer's 1 ms rounding.
    assert!((250_000..=251_000).contains(&mean_us), "{mean_us} µs");
}

#[tokio::test]
async fn method_names_are_interned_for_polylbs_per_method_statistics() {
    let mut balance = Balance::builder(ServiceList::new([service_fn(answer)]))
        .method(|request: &&'static str| if *request == "ok" { "get" } else { "put" })
        .build()
        .unwrap();
    for request in ["ok", "reset", "ok", "503"] {
        balance.ready().await.unwrap().call(request).await.ok();
    }
    let endpoint = &stats(balance.balancer())["0"];
    let mut rows: Vec<(String, i64)> = endpoint["methods"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| {
            (
                row["method"].as_str().unwrap().to_string(),
                row["selected"].as_i64().unwrap(),
            )
        })
        .collect();
    rows.sort();
    assert_eq!(rows, [("get".to_string(), 2), ("put".to_string(), 2)]);
}
