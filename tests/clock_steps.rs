//! Clocks that step back: what the state stamped before the step may not do after it.

mod common;
use common::{provider, stat, stat_value};
use polylb::{Balancer, Outcome};

const NOW: i64 = 1_700_000_000_000_000;
const S: i64 = 1_000_000;

/// Ejection length (ms) of invoker 1 after a failure at `t`.
fn eject_once(b: &Balancer, t: i64) -> i64 {
    b.report(0, 1, 1000, Outcome::Failure, t).unwrap();
    let until = stat(b, t, 1, "ejected_until_ms");
    assert!(until > 0, "invoker 1 not ejected: {}", b.stats_json(t));
    until - t / 1000
}

/// Quiet picks (successes) from `t` for `span`, every second; returns the end time.
fn quiet(b: &Balancer, mut t: i64, span: i64) -> i64 {
    let end = t + span;
    while t < end {
        t += S;
        let id = b.select(0, b"", t).unwrap();
        b.report(0, id, 1000, Outcome::Success, t).unwrap();
    }
    t
}

/// The back-off multiplier is forgiven one step per base period without an ejection. A
/// clock step back after an ejection was lifted must not stop that forgiveness for as long as
/// the step.
#[test]
fn outlier_backoff_is_forgiven_after_a_step_back() {
    for step in [0, 2 * S, 3600 * S, 30 * 86_400 * S] {
        let b = Balancer::new(
            "loadbalance=random&outlier.consecutiveFailures=1&outlier.maxEjectionPercent=50&seed=1",
        )
        .unwrap();
        b.update(&(1..=4).map(provider).collect::<Vec<_>>())
            .unwrap();
        let mut t = NOW;
        let mut lengths = vec![];
        for _ in 0..4 {
            lengths.push(eject_once(&b, t));
            // Lifted by a pick after 31 s, then the clock steps back (the first round only).
            t = quiet(&b, t, 31 * S);
            if lengths.len() == 1 {
                t -= step;
            }
            // Ten base periods of health: the back-off is back to the base.
            t = quiet(&b, t, 600 * S);
        }
        assert_eq!(lengths, vec![30_000; 4], "step back of {} s", step / S);
    }
}

/// orca: a weight not renewed for `orca.expirationMs` lapses. After the clock stepped back, a
/// provider that stops reporting must not keep its weight for as long as the step.
#[test]
fn orca_weight_lapses_after_a_step_back() {
    use polylb::LoadReport;
    for step in [0, 3600 * S] {
        let b = Balancer::new("loadbalance=orca&seed=1").unwrap();
        b.update(&(1..=3).map(provider).collect::<Vec<_>>())
            .unwrap();
        let report = |id: u64, qps: f64, t: i64| {
            b.report_load(
                id,
                LoadReport {
                    qps,
                    eps: 0.0,
                    utilization: 0.5,
                },
                t,
            )
            .unwrap()
        };
        // Two hours of reports every second: every weight counts, id 1 with 10x the others.
        let mut t = NOW;
        for _ in 0..7200 {
            t += S;
            report(1, 1000.0, t);
            report(2, 100.0, t);
            report(3, 100.0, t);
            b.select(0, b"", t).unwrap();
        }
        // The clock steps back; id 1 stops reporting, the others go on for 10 minutes.
        t -= step;
        for _ in 0..600 {
            t += S;
            report(2, 100.0, t);
            report(3, 100.0, t);
            b.select(0, b"", t).unwrap();
        }
        let json = b.stats_json(t);
        assert_eq!(
            stat_value(&b, t, 1, "orca_counted"),
            false,
            "step back of {} s: id 1 silent for 10 minutes still counts: {json}",
            step / S
        );
        let mut picks = [0u32; 4];
        for _ in 0..3000 {
            t += 1000;
            picks[b.select(0, b"", t).unwrap() as usize] += 1;
        }
        assert!(
            picks[1] < 1500,
            "step back of {} s: picks {picks:?}",
            step / S
        );
    }
}
