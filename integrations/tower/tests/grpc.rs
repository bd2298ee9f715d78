//! gRPC over HTTP/2 answers error statuses in `Ok` responses (tonic's `Channel` resolves with
//! `Ok(http::Response)` whose headers say `grpc-status: 14`): `grpc::classify` reads them, so
//! that outlier ejection and `peakewma` see a failing server.

mod common;

use common::*;
use polylb::Outcome;
use polylb_tower::{grpc, Balance};
use std::convert::Infallible;
use std::time::Duration;
use tower::discover::ServiceList;
use tower::{service_fn, Service, ServiceExt};

/// An endpoint that answers as a gRPC server does: HTTP 200, with `grpc-status` in the
/// headers when the call fails before any message ("trailers-only"), after `delay`.
fn grpc_server(
    status: Option<&'static str>,
    delay: Duration,
) -> impl Service<
    http::Request<()>,
    Response = http::Response<()>,
    Error = Infallible,
    Future = impl std::future::Future<Output = Result<http::Response<()>, Infallible>>,
> {
    service_fn(move |_: http::Request<()>| async move {
        tokio::time::sleep(delay).await;
        let mut response = http::Response::builder().header("content-type", "application/grpc");
        if let Some(status) = status {
            response = response.header("grpc-status", status);
        }
        Ok::<_, Infallible>(response.body(()).unwrap())
    })
}

fn response(status: u16, headers: &[(&'static str, &'static str)]) -> http::Response<()> {
    let mut response = http::Response::builder().status(status);
    for (name, value) in headers {
        response = response.header(*name, *value);
    }
    response.body(()).unwrap()
}

/// An HTTP status, the response's headers, the outcome expected.
type Case = (u16, &'static [(&'static str, &'static str)], Outcome);

#[test]
fn statuses_map_to_outcomes() {
    let cases: &[Case] = &[
        (200, &[], Outcome::Success),
        (200, &[("grpc-status", "0")], Outcome::Success),
        (200, &[("grpc-status", "14")], Outcome::Failure),
        (200, &[("grpc-status", "13")], Outcome::Failure),
        (200, &[("grpc-status", "12")], Outcome::Failure),
        (200, &[("grpc-status", "1")], Outcome::Failure),
        (200, &[("grpc-status", "4")], Outcome::Timeout),
        (200, &[("grpc-status", "5")], Outcome::Success),
        (200, &[("grpc-status", "3")], Outcome::Success),
        (200, &[("grpc-status", "16")], Outcome::Success),
        (200, &[("grpc-status", "8")], Outcome::Failure),
        (
            200,
            &[
                ("grpc-status", "8"),
                (
                    "grpc-message",
                    "grpc: received message larger than max (9 vs. 4)",
                ),
            ],
            Outcome::Success,
        ),
        (200, &[("grpc-status", "x")], Outcome::Failure),
        (503, &[], Outcome::Failure),
        (429, &[], Outcome::Failure),
        (504, &[], Outcome::Timeout),
        (404, &[("grpc-status", "12")], Outcome::Failure),
        (404, &[], Outcome::Success),
    ];
    for (status, headers, outcome) in cases {
        let result = Ok::<_, Infallible>(response(*status, headers));
        assert_eq!(grpc::classify(&result), *outcome, "{status} {headers:?}");
    }
    let refused: Result<http::Response<()>, &str> = Err("connection refused");
    assert_eq!(grpc::classify(&refused), Outcome::Failure);
}

#[tokio::test(flavor = "current_thread")]
async fn an_unavailable_server_is_ejected() {
    let endpoints = vec![
        grpc_server(Some("0"), Duration::ZERO),
        grpc_server(Some("14"), Duration::ZERO),
        grpc_server(None, Duration::ZERO),
    ];
    let mut balance = Balance::builder(ServiceList::new(endpoints))
        .config("loadbalance=p2c&outlier.consecutiveFailures=5")
        .classify(grpc::classify)
        .build()
        .unwrap();
    for _ in 0..300 {
        let request = http::Request::new(());
        balance.ready().await.unwrap().call(request).await.unwrap();
    }
    let unavailable = &stats(balance.balancer())["1"];
    assert_eq!(unavailable["failures"], 5, "{unavailable}");
    assert_eq!(unavailable["succeeded"], 0, "{unavailable}");
    assert_eq!(unavailable["ejected"], true, "{unavailable}");
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn peakewma_avoids_a_server_failing_fast() {
    // The failing server answers at once, the others in 5 ms: counted as successes, its
    // failures would make it the fastest, and peakewma would send it most calls.
    let endpoints = vec![
        grpc_server(None, Duration::from_millis(5)),
        grpc_server(None, Duration::from_millis(5)),
        grpc_server(Some("14"), Duration::ZERO),
    ];
    let mut balance = Balance::builder(ServiceList::new(endpoints))
        .config("loadbalance=peakewma")
        .classify(grpc::classify)
        .clock(tokio_clock)
        .build()
        .unwrap();
    let calls = 300;
    for _ in 0..calls {
        let request = http::Request::new(());
        balance.ready().await.unwrap().call(request).await.unwrap();
    }
    let unavailable = &stats(balance.balancer())["2"];
    let taken = unavailable["selected"].as_i64().unwrap();
    assert!(taken < calls / 10, "{unavailable}");
    assert_eq!(unavailable["succeeded"], 0, "{unavailable}");
}
