//! Numbers in the stats JSON.

/// A number as JSON, written so that any parser reads it back: in exponent form when very
/// large or small (Rust's plain form of 1e308 has 309 digits, which some parsers, serde_json
/// among them, refuse as out of range). JSON has no infinity: a load or weight that overflowed (a
/// provider reporting a CPU load near f64::MAX) shows as the largest finite number, not as 0,
/// which would read as the lowest. No input makes a NaN (metrics are checked finite).
pub(crate) fn json_f64(v: f64) -> String {
    let v = if v.is_nan() {
        0.0
    } else {
        v.clamp(-f64::MAX, f64::MAX)
    };
    if v != 0.0 && !(1e-5..1e15).contains(&v.abs()) {
        format!("{v:e}")
    } else {
        format!("{v}")
    }
}

#[cfg(test)]
mod tests {
    use super::json_f64;

    /// Every load and metric the stats show is read back as the same number by a JSON parser,
    /// an overflowed load as the largest number, not as 0 (the lowest load).
    #[test]
    fn stats_numbers_read_back_as_written() {
        for v in [
            0.0,
            0.5,
            16.319292019556375,
            1e15,
            3e-6,
            5e-324,
            f64::MAX,
            1e300,
        ] {
            let text = json_f64(v);
            let back: f64 = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(back, v, "{text}");
        }
        let overflowed: f64 = serde_json::from_str(&json_f64(f64::INFINITY)).unwrap();
        assert_eq!(overflowed, f64::MAX);
        assert_eq!(json_f64(0.5), "0.5");
    }
}
