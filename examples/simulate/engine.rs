//! The discrete-event engine: a binary heap of events in virtual time (µs), Poisson arrivals,
//! providers (provider.rs), a client timeout per attempt, optional failover retries, and the
//! measurements of one run.
//!
//! Common random numbers: a request's consumer, key, cost and base service-time draw come from
//! one traffic stream fixed by the seed, so every policy faces exactly the same requests.

use crate::oracle::{Oracle, OracleKind};
use crate::policy::{LibraryPolicy, Member, Policy, ProviderMetrics, EPOCH_US};
use crate::provider::{unit_service, Health, Provider};
use crate::rng::{derive, SimRng};
use crate::scenario::{Action, Keys, Scenario, WARMUP_MS};
use polylb::Outcome;
use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};

#[derive(Clone, Debug, PartialEq)]
pub enum PolicySpec {
    /// A polylb strategy name, optionally followed by `&key=value` options.
    Library(String),
    Oracle(OracleKind),
}

impl PolicySpec {
    pub fn parse(s: &str) -> PolicySpec {
        match OracleKind::from_name(s) {
            Some(k) => PolicySpec::Oracle(k),
            None => PolicySpec::Library(s.to_string()),
        }
    }

    pub fn label(&self) -> String {
        match self {
            PolicySpec::Library(s) => s.clone(),
            PolicySpec::Oracle(k) => k.name().to_string(),
        }
    }
}

#[derive(Clone, Debug)]
pub struct RunSpec {
    pub scenario: Scenario,
    pub policy: PolicySpec,
    /// Offered load as a fraction of the scenario's capacity.
    pub load: f64,
    pub consumers: usize,
    pub seed: u64,
    pub timeout_us: i64,
    /// Failover retries after a failure or timeout (Dubbo's failover cluster; 0 = failfast).
    pub retries: u32,
    /// Time-series resolution (buckets over the run).
    pub buckets: usize,
}

#[derive(Clone, Debug, Default)]
pub struct ProviderResult {
    /// Share of all attempts sent to it.
    pub share: f64,
    /// Fraction of its worker time used during the run.
    pub utilisation: f64,
    /// Attempts sent to it per time bucket.
    pub series: Vec<u32>,
}

#[derive(Clone, Debug, Default)]
pub struct HashResult {
    /// Max over providers of the requests received, divided by the mean (before the removal).
    pub max_mean: f64,
    /// Keys whose provider changed when one provider was removed (NaN: not a library policy).
    pub moved: f64,
    /// Keys that were on the removed provider: what had to move.
    pub ideal_moved: f64,
}

#[derive(Clone, Debug, Default)]
pub struct RunResult {
    pub scenario: String,
    pub policy: String,
    pub load: f64,
    pub consumers: usize,
    pub seed: u64,
    pub duration_us: i64,
    /// Calls (a call's retries are part of it).
    pub calls: u64,
    pub ok: u64,
    pub failures: u64,
    pub timeouts: u64,
    pub no_provider: u64,
    pub attempts: u64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub mean_us: f64,
    /// (latency µs, quantile) of successful calls, dense in the tail.
    pub cdf: Vec<(f64, f64)>,
    pub providers: Vec<ProviderResult>,
    pub bucket_us: i64,
    pub hash: Option<HashResult>,
    pub events: u64,
    pub wall_s: f64,
    /// The library's in-flight counts left after every call ended (should be 0).
    pub in_flight_left: Option<i64>,
}

impl RunResult {
    pub fn error_rate(&self) -> f64 {
        if self.calls == 0 {
            return 0.0;
        }
        (self.failures + self.timeouts + self.no_provider) as f64 / self.calls as f64
    }
}

#[derive(Clone, Copy, Debug)]
enum Ev {
    Arrival,
    EndOfArrivals,
    ServiceDone {
        provider: u32,
        req: u32,
        epoch: u32,
    },
    Response {
        req: u32,
        gen: u32,
        ok: bool,
        metrics: bool,
    },
    Action(u32),
    /// An answer of `provider` has crossed its extra latency (see `Provider::in_transit`).
    TransitEnd {
        provider: u32,
    },
    /// Probe every key's provider (hashing quality), before or after the removal.
    Probe {
        after: bool,
    },
}

struct Entry {
    time: i64,
    seq: u64,
    ev: Ev,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.time == other.time && self.seq == other.seq
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    // Reversed: BinaryHeap is a max-heap and we want the earliest (then the first scheduled).
    fn cmp(&self, other: &Self) -> Ordering {
        (other.time, other.seq).cmp(&(self.time, self.seq))
    }
}

const MAX_ATTEMPTS: usize = 4;
/// Probes of the key mapping on each side of a removal, and their spacing.
const PROBES: usize = 9;
const PROBE_GAP_US: i64 = 50_000;

#[derive(Clone, Copy, Debug, Default)]
struct Req {
    gen: u32,
    consumer: u32,
    provider: u32,
    key: u32,
    attempt: u8,
    client_done: bool,
    provider_done: bool,
    cost: f32,
    /// Base service-time draws: a standard normal and a unit exponential.
    z: f32,
    e: f32,
    sent_us: i64,
    first_us: i64,
    tried: [u32; MAX_ATTEMPTS],
}

struct Engine<'a> {
    spec: &'a RunSpec,
    sc: &'a Scenario,
    now: i64,
    seq: u64,
    heap: BinaryHeap<Entry>,
    timeouts: VecDeque<(i64, u32, u32)>,
    reqs: Vec<Req>,
    free: Vec<u32>,
    providers: Vec<Provider>,
    members: Vec<Member>,
    policy: Box<dyn Policy>,
    traffic: SimRng,
    key_bytes: Vec<Box<[u8]>>,
    arrivals_open: bool,
    next_arrival: f64,
    mean_gap_us: f64,
    excluded: Vec<usize>,
    // Measurements.
    latencies: Vec<u32>,
    calls: u64,
    ok: u64,
    failures: u64,
    timeouts_n: u64,
    no_provider: u64,
    attempts: u64,
    dispatched: Vec<u64>,
    series: Vec<Vec<u32>>,
    bucket_us: i64,
    utilisation: Vec<f64>,
    /// Requests per provider before the hash probe's removal.
    hash_load: Vec<u64>,
    /// Each key's provider just before and just after the removal (consumer 0's balancer).
    /// Probes of every key's provider before and after the removal (consumer 0's balancer).
    hash_before: Vec<Vec<usize>>,
    hash_after: Vec<Vec<usize>>,
    /// Probing applies to key-affine strategies only.
    hash_probing: bool,
    events: u64,
}

/// Runs one simulation. Fails only when the library rejects the policy's configuration.
pub fn run(spec: &RunSpec) -> Result<RunResult, String> {
    let started = std::time::Instant::now();
    let sc = &spec.scenario;
    let consumers = spec.consumers.max(1);
    let policy: Box<dyn Policy> = match &spec.policy {
        PolicySpec::Library(s) => Box::new(LibraryPolicy::new(
            s,
            consumers,
            spec.seed,
            spec.timeout_us / 1000,
        )?),
        PolicySpec::Oracle(k) => {
            Box::new(Oracle::new(*k, sc.mean_cost(), derive(spec.seed, 0x0AC1E)))
        }
    };
    let n = sc.providers.len();
    let n_keys = match &sc.keys {
        Keys::Uniform(k) => *k,
        Keys::Zipf(z) => z.support(),
    };
    let buckets = spec.buckets.max(1);
    let mut e = Engine {
        spec,
        sc,
        now: 0,
        seq: 0,
        heap: BinaryHeap::with_capacity(1024),
        timeouts: VecDeque::with_capacity(1024),
        reqs: Vec::with_capacity(1024),
        free: Vec::new(),
        providers: sc.providers.iter().cloned().map(Provider::new).collect(),
        members: Vec::new(),
        policy,
        traffic: SimRng::new(derive(spec.seed, 0x7AFF1C)),
        key_bytes: (0..n_keys)
            .map(|k| format!("key-{k}").into_bytes().into_boxed_slice())
            .collect(),
        arrivals_open: true,
        next_arrival: 0.0,
        mean_gap_us: 1e6 / (spec.load * sc.capacity_rps).max(1e-9),
        excluded: Vec::with_capacity(MAX_ATTEMPTS),
        latencies: Vec::with_capacity(
            (spec.load * sc.capacity_rps * sc.duration_us as f64 / 1e6) as usize + 16,
        ),
        calls: 0,
        ok: 0,
        failures: 0,
        timeouts_n: 0,
        no_provider: 0,
        attempts: 0,
        dispatched: vec![0; n],
        series: vec![vec![0; buckets]; n],
        bucket_us: (sc.duration_us / buckets as i64).max(1),
        utilisation: vec![0.0; n],
        hash_load: vec![0; n],
        hash_before: Vec::new(),
        hash_after: Vec::new(),
        hash_probing: match &spec.policy {
            PolicySpec::Library(s) => s.split('&').next().unwrap_or("").contains("hash"),
            PolicySpec::Oracle(_) => false,
        },
        events: 0,
    };
    for &i in &sc.initial {
        e.providers[i].joined_us = Some(0);
    }
    e.members = sc
        .initial
        .iter()
        .map(|&i| Member {
            index: i,
            start_time_ms: 0,
            warmup_ms: 0,
        })
        .collect();
    e.policy.set_members(&e.members);
    for (i, (t, _)) in sc.timeline.iter().enumerate() {
        e.schedule(*t, Ev::Action(i as u32));
    }
    if let (Some((at, _)), true) = (sc.hash_probe, e.hash_probing) {
        // Probes spread over ±0.4 s around the removal (plus one on each side of it, in the
        // Leave action), so that one instant's load does not decide a key's provider.
        for k in 1..PROBES {
            let dt = k as i64 * PROBE_GAP_US;
            e.schedule(at - dt, Ev::Probe { after: false });
            e.schedule(at + dt, Ev::Probe { after: true });
        }
    }
    e.schedule(sc.duration_us, Ev::EndOfArrivals);
    e.next_arrival = e.traffic.exponential(e.mean_gap_us);
    e.schedule(e.next_arrival as i64, Ev::Arrival);
    e.run_loop();
    Ok(e.finish(started.elapsed().as_secs_f64()))
}

impl Engine<'_> {
    fn schedule(&mut self, time: i64, ev: Ev) {
        self.seq += 1;
        self.heap.push(Entry {
            time,
            seq: self.seq,
            ev,
        });
    }

    fn run_loop(&mut self) {
        loop {
            let next_ev = self.heap.peek().map(|e| e.time);
            let next_to = self.timeouts.front().map(|t| t.0);
            match (next_ev, next_to) {
                (None, None) => break,
                (Some(te), Some(tt)) if tt < te => self.pop_timeout(),
                (None, Some(_)) => self.pop_timeout(),
                _ => {
                    let Entry { time, ev, .. } = self.heap.pop().expect("peeked");
                    self.now = time;
                    self.events += 1;
                    self.handle(ev);
                }
            }
        }
    }

    fn pop_timeout(&mut self) {
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

    fn handle(&mut self, ev: Ev) {
        match ev {
            Ev::Arrival => self.arrival(),
            Ev::EndOfArrivals => {
                self.arrivals_open = false;
                for (i, p) in self.providers.iter_mut().enumerate() {
                    self.utilisation[i] = p.utilisation(self.now);
                }
            }
            Ev::ServiceDone {
                provider,
                req,
                epoch,
            } => self.service_done(provider as usize, req, epoch),
            Ev::Response {
                req,
                gen,
                ok,
                metrics,
            } => self.response(req, gen, ok, metrics),
            Ev::Action(i) => self.action(self.sc.timeline[i as usize].1),
            Ev::TransitEnd { provider } => self.providers[provider as usize].in_transit -= 1,
            Ev::Probe { after } => self.probe(after),
        }
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

    fn maybe_free(&mut self, r: u32) {
        let req = &mut self.reqs[r as usize];
        if req.client_done && req.provider_done {
            req.gen = req.gen.wrapping_add(1);
            req.client_done = false;
            req.provider_done = false;
            self.free.push(r);
        }
    }

    fn arrival(&mut self) {
        if !self.arrivals_open {
            return;
        }
        let consumers = self.spec.consumers.max(1) as u64;
        let consumer = if consumers == 1 {
            0
        } else {
            self.traffic.below(consumers) as u32
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

    fn deliver(&mut self, p: usize, r: u32) {
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
                if let Some(ff) = prov.spec.fast_fail_us {
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

    fn service_done(&mut self, p: usize, r: u32, epoch: u32) {
        if self.providers[p].epoch != epoch {
            return;
        }
        let now = self.now;
        let prov = &mut self.providers[p];
        prov.account(now);
        if let Some(i) = prov.in_service.iter().position(|&x| x == r) {
            prov.in_service.swap_remove(i);
        }
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

    fn response(&mut self, r: u32, gen: u32, ok: bool, metrics: bool) {
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
            let lat = (self.now - req.first_us).clamp(0, u32::MAX as i64) as u32;
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

    fn action(&mut self, a: Action) {
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

    fn probe(&mut self, after: bool) {
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

    fn finish(mut self, wall_s: f64) -> RunResult {
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
