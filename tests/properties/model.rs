//! The model.

use crate::common::zone_filter::{filtered, Zoning};
use crate::operations::*;
use crate::options::*;
use polylb::ffi::*;
use polylb::{effective_weight, Invoker};
use std::collections::{BTreeSet, HashMap};

#[derive(Default, Clone, Debug, PartialEq)]
pub(crate) struct Counters {
    selected: u64,
    succeeded: u64,
    failures: u64,
    timeouts: u64,
}

#[derive(Default)]
pub(crate) struct Model {
    /// The balancers' configuration (as parsed).
    pub(crate) config: polylb::Config,
    pub(crate) set: Vec<Inv>,
    pub(crate) methods: Vec<&'static str>,
    pub(crate) counters: HashMap<u64, Counters>,
    /// In flight per (method, id), for ids in the set.
    pub(crate) active: HashMap<(u32, u64), i64>,
    /// Selected and not yet reported, in select order.
    pub(crate) outstanding: Vec<(u32, u64)>,
}

impl Model {
    pub(crate) fn method_id(&self, sel: u8) -> u32 {
        if sel < 245 {
            (sel as usize % self.methods.len()) as u32
        } else {
            self.methods.len() as u32 + (sel - 245) as u32
        }
    }

    pub(crate) fn ew(&self, id: u64, now_us: i64) -> i32 {
        let i = self.set.iter().find(|i| i.id == id).unwrap();
        let warmup = if i.warmup_ms < 0 {
            self.config.warmup_ms
        } else {
            i.warmup_ms
        };
        effective_weight(i.weight, i.start_ms, warmup, now_us.div_euclid(1000))
    }

    pub(crate) fn expected_update(&self, set: &[Invoker]) -> Result<(), i32> {
        let mut seen = BTreeSet::new();
        for i in set {
            if i.id > i64::MAX as u64 {
                return Err(PLB_ERR_ID_OUT_OF_RANGE);
            }
            if i.weight < 0 {
                return Err(PLB_ERR_NEGATIVE_WEIGHT);
            }
            if !seen.insert(i.id) {
                return Err(PLB_ERR_DUPLICATE_ID);
            }
        }
        Ok(())
    }

    pub(crate) fn apply_update(&mut self, set: Vec<Inv>) {
        let ids: BTreeSet<u64> = set.iter().map(|i| i.id).collect();
        self.counters.retain(|id, _| ids.contains(id));
        self.active.retain(|(_, id), _| ids.contains(id));
        for id in &ids {
            self.counters.entry(*id).or_default();
        }
        self.set = set;
    }

    /// Candidates a select may return, or the error it must return.
    pub(crate) fn allowed(&self, m: u32, cands: &[u64], excl: &[u64]) -> Result<Vec<u64>, i32> {
        if m as usize >= self.methods.len() {
            return Err(PLB_ERR_UNKNOWN_METHOD);
        }
        if self.set.is_empty() {
            return Err(PLB_ERR_NO_PROVIDER);
        }
        if cands.iter().any(|c| !self.set.iter().any(|i| i.id == *c)) {
            return Err(PLB_ERR_UNKNOWN_CANDIDATE);
        }
        let allowed: Vec<u64> = self
            .set
            .iter()
            .map(|i| i.id)
            .filter(|id| cands.is_empty() || cands.contains(id))
            .filter(|id| !excl.contains(id))
            .collect();
        if allowed.is_empty() {
            return Err(PLB_ERR_NO_CANDIDATE);
        }
        Ok(allowed)
    }

    /// What outlier ejection and zone preference leave of a pick's `allowed` candidates, with
    /// `ejected` those ejected at the time of the pick: the invokers the pick may return, and
    /// whether the strategy chooses among exactly those (false while the zone preference
    /// draws between the local zone and every healthy invoker).
    pub(crate) fn filtered(&self, allowed: &[u64], ejected: &BTreeSet<u64>) -> (Vec<u64>, bool) {
        let inv = |x: u64| self.set.iter().find(|i| i.id == x).unwrap();
        let zone = self.config.zone.as_deref();
        let is_local = |x: u64| inv(x).zone.map(|z| ZONES[z as usize]) == zone;
        let weighs = |x: u64| inv(x).weight > 0;
        let zoning = zone.map(|_| Zoning {
            is_local: &is_local,
            weighs: &weighs,
            min_healthy_percent: self.config.zone_min_healthy_percent,
            weights_drain: Zoning::weights_drain(self.config.strategy),
        });
        filtered(allowed, ejected, zoning)
    }

    pub(crate) fn selected(&mut self, m: u32, id: u64) {
        *self.active.entry((m, id)).or_default() += 1;
        self.counters.get_mut(&id).unwrap().selected += 1;
        self.outstanding.push((m, id));
    }

    pub(crate) fn reported(&mut self, m: u32, id: u64, outcome: i32) {
        let Some(c) = self.counters.get_mut(&id) else {
            return; // not in the set: accepted and ignored
        };
        match outcome {
            0 => c.succeeded += 1,
            1 => c.failures += 1,
            2 => {
                c.failures += 1;
                c.timeouts += 1;
            }
            _ => {}
        }
        let a = self.active.entry((m, id)).or_default();
        *a = (*a - 1).max(0);
    }

    /// The stats agree with the model, field by field.
    pub(crate) fn check_stats(&self, json: &str, strategy: &str, now: i64) {
        let v: serde_json::Value = serde_json::from_str(json).expect("stats are JSON");
        assert_eq!(v["strategy"], strategy);
        let rows = v["invokers"].as_array().unwrap();
        let ids: Vec<u64> = rows.iter().map(|r| r["id"].as_u64().unwrap()).collect();
        let expected: Vec<u64> = self.set.iter().map(|i| i.id).collect();
        assert_eq!(ids, expected, "stats list the set in update order");
        for (row, inv) in rows.iter().zip(&self.set) {
            let c = &self.counters[&inv.id];
            let active: i64 = self
                .active
                .iter()
                .filter(|((_, id), _)| *id == inv.id)
                .map(|(_, a)| *a)
                .sum();
            let got = |f: &str| row[f].as_i64().unwrap_or_else(|| panic!("{f} in {row}"));
            assert!(got("active") >= 0);
            assert_eq!(got("active"), active, "active of {}: {row}", inv.id);
            assert_eq!(got("selected") as u64, c.selected, "selected: {row}");
            assert_eq!(got("succeeded") as u64, c.succeeded, "succeeded: {row}");
            assert_eq!(got("failures") as u64, c.failures, "failures: {row}");
            assert_eq!(got("timeouts") as u64, c.timeouts, "timeouts: {row}");
            assert_eq!(got("weight"), inv.weight as i64);
            assert_eq!(got("effective_weight"), self.ew(inv.id, now) as i64);
            let config = &self.config;
            if config.zone.is_some() {
                let local = inv.zone.map(|z| ZONES[z as usize]) == config.zone.as_deref();
                assert_eq!(row["local"], local, "local: {row}");
            }
            let slow = &config.slow_start;
            if slow.window_ms > 0 && config.strategy.has_slow_start() {
                let p = row["slow_start_percent"]
                    .as_f64()
                    .expect("slow_start_percent");
                let min = slow.min_weight_percent as f64;
                // Printed with two decimals: allow for the rounding.
                assert!((min - 0.005..=100.0).contains(&p), "slow start {p}: {row}");
            } else {
                assert!(row.get("slow_start_percent").is_none(), "{row}");
            }
            assert_eq!(
                row.get("ejected").is_some(),
                config.outlier.enabled(),
                "{row}"
            );
            let rate_rule = config.outlier.enabled() && config.outlier.failure_rate_percent > 0;
            for field in ["window_requests", "window_failures"] {
                assert_eq!(row.get(field).is_some(), rate_rule, "{field}: {row}");
            }
        }
        if self.config.outlier.enabled() {
            let counted = budget_rows(self.config.strategy, rows.iter());
            let ejected = counted.iter().filter(|r| r["ejected"] == true).count();
            let budget = ejection_budget(counted.len(), self.config.outlier.max_ejection_percent);
            assert!(
                ejected <= budget,
                "{ejected} ejected, budget {budget}: {json}"
            );
        }
    }
}
