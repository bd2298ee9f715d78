//! One endpoint call from its select to its report: reported exactly once.
//!
//! polylb's own `Call` does this with `std::time::Instant`, which a virtual clock (tokio's
//! paused time) never moves; the balancer takes its clock from the builder instead, so that
//! latency-aware strategies can be driven, and tested, in virtual time.

use polylb::{Balancer, Outcome};
use std::time::Instant;

/// A monotonic clock: `Instant::now`, or a virtual one such as tokio's paused time
/// (`|| tokio::time::Instant::now().into_std()`).
pub type Clock = fn() -> Instant;

pub struct Report {
    balancer: Balancer,
    method: u32,
    id: u64,
    clock: Clock,
    started: Instant,
    /// Whether a panic was unwinding when the call began: only one that began during the call
    /// makes it a failure.
    panicking: bool,
    /// Cleared by `finish`, so that `drop` reports only a call that nobody finished.
    pending: bool,
}

impl Report {
    pub fn start(balancer: &Balancer, method: u32, id: u64, clock: Clock) -> Report {
        Report {
            balancer: balancer.clone(),
            method,
            id,
            clock,
            started: clock(),
            panicking: std::thread::panicking(),
            pending: true,
        }
    }

    pub fn finish(mut self, outcome: Outcome) {
        self.pending = false;
        self.send(outcome);
    }

    fn send(&self, outcome: Outcome) {
        let elapsed = (self.clock)().saturating_duration_since(self.started);
        let elapsed_us = i64::try_from(elapsed.as_micros()).unwrap_or(i64::MAX);
        // The method and id came from this balancer's own select and the elapsed time is not
        // negative: a report of them cannot be refused (one for an id that left is ignored).
        let _ = self
            .balancer
            .report(self.method, self.id, elapsed_us, outcome, 0);
    }
}

impl Drop for Report {
    fn drop(&mut self) {
        if self.pending {
            // The response future was dropped before its endpoint answered: a cancel says
            // nothing about the endpoint, unless the endpoint's own future panicked.
            let outcome = if std::thread::panicking() && !self.panicking {
                Outcome::Failure
            } else {
                Outcome::Cancelled
            };
            self.send(outcome);
        }
    }
}
