#![allow(dead_code)]
//! Helpers shared by the integration tests.

pub mod built;
mod dubbo_round_robin;
pub mod splitmix;
pub mod zone_filter;

#[allow(unused_imports)] // not every test binary models round robin
pub use dubbo_round_robin::{recycle_edges, DubboRoundRobin};
#[allow(unused_imports)] // not every test binary draws sequences
pub use splitmix::SplitMix;

use polylb::{Balancer, Invoker};
use std::path::PathBuf;

/// The conformance vector files: the copy in tests/vectors and every file the project's shared
/// folder holds beside the checkout (where a larger set may be dropped).
pub fn vector_files() -> Vec<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in [root.join("tests/vectors"), root.join("../shared/vectors")] {
        if let Ok(entries) = std::fs::read_dir(&dir) {
            let mut found: Vec<PathBuf> = entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "json"))
                .collect();
            found.sort();
            files.extend(found);
        }
    }
    assert!(!files.is_empty(), "no vector files found");
    files
}

pub fn provider(n: u64) -> Invoker {
    Invoker::new(n, format!("10.0.0.{n}:20880"))
}

pub fn balancer(config: &str, invokers: &[Invoker]) -> Balancer {
    let b = Balancer::new(config).unwrap();
    b.update(invokers).unwrap();
    b
}

pub fn stat(b: &Balancer, now_us: i64, id: u64, field: &str) -> i64 {
    stat_value(b, now_us, id, field).as_i64().unwrap()
}

/// A field of one invoker's row in the stats, as JSON (`null` when absent).
pub fn stat_value(b: &Balancer, now_us: i64, id: u64, field: &str) -> serde_json::Value {
    let v: serde_json::Value = serde_json::from_str(&b.stats_json(now_us)).unwrap();
    v["invokers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["id"].as_u64() == Some(id))
        .unwrap_or_else(|| panic!("id {id} not in stats"))[field]
        .clone()
}

/// A field of one invoker's row for one method (by name; method 0 is "") in the stats.
pub fn method_stat(b: &Balancer, now_us: i64, id: u64, method: &str, field: &str) -> i64 {
    let v: serde_json::Value = serde_json::from_str(&b.stats_json(now_us)).unwrap();
    let row = v["invokers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["id"].as_u64() == Some(id))
        .unwrap_or_else(|| panic!("id {id} not in stats"));
    row["methods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["method"] == method)
        .unwrap_or_else(|| panic!("method {method:?} not in the row of {id}: {row}"))[field]
        .as_i64()
        .unwrap_or_else(|| panic!("no integer {field} in the row of {id}: {row}"))
}

/// Counts picks per id over `draws` selects, reporting each as a success at once.
pub fn counts(
    b: &Balancer,
    method: u32,
    draws: usize,
    now_us: i64,
) -> std::collections::BTreeMap<u64, usize> {
    let mut c = std::collections::BTreeMap::new();
    for _ in 0..draws {
        let id = b.select(method, b"", now_us).unwrap();
        b.report(method, id, 1000, polylb::Outcome::Success, now_us)
            .unwrap();
        *c.entry(id).or_default() += 1;
    }
    c
}

/// Asserts `count` is within `sigmas` binomial standard deviations of `draws * p`.
pub fn assert_binomial(count: usize, draws: usize, p: f64, sigmas: f64, what: &str) {
    let mean = draws as f64 * p;
    let sd = (draws as f64 * p * (1.0 - p)).sqrt().max(1.0);
    assert!(
        (count as f64 - mean).abs() <= sigmas * sd,
        "{what}: {count} picks, expected {mean:.1} ± {:.1}",
        sigmas * sd
    );
}

/// A small fixed-seed generator for tests that draw their own inputs (Knuth's MMIX LCG, the
/// high bits).
pub struct Lcg(pub u64);
impl Lcg {
    pub fn next(&mut self, bound: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % bound
    }
}
