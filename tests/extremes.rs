//! Extreme but legal numbers and times, end to end: each test feeds values at the edge of what
//! the API accepts and states the answer, which must also hold in a debug build (overflow
//! checks on: `cargo test --test extremes`).

use polylb::{Balancer, Invoker};

fn provider(id: u64) -> Invoker {
    Invoker::new(id, format!("10.0.0.{id}:20880"))
}

/// adaptive's latency decay counts the timeouts since the provider's last metrics as Java's
/// `long` does, wrapping: a provider clock far ahead of a pick at the earliest time makes
/// that difference exactly `i64::MAX` ms, and with `timeout=1` the count plus one must wrap as
/// Java's does, not overflow (a panic with overflow checks).
#[test]
fn adaptive_decay_count_at_the_largest_difference() {
    let now_us = i64::MIN;
    let now_ms = now_us.div_euclid(1000);
    let provider_ms = now_ms.wrapping_sub(i64::MAX);
    assert!(provider_ms > 0, "a legal provider time: {provider_ms}");
    let b = Balancer::new("loadbalance=adaptive&timeout=1").unwrap();
    b.update(&[provider(1), provider(2)]).unwrap();
    for id in [1, 2] {
        b.report_provider_metrics(0, id, provider_ms, 0.5, 1_000, now_us)
            .unwrap();
    }
    let id = b.select(0, b"", now_us).unwrap();
    assert!(id == 1 || id == 2);
    // Java: (i64::MAX / 1 + 1) wraps to i64::MIN, not a positive count: no decay, no penalty,
    // so both loads stay equal and the stats read the 1 ms latency of the metrics.
    let stats: serde_json::Value = serde_json::from_str(&b.stats_json(now_us)).unwrap();
    for row in stats["invokers"].as_array().unwrap() {
        let m = &row["methods"][0];
        assert_eq!(m["latency_ewma_ms"], 0.5, "{m}");
    }
}
