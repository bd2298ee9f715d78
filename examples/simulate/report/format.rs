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
        "-".into()
    } else if e < 0.0001 {
        format!("{:.4}%", e * 100.0)
    } else if e < 0.01 {
        format!("{:.3}%", e * 100.0)
    } else {
        format!("{:.1}%", e * 100.0)
    }
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
