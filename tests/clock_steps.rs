//! Clocks that step back: what the state stamped before the step may not do after it.

use polylb::{Balancer, Invoker, Outcome};

const NOW: i64 = 1_700_000_000_000_000;
const S: i64 = 1_000_000;

fn provider(id: u64) -> Invoker {
    Invoker::new(id, format!("10.0.0.{id}:20880"))
}

fn field(json: &str, id: u64, key: &str) -> String {
    let start = json.find(&format!("\"id\":{id},")).expect("id in stats");
    let rest = &json[start..];
    let k = rest.find(&format!("\"{key}\":")).expect("key") + key.len() + 3;
    rest[k..].split([',', '}']).next().unwrap().to_string()
}

/// Ejection length (ms) of invoker 1 after a failure at `t`.
fn eject_once(b: &Balancer, t: i64) -> i64 {
    b.report(0, 1, 1000, Outcome::Failure, t).unwrap();
    let json = b.stats_json(t);
    let until: i64 = field(&json, 1, "ejected_until_ms").parse().unwrap();
    assert!(until > 0, "{json}");
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
