//! Effective weight with Dubbo's warm-up (AbstractLoadBalance.getWeight), bit for bit.

/// Dubbo's `calculateWarmupWeight`: single-precision maths, truncated, clamped to `[1, weight]`.
/// The float32 rounding is deliberate: w=14, warmup=600000, uptime=300000 gives 6, not 7.
pub fn warmup_weight(uptime_ms: i64, warmup_ms: i32, weight: i32) -> i32 {
    let ww = (uptime_ms as f32 / (warmup_ms as f32 / weight as f32)) as i32;
    if ww < 1 {
        1
    } else {
        ww.min(weight)
    }
}

/// Dubbo's `getWeight` for a provider URL: the configured weight, reduced during warm-up.
/// Uptime is 64-bit (a start time older than 2^31 ms must give the full weight); a start time
/// in the future (clock skew) gives 1; uptime 0 or a non-positive warm-up keeps the full weight.
pub fn effective_weight(weight: i32, start_time_ms: i64, warmup_ms: i32, now_ms: i64) -> i32 {
    if weight > 0 && start_time_ms > 0 {
        let uptime = now_ms.wrapping_sub(start_time_ms);
        if uptime < 0 {
            return 1;
        }
        if uptime > 0 && uptime < warmup_ms as i64 {
            return warmup_weight(uptime, warmup_ms, weight).max(0);
        }
    }
    weight.max(0)
}

/// The first instant (Unix ms) from which `effective_weight` no longer depends on time, or
/// `i64::MIN` when it never does. Lets the hot path skip the clock once every provider is warm.
pub fn time_dependent_until(weight: i32, start_time_ms: i64, warmup_ms: i32) -> i64 {
    if weight > 0 && start_time_ms > 0 {
        start_time_ms.saturating_add(warmup_ms.max(0) as i64)
    } else {
        i64::MIN
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dubbo_reference_points_at_default_warmup() {
        let cases = [
            (13, 1),
            (6000, 1),
            (12000, 2),
            (60000, 10),
            (300000, 50),
            (305999, 50),
            (306000, 51),
            (540000, 90),
            (588000, 98),
            (594000, 99),
        ];
        for (uptime, expected) in cases {
            let now = 1_700_000_000_000;
            assert_eq!(
                effective_weight(100, now - uptime, 600_000, now),
                expected,
                "uptime {uptime}"
            );
        }
        assert_eq!(warmup_weight(0, 600_000, 100), 1);
        assert_eq!(warmup_weight(300_000, 600_000, 14), 6);
        assert_eq!(warmup_weight(537_931, 600_000, 29), 26);
    }

    #[test]
    fn edges() {
        let now = 1_700_000_000_000i64;
        assert_eq!(
            effective_weight(100, now, 600_000, now),
            100,
            "uptime 0 keeps full weight"
        );
        assert_eq!(
            effective_weight(100, now + 1, 600_000, now),
            1,
            "clock skew gives 1"
        );
        assert_eq!(
            effective_weight(100, 1, 600_000, now),
            100,
            "uptime above 2^31 ms"
        );
        assert_eq!(effective_weight(100, now - 5, 0, now), 100, "no warm-up");
        assert_eq!(effective_weight(0, now - 5, 600_000, now), 0);
        assert_eq!(effective_weight(-3, now - 5, 600_000, now), 0);
        assert_eq!(effective_weight(100, 0, 600_000, now), 100, "unknown start");
        assert_eq!(
            effective_weight(i32::MAX, now - 1_200_000, 600_000, now),
            i32::MAX
        );
    }

    /// Dubbo's order of checks (spec §1): weight ≤ 0 first (no warm-up, not even clock skew's
    /// 1), then an unknown start, then skew (whatever the warm-up, even none), then
    /// 0 < uptime < warmup.
    #[test]
    fn order_of_dubbos_checks() {
        let now = 1_700_000_000_000i64;
        assert_eq!(
            effective_weight(0, now + 60_000, 600_000, now),
            0,
            "skew, weight 0"
        );
        assert_eq!(
            effective_weight(-1, now + 1, 600_000, now),
            0,
            "skew, weight < 0"
        );
        assert_eq!(
            effective_weight(100, now + 1, 0, now),
            1,
            "skew, no warm-up"
        );
        assert_eq!(
            effective_weight(100, now + 1, -7, now),
            1,
            "skew, negative warm-up"
        );
        assert_eq!(
            effective_weight(100, -5, 600_000, now),
            100,
            "negative start: unknown"
        );
        assert_eq!(
            effective_weight(100, now - 5, -7, now),
            100,
            "negative warm-up: none"
        );
        assert_eq!(effective_weight(100, now - 599_999, 600_000, now), 99);
        assert_eq!(effective_weight(100, now - 600_000, 600_000, now), 100);
        assert_eq!(effective_weight(7, now - 1, 1, now), 7, "uptime = warmup");
        // Uptime above i32::MAX (about 24.8 days) must not wrap, even with a longer warm-up
        // than any uptime that would fit.
        let long_ago = now - (i32::MAX as i64 + 1_000);
        assert_eq!(effective_weight(100, long_ago, i32::MAX, now), 100);
        assert_eq!(
            effective_weight(100, now - (i32::MAX as i64 / 2), i32::MAX, now),
            50
        );
        // float32: 2^31 - 2 rounds to 2^31, so one ms before the end of the longest warm-up
        // already weighs in full.
        assert_eq!(
            effective_weight(100, now - (i32::MAX as i64 - 1), i32::MAX, now),
            100
        );
        assert_eq!(
            time_dependent_until(100, now + 10, -1),
            now + 10,
            "skewed with no warm-up: 1 until the start time"
        );
        assert_eq!(time_dependent_until(0, now + 10, 600_000), i64::MIN);
    }
}
