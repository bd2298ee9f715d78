//! polylb: load balancing for RPC clients.
//!
//! Apache Dubbo's six strategies (`random`, `roundrobin`, `leastactive`, `shortestresponse`,
//! `consistenthash`, `adaptive`) behave exactly as Dubbo's do; newer strategies get new names.
//! One [`Balancer`] holds one set of invokers (providers) and picks one per call:
//!
//! ```
//! use polylb::{Balancer, Invoker, Outcome};
//!
//! let lb = Balancer::new("loadbalance=leastactive").unwrap();
//! lb.update(&[
//!     Invoker::new(1, "10.0.0.1:20880"),
//!     Invoker::new(2, "10.0.0.2:20880").weight(200),
//! ]).unwrap();
//! let say_hello = lb.method("sayHello").unwrap();
//! let id = lb.select(say_hello, b"", 0).unwrap();
//! // ... make the call, then:
//! lb.report(say_hello, id, 1_250, Outcome::Success, 0).unwrap();
//! ```
//!
//! Or let a [`Call`] time the call and report it exactly once: `let call = lb.call(say_hello,
//! b"")?;`, then, after the request, `call.finish(Outcome::Success)?` or
//! `call.finish_with(&result)?` (dropped unfinished, it is reported cancelled, or failed while a
//! panic unwinds it).
//!
//! Times are Unix microseconds passed by the caller (`now_us`; 0 = the library's clock), so
//! simulations and tests run in virtual time.

#![warn(missing_docs)]
// Every `unsafe` says why it holds (`// SAFETY:`), as the C ABI's exports do; clippy keeps it so.
#![warn(clippy::undocumented_unsafe_blocks)]

mod balancer;
mod call;
mod clock;
mod config;
mod error;
pub mod ffi;
mod filter;
mod fork;
mod hint;
mod invoker;
mod once_box;
mod rng;
mod scratch;
mod stats;
mod strategy;
mod weight;

/// Dubbo's RoundRobinLoadBalance, the model the integration tests use, for the crate's own.
#[cfg(test)]
#[path = "../tests/common/dubbo_round_robin.rs"]
#[allow(dead_code)] // `ambiguous` and `recycle_edges`: no crate test picks at the library's clock
mod dubbo_round_robin;

pub use balancer::{Balancer, MAX_METHODS};
pub use call::Call;
pub use clock::wall_clock_us;
pub use config::{
    Config, OrcaConfig, OutlierConfig, PeakEwmaConfig, SlowStartConfig, SubsetConfig,
};
pub use error::{Error, Status};
pub use invoker::{Invoker, Outcome};
pub use strategy::{LoadReport, StrategyKind};
pub use weight::{effective_weight, warmup_weight};
