//! One sequence: the operations, drawn from a seed, run on the balancer under test (A), on a
//! twin given only the updates A accepted (B), and on a twin given only the calls of one method
//! (I), each step checked against the model.

use crate::common::zone_filter::{filtered, Zoning};
use crate::reference::*;
use polylb::{wall_clock_us, Balancer, Invoker, Outcome, Status};
use serde_json::Value;
use std::collections::{BTreeSet, HashMap};

const BASE_US: i64 = 1_700_000_000_000_000;

/// The times a sequence's calls pass.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Clocks {
    /// The caller's own (virtual) time only.
    Caller,
    /// Now and then the library's clock (0), years after the caller's: every warm-up is over
    /// there, and each switch is a jump of years forward or back.
    LibraryFar,
    /// Now and then the library's clock, the caller's time starting from it: warm-ups run on
    /// both, and the caller's jumps take it ahead of or behind the library's.
    LibraryNear,
}
const METHODS: [&str; 3] = ["", "get", "iso"];
/// The method whose calls twin I also gets.
const ISO: u32 = 2;
const ZONES: [&str; 4] = ["z0", "z1", "z2", ""];
const KEYS: [&[u8]; 6] = [b"", b"user-1", b"user-2", b"cart/77", b"\xff\x00k", b"a"];

#[derive(Default, Debug)]
pub struct Totals {
    pub sequences: u64,
    pub steps: u64,
    pub picks: u64,
    pub select_errors: u64,
    pub updates: u64,
    pub rejected_updates: u64,
    pub reports: u64,
    /// Picks checked against a strategy's own rule (beyond membership).
    pub rule_checks: u64,
    /// Calls compared with twin B or I.
    pub twin_checks: u64,
    /// Picks the filters confined to fewer invokers than the call allowed.
    pub narrowed: u64,
    /// `orca` rows whose weight counted, and those that had a weight that did not (in blackout,
    /// lapsed, or ended by a reconnect), checked against the model.
    pub orca_counted: u64,
    pub orca_not_counted: u64,
    /// Reconnects that ended a run whose weight counted.
    pub reconnects_uncounting: u64,
}

impl Totals {
    pub fn add(&mut self, t: &Totals) {
        self.sequences += 1;
        self.steps += t.steps;
        self.picks += t.picks;
        self.select_errors += t.select_errors;
        self.updates += t.updates;
        self.rejected_updates += t.rejected_updates;
        self.reports += t.reports;
        self.rule_checks += t.rule_checks;
        self.twin_checks += t.twin_checks;
        self.narrowed += t.narrowed;
        self.orca_counted += t.orca_counted;
        self.orca_not_counted += t.orca_not_counted;
        self.reconnects_uncounting += t.reconnects_uncounting;
    }
}

#[derive(Clone, Debug)]
struct Inv {
    id: u64,
    weight: i32,
    address: String,
    start_ms: i64,
    warmup_ms: i32,
    zone: &'static str,
}

impl Inv {
    fn invoker(&self) -> Invoker {
        Invoker::new(self.id, self.address.clone())
            .weight(self.weight)
            .start_time_ms(self.start_ms)
            .warmup_ms(self.warmup_ms)
            .zone(self.zone)
    }
}

#[derive(Default, Clone, Copy, Debug, PartialEq)]
struct Counts {
    selected: u64,
    succeeded: u64,
    failures: u64,
    timeouts: u64,
}

struct Model {
    config: polylb::Config,
    set: Vec<Inv>,
    counts: HashMap<u64, Counts>,
    /// Calls in flight per (method, id) of the set.
    active: HashMap<(u32, u64), i64>,
    /// Selected and not yet reported.
    outstanding: Vec<(u32, u64)>,
    /// Reported once already (ended again: a double end).
    ended: Vec<(u32, u64)>,
    /// Dubbo's round robin per method; None once a pick's list was not known exactly.
    rr: Vec<Option<DubboRoundRobin>>,
    /// `shortestresponse`'s windows.
    windows: Windows,
    /// Slow start: when each invoker's ramp began.
    joined: HashMap<u64, Joined>,
    /// Per method: provider metrics were reported (adaptive's loads may differ from 0).
    metrics: [bool; METHODS.len()],
    points: Points,
    maglev: MaglevTables,
    /// `orca`: each invoker's last accepted load report and its run, while it stays in the set.
    loads: HashMap<u64, LoadRun>,
}

/// `orca`'s record of an invoker's load reports (src/strategy/orca.rs's module doc).
#[derive(Clone, Copy, Debug)]
struct LoadRun {
    /// The last accepted report's weight.
    weight: f64,
    /// When the run of reports began (ms; 0 = none: never, or ended by a reconnect).
    since_ms: i64,
    /// When the last report came (ms; 0 after a reconnect).
    last_ms: i64,
    /// Some report came at the library's clock, or the clock stepped back from its last
    /// report: its times are known only roughly.
    fuzzy: bool,
}

impl LoadRun {
    /// Whether the weight counts at `now_ms`: a run that has passed its blackout and not
    /// lapsed.
    fn counts(&self, now_ms: i64, orca: &polylb::OrcaConfig) -> bool {
        self.since_ms != 0
            && now_ms.saturating_sub(self.since_ms) >= orca.blackout_ms
            && now_ms.saturating_sub(self.last_ms) < orca.expiration_ms
    }
}

/// How far back a clock may step behind a run's start before a report starts a new run
/// (src/clock.rs).
const STEP_BACK_MS: i64 = 1_000;

/// Slow start's state of an invoker (src/strategy/slow_start.rs's module doc).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Joined {
    /// In the first set, or alone in its set: never ramps.
    Exempt,
    /// Joined an existing set; its ramp starts at the next pick.
    Waiting,
    /// Ramping from this time (ms); `fuzzy` when stamped at the library's clock.
    At { ms: i64, fuzzy: bool },
}

/// `shortestresponse`'s windows (Dubbo's, but one per method: src/strategy/shortest_response.rs):
/// per (method, id) the successes and the sum of their whole milliseconds since the method's
/// window started (at its first select, a single candidate's included); a pick that runs the
/// strategy (two candidates or more) more than `shortestresponse.slidePeriod` after the start
/// resets every window of the method after it.
#[derive(Default)]
struct Windows {
    /// Per method: its window's start (None before its first pick; true when at the library's
    /// clock, a few ms before the time the library read), or unknown.
    started: [Option<Option<(i64, bool)>>; METHODS.len()],
    counts: HashMap<(u32, u64), (u64, u64)>,
}

impl Windows {
    fn new() -> Windows {
        Windows {
            started: [Some(None); METHODS.len()],
            counts: HashMap::new(),
        }
    }

    /// A pick at `now_ms` among `candidates` invokers (None: not known how many); `fuzzy` as
    /// in `DubboRoundRobin::select`.
    fn picked(
        &mut self,
        m: u32,
        candidates: Option<usize>,
        now_ms: i64,
        slide_ms: i64,
        fuzzy: bool,
    ) {
        let slot = &mut self.started[m as usize];
        let Some(started) = *slot else { return };
        let Some(n) = candidates else {
            *slot = None;
            return;
        };
        let (started, fuzzy_start) = started.unwrap_or((now_ms, fuzzy));
        if n < 2 {
            // The strategy does not run, but the method's first select of any kind starts its
            // window (Dubbo's starts with its balancer, at the first call).
            *slot = Some(Some((started, fuzzy_start)));
            return;
        }
        let age = now_ms.wrapping_sub(started);
        if (fuzzy || fuzzy_start) && (age - slide_ms).abs() <= 50 {
            *slot = None;
        } else if age > slide_ms {
            *slot = Some(Some((now_ms, fuzzy)));
            self.counts.retain(|(method, _), _| *method != m);
        } else {
            *slot = Some(Some((started, fuzzy_start)));
        }
    }

    /// A report of `id` (in the set) for method `m`; `elapsed_us` None when not known.
    fn reported(&mut self, m: u32, id: u64, outcome: Outcome, elapsed_us: Option<i64>) {
        if outcome != Outcome::Success {
            return;
        }
        match elapsed_us {
            Some(us) => {
                let c = self.counts.entry((m, id)).or_default();
                c.0 += 1;
                c.1 += (us as u64 / 1000).min(1 << 32);
            }
            None => self.started[m as usize] = None,
        }
    }
}

impl Model {
    fn inv(&self, id: u64) -> &Inv {
        self.set.iter().find(|i| i.id == id).unwrap()
    }

    /// Dubbo's warm-up weight of `id` at `now_ms` (the balancer's `warmup` for a negative one).
    fn weight(&self, id: u64, now_ms: i64) -> i32 {
        let i = self.inv(id);
        let warmup = if i.warmup_ms < 0 {
            self.config.warmup_ms
        } else {
            i.warmup_ms
        };
        dubbo_weight(i.weight, i.start_ms, warmup, now_ms)
    }

    /// A report of `id` for method `m`: counted, and one call fewer in flight (never below 0).
    fn reported(&mut self, m: u32, id: u64, outcome: Outcome, elapsed_us: Option<i64>) {
        let Some(c) = self.counts.get_mut(&id) else {
            return; // not in the set: accepted and ignored
        };
        self.windows.reported(m, id, outcome, elapsed_us);
        match outcome {
            Outcome::Success => c.succeeded += 1,
            Outcome::Failure => c.failures += 1,
            Outcome::Timeout => {
                c.failures += 1;
                c.timeouts += 1;
            }
            Outcome::Cancelled => {}
        }
        let a = self.active.entry((m, id)).or_default();
        *a = (*a - 1).max(0);
    }

    fn active(&self, m: u32, id: u64) -> i64 {
        self.active.get(&(m, id)).copied().unwrap_or(0)
    }

    /// Whether calls prefer the invoker: in the subset with subsetting, else in the zone.
    fn is_local(&self, id: u64) -> bool {
        let subset = &self.config.subset;
        if subset.size > 0 {
            let set: Vec<(u64, &str, i32, &str)> = self
                .set
                .iter()
                .map(|i| (i.id, i.address.as_str(), i.weight, i.zone))
                .collect();
            let zone = self.config.zone.as_deref();
            let size = subset.size as usize;
            let members = match (subset.key.as_deref(), subset.index) {
                (Some(key), _) => crate::reference::subset_members(&set, key, size, zone),
                (None, Some(index)) => crate::reference::dealt_members(&set, index, size, zone),
                (None, None) => unreachable!("subset.size needs a key or an index"),
            };
            return members.contains(&id);
        }
        let zone = self.inv(id).zone;
        !zone.is_empty() && Some(zone) == self.config.zone.as_deref()
    }

    /// The call's candidates in set order, or the select's documented error.
    fn allowed(&self, m: u32, cands: &[u64], excl: &[u64]) -> Result<Vec<u64>, Status> {
        if m as usize >= METHODS.len() {
            return Err(Status::UnknownMethod);
        }
        if self.set.is_empty() {
            return Err(Status::NoProvider);
        }
        if cands.iter().any(|c| !self.set.iter().any(|i| i.id == *c)) {
            return Err(Status::UnknownCandidate);
        }
        let allowed: Vec<u64> = self
            .set
            .iter()
            .map(|i| i.id)
            .filter(|id| (cands.is_empty() || cands.contains(id)) && !excl.contains(id))
            .collect();
        if allowed.is_empty() {
            return Err(Status::NoCandidate);
        }
        Ok(allowed)
    }

    /// What outlier ejection and zone preference leave of `allowed` (docs/strategies.md), and
    /// whether the strategy picks among exactly those (false when the zone's share of the
    /// calls is drawn at random).
    fn filtered(&self, allowed: &[u64], ejected: &BTreeSet<u64>) -> (Vec<u64>, bool) {
        let is_local = |x: u64| self.is_local(x);
        let weighs = |x: u64| self.inv(x).weight > 0;
        let subsetting = self.config.subset.size > 0;
        let zoning = (subsetting || self.config.zone.is_some()).then_some(Zoning {
            is_local: &is_local,
            weighs: &weighs,
            min_healthy_percent: if subsetting {
                self.config.subset.min_healthy_percent
            } else {
                self.config.zone_min_healthy_percent
            },
            weights_drain: Zoning::weights_drain(self.config.strategy),
        });
        filtered(allowed, ejected, zoning)
    }
}

/// The stats' invoker rows by id.
fn rows(json: &str) -> HashMap<u64, Value> {
    let v: Value = serde_json::from_str(json).unwrap_or_else(|e| panic!("stats JSON: {e}"));
    v["invokers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["id"].as_u64().unwrap(), r.clone()))
        .collect()
}

/// The ejections a pick at `now_ms` honours: not over, and not ending further ahead than the
/// longest ejection (stamped before the clock stepped back: lifted at once).
fn ejected_at(rows: &HashMap<u64, Value>, now_ms: i64, max_ms: i64) -> BTreeSet<u64> {
    rows.iter()
        .filter(|(_, r)| {
            let until = r["ejected_until_ms"].as_i64().unwrap();
            // One ending more than the longest ejection and a second ahead was made before the
            // clock stepped back: picks treat it as lifted (docs/abi-contract.md).
            r["ejected"] == true && until > now_ms && until - now_ms <= max_ms.saturating_add(1000)
        })
        .map(|(id, _)| *id)
        .collect()
}

/// A method row's field (0 when the invoker has no row for the method).
fn method_field(row: &Value, method: &str, field: &str) -> i64 {
    row["methods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["method"] == method)
        .map_or(0, |r| {
            r[field].as_i64().unwrap_or_else(|| panic!("{field}: {r}"))
        })
}

struct Seq<'a> {
    rng: Rng,
    strategy: &'a str,
    /// The caller's clock, µs.
    now: i64,
    clocks: Clocks,
    model: Model,
    a: Balancer,
    b: Balancer,
    /// Per-method isolation twin, for the strategies whose picks read only the method's state.
    iso: Option<Balancer>,
    /// Compare B's answers (off where a library-clock call reads a different time in A and B
    /// and the strategy's picks read time).
    twin: bool,
    /// The pick being checked was made at the library's clock.
    at_library: bool,
    t: Totals,
    log: Vec<String>,
}

pub fn run_sequence(config: &str, seed: u64, clocks: Clocks, steps: usize) -> Totals {
    let a = Balancer::new(config).unwrap_or_else(|e| panic!("{config}: {e}"));
    let c = a.config().clone();
    let strategy = c.strategy.name();
    let time_free = matches!(
        strategy,
        "random" | "roundrobin" | "leastactive" | "consistenthash" | "maglev" | "rendezvous"
    );
    // Near the library's clock, twins read it at other moments than A: only picks that never
    // read time (no weights, which warm up) can be compared.
    let near = clocks == Clocks::LibraryNear;
    let isolated = matches!(
        strategy,
        "roundrobin" | "consistenthash" | "boundedhash" | "maglev" | "rendezvous"
    ) && (!near || matches!(strategy, "consistenthash" | "maglev" | "rendezvous"))
        && !c.outlier.enabled()
        && c.slow_start.window_ms == 0;
    let mut s = Seq {
        rng: Rng(seed ^ 0x5eed),
        strategy,
        now: match clocks {
            Clocks::LibraryNear => wall_clock_us(),
            _ => BASE_US,
        },
        clocks,
        model: Model {
            config: c,
            set: Vec::new(),
            counts: HashMap::new(),
            active: HashMap::new(),
            outstanding: Vec::new(),
            ended: Vec::new(),
            rr: vec![Some(DubboRoundRobin::default()); METHODS.len()],
            windows: Windows::new(),
            joined: HashMap::new(),
            metrics: [false; METHODS.len()],
            points: Points::default(),
            maglev: MaglevTables::default(),
            loads: HashMap::new(),
        },
        b: Balancer::new(config).unwrap(),
        iso: isolated.then(|| Balancer::new(config).unwrap()),
        a,
        twin: match clocks {
            Clocks::Caller => true,
            Clocks::LibraryFar => time_free,
            Clocks::LibraryNear => matches!(strategy, "consistenthash" | "maglev" | "rendezvous"),
        },
        at_library: false,
        t: Totals::default(),
        log: Vec::new(),
    };
    for (k, name) in METHODS.iter().enumerate() {
        assert_eq!(s.a.method(name).unwrap(), k as u32);
        assert_eq!(s.b.method(name).unwrap(), k as u32);
        if let Some(i) = &s.iso {
            assert_eq!(i.method(name).unwrap(), k as u32);
        }
    }
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        for _ in 0..steps {
            s.step();
            s.t.steps += 1;
        }
        s.finish();
    }));
    if let Err(e) = result {
        let tail = s.log.len().saturating_sub(40);
        eprintln!(
            "config {config}, seed {seed}, {clocks:?}; last steps:\n{}",
            s.log[tail..].join("\n")
        );
        std::panic::resume_unwind(e);
    }
    s.t
}

impl Seq<'_> {
    /// The time of one call: the caller's, or 0 (the library's clock) now and then.
    fn call_time(&mut self) -> (i64, i64) {
        if self.clocks != Clocks::Caller && self.rng.chance(250) {
            (0, wall_clock_us())
        } else {
            (self.now, self.now)
        }
    }

    /// For a call at the library's clock whose time the model took as `model_us` (read just
    /// before it): whether every weight was the same at the library's reading, which came
    /// later. If not, what the call saw is not known exactly.
    fn settled(&self, t: i64, model_us: i64) -> bool {
        if t != 0 {
            return true;
        }
        let (then, now) = (model_us.div_euclid(1000), wall_clock_us().div_euclid(1000));
        self.model
            .set
            .iter()
            .all(|i| self.model.weight(i.id, then) == self.model.weight(i.id, now))
    }

    fn step(&mut self) {
        match self.rng.below(100) {
            0..=9 => self.update(),
            10..=41 => self.select(false),
            42..=44 => self.select(self.clocks != Clocks::Caller),
            45..=49 => self.burst(),
            50..=79 => self.report(),
            80..=82 => self.provider_metrics(),
            // orca's picks follow its load reports: more of them there.
            83..=92 if self.strategy == "orca" && self.rng.chance(300) => self.reconnect(),
            83..=92 if self.strategy == "orca" => self.load_report(),
            83..=84 if self.rng.chance(200) => self.reconnect(),
            83..=84 => self.load_report(),
            _ => self.advance(),
        }
        self.check_stats();
    }

    /// Many selects of one method, each reported at once: what a steady stream of calls does
    /// (round robin's period and tournament come into play after a few picks).
    fn burst(&mut self) {
        let m = self.rng.below(METHODS.len() as u64) as u32;
        let (t, now_us) = self.call_time();
        let outlier = self.model.config.outlier.enabled();
        let ids: Vec<u64> = self.model.set.iter().map(|i| i.id).collect();
        // The whole set, or one subset again and again (a router's candidates).
        let cands: Vec<u64> = if ids.len() > 2 && self.rng.chance(300) {
            ids.iter()
                .copied()
                .filter(|_| self.rng.chance(600))
                .collect()
        } else {
            Vec::new()
        };
        let n = 5 + self.rng.below(60);
        self.log
            .push(format!("burst of {n} on m{m} among {cands:?} at {t}"));
        let now_ms = now_us.div_euclid(1000);
        let max_ejection_ms = self.model.config.outlier.max_ejection_ms;
        for _ in 0..n {
            // What the pick reads, as the stats show it just before.
            let before = (outlier || self.strategy == "shortestresponse")
                .then(|| rows(&self.a.stats_json(now_us)));
            let got = self.a.select_among(m, b"k", &cands, &[], t);
            if self.twin {
                self.t.twin_checks += 1;
                assert_eq!(self.b.select_among(m, b"k", &cands, &[], t), got);
            }
            if let (Some(i), true) = (&self.iso, m == ISO) {
                assert_eq!(i.select_among(m, b"k", &cands, &[], t), got);
            }
            let allowed = match self.model.allowed(m, &cands, &[]) {
                Err(status) => {
                    assert_eq!(got, Err(status));
                    return;
                }
                Ok(allowed) => allowed,
            };
            let id = got.unwrap_or_else(|e| panic!("select failed: {e:?}"));
            self.t.picks += 1;
            let ejected = match &before {
                Some(rows) if outlier => ejected_at(rows, now_ms, max_ejection_ms),
                _ => BTreeSet::new(),
            };
            let (may, exact) = self.model.filtered(&allowed, &ejected);
            assert!(may.contains(&id), "{id} not among {may:?}");
            if exact && self.settled(t, now_us) {
                self.at_library = t == 0;
                self.check_rule(m, b"k", &may, id, now_ms, before.as_ref());
            } else {
                self.model.rr[m as usize] = None;
            }
            self.after_pick(m, exact.then_some(may.len()), now_ms, t);
            self.model.counts.get_mut(&id).unwrap().selected += 1;
            *self.model.active.entry((m, id)).or_default() += 1;
            self.model.reported(m, id, Outcome::Success, Some(1_000));
            self.a.report(m, id, 1_000, Outcome::Success, t).unwrap();
            if self.twin {
                self.b.report(m, id, 1_000, Outcome::Success, t).unwrap();
            }
            if let (Some(i), true) = (&self.iso, m == ISO) {
                i.report(m, id, 1_000, Outcome::Success, t).unwrap();
            }
        }
    }

    fn advance(&mut self) {
        let dt = match self.rng.below(10) {
            0 => 61_000_000,
            1 => 400_000_000,
            2 => -(self.rng.below(60_000_000) as i64),
            _ => self.rng.below(3_000_000) as i64,
        };
        self.now = (self.now + dt).max(1);
        self.log.push(format!("time {dt:+} -> {}", self.now));
        // orca takes a last report stamped more than STEP_BACK_MS ahead as made at the step,
        // at its next recomputation (a pick's, when due): when that is is not modelled.
        let now_ms = self.now.div_euclid(1000);
        for run in self.model.loads.values_mut() {
            if run.last_ms.saturating_sub(now_ms) > STEP_BACK_MS {
                run.fuzzy = true;
            }
        }
    }

    fn draw_set(&mut self) -> Vec<Inv> {
        let now_ms = self.now / 1000;
        let mut set: Vec<Inv> = if !self.model.set.is_empty() && self.rng.chance(600) {
            self.model.set.clone()
        } else {
            Vec::new()
        };
        // Mutate a kept set: drop one, change one, re-add departed ids below.
        if !set.is_empty() && self.rng.chance(400) {
            let k = self.rng.below(set.len() as u64) as usize;
            set.remove(k);
        }
        if !set.is_empty() && self.rng.chance(500) {
            let k = self.rng.below(set.len() as u64) as usize;
            match self.rng.below(4) {
                0 => set[k].weight = self.rng.pick(&[0, 1, 3, 100, 250]),
                1 => set[k].zone = self.rng.pick(&ZONES),
                2 => set[k].address = format!("10.0.{}.1:20880", self.rng.below(6)),
                _ => set[k].start_ms = now_ms - self.rng.below(40_000) as i64,
            }
        }
        let n = if set.is_empty() {
            // An empty set now and then (NoProvider), else up to 8 invokers.
            match self.rng.chance(80) {
                true => 0,
                false => 1 + self.rng.below(8) as usize,
            }
        } else {
            (set.len() + self.rng.below(2) as usize).min(8)
        };
        while set.len() < n {
            let id = self.rng.below(10);
            if set.iter().any(|i| i.id == id) {
                continue;
            }
            let start_ms = match self.rng.below(10) {
                0..=5 => 0,
                6 => now_ms + 5_000, // not started yet (clock skew): weighs 1
                _ => now_ms - self.rng.below(50_000) as i64,
            };
            let at = self.rng.below(set.len() as u64 + 1) as usize;
            let inv = Inv {
                id,
                // Large weights with gcd 1: round robin's period no longer fits.
                weight: self
                    .rng
                    .pick(&[0, 1, 2, 3, 5, 100, 100, 250, 99_991, 100_003]),
                address: format!("10.0.{}.1:20880", self.rng.below(6)),
                start_ms,
                warmup_ms: self.rng.pick(&[-1, 0, 20_000, 40_000]),
                zone: self.rng.pick(&ZONES),
            };
            set.insert(at, inv);
        }
        set
    }

    fn update(&mut self) {
        let set = self.draw_set();
        let mut invokers: Vec<Invoker> = set.iter().map(Inv::invoker).collect();
        let hashing = matches!(
            self.strategy,
            "consistenthash" | "boundedhash" | "maglev" | "rendezvous"
        );
        let mut expected = Ok(());
        if !invokers.is_empty() && self.rng.chance(300) {
            let k = self.rng.below(invokers.len() as u64) as usize;
            expected = match self.rng.below(4) {
                0 => {
                    let dup = invokers[k].clone().weight(9);
                    invokers.push(dup);
                    Err(Status::DuplicateId)
                }
                1 => {
                    invokers[k].weight = -1;
                    Err(Status::NegativeWeight)
                }
                2 => {
                    invokers[k].id = i64::MAX as u64 + 1;
                    Err(Status::IdOutOfRange)
                }
                _ => {
                    invokers[k].address = String::new();
                    if hashing {
                        Err(Status::InvalidArgument)
                    } else {
                        Ok(())
                    }
                }
            };
        }
        // maglev's table needs a slot per invoker, checked before the invokers themselves.
        if self.strategy == "maglev"
            && invokers.len() > self.model.config.maglev_table_size as usize
        {
            expected = Err(Status::LimitExceeded);
        }
        let (t, _) = self.call_time();
        let before = self.a.stats_json(t.max(1));
        let got = self.a.update(&invokers).map_err(|e| e.status);
        self.log.push(format!(
            "update {:?} -> {got:?}",
            invokers
                .iter()
                .map(|i| (
                    i.id,
                    i.weight,
                    &i.address[..],
                    i.start_time_ms,
                    i.warmup_ms,
                    &i.zone
                ))
                .collect::<Vec<_>>()
        ));
        assert_eq!(got, expected, "update");
        if got.is_err() {
            self.t.rejected_updates += 1;
            assert_eq!(
                self.a.stats_json(t.max(1)),
                before,
                "a rejected update changed the stats"
            );
            return;
        }
        self.t.updates += 1;
        self.b.update(&invokers).unwrap();
        if let Some(i) = &self.iso {
            i.update(&invokers).unwrap();
        }
        let mut set = set;
        for (inv, given) in set.iter_mut().zip(&invokers) {
            inv.address = given.address.clone();
        }
        let ids: BTreeSet<u64> = set.iter().map(|i| i.id).collect();
        let m = &mut self.model;
        m.counts.retain(|id, _| ids.contains(id));
        m.active.retain(|(_, id), _| ids.contains(id));
        m.windows.counts.retain(|(_, id), _| ids.contains(id));
        // Slow start: a newcomer waits for its ramp, unless the set was empty (the first set)
        // or it is alone.
        m.joined.retain(|id, _| ids.contains(id));
        m.loads.retain(|id, _| ids.contains(id));
        let exempt = m.set.is_empty() || ids.len() == 1;
        for id in &ids {
            let j = m.joined.entry(*id).or_insert(Joined::Waiting);
            if exempt && *j == Joined::Waiting {
                *j = Joined::Exempt;
            }
        }
        for id in &ids {
            m.counts.entry(*id).or_default();
        }
        m.set = set;
    }

    /// One select, through a `Call` guard (library clock, reported when finished or dropped)
    /// when `guard`.
    fn select(&mut self, guard: bool) {
        let m = if self.rng.chance(900) {
            self.rng.below(METHODS.len() as u64) as u32
        } else {
            METHODS.len() as u32 + self.rng.below(3) as u32
        };
        let key: Vec<u8> = if self.rng.chance(800) {
            self.rng.pick(&KEYS).to_vec()
        } else {
            (0..self.rng.below(20))
                .map(|_| self.rng.below(256) as u8)
                .collect()
        };
        let ids: Vec<u64> = self.model.set.iter().map(|i| i.id).collect();
        let some = |rng: &mut Rng, max: u64| -> Vec<u64> {
            (0..1 + rng.below(max))
                .map(|_| {
                    if !ids.is_empty() && rng.chance(900) {
                        rng.pick(&ids)
                    } else {
                        rng.below(12)
                    }
                })
                .collect()
        };
        let (cands, excl): (Vec<u64>, Vec<u64>) = match self.rng.below(10) {
            0..=4 => (Vec::new(), Vec::new()),
            5 | 6 => (Vec::new(), some(&mut self.rng, 3)),
            7 => (ids.clone(), ids.clone()), // every candidate excluded
            _ => {
                let mut c = some(&mut self.rng, 5);
                if !self.rng.chance(100) {
                    c.retain(|x| ids.contains(x));
                }
                let e = if self.rng.chance(400) {
                    some(&mut self.rng, 2)
                } else {
                    Vec::new()
                };
                (c, e)
            }
        };
        let (t, now_us) = match guard {
            true => (0, wall_clock_us()),
            false => self.call_time(),
        };
        let now_ms = now_us.div_euclid(1000);
        let model = &self.model;
        let outlier = &model.config.outlier;
        // What the pick reads, as the stats show it just before.
        let before = (outlier.enabled() || self.strategy == "shortestresponse")
            .then(|| rows(&self.a.stats_json(now_us)));
        // Clones share their balancer: the guards borrow these, not `self`.
        let (a, b, iso) = (self.a.clone(), self.b.clone(), self.iso.clone());
        let mut guards = Vec::new();
        // A macro, not a closure: each guard borrows the balancer it was given.
        macro_rules! pick {
            ($lb:expr) => {
                match guard {
                    false => $lb.select_among(m, &key, &cands, &excl, t),
                    true => $lb.call_among(m, &key, &cands, &excl).map(|call| {
                        let id = call.id();
                        guards.push(call);
                        id
                    }),
                }
            };
        }
        let got = pick!(a);
        self.log.push(format!(
            "select m{m} key {key:?} cands {cands:?} excl {excl:?} at {t} (guard {guard}) \
             -> {got:?}"
        ));
        if self.twin {
            self.t.twin_checks += 1;
            assert_eq!(
                pick!(b),
                got,
                "twin B (never given the rejected updates) picked otherwise"
            );
        }
        if let (Some(i), true) = (&iso, m == ISO) {
            self.t.twin_checks += 1;
            assert_eq!(
                pick!(i),
                got,
                "twin I (only method {ISO}'s calls) picked otherwise: calls of other methods \
                 changed this method's picks"
            );
        }
        let allowed = match model.allowed(m, &cands, &excl) {
            Err(status) => {
                self.t.select_errors += 1;
                assert_eq!(got, Err(status));
                return;
            }
            Ok(allowed) => allowed,
        };
        self.t.picks += 1;
        let id = got.unwrap_or_else(|e| panic!("select failed: {e:?}, allowed {allowed:?}"));
        assert!(allowed.contains(&id), "{id} not among {allowed:?}");
        let ejected = match &before {
            Some(rows) if outlier.enabled() => ejected_at(rows, now_ms, outlier.max_ejection_ms),
            _ => BTreeSet::new(),
        };
        let (may, exact) = model.filtered(&allowed, &ejected);
        assert!(
            may.contains(&id),
            "{id} not among {may:?} (allowed {allowed:?}, ejected {ejected:?})"
        );
        if may.len() < allowed.len() {
            self.t.narrowed += 1;
        }
        if exact && self.settled(t, now_us) {
            self.at_library = t == 0;
            self.check_rule(m, &key, &may, id, now_ms, before.as_ref());
        } else {
            self.model.rr[m as usize] = None;
        }
        self.after_pick(m, exact.then_some(may.len()), now_ms, t);
        let model = &mut self.model;
        *model.active.entry((m, id)).or_default() += 1;
        model.counts.get_mut(&id).unwrap().selected += 1;
        if guards.is_empty() {
            model.outstanding.push((m, id));
            return;
        }
        // The guards end their calls: finished, or dropped (cancelled).
        let outcome = self.rng.pick(&[
            Outcome::Success,
            Outcome::Failure,
            Outcome::Timeout,
            Outcome::Cancelled,
        ]);
        self.log.push(format!("guards of {id} end {outcome:?}"));
        for call in guards {
            assert_eq!(call.id(), id);
            match outcome {
                Outcome::Cancelled => drop(call),
                _ => call.finish(outcome).unwrap(),
            }
        }
        // A guard times the call itself.
        self.model.reported(m, id, outcome, None);
    }

    /// What a pick among `candidates` invokers (None: not known) changes besides the counters.
    fn after_pick(&mut self, m: u32, candidates: Option<usize>, now_ms: i64, t: i64) {
        let w = self.model.config.slow_start.window_ms;
        if w > 0 && self.model.config.strategy.has_slow_start() {
            // Every pick asks whether a ramp runs: the first after an update stamps the
            // newcomers; one that finds a ramp ending more than two windows (and 1 s) ahead
            // (the clock stepped back) ends for good those that began more than a window ahead.
            let joined = &mut self.model.joined;
            let waiting = joined.values().any(|j| *j == Joined::Waiting);
            let until = joined
                .values()
                .filter_map(|j| match j {
                    Joined::At { ms, .. } => Some(ms + w),
                    _ => None,
                })
                .max();
            let restamp = match until {
                _ if waiting => true,
                None => false,
                Some(until) => now_ms < until && until - now_ms > 2 * w + 1_000,
            };
            if restamp {
                for j in joined.values_mut() {
                    match *j {
                        Joined::Waiting => {
                            *j = Joined::At {
                                ms: now_ms.max(1),
                                fuzzy: t == 0,
                            }
                        }
                        Joined::At { ms, .. } if ms - now_ms > w + 1_000 => *j = Joined::Exempt,
                        _ => {}
                    }
                }
            }
        }
        if self.strategy == "shortestresponse" {
            let slide_ms = self.model.config.slide_period_ms;
            let windows = &mut self.model.windows;
            windows.picked(m, candidates, now_ms, slide_ms, t == 0);
        }
    }

    /// The strategy's own rule for a pick of `id` among `may` (what the filters left).
    fn check_rule(
        &mut self,
        m: u32,
        key: &[u8],
        may: &[u64],
        id: u64,
        now_ms: i64,
        before: Option<&HashMap<u64, Value>>,
    ) {
        // At the library's clock the pick read the time a moment after the model did.
        let fuzzy = self.at_library;
        let model = &mut self.model;
        let weight = |x: u64| model.weight(x, now_ms);
        // Among tied candidates, a zero weight only when every tied one weighs 0.
        let zero_rule = |tied: &[u64]| {
            if tied.iter().any(|&x| weight(x) > 0) {
                assert!(weight(id) > 0, "picked zero-weight {id} over {tied:?}");
            }
        };
        match self.strategy {
            "random" => zero_rule(may),
            // Dubbo's pair is the two candidates; with no provider metrics every load is 0, so
            // the weighted coin decides, which never lands on a zero weight beside a positive.
            "adaptive" if may.len() == 2 && !model.metrics[m as usize] => zero_rule(may),
            "leastactive" => {
                let least = may.iter().map(|&x| model.active(m, x)).min().unwrap();
                assert_eq!(model.active(m, id), least, "leastactive: busier {id}");
                let tied: Vec<u64> = may
                    .iter()
                    .copied()
                    .filter(|&x| model.active(m, x) == least)
                    .collect();
                zero_rule(&tied);
            }
            "shortestresponse" => {
                let rows = before.unwrap();
                let name = METHODS[m as usize];
                let estimate = |x: u64| method_field(&rows[&x], name, "estimate_ms");
                let least = may.iter().map(|&x| estimate(x)).min().unwrap();
                assert_eq!(
                    estimate(id),
                    least,
                    "shortestresponse: slower {id}: {rows:?}"
                );
                let tied: Vec<u64> = may
                    .iter()
                    .copied()
                    .filter(|&x| estimate(x) == least)
                    .collect();
                zero_rule(&tied);
            }
            "p2c" => {
                let choices = model.config.p2c_choices as usize;
                if model.config.slow_start.window_ms > 0 || (choices != 0 && choices < may.len()) {
                    return;
                }
                // Every candidate compared: none would be less loaded than the pick even after
                // taking this call (relative to weight).
                let (ap, wp) = (model.active(m, id) as u128, weight(id) as u128);
                for &x in may {
                    let (ax, wx) = (model.active(m, x) as u128, weight(x) as u128);
                    assert!(
                        x == id || wx == 0 || (ax + 1) * wp > ap * wx,
                        "p2c compared every candidate and kept {id} ({ap} in flight, weight \
                         {wp}) over {x} ({ax}, {wx})"
                    );
                }
                zero_rule(may);
            }
            "roundrobin" => {
                let list: Vec<(u64, i32)> = may.iter().map(|&x| (x, weight(x))).collect();
                let Some(rr) = model.rr[m as usize].as_mut() else {
                    return;
                };
                if rr.ambiguous(&list, now_ms, fuzzy) {
                    model.rr[m as usize] = None;
                    return;
                }
                let want = rr.select(&list, now_ms, fuzzy);
                assert_eq!(id, want, "roundrobin: Dubbo's walk over {list:?}");
            }
            "consistenthash" => {
                let list: Vec<(u64, String)> = may
                    .iter()
                    .map(|&x| (x, model.inv(x).address.clone()))
                    .collect();
                let ring = model.points.ring(&list, model.config.hash_nodes);
                let want = clockwise(&ring, key_point(key)).next().unwrap();
                assert_eq!(id, want, "consistenthash: Dubbo's ring of {list:?}");
            }
            "boundedhash" => {
                let full = |x: u64| {
                    let w = model.inv(x).weight;
                    w == 0 || weight(x) == w
                };
                if model.config.slow_start.window_ms > 0 || !may.iter().all(|&x| full(x)) {
                    return;
                }
                let whole = may.len() == model.set.len();
                let cands: Vec<(u64, u64, i64)> = may
                    .iter()
                    .map(|&x| (x, weight(x) as u64, model.active(m, x)))
                    .collect();
                let over: Vec<u64> = if whole {
                    model.set.iter().map(|i| i.id).collect()
                } else {
                    may.to_vec()
                };
                let in_flight: i64 = over.iter().map(|&x| model.active(m, x)).sum();
                let total: u64 = over.iter().map(|&x| weight(x) as u64).sum();
                let list: Vec<(u64, String)> = may
                    .iter()
                    .map(|&x| (x, model.inv(x).address.clone()))
                    .collect();
                let ring = model.points.ring(&list, model.config.hash_nodes);
                let factor = model.config.boundedhash_factor;
                let want = bounded_pick(&ring, key_point(key), &cands, factor, in_flight, total);
                assert_eq!(
                    id, want,
                    "boundedhash: the bounded walk over {cands:?} (in flight {in_flight}, \
                     total weight {total})"
                );
            }
            "maglev" => {
                // The table is the whole set's (configured weights: no warm-up, no slow start).
                let set: Vec<(u64, String, i32)> = model
                    .set
                    .iter()
                    .map(|i| (i.id, i.address.clone(), i.weight))
                    .collect();
                let in_set_order: Vec<(u64, i32)> = set
                    .iter()
                    .map(|s| (s.0, s.2))
                    .filter(|x| may.contains(&x.0))
                    .collect();
                let size = u64::from(model.config.maglev_table_size);
                let want = maglev_pick(model.maglev.of(set, size), key, &in_set_order);
                assert_eq!(id, want, "maglev: the table's pick among {in_set_order:?}");
            }
            "rendezvous" => {
                // Configured weights, candidates in set order (no warm-up, no slow start).
                let cands: Vec<(u64, String, i32)> = model
                    .set
                    .iter()
                    .filter(|i| may.contains(&i.id))
                    .map(|i| (i.id, i.address.clone(), i.weight))
                    .collect();
                let want = rendezvous_pick(&cands, key);
                assert_eq!(id, want, "rendezvous: the best score among {cands:?}");
            }
            _ => return,
        }
        self.t.rule_checks += 1;
    }

    fn report(&mut self) {
        let outcome = self.rng.pick(&[
            Outcome::Success,
            Outcome::Success,
            Outcome::Failure,
            Outcome::Timeout,
            Outcome::Cancelled,
        ]);
        let elapsed = self.rng.below(3_000_000) as i64;
        let model = &mut self.model;
        let (m, id, from) = match self.rng.below(20) {
            0..=12 if !model.outstanding.is_empty() => {
                let k = self.rng.below(model.outstanding.len() as u64) as usize;
                let (m, id) = model.outstanding[k];
                (m, id, "outstanding")
            }
            13..=15 if !model.ended.is_empty() => {
                let (m, id) = self.rng.pick(&model.ended);
                (m, id, "ended again")
            }
            16 => (METHODS.len() as u32 + 1, 1, "unknown method"),
            _ => (
                self.rng.below(METHODS.len() as u64) as u32,
                self.rng.below(12),
                "any id",
            ),
        };
        let (t, _) = self.call_time();
        let (elapsed, expected) = if m as usize >= METHODS.len() {
            (elapsed, Err(Status::UnknownMethod))
        } else if self.rng.chance(30) {
            (-1 - elapsed, Err(Status::InvalidArgument))
        } else {
            (elapsed, Ok(()))
        };
        let call = |b: &Balancer| b.report(m, id, elapsed, outcome, t);
        let got = call(&self.a);
        self.log.push(format!(
            "report m{m} {id} ({from}) {outcome:?} {elapsed} us at {t} -> {got:?}"
        ));
        assert_eq!(got, expected, "report");
        if self.twin {
            self.t.twin_checks += 1;
            assert_eq!(call(&self.b), got);
        }
        if let (Some(i), true) = (&self.iso, m == ISO) {
            assert_eq!(call(i), got);
        }
        if got.is_err() {
            return;
        }
        self.t.reports += 1;
        if from == "outstanding" {
            let model = &mut self.model;
            let k = model
                .outstanding
                .iter()
                .position(|c| *c == (m, id))
                .unwrap();
            model.ended.push(model.outstanding.remove(k));
        }
        self.model.reported(m, id, outcome, Some(elapsed));
    }

    fn provider_metrics(&mut self) {
        let m = self.rng.below(METHODS.len() as u64) as u32;
        let id = self.rng.below(12);
        let (t, _) = self.call_time();
        let time = self.now / 1000 + self.rng.below(2000) as i64 - 1000;
        let (cpu, expected) = if self.rng.chance(100) {
            (f64::NAN, Err(Status::InvalidArgument))
        } else {
            (self.rng.below(400) as f64 / 100.0, Ok(()))
        };
        let rt = self.rng.below(200_000) as i64;
        let got = self.a.report_provider_metrics(m, id, time, cpu, rt, t);
        self.log.push(format!(
            "metrics m{m} {id} time {time} cpu {cpu} rt {rt} at {t} -> {got:?}"
        ));
        assert_eq!(got, expected);
        self.model.metrics[m as usize] |= got.is_ok();
        if self.twin {
            assert_eq!(self.b.report_provider_metrics(m, id, time, cpu, rt, t), got);
        }
        if let (Some(i), true) = (&self.iso, m == ISO) {
            assert_eq!(i.report_provider_metrics(m, id, time, cpu, rt, t), got);
        }
    }

    /// A provider's load report: refused when a number is NaN, infinite or negative or `eps`
    /// exceeds `qps`, else accepted (and for an invoker of the set, kept as the weight
    /// `qps / (utilization + eps / qps × orca.errorPenalty)` when it has qps and utilization).
    fn load_report(&mut self) {
        // Mostly an invoker of the set: the case that keeps a weight.
        let ids: Vec<u64> = self.model.set.iter().map(|i| i.id).collect();
        let id = match ids.is_empty() || self.rng.chance(250) {
            true => self.rng.below(12),
            false => self.rng.pick(&ids),
        };
        let (t, now_us) = self.call_time();
        let number = |rng: &mut Rng| match rng.below(40) {
            0 => f64::NAN,
            1 => -1.0,
            2 => f64::INFINITY,
            3 | 4 => 0.0,
            x => (x * x) as f64 / 7.0,
        };
        let (qps, eps, utilization) = (
            number(&mut self.rng),
            number(&mut self.rng),
            number(&mut self.rng) / 40.0,
        );
        let valid = |x: f64| x.is_finite() && x >= 0.0;
        let expected = if valid(qps) && valid(eps) && valid(utilization) && eps <= qps {
            Ok(())
        } else {
            Err(Status::InvalidArgument)
        };
        let report = polylb::LoadReport {
            qps,
            eps,
            utilization,
        };
        let got = self.a.report_load(id, report, t);
        self.log.push(format!(
            "load {id} qps {qps} eps {eps} utilization {utilization} at {t} -> {got:?}"
        ));
        assert_eq!(got, expected);
        let orca = &self.model.config.orca;
        let in_set = self.model.set.iter().any(|i| i.id == id);
        if got.is_ok() && in_set && qps > 0.0 && utilization > 0.0 {
            let weight = qps / (utilization + eps / qps * orca.error_penalty);
            if weight.is_finite() && weight > 0.0 {
                let now_ms = now_us.div_euclid(1000);
                let run = self.model.loads.entry(id).or_insert(LoadRun {
                    weight,
                    since_ms: 0,
                    last_ms: 0,
                    fuzzy: false,
                });
                // A report starts a new run when none is going, the last one lapsed, or the
                // clock stepped back far behind the run's start.
                if run.since_ms == 0
                    || now_ms.saturating_sub(run.last_ms) >= orca.expiration_ms
                    || run.since_ms.saturating_sub(now_ms) > STEP_BACK_MS
                {
                    run.since_ms = now_ms.max(1);
                }
                run.weight = weight;
                run.last_ms = now_ms;
                run.fuzzy |= t == 0;
            }
        }
        if self.twin {
            assert_eq!(self.b.report_load(id, report, t), got);
        }
        if let Some(i) = &self.iso {
            assert_eq!(i.report_load(id, report, t), got);
        }
    }

    /// A provider's connection established again: accepted for any id and strategy; under
    /// `orca` an invoker of the set keeps its last report's weight for the stats, but the
    /// weight no longer counts, and its next report starts a new run (with a new blackout).
    fn reconnect(&mut self) {
        // Mostly an invoker with a weight: the case with something to end.
        let mut weighted: Vec<u64> = self.model.loads.keys().copied().collect();
        weighted.sort_unstable();
        let id = match weighted.is_empty() || self.rng.chance(250) {
            true => self.rng.below(12),
            false => self.rng.pick(&weighted),
        };
        let (t, now_us) = self.call_time();
        let got = self.a.report_reconnect(id, t);
        self.log.push(format!("reconnect {id} at {t} -> {got:?}"));
        assert_eq!(got, Ok(()));
        if let Some(run) = self.model.loads.get_mut(&id) {
            if !run.fuzzy && run.counts(now_us.div_euclid(1000), &self.model.config.orca) {
                self.t.reconnects_uncounting += 1;
            }
            // Times no longer matter: the next report sets them.
            *run = LoadRun {
                since_ms: 0,
                last_ms: 0,
                fuzzy: false,
                ..*run
            };
        }
        if self.twin {
            assert_eq!(self.b.report_reconnect(id, t), got);
        }
        if let Some(i) = &self.iso {
            assert_eq!(i.report_reconnect(id, t), got);
        }
    }

    /// The stats agree with the model.
    fn check_stats(&mut self) {
        let (t, now_us) = self.call_time();
        let now_ms = now_us.div_euclid(1000);
        let json = self.a.stats_json(t);
        let settled = self.settled(t, now_us);
        let v: Value = serde_json::from_str(&json).expect("stats are JSON");
        assert_eq!(v["strategy"], self.strategy);
        let rows = v["invokers"].as_array().unwrap();
        let model = &self.model;
        let ids: Vec<u64> = rows.iter().map(|r| r["id"].as_u64().unwrap()).collect();
        let want: Vec<u64> = model.set.iter().map(|i| i.id).collect();
        assert_eq!(ids, want, "stats list the set in order");
        for (row, inv) in rows.iter().zip(&model.set) {
            let c = model.counts[&inv.id];
            let got = |f: &str| row[f].as_i64().unwrap_or_else(|| panic!("{f} in {row}"));
            let got_counts = Counts {
                selected: got("selected") as u64,
                succeeded: got("succeeded") as u64,
                failures: got("failures") as u64,
                timeouts: got("timeouts") as u64,
            };
            assert_eq!(got_counts, c, "counters of {}: {row}", inv.id);
            if self.strategy == "orca" {
                // The last accepted report's weight (to the ulp serde_json's parsing may
                // miss); none for an invoker that joined (or left and came back) since.
                let run = model.loads.get(&inv.id).copied();
                let weight = run.map(|r| r.weight);
                let shown = row["orca_weight"].as_f64();
                let same = match (shown, weight) {
                    (Some(a), Some(b)) => (a - b).abs() <= 1e-12 * b,
                    (a, b) => a == b,
                };
                assert!(same, "orca_weight {shown:?}, model {weight:?}: {row}");
                // Whether it counts, where every time involved is known exactly.
                let counts = match run {
                    None => Some(false),
                    // A pick at the library's clock may recompute the weights at a time the
                    // model does not know, and restamp a report that time is behind.
                    Some(r) if t != 0 && !r.fuzzy && self.clocks == Clocks::Caller => {
                        Some(r.counts(now_ms, &model.config.orca))
                    }
                    Some(_) => None,
                };
                if let Some(counts) = counts {
                    match (counts, run.is_some()) {
                        (true, _) => self.t.orca_counted += 1,
                        (false, true) => self.t.orca_not_counted += 1,
                        _ => {}
                    }
                    assert_eq!(
                        row["orca_counted"].as_bool(),
                        Some(counts),
                        "orca_counted at {now_ms}, model {run:?}: {row}"
                    );
                }
                let share = row["orca_share"].as_f64().unwrap();
                assert!((0.0..=1.0).contains(&share), "orca_share: {row}");
            }
            let mut total = 0;
            for (k, name) in METHODS.iter().enumerate() {
                let a = model.active(k as u32, inv.id);
                total += a;
                assert_eq!(
                    method_field(row, name, "active"),
                    a,
                    "in flight of {} for method {name:?}: {row}",
                    inv.id
                );
            }
            assert_eq!(got("active"), total, "in flight of {}: {row}", inv.id);
            let slow = &model.config.slow_start;
            if slow.window_ms > 0 && model.config.strategy.has_slow_start() && t != 0 {
                // The ramp's share (src/strategy/slow_start.rs: `factor`).
                let (w, min) = (slow.window_ms, slow.min_weight_percent as f64 / 100.0);
                let factor = match model.joined[&inv.id] {
                    Joined::At { fuzzy: true, .. } => None,
                    // Its ramp starts at the next pick, from the lowest share.
                    Joined::Waiting => Some(min),
                    Joined::At { ms, .. } => {
                        let elapsed = now_ms.saturating_sub(ms);
                        Some(if elapsed >= w || elapsed < -(w + 1_000) {
                            1.0
                        } else if elapsed <= 0 {
                            min
                        } else {
                            (elapsed as f64 / w as f64)
                                .powf(1.0 / slow.aggression)
                                .max(min)
                        })
                    }
                    _ => Some(1.0),
                };
                if let Some(f) = factor {
                    assert_eq!(
                        format!("{:.2}", row["slow_start_percent"].as_f64().unwrap()),
                        format!("{:.2}", f * 100.0),
                        "slow start of {} ({:?}) at {now_ms}: {row}",
                        inv.id,
                        model.joined[&inv.id]
                    );
                }
            }
            if self.strategy == "shortestresponse" {
                for (k, name) in METHODS.iter().enumerate() {
                    let k = k as u32;
                    if model.windows.started[k as usize].is_none() {
                        continue; // not known exactly
                    }
                    let (n, sum) = model
                        .windows
                        .counts
                        .get(&(k, inv.id))
                        .copied()
                        .unwrap_or_default();
                    let average = sum.checked_div(n).unwrap_or(0) as i64;
                    assert_eq!(
                        (
                            method_field(row, name, "window_successes"),
                            method_field(row, name, "window_average_ms")
                        ),
                        (n as i64, average),
                        "window of {} for {name:?}: {row}",
                        inv.id
                    );
                }
            }
            assert_eq!(got("weight"), inv.weight as i64);
            assert_eq!(row["address"], inv.address.as_str());
            if settled {
                assert_eq!(
                    got("effective_weight"),
                    model.weight(inv.id, now_ms) as i64,
                    "Dubbo's warm-up weight at {now_ms}: {row}"
                );
            }
            if model.config.subset.size > 0 {
                assert_eq!(row["in_subset"], model.is_local(inv.id), "{row}");
            } else if model.config.zone.is_some() {
                assert_eq!(row["local"], model.is_local(inv.id), "{row}");
            }
        }
        let o = &model.config.outlier;
        if o.enabled() {
            // The budget counts the weighted invokers while the set has any (all of them for
            // consistenthash, adaptive, leastactive and shortestresponse, which send calls to
            // weight-0 invokers).
            let weighted = |r: &&serde_json::Value| r["weight"].as_i64().unwrap() > 0;
            let drains = !matches!(
                model.config.strategy,
                polylb::StrategyKind::ConsistentHash
                    | polylb::StrategyKind::Adaptive
                    | polylb::StrategyKind::LeastActive
                    | polylb::StrategyKind::ShortestResponse
            );
            let any_weighted = drains && rows.iter().any(|r| weighted(&r));
            let counted: Vec<&serde_json::Value> = rows
                .iter()
                .filter(|r| !any_weighted || weighted(r))
                .collect();
            let n = counted.len();
            let budget = if n < 2 || o.max_ejection_percent == 0 {
                0
            } else {
                (n * o.max_ejection_percent as usize / 100).clamp(1, n - 1)
            };
            let ejected = counted.iter().filter(|r| r["ejected"] == true).count();
            assert!(
                ejected <= budget,
                "{ejected} ejected, budget {budget}: {json}"
            );
        }
    }

    /// Ends every outstanding call: nothing stays in flight; the twin's stats equal A's.
    fn finish(&mut self) {
        let t = self.now;
        for (m, id) in std::mem::take(&mut self.model.outstanding) {
            self.a.report(m, id, 10, Outcome::Cancelled, t).unwrap();
            self.b.report(m, id, 10, Outcome::Cancelled, t).unwrap();
            if let Some(a) = self.model.active.get_mut(&(m, id)) {
                *a = (*a - 1).max(0);
            }
        }
        self.check_stats();
        let v: Value = serde_json::from_str(&self.a.stats_json(t)).unwrap();
        for row in v["invokers"].as_array().unwrap() {
            assert_eq!(row["active"], 0, "in flight after every call ended: {row}");
        }
        if self.twin && self.clocks == Clocks::Caller {
            assert_eq!(self.b.stats_json(t), self.a.stats_json(t), "twin B's stats");
        }
    }
}
