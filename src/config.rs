//! Balancer configuration: one string of Dubbo URL parameters, `key=value&key=value`.
//!
//! Parsing is strict. Dubbo silently ignores a misspelled key (`loadBalance=...` does nothing),
//! which is a classic trap; here an unknown key is an error that suggests the nearest valid key.

use crate::error::{Error, Status};
use crate::strategy::StrategyKind;

#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    pub strategy: StrategyKind,
    /// Virtual nodes per invoker on the consistent-hash ring (rounded down to a multiple of 4).
    pub hash_nodes: u32,
    /// Default warm-up in ms for invokers registered with a negative `warmup_ms`.
    pub warmup_ms: i32,
    /// shortestresponse's tumbling window.
    pub slide_period_ms: i64,
    /// adaptive's call timeout: decay unit of its latency estimate, and force-pick after 2x.
    pub timeout_ms: i32,
    /// Fixed seed: makes every random choice reproducible (tests, simulations). Without it each
    /// thread uses its own generator, which avoids a shared atomic on the hot path.
    pub seed: Option<u64>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            strategy: StrategyKind::Random,
            hash_nodes: 160,
            warmup_ms: 600_000,
            slide_period_ms: 30_000,
            timeout_ms: 1000,
            seed: None,
        }
    }
}

type Setter = fn(&mut Config, &str, &str) -> Result<(), Error>;

/// Every accepted key, what it means, and how it is parsed.
const KEYS: &[(&str, &str, Setter)] = &[
    ("loadbalance", "strategy name", |c, k, v| {
        c.strategy = StrategyKind::from_name(v).ok_or_else(|| {
            let names: Vec<&str> = StrategyKind::ALL.iter().map(|s| s.name()).collect();
            let hint = nearest(v, &names)
                .map(|n| format!(" (did you mean '{n}'?)"))
                .unwrap_or_default();
            bad(
                k,
                v,
                &format!("an unknown strategy{hint}; known: {}", names.join(", ")),
            )
        })?;
        Ok(())
    }),
    (
        "hash.nodes",
        "virtual nodes per invoker, >= 4",
        |c, k, v| {
            let n: u32 = int(k, v)?;
            if n < 4 {
                return Err(bad(k, v, "below 4 (the ring would be empty)"));
            }
            if n > 1 << 16 {
                return Err(bad(k, v, "above 65536"));
            }
            c.hash_nodes = n;
            Ok(())
        },
    ),
    ("warmup", "default warm-up in ms", |c, k, v| {
        c.warmup_ms = int(k, v)?;
        Ok(())
    }),
    (
        "shortestresponse.slidePeriod",
        "window in ms, > 0",
        |c, k, v| {
            c.slide_period_ms = positive(k, v)?;
            Ok(())
        },
    ),
    ("timeout", "adaptive's timeout in ms, > 0", |c, k, v| {
        c.timeout_ms = positive(k, v)?;
        Ok(())
    }),
    ("seed", "u64 seed for reproducible choices", |c, k, v| {
        c.seed = Some(int(k, v)?);
        Ok(())
    }),
];

impl Config {
    pub fn parse(text: &str) -> Result<Config, Error> {
        let mut config = Config::default();
        let mut seen: Vec<&str> = Vec::new();
        for pair in text.split('&').filter(|p| !p.trim().is_empty()) {
            let (key, value) = pair.split_once('=').ok_or_else(|| {
                Error::new(
                    Status::InvalidConfig,
                    format!("config: '{pair}' has no '=': expected key=value pairs joined by '&'"),
                )
            })?;
            let (key, value) = (key.trim(), value.trim());
            let Some((_, _, set)) = KEYS.iter().find(|(k, _, _)| *k == key) else {
                let names: Vec<&str> = KEYS.iter().map(|(k, _, _)| *k).collect();
                let hint = nearest(key, &names)
                    .map(|n| format!("; did you mean '{n}'?"))
                    .unwrap_or_default();
                return Err(Error::new(
                    Status::InvalidConfig,
                    format!(
                        "config: unknown key '{key}'{hint} (known keys: {})",
                        names.join(", ")
                    ),
                ));
            };
            if seen.contains(&key) {
                return Err(Error::new(
                    Status::InvalidConfig,
                    format!("config: key '{key}' is given twice"),
                ));
            }
            seen.push(key);
            // As in Dubbo, an empty value means "absent": the default stays.
            if !value.is_empty() {
                set(&mut config, key, value)?;
            }
        }
        Ok(config)
    }

    /// Every accepted key with a one-line description (for docs and error messages).
    pub fn keys() -> impl Iterator<Item = (&'static str, &'static str)> {
        KEYS.iter().map(|(k, d, _)| (*k, *d))
    }
}

fn bad(key: &str, value: &str, why: &str) -> Error {
    Error::new(
        Status::InvalidConfig,
        format!("config: {key}='{value}' is {why}"),
    )
}

fn int<T: std::str::FromStr>(key: &str, value: &str) -> Result<T, Error> {
    value
        .parse()
        .map_err(|_| bad(key, value, "not an integer in range"))
}

fn positive<T: std::str::FromStr + PartialOrd + Default>(
    key: &str,
    value: &str,
) -> Result<T, Error> {
    let v: T = int(key, value)?;
    if v <= T::default() {
        return Err(bad(key, value, "not positive"));
    }
    Ok(v)
}

/// The candidate closest to `word` by case-insensitive edit distance, if it is close enough to
/// be a plausible typo.
pub(crate) fn nearest<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    let w = word.to_ascii_lowercase();
    candidates
        .iter()
        .map(|c| (edit_distance(&w, &c.to_ascii_lowercase()), *c))
        .filter(|(d, c)| *d <= (c.len() / 2).max(2))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_values() {
        let c = Config::parse("").unwrap();
        assert_eq!(c, Config::default());
        let c = Config::parse("loadbalance=consistenthash&hash.nodes=10&seed=7").unwrap();
        assert_eq!(c.strategy, StrategyKind::ConsistentHash);
        assert_eq!(c.hash_nodes, 10);
        assert_eq!(c.seed, Some(7));
        assert_eq!(
            Config::parse("loadbalance=").unwrap().strategy,
            StrategyKind::Random
        );
    }

    #[test]
    fn misspelled_key_suggests_nearest() {
        let e = Config::parse("loadBalance=roundrobin").unwrap_err();
        assert_eq!(e.status, Status::InvalidConfig);
        assert!(
            e.message.contains("did you mean 'loadbalance'"),
            "{}",
            e.message
        );
        let e = Config::parse("hash.node=160").unwrap_err();
        assert!(e.message.contains("'hash.nodes'"), "{}", e.message);
        let e = Config::parse("loadbalance=roundrobbin").unwrap_err();
        assert!(e.message.contains("'roundrobin'"), "{}", e.message);
    }

    #[test]
    fn bad_values() {
        for text in [
            "hash.nodes=3",
            "hash.nodes=x",
            "timeout=0",
            "shortestresponse.slidePeriod=-1",
            "seed=-1",
            "loadbalance",
            "seed=1&seed=2",
        ] {
            let e = Config::parse(text).unwrap_err();
            assert_eq!(e.status, Status::InvalidConfig, "{text}");
        }
    }
}
