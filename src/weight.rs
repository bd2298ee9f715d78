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
}
