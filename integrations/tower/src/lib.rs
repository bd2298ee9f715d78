//! polylb as a tower [`Service`](tower::Service): [`Balance`] sends each request to an
//! endpoint that polylb picks among those a tower [`Discover`](tower::discover::Discover)
//! yields, by any of polylb's strategies (Dubbo's six, exact, and the latency-aware ones), and
//! reports each response's outcome and latency back to it.
//!
//! ```
//! use polylb_tower::Balance;
//! use tower::{discover::ServiceList, service_fn, Service, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! let endpoints = (0..3).map(|n| {
//!     service_fn(move |x: u32| async move { Ok::<_, std::convert::Infallible>(x + n) })
//! });
//! let mut balance = Balance::builder(ServiceList::new(endpoints))
//!     .config("loadbalance=peakewma")
//!     .build()?;
//! let answer = balance.ready().await?.call(40).await?;
//! assert!((40..43).contains(&answer));
//! println!("{}", balance.balancer().stats_json(0));
//! # Ok(())
//! # }
//! ```
//!
//! See [`Balance`] for how readiness, discovery and failing endpoints are handled, and
//! [`Builder`] for describing endpoints and requests to polylb.
//!
//! A call is reported when its response future resolves. For endpoints answering
//! `http::Response`s (tonic's `Channel`, hyper's client), that is at the headers, before a gRPC
//! status in the trailers and before a stream's end: [`Builder::report_at_body_end`] reports
//! each call when its response body ends instead ([`ReportingBody`]), by the trailers'
//! `grpc-status` ([`grpc`]), with the call in flight and timed until then:
//!
//! ```no_run
//! # use polylb_tower::Balance;
//! # use tower::discover::ServiceList;
//! # fn channels() -> Vec<tower::util::BoxService<http::Request<()>, http::Response<http_body_util::Empty<bytes::Bytes>>, std::convert::Infallible>> { Vec::new() }
//! # fn main() -> Result<(), polylb_tower::Error> {
//! // `channels()`: services answering `http::Response<B>`, such as tonic `Channel`s.
//! let balance = Balance::builder(ServiceList::new(channels()))
//!     .config("loadbalance=peakewma&outlier.consecutiveFailures=5")
//!     .report_at_body_end()
//!     .build()?;
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs)]

mod balance;
mod body;
mod builder;
mod endpoints;
mod error;
mod future;
pub mod grpc;
mod ids;
mod report;

pub use balance::{Balance, KeyOf, MethodOf};
pub use body::{AtBodyEnd, AtResponse, ReportingBody};
pub use builder::Builder;
pub use endpoints::Describe;
pub use error::{BoxError, Error};
pub use future::{Classifier, ResponseFuture};
