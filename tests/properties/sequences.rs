//! Sequences run in lockstep on the three balancers and checked against the model.

use crate::api::*;
use crate::model::*;
use crate::operations::*;
use crate::options::*;
use crate::{seeded, strategies, BASE_US, NAMES};
use polylb::ffi::*;
use polylb::Balancer;
use proptest::prelude::*;
use proptest::test_runner::Config as PtConfig;
use std::collections::{BTreeSet, HashMap};

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
pub(crate) fn rows(json: &str) -> HashMap<u64, serde_json::Value> {
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
/// The invokers whose ejection is in force at `now_us`: not over, and not ending further ahead
/// than the longest ejection (made before the clock stepped back: lifted by the next pick).
fn ejected_at(
    rows: &HashMap<u64, serde_json::Value>,
    now_us: i64,
    max_ejection_ms: i64,
) -> BTreeSet<u64> {
    let now_ms = now_us.div_euclid(1000);
    rows.iter()
        .filter(|(_, r)| {
            let until = r["ejected_until_ms"].as_i64().unwrap();
            // One ending more than the longest ejection and a second ahead was made before the
            // clock stepped back: picks treat it as lifted (docs/abi-contract.md).
            r["ejected"] == true
                && until > now_ms
                && until.saturating_sub(now_ms) <= max_ejection_ms.saturating_add(1000)
        })
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
                    ejected_at(&rows(&a.stats_text(now)), now, outlier.max_ejection_ms)
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
                    tally.ejections +=
                        check_ejection(&model.config, &before, &a, id, *outcome, now);
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
    config: &polylb::Config,
    before: &HashMap<u64, serde_json::Value>,
    a: &Balancer,
    id: u64,
    outcome: i32,
    now_us: i64,
) -> u64 {
    let o = &config.outlier;
    let now_ms = now_us.div_euclid(1000);
    let after = rows(&a.stats_text(now_us));
    let (was, is) = (&before[&id], &after[&id]);
    let failed = matches!(outcome, PLB_OUTCOME_FAILURE | PLB_OUTCOME_TIMEOUT);
    // Ejections still running when this report ejects (one that is over no longer counts),
    // of the invokers the budget counts; an invoker outside it is never refused.
    let counted = budget_rows(config.strategy, before.values());
    let counted_ids: BTreeSet<u64> = counted.iter().map(|r| r["id"].as_u64().unwrap()).collect();
    let others = ejected_at(before, now_us, o.max_ejection_ms)
        .intersection(&counted_ids)
        .count();
    let budget = ejection_budget(counted.len(), o.max_ejection_percent);
    // (0 % never ejects, drained invokers included.)
    let within_budget =
        o.max_ejection_percent > 0 && (!counted_ids.contains(&id) || others < budget);
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
            (by_count || by_rate) && within_budget,
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
    let ejected = |r: &HashMap<u64, serde_json::Value>| {
        budget_rows(config.strategy, r.values())
            .iter()
            .filter(|r| r["ejected"] == true)
            .count()
    };
    assert!(ejected(&after) <= budget, "over the budget of {budget}");
    if was["ejected"] == true || is["ejected"] == false {
        return 0;
    }
    assert!(failed, "outcome {outcome} ejected {id}");
    assert!(within_budget, "ejected beyond the budget of {budget}");
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
