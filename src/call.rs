//! [`Call`]: one call from select to report, timed by the library and reported exactly once.

use crate::{Balancer, Outcome, Status};
use std::time::Instant;

/// One call in flight, made by [`Balancer::call`] or [`Balancer::call_among`]: the invoker is
/// selected when the `Call` is made, and the call is reported exactly once, with the time since
/// the select, by [`finish`](Call::finish) — or as [`Outcome::Cancelled`] when the `Call` is
/// dropped unfinished (an early return, a `?`, a panic), so no pick stays counted in flight.
///
/// ```
/// use polylb::{Balancer, Invoker, Outcome};
///
/// let lb = Balancer::new("loadbalance=leastactive").unwrap();
/// lb.update(&[Invoker::new(1, "10.0.0.1:20880"), Invoker::new(2, "10.0.0.2:20880")]).unwrap();
/// let say_hello = lb.method("sayHello").unwrap();
///
/// let call = lb.call(say_hello, b"").unwrap();
/// // ... send the request to invoker call.id(), then judge the answer (docs/outcomes.md):
/// call.finish(Outcome::Success).unwrap();
/// ```
///
/// Keep the `Call` in a variable for the length of the call: `lb.call(m, key)?.id()` drops it at
/// the end of the statement, which reports the call cancelled before it is made.
///
/// The time is read with [`Instant`] (monotonic); `report` gets the library's clock
/// (`now_us` = 0). Callers that time calls themselves, report from elsewhere (a callback, another
/// thread) or run in virtual time use [`Balancer::select`] and [`Balancer::report`] instead.
#[must_use = "a Call dropped at once is reported as cancelled; keep it until the call ends"]
pub struct Call<'a> {
    balancer: &'a Balancer,
    method: u32,
    id: u64,
    started: Instant,
    /// Cleared by `finish`, so that `drop` reports only a call nobody finished.
    pending: bool,
}

impl<'a> Call<'a> {
    fn new(balancer: &'a Balancer, method: u32, id: u64) -> Call<'a> {
        // Started after the select: the elapsed time is the call's, which strategies compare.
        Call {
            balancer,
            method,
            id,
            started: Instant::now(),
            pending: true,
        }
    }

    /// The selected invoker's id.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The method the call was selected for.
    pub fn method(&self) -> u32 {
        self.method
    }

    /// Reports the call with `outcome` and the time since the select. Taking `self` makes a
    /// second report impossible.
    pub fn finish(mut self, outcome: Outcome) -> Result<(), Status> {
        self.pending = false;
        self.report(outcome)
    }

    fn report(&self, outcome: Outcome) -> Result<(), Status> {
        let elapsed_us = i64::try_from(self.started.elapsed().as_micros()).unwrap_or(i64::MAX);
        self.balancer
            .report(self.method, self.id, elapsed_us, outcome, 0)
    }
}

impl Drop for Call<'_> {
    fn drop(&mut self) {
        if self.pending {
            // Nothing is known of how the call went: only its in-flight count is undone. The
            // method and the elapsed time are valid, so the report cannot fail.
            let _ = self.report(Outcome::Cancelled);
        }
    }
}

impl std::fmt::Debug for Call<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Call")
            .field("method", &self.method)
            .field("id", &self.id)
            .field("pending", &self.pending)
            .finish()
    }
}

impl Balancer {
    /// Selects an invoker of the whole set for one call of `method` (as [`select`] at the
    /// library's clock) and returns the [`Call`] that reports it.
    ///
    /// [`select`]: Balancer::select
    #[inline]
    pub fn call(&self, method: u32, key: &[u8]) -> Result<Call<'_>, Status> {
        let id = self.select(method, key, 0)?;
        Ok(Call::new(self, method, id))
    }

    /// [`call`](Balancer::call) among `candidates` (empty: the whole set) minus `excluded` (the
    /// invokers a failover already tried), as [`select_among`](Balancer::select_among).
    #[inline]
    pub fn call_among(
        &self,
        method: u32,
        key: &[u8],
        candidates: &[u64],
        excluded: &[u64],
    ) -> Result<Call<'_>, Status> {
        let id = self.select_among(method, key, candidates, excluded, 0)?;
        Ok(Call::new(self, method, id))
    }
}
