//! `Builder::timeout`: a call past its limit is a timeout to polylb, its endpoint's request is
//! cancelled, and a stalled endpoint loses its share. Time is tokio's paused clock.

mod common;

use common::*;
use polylb_tower::{Balance, Error};
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tower::discover::ServiceList;
use tower::util::BoxService;
use tower::{service_fn, Service, ServiceExt};

type Endpoint = BoxService<(), usize, Infallible>;

/// Endpoint `index` answers its index after `latencies[index]`.
fn endpoints(latencies: &[Duration]) -> Vec<Endpoint> {
    latencies
        .iter()
        .enumerate()
        .map(|(index, &latency)| {
            BoxService::new(service_fn(move |()| async move {
                tokio::time::sleep(latency).await;
                Ok::<_, Infallible>(index)
            }))
        })
        .collect()
}

/// `field` of polylb's statistics summed over the endpoints.
fn total(balancer: &polylb::Balancer, field: &str) -> u64 {
    stats(balancer)
        .values()
        .map(|endpoint| endpoint[field].as_u64().unwrap())
        .sum()
}

/// `field` of the statistics of endpoint `index` (ServiceList's keys are indexes).
fn of(balancer: &polylb::Balancer, index: usize, field: &str) -> u64 {
    stats(balancer)[&index.to_string()][field].as_u64().unwrap()
}

/// Sets its flag when dropped: whether an endpoint's future was given up.
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[tokio::test(start_paused = true)]
async fn a_call_past_its_limit_fails_as_a_timeout_and_its_request_is_cancelled_at_once() {
    let dropped = Arc::new(AtomicBool::new(false));
    let flag = dropped.clone();
    let stalled = service_fn(move |()| {
        let guard = DropFlag(flag.clone());
        async move {
            tokio::time::sleep(Duration::from_secs(10)).await;
            drop(guard);
            Ok::<_, Infallible>(0usize)
        }
    });
    let mut balance = Balance::builder(ServiceList::new([stalled]))
        .config("loadbalance=leastactive")
        .clock(tokio_clock)
        .timeout(Duration::from_millis(250))
        .build()
        .unwrap();
    let started = tokio::time::Instant::now();
    let response = balance.ready().await.unwrap().call(());
    tokio::pin!(response);
    let error = (&mut response).await.unwrap_err();
    assert_eq!(started.elapsed(), Duration::from_millis(250));
    assert!(
        matches!(error.downcast_ref(), Some(Error::Timeout(limit)) if *limit == Duration::from_millis(250)),
        "{error}"
    );
    assert_eq!(
        error.to_string(),
        "no response from the endpoint within 250ms"
    );
    // The endpoint's future went with the deadline, though the response future is still held.
    assert!(dropped.load(Ordering::SeqCst));
    let lb = balance.balancer();
    assert_eq!(of(lb, 0, "timeouts"), 1);
    assert_eq!(of(lb, 0, "active"), 0);
    // Polled again, it neither reports nor answers twice.
    let again = (&mut response).await.unwrap_err();
    assert!(again.downcast_ref::<Error>().is_none(), "{again}");
    assert_eq!(of(balance.balancer(), 0, "timeouts"), 1);
}

#[tokio::test(start_paused = true)]
async fn each_call_has_its_own_limit_and_one_within_it_is_judged_by_the_classifier() {
    let judged = Arc::new(AtomicUsize::new(0));
    let seen = judged.clone();
    let mut balance = Balance::builder(ServiceList::new(endpoints(&[Duration::from_millis(90)])))
        .config("loadbalance=leastactive")
        .clock(tokio_clock)
        .timeout(Duration::from_millis(100))
        .classify(move |_: &Result<usize, Infallible>| {
            seen.fetch_add(1, Ordering::SeqCst);
            polylb::Outcome::Failure
        })
        .build()
        .unwrap();
    // Ten calls of 90 ms each, 900 ms in all: each limit runs from its own call.
    for _ in 0..10 {
        assert_eq!(balance.ready().await.unwrap().call(()).await.unwrap(), 0);
    }
    assert_eq!(judged.load(Ordering::SeqCst), 10);
    // `failures` counts timeouts too.
    assert_eq!(total(balance.balancer(), "failures"), 10);
    assert_eq!(total(balance.balancer(), "timeouts"), 0);
}

#[tokio::test(start_paused = true)]
async fn a_timeout_is_not_put_to_the_classifier() {
    let judged = Arc::new(AtomicUsize::new(0));
    let seen = judged.clone();
    let mut balance = Balance::builder(ServiceList::new(endpoints(&[Duration::from_secs(1)])))
        .config("loadbalance=leastactive")
        .timeout(Duration::from_millis(10))
        .classify(move |_: &Result<usize, Infallible>| {
            seen.fetch_add(1, Ordering::SeqCst);
            polylb::Outcome::Success
        })
        .build()
        .unwrap();
    let error = balance.ready().await.unwrap().call(()).await.unwrap_err();
    assert!(matches!(error.downcast_ref(), Some(Error::Timeout(_))));
    assert_eq!(judged.load(Ordering::SeqCst), 0);
    assert_eq!(total(balance.balancer(), "timeouts"), 1);
}

/// Calls sent to endpoint 0 (stalled for 10 s; the others answer in 1 ms) out of 400, one at
/// a time, each given up after 100 ms by `give_up`.
async fn calls_to_a_stalled_endpoint(config: &str, inside: bool) -> usize {
    let mut latencies = vec![Duration::from_millis(1); 4];
    latencies[0] = Duration::from_secs(10);
    let mut builder = Balance::builder(ServiceList::new(endpoints(&latencies)))
        .config(config)
        .clock(tokio_clock);
    if inside {
        builder = builder.timeout(Duration::from_millis(100));
    }
    let balance = builder.build().unwrap();
    let balancer = balance.balancer().clone();
    // Outside: tower's Timeout around the Balance drops the response future at the limit.
    let mut service = tower::timeout::Timeout::new(balance, Duration::from_millis(100));
    for _ in 0..400 {
        let _ = service.ready().await.unwrap().call(()).await;
    }
    assert_eq!(total(&balancer, "active"), 0);
    let to_stalled = of(&balancer, 0, "selected");
    if inside {
        assert_eq!(of(&balancer, 0, "timeouts"), to_stalled);
    }
    to_stalled as usize
}

#[tokio::test(start_paused = true)]
async fn a_stalled_endpoint_loses_its_share_to_the_balancers_own_timeout_only() {
    for config in [
        "loadbalance=peakewma&seed=7",
        "loadbalance=random&outlier.consecutiveFailures=3&seed=7",
    ] {
        let inside = calls_to_a_stalled_endpoint(config, true).await;
        let outside = calls_to_a_stalled_endpoint(config, false).await;
        // By chance the stalled endpoint would get 100 of 400 (σ ≈ 8.7).
        assert!(
            inside < 20,
            "{config}: {inside} calls with Builder::timeout"
        );
        // A Timeout around the Balance cancels: polylb never learns the endpoint is stalled.
        assert!(
            outside > 60,
            "{config}: {outside} calls with a Timeout around the Balance"
        );
    }
}

/// An endpoint that keeps the task busy (it yields whenever tokio's budget runs out, as a
/// cooperative one does) still fails at its limit: the deadline is not left to a `Sleep` polled
/// with the budget spent, which is Pending whatever the time. Real time: a busy task never lets
/// paused time advance.
#[tokio::test(flavor = "current_thread")]
async fn the_deadline_passes_for_an_endpoint_that_spends_the_tasks_budget() {
    let busy = service_fn(|()| async {
        loop {
            tokio::task::consume_budget().await;
        }
        #[allow(unreachable_code)]
        Ok::<usize, Infallible>(0)
    });
    let mut balance = Balance::builder(ServiceList::new([busy]))
        .config("loadbalance=leastactive")
        .timeout(Duration::from_millis(50))
        .build()
        .unwrap();
    let response = balance.ready().await.unwrap().call(());
    // A guard: before the fix, the call never ended.
    let error = tokio::time::timeout(Duration::from_secs(5), response)
        .await
        .expect("the 50 ms deadline passed unseen")
        .unwrap_err();
    assert!(
        matches!(error.downcast_ref(), Some(Error::Timeout(_))),
        "{error}"
    );
    assert_eq!(of(balance.balancer(), 0, "timeouts"), 1);
    assert_eq!(of(balance.balancer(), 0, "active"), 0);
}
