//! Helpers.

use crate::common::*;
use polylb::{Balancer, Invoker, Outcome};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

pub(crate) const NOW: i64 = 1_700_000_000_000_000; // µs
pub(crate) const NEW: [&str; 3] = ["p2c", "peakewma", "boundedhash"];

pub(crate) fn lb(config: &str, invokers: &[Invoker]) -> Balancer {
    balancer(config, invokers)
}

/// Selects without reporting (the call stays in flight).
pub(crate) fn hold(b: &Balancer, method: u32, n: usize, now: i64) -> Vec<u64> {
    (0..n)
        .map(|_| b.select(method, b"", now).unwrap())
        .collect()
}

pub(crate) fn active(b: &Balancer, id: u64) -> i64 {
    stat(b, NOW, id, "active")
}

/// A closed loop with `in_flight` calls always outstanding (FIFO completion, equal latency):
/// returns the picks per id over `draws` selects.
pub(crate) fn closed_loop(b: &Balancer, in_flight: usize, draws: usize) -> BTreeMap<u64, usize> {
    closed_loop_tracking(b, in_flight, draws, 0).0
}

/// [`closed_loop`], also returning the lowest and highest number of calls in flight at `id`
/// seen after each of the `draws` selects.
pub(crate) fn closed_loop_tracking(
    b: &Balancer,
    in_flight: usize,
    draws: usize,
    id: u64,
) -> (BTreeMap<u64, usize>, usize, usize) {
    let mut queue: std::collections::VecDeque<u64> = hold(b, 0, in_flight, NOW).into();
    let mut c = BTreeMap::new();
    let mut at_id = queue.iter().filter(|&&q| q == id).count();
    let (mut lo, mut hi) = (usize::MAX, 0);
    for _ in 0..draws {
        let done = queue.pop_front().unwrap();
        b.report(0, done, 1000, Outcome::Success, NOW).unwrap();
        let picked = b.select(0, b"", NOW).unwrap();
        *c.entry(picked).or_insert(0) += 1;
        queue.push_back(picked);
        at_id = at_id + usize::from(picked == id) - usize::from(done == id);
        (lo, hi) = (lo.min(at_id), hi.max(at_id));
    }
    for id in queue {
        b.report(0, id, 1000, Outcome::Success, NOW).unwrap();
    }
    (c, lo, hi)
}

/// A call in flight: (ends at, consumer, invoker id, sent at, outcome code).
type Call = (i64, usize, u64, i64, u8);

/// A tiny virtual-time world: `consumers` balancers share the providers; a call is started every
/// `gap_us` (consumers take turns) and ends after the latency `world(id, sent_us)` says.
pub(crate) struct World {
    balancers: Vec<Balancer>,
    calls: BinaryHeap<Reverse<Call>>,
    now: i64,
    /// The time the balancers are given at a virtual time (the identity unless a test makes
    /// the clock step).
    clock: fn(i64) -> i64,
}

impl World {
    pub(crate) fn new(config: &str, consumers: usize, invokers: &[Invoker]) -> World {
        let balancers = (0..consumers)
            .map(|c| lb(&format!("{config}&seed={}", 17 + c), invokers))
            .collect();
        World {
            balancers,
            calls: BinaryHeap::new(),
            now: 0,
            clock: |t| t,
        }
    }

    /// The balancers read their time through `clock` (virtual time → time given).
    pub(crate) fn with_clock(mut self, clock: fn(i64) -> i64) -> World {
        self.clock = clock;
        self
    }

    /// Runs until `until_us`, appending every pick to `log` as (time, consumer, id).
    pub(crate) fn run(
        &mut self,
        until_us: i64,
        gap_us: i64,
        mut world: impl FnMut(u64, i64) -> (i64, Outcome),
        log: &mut Vec<(i64, usize, u64)>,
    ) {
        let mut turn = 0;
        while self.now < until_us {
            while let Some(&Reverse((end, c, id, sent, outcome))) = self.calls.peek() {
                if end > self.now {
                    break;
                }
                self.calls.pop();
                let outcome = match outcome {
                    0 => Outcome::Success,
                    1 => Outcome::Failure,
                    _ => Outcome::Timeout,
                };
                self.balancers[c]
                    .report(0, id, end - sent, outcome, NOW + (self.clock)(end))
                    .unwrap();
            }
            let c = turn % self.balancers.len();
            turn += 1;
            let id = self.balancers[c]
                .select(0, b"", NOW + (self.clock)(self.now))
                .unwrap();
            let (latency, outcome) = world(id, self.now);
            let code = match outcome {
                Outcome::Success => 0,
                Outcome::Failure => 1,
                _ => 2,
            };
            self.calls
                .push(Reverse((self.now + latency.max(0), c, id, self.now, code)));
            log.push((self.now, c, id));
            self.now += gap_us;
        }
    }
}

/// Share of picks of `id` among the picks in [from, to).
pub(crate) fn share(log: &[(i64, usize, u64)], id: u64, from: i64, to: i64) -> f64 {
    let window: Vec<_> = log.iter().filter(|p| p.0 >= from && p.0 < to).collect();
    window.iter().filter(|p| p.2 == id).count() as f64 / window.len().max(1) as f64
}

/// A little deterministic jitter (±20 %) so that latencies are not all equal.
pub(crate) fn jitter(base: i64, t: i64, id: u64) -> i64 {
    let h = (t as u64 ^ id.wrapping_mul(0x9E37_79B9_7F4A_7C15)).wrapping_mul(0xD6E8_FEB8_6659_FD93);
    base * (80 + (h >> 59) as i64 * 40 / 31) / 100
}
