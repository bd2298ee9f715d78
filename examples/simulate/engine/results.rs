//! The measurements of a run: key probes for hashing quality, then latency quantiles and CDF,
//! shares, utilisation and the hashing result, gathered into a `RunResult`.

use super::{Engine, HashResult, ProviderResult, RunResult};

impl Engine<'_> {
    pub(super) fn probe(&mut self, after: bool) {
        if !self.hash_probing {
            return;
        }
        if let Some(picks) = self.policy.probe(0, &self.key_bytes, self.now) {
            if after {
                self.hash_after.push(picks);
            } else {
                self.hash_before.push(picks);
            }
        }
    }

    pub(super) fn finish(mut self, wall_s: f64) -> RunResult {
        let sc = self.sc;
        let mut lat = std::mem::take(&mut self.latencies);
        lat.sort_unstable();
        let q = |p: f64| -> f64 {
            if lat.is_empty() {
                return f64::NAN;
            }
            let i = ((p * lat.len() as f64).ceil() as usize).clamp(1, lat.len()) - 1;
            lat[i] as f64
        };
        let mean = if lat.is_empty() {
            f64::NAN
        } else {
            lat.iter().map(|&x| x as f64).sum::<f64>() / lat.len() as f64
        };
        let mut cdf = Vec::new();
        if !lat.is_empty() {
            for i in 0..=20 {
                let p = i as f64 * 0.045;
                cdf.push((q(p.max(1e-9)), p));
            }
            let mut x = 0.0;
            while x <= 5.0 {
                let p = 1.0 - 10f64.powf(-x);
                if p > 0.9 && (p * lat.len() as f64) < lat.len() as f64 - 0.5 {
                    cdf.push((q(p), p));
                }
                x += 0.05;
            }
            cdf.push((*lat.last().unwrap() as f64, 1.0));
        }
        let total: u64 = self.dispatched.iter().sum();
        let providers = (0..self.providers.len())
            .map(|i| ProviderResult {
                share: if total == 0 {
                    0.0
                } else {
                    self.dispatched[i] as f64 / total as f64
                },
                utilisation: self.utilisation[i],
                series: std::mem::take(&mut self.series[i]),
            })
            .collect();
        let hash = sc.hash_probe.map(|(_, removed)| self.hash_result(removed));
        let in_flight_left = self.policy.in_flight_left(self.now);
        RunResult {
            scenario: sc.label(),
            policy: self.spec.policy.label(),
            load: self.spec.load,
            consumers: self.spec.consumers,
            seed: self.spec.seed,
            duration_us: sc.duration_us,
            calls: self.calls,
            ok: self.ok,
            failures: self.failures,
            timeouts: self.timeouts_n,
            no_provider: self.no_provider,
            attempts: self.attempts,
            p50_us: q(0.5),
            p99_us: q(0.99),
            p999_us: q(0.999),
            mean_us: mean,
            cdf,
            providers,
            bucket_us: self.bucket_us,
            hash,
            events: self.events,
            wall_s,
            in_flight_left,
        }
    }

    fn hash_result(&self, removed: usize) -> HashResult {
        // Load before the removal, over the providers registered then (all of them).
        let n = self.hash_load.len();
        let total: u64 = self.hash_load.iter().sum();
        let mean = total as f64 / n.max(1) as f64;
        let max = self.hash_load.iter().copied().max().unwrap_or(0) as f64;
        // Keys moved: each key's usual provider (the most frequent over the probes) before and
        // after the removal. Probes are selects undone by a `Cancelled` report.
        let modal = |probes: &[Vec<usize>], k: usize| -> usize {
            let mut count = vec![0u32; n];
            for p in probes {
                count[p[k]] += 1;
            }
            // Ties go to the lowest index: deterministic.
            (0..n).max_by_key(|&i| (count[i], n - i)).unwrap_or(0)
        };
        let (a, b) = (&self.hash_before, &self.hash_after);
        let keys = a.first().map_or(0, |v| v.len());
        let (moved, ideal) = if keys > 0 && !b.is_empty() {
            let (mut moved, mut forced) = (0usize, 0usize);
            for k in 0..keys {
                let before = modal(a, k);
                if before != modal(b, k) {
                    moved += 1;
                }
                if before == removed {
                    forced += 1;
                }
            }
            (moved as f64 / keys as f64, forced as f64 / keys as f64)
        } else {
            (f64::NAN, f64::NAN)
        };
        HashResult {
            max_mean: if mean > 0.0 { max / mean } else { f64::NAN },
            moved,
            ideal_moved: ideal,
        }
    }
}
