//! The scenarios: each is a fleet of providers, a request mix, a key distribution and a
//! timeline of membership changes and faults. Offered load is a fraction of `capacity_rps`, the
//! capacity of the providers that can succeed (documented per scenario).

use crate::provider::{Cold, Dist, ProviderSpec, Stall};
use crate::rng::Zipf;
use std::sync::Arc;

/// Mean service time of a cost-1 request at full speed.
pub const BASE_SERVICE_US: f64 = 1_000.0;
/// Workers (the concurrency limit) per provider.
pub const WORKERS: u32 = 4;
/// Coefficient of variation of the lognormal service time (1: as variable as an exponential,
/// with a heavier far tail).
pub const CV: f64 = 1.0;
/// Warm-up announced by providers that (re)start during a run (Dubbo's `warmup`, here short
/// enough to matter within a run).
pub const WARMUP_MS: i32 = 20_000;
/// How long the registry takes to notice a dead provider and tell consumers.
pub const REGISTRY_DELAY_US: i64 = 2_000_000;

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Action {
    /// The provider (re)starts — cold if its spec says so — and is registered with its start
    /// time and warm-up.
    Join(usize),
    /// The registry drops the provider from the consumers' sets.
    Leave(usize),
    /// The process dies: calls in flight fail at once (connection reset); new calls are refused.
    Crash(usize),
    /// The host stops answering: calls in flight and new calls get no answer (client timeout).
    Freeze(usize),
    /// The provider's service-time multiplier changes (for requests starting from now).
    Speed(usize, f64),
}

#[derive(Clone, Debug)]
pub enum Keys {
    Uniform(usize),
    Zipf(Arc<Zipf>),
}

#[derive(Clone, Debug)]
pub struct Scenario {
    /// Short id used on the command line and in file names ("1", "2a", …).
    pub id: &'static str,
    pub name: &'static str,
    pub title: &'static str,
    pub providers: Vec<ProviderSpec>,
    /// Registered (and running) at time 0.
    pub initial: Vec<usize>,
    pub timeline: Vec<(i64, Action)>,
    /// Probability and cost multiplier of heavy requests.
    pub heavy: Option<(f64, f64)>,
    pub keys: Keys,
    /// Requests per second that load 1.0 means.
    pub capacity_rps: f64,
    pub capacity_note: &'static str,
    pub duration_us: i64,
    /// The scenario needs at least this many consumers (herding).
    pub min_consumers: usize,
    /// Remove this provider at this time and measure hashing quality (scenario 7).
    pub hash_probe: Option<(i64, usize)>,
    /// Copies of the scenario's fleet (`--fleet`); 1 = the scenario as described.
    pub fleet: usize,
}

pub const ALL_IDS: &[&str] = &["1", "2a", "2b", "3", "4", "5", "6", "7", "8"];
/// Stress scenarios beyond the default set: run only when named (`--scenarios x1,x2`), never
/// part of the default report.
pub const STRESS_IDS: &[&str] = &["x1", "x2", "x3", "x4", "x5", "x6", "x7", "x8", "x9", "x10"];

impl Scenario {
    /// A scenario with every provider registered at time 0, nothing happening to the set,
    /// uniform keys, no heavy requests and one consumer at least: what most scenarios change
    /// one or two of.
    fn of(
        id: &'static str,
        title: &'static str,
        providers: Vec<ProviderSpec>,
        (capacity_rps, capacity_note): (f64, &'static str),
        duration_us: i64,
    ) -> Scenario {
        Scenario {
            id,
            name: scenario_name(id),
            title,
            capacity_rps,
            capacity_note,
            initial: (0..providers.len()).collect(),
            providers,
            timeline: vec![],
            heavy: None,
            keys: Keys::Uniform(10_000),
            duration_us,
            min_consumers: 1,
            hash_probe: None,
            fleet: 1,
        }
    }

    pub fn mean_cost(&self) -> f64 {
        match self.heavy {
            Some((p, f)) => (1.0 - p) + p * f,
            None => 1.0,
        }
    }

    pub fn label(&self) -> String {
        match self.fleet {
            1 => format!("{}-{}", self.id, self.name),
            k => format!("{}-{}-x{k}", self.id, self.name),
        }
    }

    /// The title, with the fleet's size when it is copied.
    pub fn heading(&self) -> String {
        match self.fleet {
            1 => self.title.to_string(),
            k => format!(
                "{} — the fleet ×{k}: {} providers",
                self.title,
                self.providers.len()
            ),
        }
    }

    /// What load 1.0 is the capacity of, with the fleet's copies when it is copied.
    pub fn capacity_text(&self) -> String {
        match self.fleet {
            1 => self.capacity_note.to_string(),
            k => format!("{}, in each of {k} copies", self.capacity_note),
        }
    }

    /// `k` copies of the fleet (`--fleet`): every provider, its faults and its timeline
    /// actions, so the fault's share of the fleet stays the same while the set a balancer
    /// chooses from grows k-fold; offered load scales with the capacity. Copies of a provider
    /// that stalls stall in turn (copy c shifted by c/k of the period), as independent
    /// processes' pauses would. Scenario 7's hashing probe removes one provider: not copied.
    pub fn copied(mut self, k: usize) -> Result<Scenario, String> {
        if k <= 1 {
            return Ok(self);
        }
        if self.hash_probe.is_some() {
            return Err(format!(
                "--fleet: scenario {} cannot be copied",
                self.label()
            ));
        }
        let n = self.providers.len();
        let mut providers = Vec::with_capacity(n * k);
        for c in 0..k {
            for spec in &self.providers {
                let mut spec = spec.clone();
                if let Some(stall) = &mut spec.stall {
                    stall.first_us += stall.period_us * c as i64 / k as i64;
                }
                providers.push(spec);
            }
        }
        let shift = |p: usize, c: usize| p + c * n;
        self.initial = (0..k)
            .flat_map(|c| self.initial.iter().map(move |&p| shift(p, c)))
            .collect();
        let mut timeline: Vec<(i64, Action)> = (0..k)
            .flat_map(|c| {
                self.timeline.iter().map(move |&(at, action)| {
                    let action = match action {
                        Action::Join(p) => Action::Join(shift(p, c)),
                        Action::Leave(p) => Action::Leave(shift(p, c)),
                        Action::Crash(p) => Action::Crash(shift(p, c)),
                        Action::Freeze(p) => Action::Freeze(shift(p, c)),
                        Action::Speed(p, f) => Action::Speed(shift(p, c), f),
                    };
                    (at, action)
                })
            })
            .collect();
        timeline.sort_by_key(|&(at, _)| at);
        self.timeline = timeline;
        self.providers = providers;
        self.capacity_rps *= k as f64;
        self.fleet = k;
        Ok(self)
    }

    pub fn is_hash_scenario(&self) -> bool {
        self.hash_probe.is_some()
    }
}

/// The provider model shared by every scenario (command-line `--workers`, `--cv`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Model {
    pub workers: u32,
    /// Coefficient of variation of the lognormal service time.
    pub cv: f64,
    /// Exponential service times instead (coefficient of variation 1, a lighter far tail).
    pub exponential: bool,
}

impl Default for Model {
    fn default() -> Self {
        Model {
            workers: WORKERS,
            cv: CV,
            exponential: false,
        }
    }
}

impl Model {
    pub fn provider(&self) -> ProviderSpec {
        let dist = if self.exponential {
            Dist::Exponential
        } else {
            Dist::LogNormal((1.0 + self.cv * self.cv).ln().sqrt())
        };
        ProviderSpec::new(self.workers, BASE_SERVICE_US, dist)
    }
}

fn cold() -> Cold {
    Cold {
        factor: 5.0,
        tau_us: 4_000_000.0,
    }
}

fn capacity(specs: &[ProviderSpec], which: impl Fn(usize) -> bool, mean_cost: f64) -> f64 {
    specs
        .iter()
        .enumerate()
        .filter(|(i, _)| which(*i))
        .map(|(_, s)| s.capacity_rps(mean_cost))
        .sum()
}

fn secs(s: f64) -> i64 {
    (s * 1e6) as i64
}

/// Builds a scenario by id (`"1"`, `"2a"`, … or its name) for a run of `duration_us`
/// (None = the scenario's default). Timelines scale with the duration where they can.
pub fn build(id: &str, duration_us: Option<i64>, model: &Model) -> Option<Scenario> {
    let id = canonical_id(id)?;
    let d = duration_us.unwrap_or_else(|| default_duration_us(id));
    let normal = || model.provider();
    let frac = |f: f64| (d as f64 * f) as i64;
    let s = match id {
        "1" => {
            let providers = vec![normal(); 8];
            let heavy = Some((0.05, 20.0));
            let mean_cost = 0.95 + 0.05 * 20.0;
            let capacity = (capacity(&providers, |_| true, mean_cost), "8 providers");
            Scenario {
                heavy,
                ..Scenario::of(
                    id,
                    "The incident: 8 providers, 5 % heavy requests (20x the cost)",
                    providers,
                    capacity,
                    d,
                )
            }
        }
        "2a" | "2b" => {
            let slow = if id == "2a" { 1 } else { 2 };
            let mut providers = vec![normal(); 4];
            for p in providers.iter_mut().take(slow) {
                p.extra_delay_us = 5_000;
            }
            let title = if slow == 1 {
                "One slow provider of 4 (+5 ms per response)"
            } else {
                "Two slow providers of 4 (+5 ms per response)"
            };
            let capacity = (
                capacity(&providers, |_| true, 1.0),
                "4 providers (the +5 ms holds no worker)",
            );
            Scenario::of(id, title, providers, capacity, d)
        }
        "3" => {
            let mut providers = vec![normal(); 8];
            providers[0].stall = Some(Stall {
                first_us: frac(0.08).min(secs(2.0)),
                period_us: secs(10.0),
                length_us: secs(0.5),
            });
            let capacity = (
                capacity(&providers, |_| true, 1.0),
                "8 providers, the paused one counted at 95 %",
            );
            Scenario::of(
                id,
                "GC pause: one provider of 8 stalls for 500 ms every 10 s",
                providers,
                capacity,
                d,
            )
        }
        "4" => {
            let mut providers = vec![normal(); 4];
            providers[0].fast_fail_us = Some(1_000);
            let capacity = (
                capacity(&providers, |i| i != 0, 1.0),
                "the 3 healthy providers",
            );
            Scenario::of(
                id,
                "A provider of 4 fails fast (errors in 1 ms)",
                providers,
                capacity,
                d,
            )
        }
        "5" => {
            let mut providers = vec![normal(); 8];
            for p in providers.iter_mut().skip(4) {
                p.cold = Some(cold());
            }
            let join = frac(0.2);
            let capacity = (
                capacity(&providers, |i| i < 4, 1.0),
                "the 4 warm providers (the load that triggered the scale-out)",
            );
            Scenario {
                initial: (0..4).collect(),
                timeline: (4..8).map(|p| (join, Action::Join(p))).collect(),
                ..Scenario::of(
                    id,
                    "Scale-out: 4 warm providers, 4 new cold ones join (JIT 5x slower, warm-up 20 s)",
                    providers,
                    capacity,
                    d,
                )
            }
        }
        "6" => {
            let mut providers = vec![normal(); 8];
            for p in providers.iter_mut() {
                p.cold = Some(cold());
            }
            let (a, b) = (2, 5);
            // The registry's delay, shortened in short runs so that every event keeps its order.
            let delay = REGISTRY_DELAY_US.min(frac(0.1));
            let timeline = vec![
                (frac(0.2), Action::Crash(a)),
                (frac(0.2) + delay, Action::Leave(a)),
                (frac(0.45), Action::Join(a)),
                (frac(0.6), Action::Freeze(b)),
                (frac(0.6) + delay, Action::Leave(b)),
                (frac(0.85), Action::Join(b)),
            ];
            let capacity = (
                capacity(&providers, |i| i != 0, 1.0),
                "7 providers, one down at a time; while the second is down the first is still cold: 70 % and 85 % are about 75 % and 90 % then",
            );
            Scenario {
                timeline,
                ..Scenario::of(
                    id,
                    "Churn: a process crash (reset) and a host freeze (no answer), each back later, cold",
                    providers,
                    capacity,
                    d,
                )
            }
        }
        "7" => {
            let providers = vec![normal(); 8];
            let removed = 3;
            let at = frac(0.5);
            let capacity = (
                capacity(&providers, |i| i != removed, 1.0),
                "7 providers (one is removed half-way)",
            );
            Scenario {
                timeline: vec![(at, Action::Leave(removed))],
                keys: Keys::Zipf(Arc::new(Zipf::new(10_000, 1.0))),
                hash_probe: Some((at, removed)),
                ..Scenario::of(
                    id,
                    "Hot keys: Zipf(1.0) over 10 000 keys, 8 providers, one removed half-way",
                    providers,
                    capacity,
                    d,
                )
            }
        }
        "8" => {
            // Unequal speeds give latency-chasing consumers something to herd on; half-way
            // through, the fastest and the slowest providers swap speeds (a noisy neighbour
            // moves), so whoever herded onto the fast ones must move away quickly.
            let fast = 0.7;
            let slow = 1.6;
            let mut providers = vec![normal(); 8];
            for (i, p) in providers.iter_mut().enumerate() {
                p.slowdown = match i {
                    0 | 1 => fast,
                    6 | 7 => slow,
                    _ => 1.0,
                };
            }
            let at = frac(0.5);
            let capacity = (
                capacity(&providers, |_| true, 1.0),
                "8 providers at their own speeds",
            );
            Scenario {
                timeline: vec![
                    (at, Action::Speed(0, slow)),
                    (at, Action::Speed(1, slow)),
                    (at, Action::Speed(6, fast)),
                    (at, Action::Speed(7, fast)),
                ],
                min_consumers: 50,
                ..Scenario::of(
                    id,
                    "Herding: 50+ consumers, 8 providers of unequal speed (0.7x/1x/1.6x service time); fastest and slowest swap half-way",
                    providers,
                    capacity,
                    d,
                )
            }
        }

        "x1" | "x2" | "x3" | "x4" | "x5" | "x6" | "x7" | "x8" | "x9" | "x10" => {
            return Some(stress(id, d, model));
        }
        _ => return None,
    };
    Some(s)
}

/// The id of a scenario given by id or name (`"slow1"` is `"2a"`); None for an unknown one.
pub fn canonical_id(id: &str) -> Option<&'static str> {
    ALL_IDS
        .iter()
        .chain(STRESS_IDS)
        .copied()
        .find(|&k| k == id || scenario_name(k) == id)
}

pub fn scenario_name(id: &str) -> &'static str {
    match id {
        "1" => "incident",
        "2a" => "slow1",
        "2b" => "slow2",
        "3" => "gcpause",
        "4" => "fastfail",
        "5" => "scaleout",
        "6" => "churn",
        "7" => "hotkeys",
        "8" => "herding",
        "x1" => "hetero",
        "x2" => "flap",
        "x3" => "flapfast",
        "x4" => "degrade",
        "x5" => "hang",
        "x6" => "slowerr",
        "x7" => "partial",
        "x8" => "partialslow",
        "x9" => "canary",
        "x10" => "two",
        _ => "?",
    }
}

pub fn default_duration_us(id: &str) -> i64 {
    match id {
        // The incident's tail comes from rare pile-ups of heavy requests: a longer run steadies it.
        "1" => secs(30.0),
        "3" | "5" | "6" => secs(25.0),
        _ => secs(15.0),
    }
}

/// The stress scenarios (`STRESS_IDS`).
fn stress(id: &'static str, d: i64, model: &Model) -> Scenario {
    let normal = || model.provider();
    let frac = |f: f64| (d as f64 * f) as i64;
    let mut providers = vec![
        normal();
        if matches!(id, "x5" | "x7" | "x8" | "x1") {
            8
        } else {
            4
        }
    ];
    let mut timeline = vec![];
    let mut capacity_rps = capacity(&providers, |_| true, 1.0);
    let one = capacity_rps / providers.len() as f64;
    let title: &'static str = match id {
        "x1" => {
            for (p, w) in providers.iter_mut().zip([1, 2, 4, 4, 4, 4, 8, 8]) {
                p.workers = w;
            }
            capacity_rps = capacity(&providers, |_| true, 1.0);
            "Heterogeneous concurrency: 8 providers with 1,2,4,4,4,4,8,8 workers, equal weights"
        }
        "x2" | "x3" => {
            let period = if id == "x2" { 2_000_000 } else { 250_000 };
            let mut t = period;
            let mut slow = true;
            while t < d {
                timeline.push((t, Action::Speed(0, if slow { 5.0 } else { 1.0 })));
                slow = !slow;
                t += period;
            }
            capacity_rps = one * (3.0 + 0.6);
            if id == "x2" {
                "One provider of 4 flaps 1x/5x service time every 2 s"
            } else {
                "One provider of 4 flaps 1x/5x service time every 250 ms"
            }
        }
        "x4" => {
            for k in 1..20 {
                let f = 8f64.powf(k as f64 / 19.0);
                timeline.push((frac(k as f64 / 20.0), Action::Speed(0, f)));
            }
            // Its speed (1 / the service-time factor) averaged over the 20 steps: 0.43.
            let speed = (0..20).map(|k| 8f64.powf(-k as f64 / 19.0)).sum::<f64>() / 20.0;
            capacity_rps = one * (3.0 + speed);
            "One provider of 4 degrades gradually from 1x to 8x service time"
        }
        "x5" => {
            timeline.push((frac(0.2), Action::Freeze(0)));
            capacity_rps = one * 7.0;
            "One provider of 8 hangs at 20 % (no answer: timeouts) and is never dropped"
        }
        "x6" => {
            providers[0].fast_fail_us = Some(300_000);
            capacity_rps = one * 3.0;
            "One provider of 4 answers every call with an error after 300 ms"
        }
        "x7" => {
            for p in providers.iter_mut() {
                p.partial_fail = Some((0.3, 1_000));
            }
            "Partial outage: every provider of 8 fails 30 % of calls in 1 ms"
        }
        "x8" => {
            for p in providers.iter_mut() {
                p.partial_fail = Some((0.3, 50_000));
            }
            "Partial outage: every provider of 8 fails 30 % of calls after 50 ms"
        }
        "x9" => {
            providers[0].weight = 1;
            providers[0].slowdown = 3.0;
            for p in providers.iter_mut().skip(1) {
                p.weight = 99;
            }
            capacity_rps = one * 3.0;
            "Canary: weight 1 (3x slower) against three at weight 99"
        }
        _ => {
            providers.truncate(2);
            providers[0].extra_delay_us = 5_000;
            capacity_rps = one * 2.0;
            "Two providers, one +5 ms"
        }
    };
    Scenario {
        timeline,
        ..Scenario::of(id, title, providers, (capacity_rps, "stress scenario"), d)
    }
}
