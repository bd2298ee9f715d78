//! A simulated provider: a FIFO queue in front of a fixed number of workers (its concurrency
//! limit), a service-time distribution, and the faults the scenarios inject: a slowdown, extra
//! latency that holds no worker, periodic stalls (GC pauses), fast failures, a JIT-cold start,
//! a process crash (connections reset) and a frozen host (no answer at all).

use std::collections::VecDeque;

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Dist {
    Exponential,
    /// Lognormal with this shape (sigma of the underlying normal).
    LogNormal(f64),
}

/// A service time of mean 1 from a request's fixed draws (a standard normal `z` and a unit
/// exponential `e`), so that a request has the same size wherever it is served.
pub fn unit_service(dist: Dist, z: f64, e: f64) -> f64 {
    match dist {
        Dist::Exponential => e,
        Dist::LogNormal(sigma) => (sigma * z - 0.5 * sigma * sigma).exp(),
    }
}

/// Periodic stalls: no progress at all during `[first + k·period, first + k·period + length)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stall {
    pub first_us: i64,
    pub period_us: i64,
    pub length_us: i64,
}

/// A JIT-cold start: service times are multiplied by `1 + (factor - 1)·exp(-age/tau)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cold {
    pub factor: f64,
    pub tau_us: f64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ProviderSpec {
    /// Concurrency limit: requests served at once; the rest wait in FIFO order.
    pub workers: u32,
    /// Mean service time of a cost-1 request at full speed.
    pub mean_service_us: f64,
    pub dist: Dist,
    /// Service-time multiplier (2.0 = half the capacity).
    pub slowdown: f64,
    /// Added to every response after service; holds no worker (a slow dependency or network).
    pub extra_delay_us: i64,
    pub stall: Option<Stall>,
    /// Answers every call with an error after this long, without queueing.
    pub fast_fail_us: Option<i64>,
    /// Applies after each (re)start; a provider up from time 0 is warm.
    pub cold: Option<Cold>,
    /// Requests beyond this many waiting are rejected at once (a full thread-pool queue).
    pub queue_limit: usize,
    /// The weight it registers with (100 = Dubbo's default).
    pub weight: i32,
    /// (probability, after µs): this share of calls fails after this long, without queueing
    /// (a partial outage); stress scenarios only.
    pub partial_fail: Option<(f64, i64)>,
}

impl ProviderSpec {
    pub fn new(workers: u32, mean_service_us: f64, dist: Dist) -> ProviderSpec {
        ProviderSpec {
            workers,
            mean_service_us,
            dist,
            slowdown: 1.0,
            extra_delay_us: 0,
            stall: None,
            fast_fail_us: None,
            cold: None,
            queue_limit: 100_000,
            weight: 100,
            partial_fail: None,
        }
    }

    /// Can this provider answer successfully at all (in steady state)?
    pub fn can_succeed(&self) -> bool {
        self.fast_fail_us.is_none()
    }

    /// Requests per second it completes at full speed, given the mean request cost.
    pub fn capacity_rps(&self, mean_cost: f64) -> f64 {
        if !self.can_succeed() {
            return 0.0;
        }
        let mut busy_fraction = 1.0;
        if let Some(s) = self.stall {
            busy_fraction -= s.length_us as f64 / s.period_us as f64;
        }
        self.workers as f64 * 1e6 * busy_fraction
            / (self.mean_service_us * mean_cost * self.slowdown)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Health {
    Up,
    /// The process is gone but the host answers: calls are refused at once.
    ProcessDown,
    /// The host is gone: calls get no answer at all (the client times out).
    Frozen,
}

pub struct Provider {
    pub spec: ProviderSpec,
    pub health: Health,
    /// Bumped on every crash so that completions scheduled before it are ignored.
    pub epoch: u32,
    /// Start of the current process, for the cold-start model (None: warm since forever).
    pub started_us: Option<i64>,
    /// When it first joined the set (0 for the initial set): utilisation counts from then.
    pub joined_us: Option<i64>,
    pub queue: VecDeque<u32>,
    pub in_service: Vec<u32>,
    /// Answered but still on their way back (the extra latency of scenario 2's slow
    /// providers): done for the provider, still outstanding for the caller.
    pub in_transit: usize,
    // Accounting.
    busy_integral_us: f64,
    last_change_us: i64,
    /// Exponentially smoothed utilisation (tau = 1 s), what a provider reports as its load.
    util_ewma: f64,
    /// Answers per second and failed answers per second, smoothed alike (ORCA's qps and eps).
    answered: RateEwma,
    failed: RateEwma,
}

/// An event rate smoothed with time constant `UTIL_TAU_US`: each event adds 1 / tau, and the
/// sum decays as exp(-t / tau), so a steady rate reads as itself.
#[derive(Clone, Copy, Debug, Default)]
struct RateEwma {
    per_second: f64,
    last_us: i64,
}

impl RateEwma {
    fn decayed(&self, now_us: i64) -> f64 {
        let dt = (now_us - self.last_us).max(0) as f64;
        self.per_second * (-dt / UTIL_TAU_US).exp()
    }

    fn add(&mut self, now_us: i64) {
        self.per_second = self.decayed(now_us) + 1e6 / UTIL_TAU_US;
        self.last_us = now_us;
    }
}

/// What a provider reports for `orca` (an ORCA load report): smoothed answers and failures per
/// second, and its utilisation (0–1).
#[derive(Clone, Copy, Debug)]
pub struct LoadNumbers {
    pub qps: f64,
    pub eps: f64,
    pub utilization: f64,
}

const UTIL_TAU_US: f64 = 1_000_000.0;

impl Provider {
    pub fn new(spec: ProviderSpec) -> Provider {
        Provider {
            spec,
            health: Health::Up,
            epoch: 0,
            started_us: None,
            joined_us: None,
            queue: VecDeque::new(),
            in_service: Vec::new(),
            in_transit: 0,
            busy_integral_us: 0.0,
            last_change_us: 0,
            util_ewma: 0.0,
            answered: RateEwma::default(),
            failed: RateEwma::default(),
        }
    }

    pub fn in_system(&self) -> usize {
        self.in_service.len() + self.queue.len()
    }

    /// Requests sent and not yet answered to their caller: in the system or in transit.
    pub fn outstanding(&self) -> usize {
        self.in_system() + self.in_transit
    }

    pub fn busy(&self) -> u32 {
        self.in_service.len() as u32
    }

    /// Brings the busy-time integral and the smoothed utilisation up to `now` (call before the
    /// number of busy workers changes). The integral counts time spent serving: a worker frozen
    /// by a stall holds its call but serves nothing. (The smoothed load, what the provider
    /// reports, still counts it: a stop-the-world pause keeps the CPU busy.)
    pub fn account(&mut self, now_us: i64) {
        let dt = (now_us - self.last_change_us) as f64;
        if dt > 0.0 {
            let u = self.busy() as f64 / self.spec.workers as f64;
            let stalled = self.stalled_between(self.last_change_us, now_us) as f64;
            self.busy_integral_us += self.busy() as f64 * (dt - stalled);
            let keep = (-dt / UTIL_TAU_US).exp();
            self.util_ewma = self.util_ewma * keep + u * (1.0 - keep);
            self.last_change_us = now_us;
        }
    }

    /// Fraction of worker time used from its first join to `end_us` (a provider that joins
    /// late is not charged for the time before it existed; one that crashed and came back is
    /// charged for its time down).
    pub fn utilisation(&mut self, end_us: i64) -> f64 {
        self.account(end_us);
        let lifetime = end_us - self.joined_us.unwrap_or(end_us);
        if lifetime <= 0 {
            return 0.0;
        }
        self.busy_integral_us / (self.spec.workers as f64 * lifetime as f64)
    }

    /// The load a Dubbo provider would attach to its response (0–100).
    pub fn reported_load(&mut self, now_us: i64) -> f64 {
        self.account(now_us);
        (self.util_ewma * 100.0).clamp(0.0, 100.0)
    }

    /// The provider answered a call (a failure too: an error is an answer).
    pub fn record_answer(&mut self, now_us: i64, ok: bool) {
        self.answered.add(now_us);
        if !ok {
            self.failed.add(now_us);
        }
    }

    /// The load report a provider would attach to its response (ORCA's per-call report).
    pub fn load_numbers(&mut self, now_us: i64) -> LoadNumbers {
        self.account(now_us);
        let qps = self.answered.decayed(now_us);
        LoadNumbers {
            qps,
            // Failures are answers too: never more of them (rounding aside).
            eps: self.failed.decayed(now_us).min(qps),
            utilization: self.util_ewma.clamp(0.0, 1.0),
        }
    }

    pub fn cold_multiplier(&self, now_us: i64) -> f64 {
        match (self.spec.cold, self.started_us) {
            (Some(c), Some(start)) => {
                let age = (now_us - start).max(0) as f64;
                1.0 + (c.factor - 1.0) * (-age / c.tau_us).exp()
            }
            _ => 1.0,
        }
    }

    /// When `work` µs of service starting at `start_us` completes, skipping stalls.
    pub fn finish_time(&self, start_us: i64, work_us: f64) -> i64 {
        let work = (work_us.round() as i64).max(1);
        let Some(s) = self.spec.stall else {
            return start_us + work;
        };
        let mut t = start_us;
        let mut left = work;
        loop {
            // The stall window at or before t, and the next one.
            let k = if t < s.first_us {
                -1
            } else {
                (t - s.first_us) / s.period_us
            };
            if k >= 0 {
                let ws = s.first_us + k * s.period_us;
                if t < ws + s.length_us {
                    t = ws + s.length_us;
                }
            }
            let next = s.first_us + (k + 1) * s.period_us;
            if t + left <= next {
                return t + left;
            }
            left -= next - t;
            t = next;
        }
    }

    /// Time within `[from, to)` spent in stalls.
    pub fn stalled_between(&self, from_us: i64, to_us: i64) -> i64 {
        let Some(s) = self.spec.stall else { return 0 };
        if to_us <= from_us || to_us <= s.first_us {
            return 0;
        }
        let mut k = if from_us <= s.first_us {
            0
        } else {
            (from_us - s.first_us) / s.period_us
        };
        let mut total = 0;
        loop {
            let ws = s.first_us + k * s.period_us;
            if ws >= to_us {
                return total;
            }
            total += (ws + s.length_us).min(to_us) - ws.max(from_us).min(ws + s.length_us);
            k += 1;
        }
    }

    /// If stalled at `now`, how long until the stall ends.
    pub fn stall_remaining(&self, now_us: i64) -> i64 {
        let Some(s) = self.spec.stall else { return 0 };
        if now_us < s.first_us {
            return 0;
        }
        let ws = s.first_us + (now_us - s.first_us) / s.period_us * s.period_us;
        (ws + s.length_us - now_us).max(0)
    }

    /// The oracle's estimate of a new request's response time here: it knows the provider's
    /// true speed now (slowdown, cold start, extra latency, a stall in progress) and the exact
    /// number of requests in the system, but not their sizes.
    pub fn expected_delay(&self, now_us: i64, mean_cost: f64) -> f64 {
        if self.health != Health::Up || self.spec.fast_fail_us.is_some() {
            return f64::INFINITY;
        }
        let c = self.spec.workers as f64;
        let s = self.spec.mean_service_us
            * mean_cost
            * self.spec.slowdown
            * self.cold_multiplier(now_us);
        let n = self.in_system() as f64;
        let wait = if n < c { 0.0 } else { (n - c + 1.0) * s / c };
        self.stall_remaining(now_us) as f64 + wait + s + self.spec.extra_delay_us as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utilisation_counts_from_the_first_join() {
        let mut p = Provider::new(ProviderSpec::new(1, 1000.0, Dist::Exponential));
        p.joined_us = Some(200);
        p.account(200);
        p.in_service.push(0);
        p.account(1000);
        assert!((p.utilisation(1000) - 1.0).abs() < 1e-9);
    }

    #[test]
    fn a_stalled_worker_is_not_counted_as_busy() {
        let mut spec = ProviderSpec::new(1, 1000.0, Dist::Exponential);
        spec.stall = Some(Stall {
            first_us: 100,
            period_us: 1000,
            length_us: 50,
        });
        let mut p = Provider::new(spec.clone());
        p.joined_us = Some(0);
        p.account(0);
        p.in_service.push(0);
        // Serving during 0-100 and 150-200, frozen during 100-150.
        let u = p.utilisation(200);
        assert!((u - 0.75).abs() < 1e-9, "{u}");
        // Over several windows, accounted in uneven steps.
        let mut p = Provider::new(spec);
        p.joined_us = Some(0);
        p.account(0);
        p.in_service.push(0);
        for t in [120, 130, 1000, 1120, 1149, 2125] {
            p.account(t);
        }
        let u = p.utilisation(2200);
        assert!((u - 2050.0 / 2200.0).abs() < 1e-9, "{u}");
    }

    #[test]
    fn unit_service_has_mean_one() {
        let mut r = crate::rng::SimRng::new(3);
        let n = 400_000;
        for dist in [Dist::Exponential, Dist::LogNormal(0.8326)] {
            let m: f64 = (0..n)
                .map(|_| unit_service(dist, r.standard_normal(), r.exponential(1.0)))
                .sum::<f64>()
                / n as f64;
            assert!((m - 1.0).abs() < 0.02, "{dist:?}: {m}");
        }
    }

    #[test]
    fn stalls_are_skipped() {
        let mut spec = ProviderSpec::new(1, 1000.0, Dist::Exponential);
        spec.stall = Some(Stall {
            first_us: 100,
            period_us: 1000,
            length_us: 50,
        });
        let p = Provider::new(spec);
        assert_eq!(p.finish_time(0, 50.0), 50);
        assert_eq!(p.finish_time(0, 100.0), 100);
        assert_eq!(p.finish_time(0, 101.0), 151);
        assert_eq!(p.finish_time(120, 10.0), 160);
        assert_eq!(p.finish_time(0, 2000.0), 2000 + 50 * 2);
        assert_eq!(p.stall_remaining(110), 40);
        assert_eq!(p.stall_remaining(1110), 40);
        assert_eq!(p.stall_remaining(1160), 0);
    }
}
