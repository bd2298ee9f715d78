//! [`Call`]: one call from select to report, timed by the library and reported exactly once.

use crate::{Balancer, Outcome, Status};
use std::time::Instant;

/// One call in flight, made by [`Balancer::call`] or [`Balancer::call_among`]: the invoker is
/// selected when the `Call` is made, and the call is reported exactly once, with the time since
/// the select, by [`finish`](Call::finish) or [`finish_with`](Call::finish_with) (the call's
/// `Result`: an error is a failure, as an exception leaving Python's `with lb.call()` block
/// is). A `Call` dropped unfinished is reported too, so no pick stays counted in flight: as a
/// failure while a panic that began after it was made unwinds it, else (an early return, a `?`)
/// as [`Outcome::Cancelled`], no verdict on the provider — so pass an error you return with `?`
/// to `finish_with` first.
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
///
/// # fn send(_: u64) -> std::io::Result<()> { Ok(()) }
/// let call = lb.call(say_hello, b"").unwrap();
/// let sent = send(call.id()); // an error of the service's own is an answer: make it Ok
/// call.finish_with(&sent).unwrap(); // Ok: success; Err: failure (an io::Error TimedOut: timeout)
/// ```
///
/// Keep the `Call` in a variable for the length of the call: `lb.call(m, key)?.id()` drops it at
/// the end of the statement, which reports the call cancelled before it is made. A `Call` is
/// `Send`, so an async task may hold it across `.await`s and finish it on another worker thread;
/// but whether a panic is unwinding it is read from the thread that drops it, and a future dropped
/// at an `.await` (a timeout around the whole task, a cancel) drops it as cancelled — so time the
/// request out inside the task and pass the result to [`finish_with`](Call::finish_with) (whose
/// documentation shows a deadline's `Result` of a `Result`) or [`finish`](Call::finish). A
/// future that must be `'static` holds [`into_owned`](Call::into_owned)'s call.
///
/// The time is read with [`Instant`] (monotonic); `report` gets the library's clock
/// (`now_us` = 0). Callers that time calls themselves, report from elsewhere (a callback, another
/// thread) or run in virtual time use [`Balancer::select`] and [`Balancer::report`] instead.
#[must_use = "a Call dropped at once is reported as cancelled; keep it until the call ends"]
pub struct Call<'a> {
    balancer: Handle<'a>,
    method: u32,
    id: u64,
    started: Instant,
    /// Cleared by `finish`, so that `drop` reports only a call nobody finished.
    pending: bool,
    /// Whether a panic was unwinding when the call was made: only a panic that began during the
    /// call is its failure.
    panicking: bool,
}

/// The balancer a call reports to: borrowed, or (after [`Call::into_owned`]) a clone.
enum Handle<'a> {
    Borrowed(&'a Balancer),
    Owned(Balancer),
}

impl Handle<'_> {
    fn get(&self) -> &Balancer {
        match self {
            Handle::Borrowed(b) => b,
            Handle::Owned(b) => b,
        }
    }
}

impl<'a> Call<'a> {
    fn new(balancer: &'a Balancer, method: u32, id: u64) -> Call<'a> {
        // Started after the select: the elapsed time is the call's, which strategies compare.
        Call {
            balancer: Handle::Borrowed(balancer),
            method,
            id,
            started: Instant::now(),
            pending: true,
            panicking: std::thread::panicking(),
        }
    }

    /// The same call, holding a clone of the balancer (one reference count) instead of a
    /// borrow: for a future that must be `'static`, as tower's `Service::call` returns or
    /// `tokio::spawn` takes. The call is still reported exactly once, by whichever ends it.
    ///
    /// ```
    /// # use polylb::{Balancer, Call, Invoker, Outcome};
    /// # let lb = Balancer::new("loadbalance=leastactive").unwrap();
    /// # lb.update(&[Invoker::new(1, "10.0.0.1:20880")]).unwrap();
    /// fn start(lb: &Balancer) -> Call<'static> {
    ///     lb.call(0, b"").unwrap().into_owned() // outlives the borrow of `lb`
    /// }
    /// let call = start(&lb);
    /// std::thread::spawn(move || call.finish(Outcome::Success)).join().unwrap().unwrap();
    /// ```
    pub fn into_owned(mut self) -> Call<'static> {
        // Ended here without a report: the returned call carries it.
        self.pending = false;
        Call {
            balancer: Handle::Owned(self.balancer.get().clone()),
            method: self.method,
            id: self.id,
            started: self.started,
            pending: true,
            panicking: self.panicking,
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

    /// Reports the call by its result: `Ok` a success, `Err` a failure — a timeout when the
    /// error is, or wraps (its `source()` chain, or an `io::Error`'s inner error), an
    /// [`std::io::Error`] of kind `TimedOut` or `WouldBlock` (what a socket read past
    /// `set_read_timeout` gives on Unix). Any error type is accepted, but only an `io::Error` or
    /// a `Box<dyn Error (+ Send + Sync)>` is looked into: for an error type of your own (one
    /// that wraps an `io::Error` as its source, as thiserror's do) use
    /// [`finish_with_error`](Call::finish_with_error). An error the service answered with (not
    /// found, invalid argument) is an answer, a success: map it to `Ok` first, or use
    /// [`finish`](Call::finish) (docs/outcomes.md).
    ///
    /// A `Result` of a `Result` is judged by its outer layer alone: `tokio::time::timeout`'s
    /// (`Result<Result<T, E>, Elapsed>`) would make an expired deadline a failure and an error
    /// within it a success. Match it:
    ///
    /// ```
    /// # use polylb::{Balancer, Invoker, Outcome};
    /// # let lb = Balancer::new("loadbalance=leastactive").unwrap();
    /// # lb.update(&[Invoker::new(1, "10.0.0.1:20880")]).unwrap();
    /// # struct Elapsed; // tokio::time::error::Elapsed
    /// # fn send_with_deadline(_: u64) -> Result<std::io::Result<()>, Elapsed> { Err(Elapsed) }
    /// let call = lb.call(0, b"").unwrap();
    /// // let answer = tokio::time::timeout(deadline, send(call.id())).await;
    /// let answer = send_with_deadline(call.id());
    /// match answer {
    ///     Err(_elapsed) => call.finish(Outcome::Timeout),
    ///     Ok(result) => call.finish_with(&result),
    /// }
    /// .unwrap();
    /// assert!(lb.stats_json(0).contains("\"timeouts\":1"));
    /// ```
    pub fn finish_with<T, E: 'static>(self, result: &Result<T, E>) -> Result<(), Status> {
        let outcome = match result {
            Ok(_) => Outcome::Success,
            Err(e) if timed_out(e) => Outcome::Timeout,
            Err(_) => Outcome::Failure,
        };
        self.finish(outcome)
    }

    /// [`finish_with`](Call::finish_with) for any error type that implements
    /// [`std::error::Error`]: a `TimedOut` or `WouldBlock` `io::Error` anywhere in its chain
    /// makes the call a timeout. (`anyhow::Error` is not an `Error` itself: convert it with
    /// `Box::<dyn Error + Send + Sync>::from` and use `finish_with`.)
    pub fn finish_with_error<T, E: std::error::Error + 'static>(
        self,
        result: &Result<T, E>,
    ) -> Result<(), Status> {
        let outcome = match result {
            Ok(_) => Outcome::Success,
            Err(e) if chain_timed_out(e) => Outcome::Timeout,
            Err(_) => Outcome::Failure,
        };
        self.finish(outcome)
    }

    fn report(&self, outcome: Outcome) -> Result<(), Status> {
        let elapsed_us = i64::try_from(self.started.elapsed().as_micros()).unwrap_or(i64::MAX);
        self.balancer
            .get()
            .report(self.method, self.id, elapsed_us, outcome, 0)
    }
}

/// Whether `e` is, or wraps, an I/O timeout (see [`Call::finish_with`]).
fn timed_out<E: 'static>(e: &E) -> bool {
    use std::error::Error;
    let any = e as &dyn std::any::Any;
    let first: &(dyn Error + 'static) = if let Some(io) = any.downcast_ref::<std::io::Error>() {
        io
    } else if let Some(boxed) = any.downcast_ref::<Box<dyn Error + Send + Sync>>() {
        boxed.as_ref()
    } else if let Some(boxed) = any.downcast_ref::<Box<dyn Error>>() {
        boxed.as_ref()
    } else {
        return false;
    };
    chain_timed_out(first)
}

/// Whether `e` or an error it wraps is an I/O timeout. An `io::Error` made from another error
/// (`io::Error::other(e)`) reports `e`'s source as its own, skipping `e`: its inner error is
/// followed instead.
fn chain_timed_out(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(e);
    while let Some(err) = next {
        next = err.source();
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            if matches!(
                io.kind(),
                std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock
            ) {
                return true;
            }
            if let Some(inner) = io.get_ref() {
                next = Some(inner);
            }
        }
    }
    false
}

impl Drop for Call<'_> {
    fn drop(&mut self) {
        if self.pending {
            // A panic that began during the call ends it as an exception does in C++ and
            // Python; otherwise nothing is known of how it went and only its in-flight count is
            // undone. The method and the elapsed time are valid, so the report cannot fail.
            let outcome = if std::thread::panicking() && !self.panicking {
                Outcome::Failure
            } else {
                Outcome::Cancelled
            };
            let _ = self.report(outcome);
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
