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
