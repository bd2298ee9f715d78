//! How numbers read in every output: latencies, error rates, ratios, percentages.

pub fn fmt_ms(us: f64) -> String {
    if us.is_nan() {
        return "-".into();
    }
    let ms = us / 1000.0;
    if ms < 10.0 {
        format!("{ms:.2}ms")
    } else if ms < 100.0 {
        format!("{ms:.1}ms")
    } else if ms < 1000.0 {
        format!("{ms:.0}ms")
    } else {
        format!("{:.2}s", ms / 1000.0)
    }
}

pub fn fmt_err(e: f64) -> String {
    if e == 0.0 {
        return "-".into();
    }
    let mut decimals = match e {
        e if e < 0.0001 => 4,
        e if e < 0.01 => 3,
        _ => 1,
    };
    // A rate above a goal's bound (0.01 % for scenario 4, 1 % past which a latency goal is not
    // judged) that would round onto it takes more decimals: 1.04 % reads 1.04%, not 1.0%,
    // beside a count that says it missed, as `fmt_ratio_against` does for ratios.
    for bound in [0.0001, 0.01] {
        while e > bound && decimals < 6 && round_to(e * 100.0, decimals) <= bound * 100.0 {
            decimals += 1;
        }
    }
    format!("{:.*}%", decimals, e * 100.0)
}

fn round_to(x: f64, decimals: usize) -> f64 {
    format!("{x:.decimals$}").parse().unwrap_or(x)
}

pub(super) fn fmt_ratio(r: f64) -> String {
    if r.is_nan() {
        "".into()
    } else if r < 10.0 {
        format!("{r:.2}x")
    } else {
        format!("{r:.0}x")
    }
}

/// A ratio to the better oracle in a scenario whose goal is `bound` × it: as `fmt_ratio`, but
/// with three decimals where two would round a miss onto the bound (1.2539 reads 1.254x, not
/// 1.25x, beside a goal of ≤ 1.25× that it misses), so the cells agree with the goal counts.
pub(super) fn fmt_ratio_against(r: f64, bound: Option<f64>) -> String {
    match bound {
        Some(b) if r > b && (r * 100.0).round() / 100.0 <= b => format!("{r:.3}x"),
        _ => fmt_ratio(r),
    }
}

/// A load as a percentage, to two decimals at most (70, 70.4): the label of its columns,
/// sections and files, so `--loads` must hold no two that read the same (main checks).
pub fn load_pct(load: f64) -> String {
    let s = format!("{:.2}", (load * 10_000.0).round() / 100.0);
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

pub(super) fn pct(x: f64) -> String {
    format!("{}", (x * 100.0).round())
}

#[cfg(test)]
mod tests {
    use super::fmt_err;

    #[test]
    fn an_error_rate_above_a_goals_bound_never_reads_as_the_bound() {
        assert_eq!(fmt_err(0.0), "-");
        assert_eq!(fmt_err(0.00005), "0.0050%");
        assert_eq!(fmt_err(0.0001), "0.010%");
        assert_eq!(fmt_err(0.000_100_4), "0.01004%");
        assert_eq!(fmt_err(0.0025), "0.250%");
        assert_eq!(fmt_err(0.01), "1.0%");
        assert_eq!(fmt_err(0.0104), "1.04%");
        assert_eq!(fmt_err(0.010_004), "1.0004%");
        assert_eq!(fmt_err(0.0106), "1.1%");
        assert_eq!(fmt_err(0.25), "25.0%");
    }
}
