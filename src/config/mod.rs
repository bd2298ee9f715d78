//! Balancer configuration: one string of Dubbo URL parameters, `key=value&key=value`.
//!
//! Parsing is strict. Dubbo silently ignores a misspelled key (`loadBalance=...` does nothing),
//! which is a classic trap; here an unknown key is an error that suggests the nearest valid key.
//!
//! The parts: the key table (`keys.rs`: each key, its description and how its value is read),
//! the checks of a whole config (`checks.rs`), and the reading of one value (`values.rs`).

mod checks;
mod keys;
mod values;

use crate::error::{Error, Status};
use crate::strategy::StrategyKind;
use keys::KEYS;
pub(crate) use values::nearest;

/// A balancer's configuration: one field per config key, the `peakewma.*`, `outlier.*` and
/// `slowstart.*` keys in their own structs. [`Config::parse`] reads a config string;
/// [`Config::default`] holds every key's default (what `parse("")` gives).
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// `loadbalance`: the strategy (default `random`).
    pub strategy: StrategyKind,
    /// Virtual nodes per invoker on the consistent-hash ring, 4..=65536 (rounded down to a
    /// multiple of 4; default 160).
    pub hash_nodes: u32,
    /// Default warm-up in ms for invokers registered with a negative `warmup_ms`; 0 or less:
    /// none (default 600000).
    pub warmup_ms: i32,
    /// shortestresponse's tumbling window in ms (default 30000): the first pick more than this
    /// after the window began resets it, so any whole number is taken (0: the first pick 1 ms
    /// or more on; negative: every pick), as in Dubbo.
    pub slide_period_ms: i64,
    /// adaptive's call timeout in ms, > 0 (default 1000): decay unit of its latency estimate,
    /// and force-pick after 2x.
    pub timeout_ms: i32,
    /// Fixed seed: makes every random choice reproducible (tests, simulations). Without it each
    /// thread uses its own generator, which avoids a shared atomic on the hot path.
    pub seed: Option<u64>,
    /// p2c: candidates compared per pick (0 = every candidate).
    pub p2c_choices: u32,
    /// `peakewma.*`: peakewma's options.
    pub peakewma: PeakEwmaConfig,
    /// boundedhash: an invoker takes a key while its calls in flight, the new one counted, stay
    /// within ⌈factor × weighted average⌉ (the average counting the new call too).
    pub boundedhash_factor: f64,
    /// maglev: slots of the lookup table, a prime in 7..=16777213 (default 65537; at least
    /// the number of invokers, and for an even spread about 100 times it).
    pub maglev_table_size: u32,
    /// `orca.*`: orca's options.
    pub orca: OrcaConfig,
    /// Zone preference (every strategy): the consumer's own zone; None = off.
    pub zone: Option<String>,
    /// Stay entirely in the local zone while at least this percentage of it is healthy.
    pub zone_min_healthy_percent: u32,
    /// `subset.*`: subsetting (by key: the strategies that pick by load or latency,
    /// `StrategyKind::takes_subset`; by index: also `random`, `roundrobin` and `orca`).
    pub subset: SubsetConfig,
    /// `outlier.*`: outlier ejection (every strategy).
    pub outlier: OutlierConfig,
    /// `slowstart.*`: consumer-side slow start (p2c, peakewma, boundedhash).
    pub slow_start: SlowStartConfig,
}

/// `subset.*`: each consumer prefers its own subset of the invokers, chosen by rendezvous
/// hashing of its key with their addresses, or by its index among the consumers.
#[derive(Clone, Debug, PartialEq)]
pub struct SubsetConfig {
    /// Invokers in the subset; 0 = off (every invoker).
    pub size: u32,
    /// This consumer's identity (this or `index` is required with `size`): different keys take
    /// different subsets, the same key the same subset of the same set, in every process and
    /// language.
    pub key: Option<String>,
    /// This consumer's index among the consumers, 0, 1, 2, …: consumers 0..C take subsets that
    /// hold every invoker equally often (within one while `size` ≤ (n + 3) / 3 or divides the n
    /// invokers; beyond, the counts drift apart as C grows), so that load-blind strategies may
    /// use them too; instead of `key`.
    pub index: Option<u32>,
    /// Stay entirely in the subset while at least this percentage of it is healthy.
    pub min_healthy_percent: u32,
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

/// `orca`'s options (gRFC A58's, in ms).
#[derive(Clone, Debug, PartialEq)]
pub struct OrcaConfig {
    /// A provider's weight counts only this long after the first report of a run of reports.
    pub blackout_ms: i64,
    /// A weight not renewed for this long lapses (the next report starts a new blackout).
    pub expiration_ms: i64,
    /// The weights are recomputed every this many ms.
    pub update_ms: i64,
    /// How much errors weigh: weight = qps / (utilization + eps / qps × error_penalty).
    pub error_penalty: f64,
}

/// Outlier ejection (every strategy). Off unless a rule is set.
#[derive(Clone, Debug, PartialEq)]
pub struct OutlierConfig {
    /// Eject after this many consecutive failures or timeouts (0 = rule off).
    pub consecutive_failures: u32,
    /// Eject when failures reach this percentage of a window's calls (0 = rule off).
    pub failure_rate_percent: u32,
    /// Window of the failure-rate rule in ms, > 0 (default 10000).
    pub window_ms: i64,
    /// Calls a window needs before the failure-rate rule applies.
    pub min_requests: u32,
    /// First ejection's length; the n-th consecutive ejection lasts n times as long.
    pub base_ejection_ms: i64,
    /// Longest ejection in ms, at least `base_ejection_ms` (default 300000; left out of a
    /// config string, or left at 300000 in a config given to `Balancer::with_config`, 300000
    /// or `base_ejection_ms`, whichever is longer).
    pub max_ejection_ms: i64,
    /// At most this share of the set is ejected at once (at least one invoker, never all; of the
    /// weighted invokers while there are any, for a strategy where weight 0 drains one: see
    /// docs/strategies.md; 0 = never eject).
    pub max_ejection_percent: u32,
}

impl OutlierConfig {
    /// True when a rule is set (`consecutive_failures` or `failure_rate_percent` above 0).
    pub fn enabled(&self) -> bool {
        self.consecutive_failures > 0 || self.failure_rate_percent > 0
    }

    /// What a longest ejection left out becomes: the default or the first one, whichever is
    /// longer.
    fn lengthen_max_ejection(&mut self) {
        self.max_ejection_ms = self.max_ejection_ms.max(self.base_ejection_ms);
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
            peakewma: PeakEwmaConfig::default(),
            boundedhash_factor: 1.25,
            maglev_table_size: 65537,
            orca: OrcaConfig::default(),
            zone: None,
            zone_min_healthy_percent: 70,
            subset: SubsetConfig::default(),
            outlier: OutlierConfig::default(),
            slow_start: SlowStartConfig::default(),
        }
    }
}

// The sub-configs' defaults are their keys' (what `Config::default` holds), so that
// `OutlierConfig { consecutive_failures: 5, ..Default::default() }` reads as it should.

impl Default for PeakEwmaConfig {
    fn default() -> Self {
        PeakEwmaConfig {
            choices: 2,
            decay_ms: 10_000,
            failure_penalty_ms: 1000,
            preference_ms: 0,
        }
    }
}

impl Default for OrcaConfig {
    fn default() -> Self {
        OrcaConfig {
            blackout_ms: 10_000,
            expiration_ms: 180_000,
            update_ms: 1000,
            error_penalty: 1.0,
        }
    }
}

impl Default for SubsetConfig {
    fn default() -> Self {
        SubsetConfig {
            size: 0,
            key: None,
            index: None,
            min_healthy_percent: 70,
        }
    }
}

impl Default for OutlierConfig {
    fn default() -> Self {
        OutlierConfig {
            consecutive_failures: 0,
            failure_rate_percent: 0,
            window_ms: 10_000,
            min_requests: 20,
            base_ejection_ms: 30_000,
            max_ejection_ms: 300_000,
            max_ejection_percent: 10,
        }
    }
}

impl Default for SlowStartConfig {
    fn default() -> Self {
        SlowStartConfig {
            window_ms: 0,
            min_weight_percent: 10,
            aggression: 1.0,
        }
    }
}

/// `maglev.tableSize`'s range: the smallest prime above 5 (a table smaller than a handful of
/// invokers spreads nothing), and the largest below 2^24 (64 MB of slots).
pub const MIN_MAGLEV_TABLE: u32 = 7;
pub const MAX_MAGLEV_TABLE: u32 = 16_777_213;

impl Config {
    /// Parses `key=value` pairs joined by `&` (empty pairs skipped, keys and values trimmed);
    /// an empty value leaves the key's default. An unknown key (the error suggests the nearest),
    /// a duplicate key, a value out of range, or an option that would do nothing is
    /// `Status::InvalidConfig`.
    pub fn parse(text: &str) -> Result<Config, Error> {
        let mut config = Config::default();
        let mut seen: Vec<&str> = Vec::new();
        // The keys given a value: the option checks look at these only (an empty value is an
        // absent key, which cannot be an option that does nothing).
        let mut given: Vec<&str> = Vec::new();
        // Their values as written, for a range error to quote (`1e+16`, not the number's
        // `10000000000000000`).
        let mut written: Vec<(&str, &str)> = Vec::new();
        for pair in text.split('&').filter(|p| !p.trim().is_empty()) {
            let (key, value) = pair.split_once('=').ok_or_else(|| {
                Error::new(
                    Status::InvalidConfig,
                    format!(
                        "config: {} has no '=': expected key=value pairs joined by '&'",
                        values::quoted(pair)
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
                        "config: unknown key {}{hint} (known keys: {})",
                        values::quoted(key),
                        names.join(", ")
                    ),
                ));
            };
            if seen.contains(&key) {
                return Err(Error::new(
                    Status::InvalidConfig,
                    format!("config: key {} is given twice", values::quoted(key)),
                ));
            }
            seen.push(key);
            // As in Dubbo, an empty value means "absent": the default stays.
            if !value.is_empty() {
                set(&mut config, key, value)?;
                given.push(key);
                written.push((key, value));
            }
        }
        // As Envoy's max_ejection_time: left out, the longest ejection is the default or the
        // first one, whichever is longer (a base of 10 minutes is not an error about a key the
        // user never set).
        if !given.contains(&"outlier.maxEjectionMs") {
            config.outlier.lengthen_max_ejection();
        }
        config.validate_as_written(&written)?;
        config.check_options(&given)?;
        Ok(config)
    }

    /// The config a hand-built one stands for, as `parse` reads the same keys: a longest
    /// ejection left at its default follows a longer first one (the fields equal to their
    /// defaults count as left out, as [`Config::check`] takes them).
    pub(crate) fn settled(mut self) -> Config {
        if self.outlier.max_ejection_ms == OutlierConfig::default().max_ejection_ms {
            self.outlier.lengthen_max_ejection();
        }
        self
    }

    /// Every accepted key with a one-line description (for docs and error messages).
    pub fn keys() -> impl Iterator<Item = (&'static str, &'static str)> {
        KEYS.iter().map(|(k, d, _)| (*k, *d))
    }
}

#[cfg(test)]
mod tests;
