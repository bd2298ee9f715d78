//! The report: a text table (stdout), report.md, results.csv, one SVG per (scenario, load,
//! consumers) with latency CDFs and per-provider load over time, and index.html tying them
//! together. SVG is written by hand: polylines and text, no plotting crate.

mod aggregate;
mod csv;
mod format;
mod goals;
mod markdown;
mod svg;
mod text;

pub use format::load_pct;

use crate::engine::{PolicySpec, RunResult};
use crate::scenario::Scenario;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use svg::{escape, svg_name};

pub struct Settings {
    pub loads: Vec<f64>,
    pub consumers: Vec<usize>,
    pub seeds: u64,
    pub seed: u64,
    pub timeout_us: i64,
    pub retries: u32,
    pub wall_s: f64,
    pub jobs: usize,
    pub command: String,
}

#[cfg(test)]
impl Settings {
    /// One run per cell: 85 % load, one consumer, seed 1, a 1 s timeout, no retries.
    pub fn one_run_for_tests() -> Settings {
        Settings {
            loads: vec![0.85],
            consumers: vec![1],
            seeds: 1,
            seed: 1,
            timeout_us: 1_000_000,
            retries: 0,
            wall_s: 0.0,
            jobs: 1,
            command: String::new(),
        }
    }
}

pub struct Report {
    scenarios: Vec<Scenario>,
    policies: Vec<String>,
    runs: Vec<RunResult>,
    s: Settings,
}

impl Report {
    pub fn new(
        scenarios: &[Scenario],
        policies: &[PolicySpec],
        runs: Vec<RunResult>,
        s: Settings,
    ) -> Report {
        // Keep only policies that produced runs (the library may reject one at run time).
        let policies = policies
            .iter()
            .map(|p| p.label())
            .filter(|l| runs.iter().any(|r| &r.policy == l))
            .collect();
        Report {
            scenarios: scenarios.to_vec(),
            policies,
            runs,
            s,
        }
    }

    /// What the `recommended` rows are, when the report has them: the configuration (in
    /// backticks for Markdown) and why it is there.
    fn recommended_note(&self, markdown: bool) -> Option<(String, &'static str)> {
        let quote = if markdown { "`" } else { "" };
        self.policies.iter().any(|p| p == "recommended").then(|| {
            (
                format!("recommended = {quote}{}{quote}", crate::engine::RECOMMENDED),
                "polylb's configuration for latency-sensitive services; use it with failover \
                 retries: --retries 2",
            )
        })
    }

    /// Writes everything under `dir`; returns the index file.
    pub fn write_files(&self, dir: &Path) -> std::io::Result<PathBuf> {
        std::fs::create_dir_all(dir)?;
        std::fs::write(dir.join("results.csv"), self.csv())?;
        std::fs::write(dir.join("report.md"), self.markdown())?;
        let table = self.text_table();
        std::fs::write(dir.join("table.txt"), &table)?;
        let mut html = String::from(
            "<!doctype html><meta charset=\"utf-8\"><title>polylb simulator</title>\
             <style>body{font-family:sans-serif;margin:2em}pre{font-size:12px}img{max-width:100%}</style>\
             <h1>polylb simulator</h1><p>Full tables: <a href=\"report.md\">report.md</a>, \
             raw runs: <a href=\"results.csv\">results.csv</a>.</p>",
        );
        let _ = write!(html, "<pre>{}</pre>", escape(&table));
        for sc in &self.scenarios {
            let _ = write!(
                html,
                "<h2>{}: {}</h2>",
                escape(&sc.label()),
                escape(&sc.heading())
            );
            for (l, c) in self.combos(sc) {
                let name = svg_name(sc, l, c);
                std::fs::write(dir.join(&name), self.svg(sc, l, c))?;
                let _ = write!(html, "<p><img src=\"{name}\" alt=\"{name}\"></p>");
            }
        }
        let index = dir.join("index.html");
        std::fs::write(&index, html)?;
        Ok(index)
    }
}
