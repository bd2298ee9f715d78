//! Balancer configuration: one string of Dubbo URL parameters, `key=value&key=value`.
//!
//! Parsing is strict. Dubbo silently ignores a misspelled key (`loadBalance=...` does nothing),
//! which is a classic trap; here an unknown key is an error that suggests the nearest valid key.

use crate::error::{Error, Status};
use crate::strategy::StrategyKind;

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
    /// hold every invoker equally often (within one), so that load-blind strategies may use
    /// them too; instead of `key`.
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
    /// config string, 300000 or `base_ejection_ms`, whichever is longer).
    pub max_ejection_ms: i64,
    /// At most this share of the set is ejected at once (at least one invoker, never all; 0 =
    /// never eject).
    pub max_ejection_percent: u32,
}

impl OutlierConfig {
    /// True when a rule is set (`consecutive_failures` or `failure_rate_percent` above 0).
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
            maglev_table_size: 65537,
            orca: OrcaConfig {
                blackout_ms: 10_000,
                expiration_ms: 180_000,
                update_ms: 1000,
                error_penalty: 1.0,
            },
            zone: None,
            zone_min_healthy_percent: 70,
            subset: SubsetConfig {
                size: 0,
                key: None,
                index: None,
                min_healthy_percent: 70,
            },
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

/// `maglev.tableSize`'s range: the smallest prime above 5 (a table smaller than a handful of
/// invokers spreads nothing), and the largest below 2^24 (64 MB of slots).
pub const MIN_MAGLEV_TABLE: u32 = 7;
pub const MAX_MAGLEV_TABLE: u32 = 16_777_213;

/// Trial division: table sizes are at most 2^24, so at most 2^11 divisions.
fn is_prime(n: u32) -> bool {
    n >= 2 && (2..).take_while(|d| d * d <= n).all(|d| n % d != 0)
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
            c.hash_nodes = int(k, v)?;
            Ok(())
        },
    ),
    (
        "warmup",
        "default warm-up in ms; 0 or less: none",
        |c, k, v| {
            c.warmup_ms = int(k, v)?;
            Ok(())
        },
    ),
    (
        "shortestresponse.slidePeriod",
        "shortestresponse's window in ms: the first pick more than this after the window began \
         resets it, so any whole number is taken (0: the first pick 1 ms or more on; negative: \
         every pick) (default 30000)",
        |c, k, v| {
            c.slide_period_ms = int(k, v)?;
            Ok(())
        },
    ),
    ("timeout", "adaptive's timeout in ms, > 0", |c, k, v| {
        c.timeout_ms = int(k, v)?;
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
            c.p2c_choices = int(k, v)?;
            Ok(())
        },
    ),
    (
        "peakewma.choices",
        "peakewma: candidates compared per pick before it escalates (up to 8 more, or all) \
         because the best looks slow, 2..=16; 0 = all (default 2)",
        |c, k, v| {
            c.peakewma.choices = int(k, v)?;
            Ok(())
        },
    ),
    (
        "peakewma.decay",
        "peakewma: time constant of the latency average in ms, > 0; also bounds how long a \
         slow invoker goes unprobed (default 10000)",
        |c, k, v| {
            c.peakewma.decay_ms = int(k, v)?;
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
            c.peakewma.failure_penalty_ms = int(k, v)?;
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
            c.peakewma.preference_ms = int(k, v)?;
            Ok(())
        },
    ),
    (
        "boundedhash.factor",
        "boundedhash: an invoker keeps a key while its calls in flight, the new one counted, \
         stay within ceil(factor x weighted average); 1.0..=100 (default 1.25)",
        |c, k, v| {
            c.boundedhash_factor = float(k, v)?;
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
            c.zone_min_healthy_percent = int(k, v)?;
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
            c.outlier.failure_rate_percent = int(k, v)?;
            Ok(())
        },
    ),
    (
        "outlier.windowMs",
        "outlier ejection: window of the failure-rate rule in ms, > 0 (default 10000)",
        |c, k, v| {
            c.outlier.window_ms = int(k, v)?;
            Ok(())
        },
    ),
    (
        "outlier.minRequests",
        "outlier ejection: calls a window needs before the failure-rate rule applies, > 0 \
         (default 20)",
        |c, k, v| {
            c.outlier.min_requests = int(k, v)?;
            Ok(())
        },
    ),
    (
        "outlier.baseEjectionMs",
        "outlier ejection: length of a first ejection in ms; the n-th ejection in a row lasts n \
         times as long (one step is forgiven per base period without ejection), > 0 \
         (default 30000)",
        |c, k, v| {
            c.outlier.base_ejection_ms = int(k, v)?;
            Ok(())
        },
    ),
    (
        "outlier.maxEjectionMs",
        "outlier ejection: longest ejection in ms, at least outlier.baseEjectionMs (default \
         300000, or outlier.baseEjectionMs when that is longer)",
        |c, k, v| {
            c.outlier.max_ejection_ms = int(k, v)?;
            Ok(())
        },
    ),
    (
        "outlier.maxEjectionPercent",
        "outlier ejection: at most this percentage of the set is ejected at once (at least one \
         invoker, never all of them; 0 = never eject), 0..=100 (default 10)",
        |c, k, v| {
            c.outlier.max_ejection_percent = int(k, v)?;
            Ok(())
        },
    ),
    (
        "slowstart.windowMs",
        "slow start (p2c, peakewma, boundedhash): an invoker that joins an existing set ramps \
         its weight up over this many ms (on top of Dubbo's warm-up); 0 = off (default 0)",
        |c, k, v| {
            c.slow_start.window_ms = int(k, v)?;
            Ok(())
        },
    ),
    (
        "slowstart.minWeightPercent",
        "slow start: weight at the start of the window, percent of the full weight, 1..=100 \
         (default 10)",
        |c, k, v| {
            c.slow_start.min_weight_percent = int(k, v)?;
            Ok(())
        },
    ),
    (
        "slowstart.aggression",
        "slow start: ramp shape, weight ~ (elapsed / window)^(1 / aggression); 1.0 is linear, \
         > 1 ramps faster early; 0.1..=10 (default 1.0)",
        |c, k, v| {
            c.slow_start.aggression = float(k, v)?;
            Ok(())
        },
    ),
    (
        "maglev.tableSize",
        "maglev: slots of the lookup table, a prime in 7..=16777213, at least the number of \
         invokers (about 100 times it spreads keys within 1 %); changing it remaps most keys \
         (default 65537)",
        |c, k, v| {
            c.maglev_table_size = int(k, v)?;
            Ok(())
        },
    ),
    (
        "subset.size",
        "subsetting: this consumer prefers this many invokers (within its zone when zone is \
         set), chosen by rendezvous hashing of subset.key with their addresses \
         (leastactive, shortestresponse, adaptive, p2c, peakewma) or by subset.index (also \
         random, roundrobin and orca); 0 = off (default 0)",
        |c, k, v| {
            c.subset.size = int(k, v)?;
            Ok(())
        },
    ),
    (
        "subset.key",
        "subsetting: this consumer's identity, e.g. its host name and service; different keys \
         take different subsets, the same key the same subset of the same set (subset.size needs \
         this or subset.index)",
        |c, _, v| {
            c.subset.key = Some(v.to_string());
            Ok(())
        },
    ),
    (
        "subset.minHealthyPercent",
        "subsetting: all traffic stays in the subset while at least this percentage of it is \
         healthy (not ejected); below, the subset's share shrinks in proportion and the rest \
         spills over to every healthy invoker; 1..=100 (default 70)",
        |c, k, v| {
            c.subset.min_healthy_percent = int(k, v)?;
            Ok(())
        },
    ),
    (
        "subset.index",
        "subsetting: this consumer's index among the consumers of the service, 0, 1, 2, … (a \
         pod's ordinal, say), instead of subset.key: consumers 0 to C-1 take subsets that hold \
         every invoker equally often, within one; 0..=4294967295",
        |c, k, v| {
            c.subset.index = Some(int(k, v)?);
            Ok(())
        },
    ),
    (
        "orca.blackoutMs",
        "orca: a provider's reported weight counts only this many ms after the first report \
         of a run of reports (until then it takes the mean weight), >= 0 (default 10000)",
        |c, k, v| {
            c.orca.blackout_ms = int(k, v)?;
            Ok(())
        },
    ),
    (
        "orca.expirationMs",
        "orca: a reported weight not renewed for this many ms lapses, and the next report \
         starts a new blackout, > 0 (default 180000)",
        |c, k, v| {
            c.orca.expiration_ms = int(k, v)?;
            Ok(())
        },
    ),
    (
        "orca.updateMs",
        "orca: the weights are recomputed from the reports every this many ms, > 0 (default \
         1000)",
        |c, k, v| {
            c.orca.update_ms = int(k, v)?;
            Ok(())
        },
    ),
    (
        "orca.errorPenalty",
        "orca: how much errors weigh, weight = qps / (utilization + eps / qps x errorPenalty); \
         0..=100 (default 1.0)",
        |c, k, v| {
            c.orca.error_penalty = float(k, v)?;
            Ok(())
        },
    ),
];

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
        // As Envoy's max_ejection_time: left out, the longest ejection is the default or the
        // first one, whichever is longer (a base of 10 minutes is not an error about a key the
        // user never set).
        if !given.contains(&"outlier.maxEjectionMs") {
            let o = &mut config.outlier;
            o.max_ejection_ms = o.max_ejection_ms.max(o.base_ejection_ms);
        }
        config.validate()?;
        config.check_options(&given)?;
        Ok(config)
    }

    /// What [`crate::Balancer::with_config`] checks of a hand-built config: [`Config::validate`],
    /// then the options `parse` rejects as doing nothing or harm (a subset with a key-hashing
    /// strategy, `slowstart.*` with `random`, …), taking as set the fields that differ from
    /// [`Config::default`] (a struct cannot say which were set on purpose).
    pub fn check(&self) -> Result<(), Error> {
        self.validate()?;
        self.check_options(&self.changed_keys())
    }

    /// The keys whose fields differ from the defaults.
    fn changed_keys(&self) -> Vec<&'static str> {
        let d = Config::default();
        let (o, od) = (&self.outlier, &d.outlier);
        let (pe, ped) = (&self.peakewma, &d.peakewma);
        let (orca, orcad) = (&self.orca, &d.orca);
        let (ss, ssd) = (&self.slow_start, &d.slow_start);
        [
            ("loadbalance", self.strategy != d.strategy),
            ("hash.nodes", self.hash_nodes != d.hash_nodes),
            ("warmup", self.warmup_ms != d.warmup_ms),
            (
                "shortestresponse.slidePeriod",
                self.slide_period_ms != d.slide_period_ms,
            ),
            ("timeout", self.timeout_ms != d.timeout_ms),
            ("seed", self.seed != d.seed),
            ("p2c.choices", self.p2c_choices != d.p2c_choices),
            ("peakewma.choices", pe.choices != ped.choices),
            ("peakewma.decay", pe.decay_ms != ped.decay_ms),
            (
                "peakewma.failurePenalty",
                pe.failure_penalty_ms != ped.failure_penalty_ms,
            ),
            (
                "peakewma.preferenceMs",
                pe.preference_ms != ped.preference_ms,
            ),
            (
                "boundedhash.factor",
                self.boundedhash_factor.to_bits() != d.boundedhash_factor.to_bits(),
            ),
            (
                "maglev.tableSize",
                self.maglev_table_size != d.maglev_table_size,
            ),
            ("orca.blackoutMs", orca.blackout_ms != orcad.blackout_ms),
            (
                "orca.expirationMs",
                orca.expiration_ms != orcad.expiration_ms,
            ),
            ("orca.updateMs", orca.update_ms != orcad.update_ms),
            (
                "orca.errorPenalty",
                orca.error_penalty.to_bits() != orcad.error_penalty.to_bits(),
            ),
            ("zone", self.zone != d.zone),
            (
                "zone.minHealthyPercent",
                self.zone_min_healthy_percent != d.zone_min_healthy_percent,
            ),
            ("subset.size", self.subset.size != d.subset.size),
            ("subset.key", self.subset.key != d.subset.key),
            ("subset.index", self.subset.index != d.subset.index),
            (
                "subset.minHealthyPercent",
                self.subset.min_healthy_percent != d.subset.min_healthy_percent,
            ),
            (
                "outlier.consecutiveFailures",
                o.consecutive_failures != od.consecutive_failures,
            ),
            (
                "outlier.failureRate",
                o.failure_rate_percent != od.failure_rate_percent,
            ),
            ("outlier.windowMs", o.window_ms != od.window_ms),
            ("outlier.minRequests", o.min_requests != od.min_requests),
            (
                "outlier.baseEjectionMs",
                o.base_ejection_ms != od.base_ejection_ms,
            ),
            (
                "outlier.maxEjectionMs",
                o.max_ejection_ms != od.max_ejection_ms,
            ),
            (
                "outlier.maxEjectionPercent",
                o.max_ejection_percent != od.max_ejection_percent,
            ),
            ("slowstart.windowMs", ss.window_ms != ssd.window_ms),
            (
                "slowstart.minWeightPercent",
                ss.min_weight_percent != ssd.min_weight_percent,
            ),
            (
                "slowstart.aggression",
                ss.aggression.to_bits() != ssd.aggression.to_bits(),
            ),
        ]
        .into_iter()
        .filter_map(|(key, changed)| changed.then_some(key))
        .collect()
    }

    /// Every field within the range `parse` accepts (the ranges in the key descriptions):
    /// [`crate::Balancer::with_config`] checks a hand-built config with this too (in
    /// [`Config::check`]), so a value out of range is the same clear error whichever way it
    /// came in.
    pub fn validate(&self) -> Result<(), Error> {
        let out = |key: &str, value: &dyn std::fmt::Display, why: &str| {
            let why = match accepted(key) {
                Some(range) => format!("{why} (accepted: {range})"),
                None => why.to_string(),
            };
            Err(bad(key, &value.to_string(), &why))
        };
        let positive = |key: &str, value: i64| {
            if value > 0 {
                Ok(())
            } else {
                out(key, &value, "not positive")
            }
        };
        let non_negative = |key: &str, value: i64| {
            if value >= 0 {
                Ok(())
            } else {
                out(key, &value, "negative")
            }
        };
        let percent = |key: &str, value: u32, min: u32| {
            if (min..=100).contains(&value) {
                Ok(())
            } else {
                out(key, &value, "out of range")
            }
        };
        let choices = |key: &str, value: u32| {
            if value == 0 || (2..=16).contains(&value) {
                Ok(())
            } else {
                out(key, &value, "out of range")
            }
        };
        let within = |key: &str, value: f64, range: std::ops::RangeInclusive<f64>| {
            if range.contains(&value) {
                Ok(())
            } else {
                out(key, &value, "out of range")
            }
        };
        if self.hash_nodes < 4 {
            return out(
                "hash.nodes",
                &self.hash_nodes,
                "below 4 (the ring would be empty)",
            );
        }
        if self.hash_nodes > 1 << 16 {
            return out("hash.nodes", &self.hash_nodes, "out of range");
        }
        // Any whole number, as Dubbo's `now - lastUpdate > slidePeriod`: 0 ends a window at the
        // first pick 1 ms or more after it began, a negative period at every pick.
        positive("timeout", self.timeout_ms.into())?;
        choices("p2c.choices", self.p2c_choices)?;
        let pe = &self.peakewma;
        choices("peakewma.choices", pe.choices)?;
        positive("peakewma.decay", pe.decay_ms)?;
        non_negative("peakewma.failurePenalty", pe.failure_penalty_ms)?;
        non_negative("peakewma.preferenceMs", pe.preference_ms)?;
        within("boundedhash.factor", self.boundedhash_factor, 1.0..=100.0)?;
        non_negative("orca.blackoutMs", self.orca.blackout_ms)?;
        positive("orca.expirationMs", self.orca.expiration_ms)?;
        positive("orca.updateMs", self.orca.update_ms)?;
        within("orca.errorPenalty", self.orca.error_penalty, 0.0..=100.0)?;
        if !(MIN_MAGLEV_TABLE..=MAX_MAGLEV_TABLE).contains(&self.maglev_table_size) {
            return out("maglev.tableSize", &self.maglev_table_size, "out of range");
        }
        if !is_prime(self.maglev_table_size) {
            return out(
                "maglev.tableSize",
                &self.maglev_table_size,
                "not a prime (each invoker's slot order steps through the table: only a prime \
                 size makes every step visit every slot)",
            );
        }
        if self.zone.as_deref() == Some("") {
            return out(
                "zone",
                &"",
                "empty: leave the zone out (None) for no zone preference",
            );
        }
        percent("zone.minHealthyPercent", self.zone_min_healthy_percent, 1)?;
        if self.subset.key.as_deref() == Some("") {
            return out(
                "subset.key",
                &"",
                "empty: give this consumer's identity (consumers with one key share one subset)",
            );
        }
        percent(
            "subset.minHealthyPercent",
            self.subset.min_healthy_percent,
            1,
        )?;
        let o = &self.outlier;
        percent("outlier.failureRate", o.failure_rate_percent, 0)?;
        positive("outlier.windowMs", o.window_ms)?;
        positive("outlier.minRequests", o.min_requests.into())?;
        positive("outlier.baseEjectionMs", o.base_ejection_ms)?;
        positive("outlier.maxEjectionMs", o.max_ejection_ms)?;
        if o.max_ejection_ms < o.base_ejection_ms {
            return Err(bad(
                "outlier.maxEjectionMs",
                &o.max_ejection_ms.to_string(),
                &format!(
                    "below outlier.baseEjectionMs={} (the longest ejection must be at least \
                     the first)",
                    o.base_ejection_ms
                ),
            ));
        }
        percent("outlier.maxEjectionPercent", o.max_ejection_percent, 0)?;
        let ss = &self.slow_start;
        non_negative("slowstart.windowMs", ss.window_ms)?;
        percent("slowstart.minWeightPercent", ss.min_weight_percent, 1)?;
        within("slowstart.aggression", ss.aggression, 0.1..=10.0)
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
        // A rule's own key at 0 is that rule's "off" (as slowstart.windowMs=0 is slow start's),
        // a setting: only the other outlier keys do nothing while no rule is on.
        let rules = ["outlier.consecutiveFailures", "outlier.failureRate"];
        if let Some(key) = seen
            .iter()
            .find(|k| k.starts_with("outlier.") && !rules.contains(k))
        {
            if !self.outlier.enabled() {
                return fail(
                    key,
                    "has no effect: set outlier.consecutiveFailures or outlier.failureRate to \
                     enable outlier ejection",
                );
            }
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
        if self.subset.size == 0 {
            // subset.size=0 is subsetting's "off", a setting: only the other keys do nothing.
            if let Some(key) = seen
                .iter()
                .find(|k| k.starts_with("subset.") && **k != "subset.size")
            {
                return fail(
                    key,
                    "has no effect without subset.size=<invokers per consumer>",
                );
            }
        } else {
            let indexed = self.subset.index.is_some();
            if self.subset.key.is_none() && !indexed {
                return fail(
                    "subset.size",
                    "needs subset.key=<this consumer's identity> (consumers that share a key \
                     share a subset) or subset.index=<this consumer's index among the consumers>",
                );
            }
            if self.subset.key.is_some() && indexed {
                return fail(
                    "subset.index",
                    "and subset.key are two ways to choose the subset: give one",
                );
            }
            // Dealt subsets are balanced, so load-blind strategies may take them too.
            let takes = if indexed {
                !self.strategy.hashes_keys()
            } else {
                self.strategy.takes_subset()
            };
            if !takes {
                let why = if self.strategy.hashes_keys() {
                    "consumers with different subsets would send one key to different invokers"
                } else {
                    "with subset.key some invokers are in more consumers' subsets than others \
                     (they spread binomially) and a load-blind pick cannot move calls off them; \
                     give subset.index (subsets balanced over the consumers) or use \
                     leastactive, shortestresponse, adaptive, p2c or peakewma"
                };
                return fail(
                    "subset.size",
                    &format!(
                        "does not apply to loadbalance={}: {why}",
                        self.strategy.name()
                    ),
                );
            }
            if given("zone.").is_some() {
                return fail(
                    "zone.minHealthyPercent",
                    "has no effect with subset.size: the subset (taken within the zone) is what \
                     calls prefer; set subset.minHealthyPercent",
                );
            }
            if given("subset.minHealthyPercent").is_some() && !self.outlier.enabled() {
                return fail(
                    "subset.minHealthyPercent",
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
            StrategyKind::Maglev,
            StrategyKind::Orca,
        ] {
            let prefix = format!("{}.", kind.name());
            if let Some(key) = given(&prefix) {
                if self.strategy != kind {
                    return fail(key, &format!("applies to loadbalance={} only", kind.name()));
                }
            }
        }
        if let Some(key) = given("slowstart.") {
            if !self.strategy.has_slow_start() {
                return fail(
                    key,
                    "applies to p2c, peakewma and boundedhash only (Dubbo's strategies keep \
                     Dubbo's warm-up, set per invoker; maglev and rendezvous follow configured \
                     weights only, so that keys do not move while a weight ramps; orca keeps a \
                     new provider at the mean weight through orca.blackoutMs)",
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

/// The values a numeric key accepts where that is narrower than its type's range, as its
/// errors say it (the descriptions in `KEYS` say it too).
fn accepted(key: &str) -> Option<&'static str> {
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

fn bad(key: &str, value: &str, why: &str) -> Error {
    Error::new(
        Status::InvalidConfig,
        // Escaped: user text may hold NUL or control bytes that would cut a C string short.
        format!("config: {key}='{}' is {why}", value.escape_debug()),
    )
}

/// An integer key's type, for the range an error message gives.
trait ConfigInt: std::str::FromStr {
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

fn int<T: ConfigInt>(key: &str, value: &str) -> Result<T, Error> {
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

fn float(key: &str, value: &str) -> Result<f64, Error> {
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

    /// Each field one step outside its range, with the key the error must name. A hand-built
    /// config gets the error the same value in a config string gets.
    #[test]
    fn hand_built_configs_out_of_range_are_errors_naming_the_key() {
        type Break = fn(&mut Config);
        let cases: &[(&str, Break, &str)] = &[
            ("hash.nodes", |c| c.hash_nodes = 3, "hash.nodes=3"),
            ("hash.nodes", |c| c.hash_nodes = 65537, "hash.nodes=65537"),
            ("timeout", |c| c.timeout_ms = -1, "timeout=-1"),
            ("p2c.choices", |c| c.p2c_choices = 1, "p2c.choices=1"),
            ("p2c.choices", |c| c.p2c_choices = 17, "p2c.choices=17"),
            (
                "peakewma.choices",
                |c| c.peakewma.choices = 1,
                "peakewma.choices=1",
            ),
            (
                "peakewma.decay",
                |c| c.peakewma.decay_ms = 0,
                "peakewma.decay=0",
            ),
            (
                "peakewma.failurePenalty",
                |c| c.peakewma.failure_penalty_ms = -1,
                "peakewma.failurePenalty=-1",
            ),
            (
                "peakewma.preferenceMs",
                |c| c.peakewma.preference_ms = -1,
                "peakewma.preferenceMs=-1",
            ),
            (
                "boundedhash.factor",
                |c| c.boundedhash_factor = 0.99,
                "boundedhash.factor=0.99",
            ),
            (
                "boundedhash.factor",
                |c| c.boundedhash_factor = f64::NAN,
                "boundedhash.factor=NaN",
            ),
            ("zone", |c| c.zone = Some(String::new()), ""),
            (
                "zone.minHealthyPercent",
                |c| c.zone_min_healthy_percent = 0,
                "zone.minHealthyPercent=0",
            ),
            (
                "outlier.failureRate",
                |c| c.outlier.failure_rate_percent = 101,
                "outlier.failureRate=101",
            ),
            (
                "outlier.windowMs",
                |c| c.outlier.window_ms = 0,
                "outlier.failureRate=5&outlier.windowMs=0",
            ),
            (
                "outlier.minRequests",
                |c| c.outlier.min_requests = 0,
                "outlier.failureRate=5&outlier.minRequests=0",
            ),
            (
                "outlier.baseEjectionMs",
                |c| c.outlier.base_ejection_ms = 0,
                "outlier.consecutiveFailures=5&outlier.baseEjectionMs=0",
            ),
            (
                "outlier.maxEjectionMs",
                |c| c.outlier.max_ejection_ms = 29_999,
                "outlier.consecutiveFailures=5&outlier.maxEjectionMs=29999",
            ),
            (
                "outlier.maxEjectionPercent",
                |c| c.outlier.max_ejection_percent = 101,
                "outlier.consecutiveFailures=5&outlier.maxEjectionPercent=101",
            ),
            (
                "slowstart.windowMs",
                |c| c.slow_start.window_ms = -1,
                "loadbalance=p2c&slowstart.windowMs=-1",
            ),
            (
                "slowstart.minWeightPercent",
                |c| c.slow_start.min_weight_percent = 0,
                "loadbalance=p2c&slowstart.windowMs=1&slowstart.minWeightPercent=0",
            ),
            (
                "slowstart.aggression",
                |c| c.slow_start.aggression = 10.5,
                "loadbalance=p2c&slowstart.windowMs=1&slowstart.aggression=10.5",
            ),
        ];
        for (key, break_it, text) in cases {
            let mut config = Config::default();
            break_it(&mut config);
            let e = config.validate().unwrap_err();
            assert_eq!(e.status, Status::InvalidConfig, "{key}");
            assert!(e.message.contains(key), "{key}: {}", e.message);
            let e = crate::Balancer::with_config(config).err().expect(key);
            assert!(e.message.contains(key), "{key}: {}", e.message);
            if !text.is_empty() {
                let e = Config::parse(text).unwrap_err();
                assert!(e.message.contains(key), "{text}: {}", e.message);
            }
        }
    }

    /// The edges of every range are accepted, by hand and as text alike.
    #[test]
    fn range_edges_are_accepted() {
        let text = "loadbalance=p2c&hash.nodes=4&p2c.choices=16\
                    &zone=a&zone.minHealthyPercent=1&outlier.failureRate=100&outlier.windowMs=1\
                    &outlier.minRequests=1&outlier.baseEjectionMs=1&outlier.maxEjectionMs=1\
                    &outlier.maxEjectionPercent=0&slowstart.windowMs=1\
                    &slowstart.minWeightPercent=100&slowstart.aggression=0.1";
        let config = Config::parse(text).unwrap();
        assert_eq!(config.hash_nodes, 4);
        config.validate().unwrap();
        Config::parse("loadbalance=boundedhash&boundedhash.factor=100").unwrap();
        let p2c = Config {
            strategy: StrategyKind::P2c,
            hash_nodes: 65536,
            p2c_choices: 0,
            slow_start: SlowStartConfig {
                window_ms: 1,
                aggression: 10.0,
                ..Config::default().slow_start
            },
            ..Config::default()
        };
        let peakewma = Config {
            strategy: StrategyKind::PeakEwma,
            peakewma: PeakEwmaConfig {
                choices: 16,
                failure_penalty_ms: 0,
                ..Config::default().peakewma
            },
            ..Config::default()
        };
        let boundedhash = Config {
            strategy: StrategyKind::BoundedHash,
            boundedhash_factor: 1.0,
            ..Config::default()
        };
        for config in [p2c, peakewma, boundedhash] {
            crate::Balancer::with_config(config).unwrap();
        }
    }

    /// A hand-built config is refused what a config string is refused, options that would do
    /// nothing or harm included (the fields unlike the defaults count as set), and given
    /// what a string gives.
    #[test]
    fn hand_built_configs_are_checked_as_strings_are() {
        type Set = fn(&mut Config);
        let refused: &[(&str, Set, &str)] = &[
            (
                "subset.size",
                |c| {
                    c.strategy = StrategyKind::ConsistentHash;
                    c.subset.size = 4;
                    c.subset.key = Some("a".into());
                },
                "loadbalance=consistenthash&subset.size=4&subset.key=a",
            ),
            (
                "subset.size",
                |c| {
                    c.subset.size = 4;
                    c.subset.key = Some("a".into());
                },
                "subset.size=4&subset.key=a",
            ),
            ("subset.size", |c| c.subset.size = 4, "subset.size=4"),
            (
                "subset.index",
                |c| {
                    c.strategy = StrategyKind::LeastActive;
                    c.subset.size = 4;
                    c.subset.key = Some("a".into());
                    c.subset.index = Some(1);
                },
                "loadbalance=leastactive&subset.size=4&subset.key=a&subset.index=1",
            ),
            (
                "slowstart.windowMs",
                |c| c.slow_start.window_ms = 1000,
                "slowstart.windowMs=1000",
            ),
            (
                "slowstart.windowMs",
                |c| {
                    c.strategy = StrategyKind::Maglev;
                    c.slow_start.window_ms = 1000;
                },
                "loadbalance=maglev&slowstart.windowMs=1000",
            ),
            (
                "p2c.choices",
                |c| {
                    c.strategy = StrategyKind::PeakEwma;
                    c.p2c_choices = 0;
                },
                "loadbalance=peakewma&p2c.choices=0",
            ),
            (
                "outlier.windowMs",
                |c| c.outlier.window_ms = 5,
                "outlier.windowMs=5",
            ),
        ];
        for (key, set, text) in refused {
            let mut config = Config::default();
            set(&mut config);
            let by_hand = crate::Balancer::with_config(config).err().expect(text);
            let by_text = Config::parse(text).unwrap_err();
            assert_eq!(by_hand.status, Status::InvalidConfig, "{text}");
            assert!(by_hand.message.contains(key), "{text}: {}", by_hand.message);
            assert_eq!(by_hand.message, by_text.message, "{text}");
        }
        let text = "loadbalance=leastactive&subset.size=4&subset.index=3&zone=a\
                    &outlier.failureRate=20&outlier.windowMs=5&subset.minHealthyPercent=50";
        let parsed = Config::parse(text).unwrap();
        crate::Balancer::with_config(parsed.clone()).unwrap();
        let mut by_hand = Config {
            strategy: StrategyKind::LeastActive,
            zone: Some("a".into()),
            ..Config::default()
        };
        by_hand.subset.size = 4;
        by_hand.subset.index = Some(3);
        by_hand.subset.min_healthy_percent = 50;
        by_hand.outlier.failure_rate_percent = 20;
        by_hand.outlier.window_ms = 5;
        assert_eq!(by_hand, parsed);
        crate::Balancer::with_config(by_hand).unwrap();
    }

    /// `changed_keys` (what `Config::check` takes as set in a hand-built config) knows every
    /// key: each one set alone is the one changed key.
    #[test]
    fn every_key_set_alone_is_the_one_changed() {
        for (key, _, set) in KEYS {
            let mut config = Config::default();
            set(
                &mut config,
                key,
                if *key == "loadbalance" { "p2c" } else { "7" },
            )
            .unwrap();
            assert_eq!(config.changed_keys(), [*key]);
        }
    }

    /// Left out, the longest ejection is the default or the first ejection, whichever is
    /// longer; given below the first, it is an error naming both.
    #[test]
    fn the_longest_ejection_follows_a_longer_first_one_unless_given() {
        let c =
            Config::parse("outlier.consecutiveFailures=5&outlier.baseEjectionMs=400000").unwrap();
        assert_eq!(
            (c.outlier.base_ejection_ms, c.outlier.max_ejection_ms),
            (400_000, 400_000)
        );
        let c = Config::parse("outlier.consecutiveFailures=5&outlier.baseEjectionMs=1000").unwrap();
        assert_eq!(c.outlier.max_ejection_ms, 300_000);
        let e = Config::parse(
            "outlier.consecutiveFailures=5&outlier.baseEjectionMs=400000\
             &outlier.maxEjectionMs=300000",
        )
        .unwrap_err();
        assert_eq!(
            e.message,
            "config: outlier.maxEjectionMs='300000' is below outlier.baseEjectionMs=400000 (the \
             longest ejection must be at least the first)"
        );
    }

    #[test]
    fn bad_values() {
        for text in [
            "hash.nodes=3",
            "hash.nodes=65537",
            "hash.nodes=x",
            "timeout=0",
            "shortestresponse.slidePeriod=1.5",
            "seed=-1",
            "loadbalance",
            "seed=1&seed=2",
        ] {
            let e = Config::parse(text).unwrap_err();
            assert_eq!(e.status, Status::InvalidConfig, "{text}");
        }
    }

    #[test]
    fn an_integer_out_of_range_is_told_its_range() {
        let e = Config::parse("seed=-1").unwrap_err();
        assert!(
            e.message
                .contains("out of range (accepted: 0..=18446744073709551615)"),
            "{}",
            e.message
        );
        let e = Config::parse("warmup=2147483648").unwrap_err();
        assert!(
            e.message.contains("(accepted: -2147483648..=2147483647)"),
            "{}",
            e.message
        );
        // A key narrower than its type gives its own range, whether the value fits the type
        // or not.
        for (text, range) in [
            ("hash.nodes=-1", "4..=65536"),
            ("hash.nodes=3", "4..=65536"),
            ("hash.nodes=65537", "4..=65536"),
            (
                "loadbalance=p2c&p2c.choices=-3",
                "0 (every candidate) or 2..=16",
            ),
            (
                "loadbalance=p2c&p2c.choices=1",
                "0 (every candidate) or 2..=16",
            ),
            ("outlier.failureRate=-1", "0..=100"),
            ("outlier.failureRate=101", "0..=100"),
            ("timeout=0", "1..=2147483647"),
            (
                "loadbalance=peakewma&peakewma.decay=0",
                "1..=9223372036854775807",
            ),
            (
                "loadbalance=maglev&maglev.tableSize=9",
                "a prime in 7..=16777213",
            ),
            (
                "loadbalance=boundedhash&boundedhash.factor=0.5",
                "1.0..=100",
            ),
        ] {
            let e = Config::parse(text).unwrap_err();
            assert!(
                e.message.ends_with(&format!("(accepted: {range})")),
                "{text}: {}",
                e.message
            );
        }
        let e = Config::parse("hash.nodes=abc").unwrap_err();
        assert!(
            e.message
                .ends_with("is not an integer (accepted: 4..=65536)"),
            "{}",
            e.message
        );
        let e = Config::parse(&format!("seed={}", "9".repeat(40))).unwrap_err();
        assert!(e.message.contains("out of range"), "{}", e.message);
    }
}
