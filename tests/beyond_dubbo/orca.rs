//! `orca`: weights from providers' load reports (gRFC A58) — the capacity formula, blackout,
//! expiration, the mean for invokers without a weight, the fallback to configured weights, the
//! cap, bad reports, churn, failover draws, warm-up, methods, concurrency.

use crate::common::*;
use crate::helpers::*;
use polylb::{Balancer, Invoker, LoadReport, Outcome, Status};
use std::collections::BTreeMap;

const CONFIG: &str = "loadbalance=orca";
const SECOND: i64 = 1_000_000;

fn load(qps: f64, eps: f64, utilization: f64) -> LoadReport {
    LoadReport {
        qps,
        eps,
        utilization,
    }
}

/// Every invoker of `reports` reports (qps, eps, utilization) every second from `from` to
/// `to` (µs, inclusive).
fn report_every_second(b: &Balancer, reports: &[(u64, LoadReport)], from: i64, to: i64) {
    let mut t = from;
    while t <= to {
        for &(id, report) in reports {
            b.report_load(id, report, t).unwrap();
        }
        t += SECOND;
    }
}

/// Picks per id over `draws` selects at `now`.
fn deal(b: &Balancer, draws: usize, now: i64) -> BTreeMap<u64, usize> {
    counts(b, 0, draws, now)
}

/// The stride schedule deals each invoker its share of every round within one call: over
/// `draws` picks, each count is within 2 of `draws × weight / total`.
fn assert_dealt(c: &BTreeMap<u64, usize>, weights: &[(u64, f64)], draws: usize) {
    let total: f64 = weights.iter().map(|(_, w)| w).sum();
    for &(id, w) in weights {
        let expected = draws as f64 * w / total;
        let got = c.get(&id).copied().unwrap_or(0) as f64;
        assert!(
            (got - expected).abs() <= 2.0,
            "invoker {id}: {got} calls, expected {expected:.1} (weights {weights:?}, dealt {c:?})"
        );
    }
}

fn field(b: &Balancer, now: i64, id: u64, name: &str) -> serde_json::Value {
    stat_value(b, now, id, name)
}

#[test]
fn without_reports_the_configured_weights_deal_the_calls_in_turn() {
    let set = [
        provider(1).weight(100),
        provider(2).weight(200),
        provider(3).weight(300),
    ];
    let b = lb(CONFIG, &set);
    let c = deal(&b, 6000, NOW);
    assert_dealt(&c, &[(1, 100.0), (2, 200.0), (3, 300.0)], 6000);
    // In turn, not at random: any 60 consecutive picks hold each invoker's share within 2.
    let window: Vec<u64> = (0..60).map(|_| b.select(0, b"", NOW).unwrap()).collect();
    for (id, w) in [(1, 10.0), (2, 20.0), (3, 30.0)] {
        let got = window.iter().filter(|&&x| x == id).count() as f64;
        assert!((got - w).abs() <= 2.0, "{id}: {got} of 60, expected {w}");
    }
}

/// The 10 × mean cap is for reports: configured weights alone deal exactly, however unequal
/// (one of 10,000 beside twenty of 100 takes 10,000 of every 12,000 calls, as under
/// `roundrobin`; capped, it took 5,715), before and after the first recomputation.
#[test]
fn configured_weights_alone_are_not_capped() {
    let mut set = vec![provider(1).weight(10_000)];
    set.extend((2..=21).map(|id| provider(id).weight(100)));
    let b = lb(CONFIG, &set);
    let mut weights = vec![(1, 10_000.0)];
    weights.extend((2..=21).map(|id| (id, 100.0)));
    assert_dealt(&deal(&b, 12_000, NOW), &weights, 12_000);
    assert_dealt(&deal(&b, 12_000, NOW + 5_000_000), &weights, 12_000);
}

#[test]
fn reported_capacity_deals_the_calls_after_the_blackout() {
    let set: Vec<Invoker> = (1..=4).map(provider).collect();
    let b = lb(CONFIG, &set);
    // The same qps at different utilizations: capacities 200, 200, 400, 100.
    let reports = [
        (1, load(100.0, 0.0, 0.5)),
        (2, load(100.0, 0.0, 0.5)),
        (3, load(100.0, 0.0, 0.25)),
        (4, load(100.0, 0.0, 1.0)),
    ];
    report_every_second(&b, &reports, NOW, NOW + 9 * SECOND);
    // 9.5 s after the first report: still in the blackout, equal configured weights.
    let c = deal(&b, 4000, NOW + 9_500_000);
    assert_dealt(&c, &[(1, 1.0), (2, 1.0), (3, 1.0), (4, 1.0)], 4000);
    assert_eq!(field(&b, NOW + 9_500_000, 3, "orca_counted"), false);
    report_every_second(&b, &reports, NOW + 10 * SECOND, NOW + 12 * SECOND);
    // Past 10 s the reports count, from the next recomputation (at most a second later).
    let c = deal(&b, 9000, NOW + 12 * SECOND);
    assert_dealt(&c, &[(1, 200.0), (2, 200.0), (3, 400.0), (4, 100.0)], 9000);
    assert_eq!(field(&b, NOW + 12 * SECOND, 3, "orca_counted"), true);
    assert_eq!(field(&b, NOW + 12 * SECOND, 3, "orca_weight"), 400.0);
    let share = field(&b, NOW + 12 * SECOND, 4, "orca_share")
        .as_f64()
        .unwrap();
    assert!((share - 100.0 / 900.0).abs() < 1e-4, "share {share}");
}

/// A balancer with `orca.updateMs=update_ms` whose two invokers reported equal capacities, then
/// invoker 2 three times the capacity: checks that the schedule held 1 : 1 until 4 s later.
fn schedule_held_past_a_report(update_ms: i64) -> Balancer {
    let set: Vec<Invoker> = (1..=2).map(provider).collect();
    let b = lb(
        &format!("{CONFIG}&orca.blackoutMs=0&orca.updateMs={update_ms}"),
        &set,
    );
    b.report_load(1, load(100.0, 0.0, 0.5), NOW).unwrap();
    b.report_load(2, load(100.0, 0.0, 0.5), NOW).unwrap();
    assert_dealt(&deal(&b, 1000, NOW), &[(1, 1.0), (2, 1.0)], 1000);
    b.report_load(2, load(300.0, 0.0, 0.5), NOW + SECOND)
        .unwrap();
    assert_dealt(
        &deal(&b, 1000, NOW + 4 * SECOND),
        &[(1, 1.0), (2, 1.0)],
        1000,
    );
    b
}

#[test]
fn weights_are_recomputed_once_per_update_period() {
    // Invoker 2 now reports three times the capacity; the schedule holds until NOW + 5 s.
    let b = schedule_held_past_a_report(5000);
    assert_dealt(
        &deal(&b, 4000, NOW + 5 * SECOND),
        &[(1, 1.0), (2, 3.0)],
        4000,
    );
}

#[test]
fn the_longest_update_period_holds_the_schedule() {
    // Every updateMs the config accepts: near i64::MAX the check of a clock stepped back
    // added the period and a second unchecked, which wrapped (a panic with overflow checks;
    // without them a recomputation at every pick, here following the report at once).
    for update_ms in [i64::MAX - 1000, i64::MAX] {
        schedule_held_past_a_report(update_ms);
    }
}

/// The stats read back as JSON with a weight from the largest capacity a report may give.
#[test]
fn a_weight_near_the_largest_float_is_valid_json() {
    let set: Vec<Invoker> = (1..=2).map(provider).collect();
    let b = lb(&format!("{CONFIG}&orca.blackoutMs=0"), &set);
    b.report_load(1, load(f64::MAX, 0.0, 1.0), NOW).unwrap();
    b.select(0, b"", NOW).unwrap();
    let weight = field(&b, NOW, 1, "orca_weight");
    assert!(weight.as_f64().unwrap() > 1e307, "{weight}");
}

#[test]
fn an_invoker_without_a_weight_takes_the_mean() {
    let set: Vec<Invoker> = (1..=4).map(provider).collect();
    let b = lb(&format!("{CONFIG}&orca.blackoutMs=0"), &set);
    for (id, qps) in [(1, 100.0), (2, 200.0), (3, 300.0)] {
        b.report_load(id, load(qps, 0.0, 1.0), NOW).unwrap();
    }
    assert_eq!(field(&b, NOW, 4, "orca_weight"), serde_json::Value::Null);
    let c = deal(&b, 8000, NOW);
    assert_dealt(&c, &[(1, 100.0), (2, 200.0), (3, 300.0), (4, 200.0)], 8000);
}

#[test]
fn fewer_than_two_weights_leave_the_configured_weights_in_charge() {
    let set = [provider(1).weight(100), provider(2).weight(300)];
    let b = lb(&format!("{CONFIG}&orca.blackoutMs=0"), &set);
    // One report of a large capacity: one weight is no comparison.
    b.report_load(1, load(1000.0, 0.0, 0.1), NOW).unwrap();
    assert_dealt(&deal(&b, 4000, NOW), &[(1, 100.0), (2, 300.0)], 4000);
    assert_eq!(field(&b, NOW, 1, "orca_reported"), false);
}

#[test]
fn a_weight_lapses_after_the_expiration_and_the_next_report_starts_a_new_blackout() {
    let set: Vec<Invoker> = (1..=2).map(provider).collect();
    let b = lb(
        &format!("{CONFIG}&orca.blackoutMs=10000&orca.expirationMs=60000"),
        &set,
    );
    let reports = [(1, load(100.0, 0.0, 1.0)), (2, load(300.0, 0.0, 1.0))];
    report_every_second(&b, &reports, NOW, NOW + 20 * SECOND);
    assert_dealt(
        &deal(&b, 4000, NOW + 20 * SECOND),
        &[(1, 1.0), (2, 3.0)],
        4000,
    );
    // Silence: 59.5 s after the last report the weights still count; at 60 s they lapse.
    let last = NOW + 20 * SECOND;
    assert_eq!(field(&b, last + 59_500_000, 2, "orca_counted"), true);
    assert_eq!(field(&b, last + 60 * SECOND, 2, "orca_counted"), false);
    assert_dealt(
        &deal(&b, 2000, last + 60 * SECOND),
        &[(1, 1.0), (2, 1.0)],
        2000,
    );
    // Reports resume: a new blackout of 10 s before they count again.
    let back = last + 70 * SECOND;
    report_every_second(&b, &reports, back, back + 9 * SECOND);
    assert_dealt(
        &deal(&b, 2000, back + 9 * SECOND),
        &[(1, 1.0), (2, 1.0)],
        2000,
    );
    report_every_second(&b, &reports, back + 10 * SECOND, back + 11 * SECOND);
    assert_dealt(
        &deal(&b, 4000, back + 11 * SECOND),
        &[(1, 1.0), (2, 3.0)],
        4000,
    );
}

#[test]
fn errors_count_as_utilization_by_the_penalty() {
    for (penalty, expected) in [(1.0, 100.0), (0.0, 200.0), (3.0, 50.0)] {
        let set: Vec<Invoker> = (1..=2).map(provider).collect();
        let b = lb(
            &format!("{CONFIG}&orca.blackoutMs=0&orca.errorPenalty={penalty}"),
            &set,
        );
        // 100 qps at 0.5: 200 without errors; half of them failing adds 0.5 × penalty.
        b.report_load(1, load(100.0, 50.0, 0.5), NOW).unwrap();
        b.report_load(2, load(100.0, 0.0, 0.5), NOW).unwrap();
        assert_eq!(
            field(&b, NOW, 1, "orca_weight"),
            expected,
            "penalty {penalty}"
        );
        assert_dealt(&deal(&b, 3000, NOW), &[(1, expected), (2, 200.0)], 3000);
    }
}

#[test]
fn reports_without_qps_or_utilization_are_ignored() {
    let set: Vec<Invoker> = (1..=2).map(provider).collect();
    let b = lb(&format!("{CONFIG}&orca.blackoutMs=0"), &set);
    b.report_load(1, load(100.0, 0.0, 1.0), NOW).unwrap();
    b.report_load(2, load(300.0, 0.0, 1.0), NOW).unwrap();
    // An idle provider's report (no queries) and one without a utilization say nothing of
    // capacity: the last weights stay.
    b.report_load(2, load(0.0, 0.0, 0.0), NOW + 1).unwrap();
    b.report_load(2, load(50.0, 0.0, 0.0), NOW + 2).unwrap();
    assert_eq!(field(&b, NOW, 2, "orca_weight"), 300.0);
    assert_dealt(&deal(&b, 4000, NOW + 3), &[(1, 1.0), (2, 3.0)], 4000);
}

#[test]
fn bad_reports_are_refused_and_change_nothing() {
    let set: Vec<Invoker> = (1..=2).map(provider).collect();
    let b = lb(&format!("{CONFIG}&orca.blackoutMs=0"), &set);
    b.report_load(1, load(100.0, 0.0, 1.0), NOW).unwrap();
    b.report_load(2, load(300.0, 0.0, 1.0), NOW).unwrap();
    let before = b.stats_json(NOW);
    for bad in [
        load(f64::NAN, 0.0, 1.0),
        load(100.0, f64::NAN, 1.0),
        load(100.0, 0.0, f64::NAN),
        load(f64::INFINITY, 0.0, 1.0),
        load(100.0, 0.0, f64::INFINITY),
        load(-1.0, 0.0, 1.0),
        load(100.0, -1.0, 1.0),
        load(100.0, 0.0, -0.5),
        load(100.0, 101.0, 1.0),
    ] {
        assert_eq!(
            b.report_load(2, bad, NOW),
            Err(Status::InvalidArgument),
            "{bad:?}"
        );
    }
    assert_eq!(b.stats_json(NOW), before);
    // An id not in the set is accepted and ignored, as reports of calls are.
    assert_eq!(b.report_load(99, load(1.0, 0.0, 1.0), NOW), Ok(()));
    // Other strategies accept and ignore reports (they are checked all the same).
    let other = lb("loadbalance=random", &set);
    assert_eq!(other.report_load(1, load(1.0, 0.0, 1.0), NOW), Ok(()));
    assert_eq!(
        other.report_load(1, load(-1.0, 0.0, 1.0), NOW),
        Err(Status::InvalidArgument)
    );
}

#[test]
fn no_weight_exceeds_ten_times_the_mean() {
    // 20 invokers; one reports a near-zero utilization (a weight a million times the others').
    let set: Vec<Invoker> = (1..=20).map(provider).collect();
    let b = lb(&format!("{CONFIG}&orca.blackoutMs=0"), &set);
    b.report_load(1, load(100.0, 0.0, 1e-6), NOW).unwrap();
    for id in 2..=20 {
        b.report_load(id, load(100.0, 0.0, 1.0), NOW).unwrap();
    }
    // Capped at c = 10 × mean: c = 10 × (c + 19 × 100) / 20, so c = 1900 and it takes half.
    let c = deal(&b, 20_000, NOW);
    let mut weights = vec![(1, 1900.0)];
    weights.extend((2..=20).map(|id| (id, 100.0)));
    assert_dealt(&c, &weights, 20_000);
}

#[test]
fn the_cap_is_exact_however_slowly_stepping_to_it_would_converge() {
    // 11 invokers: stepping c ← 10 × mean(min(w, c)) from the uncapped mean shrinks the excess
    // by only 10/11 a step, and after 32 steps had left invoker 11 with 99.98 % of the calls.
    // Capped exactly, c = 10 × (10 × 200 + c) / 11, so c = 20,000: 10/11 of the calls.
    let set: Vec<Invoker> = (1..=11).map(provider).collect();
    let b = lb(&format!("{CONFIG}&orca.blackoutMs=0"), &set);
    for id in 1..=10 {
        b.report_load(id, load(100.0, 0.0, 0.5), NOW).unwrap();
    }
    b.report_load(11, load(100.0, 0.0, 1e-9), NOW).unwrap();
    let c = deal(&b, 22_000, NOW);
    let mut weights: Vec<(u64, f64)> = (1..=10).map(|id| (id, 200.0)).collect();
    weights.push((11, 20_000.0));
    assert_dealt(&c, &weights, 22_000);
    // Two outliers among 22: both capped, at c = 10 × (20 × 100 + 2c) / 22 = 10,000.
    let set: Vec<Invoker> = (1..=22).map(provider).collect();
    let b = lb(&format!("{CONFIG}&orca.blackoutMs=0"), &set);
    for id in 1..=20 {
        b.report_load(id, load(100.0, 0.0, 1.0), NOW).unwrap();
    }
    b.report_load(21, load(100.0, 0.0, 1e-6), NOW).unwrap();
    b.report_load(22, load(100.0, 0.0, 1e-3), NOW).unwrap();
    let c = deal(&b, 22_000, NOW);
    let mut weights: Vec<(u64, f64)> = (1..=20).map(|id| (id, 100.0)).collect();
    weights.extend([(21, 10_000.0), (22, 10_000.0)]);
    assert_dealt(&c, &weights, 22_000);
}

#[test]
fn weights_near_the_largest_float_keep_their_proportions() {
    // Any finite report is accepted: weights of 5e307 and 1e308, whose sum (with the mean the
    // unreported invokers take) is beyond f64::MAX, still deal 1 : 2 : 1.5 : 1.5.
    let set: Vec<Invoker> = (1..=4).map(provider).collect();
    let b = lb(&format!("{CONFIG}&orca.blackoutMs=0"), &set);
    b.report_load(1, load(1e300, 0.0, 2e-8), NOW).unwrap();
    b.report_load(2, load(1e300, 0.0, 1e-8), NOW).unwrap();
    let c = deal(&b, 6000, NOW);
    assert_dealt(&c, &[(1, 1.0), (2, 2.0), (3, 1.5), (4, 1.5)], 6000);
    // And the smallest: 1e-300 beside 2e-300.
    let b = lb(&format!("{CONFIG}&orca.blackoutMs=0"), &set);
    b.report_load(1, load(1e-150, 0.0, 1e150), NOW).unwrap();
    b.report_load(2, load(1e-150, 0.0, 0.5e150), NOW).unwrap();
    let c = deal(&b, 6000, NOW);
    assert_dealt(&c, &[(1, 1.0), (2, 2.0), (3, 1.5), (4, 1.5)], 6000);
}

#[test]
fn configured_weight_zero_takes_no_calls_while_others_weigh() {
    let set = [provider(1), provider(2), provider(3).weight(0)];
    let b = lb(&format!("{CONFIG}&orca.blackoutMs=0"), &set);
    for id in 1..=3 {
        b.report_load(id, load(100.0, 0.0, 0.5), NOW).unwrap();
    }
    let c = deal(&b, 3000, NOW);
    assert_eq!(c.get(&3), None, "{c:?}");
    // A set of weight-0 invokers only still serves, in turn.
    let zeros = lb(CONFIG, &[provider(1).weight(0), provider(2).weight(0)]);
    assert_dealt(&deal(&zeros, 1000, NOW), &[(1, 1.0), (2, 1.0)], 1000);
}

#[test]
fn a_failover_draws_among_the_others_by_weight() {
    let set: Vec<Invoker> = (1..=3).map(provider).collect();
    let b = lb(&format!("{CONFIG}&orca.blackoutMs=0"), &set);
    for (id, qps) in [(1, 100.0), (2, 100.0), (3, 300.0)] {
        b.report_load(id, load(qps, 0.0, 1.0), NOW).unwrap();
    }
    b.select(0, b"", NOW).unwrap();
    let draws = 20_000;
    let mut c = BTreeMap::new();
    for _ in 0..draws {
        let id = b.select_among(0, b"", &[], &[1], NOW).unwrap();
        b.report(0, id, 1000, Outcome::Success, NOW).unwrap();
        *c.entry(id).or_insert(0usize) += 1;
    }
    assert_eq!(c.get(&1), None);
    assert_binomial(c[&3], draws, 0.75, 5.0, "invoker 3 of 2 and 3");
}

#[test]
fn reports_follow_an_invoker_through_updates_and_are_forgotten_when_it_leaves() {
    let set: Vec<Invoker> = (1..=3).map(provider).collect();
    let b = lb(&format!("{CONFIG}&orca.blackoutMs=5000"), &set);
    let reports = [
        (1, load(100.0, 0.0, 1.0)),
        (2, load(200.0, 0.0, 1.0)),
        (3, load(300.0, 0.0, 1.0)),
    ];
    report_every_second(&b, &reports, NOW, NOW + 6 * SECOND);
    // A new invoker joins and another's weight is reconfigured: the reports stay.
    let mut bigger = set.clone();
    bigger.push(provider(4));
    bigger[0] = provider(1).weight(100);
    b.update(&bigger).unwrap();
    assert_eq!(field(&b, NOW + 6 * SECOND, 3, "orca_weight"), 300.0);
    let c = deal(&b, 8000, NOW + 7 * SECOND);
    assert_dealt(&c, &[(1, 100.0), (2, 200.0), (3, 300.0), (4, 200.0)], 8000);
    // Invoker 3 leaves and returns: it starts without a weight, and a new blackout.
    let without: Vec<Invoker> = bigger.iter().filter(|i| i.id != 3).cloned().collect();
    b.update(&without).unwrap();
    b.update(&bigger).unwrap();
    assert_eq!(
        field(&b, NOW + 7 * SECOND, 3, "orca_weight"),
        serde_json::Value::Null
    );
    b.report_load(3, load(300.0, 0.0, 1.0), NOW + 7 * SECOND)
        .unwrap();
    assert_eq!(field(&b, NOW + 8 * SECOND, 3, "orca_counted"), false);
    assert_eq!(field(&b, NOW + 12 * SECOND, 3, "orca_counted"), true);
}

#[test]
fn warm_up_scales_the_reported_weight() {
    // Invoker 2 started 150 s ago with a 600 s warm-up: a quarter of its weight (Dubbo's ramp).
    let now_ms = NOW / 1000;
    let set = [
        provider(1),
        provider(2)
            .start_time_ms(now_ms - 150_000)
            .warmup_ms(600_000),
    ];
    let b = lb(&format!("{CONFIG}&orca.blackoutMs=0"), &set);
    b.report_load(1, load(100.0, 0.0, 1.0), NOW).unwrap();
    b.report_load(2, load(100.0, 0.0, 1.0), NOW).unwrap();
    assert_dealt(&deal(&b, 5000, NOW), &[(1, 4.0), (2, 1.0)], 5000);
}

#[test]
fn every_method_shares_the_providers_weights() {
    let set: Vec<Invoker> = (1..=2).map(provider).collect();
    let b = lb(&format!("{CONFIG}&orca.blackoutMs=0"), &set);
    let (get, put) = (b.method("get").unwrap(), b.method("put").unwrap());
    b.report_load(1, load(100.0, 0.0, 1.0), NOW).unwrap();
    b.report_load(2, load(300.0, 0.0, 1.0), NOW).unwrap();
    for method in [get, put] {
        let c = counts(&b, method, 4000, NOW);
        assert_dealt(&c, &[(1, 1.0), (2, 3.0)], 4000);
    }
}

#[test]
fn concurrent_picks_and_reports_while_the_set_changes() {
    let set: Vec<Invoker> = (1..=6).map(provider).collect();
    let b = std::sync::Arc::new(lb(
        &format!("{CONFIG}&orca.blackoutMs=0&orca.updateMs=1"),
        &set,
    ));
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let pickers: Vec<_> = (0..3)
            .map(|t| {
                let b = &b;
                s.spawn(move || {
                    let mut picks = 0u64;
                    for i in 0..30_000i64 {
                        let now = NOW + i * 1000;
                        // Whole-set picks and failover draws, while other threads' reports
                        // swing the weights and their picks recompute the schedule.
                        let id = if i % 2 == 0 {
                            b.select(0, b"", now).unwrap()
                        } else {
                            let tried = 1 + (i as u64 / 2) % 7;
                            b.select_among(0, b"", &[], &[tried], now).unwrap()
                        };
                        assert!((1..=7).contains(&id), "picked {id}");
                        let utilization = if (i + t) % 3 == 0 { 0.01 } else { 1.0 };
                        b.report_load(id, load(100.0 + id as f64, 0.0, utilization), now)
                            .unwrap();
                        b.report(0, id, 1000, Outcome::Success, now).unwrap();
                        picks += 1;
                    }
                    picks
                })
            })
            .collect();
        let b2 = &b;
        let stop = &stop;
        s.spawn(move || {
            let mut round = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let mut now_set: Vec<Invoker> = (1..=6).map(provider).collect();
                if round % 2 == 1 {
                    now_set.retain(|i| i.id != 3);
                    now_set.push(provider(7));
                }
                b2.update(&now_set).unwrap();
                round += 1;
            }
        });
        // The updater stops even when a picker failed, so that the failure is reported.
        let results: Vec<_> = pickers.into_iter().map(|h| h.join()).collect();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let total: u64 = results
            .into_iter()
            .map(|r| r.expect("a picker panicked"))
            .sum();
        assert_eq!(total, 90_000);
    });
}

/// A plain select takes the balancer's short path; a select that excludes an id not in the set
/// goes through the strategy's own `select`. Both deal the same schedule, including across a
/// recomputation (a report that starts counting mid-sequence) and a warm-up ramp.
#[test]
fn the_short_path_and_the_strategy_deal_the_same_sequence() {
    let mut set: Vec<Invoker> = (1..=4).map(provider).collect();
    // Invoker 4 started a second ago with a 10 s warm-up: its weight ramps during the run.
    set[3] = provider(4)
        .start_time_ms(NOW / 1000 - 1000)
        .warmup_ms(10_000);
    let config = format!("{CONFIG}&orca.blackoutMs=2000&orca.updateMs=500");
    let (short, general) = (lb(&config, &set), lb(&config, &set));
    for b in [&short, &general] {
        b.report_load(1, load(100.0, 0.0, 0.5), NOW).unwrap();
        b.report_load(2, load(100.0, 0.0, 0.25), NOW).unwrap();
        b.report_load(3, load(100.0, 20.0, 0.5), NOW + SECOND)
            .unwrap();
    }
    let mut seen = BTreeMap::new();
    for step in 0..4000i64 {
        let now = NOW + step * 1000;
        let a = short.select(0, b"", now).unwrap();
        let b = general.select_among(0, b"", &[], &[999], now).unwrap();
        assert_eq!(a, b, "pick {step} at {now}");
        short.report(0, a, 1000, Outcome::Success, now).unwrap();
        general.report(0, b, 1000, Outcome::Success, now).unwrap();
        *seen.entry(a).or_insert(0) += 1;
    }
    assert_eq!(seen.len(), 4, "every invoker dealt some calls: {seen:?}");
}

/// The contract every binding asserts too: the stride schedule is deterministic (no random
/// draw), so one balancer's sequence is the same in every language.
#[test]
fn the_cross_language_sequence() {
    let set: Vec<Invoker> = (1..=4).map(provider).collect();
    let b = lb("loadbalance=orca&orca.blackoutMs=0", &set);
    b.report_load(1, load(100.0, 0.0, 0.5), NOW).unwrap();
    b.report_load(2, load(100.0, 0.0, 0.25), NOW).unwrap();
    b.report_load(3, load(100.0, 50.0, 0.5), NOW).unwrap();
    // Capacities 200, 400 and 100 (half of 3's calls fail); 4 has no report: the mean, 233.3.
    let picks: Vec<u64> = (0..12).map(|_| b.select(0, b"", NOW).unwrap()).collect();
    assert_eq!(picks, [2, 4, 1, 2, 4, 2, 1, 2, 3, 4, 2, 1]);
    let mut c = deal(&b, 1188, NOW);
    for id in picks {
        *c.get_mut(&id).unwrap() += 1;
    }
    assert_eq!(c, BTreeMap::from([(1, 257), (2, 515), (3, 128), (4, 300)]));
    assert_dealt(
        &c,
        &[(1, 200.0), (2, 400.0), (3, 100.0), (4, 700.0 / 3.0)],
        1200,
    );
}

#[test]
fn a_weight_that_starts_or_stops_counting_changes_the_schedule_at_once() {
    let set: Vec<Invoker> = (1..=2).map(provider).collect();
    // A period of a minute: only the start and the lapse of weights can change the schedule.
    let b = lb(
        &format!("{CONFIG}&orca.blackoutMs=2000&orca.expirationMs=5000&orca.updateMs=60000"),
        &set,
    );
    b.report_load(1, load(100.0, 0.0, 1.0), NOW).unwrap();
    b.report_load(2, load(300.0, 0.0, 1.0), NOW).unwrap();
    assert_dealt(&deal(&b, 1000, NOW), &[(1, 1.0), (2, 1.0)], 1000);
    // The blackout ends 2 s in: the weights deal from then on, 58 s before the period ends.
    assert_dealt(
        &deal(&b, 1000, NOW + 1_999_000),
        &[(1, 1.0), (2, 1.0)],
        1000,
    );
    assert_dealt(
        &deal(&b, 4000, NOW + 2 * SECOND),
        &[(1, 1.0), (2, 3.0)],
        4000,
    );
    // No report for 5 s: both lapse, and the configured weights deal again at once.
    assert_dealt(
        &deal(&b, 4000, NOW + 4 * SECOND),
        &[(1, 1.0), (2, 3.0)],
        4000,
    );
    assert_dealt(
        &deal(&b, 1000, NOW + 5 * SECOND),
        &[(1, 1.0), (2, 1.0)],
        1000,
    );
    // A weight that changes within a run waits for the period, as in gRPC.
    let later = NOW + 10 * SECOND;
    report_every_second(
        &b,
        &[(1, load(100.0, 0.0, 1.0)), (2, load(300.0, 0.0, 1.0))],
        later,
        later + 2 * SECOND,
    );
    assert_dealt(
        &deal(&b, 4000, later + 2 * SECOND),
        &[(1, 1.0), (2, 3.0)],
        4000,
    );
    b.report_load(2, load(100.0, 0.0, 1.0), later + 3 * SECOND)
        .unwrap();
    assert_dealt(
        &deal(&b, 4000, later + 3 * SECOND),
        &[(1, 1.0), (2, 3.0)],
        4000,
    );
}

#[test]
fn an_invoker_that_joins_at_a_recomputation_starts_its_warm_up_ramp() {
    let set: Vec<Invoker> = (1..=2).map(provider).collect();
    let b = lb(&format!("{CONFIG}&orca.blackoutMs=0"), &set);
    b.report_load(1, load(100.0, 0.0, 1.0), NOW).unwrap();
    b.report_load(2, load(100.0, 0.0, 1.0), NOW).unwrap();
    deal(&b, 10, NOW);
    // Invoker 3 starts now with a 600 s warm-up; its first millisecond gives weight 1 of 100
    // (Dubbo's getWeight gives the full weight at an uptime of exactly 0, which a schedule
    // computed at that instant would keep for a whole period).
    let mut bigger = set.clone();
    bigger.push(provider(3).start_time_ms(NOW / 1000).warmup_ms(600_000));
    b.update(&bigger).unwrap();
    let c = deal(&b, 20_100, NOW);
    assert_dealt(&c, &[(1, 100.0), (2, 100.0), (3, 1.0)], 20_100);
}

#[test]
fn an_invoker_without_a_weight_takes_the_mean_in_proportion_to_its_configured_weight() {
    // A canary configured at 1 beside three at 99, its reports not counted yet (it joined
    // later): it keeps its 1 % of the reported capacity per unit of weight, not a full share.
    let set = [
        provider(1).weight(99),
        provider(2).weight(99),
        provider(3).weight(99),
        provider(4).weight(1),
    ];
    let b = lb(&format!("{CONFIG}&orca.blackoutMs=10000"), &set);
    let reports = [
        (1, load(100.0, 0.0, 0.5)),
        (2, load(100.0, 0.0, 0.5)),
        (3, load(100.0, 0.0, 0.25)),
    ];
    report_every_second(&b, &reports, NOW, NOW + 10 * SECOND);
    b.report_load(4, load(10.0, 0.0, 0.1), NOW + 10 * SECOND)
        .unwrap();
    // Counted: 200, 200, 400 over 297 units of configured weight; the canary's 1 unit: 800/297.
    let c = deal(&b, 30_000, NOW + 10 * SECOND);
    let canary = 800.0 / 297.0;
    assert_dealt(
        &c,
        &[(1, 200.0), (2, 200.0), (3, 400.0), (4, canary)],
        30_000,
    );
    // Ten seconds on, its own report counts: 100, in full.
    report_every_second(&b, &reports, NOW + 11 * SECOND, NOW + 20 * SECOND);
    b.report_load(4, load(10.0, 0.0, 0.1), NOW + 20 * SECOND)
        .unwrap();
    let c = deal(&b, 9000, NOW + 20 * SECOND);
    assert_dealt(&c, &[(1, 200.0), (2, 200.0), (3, 400.0), (4, 100.0)], 9000);
}

/// A reconnect (`report_reconnect`: gRPC's subchannel READY again) restarts the invoker's run of
/// reports, as gRFC A58 does: its weight stops counting at once (the next pick recomputes), and
/// counts again `orca.blackoutMs` after its next report, not before.
#[test]
fn a_reconnect_restarts_the_blackout() {
    let set: Vec<Invoker> = (1..=3).map(provider).collect();
    // A long period: the schedule must change at the reconnect, not at the period's end.
    let b = lb(
        &format!("{CONFIG}&orca.blackoutMs=10000&orca.updateMs=60000"),
        &set,
    );
    let reports = [
        (1, load(100.0, 0.0, 1.0)),
        (2, load(100.0, 0.0, 1.0)),
        (3, load(300.0, 0.0, 1.0)),
    ];
    report_every_second(&b, &reports, NOW, NOW + 11 * SECOND);
    let t = NOW + 11 * SECOND;
    assert_dealt(&deal(&b, 5000, t), &[(1, 1.0), (2, 1.0), (3, 3.0)], 5000);
    assert_eq!(field(&b, t, 3, "orca_counted"), true);

    b.report_reconnect(3, t).unwrap();
    // At once: 3 has no counted weight and takes the mean of the others (100).
    assert_eq!(field(&b, t, 3, "orca_counted"), false);
    assert_eq!(
        field(&b, t, 3, "orca_weight"),
        300.0,
        "the last report stays in the stats"
    );
    assert_dealt(&deal(&b, 3000, t), &[(1, 1.0), (2, 1.0), (3, 1.0)], 3000);

    // Reports resume after the reconnect: the first starts a new 10 s blackout.
    let back = t + SECOND;
    report_every_second(&b, &reports, back, back + 9 * SECOND);
    assert_eq!(field(&b, back + 9_900_000, 3, "orca_counted"), false);
    assert_dealt(
        &deal(&b, 3000, back + 9_900_000),
        &[(1, 1.0), (2, 1.0), (3, 1.0)],
        3000,
    );
    // 10 s after that first report, without waiting for the period's end.
    assert_eq!(field(&b, back + 10 * SECOND, 3, "orca_counted"), true);
    assert_dealt(
        &deal(&b, 5000, back + 10 * SECOND),
        &[(1, 1.0), (2, 1.0), (3, 3.0)],
        5000,
    );
    // A second reconnect before any report, then the library's clock: harmless, and repeated.
    b.report_reconnect(3, 0).unwrap();
    b.report_reconnect(3, 0).unwrap();
    assert_eq!(field(&b, back + 10 * SECOND, 3, "orca_counted"), false);
}

/// The reconnect of an invoker not in the set (never there, or gone) is accepted and ignored,
/// and touches no other invoker's weight; after an invoker leaves and returns it starts without
/// a weight anyway.
#[test]
fn a_reconnect_of_an_unknown_invoker_is_accepted_and_ignored() {
    let set: Vec<Invoker> = (1..=2).map(provider).collect();
    let b = lb(&format!("{CONFIG}&orca.blackoutMs=1000"), &set);
    let reports = [(1, load(100.0, 0.0, 1.0)), (2, load(300.0, 0.0, 1.0))];
    report_every_second(&b, &reports, NOW, NOW + 2 * SECOND);
    let t = NOW + 2 * SECOND;
    for id in [0, 3, 999, u64::MAX] {
        assert_eq!(b.report_reconnect(id, t), Ok(()), "id {id}");
    }
    assert_eq!(field(&b, t, 1, "orca_counted"), true);
    assert_eq!(field(&b, t, 2, "orca_counted"), true);
    assert_dealt(&deal(&b, 4000, t), &[(1, 1.0), (2, 3.0)], 4000);
    // An empty set too.
    b.update(&[]).unwrap();
    assert_eq!(b.report_reconnect(1, t), Ok(()));
}

/// Other strategies accept a reconnect and ignore it: their picks go on as before.
#[test]
fn other_strategies_ignore_a_reconnect() {
    let set: Vec<Invoker> = (1..=3)
        .map(|i| provider(i).weight(100 * i as i32))
        .collect();
    for kind in polylb::StrategyKind::ALL {
        if *kind == polylb::StrategyKind::Orca {
            continue;
        }
        let strategy = kind.name();
        // Seeded where the strategy draws at random (a seed is refused where it would do nothing).
        let seeded = format!("loadbalance={strategy}&seed=7");
        let config = if Balancer::new(&seeded).is_ok() {
            seeded
        } else {
            format!("loadbalance={strategy}")
        };
        let (a, b) = (lb(&config, &set), lb(&config, &set));
        for i in 0..200 {
            let now = NOW + i * 1000;
            if i % 10 == 0 {
                for id in 1..=3 {
                    assert_eq!(b.report_reconnect(id, now), Ok(()), "{strategy}");
                }
            }
            let key = format!("k{i}");
            let x = a.select(0, key.as_bytes(), now).unwrap();
            let y = b.select(0, key.as_bytes(), now).unwrap();
            assert_eq!(x, y, "{strategy}: pick {i} after reconnects");
            a.report(0, x, 1000 + i * 10, Outcome::Success, now)
                .unwrap();
            b.report(0, y, 1000 + i * 10, Outcome::Success, now)
                .unwrap();
        }
    }
}
