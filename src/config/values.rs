//! Reading one value: integers and numbers with errors that name the accepted range, and the
//! nearest known word to a misspelled one.

use crate::error::{Error, Status};

/// The values a numeric key accepts where that is narrower than its type's range, as its
/// errors say it (the descriptions in `KEYS` say it too).
pub(super) fn accepted(key: &str) -> Option<&'static str> {
    const POSITIVE_MS: &str = "1..=9223372036854775807";
    const NON_NEGATIVE_MS: &str = "0..=9223372036854775807";
    Some(match key {
        "hash.nodes" => "4..=65536",
        "timeout" => "1..=2147483647",
        "p2c.choices" | "peakewma.choices" => "0 (every candidate) or 2..=16",
        "peakewma.decay" | "orca.expirationMs" | "orca.updateMs" | "outlier.windowMs" => {
            POSITIVE_MS
        }
        "outlier.baseEjectionMs" | "outlier.maxEjectionMs" => POSITIVE_MS,
        "peakewma.failurePenalty" | "peakewma.preferenceMs" | "orca.blackoutMs" => NON_NEGATIVE_MS,
        "slowstart.windowMs" => NON_NEGATIVE_MS,
        "boundedhash.factor" => "1.0..=100",
        "orca.errorPenalty" => "0..=100",
        "slowstart.aggression" => "0.1..=10",
        "maglev.tableSize" => "a prime in 7..=16777213",
        "zone.minHealthyPercent" | "subset.minHealthyPercent" | "slowstart.minWeightPercent" => {
            "1..=100"
        }
        "outlier.failureRate" | "outlier.maxEjectionPercent" => "0..=100",
        "outlier.minRequests" => "1..=4294967295",
        _ => return None,
    })
}

pub(super) fn bad(key: &str, value: &str, why: &str) -> Error {
    Error::new(
        Status::InvalidConfig,
        format!("config: {key}={} is {why}", quoted(value)),
    )
}

/// Characters of a config's text an error message quotes before it cuts the rest.
const QUOTED_CHARS: usize = 512;

/// The caller's text as an error message quotes it: escaped (NUL or control bytes would cut a
/// C string short) and in single quotes, cut after [`QUOTED_CHARS`] characters with its length
/// said, so that a megabyte of config makes a message of a kilobyte or so.
pub(super) fn quoted(text: &str) -> String {
    let mut chars = text.chars();
    let head: String = chars.by_ref().take(QUOTED_CHARS).collect();
    if chars.next().is_none() {
        format!("'{}'", head.escape_debug())
    } else {
        format!("'{}…' ({} bytes)", head.escape_debug(), text.len())
    }
}

/// An integer key's type, for the range an error message gives.
pub(super) trait ConfigInt: std::str::FromStr {
    const RANGE: (i128, i128);
}

macro_rules! config_int {
    ($($t:ty),*) => {
        $(impl ConfigInt for $t {
            const RANGE: (i128, i128) = (<$t>::MIN as i128, <$t>::MAX as i128);
        })*
    };
}
config_int!(u8, u16, u32, u64, usize, i32, i64);

pub(super) fn int<T: ConfigInt>(key: &str, value: &str) -> Result<T, Error> {
    // "-0" is 0 for every key: Rust parses it for the signed types only, and an unsigned key
    // told that 0 is "not within 0 to ..." reads as a contradiction.
    let zero = value
        .strip_prefix('-')
        .filter(|d| !d.is_empty() && d.bytes().all(|b| b == b'0'));
    zero.unwrap_or(value).parse().map_err(|_| {
        // The key's own range where it narrows its type's.
        let (min, max) = T::RANGE;
        let range = accepted(key).map_or_else(|| format!("{min}..={max}"), str::to_string);
        let digits = value.strip_prefix(['-', '+']).unwrap_or(value);
        let why = if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
            "out of range"
        } else {
            "not an integer"
        };
        bad(key, value, &format!("{why} (accepted: {range})"))
    })
}

pub(super) fn float(key: &str, value: &str) -> Result<f64, Error> {
    value
        .parse::<f64>()
        .ok()
        .filter(|f| f.is_finite())
        .ok_or_else(|| match accepted(key) {
            Some(range) => bad(
                key,
                value,
                &format!("not a finite number (accepted: {range})"),
            ),
            None => bad(key, value, "not a finite number"),
        })
}

/// The candidate closest to `word` by case-insensitive edit distance, if it is close enough to
/// be a plausible typo.
pub(crate) fn nearest<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    let w = word.to_ascii_lowercase();
    let length = w.chars().count();
    candidates
        .iter()
        .filter_map(|c| {
            let limit = (c.chars().count() / 2).max(2);
            // The distance is at least the difference in length, so a word far longer or
            // shorter than a candidate is not compared with it (a megabyte key took a second
            // and a half of edit distances).
            if length.abs_diff(c.chars().count()) > limit {
                return None;
            }
            let distance = edit_distance(&w, &c.to_ascii_lowercase());
            (distance <= limit).then_some((distance, *c))
        })
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}
