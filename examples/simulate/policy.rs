//! Who picks the provider of a call: the real polylb `Balancer` (one per consumer), or an oracle
//! (oracle.rs) that sees the whole world.

use crate::provider::Provider;
use polylb::{Balancer, Invoker, Outcome, Status};

/// A provider as the registry announces it.
#[derive(Clone, Debug)]
pub struct Member {
    pub index: usize,
    /// Unix ms of its (re)start when it announces a warm-up; 0 = unknown (no warm-up).
    pub start_time_ms: i64,
    pub warmup_ms: i32,
    pub weight: i32,
}

pub fn provider_id(index: usize) -> u64 {
    index as u64 + 1
}

pub fn provider_index(id: u64) -> usize {
    (id - 1) as usize
}

pub fn provider_address(index: usize) -> String {
    format!("10.0.{}.{}:20880", index / 250, index % 250 + 1)
}

/// What a provider attaches to a response: for `adaptive` a Dubbo provider's clock and load,
/// for `orca` an ORCA load report.
#[derive(Clone, Copy, Debug)]
pub struct ProviderMetrics {
    pub time_ms: i64,
    pub load: f64,
    pub numbers: crate::provider::LoadNumbers,
}

pub trait Policy {
    /// The registry's current set (all consumers see the same).
    fn set_members(&mut self, members: &[Member]);

    /// Picks a provider index for a call of `consumer`, avoiding `excluded` provider indices
    /// (tried by an earlier attempt). None: no provider at all.
    fn select(
        &mut self,
        consumer: usize,
        key: &[u8],
        excluded: &[usize],
        providers: &[Provider],
        now_us: i64,
    ) -> Option<usize>;

    /// Calls the policy still counts as in flight (the library's `active`, summed over
    /// consumers and providers), once every call has ended: a bookkeeping check. None: n/a.
    fn in_flight_left(&self, _now_us: i64) -> Option<i64> {
        None
    }

    /// Where each key would go now, without sending anything (hashing quality). None: n/a.
    fn probe(&mut self, _consumer: usize, _keys: &[Box<[u8]>], _now_us: i64) -> Option<Vec<usize>> {
        None
    }

    /// The call ended (after `elapsed_us`) at `now_us`.
    fn on_end(
        &mut self,
        consumer: usize,
        provider: usize,
        elapsed_us: i64,
        outcome: Outcome,
        metrics: Option<ProviderMetrics>,
        now_us: i64,
    );
}

/// Virtual time starts here (Unix µs): the library reads time only from `now_us`, and warm-up
/// compares it with Unix-ms start times.
pub const EPOCH_US: i64 = 1_700_000_000_000_000;

/// The library under test: one `Balancer` per consumer, configured with
/// `loadbalance=<spec>&seed=<derived>`, the spec made each consumer's own by [`consumer_spec`].
pub struct LibraryPolicy {
    balancers: Vec<Balancer>,
    methods: Vec<u32>,
    scratch: Vec<u64>,
    /// Dubbo providers attach their load only for `adaptive` (its filter asks for it).
    provider_metrics: bool,
    /// The strategy reads ORCA load reports (`orca`).
    load_reports: bool,
}

/// The spec as consumer `c` runs it: subsets need each consumer's own identity, as a deployment
/// gives its hosts. A spec with `subset.index=<i>` gives consumer c the index i + c; one with
/// `subset.size` and neither a key nor an index gets `&subset.key=consumer-<c>`.
pub fn consumer_spec(spec: &str, consumer: usize) -> String {
    let pairs: Vec<String> = spec
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some(("subset.index", first)) => match first.trim().parse::<u64>() {
                Ok(i) => format!("subset.index={}", i + consumer as u64),
                Err(_) => pair.to_string(),
            },
            _ => pair.to_string(),
        })
        .collect();
    let mut spec = pairs.join("&");
    if spec.contains("subset.size=")
        && !spec.contains("subset.key=")
        && !spec.contains("subset.index=")
    {
        spec.push_str(&format!("&subset.key=consumer-{consumer}"));
    }
    spec
}

impl LibraryPolicy {
    /// `spec` is a strategy name, optionally followed by `&key=value` options. Fails with the
    /// library's message for an unknown strategy or option.
    pub fn new(
        spec: &str,
        consumers: usize,
        seed: u64,
        timeout_ms: i64,
    ) -> Result<LibraryPolicy, String> {
        let mut balancers = Vec::with_capacity(consumers);
        let mut methods = Vec::with_capacity(consumers);
        let name = spec.split('&').next().unwrap_or("");
        for c in 0..consumers {
            let mut config = format!(
                "loadbalance={}&seed={}",
                consumer_spec(spec, c),
                crate::rng::derive(seed, 0xB41 + c as u64)
            );
            if name == "adaptive" && !spec.contains("timeout=") {
                config.push_str(&format!("&timeout={timeout_ms}"));
            }
            let lb = Balancer::new(&config).map_err(|e| e.to_string())?;
            methods.push(lb.method("call").map_err(|e| e.to_string())?);
            balancers.push(lb);
        }
        Ok(LibraryPolicy {
            balancers,
            methods,
            scratch: Vec::new(),
            provider_metrics: name == "adaptive",
            load_reports: name == "orca",
        })
    }
}

impl Policy for LibraryPolicy {
    fn set_members(&mut self, members: &[Member]) {
        let invokers: Vec<Invoker> = members
            .iter()
            .map(|m| {
                Invoker::new(provider_id(m.index), provider_address(m.index))
                    .start_time_ms(m.start_time_ms)
                    .warmup_ms(m.warmup_ms)
                    .weight(m.weight)
            })
            .collect();
        for lb in &self.balancers {
            lb.update(&invokers).expect("a valid invoker set");
        }
    }

    fn in_flight_left(&self, now_us: i64) -> Option<i64> {
        let mut total = 0;
        for lb in &self.balancers {
            let json = lb.stats_json(EPOCH_US + now_us);
            let mut rest = json.as_str();
            while let Some(i) = rest.find("\"active\":") {
                rest = &rest[i + 9..];
                let end = rest
                    .find(|c: char| !(c.is_ascii_digit() || c == '-'))
                    .unwrap_or(rest.len());
                total += rest[..end].parse::<i64>().unwrap_or(0).abs();
            }
        }
        Some(total)
    }

    fn probe(&mut self, consumer: usize, keys: &[Box<[u8]>], now_us: i64) -> Option<Vec<usize>> {
        let lb = &self.balancers[consumer];
        let method = self.methods[consumer];
        let mut picks = Vec::with_capacity(keys.len());
        for key in keys {
            let id = lb.select(method, key, EPOCH_US + now_us).ok()?;
            // Never sent: undo the in-flight count at once, so every probe sees the same state.
            lb.report(method, id, 0, Outcome::Cancelled, EPOCH_US + now_us)
                .ok()?;
            picks.push(provider_index(id));
        }
        Some(picks)
    }

    fn select(
        &mut self,
        consumer: usize,
        key: &[u8],
        excluded: &[usize],
        _providers: &[Provider],
        now_us: i64,
    ) -> Option<usize> {
        self.scratch.clear();
        self.scratch
            .extend(excluded.iter().map(|&i| provider_id(i)));
        let lb = &self.balancers[consumer];
        let pick = |excluded: &[u64]| {
            lb.select_among(
                self.methods[consumer],
                key,
                &[],
                excluded,
                EPOCH_US + now_us,
            )
        };
        match pick(&self.scratch) {
            Ok(id) => Some(provider_index(id)),
            // Every provider was tried: Dubbo's failover then picks among the tried ones
            // (`AbstractClusterInvoker.reselect`), as the oracles do, rather than give up.
            Err(Status::NoCandidate) if !self.scratch.is_empty() => {
                pick(&[]).ok().map(provider_index)
            }
            Err(_) => None,
        }
    }

    fn on_end(
        &mut self,
        consumer: usize,
        provider: usize,
        elapsed_us: i64,
        outcome: Outcome,
        metrics: Option<ProviderMetrics>,
        now_us: i64,
    ) {
        let lb = &self.balancers[consumer];
        let method = self.methods[consumer];
        let id = provider_id(provider);
        if let (Some(m), true) = (metrics, self.provider_metrics) {
            lb.report_provider_metrics(
                method,
                id,
                m.time_ms,
                m.load,
                elapsed_us,
                EPOCH_US + now_us,
            )
            .expect("valid provider metrics");
        }
        if let (Some(m), true) = (metrics, self.load_reports) {
            let report = polylb::LoadReport {
                qps: m.numbers.qps,
                eps: m.numbers.eps,
                utilization: m.numbers.utilization,
            };
            lb.report_load(id, report, EPOCH_US + now_us)
                .expect("valid load report");
        }
        lb.report(method, id, elapsed_us, outcome, EPOCH_US + now_us)
            .expect("valid report");
    }
}
