//! Property tests over random operation sequences (proptest).
//!
//! * `sequences_match_the_model`: random sequences of update (valid and invalid), method,
//!   select, select_among, report and stats, with random sets, weights, ids, warm-ups, keys,
//!   times (also going backwards) and outcomes, run in lockstep on three balancers: the Rust
//!   API (A), the C ABI (C), and the Rust API given only the updates A accepted (B). Checked
//!   after every step against a model: select returns a current candidate or exactly the
//!   documented error; every counter in the stats (active, selected, succeeded, failures,
//!   timeouts) equals the model's, so in-flight counts never go negative; a rejected update
//!   leaves the stats byte-identical and, since B never saw it, every later pick of A equals
//!   B's; the ABI answers exactly as the Rust API; after reporting every select nothing is in
//!   flight. Strategy rules: leastactive picks a least-active candidate; random and
//!   leastactive never pick a zero-weight candidate while a positive one is eligible.
//!   The balancers take the options a deployment sets, drawn within their documented ranges
//!   (`Opts`): every key of `src/config.rs` a strategy accepts, with zoned invokers. The
//!   config parses to exactly those values; a pick skips ejected invokers (unless all of the
//!   call's are) and keeps to the healthy local zone as `zone.minHealthyPercent` says (the
//!   strategy rules then apply within what the filters leave); ejections stay within
//!   `outlier.maxEjectionPercent`, last `outlier.baseEjectionMs..=outlier.maxEjectionMs`, come
//!   from failures only, and a failure ejects exactly when `outlier.consecutiveFailures` in a
//!   row or the failure-rate window (`outlier.failureRate`, `outlier.minRequests`, counts read
//!   from the stats and checked as they move) says so while the budget allows; slow start's
//!   weight share stays within `slowstart.minWeightPercent..=100`.
//! * `consistent_hash_*`: the ring is deterministic (same set → same picks, also through the
//!   ABI), a removal moves only the removed invoker's keys, and a candidate subset answers as a
//!   ring rebuilt from the subset.
//! * `round_robin_cycle_counts_equal_weights`: from any point of the sequence, Σw consecutive
//!   picks of a method give each invoker exactly its weight, with another method interleaved.
//! * `picks_stay_local_as_the_zone_rules_say`: over sets with zones, ejected local and remote
//!   invokers, zero weights, `zone.minHealthyPercent` and caller subsets, the share of picks
//!   that stay in the consumer's zone is the documented one: all of them, none, or (with
//!   `random`, whose spill-over is by weight) within a binomial bound of the proportional share.

use polylb::ffi::*;
use polylb::{effective_weight, Balancer, Invoker, Outcome};
use proptest::prelude::*;
use proptest::test_runner::{Config as PtConfig, RngSeed};
use std::collections::{BTreeSet, HashMap};
use std::ptr::{null, null_mut};

const BASE_US: i64 = 1_700_000_000_000_000;

/// `cases` cases drawn from a fixed seed, so CI runs the same cases every time and a failure
/// reproduces; `PROPTEST_RNG_SEED=<n>` (read by `PtConfig::default`) explores other cases.
fn seeded(cases: u32) -> PtConfig {
    let mut config = PtConfig {
        cases,
        ..PtConfig::default()
    };
    if config.rng_seed == RngSeed::Random {
        config.rng_seed = RngSeed::Fixed(0x706f_6c79_6c62);
    }
    config
}
/// Every strategy the library knows, Dubbo's six first: new ones are covered as they land.
fn strategies() -> Vec<&'static str> {
    polylb::StrategyKind::ALL.iter().map(|k| k.name()).collect()
}
const NAMES: [&str; 5] = ["", "sayHello", "get", "put", "a/b"];

// ---------------------------------------------------------------------------------------------
// Two ways to drive a balancer: the Rust API and the C ABI, behind one interface.

trait Api {
    fn upd(&self, set: &[Invoker]) -> Result<(), i32>;
    fn meth(&self, name: &str) -> u32;
    fn pick_among(
        &self,
        m: u32,
        key: &[u8],
        cands: &[u64],
        excl: &[u64],
        now: i64,
    ) -> Result<u64, i32>;
    fn rep(&self, m: u32, id: u64, elapsed: i64, outcome: i32, now: i64) -> Result<(), i32>;
    fn stats_text(&self, now: i64) -> String;
}

impl Api for Balancer {
    fn upd(&self, set: &[Invoker]) -> Result<(), i32> {
        Balancer::update(self, set).map_err(|e| {
            assert!(!e.message.is_empty());
            e.status.code()
        })
    }
    fn meth(&self, name: &str) -> u32 {
        Balancer::method(self, name).unwrap()
    }
    fn pick_among(
        &self,
        m: u32,
        key: &[u8],
        cands: &[u64],
        excl: &[u64],
        now: i64,
    ) -> Result<u64, i32> {
        Balancer::select_among(self, m, key, cands, excl, now).map_err(|s| s.code())
    }
    fn rep(&self, m: u32, id: u64, elapsed: i64, outcome: i32, now: i64) -> Result<(), i32> {
        let outcome = Outcome::from_code(outcome).ok_or(PLB_ERR_UNKNOWN_OUTCOME)?;
        Balancer::report(self, m, id, elapsed, outcome, now).map_err(|s| s.code())
    }
    fn stats_text(&self, now: i64) -> String {
        self.stats_json(now)
    }
}

struct Abi(*mut plb_balancer);

impl Abi {
    fn new(config: &str) -> Abi {
        let mut b = null_mut();
        let s = unsafe {
            plb_balancer_new(
                config.as_ptr(),
                config.len(),
                &mut b,
                null_mut(),
                0,
                null_mut(),
            )
        };
        assert_eq!(s, PLB_OK);
        Abi(b)
    }
}

impl Drop for Abi {
    fn drop(&mut self) {
        unsafe { plb_balancer_free(self.0) }
    }
}

impl Api for Abi {
    fn upd(&self, set: &[Invoker]) -> Result<(), i32> {
        let raw: Vec<plb_invoker> = set
            .iter()
            .map(|i| plb_invoker {
                id: i.id,
                address: i.address.as_ptr(),
                address_len: i.address.len(),
                weight: i.weight,
                start_time_ms: i.start_time_ms,
                warmup_ms: i.warmup_ms,
                zone: i.zone.as_ref().map_or(null(), |z| z.as_ptr()),
                zone_len: i.zone.as_ref().map_or(0, |z| z.len()),
            })
            .collect();
        let mut err = [0u8; 256];
        let mut len = 0usize;
        let s = unsafe {
            plb_balancer_update(
                self.0,
                raw.as_ptr(),
                raw.len(),
                err.as_mut_ptr() as *mut _,
                err.len(),
                &mut len,
            )
        };
        assert_eq!(err[len], 0);
        if s == PLB_OK {
            assert_eq!(len, 0);
            Ok(())
        } else {
            assert!(len > 0, "a rejected update says why");
            Err(s)
        }
    }
    fn meth(&self, name: &str) -> u32 {
        let mut id = u32::MAX;
        let s = unsafe { plb_balancer_method(self.0, name.as_ptr(), name.len(), &mut id) };
        assert_eq!(s, PLB_OK);
        id
    }
    fn pick_among(
        &self,
        m: u32,
        key: &[u8],
        cands: &[u64],
        excl: &[u64],
        now: i64,
    ) -> Result<u64, i32> {
        let r = unsafe {
            plb_select_among(
                self.0,
                m,
                key.as_ptr(),
                key.len(),
                cands.as_ptr(),
                cands.len(),
                excl.as_ptr(),
                excl.len(),
                now,
            )
        };
        if r >= 0 {
            Ok(r as u64)
        } else {
            Err((-r) as i32)
        }
    }
    fn rep(&self, m: u32, id: u64, elapsed: i64, outcome: i32, now: i64) -> Result<(), i32> {
        match unsafe { plb_report(self.0, m, id, elapsed, outcome, now) } {
            PLB_OK => Ok(()),
            s => Err(s),
        }
    }
    fn stats_text(&self, now: i64) -> String {
        let mut len = 0usize;
        let s = unsafe { plb_balancer_stats(self.0, now, null_mut(), 0, &mut len) };
        assert_eq!(s, PLB_ERR_BUFFER_TOO_SMALL);
        let mut buf = vec![0u8; len + 1];
        let needed = len;
        let s = unsafe {
            plb_balancer_stats(self.0, now, buf.as_mut_ptr() as *mut _, buf.len(), &mut len)
        };
        assert_eq!((s, len), (PLB_OK, needed));
        assert_eq!(buf[len], 0);
        buf.truncate(len);
        String::from_utf8(buf).unwrap()
    }
}

// ---------------------------------------------------------------------------------------------
// Operations.

#[derive(Clone, Debug)]
struct Inv {
    id: u64,
    weight: i32,
    addr: u8,
    start_ms: i64,
    warmup_ms: i32,
    /// Index into `ZONES`; None = no zone.
    zone: Option<u8>,
}

#[derive(Clone, Debug)]
enum Op {
    /// `fault`: 0 duplicate id, 1 negative weight, 2 id above INT64_MAX, else none.
    Update {
        set: Vec<Inv>,
        fault: u8,
        at: usize,
    },
    Method(usize),
    Select {
        m: u8,
        key: Vec<u8>,
        dt: i64,
    },
    SelectAmong {
        m: u8,
        key: Vec<u8>,
        cands: Vec<u64>,
        excl: Vec<u64>,
        dt: i64,
    },
    Report {
        pick: usize,
        m: u8,
        id: u64,
        elapsed: i64,
        outcome: i32,
        dt: i64,
    },
    Stats {
        dt: i64,
    },
}

fn arb_set() -> impl Strategy<Value = Vec<Inv>> {
    (proptest::sample::subsequence((0u64..14).collect::<Vec<_>>(), 0..9))
        .prop_shuffle()
        .prop_flat_map(|ids| {
            let n = ids.len();
            (
                Just(ids),
                proptest::collection::vec(
                    (
                        prop_oneof![6 => 0i32..300, 1 => Just(0), 1 => Just(i32::MAX)],
                        0u8..3,
                        prop_oneof![
                            3 => Just(0i64),
                            1 => (-300_000i64..300_000).prop_map(|d| BASE_US / 1000 + d)
                        ],
                        prop_oneof![Just(-1), Just(0), 1000i32..400_000],
                        prop_oneof![1 => Just(None), 3 => (0u8..3).prop_map(Some)],
                    ),
                    n,
                ),
            )
        })
        .prop_map(|(ids, attrs)| {
            ids.into_iter()
                .zip(attrs)
                .map(|(id, (weight, addr, start_ms, warmup_ms, zone))| Inv {
                    id,
                    weight,
                    addr,
                    start_ms,
                    warmup_ms,
                    zone,
                })
                .collect()
        })
}

/// Time steps in µs: mostly forwards, sometimes backwards, sometimes big jumps.
fn arb_dt() -> impl Strategy<Value = i64> {
    prop_oneof![
        6 => 0i64..2_000_000,
        1 => -60_000_000i64..0,
        1 => 0i64..400_000_000,
    ]
}

fn arb_ids() -> impl Strategy<Value = Vec<u64>> {
    prop_oneof![
        2 => Just(Vec::new()),
        3 => proptest::collection::vec(0u64..14, 1..5),
    ]
}

fn arb_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => (arb_set(), 0u8..12, any::<usize>())
            .prop_map(|(set, fault, at)| Op::Update { set, fault, at }),
        1 => (0..NAMES.len()).prop_map(Op::Method),
        6 => (any::<u8>(), proptest::collection::vec(any::<u8>(), 0..12), arb_dt())
            .prop_map(|(m, key, dt)| Op::Select { m, key, dt }),
        3 => (any::<u8>(), proptest::collection::vec(any::<u8>(), 0..12), arb_ids(), arb_ids(), arb_dt())
            .prop_map(|(m, key, cands, excl, dt)| Op::SelectAmong { m, key, cands, excl, dt }),
        7 => (
            any::<usize>(),
            any::<u8>(),
            0u64..16,
            prop_oneof![8 => 0i64..50_000_000, 1 => Just(0), 1 => Just(i64::MAX), 1 => Just(-1)],
            prop_oneof![10 => 0i32..4, 1 => Just(4), 1 => Just(-1)],
            arb_dt(),
        )
            .prop_map(|(pick, m, id, elapsed, outcome, dt)| Op::Report { pick, m, id, elapsed, outcome, dt }),
        1 => arb_dt().prop_map(|dt| Op::Stats { dt }),
    ]
}

fn invokers(set: &[Inv]) -> Vec<Invoker> {
    set.iter()
        .map(|i| {
            let inv = Invoker::new(i.id, format!("10.1.{}.{}:20880", i.addr, i.id))
                .weight(i.weight)
                .start_time_ms(i.start_ms)
                .warmup_ms(i.warmup_ms);
            match i.zone {
                Some(z) => inv.zone(ZONES[z as usize]),
                None => inv,
            }
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Options a deployment sets, each within the range `src/config.rs` accepts. `None` leaves the
// key out (its default applies); a key is only given where the parser accepts it, so that every
// drawn configuration builds a balancer.

/// Zones of invokers (`Inv::zone`) and of the consumer (`Opts::zone`); "zq" has no invoker.
const ZONES: [&str; 4] = ["z0", "z1", "z2", "zq"];

#[derive(Clone, Debug, Default)]
struct Opts {
    hash_nodes: Option<u32>,
    warmup_ms: Option<i32>,
    slide_period_ms: Option<i64>,
    timeout_ms: Option<i32>,
    p2c_choices: Option<u32>,
    pe_choices: Option<u32>,
    pe_decay_ms: Option<i64>,
    pe_penalty_ms: Option<i64>,
    pe_preference_ms: Option<i64>,
    bh_factor: Option<f64>,
    /// Index into `ZONES`.
    zone: Option<u8>,
    zone_min_healthy: Option<u32>,
    outlier: Option<Outlier>,
    slow_start: Option<Slow>,
}

#[derive(Clone, Debug)]
struct Outlier {
    consecutive: Option<u32>,
    /// The failure-rate rule, with its window and minimum calls.
    rate: Option<(u32, Option<i64>, Option<u32>)>,
    base_ms: Option<i64>,
    max_ms: Option<i64>,
    max_percent: Option<u32>,
}

#[derive(Clone, Debug)]
struct Slow {
    window_ms: i64,
    min_percent: Option<u32>,
    aggression: Option<f64>,
}

fn maybe<T: std::fmt::Debug + Clone + 'static>(
    s: impl Strategy<Value = T> + 'static,
) -> BoxedStrategy<Option<T>> {
    prop_oneof![1 => Just(None), 2 => s.prop_map(Some)].boxed()
}

fn choices() -> impl Strategy<Value = u32> {
    prop_oneof![Just(0u32), Just(2), Just(16), 2u32..=16]
}

fn arb_outlier() -> impl Strategy<Value = Outlier> {
    (
        // Mostly low thresholds: ejections are what the filters' checks need.
        maybe(prop_oneof![2 => Just(1u32), 1 => 2u32..5]),
        maybe((
            prop_oneof![Just(100u32), 1u32..=100],
            maybe(1i64..20_000),
            maybe(1u32..8),
        )),
        prop_oneof![Just(None), (1i64..120_000).prop_map(Some)],
        maybe(0i64..600_000),
        maybe(prop_oneof![Just(0u32), Just(100), 0u32..=100]),
    )
        .prop_map(|(consecutive, rate, base_ms, extra, max_percent)| {
            // Enabled by at least one rule, else every outlier key is an error.
            let consecutive = if rate.is_none() {
                consecutive.or(Some(1))
            } else {
                consecutive
            };
            // The longest ejection is at least the first (the default 300 000 is above any
            // base drawn here).
            let max_ms = extra.map(|e| base_ms.unwrap_or(30_000) + e);
            Outlier {
                consecutive,
                rate,
                base_ms,
                max_ms,
                max_percent,
            }
        })
}

fn arb_opts() -> impl Strategy<Value = Opts> {
    (
        (
            maybe(prop_oneof![Just(4u32), 4u32..=1024]),
            maybe(prop_oneof![
                Just(i32::MIN),
                -1i32..1,
                1i32..400_000,
                Just(i32::MAX)
            ]),
            maybe(prop_oneof![Just(1i64), 1i64..60_000, Just(i64::MAX)]),
            maybe(prop_oneof![Just(1i32), 1i32..5_000, Just(i32::MAX)]),
            maybe(choices()),
        ),
        (
            maybe(choices()),
            maybe(prop_oneof![Just(1i64), 1i64..100_000]),
            maybe(prop_oneof![Just(0i64), 0i64..10_000]),
            maybe(prop_oneof![Just(0i64), Just(1), 0i64..5_000]),
            maybe(prop_oneof![Just(1.0f64), Just(100.0), 1.0f64..=100.0]),
        ),
        (
            maybe(0u8..4),
            maybe(prop_oneof![Just(1u32), Just(100), 1u32..=100]),
            prop_oneof![1 => Just(None), 3 => arb_outlier().prop_map(Some)],
            maybe(
                (
                    prop_oneof![Just(1i64), 1i64..200_000],
                    maybe(prop_oneof![Just(1u32), Just(100), 1u32..=100]),
                    maybe(prop_oneof![Just(0.1f64), Just(10.0), 0.1f64..=10.0]),
                )
                    .prop_map(|(window_ms, min_percent, aggression)| Slow {
                        window_ms,
                        min_percent,
                        aggression,
                    }),
            ),
        ),
    )
        .prop_map(|(a, b, c)| Opts {
            hash_nodes: a.0,
            warmup_ms: a.1,
            slide_period_ms: a.2,
            timeout_ms: a.3,
            p2c_choices: a.4,
            pe_choices: b.0,
            pe_decay_ms: b.1,
            pe_penalty_ms: b.2,
            pe_preference_ms: b.3,
            bh_factor: b.4,
            zone: c.0,
            zone_min_healthy: c.1,
            outlier: c.2,
            slow_start: c.3,
        })
}

/// Mostly drawn options, sometimes none at all (the configuration most tests use).
fn arb_any_opts() -> impl Strategy<Value = Opts> {
    prop_oneof![1 => Just(Opts::default()), 4 => arb_opts()]
}

impl Opts {
    /// The options the parser accepts for `strategy`, as a config string.
    fn config(&self, strategy: &str, seed: u64) -> String {
        fn text<T: std::fmt::Display>(v: &Option<T>) -> Option<String> {
            v.as_ref().map(T::to_string)
        }
        let mut pairs = vec![
            ("loadbalance", Some(strategy.to_string())),
            ("seed", Some(seed.to_string())),
            ("hash.nodes", text(&self.hash_nodes)),
            ("warmup", text(&self.warmup_ms)),
            ("shortestresponse.slidePeriod", text(&self.slide_period_ms)),
            ("timeout", text(&self.timeout_ms)),
            ("zone", self.zone.map(|z| ZONES[z as usize].to_string())),
        ];
        match strategy {
            "p2c" => pairs.push(("p2c.choices", text(&self.p2c_choices))),
            "peakewma" => pairs.extend([
                ("peakewma.choices", text(&self.pe_choices)),
                ("peakewma.decay", text(&self.pe_decay_ms)),
                ("peakewma.failurePenalty", text(&self.pe_penalty_ms)),
                ("peakewma.preferenceMs", text(&self.pe_preference_ms)),
            ]),
            "boundedhash" => pairs.push(("boundedhash.factor", text(&self.bh_factor))),
            _ => {}
        }
        if let Some(o) = &self.outlier {
            pairs.extend([
                ("outlier.consecutiveFailures", text(&o.consecutive)),
                ("outlier.baseEjectionMs", text(&o.base_ms)),
                ("outlier.maxEjectionMs", text(&o.max_ms)),
                ("outlier.maxEjectionPercent", text(&o.max_percent)),
            ]);
            if let Some((rate, window, min)) = &o.rate {
                pairs.extend([
                    ("outlier.failureRate", Some(rate.to_string())),
                    ("outlier.windowMs", text(window)),
                    ("outlier.minRequests", text(min)),
                ]);
            }
            if self.zone.is_some() {
                pairs.push(("zone.minHealthyPercent", text(&self.zone_min_healthy)));
            }
        }
        if let (Some(slow), true) = (&self.slow_start, beyond_dubbo(strategy)) {
            pairs.extend([
                ("slowstart.windowMs", Some(slow.window_ms.to_string())),
                ("slowstart.minWeightPercent", text(&slow.min_percent)),
                ("slowstart.aggression", text(&slow.aggression)),
            ]);
        }
        let given: Vec<String> = pairs
            .into_iter()
            .filter_map(|(k, v)| v.map(|v| format!("{k}={v}")))
            .collect();
        given.join("&")
    }

    /// What `config(strategy, seed)` must parse to, field by field.
    fn expected(&self, strategy: &str, seed: u64) -> polylb::Config {
        let mut c = polylb::Config {
            strategy: polylb::StrategyKind::from_name(strategy).unwrap(),
            seed: Some(seed),
            ..polylb::Config::default()
        };
        fn set<T>(field: &mut T, v: Option<T>) {
            if let Some(v) = v {
                *field = v;
            }
        }
        set(&mut c.hash_nodes, self.hash_nodes);
        set(&mut c.warmup_ms, self.warmup_ms);
        set(&mut c.slide_period_ms, self.slide_period_ms);
        set(&mut c.timeout_ms, self.timeout_ms);
        if strategy == "p2c" {
            set(&mut c.p2c_choices, self.p2c_choices);
        }
        if strategy == "peakewma" {
            set(&mut c.peakewma.choices, self.pe_choices);
            set(&mut c.peakewma.decay_ms, self.pe_decay_ms);
            set(&mut c.peakewma.failure_penalty_ms, self.pe_penalty_ms);
            set(&mut c.peakewma.preference_ms, self.pe_preference_ms);
        }
        if strategy == "boundedhash" {
            set(&mut c.boundedhash_factor, self.bh_factor);
        }
        c.zone = self.zone.map(|z| ZONES[z as usize].to_string());
        if let Some(o) = &self.outlier {
            set(&mut c.outlier.consecutive_failures, o.consecutive);
            if let Some((rate, window, min)) = o.rate {
                c.outlier.failure_rate_percent = rate;
                set(&mut c.outlier.window_ms, window);
                set(&mut c.outlier.min_requests, min);
            }
            set(&mut c.outlier.base_ejection_ms, o.base_ms);
            set(&mut c.outlier.max_ejection_ms, o.max_ms);
            set(&mut c.outlier.max_ejection_percent, o.max_percent);
            if self.zone.is_some() {
                set(&mut c.zone_min_healthy_percent, self.zone_min_healthy);
            }
        }
        if let (Some(slow), true) = (&self.slow_start, beyond_dubbo(strategy)) {
            c.slow_start.window_ms = slow.window_ms;
            set(&mut c.slow_start.min_weight_percent, slow.min_percent);
            set(&mut c.slow_start.aggression, slow.aggression);
        }
        c
    }
}

fn beyond_dubbo(strategy: &str) -> bool {
    polylb::StrategyKind::from_name(strategy)
        .unwrap()
        .is_beyond_dubbo()
}

/// At most this many of a set of `n` may be ejected at once (documented with
/// `outlier.maxEjectionPercent`: at least one invoker, never all; 0 % never ejects).
fn ejection_budget(n: usize, percent: u32) -> usize {
    if n < 2 || percent == 0 {
        0
    } else {
        (n * percent as usize / 100).clamp(1, n - 1)
    }
}

// ---------------------------------------------------------------------------------------------
// The model.

#[derive(Default, Clone, Debug, PartialEq)]
struct Counters {
    selected: u64,
    succeeded: u64,
    failures: u64,
    timeouts: u64,
}

#[derive(Default)]
struct Model {
    /// The balancers' configuration (as parsed).
    config: polylb::Config,
    set: Vec<Inv>,
    methods: Vec<&'static str>,
    counters: HashMap<u64, Counters>,
    /// In flight per (method, id), for ids in the set.
    active: HashMap<(u32, u64), i64>,
    /// Selected and not yet reported, in select order.
    outstanding: Vec<(u32, u64)>,
}

impl Model {
    fn method_id(&self, sel: u8) -> u32 {
        if sel < 245 {
            (sel as usize % self.methods.len()) as u32
        } else {
            self.methods.len() as u32 + (sel - 245) as u32
        }
    }

    fn ew(&self, id: u64, now_us: i64) -> i32 {
        let i = self.set.iter().find(|i| i.id == id).unwrap();
        let warmup = if i.warmup_ms < 0 {
            self.config.warmup_ms
        } else {
            i.warmup_ms
        };
        effective_weight(i.weight, i.start_ms, warmup, now_us.div_euclid(1000))
    }

    fn expected_update(&self, set: &[Invoker]) -> Result<(), i32> {
        let mut seen = BTreeSet::new();
        for i in set {
            if i.id > i64::MAX as u64 {
                return Err(PLB_ERR_ID_OUT_OF_RANGE);
            }
            if i.weight < 0 {
                return Err(PLB_ERR_NEGATIVE_WEIGHT);
            }
            if !seen.insert(i.id) {
                return Err(PLB_ERR_DUPLICATE_ID);
            }
        }
        Ok(())
    }

    fn apply_update(&mut self, set: Vec<Inv>) {
        let ids: BTreeSet<u64> = set.iter().map(|i| i.id).collect();
        self.counters.retain(|id, _| ids.contains(id));
        self.active.retain(|(_, id), _| ids.contains(id));
        for id in &ids {
            self.counters.entry(*id).or_default();
        }
        self.set = set;
    }

    /// Candidates a select may return, or the error it must return.
    fn allowed(&self, m: u32, cands: &[u64], excl: &[u64]) -> Result<Vec<u64>, i32> {
        if m as usize >= self.methods.len() {
            return Err(PLB_ERR_UNKNOWN_METHOD);
        }
        if self.set.is_empty() {
            return Err(PLB_ERR_NO_PROVIDER);
        }
        if cands.iter().any(|c| !self.set.iter().any(|i| i.id == *c)) {
            return Err(PLB_ERR_UNKNOWN_CANDIDATE);
        }
        let allowed: Vec<u64> = self
            .set
            .iter()
            .map(|i| i.id)
            .filter(|id| cands.is_empty() || cands.contains(id))
            .filter(|id| !excl.contains(id))
            .collect();
        if allowed.is_empty() {
            return Err(PLB_ERR_NO_CANDIDATE);
        }
        Ok(allowed)
    }

    /// What outlier ejection and zone preference leave of a pick's `allowed` candidates, with
    /// `ejected` those ejected at the time of the pick: the invokers the pick may return, and
    /// whether the strategy chooses among exactly those (false while the zone preference
    /// draws between the local zone and every healthy invoker).
    fn filtered(&self, allowed: &[u64], ejected: &BTreeSet<u64>) -> (Vec<u64>, bool) {
        let healthy: Vec<u64> = allowed
            .iter()
            .copied()
            .filter(|x| !ejected.contains(x))
            .collect();
        // A call whose candidates are all ejected uses them anyway.
        let spill = if healthy.is_empty() {
            allowed.to_vec()
        } else {
            healthy.clone()
        };
        let Some(zone) = self.config.zone.as_deref() else {
            return (spill, true);
        };
        let inv = |x: u64| self.set.iter().find(|i| i.id == x).unwrap();
        let local = |x: u64| inv(x).zone.map(|z| ZONES[z as usize]) == Some(zone);
        let weighs = |x: u64| inv(x).weight > 0;
        // Drained: the healthy local invokers all weigh 0 while another healthy one does not.
        let drained = healthy.iter().any(|&x| local(x))
            && !healthy.iter().any(|&x| local(x) && weighs(x))
            && healthy.iter().any(|&x| !local(x) && weighs(x));
        if drained {
            return (spill, true);
        }
        let local_total = allowed.iter().filter(|&&x| local(x)).count();
        let local_healthy: Vec<u64> = healthy.iter().copied().filter(|&x| local(x)).collect();
        if local_healthy.is_empty() {
            (spill, true)
        } else if local_healthy.len() * 100
            >= local_total * self.config.zone_min_healthy_percent as usize
        {
            (local_healthy, true)
        } else {
            (spill, false)
        }
    }

    fn selected(&mut self, m: u32, id: u64) {
        *self.active.entry((m, id)).or_default() += 1;
        self.counters.get_mut(&id).unwrap().selected += 1;
        self.outstanding.push((m, id));
    }

    fn reported(&mut self, m: u32, id: u64, outcome: i32) {
        let Some(c) = self.counters.get_mut(&id) else {
            return; // not in the set: accepted and ignored
        };
        match outcome {
            0 => c.succeeded += 1,
            1 => c.failures += 1,
            2 => {
                c.failures += 1;
                c.timeouts += 1;
            }
            _ => {}
        }
        let a = self.active.entry((m, id)).or_default();
        *a = (*a - 1).max(0);
    }

    /// The stats agree with the model, field by field.
    fn check_stats(&self, json: &str, strategy: &str, now: i64) {
        let v: serde_json::Value = serde_json::from_str(json).expect("stats are JSON");
        assert_eq!(v["strategy"], strategy);
        let rows = v["invokers"].as_array().unwrap();
        let ids: Vec<u64> = rows.iter().map(|r| r["id"].as_u64().unwrap()).collect();
        let expected: Vec<u64> = self.set.iter().map(|i| i.id).collect();
        assert_eq!(ids, expected, "stats list the set in update order");
        for (row, inv) in rows.iter().zip(&self.set) {
            let c = &self.counters[&inv.id];
            let active: i64 = self
                .active
                .iter()
                .filter(|((_, id), _)| *id == inv.id)
                .map(|(_, a)| *a)
                .sum();
            let got = |f: &str| row[f].as_i64().unwrap_or_else(|| panic!("{f} in {row}"));
            assert!(got("active") >= 0);
            assert_eq!(got("active"), active, "active of {}: {row}", inv.id);
            assert_eq!(got("selected") as u64, c.selected, "selected: {row}");
            assert_eq!(got("succeeded") as u64, c.succeeded, "succeeded: {row}");
            assert_eq!(got("failures") as u64, c.failures, "failures: {row}");
            assert_eq!(got("timeouts") as u64, c.timeouts, "timeouts: {row}");
            assert_eq!(got("weight"), inv.weight as i64);
            assert_eq!(got("effective_weight"), self.ew(inv.id, now) as i64);
            let config = &self.config;
            if config.zone.is_some() {
                let local = inv.zone.map(|z| ZONES[z as usize]) == config.zone.as_deref();
                assert_eq!(row["local"], local, "local: {row}");
            }
            let slow = &config.slow_start;
            if slow.window_ms > 0 && config.strategy.is_beyond_dubbo() {
                let p = row["slow_start_percent"]
                    .as_f64()
                    .expect("slow_start_percent");
                let min = slow.min_weight_percent as f64;
                // Printed with two decimals: allow for the rounding.
                assert!((min - 0.005..=100.0).contains(&p), "slow start {p}: {row}");
            } else {
                assert!(row.get("slow_start_percent").is_none(), "{row}");
            }
            assert_eq!(
                row.get("ejected").is_some(),
                config.outlier.enabled(),
                "{row}"
            );
            let rate_rule = config.outlier.enabled() && config.outlier.failure_rate_percent > 0;
            for field in ["window_requests", "window_failures"] {
                assert_eq!(row.get(field).is_some(), rate_rule, "{field}: {row}");
            }
        }
        if self.config.outlier.enabled() {
            let ejected = rows.iter().filter(|r| r["ejected"] == true).count();
            let budget = ejection_budget(rows.len(), self.config.outlier.max_ejection_percent);
            assert!(
                ejected <= budget,
                "{ejected} ejected, budget {budget}: {json}"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------

/// What a sequence did: picks, documented select errors, updates accepted and rejected, reports.
#[derive(Default, Debug)]
struct Tally {
    picks: u64,
    select_errors: u64,
    updates: u64,
    rejected_updates: u64,
    reports: u64,
    /// Invokers ejected by a report.
    ejections: u64,
    /// Picks the filters (ejection, zone) confined to fewer invokers than the call allowed.
    narrowed: u64,
}

impl Tally {
    fn add(&mut self, t: &Tally) {
        self.picks += t.picks;
        self.select_errors += t.select_errors;
        self.updates += t.updates;
        self.rejected_updates += t.rejected_updates;
        self.reports += t.reports;
        self.ejections += t.ejections;
        self.narrowed += t.narrowed;
    }
}

/// The stats' invoker rows by id.
fn rows(json: &str) -> HashMap<u64, serde_json::Value> {
    let v: serde_json::Value = serde_json::from_str(json).expect("stats are JSON");
    v["invokers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["id"].as_u64().unwrap(), r.clone()))
        .collect()
}

/// Invokers a pick at `now_us` skips: ejected until later (an ejection that is over is lifted
/// by the pick itself).
fn ejected_at(rows: &HashMap<u64, serde_json::Value>, now_us: i64) -> BTreeSet<u64> {
    let now_ms = now_us.div_euclid(1000);
    rows.iter()
        .filter(|(_, r)| r["ejected"] == true && r["ejected_until_ms"].as_i64().unwrap() > now_ms)
        .map(|(id, _)| *id)
        .collect()
}

fn run_sequence(strategy: &str, seed: u64, opts: &Opts, ops: &[Op]) -> Tally {
    let mut tally = Tally::default();
    let config = opts.config(strategy, seed);
    let a = Balancer::new(&config).unwrap_or_else(|e| panic!("{config}: {}", e.message));
    assert_eq!(a.config(), &opts.expected(strategy, seed), "{config}");
    let b = Balancer::new(&config).unwrap();
    let c = Abi::new(&config);
    let mut model = Model {
        config: a.config().clone(),
        ..Model::default()
    };
    let outlier = model.config.outlier.clone();
    for name in NAMES.iter().take(2) {
        let id = a.meth(name);
        assert_eq!(b.meth(name), id);
        assert_eq!(Api::meth(&c, name), id);
        if id as usize == model.methods.len() {
            model.methods.push(name);
        }
    }
    let mut now = BASE_US;
    let step = |now: &mut i64, dt: i64| *now = (*now + dt).max(1);
    for op in ops {
        match op {
            Op::Update { set, fault, at } => {
                let mut inv = invokers(set);
                if !inv.is_empty() {
                    let k = at % inv.len();
                    match fault {
                        0 => {
                            let dup = inv[k].clone().weight(7);
                            inv.push(dup)
                        }
                        1 => inv[k].weight = -1 - (*at % 1000) as i32,
                        2 => inv[k].id = i64::MAX as u64 + 1 + (*at as u64 % 1000),
                        _ => {}
                    }
                }
                let expected = model.expected_update(&inv);
                let before = (a.stats_text(now), Api::stats_text(&c, now));
                let got = Api::upd(&a, &inv);
                assert_eq!(got, expected, "update {inv:?}");
                assert_eq!(Api::upd(&c, &inv), expected, "ABI update");
                if expected.is_ok() {
                    tally.updates += 1;
                    Api::upd(&b, &inv).unwrap();
                    model.apply_update(set.clone());
                } else {
                    tally.rejected_updates += 1;
                    // Rejected: nothing changed (B never sees it; picks are compared below).
                    assert_eq!(
                        a.stats_text(now),
                        before.0,
                        "a rejected update changed the stats"
                    );
                    assert_eq!(Api::stats_text(&c, now), before.1);
                }
            }
            Op::Method(k) => {
                let name = NAMES[*k];
                let id = a.meth(name);
                assert_eq!(b.meth(name), id);
                assert_eq!(Api::meth(&c, name), id);
                match model.methods.iter().position(|n| *n == name) {
                    Some(p) => assert_eq!(id as usize, p, "a name keeps its id"),
                    None => {
                        assert_eq!(id as usize, model.methods.len(), "ids are dense");
                        model.methods.push(name);
                    }
                }
            }
            Op::Select { m, key, dt } | Op::SelectAmong { m, key, dt, .. } => {
                step(&mut now, *dt);
                let (cands, excl): (&[u64], &[u64]) = match op {
                    Op::SelectAmong { cands, excl, .. } => (cands, excl),
                    _ => (&[], &[]),
                };
                let m = model.method_id(*m);
                let ejected = if outlier.enabled() {
                    ejected_at(&rows(&a.stats_text(now)), now)
                } else {
                    BTreeSet::new()
                };
                let got = a.pick_among(m, key, cands, excl, now);
                assert_eq!(b.pick_among(m, key, cands, excl, now), got, "twin B");
                assert_eq!(
                    Api::pick_among(&c, m, key, cands, excl, now),
                    got,
                    "ABI differs"
                );
                match model.allowed(m, cands, excl) {
                    Err(code) => {
                        tally.select_errors += 1;
                        assert_eq!(got, Err(code))
                    }
                    Ok(allowed) => {
                        tally.picks += 1;
                        let id = got.unwrap_or_else(|e| panic!("select failed with {e}"));
                        assert!(allowed.contains(&id), "{id} not among {allowed:?}");
                        let (may, exact) = model.filtered(&allowed, &ejected);
                        assert!(
                            may.contains(&id),
                            "{id} not among {may:?} (allowed {allowed:?}, ejected {ejected:?})"
                        );
                        if may.len() < allowed.len() {
                            tally.narrowed += 1;
                        }
                        if exact {
                            check_rule(strategy, &model, m, &may, id, now);
                        }
                        model.selected(m, id);
                    }
                }
            }
            Op::Report {
                pick,
                m,
                id,
                elapsed,
                outcome,
                dt,
            } => {
                step(&mut now, *dt);
                let (m, id, from) = if !model.outstanding.is_empty() && pick % 4 != 0 {
                    let i = pick % model.outstanding.len();
                    let (m, id) = model.outstanding[i];
                    (m, id, Some(i))
                } else {
                    (model.method_id(*m), *id, None)
                };
                let expected = if !(0..=3).contains(outcome) {
                    Err(PLB_ERR_UNKNOWN_OUTCOME)
                } else if m as usize >= model.methods.len() {
                    Err(PLB_ERR_UNKNOWN_METHOD)
                } else if *elapsed < 0 {
                    Err(PLB_ERR_INVALID_ARGUMENT)
                } else {
                    Ok(())
                };
                let watch =
                    expected.is_ok() && outlier.enabled() && model.set.iter().any(|i| i.id == id);
                let before = if watch {
                    rows(&a.stats_text(now))
                } else {
                    HashMap::new()
                };
                let got = a.rep(m, id, *elapsed, *outcome, now);
                assert_eq!(got, expected, "report");
                if watch {
                    tally.ejections += check_ejection(&outlier, &before, &a, id, *outcome, now);
                }
                assert_eq!(b.rep(m, id, *elapsed, *outcome, now), expected);
                assert_eq!(c.rep(m, id, *elapsed, *outcome, now), expected);
                if expected.is_ok() {
                    tally.reports += 1;
                    model.reported(m, id, *outcome);
                    if let Some(i) = from {
                        model.outstanding.remove(i);
                    }
                }
            }
            Op::Stats { dt } => {
                step(&mut now, *dt);
                let json = a.stats_text(now);
                assert_eq!(Api::stats_text(&c, now), json, "ABI stats differ");
                model.check_stats(&json, strategy, now);
            }
        }
    }
    model.check_stats(&a.stats_text(now), strategy, now);
    assert_eq!(
        Api::stats_text(&b, now),
        a.stats_text(now),
        "twin B's stats"
    );
    // Report every call still in flight: nothing may remain counted.
    for (m, id) in std::mem::take(&mut model.outstanding) {
        for api in [&a as &dyn Api, &c] {
            api.rep(m, id, 100, PLB_OUTCOME_CANCELLED, now).unwrap();
        }
        model.reported(m, id, PLB_OUTCOME_CANCELLED);
    }
    let json = a.stats_text(now);
    assert_eq!(Api::stats_text(&c, now), json);
    model.check_stats(&json, strategy, now);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    for row in v["invokers"].as_array().unwrap() {
        assert_eq!(
            row["active"], 0,
            "in flight after every select was reported"
        );
        for per_method in row["methods"].as_array().unwrap() {
            assert_eq!(per_method["active"], 0);
        }
    }
    tally
}

/// The outlier rules around one report on `id` (in the set) at `now_us`, given the stats
/// before it: failures in a row and the failure-rate window's counts move as documented; a
/// failure of an invoker not ejected ejects it exactly when, counting it, there are
/// `outlier.consecutiveFailures` in a row or the window has `outlier.minRequests` calls with
/// failures at `outlier.failureRate` % or more, and the ejection budget is not used up; an
/// ejection comes from a failure or timeout, stays within the budget and lasts from
/// `outlier.baseEjectionMs` to `outlier.maxEjectionMs`.
/// Returns 1 when the report ejected the invoker.
fn check_ejection(
    o: &polylb::OutlierConfig,
    before: &HashMap<u64, serde_json::Value>,
    a: &Balancer,
    id: u64,
    outcome: i32,
    now_us: i64,
) -> u64 {
    let now_ms = now_us.div_euclid(1000);
    let after = rows(&a.stats_text(now_us));
    let (was, is) = (&before[&id], &after[&id]);
    let failed = matches!(outcome, PLB_OUTCOME_FAILURE | PLB_OUTCOME_TIMEOUT);
    // Ejections still running when this report ejects (one that is over no longer counts).
    let others = ejected_at(before, now_us).len();
    let budget = ejection_budget(before.len(), o.max_ejection_percent);
    // The failure-rate window this report counts in (requests, failures), from the stats.
    let rate_rule = o.failure_rate_percent > 0;
    let window = |r: &serde_json::Value| {
        let count = |f: &str| r[f].as_u64().unwrap_or_else(|| panic!("{f} in {r}"));
        (count("window_requests"), count("window_failures"))
    };
    if was["ejected"] == false && failed {
        // Either rule, counting this failure, ejects while the budget allows; nothing else does.
        let in_a_row = was["consecutive_failures"].as_u64().unwrap() + 1;
        let by_count = o.consecutive_failures > 0 && in_a_row >= o.consecutive_failures as u64;
        let (requests, failures) = if rate_rule {
            let (requests, failures) = window(was);
            (requests + 1, failures + 1)
        } else {
            (0, 0)
        };
        let by_rate = rate_rule
            && requests >= o.min_requests as u64
            && failures * 100 >= o.failure_rate_percent as u64 * requests;
        assert_eq!(
            is["ejected"] == true,
            (by_count || by_rate) && others < budget,
            "{in_a_row} failures in a row, {failures} of {requests} in the window, \
             {others} of {budget} ejected, {o:?}: {is}"
        );
    }
    // The window the rule reads: a report of an invoker not ejected joins it (a cancelled call
    // does not), an ejection starts it over, and nothing counts while ejected.
    if rate_rule {
        let (requests, failures) = window(was);
        let expected = if was["ejected"] == true || outcome == PLB_OUTCOME_CANCELLED {
            (requests, failures)
        } else if is["ejected"] == true {
            (0, 0)
        } else {
            (requests + 1, failures + failed as u64)
        };
        assert_eq!(window(is), expected, "window after outcome {outcome}: {is}");
    }
    // The count the rule reads: a success ends the run, a failure of an invoker not ejected
    // extends it (an ejection starts a new one), a cancelled call leaves it.
    if was["ejected"] == false && is["ejected"] == false {
        let count = |r: &serde_json::Value| r["consecutive_failures"].as_u64().unwrap();
        let expected = match outcome {
            PLB_OUTCOME_SUCCESS => 0,
            PLB_OUTCOME_CANCELLED => count(was),
            _ => count(was) + 1,
        };
        assert_eq!(
            count(is),
            expected,
            "consecutive failures after outcome {outcome}"
        );
    }
    let ejected =
        |r: &HashMap<u64, serde_json::Value>| r.values().filter(|r| r["ejected"] == true).count();
    assert!(ejected(&after) <= budget, "over the budget of {budget}");
    if was["ejected"] == true || is["ejected"] == false {
        return 0;
    }
    assert!(failed, "outcome {outcome} ejected {id}");
    assert!(others < budget, "ejected beyond the budget of {budget}");
    let length = is["ejected_until_ms"].as_i64().unwrap() - now_ms;
    assert!(
        (o.base_ejection_ms..=o.max_ejection_ms).contains(&length),
        "ejected for {length} ms: {o:?}"
    );
    1
}

/// Strategy-specific rules a pick must obey, `allowed` being the invokers it chose among.
fn check_rule(strategy: &str, model: &Model, m: u32, allowed: &[u64], id: u64, now: i64) {
    let active = |x: u64| model.active.get(&(m, x)).copied().unwrap_or(0);
    let eligible: Vec<u64> = match strategy {
        "random" => allowed.to_vec(),
        "leastactive" => {
            let least = allowed.iter().map(|&x| active(x)).min().unwrap();
            assert_eq!(active(id), least, "leastactive picked a busier invoker");
            allowed
                .iter()
                .copied()
                .filter(|&x| active(x) == least)
                .collect()
        }
        _ => return,
    };
    if eligible.len() > 1 && eligible.iter().any(|&x| model.ew(x, now) > 0) {
        assert!(
            model.ew(id, now) > 0,
            "picked zero-weight {id} over {eligible:?}"
        );
    }
}

proptest! {
    #![proptest_config(PtConfig { max_shrink_iters: 2000, ..seeded(5000) })]

    #[test]
    fn sequences_match_the_model(
        strategy in 0..strategies().len(),
        seed in any::<u64>(),
        opts in arb_any_opts(),
        ops in proptest::collection::vec(arb_op(), 1..80),
    ) {
        run_sequence(strategies()[strategy], seed, &opts, &ops);
    }
}

// Long runs per strategy with a fixed seed, so each is covered whatever proptest draws: with
// no options, then with options drawn as a deployment sets them (which must then have ejected
// invokers and narrowed picks, or the filters' checks ran on nothing).
#[test]
fn every_strategy_runs_a_long_sequence() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    for (k, strategy) in strategies().into_iter().enumerate() {
        let mut runner = TestRunner::deterministic();
        let (mut plain, mut with_options) = (Tally::default(), Tally::default());
        for run in 0..16 {
            let ops = proptest::collection::vec(arb_op(), 150..200)
                .new_tree(&mut runner)
                .unwrap()
                .current();
            if run < 8 {
                plain.add(&run_sequence(strategy, k as u64, &Opts::default(), &ops));
            } else {
                let opts = arb_opts().new_tree(&mut runner).unwrap().current();
                with_options.add(&run_sequence(strategy, k as u64, &opts, &ops));
            }
        }
        eprintln!("{strategy}: {plain:?}\n{strategy} with options: {with_options:?}");
        for t in [&plain, &with_options] {
            assert!(t.picks > 100 && t.rejected_updates > 5 && t.select_errors > 5);
        }
        assert!(with_options.ejections > 0 && with_options.narrowed > 0);
    }
}

// ---------------------------------------------------------------------------------------------
// Consistent hashing.

fn ring_set(n: usize, salt: u16) -> Vec<Invoker> {
    (0..n as u64)
        .map(|i| Invoker::new(i + 1, format!("192.168.{}.{}:{}", salt % 200, i, 20880 + i)))
        .collect()
}

proptest! {
    #![proptest_config(seeded(300))]

    #[test]
    fn consistent_hash_removal_moves_only_the_removed_keys(
        n in 2usize..24,
        salt in any::<u16>(),
        nodes in prop_oneof![Just(160u32), 4u32..64],
        removed in any::<usize>(),
        keys in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..32), 1..64),
    ) {
        let config = format!("loadbalance=consistenthash&hash.nodes={nodes}");
        let set = ring_set(n, salt);
        let x = set[removed % n].id;
        let rest: Vec<Invoker> = set.iter().filter(|i| i.id != x).cloned().collect();
        let rest_ids: Vec<u64> = rest.iter().map(|i| i.id).collect();
        let full = Balancer::new(&config).unwrap();
        full.update(&set).unwrap();
        let again = Balancer::new(&config).unwrap();
        again.update(&set).unwrap();
        let abi = Abi::new(&config);
        Api::upd(&abi, &set).unwrap();
        let smaller = Balancer::new(&config).unwrap();
        smaller.update(&rest).unwrap();
        for key in &keys {
            let before = full.select(0, key, BASE_US).unwrap();
            prop_assert_eq!(full.select(0, key, BASE_US).unwrap(), before, "same key, same pick");
            prop_assert_eq!(again.select(0, key, BASE_US).unwrap(), before, "same set, same pick");
            prop_assert_eq!(abi.pick_among(0, key, &[], &[], BASE_US).unwrap(), before);
            let after = smaller.select(0, key, BASE_US).unwrap();
            prop_assert_ne!(after, x);
            if before != x {
                prop_assert_eq!(after, before, "a key of a remaining invoker moved");
            }
            // A subset answers as a ring built from the subset.
            prop_assert_eq!(full.select_among(0, key, &rest_ids, &[], BASE_US).unwrap(), after);
            prop_assert_eq!(full.select_among(0, key, &[], &[x], BASE_US).unwrap(), after);
        }
        // Removing x from the live balancer gives the same answers as the fresh smaller one.
        full.update(&rest).unwrap();
        for key in &keys {
            prop_assert_eq!(full.select(0, key, BASE_US).unwrap(), smaller.select(0, key, BASE_US).unwrap());
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Round robin.

proptest! {
    #![proptest_config(seeded(600))]

    #[test]
    fn round_robin_cycle_counts_equal_weights(
        weights in proptest::collection::vec(prop_oneof![1 => Just(0i32), 6 => 1i32..60], 1..9),
        prefix in 0usize..300,
        other_every in 0usize..5,
        via_abi in any::<bool>(),
    ) {
        prop_assume!(weights.iter().any(|&w| w > 0));
        let set: Vec<Invoker> = weights
            .iter()
            .enumerate()
            .map(|(i, &w)| Invoker::new(i as u64 + 10, format!("10.2.0.{i}:20880")).weight(w))
            .collect();
        let config = "loadbalance=roundrobin";
        let (rust, abi);
        let api: &dyn Api = if via_abi {
            abi = Abi::new(config);
            &abi
        } else {
            rust = Balancer::new(config).unwrap();
            &rust
        };
        api.upd(&set).unwrap();
        let m = api.meth("m");
        let other = api.meth("other");
        let mut now = BASE_US;
        let pick = |method: u32, now: i64| {
            let id = api.pick_among(method, b"", &[], &[], now).unwrap();
            api.rep(method, id, 1000, 0, now).unwrap();
            id
        };
        for k in 0..prefix {
            now += 1000;
            pick(m, now);
            if other_every > 0 && k % other_every == 0 {
                pick(other, now);
            }
        }
        let total: i32 = weights.iter().sum();
        let mut counts = vec![0i32; weights.len()];
        for k in 0..total as usize {
            now += 1000;
            counts[(pick(m, now) - 10) as usize] += 1;
            if other_every > 0 && k % other_every == 0 {
                pick(other, now);
            }
        }
        prop_assert_eq!(counts, weights);
    }
}

// ---------------------------------------------------------------------------------------------
// Zone preference.

/// A bound that `|k - n p|` exceeds with probability below 10^-6 when k ~ Binomial(n, p):
/// Bernstein's inequality, `P(|k - n p| >= t) <= 2 exp(-t² / (2 (n p (1 - p) + t / 3)))`, solved
/// for t. Unlike a count of standard deviations it holds in the tails too, where the shares
/// drawn here (down to a few percent) put the normal approximation off.
fn binomial_tolerance(n: u64, p: f64) -> f64 {
    let l = (2.0 / 1e-6f64).ln();
    let variance = n as f64 * p * (1.0 - p);
    l / 3.0 + (l * l / 9.0 + 2.0 * variance * l).sqrt()
}

/// One invoker of a zone case: weight, in the consumer's zone, ejected.
#[derive(Clone, Debug)]
struct ZoneInv {
    weight: i32,
    local: bool,
    /// When remote: in another zone (true) or in none (false).
    other_zone: bool,
    ejected: bool,
}

/// Where the zone rules send a pick among `allowed` (indices into `set`), as documented: the
/// share of picks kept local (`[0, 1]`), and the invokers the rest spill over to.
fn zone_rule(set: &[ZoneInv], allowed: &[usize], min_healthy: u32) -> (f64, Vec<usize>) {
    let healthy: Vec<usize> = allowed
        .iter()
        .copied()
        .filter(|&i| !set[i].ejected)
        .collect();
    // A call whose candidates are all ejected uses them anyway, with no preference.
    if healthy.is_empty() {
        return (0.0, allowed.to_vec());
    }
    let local_healthy = healthy.iter().filter(|&&i| set[i].local).count();
    let drained = local_healthy > 0
        && !healthy.iter().any(|&i| set[i].local && set[i].weight > 0)
        && healthy.iter().any(|&i| !set[i].local && set[i].weight > 0);
    if drained || local_healthy == 0 {
        return (0.0, healthy);
    }
    // Health counts the call's local candidates, ejected ones included.
    let local_total = allowed.iter().filter(|&&i| set[i].local).count();
    let share = (local_healthy * 100) as f64 / (local_total * min_healthy as usize) as f64;
    (share.min(1.0), healthy)
}

/// Picks `n` times (each reported) and counts those that went to a local invoker.
fn local_picks(b: &Balancer, ids: &[u64], local: &BTreeSet<u64>, cands: &[u64], n: u64) -> u64 {
    let mut kept = 0;
    for k in 0..n {
        let id = b
            .select_among(0, &k.to_le_bytes(), cands, &[], BASE_US)
            .unwrap();
        assert!(ids.contains(&id));
        b.report(0, id, 1000, Outcome::Success, BASE_US).unwrap();
        kept += local.contains(&id) as u64;
    }
    kept
}

fn arb_zone_set() -> impl Strategy<Value = Vec<ZoneInv>> {
    proptest::collection::vec(
        (
            prop_oneof![1 => Just(0i32), 5 => 1i32..100],
            prop_oneof![3 => Just(true), 2 => Just(false)],
            any::<bool>(),
            any::<bool>(),
        )
            .prop_map(|(weight, local, other_zone, ejected)| ZoneInv {
                weight,
                local,
                other_zone,
                ejected,
            }),
        1..9,
    )
}

proptest! {
    #![proptest_config(seeded(500))]

    /// How often picks stay in the consumer's zone: with `random`, local picks out of 3000 are
    /// the documented share (all of them while at least `zone.minHealthyPercent` % of the
    /// call's local invokers are healthy; below, the healthy fraction over that threshold,
    /// plus the local invokers' part of the spill-over to every healthy invoker by weight;
    /// none when no local invoker is healthy or the healthy ones weigh 0 while others do not),
    /// exactly where that share is 0 or 1 and within `binomial_tolerance` otherwise. Every
    /// other strategy, where the rules alone decide (all local, or a spill-over with no local
    /// invoker), keeps to them on each of 300 picks. Whole-set picks and caller subsets.
    #[test]
    fn picks_stay_local_as_the_zone_rules_say(
        mut set in arb_zone_set(),
        min_healthy in prop_oneof![2 => Just(100u32), 2 => 50u32..=100, 1 => 1u32..=100],
        subset in prop_oneof![2 => Just(None), 1 => proptest::collection::vec(any::<bool>(), 8).prop_map(Some)],
        other in 0..strategies().len(),
        seed in any::<u64>(),
    ) {
        let n = set.len();
        // The budget (maxEjectionPercent=100) keeps one invoker of the set healthy.
        if set.iter().all(|i| i.ejected) {
            set[seed as usize % n].ejected = false;
        }
        let ids: Vec<u64> = (1..=n as u64).collect();
        let invokers: Vec<Invoker> = set
            .iter()
            .zip(&ids)
            .map(|(inv, &id)| {
                let i = Invoker::new(id, format!("10.3.0.{id}:20880")).weight(inv.weight);
                match (inv.local, inv.other_zone) {
                    (true, _) => i.zone("z0"),
                    (false, true) => i.zone("z1"),
                    (false, false) => i,
                }
            })
            .collect();
        let allowed: Vec<usize> = match &subset {
            Some(mask) if (0..n).any(|i| mask[i]) => (0..n).filter(|&i| mask[i]).collect(),
            _ => (0..n).collect(),
        };
        let cands: Vec<u64> = if allowed.len() == n && subset.is_none() {
            Vec::new()
        } else {
            allowed.iter().map(|&i| ids[i]).collect()
        };
        let local: BTreeSet<u64> = (0..n).filter(|&i| set[i].local).map(|i| ids[i]).collect();
        let (share, spill) = zone_rule(&set, &allowed, min_healthy);
        // The spill-over's local part with `random` (by weight; uniform when all weigh 0).
        let weight = |i: &usize| set[*i].weight as u64;
        let spill_weight: u64 = spill.iter().map(weight).sum();
        let spill_local_weight: u64 = spill.iter().filter(|&&i| set[i].local).map(weight).sum();
        let spill_locals = spill.iter().filter(|&&i| set[i].local).count();
        let spill_local = if spill_weight > 0 {
            spill_local_weight as f64 / spill_weight as f64
        } else {
            spill_locals as f64 / spill.len() as f64
        };

        for (strategy, picks) in [("random", 3000u64), (strategies()[other], 300)] {
            let config = format!(
                "loadbalance={strategy}&seed={seed}&zone=z0&zone.minHealthyPercent={min_healthy}\
                 &outlier.consecutiveFailures=1&outlier.maxEjectionPercent=100\
                 &outlier.baseEjectionMs=1000000&outlier.maxEjectionMs=1000000"
            );
            let b = Balancer::new(&config).unwrap();
            b.update(&invokers).unwrap();
            for (inv, &id) in set.iter().zip(&ids) {
                if inv.ejected {
                    b.report(0, id, 1000, Outcome::Failure, BASE_US).unwrap();
                }
            }
            let rows = rows(&b.stats_json(BASE_US));
            for (inv, id) in set.iter().zip(&ids) {
                prop_assert_eq!(rows[id]["ejected"] == true, inv.ejected, "{}", config);
            }
            let kept = local_picks(&b, &ids, &local, &cands, picks);
            let what = format!(
                "{strategy}: {kept} of {picks} local, share {share}, spill {spill:?}: {set:?} \
                 allowed {allowed:?}, minHealthy {min_healthy}"
            );
            if strategy == "random" {
                let all = share >= 1.0
                    || spill_locals == spill.len()
                    || (spill_weight > 0 && spill_local_weight == spill_weight);
                let none = share == 0.0 && spill_local == 0.0;
                if all {
                    prop_assert_eq!(kept, picks, "{}", what);
                } else if none {
                    prop_assert_eq!(kept, 0, "{}", what);
                } else {
                    let p = share + (1.0 - share) * spill_local;
                    let off = (kept as f64 - picks as f64 * p).abs();
                    prop_assert!(
                        off <= binomial_tolerance(picks, p),
                        "{} (expected {:.1})", what, picks as f64 * p
                    );
                }
            } else if share >= 1.0 || spill_locals == spill.len() {
                prop_assert_eq!(kept, picks, "{}", what);
            } else if share == 0.0 && spill_locals == 0 {
                prop_assert_eq!(kept, 0, "{}", what);
            }
        }
    }
}
