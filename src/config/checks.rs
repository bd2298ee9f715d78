//! The checks of a whole config: each value within its range ([`Config::validate`]) and no
//! option that would do nothing or harm ([`Config::check_options`]).

use super::values::{accepted, bad};
use super::{Config, MAX_MAGLEV_TABLE, MIN_MAGLEV_TABLE};
use crate::error::{Error, Status};
use crate::strategy::StrategyKind;

impl Config {
    /// What [`crate::Balancer::with_config`] checks of a hand-built config: [`Config::validate`],
    /// then the options `parse` rejects as doing nothing or harm (a subset with a key-hashing
    /// strategy, `slowstart.*` with `random`, …), taking as set the fields that differ from
    /// [`Config::default`] (a struct cannot say which were set on purpose). So a longest
    /// ejection left at its default follows a longer first one, as in a config string that
    /// leaves `outlier.maxEjectionMs` out.
    pub fn check(&self) -> Result<(), Error> {
        self.clone().settled().validate()?;
        self.check_options(&self.changed_keys())
    }

    /// The keys whose fields differ from the defaults.
    pub(super) fn changed_keys(&self) -> Vec<&'static str> {
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
        self.validate_as_written(&[])
    }

    /// [`Config::validate`], an error quoting a value as `written` (key, text) where the
    /// key is there, else as the field's value prints.
    pub(crate) fn validate_as_written(&self, written: &[(&str, &str)]) -> Result<(), Error> {
        let out = |key: &str, value: &dyn std::fmt::Display, why: &str| {
            let why = match accepted(key) {
                Some(range) => format!("{why} (accepted: {range})"),
                None => why.to_string(),
            };
            let value = written
                .iter()
                .find(|(k, _)| *k == key)
                .map_or_else(|| value.to_string(), |(_, text)| text.to_string());
            Err(bad(key, &value, &why))
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
    pub(super) fn check_options(&self, seen: &[&str]) -> Result<(), Error> {
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
}

/// Trial division: table sizes are at most 2^24, so at most 2^11 divisions.
fn is_prime(n: u32) -> bool {
    n >= 2 && (2..).take_while(|d| d * d <= n).all(|d| n % d != 0)
}
