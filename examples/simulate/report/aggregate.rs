//! Runs aggregated over seeds: one cell per (scenario, load, consumers, policy), and the
//! better oracle's p99 that strategies are compared with.

use super::Report;
use crate::engine::{HashResult, RunResult};
use crate::scenario::Scenario;

/// One (scenario, load, consumers, policy), aggregated over seeds (medians of latencies and
/// error rates, means of shares and utilisation; spread of p99).
#[derive(Clone, Debug)]
pub struct Cell {
    pub p50: f64,
    pub p99: f64,
    pub p999: f64,
    pub p99_min: f64,
    pub p99_max: f64,
    pub err: f64,
    pub timeouts: f64,
    pub shares: Vec<f64>,
    pub utils: Vec<f64>,
    pub hash: Option<HashResult>,
    pub seeds: usize,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.retain(|x| !x.is_nan());
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        0.5 * (v[n / 2 - 1] + v[n / 2])
    }
}

pub fn consumer_counts(sc: &Scenario, consumers: &[usize]) -> Vec<usize> {
    let mut c: Vec<usize> = consumers.iter().map(|&c| c.max(sc.min_consumers)).collect();
    c.sort_unstable();
    c.dedup();
    c
}

pub(super) const ORACLES: [&str; 2] = ["oracle-jsq", "oracle-sed"];

impl Report {
    pub(super) fn runs_of<'a>(
        &'a self,
        sc: &'a Scenario,
        load: f64,
        consumers: usize,
        policy: &'a str,
    ) -> impl Iterator<Item = &'a RunResult> + 'a {
        let label = sc.label();
        self.runs.iter().filter(move |r| {
            r.scenario == label && r.load == load && r.consumers == consumers && r.policy == policy
        })
    }

    pub fn cell(&self, sc: &Scenario, load: f64, consumers: usize, policy: &str) -> Option<Cell> {
        let runs: Vec<&RunResult> = self.runs_of(sc, load, consumers, policy).collect();
        if runs.is_empty() {
            return None;
        }
        let m = |f: &dyn Fn(&RunResult) -> f64| median(runs.iter().map(|r| f(r)).collect());
        let n = runs[0].providers.len();
        let mean_over = |f: &dyn Fn(&RunResult, usize) -> f64| -> Vec<f64> {
            (0..n)
                .map(|i| runs.iter().map(|r| f(r, i)).sum::<f64>() / runs.len() as f64)
                .collect()
        };
        let p99s: Vec<f64> = runs.iter().map(|r| r.p99_us).collect();
        let hash = runs[0].hash.as_ref().map(|_| HashResult {
            max_mean: m(&|r| r.hash.as_ref().map_or(f64::NAN, |h| h.max_mean)),
            moved: m(&|r| r.hash.as_ref().map_or(f64::NAN, |h| h.moved)),
            ideal_moved: m(&|r| r.hash.as_ref().map_or(f64::NAN, |h| h.ideal_moved)),
        });
        Some(Cell {
            p50: m(&|r| r.p50_us),
            p99: m(&|r| r.p99_us),
            p999: m(&|r| r.p999_us),
            p99_min: p99s.iter().copied().fold(f64::INFINITY, f64::min),
            p99_max: p99s.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            err: m(&|r| r.error_rate()),
            timeouts: m(&|r| r.timeouts as f64 / r.calls.max(1) as f64),
            shares: mean_over(&|r, i| r.providers[i].share),
            utils: mean_over(&|r, i| r.providers[i].utilisation),
            hash,
            seeds: runs.len(),
        })
    }

    /// The better (lower) oracle p99 for a (scenario, load, consumers).
    pub fn oracle_p99(&self, sc: &Scenario, load: f64, consumers: usize) -> f64 {
        ORACLES
            .iter()
            .filter_map(|o| self.cell(sc, load, consumers, o))
            .map(|c| c.p99)
            .fold(f64::NAN, f64::min)
    }

    pub(super) fn ratio(&self, sc: &Scenario, load: f64, consumers: usize, p99: f64) -> f64 {
        let o = self.oracle_p99(sc, load, consumers);
        if o.is_nan() || o <= 0.0 {
            f64::NAN
        } else {
            p99 / o
        }
    }

    pub(super) fn combos(&self, sc: &Scenario) -> Vec<(f64, usize)> {
        let mut v = Vec::new();
        for &l in &self.s.loads {
            for c in consumer_counts(sc, &self.s.consumers) {
                v.push((l, c));
            }
        }
        v
    }

    pub(super) fn scenario(&self, id: &str) -> Option<&Scenario> {
        self.scenarios.iter().find(|s| s.id == id)
    }

    pub(super) fn strategies(&self) -> impl Iterator<Item = &String> {
        self.policies
            .iter()
            .filter(|p| !ORACLES.contains(&p.as_str()))
    }
}
