//! Outcomes of gRPC calls made over HTTP/2 (tonic's `Channel`, or any endpoint answering
//! `http::Response`s): [`classify`] for [`Builder::classify`](crate::Builder::classify).
//!
//! A gRPC endpoint answers an error status in an `Ok` response, not in an `Err`: tonic's
//! `Channel` resolves with `Ok(http::Response)` for `UNAVAILABLE`, `INTERNAL` and every other
//! status, which the default classifier (`Ok` a success) counts as successes: a server failing
//! every call would then never be ejected (`outlier.*`) and, failing fast, would look the
//! fastest to `peakewma`.
//!
//! The status is in the response's headers only when the server answered with no message
//! ("trailers-only": what tonic, grpc-go and grpc-java send for a unary call that fails before
//! answering). A status that comes in the trailers, after the headers and messages (every
//! successful unary reply, a stream that fails midway, a server that sent its headers first),
//! is seen only by a `Balance` built with
//! [`report_at_body_end`](crate::Builder::report_at_body_end), which reports each call when
//! its body ends, by [`outcome_of_trailers`], and uses [`classify`] for the headers by
//! default. Reported at the headers (the default), the response has resolved, and has been
//! reported, before the trailers arrive.

use http::{HeaderMap, Response, StatusCode};
use polylb::Outcome;

/// The outcome of a gRPC response, read when it resolves (docs/outcomes.md's table):
///
/// - `Err` (the connection refused or reset, the endpoint gone): [`Outcome::Failure`];
/// - a `grpc-status` header: by [`outcome_of_code`] (`UNAVAILABLE`, `INTERNAL`, ... a failure,
///   `DEADLINE_EXCEEDED` a timeout, `NOT_FOUND` and the service's other own errors a success);
/// - no `grpc-status` header and an HTTP error status (a proxy's answer): 504 a timeout, other
///   5xx, 408 and 429 a failure, other statuses a success;
/// - otherwise (HTTP 200, the status to come in the trailers): [`Outcome::Success`].
///
/// A deadline enforced on the client side (tonic's `Endpoint::timeout`, tower's `Timeout`)
/// surfaces as an `Err`, a failure here: wrap this in a classifier of your own to call it a
/// timeout.
///
/// ```
/// use polylb::Outcome;
/// use polylb_tower::{grpc, Balance};
/// use tower::{discover::ServiceList, service_fn, Service, ServiceExt};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
/// // A server answering UNAVAILABLE as gRPC does: HTTP 200 with the status in its headers.
/// let unavailable = service_fn(|_: http::Request<()>| async {
///     let response = http::Response::builder().header("grpc-status", "14").body(())?;
///     Ok::<_, http::Error>(response)
/// });
/// let mut balance = Balance::builder(ServiceList::new([unavailable]))
///     .config("loadbalance=p2c&outlier.consecutiveFailures=5")
///     .classify(grpc::classify)
///     .build()?;
/// balance.ready().await?.call(http::Request::new(())).await?;
/// assert!(balance.balancer().stats_json(0).contains("\"failures\":1"));
/// # assert_eq!(grpc::outcome_of_code(4, ""), Outcome::Timeout);
/// # Ok(())
/// # }
/// ```
pub fn classify<B, E>(result: &Result<Response<B>, E>) -> Outcome {
    match result {
        Err(_) => Outcome::Failure,
        Ok(response) => outcome_of_headers(response.status(), response.headers()),
    }
}

/// The outcome of a gRPC response by its HTTP status and headers: see [`classify`].
pub fn outcome_of_headers(status: StatusCode, headers: &HeaderMap) -> Outcome {
    if let Some(outcome) = outcome_of_trailers(headers) {
        return outcome;
    }
    match status.as_u16() {
        504 => Outcome::Timeout,
        408 | 429 | 500..=599 => Outcome::Failure,
        _ => Outcome::Success,
    }
}

/// The outcome of the `grpc-status` in a response's trailers (or in its headers, for a
/// trailers-only response), by [`outcome_of_code`] with the `grpc-message` beside it; a status
/// that is not a number a failure (tonic reads it as `UNKNOWN`); `None` without a
/// `grpc-status`.
///
/// ```
/// use polylb::Outcome;
/// use polylb_tower::grpc;
///
/// let mut trailers = http::HeaderMap::new();
/// assert_eq!(grpc::outcome_of_trailers(&trailers), None);
/// trailers.insert("grpc-status", http::HeaderValue::from_static("14"));
/// assert_eq!(grpc::outcome_of_trailers(&trailers), Some(Outcome::Failure));
/// ```
pub fn outcome_of_trailers(trailers: &HeaderMap) -> Option<Outcome> {
    let code = trailers.get("grpc-status")?;
    let message = trailers
        .get("grpc-message")
        .and_then(|m| m.to_str().ok())
        .unwrap_or("");
    Some(
        match code.to_str().ok().and_then(|c| c.trim().parse().ok()) {
            Some(code) => outcome_of_code(code, message),
            // tonic reads a status it cannot parse as UNKNOWN.
            None => Outcome::Failure,
        },
    )
}

/// The outcome of a gRPC status code that the server sent (docs/outcomes.md): `OK` and the
/// errors of the service's own (`INVALID_ARGUMENT`, `NOT_FOUND`, `ALREADY_EXISTS`,
/// `PERMISSION_DENIED`, `FAILED_PRECONDITION`, `ABORTED`, `OUT_OF_RANGE`, `UNAUTHENTICATED`) a
/// success, as is a `RESOURCE_EXHAUSTED` whose `message` is gRPC's size check ("larger than
/// max", "exceeds maximum size"); `DEADLINE_EXCEEDED` a timeout; `CANCELLED` (sent by the
/// server: a cancel of your own drops the call, which is reported as a cancel), `UNKNOWN`,
/// `RESOURCE_EXHAUSTED`, `UNIMPLEMENTED`, `INTERNAL`, `UNAVAILABLE`, `DATA_LOSS` and codes
/// gRPC does not define a failure.
pub fn outcome_of_code(code: i32, message: &str) -> Outcome {
    match code {
        0 | 3 | 5 | 6 | 7 | 9 | 10 | 11 | 16 => Outcome::Success,
        4 => Outcome::Timeout,
        8 if message.contains("larger than max") || message.contains("exceeds maximum size") => {
            Outcome::Success
        }
        _ => Outcome::Failure,
    }
}
