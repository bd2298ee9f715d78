//! report.md: the full tables per scenario, load and consumer count, then the goals.

use super::aggregate::ORACLES;
use super::format::{fmt_err, fmt_ms, fmt_ratio_against, load_pct, pct};
use super::goals::{oracle_bound, GOALS};
use super::svg::svg_name;
use super::Report;
use std::fmt::Write as _;

impl Report {
    pub(super) fn markdown(&self) -> String {
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
        if let Some((what, why)) = self.recommended_note(true) {
            let _ = writeln!(out, "{what}: {why}.\n");
        }
        for sc in &self.scenarios {
            let _ = writeln!(out, "## {}: {}\n", sc.label(), sc.heading());
            let _ = writeln!(
                out,
                "Load 1.0 = {:.0} calls/s ({}). Duration {} s.\n",
                sc.capacity_rps,
                sc.capacity_text(),
                sc.duration_us as f64 / 1e6
            );
            for (l, c) in self.combos(sc) {
                let _ = writeln!(
                    out,
                    "### {}: load {} %, {} consumer(s)\n",
                    sc.label(),
                    load_pct(l),
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
                        fmt_ratio_against(self.ratio(sc, l, c, cell.p99), oracle_bound(sc.id))
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
                        match (&cell.hash, crate::engine::hashes_keys(p)) {
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
                    load_pct(l),
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
}
