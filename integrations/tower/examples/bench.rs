//! poll_ready + call + response through polylb-tower's `Balance` and tower's p2c `Balance`,
//! over the same always-ready endpoints, in one run.
//!
//! cargo run --release --manifest-path integrations/tower/Cargo.toml --example bench [iterations]
//!
//! Each row is the best of three rounds (the host is shared); the ratio divides by tower's p2c
//! over `PendingRequests` at the same size. Nothing is asserted.

use std::convert::Infallible;
use std::future::{ready, Ready};
use std::time::{Duration, Instant};
use tower::balance::p2c;
use tower::discover::ServiceList;
use tower::load::{CompleteOnResponse, PeakEwma, PendingRequests};
use tower::{service_fn, Service, ServiceExt};

type Endpoint = tower::util::ServiceFn<fn(u64) -> Ready<Result<u64, Infallible>>>;

fn endpoints(n: usize) -> Vec<Endpoint> {
    let echo: fn(u64) -> Ready<Result<u64, Infallible>> = |x| ready(Ok(x));
    (0..n).map(|_| service_fn(echo)).collect()
}

/// Nanoseconds per poll_ready + call + response, the best of three rounds.
fn time<S>(runtime: &tokio::runtime::Runtime, mut service: S, iterations: u64) -> f64
where
    S: Service<u64, Response = u64>,
    S::Error: std::fmt::Debug,
{
    let mut best = Duration::MAX;
    runtime.block_on(async {
        for _ in 0..3 {
            let started = Instant::now();
            for i in 0..iterations {
                let answer = service.ready().await.unwrap().call(i).await.unwrap();
                std::hint::black_box(answer);
            }
            best = best.min(started.elapsed());
        }
    });
    best.as_nanos() as f64 / iterations as f64
}

fn polylb(
    config: &str,
    n: usize,
) -> impl Service<u64, Response = u64, Error = polylb_tower::BoxError> {
    polylb_tower::Balance::builder(ServiceList::new(endpoints(n)))
        .config(config)
        .build()
        .unwrap()
}

fn main() {
    let iterations: u64 = std::env::args()
        .nth(1)
        .map(|a| a.parse().expect("iterations: a number"))
        .unwrap_or(200_000);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    println!("| n | balancer | ns per request | ÷ tower p2c (PendingRequests) |");
    println!("|---|---|---|---|");
    for n in [10, 100, 1000] {
        let pending = endpoints(n)
            .into_iter()
            .map(|e| PendingRequests::new(e, CompleteOnResponse::default()));
        let baseline = time(
            &runtime,
            p2c::Balance::new(ServiceList::new(pending)),
            iterations,
        );
        let ewma = endpoints(n).into_iter().map(|e| {
            let rtt = Duration::from_millis(1);
            PeakEwma::new(e, rtt, 10e9, CompleteOnResponse::default())
        });
        let rows = [
            (
                "one endpoint, no balancer (floor)",
                time(&runtime, endpoints(1).remove(0), iterations),
            ),
            ("tower p2c (PendingRequests)", baseline),
            (
                "tower p2c (PeakEwma)",
                time(
                    &runtime,
                    p2c::Balance::new(ServiceList::new(ewma)),
                    iterations,
                ),
            ),
            (
                "polylb random",
                time(&runtime, polylb("loadbalance=random", n), iterations),
            ),
            (
                "polylb roundrobin",
                time(&runtime, polylb("loadbalance=roundrobin", n), iterations),
            ),
            (
                "polylb p2c",
                time(&runtime, polylb("loadbalance=p2c", n), iterations),
            ),
            (
                "polylb leastactive",
                time(&runtime, polylb("loadbalance=leastactive", n), iterations),
            ),
            (
                "polylb peakewma",
                time(&runtime, polylb("loadbalance=peakewma", n), iterations),
            ),
        ];
        for (name, ns) in rows {
            println!("| {n} | {name} | {ns:.0} | {:.2} |", ns / baseline);
        }
    }
}
