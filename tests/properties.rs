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
//! * `consistent_hash_*`: the ring is deterministic (same set → same picks, also through the
//!   ABI), a removal moves only the removed invoker's keys, and a candidate subset answers as a
//!   ring rebuilt from the subset.
//! * `round_robin_cycle_counts_equal_weights`: from any point of the sequence, Σw consecutive
//!   picks of a method give each invoker exactly its weight, with another method interleaved.

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
                    ),
                    n,
                ),
            )
        })
        .prop_map(|(ids, attrs)| {
            ids.into_iter()
                .zip(attrs)
                .map(|(id, (weight, addr, start_ms, warmup_ms))| Inv {
                    id,
                    weight,
                    addr,
                    start_ms,
                    warmup_ms,
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
            Invoker::new(i.id, format!("10.1.{}.{}:20880", i.addr, i.id))
                .weight(i.weight)
                .start_time_ms(i.start_ms)
                .warmup_ms(i.warmup_ms)
        })
        .collect()
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
            600_000
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
}

fn run_sequence(strategy: &str, seed: u64, ops: &[Op]) -> Tally {
    let mut tally = Tally::default();
    let config = format!("loadbalance={strategy}&seed={seed}");
    let a = Balancer::new(&config).unwrap();
    let b = Balancer::new(&config).unwrap();
    let c = Abi::new(&config);
    let mut model = Model::default();
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
                        check_rule(strategy, &model, m, &allowed, id, now);
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
                let got = a.rep(m, id, *elapsed, *outcome, now);
                assert_eq!(got, expected, "report");
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

/// Strategy-specific rules a pick must obey.
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
        ops in proptest::collection::vec(arb_op(), 1..80),
    ) {
        run_sequence(strategies()[strategy], seed, &ops);
    }
}

// One run per strategy with a fixed seed, so each is covered whatever proptest draws.
#[test]
fn every_strategy_runs_a_long_sequence() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    for (k, strategy) in strategies().into_iter().enumerate() {
        let mut runner = TestRunner::deterministic();
        let mut total = Tally::default();
        for _ in 0..8 {
            let ops = proptest::collection::vec(arb_op(), 150..200)
                .new_tree(&mut runner)
                .unwrap()
                .current();
            let t = run_sequence(strategy, k as u64, &ops);
            total.picks += t.picks;
            total.select_errors += t.select_errors;
            total.updates += t.updates;
            total.rejected_updates += t.rejected_updates;
            total.reports += t.reports;
        }
        eprintln!("{strategy}: {total:?}");
        assert!(total.picks > 100 && total.rejected_updates > 5 && total.select_errors > 5);
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
