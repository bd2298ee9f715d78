//! The provider side of a call: delivery, workers and queue, service; and the scenario's
//! actions on providers (join, leave, crash, freeze, speed).

use super::events::Ev;
use super::Engine;
use crate::policy::{Member, EPOCH_US};
use crate::provider::{unit_service, Health};
use crate::scenario::{Action, WARMUP_MS};

impl Engine<'_> {
    pub(super) fn deliver(&mut self, p: usize, r: u32) {
        let gen = self.reqs[r as usize].gen;
        let prov = &self.providers[p];
        match prov.health {
            Health::Frozen => {
                self.reqs[r as usize].provider_done = true;
            }
            Health::ProcessDown => {
                self.reqs[r as usize].provider_done = true;
                self.schedule(
                    self.now + 1_000,
                    Ev::Response {
                        req: r,
                        gen,
                        ok: false,
                        metrics: false,
                    },
                );
            }
            Health::Up => {
                let req = self.reqs[r as usize];
                let partial = prov.spec.partial_fail.and_then(|(prob, after)| {
                    let draw = crate::rng::derive(
                        (req.z.to_bits() as u64) << 32 | req.e.to_bits() as u64,
                        p as u64 * 8 + req.attempt as u64,
                    );
                    (((draw >> 11) as f64 / (1u64 << 53) as f64) < prob).then_some(after)
                });
                if let Some(ff) = prov.spec.fast_fail_us.or(partial) {
                    self.providers[p].record_answer(self.now, false);
                    self.reqs[r as usize].provider_done = true;
                    self.schedule(
                        self.now + ff,
                        Ev::Response {
                            req: r,
                            gen,
                            ok: false,
                            metrics: true,
                        },
                    );
                } else if prov.busy() < prov.spec.workers {
                    self.start(p, r);
                } else if prov.queue.len() < prov.spec.queue_limit {
                    self.providers[p].queue.push_back(r);
                } else {
                    self.providers[p].record_answer(self.now, false);
                    self.reqs[r as usize].provider_done = true;
                    self.schedule(
                        self.now + 100,
                        Ev::Response {
                            req: r,
                            gen,
                            ok: false,
                            metrics: true,
                        },
                    );
                }
            }
        }
    }

    fn start(&mut self, p: usize, r: u32) {
        let now = self.now;
        let req = self.reqs[r as usize];
        let prov = &mut self.providers[p];
        prov.account(now);
        prov.in_service.push(r);
        let work = unit_service(prov.spec.dist, req.z as f64, req.e as f64)
            * req.cost as f64
            * prov.spec.mean_service_us
            * prov.spec.slowdown
            * prov.cold_multiplier(now);
        let finish = prov.finish_time(now, work);
        let epoch = prov.epoch;
        self.schedule(
            finish,
            Ev::ServiceDone {
                provider: p as u32,
                req: r,
                epoch,
            },
        );
    }

    pub(super) fn service_done(&mut self, p: usize, r: u32, epoch: u32) {
        if self.providers[p].epoch != epoch {
            return;
        }
        let now = self.now;
        let prov = &mut self.providers[p];
        prov.account(now);
        if let Some(i) = prov.in_service.iter().position(|&x| x == r) {
            prov.in_service.swap_remove(i);
        }
        prov.record_answer(now, true);
        let extra = prov.spec.extra_delay_us;
        self.reqs[r as usize].provider_done = true;
        if self.reqs[r as usize].client_done {
            self.maybe_free(r);
        } else {
            let gen = self.reqs[r as usize].gen;
            if extra == 0 {
                self.response(r, gen, true, true);
            } else {
                self.providers[p].in_transit += 1;
                self.schedule(now + extra, Ev::TransitEnd { provider: p as u32 });
                self.schedule(
                    now + extra,
                    Ev::Response {
                        req: r,
                        gen,
                        ok: true,
                        metrics: true,
                    },
                );
            }
        }
        while self.providers[p].busy() < self.providers[p].spec.workers {
            let Some(next) = self.providers[p].queue.pop_front() else {
                break;
            };
            self.start(p, next);
        }
    }

    pub(super) fn action(&mut self, a: Action) {
        match a {
            Action::Join(p) => {
                let now = self.now;
                let prov = &mut self.providers[p];
                prov.account(now);
                prov.health = Health::Up;
                prov.started_us = Some(now);
                prov.joined_us.get_or_insert(now);
                self.members.retain(|m| m.index != p);
                self.members.push(Member {
                    index: p,
                    start_time_ms: (EPOCH_US + now) / 1000,
                    warmup_ms: WARMUP_MS,
                    weight: self.providers[p].spec.weight,
                });
                self.members.sort_by_key(|m| m.index);
                self.policy.set_members(&self.members);
            }
            Action::Speed(p, slowdown) => {
                self.providers[p].spec.slowdown = slowdown;
            }
            Action::Leave(p) => {
                let probe = self.sc.hash_probe.is_some_and(|(_, r)| r == p);
                if probe {
                    self.probe(false);
                }
                self.members.retain(|m| m.index != p);
                self.policy.set_members(&self.members);
                if probe {
                    self.probe(true);
                }
            }
            Action::Crash(p) | Action::Freeze(p) => {
                let reset = matches!(a, Action::Crash(_));
                let now = self.now;
                let prov = &mut self.providers[p];
                prov.account(now);
                prov.health = if reset {
                    Health::ProcessDown
                } else {
                    Health::Frozen
                };
                prov.epoch += 1;
                let mut lost: Vec<u32> = prov.in_service.drain(..).collect();
                lost.extend(prov.queue.drain(..));
                for r in lost {
                    self.reqs[r as usize].provider_done = true;
                    if self.reqs[r as usize].client_done {
                        self.maybe_free(r);
                    } else if reset {
                        let gen = self.reqs[r as usize].gen;
                        self.schedule(
                            now,
                            Ev::Response {
                                req: r,
                                gen,
                                ok: false,
                                metrics: false,
                            },
                        );
                    }
                }
            }
        }
    }
}
