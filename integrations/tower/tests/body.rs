//! `report_at_body_end`: an HTTP call stays in flight until its response body ends, and is
//! reported then, once, by the `grpc-status` of its trailers (docs/outcomes.md, "Streams").
//! The bodies are built by hand (http-body 1.x, as tonic and hyper answer them); time is
//! tokio's paused clock.

mod common;

use bytes::Bytes;
use common::*;
use http_body::{Body, Frame};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Empty, Full};
use polylb_tower::{grpc, AtBodyEnd, Balance, BoxError};
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::mpsc;
use tower::discover::ServiceList;
use tower::util::BoxService;
use tower::{service_fn, Service, ServiceExt};

type TestBody = UnsyncBoxBody<Bytes, BoxError>;
type Endpoint = BoxService<http::Request<()>, http::Response<TestBody>, Infallible>;

/// One gRPC message frame (5-byte prefix, empty message): what the body carries is not read.
const MESSAGE: &[u8] = b"\0\0\0\0\0";

fn trailers(status: &'static str) -> http::HeaderMap {
    let mut trailers = http::HeaderMap::new();
    trailers.insert("grpc-status", http::HeaderValue::from_static(status));
    trailers
}

/// A unary gRPC reply as servers send it: headers, one message, then `grpc-status` in the
/// trailers; after `delay`.
fn unary(status: &'static str, delay: Duration) -> Endpoint {
    BoxService::new(service_fn(move |_: http::Request<()>| async move {
        tokio::time::sleep(delay).await;
        let body = Full::new(Bytes::from_static(MESSAGE))
            .map_err(|e| match e {})
            .with_trailers(async move { Some(Ok(trailers(status))) });
        Ok::<_, Infallible>(http::Response::new(body.boxed_unsync()))
    }))
}

/// A server that answers `headers` at once with an empty body ("trailers-only" when they
/// carry a `grpc-status`).
fn headers_only(status: u16, grpc_status: Option<&'static str>) -> Endpoint {
    BoxService::new(service_fn(move |_: http::Request<()>| async move {
        let mut response = http::Response::builder().status(status);
        if let Some(code) = grpc_status {
            response = response.header("grpc-status", code);
        }
        let body = Empty::new().map_err(|e| match e {}).boxed_unsync();
        Ok::<_, Infallible>(response.body(body).unwrap())
    }))
}

/// A body whose frames the test sends; it ends when the sender is dropped. Its end is known
/// only then (`is_end_stream` is false), as with a stream read off the network.
struct ChannelBody(mpsc::UnboundedReceiver<Result<Frame<Bytes>, BoxError>>);

impl Body for ChannelBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.0.poll_recv(cx)
    }
}

type Frames = mpsc::UnboundedSender<Result<Frame<Bytes>, BoxError>>;

/// An endpoint answering at once with a body fed by the test: each call hands the test its
/// sender.
fn streaming() -> (Endpoint, mpsc::UnboundedReceiver<Frames>) {
    let (calls, called) = mpsc::unbounded_channel();
    let endpoint = BoxService::new(service_fn(move |_: http::Request<()>| {
        let (frames, body) = mpsc::unbounded_channel();
        calls.send(frames).unwrap();
        async move { Ok::<_, Infallible>(http::Response::new(ChannelBody(body).boxed_unsync())) }
    }));
    (endpoint, called)
}

fn data() -> Result<Frame<Bytes>, BoxError> {
    Ok(Frame::data(Bytes::from_static(MESSAGE)))
}

/// [active, succeeded, failures, timeouts] of the endpoint at `address` (polylb's `failures`
/// count timeouts too).
fn counts(balancer: &polylb::Balancer, address: &str) -> [i64; 4] {
    let endpoint = &stats(balancer)[address];
    ["active", "succeeded", "failures", "timeouts"].map(|f| endpoint[f].as_i64().unwrap())
}

fn request() -> http::Request<()> {
    http::Request::new(())
}

type AtEnd = Balance<ServiceList<Vec<Endpoint>>, http::Request<()>, AtBodyEnd>;

/// A `Balance` over `endpoints` that reports at the body's end.
fn at_body_end(endpoints: Vec<Endpoint>, config: &str) -> AtEnd {
    Balance::builder(ServiceList::new(endpoints))
        .config(config)
        .report_at_body_end()
        .build()
        .unwrap()
}

/// One call through `balance`, to its response's headers.
async fn call<S>(balance: &mut S) -> S::Response
where
    S: Service<http::Request<()>>,
    S::Error: std::fmt::Debug,
{
    balance
        .ready()
        .await
        .unwrap()
        .call(request())
        .await
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_status_in_the_trailers_is_the_calls_outcome() {
    let endpoints = vec![
        unary("14", Duration::ZERO),
        unary("0", Duration::ZERO),
        unary("4", Duration::ZERO),
        unary("5", Duration::ZERO),
    ];
    let mut balance = at_body_end(endpoints, "loadbalance=roundrobin");
    for _ in 0..4 {
        let response = call(&mut balance).await;
        let body = response.into_body().collect().await.unwrap();
        assert!(body.trailers().is_some(), "the trailers reach the caller");
    }
    let balancer = balance.balancer();
    // UNAVAILABLE a failure, OK a success, DEADLINE_EXCEEDED a timeout (which polylb's
    // "failures" counts too), NOT_FOUND a success.
    assert_eq!(counts(balancer, "0"), [0, 0, 1, 0]);
    assert_eq!(counts(balancer, "1"), [0, 1, 0, 0]);
    assert_eq!(counts(balancer, "2"), [0, 0, 1, 1]);
    assert_eq!(counts(balancer, "3"), [0, 1, 0, 0]);

    // Reported at the headers (the default), the same UNAVAILABLE is a success: what this
    // mode fixes.
    let mut at_headers = Balance::builder(ServiceList::new(vec![unary("14", Duration::ZERO)]))
        .classify(grpc::classify)
        .build()
        .unwrap();
    let response = at_headers.ready().await.unwrap().call(request()).await;
    response.unwrap().into_body().collect().await.unwrap();
    assert_eq!(counts(at_headers.balancer(), "0"), [0, 1, 0, 0]);
}

#[tokio::test(start_paused = true)]
async fn a_stream_is_in_flight_for_its_life_and_reported_with_it() {
    let (stream, mut called) = streaming();
    let mut balance = Balance::builder(ServiceList::new(vec![stream]))
        .config("loadbalance=leastactive")
        .clock(tokio_clock)
        .report_at_body_end()
        .build()
        .unwrap();
    let response = call(&mut balance).await;
    let frames = called.recv().await.unwrap();
    let server = tokio::spawn(async move {
        for _ in 0..4 {
            frames.send(data()).unwrap();
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        frames.send(Ok(Frame::trailers(trailers("0")))).unwrap();
    });
    let balancer = balance.balancer().clone();
    let mut body = response.into_body();
    let mut messages = 0;
    while let Some(frame) = body.frame().await {
        if frame.unwrap().is_data() {
            messages += 1;
            assert_eq!(counts(&balancer, "0")[..2], [1, 0], "in flight");
        }
    }
    server.await.unwrap();
    assert_eq!(messages, 4);
    assert_eq!(counts(&balancer, "0"), [0, 1, 0, 0]);
    let mean_us = stats(&balancer)["0"]["mean_success_us"].as_i64().unwrap();
    // Four messages 500 ms apart: the stream lasted 2 s (virtual), plus the timer's rounding.
    assert!((2_000_000..=2_004_000).contains(&mean_us), "{mean_us} µs");
}

#[tokio::test(start_paused = true)]
async fn leastactive_sees_an_open_stream() {
    let (stream, mut called) = streaming();
    let endpoints = vec![stream, unary("0", Duration::from_millis(1))];
    let mut balance = at_body_end(endpoints, "loadbalance=leastactive");
    // Until the streaming endpoint is picked, unary calls land anywhere.
    let mut open = None;
    while open.is_none() {
        let response = call(&mut balance).await;
        match called.try_recv() {
            Ok(frames) => open = Some((frames, response.into_body())),
            Err(_) => drop(response.into_body().collect().await.unwrap()),
        }
    }
    let before = stats(balance.balancer())["1"]["selected"].as_i64().unwrap();
    for _ in 0..50 {
        let response = call(&mut balance).await;
        assert!(
            called.try_recv().is_err(),
            "a second stream to the busy endpoint"
        );
        response.into_body().collect().await.unwrap();
    }
    // The open stream holds its endpoint's place: every call goes to the other one.
    let after = stats(balance.balancer())["1"]["selected"].as_i64().unwrap();
    assert_eq!(after - before, 50);
    assert_eq!(counts(balance.balancer(), "0")[0], 1);
    let (frames, body) = open.unwrap();
    drop(frames);
    body.collect().await.unwrap();
    assert_eq!(counts(balance.balancer(), "0")[0], 0);
}

#[tokio::test(start_paused = true)]
async fn a_body_dropped_midway_is_a_cancel() {
    let (stream, mut called) = streaming();
    let mut balance = Balance::builder(ServiceList::new(vec![stream]))
        .report_at_body_end()
        .build()
        .unwrap();
    let response = call(&mut balance).await;
    let frames = called.recv().await.unwrap();
    frames.send(data()).unwrap();
    let mut body = response.into_body();
    assert!(body.frame().await.unwrap().unwrap().is_data());
    assert_eq!(counts(balance.balancer(), "0"), [1, 0, 0, 0]);
    drop(body);
    // A cancel ends the call and is neither a success nor a failure.
    assert_eq!(counts(balance.balancer(), "0"), [0, 0, 0, 0]);
    assert_eq!(stats(balance.balancer())["0"]["selected"], 1);
}

#[tokio::test(start_paused = true)]
async fn a_body_error_is_a_failure() {
    let (stream, mut called) = streaming();
    let mut balance = Balance::builder(ServiceList::new(vec![stream]))
        .report_at_body_end()
        .build()
        .unwrap();
    let response = call(&mut balance).await;
    let frames = called.recv().await.unwrap();
    frames.send(data()).unwrap();
    frames.send(Err("stream reset".into())).unwrap();
    let error = response.into_body().collect().await.unwrap_err();
    assert_eq!(
        error.to_string(),
        "stream reset",
        "the caller gets the body's error"
    );
    assert_eq!(counts(balance.balancer(), "0"), [0, 0, 1, 0]);
}

#[tokio::test(start_paused = true)]
async fn a_call_is_reported_once_however_often_its_body_is_polled() {
    let (stream, mut called) = streaming();
    let mut balance = Balance::builder(ServiceList::new(vec![stream]))
        .report_at_body_end()
        .build()
        .unwrap();
    let response = call(&mut balance).await;
    let frames = called.recv().await.unwrap();
    frames.send(Ok(Frame::trailers(trailers("14")))).unwrap();
    drop(frames);
    let mut body = response.into_body();
    assert!(body.frame().await.unwrap().unwrap().is_trailers());
    // Reported at the trailers, before the end is polled for.
    assert_eq!(counts(balance.balancer(), "0"), [0, 0, 1, 0]);
    for _ in 0..3 {
        assert!(body.frame().await.is_none());
    }
    drop(body);
    assert_eq!(counts(balance.balancer(), "0"), [0, 0, 1, 0]);
    let endpoint = &stats(balance.balancer())["0"];
    assert_eq!(endpoint["selected"], 1, "{endpoint}");
}

#[tokio::test(start_paused = true)]
async fn a_reader_stopping_at_is_end_stream_ends_the_call() {
    // Full is at its end after its one frame; a reader that checks `is_end_stream` need not
    // poll again (nor then drop the body at once).
    let full = BoxService::new(service_fn(|_: http::Request<()>| async {
        let body = Full::new(Bytes::from_static(MESSAGE)).map_err(|e| match e {});
        Ok::<_, Infallible>(http::Response::new(body.boxed_unsync()))
    }));
    let mut balance = Balance::builder(ServiceList::new(vec![full]))
        .report_at_body_end()
        .build()
        .unwrap();
    let response = call(&mut balance).await;
    let mut body = response.into_body();
    assert!(!body.is_end_stream());
    assert_eq!(counts(balance.balancer(), "0"), [1, 0, 0, 0]);
    assert!(body.frame().await.unwrap().unwrap().is_data());
    assert!(body.is_end_stream());
    assert_eq!(counts(balance.balancer(), "0"), [0, 1, 0, 0]);
    drop(body);
    assert_eq!(counts(balance.balancer(), "0"), [0, 1, 0, 0]);
}

#[tokio::test(start_paused = true)]
async fn final_headers_are_reported_at_once() {
    let endpoints = vec![
        headers_only(200, Some("14")), // trailers-only UNAVAILABLE
        headers_only(503, None),       // a proxy's answer
        headers_only(200, Some("0")),  // trailers-only OK
        headers_only(200, None),       // an empty body
    ];
    let mut balance = at_body_end(endpoints, "loadbalance=roundrobin");
    let mut bodies = Vec::new();
    for _ in 0..4 {
        let response = call(&mut balance).await;
        bodies.push(response.into_body());
    }
    // The bodies are not read, yet every call has ended, judged by grpc::classify (the
    // default here).
    let balancer = balance.balancer();
    assert_eq!(counts(balancer, "0"), [0, 0, 1, 0]);
    assert_eq!(counts(balancer, "1"), [0, 0, 1, 0]);
    assert_eq!(counts(balancer, "2"), [0, 1, 0, 0]);
    assert_eq!(counts(balancer, "3"), [0, 1, 0, 0]);
    drop(bodies);
    assert_eq!(counts(balancer, "0"), [0, 0, 1, 0]);
    assert_eq!(counts(balancer, "3"), [0, 1, 0, 0]);
}

#[tokio::test]
async fn an_endpoint_error_is_a_failure_and_the_classifier_can_be_replaced() {
    let refusing = BoxService::new(service_fn(|_: http::Request<()>| async {
        Err::<http::Response<TestBody>, _>(std::io::Error::from(
            std::io::ErrorKind::ConnectionRefused,
        ))
    }));
    let mut balance = Balance::builder(ServiceList::new(vec![refusing]))
        .report_at_body_end()
        .build()
        .unwrap();
    let error = balance.ready().await.unwrap().call(request()).await;
    assert!(error
        .unwrap_err()
        .downcast_ref::<std::io::Error>()
        .is_some());
    assert_eq!(counts(balance.balancer(), "0"), [0, 0, 1, 0]);

    // A classifier of one's own judges the headers; the trailers still decide at the end.
    let mut balance = Balance::builder(ServiceList::new(vec![
        headers_only(503, None),
        unary("14", Duration::ZERO),
    ]))
    .config("loadbalance=roundrobin")
    .classify(|_: &Result<http::Response<TestBody>, Infallible>| polylb::Outcome::Success)
    .report_at_body_end()
    .build()
    .unwrap();
    for _ in 0..2 {
        let response = call(&mut balance).await;
        response.into_body().collect().await.unwrap();
    }
    assert_eq!(counts(balance.balancer(), "0"), [0, 1, 0, 0]);
    assert_eq!(counts(balance.balancer(), "1"), [0, 0, 1, 0]);
}

#[tokio::test(start_paused = true)]
async fn a_server_failing_in_its_trailers_is_ejected() {
    let endpoints = vec![
        unary("0", Duration::ZERO),
        unary("14", Duration::ZERO),
        unary("0", Duration::ZERO),
    ];
    let mut balance = at_body_end(endpoints, "loadbalance=p2c&outlier.consecutiveFailures=5");
    for _ in 0..300 {
        let response = call(&mut balance).await;
        response.into_body().collect().await.unwrap();
    }
    let unavailable = &stats(balance.balancer())["1"];
    assert_eq!(unavailable["failures"], 5, "{unavailable}");
    assert_eq!(unavailable["succeeded"], 0, "{unavailable}");
    assert_eq!(unavailable["ejected"], true, "{unavailable}");
}

#[tokio::test(start_paused = true)]
async fn peakewma_avoids_a_server_failing_fast_in_its_trailers() {
    // The failing server answers at once, the others in 5 ms: were its failures successes, it
    // would look the fastest and get most calls.
    let endpoints = vec![
        unary("0", Duration::from_millis(5)),
        unary("0", Duration::from_millis(5)),
        unary("14", Duration::ZERO),
    ];
    let mut balance = Balance::builder(ServiceList::new(endpoints))
        .config("loadbalance=peakewma")
        .clock(tokio_clock)
        .report_at_body_end()
        .build()
        .unwrap();
    let calls = 300;
    for _ in 0..calls {
        let response = call(&mut balance).await;
        response.into_body().collect().await.unwrap();
    }
    let unavailable = &stats(balance.balancer())["2"];
    let taken = unavailable["selected"].as_i64().unwrap();
    assert!(taken < calls / 10, "{unavailable}");
    assert_eq!(unavailable["succeeded"], 0, "{unavailable}");
}

#[tokio::test(start_paused = true)]
async fn works_behind_tower_buffer() {
    let balance = Balance::builder(ServiceList::new(vec![unary("14", Duration::ZERO)]))
        .report_at_body_end()
        .build()
        .unwrap();
    let balancer = balance.balancer().clone();
    let mut shared = tower::buffer::Buffer::new(balance, 16);
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let mut service = shared.clone();
        tasks.push(tokio::spawn(async move {
            let response = service.ready().await.unwrap().call(request()).await;
            response.unwrap().into_body().collect().await.unwrap();
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    shared.ready().await.unwrap();
    assert_eq!(counts(&balancer, "0"), [0, 0, 8, 0]);
}

#[tokio::test(start_paused = true)]
async fn a_grpc_body_ending_without_a_status_is_a_failure() {
    // The same body (a message, then its end with no trailers) as a gRPC response, a
    // gRPC-Web response (its trailers are in the body) and a plain HTTP response.
    let cases = [
        (Some("application/grpc"), [0, 0, 1, 0]),
        (Some("application/grpc+proto"), [0, 0, 1, 0]),
        (Some("application/grpc-web+proto"), [0, 1, 0, 0]),
        (Some("text/plain"), [0, 1, 0, 0]),
        (None, [0, 1, 0, 0]),
    ];
    for (content_type, expected) in cases {
        let endpoint = service_fn(move |_: http::Request<()>| async move {
            let mut response = http::Response::builder();
            if let Some(content_type) = content_type {
                response = response.header("content-type", content_type);
            }
            let (frames, body) = mpsc::unbounded_channel();
            frames.send(data()).unwrap();
            Ok::<_, Infallible>(response.body(ChannelBody(body)).unwrap())
        });
        let mut balance = Balance::builder(ServiceList::new([endpoint]))
            .report_at_body_end()
            .build()
            .unwrap();
        let response = call(&mut balance).await;
        let body = response.into_body().collect().await.unwrap();
        assert!(body.trailers().is_none());
        assert_eq!(
            counts(balance.balancer(), "0"),
            expected,
            "{content_type:?}"
        );
    }
}

/// A body whose end is learned after its last frame was returned, as hyper's HTTP/2 body learns
/// it from an END_STREAM or RST_STREAM(NO_ERROR) that arrives after its last data:
/// `is_end_stream` turns true without another poll.
struct LateEnd {
    sent: bool,
    ended: Arc<AtomicBool>,
}

impl Body for LateEnd {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if !self.sent {
            self.sent = true;
            Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(MESSAGE)))))
        } else if self.ended.load(Ordering::SeqCst) {
            Poll::Ready(None)
        } else {
            Poll::Pending
        }
    }

    fn is_end_stream(&self) -> bool {
        self.sent && self.ended.load(Ordering::SeqCst)
    }
}

#[tokio::test(start_paused = true)]
async fn a_body_whose_end_is_learned_between_polls_ends_the_call() {
    let ended = Arc::new(AtomicBool::new(false));
    let body_ended = ended.clone();
    let endpoint = service_fn(move |_: http::Request<()>| {
        let ended = body_ended.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            Ok::<_, Infallible>(http::Response::new(LateEnd { sent: false, ended }))
        }
    });
    let mut balance = Balance::builder(ServiceList::new([endpoint]))
        .clock(tokio_clock)
        .report_at_body_end()
        .build()
        .unwrap();
    let response = call(&mut balance).await;
    let mut body = response.into_body();
    assert!(body.frame().await.unwrap().unwrap().is_data());
    assert!(!body.is_end_stream());
    assert_eq!(counts(balance.balancer(), "0"), [1, 0, 0, 0]);
    tokio::time::sleep(Duration::from_millis(400)).await;
    ended.store(true, Ordering::SeqCst); // the end arrives
                                         // A reader stopping at `is_end_stream` (hyper's body writers) polls no more: the call ends
                                         // here, a success with the body's life, not a cancel when the body is dropped.
    assert!(body.is_end_stream());
    assert_eq!(counts(balance.balancer(), "0"), [0, 1, 0, 0]);
    drop(body);
    let endpoint = &stats(balance.balancer())["0"];
    assert_eq!(endpoint["selected"], 1, "{endpoint}");
    assert_eq!(endpoint["succeeded"], 1, "{endpoint}");
    assert_eq!(endpoint["mean_success_us"], 500_000, "{endpoint}");
}

#[tokio::test(start_paused = true)]
async fn the_timeout_is_for_the_headers_and_the_body_may_take_longer() {
    let endpoints = vec![unary("0", Duration::from_millis(500)), slow_trailers()];
    let mut balance = Balance::builder(ServiceList::new(endpoints))
        .config("loadbalance=roundrobin")
        .clock(tokio_clock)
        .timeout(Duration::from_millis(100))
        .report_at_body_end()
        .build()
        .unwrap();
    let balancer = balance.balancer().clone();
    let mut late = 0;
    let mut streams = 0;
    for _ in 0..2 {
        match balance.ready().await.unwrap().call(request()).await {
            // The unary server's headers come after 500 ms.
            Err(error) => {
                assert!(matches!(
                    error.downcast_ref(),
                    Some(polylb_tower::Error::Timeout(_))
                ));
                late += 1;
            }
            // The stream's headers come at once, its trailers 1 s later: not a timeout.
            Ok(response) => {
                assert_eq!(counts(&balancer, "1")[0], 1, "in flight");
                let trailers = response
                    .into_body()
                    .collect()
                    .await
                    .unwrap()
                    .trailers()
                    .cloned();
                assert_eq!(trailers.unwrap()["grpc-status"], "0");
                streams += 1;
            }
        }
    }
    assert_eq!((late, streams), (1, 1));
    assert_eq!(counts(&balancer, "0"), [0, 0, 1, 1]);
    assert_eq!(counts(&balancer, "1"), [0, 1, 0, 0]);
}

/// Headers and a message at once, `grpc-status: 0` in the trailers 1 s later.
fn slow_trailers() -> Endpoint {
    BoxService::new(service_fn(|_: http::Request<()>| async {
        let body = Full::new(Bytes::from_static(MESSAGE))
            .map_err(|e| match e {})
            .with_trailers(async {
                tokio::time::sleep(Duration::from_secs(1)).await;
                Some(Ok(trailers("0")))
            });
        Ok::<_, Infallible>(http::Response::new(body.boxed_unsync()))
    }))
}
