//! adaptive's floor, shared by the criterion suite and `bench/rust-peers`: Dubbo's
//! AdaptiveLoadBalance with every provider's metrics in, done plainly — two distinct invokers
//! drawn, each one's getLoad with its side effects (the latency decayed, the estimate moved),
//! the lower load (a weighted coin on a tie), its pick time stamped, the call counted in, then
//! its success counted. Fields are relaxed atomics, as unsynchronised as Dubbo's. The time is
//! the caller's, as it is for the balancer beside it: read once a pick from the library's
//! coarse clock where the balancer reads it (`now_us = 0`), fixed where the balancer is given
//! a fixed time.

use std::sync::atomic::{
    AtomicI64, AtomicU64,
    Ordering::{AcqRel, Relaxed},
};

/// Dubbo's default timeout, polylb's too.
const TIMEOUT_MS: i64 = 1000;

/// Dubbo's AdaptiveMetrics for one invoker.
pub struct DubboMetrics {
    provider_time: AtomicI64,
    current_time: AtomicI64,
    cpu_load: f64,
    last_latency: AtomicI64,
    ewma: AtomicU64,
    pick_time: AtomicI64,
    requests: AtomicU64,
    successes: AtomicU64,
}

impl DubboMetrics {
    /// The load (0.2-0.8) and response time (µs) invoker `i` reports once: to the floor, and
    /// to the balancer it is compared with (`Balancer::report_provider_metrics`).
    pub fn report_of(i: usize) -> (f64, i64) {
        (0.2 + (i % 7) as f64 * 0.1, 2_000 + (i % 5) as i64 * 500)
    }

    /// Invoker `i` after its provider's one report (setProviderMetrics).
    pub fn reported(i: usize) -> Self {
        let now = polylb::wall_clock_us() / 1000;
        let (cpu_load, rt_us) = Self::report_of(i);
        let latency = rt_us / 1000;
        DubboMetrics {
            provider_time: AtomicI64::new(now),
            current_time: AtomicI64::new(now),
            cpu_load,
            last_latency: AtomicI64::new(latency),
            ewma: AtomicU64::new((0.5 * latency as f64).to_bits()),
            pick_time: AtomicI64::new(now),
            requests: AtomicU64::new(0),
            successes: AtomicU64::new(0),
        }
    }

    /// getLoad, with its side effects.
    #[inline(always)]
    fn load(&self, now: i64, weight: u64) -> f64 {
        if now - self.pick_time.load(Relaxed) > 2 * TIMEOUT_MS {
            return 0.0;
        }
        let current = self.current_time.load(Relaxed);
        let mut ewma = f64::from_bits(self.ewma.load(Relaxed));
        if current > 0 {
            let multiple = (now - current) / TIMEOUT_MS + 1;
            if multiple > 0 {
                let last = if self.provider_time.load(Relaxed) == current {
                    2 * TIMEOUT_MS
                } else {
                    self.last_latency.load(Relaxed) >> (multiple & 63)
                };
                self.last_latency.store(last, Relaxed);
                ewma = 0.5 * ewma + 0.5 * last as f64;
                self.ewma.store(ewma.to_bits(), Relaxed);
                self.current_time.store(now, Relaxed);
            }
        }
        let requests = self.requests.load(Relaxed) as f64;
        let successes = self.successes.load(Relaxed) as f64;
        let in_flight = requests - successes;
        self.cpu_load * (ewma.sqrt() + 1.0) * (in_flight + 1.0)
            / ((successes / (requests + 1.0)) * weight as f64 + 1.0)
    }
}

/// One select+report of the floor over `metrics` (with their `weights`) at `now` (ms), drawing
/// from `below` (a bounded random number); returns the pick's position.
#[inline(always)]
pub fn select_report(
    metrics: &[DubboMetrics],
    weights: &[u64],
    now: i64,
    mut below: impl FnMut(u64) -> u64,
) -> usize {
    let n = metrics.len() as u64;
    let a = below(n) as usize;
    let mut b = below(n - 1) as usize;
    if b >= a {
        b += 1;
    }
    let (la, lb) = (
        metrics[a].load(now, weights[a]),
        metrics[b].load(now, weights[b]),
    );
    let pick = if la.to_bits() == lb.to_bits() {
        if below(weights[a] + weights[b]) < weights[a] {
            a
        } else {
            b
        }
    } else if la > lb {
        b
    } else {
        a
    };
    let chosen = &metrics[pick];
    chosen.pick_time.store(now, Relaxed);
    chosen.requests.fetch_add(1, AcqRel);
    chosen.successes.fetch_add(1, AcqRel);
    pick
}
