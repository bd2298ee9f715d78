//! The consumer side of a call: arrivals, picks, responses and timeouts, failover retries.

use super::events::Ev;
use super::Engine;
use crate::policy::{ProviderMetrics, EPOCH_US};
use crate::scenario::Keys;
use polylb::Outcome;

pub(super) const MAX_ATTEMPTS: usize = 4;

#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Req {
    pub(super) gen: u32,
    pub(super) consumer: u32,
    pub(super) provider: u32,
    pub(super) key: u32,
    pub(super) attempt: u8,
    pub(super) client_done: bool,
    pub(super) provider_done: bool,
    pub(super) cost: f32,
    /// Base service-time draws: a standard normal and a unit exponential.
    pub(super) z: f32,
    pub(super) e: f32,
    pub(super) sent_us: i64,
    pub(super) first_us: i64,
    pub(super) tried: [u32; MAX_ATTEMPTS],
}

impl Engine<'_> {
    pub(super) fn pop_timeout(&mut self) {
        let (t, r, gen) = self.timeouts.pop_front().expect("peeked");
        self.now = t;
        self.events += 1;
        let req = self.reqs[r as usize];
        if req.gen != gen || req.client_done {
            return;
        }
        self.reqs[r as usize].client_done = true;
        self.policy.on_end(
            req.consumer as usize,
            req.provider as usize,
            self.now - req.sent_us,
            Outcome::Timeout,
            None,
            self.now,
        );
        self.retry_or_fail(r, Outcome::Timeout);
    }

    fn alloc(&mut self) -> u32 {
        match self.free.pop() {
            Some(r) => r,
            None => {
                self.reqs.push(Req::default());
                (self.reqs.len() - 1) as u32
            }
        }
    }

    pub(super) fn maybe_free(&mut self, r: u32) {
        let req = &mut self.reqs[r as usize];
        if req.client_done && req.provider_done {
            req.gen = req.gen.wrapping_add(1);
            req.client_done = false;
            req.provider_done = false;
            self.free.push(r);
        }
    }

    pub(super) fn arrival(&mut self) {
        if !self.arrivals_open {
            return;
        }
        let consumers = self.spec.consumers.max(1) as u64;
        let consumer = if consumers == 1 {
            0
        } else {
            self.consumer_draws.below(consumers) as u32
        };
        let key = match &self.sc.keys {
            Keys::Uniform(k) => self.traffic.below(*k as u64) as u32,
            Keys::Zipf(z) => z.sample(&mut self.traffic) as u32,
        };
        let cost = match self.sc.heavy {
            Some((p, f)) if self.traffic.chance(p) => f,
            _ => 1.0,
        };
        let z = self.traffic.standard_normal() as f32;
        let e = self.traffic.exponential(1.0) as f32;
        let r = self.alloc();
        let gen = self.reqs[r as usize].gen;
        self.reqs[r as usize] = Req {
            gen,
            consumer,
            key,
            cost: cost as f32,
            z,
            e,
            first_us: self.now,
            ..Req::default()
        };
        self.calls += 1;
        self.dispatch(r);
        self.next_arrival += self.traffic.exponential(self.mean_gap_us);
        let t = (self.next_arrival as i64).max(self.now);
        self.schedule(t, Ev::Arrival);
    }

    fn dispatch(&mut self, r: u32) {
        let req = self.reqs[r as usize];
        self.excluded.clear();
        self.excluded.extend(
            req.tried[..req.attempt as usize]
                .iter()
                .map(|&p| p as usize),
        );
        let key = &self.key_bytes[req.key as usize];
        let pick = self.policy.select(
            req.consumer as usize,
            key,
            &self.excluded,
            &self.providers,
            self.now,
        );
        let Some(p) = pick else {
            self.no_provider += 1;
            let q = &mut self.reqs[r as usize];
            q.client_done = true;
            q.provider_done = true;
            self.maybe_free(r);
            return;
        };
        self.attempts += 1;
        self.dispatched[p] += 1;
        // Calls per provider over time (retries after the last arrival are left out).
        let b = (self.now / self.bucket_us) as usize;
        if let Some(slot) = self.series[p].get_mut(b) {
            *slot += 1;
        }
        if let Some((at, _)) = self.sc.hash_probe {
            if self.now < at {
                self.hash_load[p] += 1;
            }
        }
        let now = self.now;
        let q = &mut self.reqs[r as usize];
        q.provider = p as u32;
        q.sent_us = now;
        let gen = q.gen;
        self.timeouts
            .push_back((now + self.spec.timeout_us, r, gen));
        self.deliver(p, r);
    }

    pub(super) fn response(&mut self, r: u32, gen: u32, ok: bool, metrics: bool) {
        let req = self.reqs[r as usize];
        if req.gen != gen {
            return;
        }
        if req.client_done {
            self.maybe_free(r);
            return;
        }
        self.reqs[r as usize].client_done = true;
        let p = req.provider as usize;
        let m = if metrics {
            let load = self.providers[p].reported_load(self.now);
            Some(ProviderMetrics {
                time_ms: (EPOCH_US + self.now) / 1000,
                load,
                numbers: self.providers[p].load_numbers(self.now),
            })
        } else {
            None
        };
        let outcome = if ok {
            Outcome::Success
        } else {
            Outcome::Failure
        };
        self.policy.on_end(
            req.consumer as usize,
            p,
            self.now - req.sent_us,
            outcome,
            m,
            self.now,
        );
        if ok {
            self.ok += 1;
            let lat = (self.now - req.first_us).max(0) as u64;
            self.latencies.push(lat);
            self.maybe_free(r);
        } else {
            self.retry_or_fail(r, Outcome::Failure);
        }
    }

    fn retry_or_fail(&mut self, r: u32, outcome: Outcome) {
        let req = self.reqs[r as usize];
        let attempt = req.attempt as usize;
        if (attempt as u32) < self.spec.retries && attempt + 1 < MAX_ATTEMPTS {
            let nr = self.alloc();
            let gen = self.reqs[nr as usize].gen;
            let mut next = req;
            next.gen = gen;
            next.tried[attempt] = req.provider;
            next.attempt += 1;
            next.client_done = false;
            next.provider_done = false;
            self.reqs[nr as usize] = next;
            self.maybe_free(r);
            self.dispatch(nr);
        } else {
            match outcome {
                Outcome::Timeout => self.timeouts_n += 1,
                _ => self.failures += 1,
            }
            self.maybe_free(r);
        }
    }
}
