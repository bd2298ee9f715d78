//! Weighted distribution.

use crate::common::*;
use crate::helpers::*;
use polylb::{Invoker, Outcome};
use std::collections::BTreeMap;

#[test]
fn p2c_gives_a_99_to_1_idle_pair_its_weights() {
    let b = lb(
        "loadbalance=p2c&seed=1",
        &[provider(1).weight(99), provider(2).weight(1)],
    );
    let draws = 100_000;
    let c = counts(&b, 0, draws, NOW);
    assert_binomial(c[&1], draws, 0.99, 5.0, "weight 99");
    // Many invokers, skewed and zero weights, idle: exactly the weights.
    let b = lb(
        "loadbalance=p2c&seed=2",
        &[
            provider(1).weight(600),
            provider(2).weight(0),
            provider(3).weight(300),
            provider(4).weight(60),
            provider(5).weight(40),
        ],
    );
    let c = counts(&b, 0, draws, NOW);
    assert_eq!(c.get(&2), None, "a zero weight was picked");
    for (id, w) in [(1, 600.0), (3, 300.0), (4, 60.0), (5, 40.0)] {
        assert_binomial(c[&id], draws, w / 1000.0, 5.0, &format!("p2c id {id}"));
    }
}

#[test]
fn new_strategies_follow_weights_when_idle() {
    // Idle, equal (or no) latency: every new strategy spreads by weight. boundedhash spreads
    // distinct keys by its ring (weights do not place points, as in Dubbo), so it is checked
    // with equal weights only.
    for name in ["p2c", "peakewma"] {
        let b = lb(
            &format!("loadbalance={name}&seed=3&{name}.choices=3"),
            &[
                provider(1).weight(50),
                provider(2).weight(30),
                provider(3).weight(20),
            ],
        );
        let draws = 60_000;
        let c = counts(&b, 0, draws, NOW);
        for (id, p) in [(1, 0.5), (2, 0.3), (3, 0.2)] {
            assert_binomial(c[&id], draws, p, 5.0, &format!("{name} id {id}"));
        }
    }
    let b = lb(
        "loadbalance=boundedhash",
        &(1..=4).map(provider).collect::<Vec<_>>(),
    );
    let mut c = BTreeMap::new();
    for k in 0..20_000u32 {
        let id = b.select(0, &k.to_le_bytes(), NOW).unwrap();
        b.report(0, id, 1000, Outcome::Success, NOW).unwrap();
        *c.entry(id).or_insert(0usize) += 1;
    }
    for id in 1..=4 {
        // 160 virtual nodes: shares within about ±25 % of even.
        assert!(
            c[&id] > 3_500 && c[&id] < 6_500,
            "boundedhash id {id}: {}",
            c[&id]
        );
    }
}

#[test]
fn full_scans_skip_zero_weights_and_spread_all_zero_sets_evenly() {
    // `choices=0` looks at every invoker; idle with equal latency, the first (drawn by weight)
    // is kept, so the weights decide: a zero weight never, unless all weigh 0 (then uniform,
    // Dubbo's rule).
    let draws = 40_000;
    for options in [
        "peakewma.choices=0",
        "peakewma.choices=0&peakewma.preferenceMs=1000",
    ] {
        let b = lb(
            &format!("loadbalance=peakewma&seed=9&{options}"),
            &[
                provider(1).weight(60),
                provider(2).weight(0),
                provider(3).weight(30),
                provider(4).weight(10),
            ],
        );
        let c = counts(&b, 0, draws, NOW);
        assert_eq!(c.get(&2), None, "{options}: a zero weight was picked");
        if !options.contains("preference") {
            for (id, p) in [(1, 0.6), (3, 0.3), (4, 0.1)] {
                assert_binomial(c[&id], draws, p, 5.0, &format!("{options}: id {id}"));
            }
        }
        let b = lb(
            &format!("loadbalance=peakewma&seed=10&{options}"),
            &(1..=4).map(|id| provider(id).weight(0)).collect::<Vec<_>>(),
        );
        let c = counts(&b, 0, draws, NOW);
        if options.contains("preference") {
            // One preferred invoker per period, all of them weighing the same (1).
            assert_eq!(c.len(), 1, "{options}: {c:?}");
        } else {
            for id in 1..=4 {
                assert_binomial(c[&id], draws, 0.25, 5.0, &format!("all zero: id {id}"));
            }
        }
    }
}

#[test]
fn p2c_in_flight_settles_in_proportion_to_weight() {
    let b = lb(
        "loadbalance=p2c&seed=4",
        &[provider(1).weight(300), provider(2).weight(100)],
    );
    // With 40 calls in flight, "less loaded after this call relative to weight" holds the pair
    // at its balance point, 30 calls at 1 and 10 at 2: a pick that would leave 1 with 31 (31/300
    // > 10/100) or 2 with 11 goes the other way, so after each pick 1 holds 30 ± 1. A strategy
    // that ignores load (a weighted coin: also 3:1 on average) lets 1's count wander as
    // Binomial(40, 3/4), sd 2.7: over 40 000 picks it strays by 8 or more.
    let (c, lo, hi) = closed_loop_tracking(&b, 40, 40_000, 1);
    assert!(
        lo >= 29 && hi <= 31,
        "weight 3:1 under load: in flight at 1 ranged over {lo}..={hi}, not 30 ± 1"
    );
    // The share follows: within 5 binomial sd of 3/4 (a closed loop is tighter still).
    assert_binomial(c[&1], 40_000, 0.75, 5.0, "p2c, weight 3:1 under load");
    // Equal weights under load: in flight stays balanced (ordinary P2C: a small gap; comparing
    // every candidate: at most 1).
    for (choices, gap) in [(2, 3), (0, 1)] {
        let b = lb(
            &format!("loadbalance=p2c&seed=5&p2c.choices={choices}"),
            &(1..=5).map(provider).collect::<Vec<_>>(),
        );
        hold(&b, 0, 53, NOW);
        let a: Vec<i64> = (1..=5).map(|id| active(&b, id)).collect();
        let (lo, hi) = (a.iter().min().unwrap(), a.iter().max().unwrap());
        assert!(
            hi - lo <= gap,
            "choices={choices}: in flight not balanced: {a:?}"
        );
    }
}

#[test]
fn peakewma_under_load_honours_weights_between_equal_latencies() {
    let b = lb(
        "loadbalance=peakewma&seed=6",
        &[provider(1).weight(300), provider(2).weight(100)],
    );
    // Equal latencies: load relative to weight decides (as p2c), so the 40 calls in flight stay
    // at 30 : 10 within one call, which a load-blind weighted coin (3:1 on average too, but
    // with 1's count wandering as Binomial(40, 3/4), sd 2.7) does not.
    let (c, lo, hi) = closed_loop_tracking(&b, 40, 40_000, 1);
    assert!(
        lo >= 29 && hi <= 31,
        "weight 3:1 under load: in flight at 1 ranged over {lo}..={hi}, not 30 ± 1"
    );
    assert_binomial(c[&1], 40_000, 0.75, 5.0, "peakewma, weight 3:1 under load");
}

#[test]
fn peakewma_preference_orders_equal_invokers() {
    let four: Vec<Invoker> = (1..=4).map(provider).collect();
    let spec = "loadbalance=peakewma&peakewma.choices=0&seed=21";
    // Off (the default): one call at a time spreads over equal invokers as drawn.
    let b = lb(spec, &four);
    let c = counts(&b, 0, 4000, NOW);
    for id in 1..=4 {
        assert_binomial(c[&id], 4000, 0.25, 5.0, "without a preference");
    }
    // On: within one period, calls made one at a time all go to this balancer's preferred
    // invoker...
    let b = lb(&format!("{spec}&peakewma.preferenceMs=1000"), &four);
    let c = counts(&b, 0, 400, NOW);
    assert_eq!(c.len(), 1, "one preferred invoker per period: {c:?}");
    let preferred = *c.keys().next().unwrap();
    // ... and calls in flight there spill to the others, one each, before any gets a second.
    let held = hold(&b, 0, 4, NOW);
    let mut distinct = held.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), 4, "{held:?}");
    assert_eq!(held[0], preferred);
    for id in held {
        b.report(0, id, 1000, Outcome::Success, NOW).unwrap();
    }
    // The order is renewed every period: over 400 periods each invoker is preferred about a
    // quarter of the time.
    let mut firsts = BTreeMap::new();
    for period in 1..=400i64 {
        let now = NOW + period * 1_000_000 + 123;
        let id = b.select(0, b"", now).unwrap();
        b.report(0, id, 1000, Outcome::Success, now).unwrap();
        *firsts.entry(id).or_insert(0usize) += 1;
    }
    for id in 1..=4 {
        let n = firsts.get(&id).copied().unwrap_or(0);
        assert_binomial(n, 400, 0.25, 5.0, "preferred per period");
    }
    // Unequal weights keep the weighted draw: an idle 99:1 pair still splits 99:1.
    let b = lb(
        "loadbalance=peakewma&peakewma.choices=0&peakewma.preferenceMs=1000&seed=22",
        &[provider(1).weight(99), provider(2).weight(1)],
    );
    let c = counts(&b, 0, 20_000, NOW);
    assert_binomial(
        c.get(&2).copied().unwrap_or(0),
        20_000,
        0.01,
        5.0,
        "99:1 with a preference",
    );
}

#[test]
fn peakewma_equivalent_latency_is_measured_from_the_fastest() {
    // Estimates 1.0 / 1.2 / 1.45 / 1.75 ms: each within 1.25x of the next, the last 1.75x the
    // first. Comparing every candidate, only 1 and 2 are equivalent to the fastest; all idle,
    // the preference of each period picks between those two. Compared pairwise in set order,
    // chains 1 -> 2 -> 3 -> 4 of "equivalent" replacements reached 3 and 4 (the last positions).
    // With 30 and 100 invokers (the others at 1.9 ms) the scan takes its wider field, then its
    // thread-local buffer; with the graded four last in the set as well, so that a scan that
    // dropped looks past some capacity would miss them.
    for (n, last) in [
        (4u64, false),
        (30, false),
        (30, true),
        (100, false),
        (100, true),
    ] {
        // 1 = the fastest.
        let grade = |id: u64| if last { n + 1 - id } else { id };
        let latency = |id: u64| {
            [1_000, 1_200, 1_450, 1_750]
                .get(grade(id) as usize - 1)
                .copied()
                .unwrap_or(1_900)
        };
        let b = lb(
            "loadbalance=peakewma&peakewma.choices=0&peakewma.preferenceMs=1000&peakewma.decay=100000000&seed=23",
            &(1..=n).map(provider).collect::<Vec<_>>(),
        );
        for id in 1..=n {
            b.report(0, id, latency(id), Outcome::Success, NOW).unwrap();
        }
        let mut picks = BTreeMap::new();
        for period in 1..=400i64 {
            let now = NOW + period * 1_000_000 + 7;
            let id = b.select(0, b"", now).unwrap();
            // The same latency again leaves its estimate where it was.
            b.report(0, id, latency(id), Outcome::Success, now).unwrap();
            *picks.entry(grade(id)).or_insert(0usize) += 1;
        }
        assert_eq!(
            picks.keys().copied().collect::<Vec<_>>(),
            [1, 2],
            "n={n}, graded last: {last}: {picks:?}"
        );
        assert_binomial(picks[&1], 400, 0.5, 5.0, "preferred of the two equivalent");
    }
}

#[test]
fn boundedhash_capacities_follow_weights() {
    let b = lb(
        "loadbalance=boundedhash&boundedhash.factor=1.25",
        &[
            provider(1).weight(300),
            provider(2).weight(100),
            provider(3).weight(100),
        ],
    );
    // 500 distinct keys, nothing reported: each invoker stays within ⌈1.25 × share⌉ (+1 for the
    // pick that brought the total up).
    for k in 0..500u32 {
        b.select(0, &k.to_le_bytes(), NOW).unwrap();
    }
    let mut caps = Vec::new();
    for (id, w) in [(1, 0.6), (2, 0.2), (3, 0.2)] {
        let cap = (1.25f64 * 500.0 * w).ceil() as i64 + 1;
        assert!(active(&b, id) <= cap, "id {id}: {} > {cap}", active(&b, id));
        caps.push(cap);
    }
    // And from below: what the others' capacities cannot hold is the heavy one's (at equal
    // capacities, ⌈1.25 × 500 / 3⌉ = 209, it would hold at most 210 of the 500).
    let floor = 500 - caps[1] - caps[2];
    assert!(
        floor > 210 && active(&b, 1) >= floor,
        "id 1: {} < {floor}",
        active(&b, 1)
    );
}
