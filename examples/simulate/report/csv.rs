//! results.csv: one row per run.

use super::Report;
use std::fmt::Write as _;

impl Report {
    pub(super) fn csv(&self) -> String {
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
}

fn csv_field(s: &str) -> String {
    if s.contains(',') || s.contains('"') {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}
