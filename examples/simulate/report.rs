//! The report: a text table (stdout), report.md, results.csv, one SVG per (scenario, load,
//! consumers) with latency CDFs and per-provider load over time, and index.html tying them
//! together. SVG is written by hand: polylines and text, no plotting crate.

use crate::engine::{HashResult, PolicySpec, RunResult};
use crate::policy::provider_index;
use crate::scenario::{Action, Scenario};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

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

pub struct Report {
    scenarios: Vec<Scenario>,
    policies: Vec<String>,
    runs: Vec<RunResult>,
    s: Settings,
}

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

pub fn fmt_ms(us: f64) -> String {
    if us.is_nan() {
        return "-".into();
    }
    let ms = us / 1000.0;
    if ms < 10.0 {
        format!("{ms:.2}ms")
    } else if ms < 100.0 {
        format!("{ms:.1}ms")
    } else if ms < 1000.0 {
        format!("{ms:.0}ms")
    } else {
        format!("{:.2}s", ms / 1000.0)
    }
}

pub fn fmt_err(e: f64) -> String {
    if e == 0.0 {
        "-".into()
    } else if e < 0.0001 {
        format!("{:.4}%", e * 100.0)
    } else if e < 0.01 {
        format!("{:.3}%", e * 100.0)
    } else {
        format!("{:.1}%", e * 100.0)
    }
}

fn fmt_ratio(r: f64) -> String {
    if r.is_nan() {
        "".into()
    } else if r < 10.0 {
        format!("{r:.2}x")
    } else {
        format!("{r:.0}x")
    }
}

fn pct(x: f64) -> String {
    format!("{}", (x * 100.0).round())
}

const ORACLES: [&str; 2] = ["oracle-jsq", "oracle-sed"];

/// A goal of the issue: which scenario, what is compared, and the bound.
pub struct Goal {
    pub name: &'static str,
    pub scenario: &'static str,
    pub kind: GoalKind,
}

pub enum GoalKind {
    /// p99 ≤ bound × the better oracle's p99.
    VsOracle(f64),
    /// p99 ≤ bound × random's p99.
    VsRandom(f64),
    /// error rate ≤ bound.
    ErrorRate(f64),
}

pub const GOALS: &[Goal] = &[
    Goal {
        name: "S1 p99<=1.1x oracle",
        scenario: "1",
        kind: GoalKind::VsOracle(1.1),
    },
    Goal {
        name: "S2a p99<=1.25x",
        scenario: "2a",
        kind: GoalKind::VsOracle(1.25),
    },
    Goal {
        name: "S2b p99<=1.25x",
        scenario: "2b",
        kind: GoalKind::VsOracle(1.25),
    },
    Goal {
        name: "S3 p99<=1.1x",
        scenario: "3",
        kind: GoalKind::VsOracle(1.1),
    },
    Goal {
        name: "S4 p99<=1.1x",
        scenario: "4",
        kind: GoalKind::VsOracle(1.1),
    },
    Goal {
        name: "S4 err<=0.01%",
        scenario: "4",
        kind: GoalKind::ErrorRate(0.0001),
    },
    Goal {
        name: "S1 <=0.75x random",
        scenario: "1",
        kind: GoalKind::VsRandom(0.75),
    },
    Goal {
        name: "S3 <=0.05x random",
        scenario: "3",
        kind: GoalKind::VsRandom(0.05),
    },
];

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

    fn runs_of<'a>(
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

    fn ratio(&self, sc: &Scenario, load: f64, consumers: usize, p99: f64) -> f64 {
        let o = self.oracle_p99(sc, load, consumers);
        if o.is_nan() || o <= 0.0 {
            f64::NAN
        } else {
            p99 / o
        }
    }

    fn combos(&self, sc: &Scenario) -> Vec<(f64, usize)> {
        let mut v = Vec::new();
        for &l in &self.s.loads {
            for c in consumer_counts(sc, &self.s.consumers) {
                v.push((l, c));
            }
        }
        v
    }

    fn scenario(&self, id: &str) -> Option<&Scenario> {
        self.scenarios.iter().find(|s| s.id == id)
    }

    /// For one goal and policy: (combos met, combos evaluated), or None when not evaluable.
    pub fn goal_met(&self, goal: &Goal, policy: &str) -> Option<(usize, usize)> {
        let sc = self.scenario(goal.scenario)?;
        let (mut met, mut total) = (0, 0);
        for (load, cons) in self.combos(sc) {
            let c = self.cell(sc, load, cons, policy)?;
            let ok = match goal.kind {
                GoalKind::VsOracle(b) => {
                    let r = self.ratio(sc, load, cons, c.p99);
                    if r.is_nan() {
                        return None;
                    }
                    r <= b
                }
                GoalKind::VsRandom(b) => {
                    let rnd = self.cell(sc, load, cons, "random")?;
                    c.p99 <= b * rnd.p99
                }
                GoalKind::ErrorRate(b) => c.err <= b,
            };
            total += 1;
            if ok {
                met += 1;
            }
        }
        (total > 0).then_some((met, total))
    }

    /// Width of the strategy column: the longest label (options make labels long).
    fn name_width(&self) -> usize {
        self.policies
            .iter()
            .map(|p| p.len())
            .max()
            .unwrap_or(0)
            .max(18)
    }

    fn strategies(&self) -> impl Iterator<Item = &String> {
        self.policies
            .iter()
            .filter(|p| !ORACLES.contains(&p.as_str()))
    }

    pub fn text_table(&self) -> String {
        let nw = self.name_width();
        let mut out = String::new();
        let _ = writeln!(
            out,
            "\npolylb simulator: p99 of successful calls, its ratio to the better oracle \
             (JSQ or SED), error rate{}",
            if self.s.seeds > 1 {
                format!(" (medians over {} seeds)", self.s.seeds)
            } else {
                String::new()
            }
        );
        for sc in &self.scenarios {
            let combos = self.combos(sc);
            let _ = writeln!(out, "\n== {}: {} ==", sc.label(), sc.heading());
            let _ = writeln!(
                out,
                "   load = fraction of {:.0} calls/s ({})",
                sc.capacity_rps,
                sc.capacity_text()
            );
            let _ = write!(out, "{:<nw$}", "strategy");
            for (l, c) in &combos {
                let _ = write!(out, " | {:<22}", format!("{}% x{}c", pct(*l), c));
            }
            out.push('\n');
            for p in &self.policies {
                let _ = write!(out, "{:<nw$}", p);
                for &(l, c) in &combos {
                    match self.cell(sc, l, c, p) {
                        Some(cell) => {
                            let r = if ORACLES.contains(&p.as_str()) {
                                String::new()
                            } else {
                                fmt_ratio(self.ratio(sc, l, c, cell.p99))
                            };
                            let _ = write!(
                                out,
                                " | {:>7} {:>6} {:>7}",
                                fmt_ms(cell.p99),
                                r,
                                fmt_err(cell.err)
                            );
                        }
                        None => {
                            let _ = write!(out, " | {:<22}", "");
                        }
                    }
                }
                out.push('\n');
            }
            if sc.is_hash_scenario() {
                let _ = writeln!(
                    out,
                    "   hashing: max/mean requests per provider before the removal; keys whose \
                     provider changed on removal (what had to: the removed provider's keys)"
                );
                for p in self.policies.iter().filter(|p| p.contains("hash")) {
                    let _ = write!(out, "{:<nw$}", p);
                    for &(l, c) in &combos {
                        match self.cell(sc, l, c, p).and_then(|c| c.hash) {
                            Some(h) => {
                                let _ = write!(
                                    out,
                                    " | {:<22}",
                                    format!(
                                        "{:.2} {:.1}% ({:.1}%)",
                                        h.max_mean,
                                        h.moved * 100.0,
                                        h.ideal_moved * 100.0
                                    )
                                );
                            }
                            None => {
                                let _ = write!(out, " | {:<22}", "");
                            }
                        }
                    }
                    out.push('\n');
                }
            }
        }
        out.push_str(&self.goals_text());
        let mut trimmed: String = out
            .lines()
            .map(|l| l.trim_end())
            .collect::<Vec<_>>()
            .join("\n");
        trimmed.push('\n');
        trimmed
    }

    fn goals_text(&self) -> String {
        let nw = self.name_width();
        let mut out = String::new();
        let _ = writeln!(
            out,
            "\n== Goals: combinations met of (loads x consumer counts) ==",
        );
        let _ = write!(out, "{:<nw$}", "strategy");
        for g in GOALS {
            let _ = write!(out, " {:>w$}", g.name, w = g.name.len().max(5));
        }
        let _ = writeln!(out, " {:>8}", "all");
        for p in self.strategies() {
            let _ = write!(out, "{:<nw$}", p);
            let mut all = Some(true);
            for g in GOALS {
                let w = g.name.len().max(5);
                match self.goal_met(g, p) {
                    Some((m, t)) => {
                        let _ = write!(out, " {:>w$}", format!("{m}/{t}"));
                        if m < t {
                            all = all.map(|_| false);
                        }
                    }
                    None => {
                        let _ = write!(out, " {:>w$}", "n/a");
                        all = None;
                    }
                }
            }
            let _ = writeln!(
                out,
                " {:>8}",
                match all {
                    Some(true) => "YES",
                    Some(false) => "no",
                    None => "n/a",
                }
            );
        }
        out
    }

    fn markdown(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "# polylb simulator report\n");
        let _ = writeln!(
            out,
            "Command: `cargo run --release --example simulate -- {}`  \nSeeds: {} from {}; \
             client timeout {} ms; retries {}; {:.1} s wall on {} threads.\n",
            self.s.command,
            self.s.seeds,
            self.s.seed,
            self.s.timeout_us / 1000,
            self.s.retries,
            self.s.wall_s,
            self.s.jobs
        );
        let _ = writeln!(
            out,
            "Latencies are of successful calls. `/oracle` is p99 divided by the better of the \
             two oracles' p99. Shares are of attempts; utilisation is of worker time.{}\n",
            if self.s.seeds > 1 {
                " Latencies and error rates are medians over seeds, shares and utilisation means; \
                 p99 shows [min-max] over seeds."
            } else {
                ""
            }
        );
        for sc in &self.scenarios {
            let _ = writeln!(out, "## {}: {}\n", sc.label(), sc.heading());
            let _ = writeln!(
                out,
                "Load 1.0 = {:.0} calls/s ({}). Duration {} s.\n",
                sc.capacity_rps,
                sc.capacity_text(),
                sc.duration_us / 1_000_000
            );
            for (l, c) in self.combos(sc) {
                let _ = writeln!(
                    out,
                    "### {}: load {} %, {} consumer(s)\n",
                    sc.label(),
                    pct(l),
                    c
                );
                let _ = write!(
                    out,
                    "| strategy | p50 | p99 | p999 | /oracle | errors | timeouts | share % | util % |"
                );
                if sc.is_hash_scenario() {
                    let _ = write!(out, " max/mean | keys moved (had to) |");
                }
                out.push('\n');
                let _ = write!(out, "|---|---|---|---|---|---|---|---|---|");
                if sc.is_hash_scenario() {
                    let _ = write!(out, "---|---|");
                }
                out.push('\n');
                for p in &self.policies {
                    let Some(cell) = self.cell(sc, l, c, p) else {
                        continue;
                    };
                    let p99 = if cell.seeds > 1 {
                        format!(
                            "{} [{}-{}]",
                            fmt_ms(cell.p99),
                            fmt_ms(cell.p99_min),
                            fmt_ms(cell.p99_max)
                        )
                    } else {
                        fmt_ms(cell.p99)
                    };
                    let ratio = if ORACLES.contains(&p.as_str()) {
                        String::new()
                    } else {
                        fmt_ratio(self.ratio(sc, l, c, cell.p99))
                    };
                    let shares: Vec<String> = cell.shares.iter().map(|&x| pct(x)).collect();
                    let utils: Vec<String> = cell.utils.iter().map(|&x| pct(x)).collect();
                    let _ = write!(
                        out,
                        "| {p} | {} | {p99} | {} | {ratio} | {} | {} | {} | {} |",
                        fmt_ms(cell.p50),
                        fmt_ms(cell.p999),
                        fmt_err(cell.err),
                        fmt_err(cell.timeouts),
                        shares.join("/"),
                        utils.join("/")
                    );
                    if sc.is_hash_scenario() {
                        match (&cell.hash, p.contains("hash")) {
                            (Some(h), true) => {
                                let _ = write!(
                                    out,
                                    " {:.2} | {:.1} % ({:.1} %) |",
                                    h.max_mean,
                                    h.moved * 100.0,
                                    h.ideal_moved * 100.0
                                );
                            }
                            (Some(h), false) => {
                                let _ = write!(out, " {:.2} | - |", h.max_mean);
                            }
                            _ => {
                                let _ = write!(out, " | |");
                            }
                        }
                    }
                    out.push('\n');
                }
                let _ = writeln!(
                    out,
                    "\n![{} {} % {}c]({})\n",
                    sc.label(),
                    pct(l),
                    c,
                    svg_name(sc, l, c)
                );
            }
        }
        let _ = writeln!(out, "## Goals\n");
        let _ = writeln!(
            out,
            "Each cell: (load, consumers) combinations that meet the goal, of those run.\n"
        );
        let _ = write!(out, "| strategy |");
        for g in GOALS {
            let _ = write!(out, " {} |", g.name);
        }
        let _ = writeln!(out, " all |");
        let _ = write!(out, "|---|");
        for _ in GOALS {
            out.push_str("---|");
        }
        out.push_str("---|\n");
        for p in self.strategies() {
            let _ = write!(out, "| {p} |");
            let mut all = Some(true);
            for g in GOALS {
                match self.goal_met(g, p) {
                    Some((m, t)) => {
                        let _ = write!(out, " {m}/{t} |");
                        if m < t {
                            all = all.map(|_| false);
                        }
                    }
                    None => {
                        out.push_str(" n/a |");
                        all = None;
                    }
                }
            }
            let _ = writeln!(
                out,
                " {} |",
                match all {
                    Some(true) => "**yes**",
                    Some(false) => "no",
                    None => "n/a",
                }
            );
        }
        out
    }

    fn csv(&self) -> String {
        let mut out = String::from(
            "scenario,policy,load,consumers,seed,calls,attempts,ok,failures,timeouts,no_provider,error_rate,\
             p50_us,p99_us,p999_us,mean_us,shares,utilisation,max_mean,keys_moved,keys_forced,\
             events,wall_s\n",
        );
        for r in &self.runs {
            let shares: Vec<String> = r
                .providers
                .iter()
                .map(|p| format!("{:.4}", p.share))
                .collect();
            let utils: Vec<String> = r
                .providers
                .iter()
                .map(|p| format!("{:.4}", p.utilisation))
                .collect();
            let (mm, mv, fo) = match &r.hash {
                Some(h) => (
                    format!("{:.4}", h.max_mean),
                    format!("{:.4}", h.moved),
                    format!("{:.4}", h.ideal_moved),
                ),
                None => (String::new(), String::new(), String::new()),
            };
            let _ = writeln!(
                out,
                "{},{},{},{},{},{},{},{},{},{},{},{:.6},{:.0},{:.0},{:.0},{:.0},{},{},{},{},{},{},{:.3}",
                r.scenario,
                csv_field(&r.policy),
                r.load,
                r.consumers,
                r.seed,
                r.calls,
                r.attempts,
                r.ok,
                r.failures,
                r.timeouts,
                r.no_provider,
                r.error_rate(),
                r.p50_us,
                r.p99_us,
                r.p999_us,
                r.mean_us,
                shares.join(";"),
                utils.join(";"),
                mm,
                mv,
                fo,
                r.events,
                r.wall_s
            );
        }
        out
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

    fn svg(&self, sc: &Scenario, load: f64, consumers: usize) -> String {
        let cells: Vec<(&String, Vec<&RunResult>)> = self
            .policies
            .iter()
            .map(|p| (p, self.runs_of(sc, load, consumers, p).collect::<Vec<_>>()))
            .filter(|(_, r)| !r.is_empty())
            .collect();
        let cols = 3usize;
        let panel_w = 390.0;
        let panel_h = 170.0;
        let rows = cells.len().div_ceil(cols);
        let width = 1200.0;
        let cdf_h = 440.0;
        let height = cdf_h + 40.0 + rows as f64 * (panel_h + 30.0) + 20.0;
        let mut s = String::new();
        let _ = write!(
            s,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" \
             viewBox=\"0 0 {width} {height}\" font-family=\"sans-serif\" font-size=\"11\">\
             <rect width=\"100%\" height=\"100%\" fill=\"white\"/>"
        );
        let _ = write!(
            s,
            "<text x=\"20\" y=\"20\" font-size=\"14\" font-weight=\"bold\">{}: {}</text>\
             <text x=\"20\" y=\"37\" font-size=\"12\">load {} % of {:.0} calls/s ({}), {} consumer(s){}; \
             lines: latency CDF of successful calls per strategy, dashed: oracles</text>",
            escape(&sc.label()),
            escape(&sc.heading()),
            pct(load),
            sc.capacity_rps,
            escape(&sc.capacity_text()),
            consumers,
            if self.s.seeds > 1 { ", first seed" } else { "" }
        );
        // Latency CDF, tail scale: y = -log10(1 - q).
        let (x0, y0, w, h) = (70.0, 55.0, 760.0, 335.0);
        let mut lo = f64::INFINITY;
        let mut hi: f64 = 1.0;
        for (_, runs) in &cells {
            let r = runs[0];
            if let Some(&(v, _)) = r.cdf.first() {
                lo = lo.min(v.max(50.0));
            }
            if let Some(&(v, _)) = r.cdf.last() {
                hi = hi.max(v);
            }
        }
        if !lo.is_finite() {
            lo = 100.0;
        }
        let lx0 = (lo / 1000.0).log10().floor();
        let lx1 = ((hi / 1000.0).log10().ceil()).max(lx0 + 1.0);
        let ymax = 4.0;
        let px = |us: f64| x0 + ((us.max(1.0) / 1000.0).log10() - lx0) / (lx1 - lx0) * w;
        let py = |q: f64| {
            let t = if q >= 1.0 {
                ymax
            } else {
                (-(1.0 - q).log10()).min(ymax)
            };
            y0 + h - t / ymax * h
        };
        let _ = write!(
            s,
            "<rect x=\"{x0}\" y=\"{y0}\" width=\"{w}\" height=\"{h}\" fill=\"none\" stroke=\"#888\"/>"
        );
        let mut d = lx0;
        while d <= lx1 + 1e-9 {
            let x = x0 + (d - lx0) / (lx1 - lx0) * w;
            let label = fmt_ms(10f64.powf(d) * 1000.0);
            let _ = write!(
                s,
                "<line x1=\"{x:.1}\" y1=\"{y0}\" x2=\"{x:.1}\" y2=\"{}\" stroke=\"#eee\"/>\
                 <text x=\"{x:.1}\" y=\"{}\" text-anchor=\"middle\">{label}</text>",
                y0 + h,
                y0 + h + 15.0
            );
            d += 1.0;
        }
        for (t, label) in [
            (0.0, "0"),
            (1.0, "p90"),
            (2.0, "p99"),
            (3.0, "p99.9"),
            (4.0, "p99.99"),
        ] {
            let y = y0 + h - t / ymax * h;
            let _ = write!(
                s,
                "<line x1=\"{x0}\" y1=\"{y:.1}\" x2=\"{}\" y2=\"{y:.1}\" stroke=\"#eee\"/>\
                 <text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{label}</text>",
                x0 + w,
                x0 - 5.0,
                y + 4.0
            );
        }
        let _ = write!(
            s,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">latency of successful calls (log scale)</text>\
             <text x=\"20\" y=\"{}\" transform=\"rotate(-90 20 {})\" text-anchor=\"middle\">quantile (tail scale)</text>",
            x0 + w / 2.0,
            y0 + h + 32.0,
            y0 + h / 2.0,
            y0 + h / 2.0
        );
        for (k, (p, runs)) in cells.iter().enumerate() {
            let r = runs[0];
            let (color, dash) = policy_style(p, k);
            let pts: Vec<String> = r
                .cdf
                .iter()
                .map(|&(v, q)| format!("{:.1},{:.1}", px(v), py(q)))
                .collect();
            let _ = write!(
                s,
                "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"1.6\"{dash} points=\"{}\"/>",
                pts.join(" ")
            );
            let ly = y0 + 10.0 + k as f64 * 17.0;
            let lx = x0 + w + 20.0;
            let _ = write!(
                s,
                "<line x1=\"{lx}\" y1=\"{ly}\" x2=\"{}\" y2=\"{ly}\" stroke=\"{color}\" stroke-width=\"2\"{dash}/>\
                 <text x=\"{}\" y=\"{}\">{} p99 {} err {}</text>",
                lx + 22.0,
                lx + 28.0,
                ly + 4.0,
                escape(p),
                fmt_ms(r.p99_us),
                fmt_err(r.error_rate())
            );
        }
        // Per-provider load over time.
        let top = cdf_h + 30.0;
        let _ = write!(
            s,
            "<text x=\"20\" y=\"{top}\" font-size=\"13\" font-weight=\"bold\">Calls per second \
             received by each provider over time (dashed: scenario events)</text>"
        );
        let mut rate_max: f64 = 1.0;
        for (_, runs) in &cells {
            let r = runs[0];
            let bs = r.bucket_us as f64 / 1e6;
            for p in &r.providers {
                for &c in &p.series {
                    rate_max = rate_max.max(c as f64 / bs);
                }
            }
        }
        for (k, (p, runs)) in cells.iter().enumerate() {
            let r = runs[0];
            let col = (k % cols) as f64;
            let row = (k / cols) as f64;
            let (bx, by) = (
                20.0 + col * (panel_w + 5.0) + 45.0,
                top + 20.0 + row * (panel_h + 30.0),
            );
            let (pw, ph) = (panel_w - 60.0, panel_h - 30.0);
            let _ = write!(
                s,
                "<rect x=\"{bx}\" y=\"{by}\" width=\"{pw}\" height=\"{ph}\" fill=\"none\" stroke=\"#888\"/>\
                 <text x=\"{bx}\" y=\"{}\" font-weight=\"bold\">{}</text>\
                 <text x=\"{}\" y=\"{}\" text-anchor=\"end\">{:.0}/s</text>\
                 <text x=\"{}\" y=\"{}\" text-anchor=\"end\">0</text>\
                 <text x=\"{}\" y=\"{}\" text-anchor=\"end\">{:.0} s</text>",
                by - 4.0,
                escape(p),
                bx - 3.0,
                by + 9.0,
                rate_max,
                bx - 3.0,
                by + ph,
                bx + pw,
                by + ph + 13.0,
                r.duration_us as f64 / 1e6
            );
            let dur = r.duration_us as f64;
            for (t, a) in &sc.timeline {
                let x = bx + *t as f64 / dur * pw;
                let what = match a {
                    Action::Join(_) => "join",
                    Action::Leave(_) => "leave",
                    Action::Crash(_) => "crash",
                    Action::Freeze(_) => "freeze",
                    Action::Speed(..) => "speed",
                };
                let _ = write!(
                    s,
                    "<line x1=\"{x:.1}\" y1=\"{by}\" x2=\"{x:.1}\" y2=\"{}\" stroke=\"#999\" stroke-dasharray=\"3,3\"><title>{what}</title></line>",
                    by + ph
                );
            }
            let bs = r.bucket_us as f64 / 1e6;
            for (i, prov) in r.providers.iter().enumerate() {
                let n = prov.series.len().max(1) as f64;
                let pts: Vec<String> = prov
                    .series
                    .iter()
                    .enumerate()
                    .map(|(b, &c)| {
                        let x = bx + (b as f64 + 0.5) / n * pw;
                        let y = by + ph - (c as f64 / bs) / rate_max * ph;
                        format!("{x:.1},{y:.1}")
                    })
                    .collect();
                let _ = write!(
                    s,
                    "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1\" points=\"{}\"><title>provider {}</title></polyline>",
                    PALETTE[i % PALETTE.len()],
                    pts.join(" "),
                    provider_index(i as u64 + 1) + 1
                );
            }
        }
        // Provider colour key.
        let n = cells.first().map_or(0, |(_, r)| r[0].providers.len());
        let ky = height - 12.0;
        for i in 0..n {
            let x = 20.0 + i as f64 * 95.0;
            let _ = write!(
                s,
                "<rect x=\"{x}\" y=\"{}\" width=\"12\" height=\"4\" fill=\"{}\"/><text x=\"{}\" y=\"{ky}\">provider {}</text>",
                ky - 6.0,
                PALETTE[i % PALETTE.len()],
                x + 16.0,
                i + 1
            );
        }
        s.push_str("</svg>\n");
        s
    }
}

const PALETTE: [&str; 12] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf", "#393b79", "#ad494a",
];

fn policy_style(p: &str, k: usize) -> (&'static str, &'static str) {
    match p {
        "oracle-jsq" => ("#000000", " stroke-dasharray=\"6,3\""),
        "oracle-sed" => ("#555555", " stroke-dasharray=\"2,2\""),
        _ => (PALETTE[k % PALETTE.len()], ""),
    }
}

pub fn svg_name(sc: &Scenario, load: f64, consumers: usize) -> String {
    format!(
        "s{}-{}-load{}-c{}.svg",
        sc.id,
        sc.name,
        pct(load),
        consumers
    )
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn csv_field(s: &str) -> String {
    if s.contains(',') || s.contains('"') {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}
