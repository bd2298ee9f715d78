//! The text table printed on stdout (and written to table.txt), goals included.

use super::aggregate::ORACLES;
use super::format::{fmt_err, fmt_ms, fmt_ratio_against, load_pct};
use super::goals::{oracle_bound, GOALS};
use super::Report;
use std::fmt::Write as _;

impl Report {
    /// Width of the strategy column: the longest label (options make labels long).
    fn name_width(&self) -> usize {
        self.policies
            .iter()
            .map(|p| p.len())
            .max()
            .unwrap_or(0)
            .max(18)
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
        if let Some((what, why)) = self.recommended_note(false) {
            let _ = writeln!(out, "{what}\n   ({why})");
        }
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
                let _ = write!(out, " | {:<22}", format!("{}% x{}c", load_pct(*l), c));
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
                                fmt_ratio_against(
                                    self.ratio(sc, l, c, cell.p99),
                                    oracle_bound(sc.id),
                                )
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
                for p in self
                    .policies
                    .iter()
                    .filter(|p| crate::engine::hashes_keys(p))
                {
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
}
