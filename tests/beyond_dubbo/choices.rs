//! Choices, slow pairs, full scans.

use crate::common::*;
use crate::helpers::*;
use polylb::{Invoker, Outcome};

#[test]
fn p2c_more_choices_avoid_a_loaded_pair() {
    // Invokers 1 and 2 hold 20 calls each: best-of-2 still picks them when it draws that pair
    // (1 in 6); comparing all four never does.
    for (choices, expected) in [("2", 1.0 / 6.0), ("4", 0.0), ("0", 0.0)] {
        let b = lb(
            &format!("loadbalance=p2c&seed=7&p2c.choices={choices}"),
            &(1..=4).map(provider).collect::<Vec<_>>(),
        );
        for id in [1, 2] {
            for _ in 0..20 {
                b.select_among(0, b"", &[id], &[], NOW).unwrap();
            }
        }
        let draws = 30_000;
        let c = counts(&b, 0, draws, NOW);
        let slow = c.get(&1).copied().unwrap_or(0) + c.get(&2).copied().unwrap_or(0);
        if expected == 0.0 {
            assert_eq!(slow, 0, "choices={choices}");
        } else {
            assert_binomial(slow, draws, expected, 5.0, "best of 2, slow pair");
        }
    }
}

#[test]
fn full_scans_draw_ties_among_the_least_loaded_by_weight_not_by_set_order() {
    // Invoker 1 holds a call; the others are idle. A full scan keeps the first candidate (drawn
    // by weight) when it is idle; when it is invoker 1, any idle invoker is less loaded, and the
    // one taken must again be drawn by weight, not be the first idle one in set order: with
    // many consumers, each holding a call or two, a set-order choice sends the invoker after a
    // busy one a double share. Expected: each idle invoker's share of the idle weight.
    let draws = 30_000;
    for (spec, weights) in [
        ("loadbalance=p2c&p2c.choices=0&seed=31", [10, 10, 10, 10]),
        ("loadbalance=p2c&p2c.choices=4&seed=32", [10, 10, 10, 10]),
        ("loadbalance=p2c&p2c.choices=0&seed=33", [10, 10, 20, 10]),
        (
            "loadbalance=peakewma&peakewma.choices=0&seed=34",
            [10, 10, 10, 10],
        ),
        (
            "loadbalance=peakewma&peakewma.choices=0&seed=35",
            [10, 10, 20, 10],
        ),
    ] {
        let invokers: Vec<Invoker> = (1..=4u64)
            .map(|id| provider(id).weight(weights[id as usize - 1]))
            .collect();
        let b = lb(spec, &invokers);
        // Equal latencies everywhere (peakewma): load and weight decide.
        for id in 1..=4 {
            b.select_among(0, b"", &[id], &[], NOW).unwrap();
            b.report(0, id, 1000, Outcome::Success, NOW).unwrap();
        }
        b.select_among(0, b"", &[1], &[], NOW).unwrap();
        let c = counts(&b, 0, draws, NOW);
        assert_eq!(c.get(&1), None, "{spec}: the busy invoker was picked");
        let idle: i32 = weights[1..].iter().sum();
        for id in 2..=4u64 {
            let p = weights[id as usize - 1] as f64 / idle as f64;
            assert_binomial(c[&id], draws, p, 5.0, &format!("{spec}: id {id}"));
        }
    }
}

#[test]
fn peakewma_escalates_past_a_slow_pair() {
    // Two slow invokers of four (10 ms vs 1 ms). Textbook best-of-2 sends them at least the
    // slow pair's 1/6; peakewma looks further when the best of its pair looks slow.
    let invokers: Vec<Invoker> = (1..=4).map(provider).collect();
    let mut w = World::new("loadbalance=peakewma", 1, &invokers);
    let mut log = Vec::new();
    w.run(
        20_000_000,
        2_000,
        |id, t| {
            let base = if id <= 2 { 10_000 } else { 1_000 };
            (jitter(base, t, id), Outcome::Success)
        },
        &mut log,
    );
    let slow = share(&log, 1, 2_000_000, 20_000_000) + share(&log, 2, 2_000_000, 20_000_000);
    assert!(
        slow < 0.03,
        "slow pair's share {slow:.4} (textbook best-of-2: >= 0.167)"
    );
}
