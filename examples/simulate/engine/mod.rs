//! The discrete-event engine: a binary heap of events in virtual time (µs), Poisson arrivals,
//! providers (provider.rs), a client timeout per attempt, optional failover retries, and the
//! measurements of one run.
//!
//! Common random numbers: a request's key, cost and base service-time draw come from one
//! traffic stream fixed by the seed, so every policy faces exactly the same requests; its
//! consumer comes from a stream of its own, so that the runs with 1 and with 50 consumers face
//! the same requests too (drawn from the traffic stream, a consumer shifted every later draw,
//! about 8 % of a p99 between consumer counts of one seed).

mod calls;
mod events;
mod results;
mod service;

use crate::oracle::{Oracle, OracleKind};
use crate::policy::{LibraryPolicy, Member, Policy};
use crate::provider::Provider;
use crate::rng::{derive, SimRng};
use crate::scenario::{Keys, Scenario};
use calls::{Req, MAX_ATTEMPTS};
use events::{Entry, Ev};
use std::collections::{BinaryHeap, VecDeque};

#[derive(Clone, Debug, PartialEq)]
pub enum PolicySpec {
    /// A polylb strategy name, optionally followed by `&key=value` options.
    Library(String),
    Oracle(OracleKind),
}

/// polylb's recommended configuration for latency-sensitive services (docs/simulator.md,
/// "Recommended default"); `recommended` names it in `--strategies` and labels its rows.
pub const RECOMMENDED: &str = "peakewma&peakewma.choices=0&peakewma.preferenceMs=1000";

/// The library configuration a `Library` spec stands for: `recommended` is [`RECOMMENDED`],
/// anything else is itself.
pub fn library_config(spec: &str) -> &str {
    match spec {
        "recommended" => RECOMMENDED,
        other => other,
    }
}

/// Whether the strategy of a spec (`name&options`, or `recommended`) places calls by key:
/// its hashing quality is probed and reported.
pub fn hashes_keys(spec: &str) -> bool {
    let name = library_config(spec).split('&').next().unwrap_or("");
    name.contains("hash") || name == "maglev" || name == "rendezvous"
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

/// Probes of the key mapping on each side of a removal, and their spacing.
const PROBES: usize = 9;

const PROBE_GAP_US: i64 = 50_000;

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
    /// Which consumer makes each request (see the module's comment).
    consumer_draws: SimRng,
    key_bytes: Vec<Box<[u8]>>,
    arrivals_open: bool,
    next_arrival: f64,
    mean_gap_us: f64,
    excluded: Vec<usize>,
    // Measurements.
    /// Every successful call's latency (µs; 64 bits: a timeout of up to 2^31 − 1 ms times
    /// the attempts passes 32).
    latencies: Vec<u64>,
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
    /// Probes of every key's provider before the removal (consumer 0's balancer).
    hash_before: Vec<Vec<usize>>,
    /// The same probes just after the removal.
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
            library_config(s),
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
        consumer_draws: SimRng::new(derive(spec.seed, 0xC0_5E7)),
        key_bytes: (0..n_keys)
            .map(|k| format!("key-{k}").into_bytes().into_boxed_slice())
            .collect(),
        arrivals_open: true,
        next_arrival: 0.0,
        mean_gap_us: 1e6 / (spec.load * sc.capacity_rps).max(1e-9),
        excluded: Vec::with_capacity(MAX_ATTEMPTS),
        // The calls the run expects, up to 2^22 (32 MB): beyond, the list grows as calls end
        // (an expectation from a huge load must not be one allocation up front).
        latencies: Vec::with_capacity(
            ((spec.load * sc.capacity_rps * sc.duration_us as f64 / 1e6) as usize + 16)
                .min(1 << 22),
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
            PolicySpec::Library(s) => hashes_keys(s),
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
            weight: e.providers[i].spec.weight,
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
