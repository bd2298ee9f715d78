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
    /// p2c: candidates compared per pick (0 = every candidate).
    pub p2c_choices: u32,
    pub peakewma: PeakEwmaConfig,
    /// boundedhash: an invoker takes a key while its in-flight load stays within
    /// ⌈factor × average⌉ (weighted).
    pub boundedhash_factor: f64,
    /// Zone preference (every strategy): the consumer's own zone; None = off.
    pub zone: Option<String>,
    /// Stay entirely in the local zone while at least this percentage of it is healthy.
    pub zone_min_healthy_percent: u32,
    pub outlier: OutlierConfig,
    pub slow_start: SlowStartConfig,
}

/// `peakewma`'s options.
#[derive(Clone, Debug, PartialEq)]
pub struct PeakEwmaConfig {
    /// Candidates compared per pick before escalation (0 = every candidate).
    pub choices: u32,
    /// Time constant of the latency average, ms.
    pub decay_ms: i64,
    /// Latency recorded for a failed or timed-out call (at least its elapsed time), ms.
    pub failure_penalty_ms: i64,
    /// Between otherwise equal invokers, this balancer's own preference order, renewed every
    /// this many ms (0 = off: the first candidate drawn).
    pub preference_ms: i64,
}

/// Outlier ejection (every strategy). Off unless a rule is set.
#[derive(Clone, Debug, PartialEq)]
pub struct OutlierConfig {
    /// Eject after this many consecutive failures or timeouts (0 = rule off).
    pub consecutive_failures: u32,
    /// Eject when failures reach this percentage of a window's calls (0 = rule off).
    pub failure_rate_percent: u32,
    pub window_ms: i64,
    /// Calls a window needs before the failure-rate rule applies.
    pub min_requests: u32,
    /// First ejection's length; the n-th consecutive ejection lasts n times as long.
    pub base_ejection_ms: i64,
    pub max_ejection_ms: i64,
    /// At most this share of the set is ejected at once (at least one invoker, never all; 0 =
    /// never eject).
    pub max_ejection_percent: u32,
}

impl OutlierConfig {
    pub fn enabled(&self) -> bool {
        self.consecutive_failures > 0 || self.failure_rate_percent > 0
    }
}

/// Consumer-side slow start for the strategies beyond Dubbo: an invoker that joins an existing
/// set ramps its weight over a window (on top of Dubbo's provider-side warm-up).
#[derive(Clone, Debug, PartialEq)]
pub struct SlowStartConfig {
    /// 0 = off.
    pub window_ms: i64,
    /// Weight at the start of the window, percent of the full weight.
    pub min_weight_percent: u32,
    /// Ramp shape: weight ∝ (elapsed / window)^(1 / aggression); 1.0 is linear.
    pub aggression: f64,
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
            p2c_choices: 2,
            peakewma: PeakEwmaConfig {
                choices: 2,
                decay_ms: 10_000,
                failure_penalty_ms: 1000,
                preference_ms: 0,
            },
            boundedhash_factor: 1.25,
            zone: None,
            zone_min_healthy_percent: 70,
            outlier: OutlierConfig {
                consecutive_failures: 0,
                failure_rate_percent: 0,
                window_ms: 10_000,
                min_requests: 20,
                base_ejection_ms: 30_000,
                max_ejection_ms: 300_000,
                max_ejection_percent: 10,
            },
            slow_start: SlowStartConfig {
                window_ms: 0,
                min_weight_percent: 10,
                aggression: 1.0,
            },
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
        "virtual nodes per invoker, 4..=65536 (rounded down to a multiple of 4)",
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
    (
        "p2c.choices",
        "p2c: candidates drawn (by weight) and compared per pick, 2..=16; 0 = all (default 2)",
        |c, k, v| {
            c.p2c_choices = choices(k, v)?;
            Ok(())
        },
    ),
    (
        "peakewma.choices",
        "peakewma: candidates compared per pick before it escalates (up to 8 more, or all) \
         because the best looks slow, 2..=16; 0 = all (default 2)",
        |c, k, v| {
            c.peakewma.choices = choices(k, v)?;
            Ok(())
        },
    ),
    (
        "peakewma.decay",
        "peakewma: time constant of the latency average in ms, > 0; also bounds how long a \
         slow invoker goes unprobed (default 10000)",
        |c, k, v| {
            c.peakewma.decay_ms = positive(k, v)?;
            Ok(())
        },
    ),
    (
        "peakewma.failurePenalty",
        "peakewma: latency in ms recorded for a failed or timed-out call (at least its elapsed \
         time), so fast failures do not look fast; a failing invoker is probed again after \
         this long (at most peakewma.decay, after which the estimate has faded too), then \
         twice as late each time; 0 = elapsed time only (default 1000)",
        |c, k, v| {
            c.peakewma.failure_penalty_ms = non_negative(k, v)?;
            Ok(())
        },
    ),
    (
        "peakewma.preferenceMs",
        "peakewma: between invokers of equivalent latency, equal weight and equal calls in \
         flight, prefer this balancer's own order (a hash of the ids), renewed every this many \
         ms, instead of the first drawn; helps many consumers each with few calls in flight; \
         0 = off (default 0)",
        |c, k, v| {
            c.peakewma.preference_ms = non_negative(k, v)?;
            Ok(())
        },
    ),
    (
        "boundedhash.factor",
        "boundedhash: an invoker keeps a key while its in-flight calls stay below \
         ceil(factor x weighted average); 1.0..=100 (default 1.25)",
        |c, k, v| {
            let f = float(k, v)?;
            if !(1.0..=100.0).contains(&f) {
                return Err(bad(k, v, "outside 1.0..=100.0"));
            }
            c.boundedhash_factor = f;
            Ok(())
        },
    ),
    (
        "zone",
        "zone preference (every strategy): this consumer's zone; invokers of the same zone are \
         preferred while enough of them are healthy",
        |c, _, v| {
            c.zone = Some(v.to_string());
            Ok(())
        },
    ),
    (
        "zone.minHealthyPercent",
        "zone preference: all traffic stays local while at least this percentage of local \
         invokers is healthy (not ejected); below, the local share shrinks in proportion \
         and the rest spills over to every healthy invoker; 1..=100 (default 70)",
        |c, k, v| {
            c.zone_min_healthy_percent = percent(k, v, 1)?;
            Ok(())
        },
    ),
    (
        "outlier.consecutiveFailures",
        "outlier ejection (every strategy): eject an invoker after this many consecutive \
         failures or timeouts; 0 = rule off (default 0)",
        |c, k, v| {
            c.outlier.consecutive_failures = int(k, v)?;
            Ok(())
        },
    ),
    (
        "outlier.failureRate",
        "outlier ejection: eject an invoker whose failures reach this percentage of its calls in \
         a window (outlier.windowMs, at least outlier.minRequests calls); 0 = rule off (default 0)",
        |c, k, v| {
            c.outlier.failure_rate_percent = percent(k, v, 0)?;
            Ok(())
        },
    ),
    (
        "outlier.windowMs",
        "outlier ejection: window of the failure-rate rule in ms, > 0 (default 10000)",
        |c, k, v| {
            c.outlier.window_ms = positive(k, v)?;
            Ok(())
        },
    ),
    (
        "outlier.minRequests",
        "outlier ejection: calls a window needs before the failure-rate rule applies, > 0 \
         (default 20)",
        |c, k, v| {
            c.outlier.min_requests = positive(k, v)?;
            Ok(())
        },
    ),
    (
        "outlier.baseEjectionMs",
        "outlier ejection: length of a first ejection in ms; the n-th ejection in a row lasts n \
         times as long (one step is forgiven per base period without ejection), > 0 \
         (default 30000)",
        |c, k, v| {
            c.outlier.base_ejection_ms = positive(k, v)?;
            Ok(())
        },
    ),
    (
        "outlier.maxEjectionMs",
        "outlier ejection: longest ejection in ms, > 0 (default 300000)",
        |c, k, v| {
            c.outlier.max_ejection_ms = positive(k, v)?;
            Ok(())
        },
    ),
    (
        "outlier.maxEjectionPercent",
        "outlier ejection: at most this percentage of the set is ejected at once (at least one \
         invoker, never all of them; 0 = never eject), 0..=100 (default 10)",
        |c, k, v| {
            c.outlier.max_ejection_percent = percent(k, v, 0)?;
            Ok(())
        },
    ),
    (
        "slowstart.windowMs",
        "slow start (p2c, peakewma, boundedhash): an invoker that joins an existing set ramps \
         its weight up over this many ms (on top of Dubbo's warm-up); 0 = off (default 0)",
        |c, k, v| {
            c.slow_start.window_ms = non_negative(k, v)?;
            Ok(())
        },
    ),
    (
        "slowstart.minWeightPercent",
        "slow start: weight at the start of the window, percent of the full weight, 1..=100 \
         (default 10)",
        |c, k, v| {
            c.slow_start.min_weight_percent = percent(k, v, 1)?;
            Ok(())
        },
    ),
    (
        "slowstart.aggression",
        "slow start: ramp shape, weight ~ (elapsed / window)^(1 / aggression); 1.0 is linear, \
         > 1 ramps faster early; 0.1..=10 (default 1.0)",
        |c, k, v| {
            let f = float(k, v)?;
            if !(0.1..=10.0).contains(&f) {
                return Err(bad(k, v, "outside 0.1..=10.0"));
            }
            c.slow_start.aggression = f;
            Ok(())
        },
    ),
];

impl Config {
    pub fn parse(text: &str) -> Result<Config, Error> {
        let mut config = Config::default();
        let mut seen: Vec<&str> = Vec::new();
        // The keys given a value: the option checks look at these only (an empty value is an
        // absent key, which cannot be an option that does nothing).
        let mut given: Vec<&str> = Vec::new();
        for pair in text.split('&').filter(|p| !p.trim().is_empty()) {
            let (key, value) = pair.split_once('=').ok_or_else(|| {
                Error::new(
                    Status::InvalidConfig,
                    format!(
                        "config: '{}' has no '=': expected key=value pairs joined by '&'",
                        pair.escape_debug()
                    ),
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
                        "config: unknown key '{}'{hint} (known keys: {})",
                        key.escape_debug(),
                        names.join(", ")
                    ),
                ));
            };
            if seen.contains(&key) {
                return Err(Error::new(
                    Status::InvalidConfig,
                    format!("config: key '{}' is given twice", key.escape_debug()),
                ));
            }
            seen.push(key);
            // As in Dubbo, an empty value means "absent": the default stays.
            if !value.is_empty() {
                set(&mut config, key, value)?;
                given.push(key);
            }
        }
        config.check_options(&given)?;
        Ok(config)
    }

    /// Options that would silently do nothing are errors, as misspelled keys are.
    fn check_options(&self, seen: &[&str]) -> Result<(), Error> {
        let given = |prefix: &str| seen.iter().find(|k| k.starts_with(prefix)).copied();
        let fail = |key: &str, why: &str| {
            Err(Error::new(
                Status::InvalidConfig,
                format!("config: {key} {why}"),
            ))
        };
        if let Some(key) = given("outlier.") {
            if !self.outlier.enabled() {
                return fail(
                    key,
                    "has no effect: set outlier.consecutiveFailures or outlier.failureRate to \
                     enable outlier ejection",
                );
            }
        }
        if self.outlier.max_ejection_ms < self.outlier.base_ejection_ms {
            return fail("outlier.maxEjectionMs", "is below outlier.baseEjectionMs");
        }
        if self.outlier.failure_rate_percent == 0 {
            if let Some(key) = ["outlier.windowMs", "outlier.minRequests"]
                .into_iter()
                .find(|k| seen.contains(k))
            {
                return fail(key, "has no effect without outlier.failureRate");
            }
        }
        if given("zone.").is_some() {
            if self.zone.is_none() {
                return fail(
                    "zone.minHealthyPercent",
                    "has no effect without zone=<this consumer's zone>",
                );
            }
            if !self.outlier.enabled() {
                return fail(
                    "zone.minHealthyPercent",
                    "has no effect without outlier ejection (healthy means not ejected): set \
                     outlier.consecutiveFailures or outlier.failureRate",
                );
            }
        }
        // Each of polylb's strategies reads its own options only: `peakewma&p2c.choices=0` is
        // a slip for `peakewma.choices=0`, not a setting.
        for kind in [
            StrategyKind::P2c,
            StrategyKind::PeakEwma,
            StrategyKind::BoundedHash,
        ] {
            let prefix = format!("{}.", kind.name());
            if let Some(key) = given(&prefix) {
                if self.strategy != kind {
                    return fail(key, &format!("applies to loadbalance={} only", kind.name()));
                }
            }
        }
        if let Some(key) = given("slowstart.") {
            if !self.strategy.is_beyond_dubbo() {
                return fail(
                    key,
                    "applies to p2c, peakewma and boundedhash only (Dubbo's strategies keep \
                     Dubbo's warm-up, set per invoker)",
                );
            }
        }
        if self.slow_start.window_ms == 0 {
            if let Some(key) = seen
                .iter()
                .find(|k| k.starts_with("slowstart.") && **k != "slowstart.windowMs")
            {
                return fail(key, "has no effect without slowstart.windowMs");
            }
        }
        Ok(())
    }

    /// Every accepted key with a one-line description (for docs and error messages).
    pub fn keys() -> impl Iterator<Item = (&'static str, &'static str)> {
        KEYS.iter().map(|(k, d, _)| (*k, *d))
    }
}

fn bad(key: &str, value: &str, why: &str) -> Error {
    Error::new(
        Status::InvalidConfig,
        // Escaped: user text may hold NUL or control bytes that would cut a C string short.
        format!("config: {key}='{}' is {why}", value.escape_debug()),
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

fn non_negative<T: std::str::FromStr + PartialOrd + Default>(
    key: &str,
    value: &str,
) -> Result<T, Error> {
    let v: T = int(key, value)?;
    if v < T::default() {
        return Err(bad(key, value, "negative"));
    }
    Ok(v)
}

fn float(key: &str, value: &str) -> Result<f64, Error> {
    value
        .parse::<f64>()
        .ok()
        .filter(|f| f.is_finite())
        .ok_or_else(|| bad(key, value, "not a number"))
}

fn percent(key: &str, value: &str, min: u32) -> Result<u32, Error> {
    let v: u32 = int(key, value)?;
    if v < min || v > 100 {
        return Err(bad(key, value, &format!("outside {min}..=100")));
    }
    Ok(v)
}

fn choices(key: &str, value: &str) -> Result<u32, Error> {
    let v: u32 = int(key, value)?;
    if v == 1 || v > 16 {
        return Err(bad(key, value, "not 0 (all) or 2..=16"));
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
            "hash.nodes=65537",
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
