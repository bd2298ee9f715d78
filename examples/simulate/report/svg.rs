//! One SVG per (scenario, load, consumers): latency CDFs, then per-provider load over time.

use super::format::{fmt_err, fmt_ms, load_pct};
use super::Report;
use crate::engine::RunResult;
use crate::policy::provider_index;
use crate::scenario::{Action, Scenario};
use std::fmt::Write as _;

impl Report {
    pub(super) fn svg(&self, sc: &Scenario, load: f64, consumers: usize) -> String {
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
            load_pct(load),
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
        // The axis starts at a power of ten at or below 50 µs, not at the fastest call: a
        // latency below it (exponential or widely spread service times have calls of a few
        // µs) is drawn on the left edge, not left of the plot and off the page.
        let axis_lo_us = 10f64.powf(lx0) * 1000.0;
        let px = |us: f64| x0 + ((us.max(axis_lo_us) / 1000.0).log10() - lx0) / (lx1 - lx0) * w;
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
        // Provider colour key: one row of the palette's colours (they repeat beyond it; each
        // line's title names its provider).
        let n = cells.first().map_or(0, |(_, r)| r[0].providers.len());
        let ky = height - 12.0;
        for i in 0..n.min(PALETTE.len()) {
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
        if n > PALETTE.len() {
            let _ = write!(
                s,
                "<text x=\"{}\" y=\"{ky}\">… colours repeat every {} providers (a line's \
                 tooltip names its provider)</text>",
                20.0 + PALETTE.len() as f64 * 95.0 - 60.0,
                PALETTE.len()
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
        // Past the palette, the colours come round again with another dash: `recommended`,
        // the 13th default strategy, is not drawn as `random`, the first, is.
        _ => (
            PALETTE[k % PALETTE.len()],
            CYCLE_DASHES[(k / PALETTE.len()) % CYCLE_DASHES.len()],
        ),
    }
}

const CYCLE_DASHES: [&str; 3] = [
    "",
    " stroke-dasharray=\"10,3,2,3\"",
    " stroke-dasharray=\"1,2\"",
];

pub fn svg_name(sc: &Scenario, load: f64, consumers: usize) -> String {
    format!(
        "s{}-{}-load{}-c{}.svg",
        sc.id,
        sc.name,
        load_pct(load),
        consumers
    )
}

pub(super) fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use crate::engine::{PolicySpec, ProviderResult, RunResult};
    use crate::report::{Report, Settings};
    use crate::scenario::{build, Model, Scenario};

    /// A report of one (scenario, load, consumers) with a run per label, each with `cdf`.
    fn report(id: &str, secs: f64, labels: &[&str], cdf: &[(f64, f64)]) -> (Report, Scenario) {
        let sc = build(id, Some((secs * 1e6) as i64), &Model::default()).unwrap();
        let policies: Vec<PolicySpec> = labels.iter().map(|p| PolicySpec::parse(p)).collect();
        let buckets = 120;
        let runs = labels
            .iter()
            .map(|p| RunResult {
                scenario: sc.label(),
                policy: p.to_string(),
                load: 0.85,
                consumers: 1,
                seed: 1,
                duration_us: sc.duration_us,
                calls: 1000,
                ok: 999,
                failures: 1,
                attempts: 1000,
                p50_us: 1000.0,
                p99_us: 5000.0,
                p999_us: 9000.0,
                mean_us: 1200.0,
                cdf: cdf.to_vec(),
                providers: (0..sc.providers.len())
                    .map(|i| ProviderResult {
                        share: 1.0 / sc.providers.len() as f64,
                        utilisation: 0.85,
                        series: (0..buckets as u32)
                            .map(|b| 10 + (b + i as u32) % 7)
                            .collect(),
                    })
                    .collect(),
                bucket_us: sc.duration_us / buckets,
                ..RunResult::default()
            })
            .collect();
        let settings = Settings {
            loads: vec![0.85],
            consumers: vec![1],
            seeds: 1,
            seed: 1,
            timeout_us: 1_000_000,
            retries: 0,
            wall_s: 0.0,
            jobs: 1,
            command: String::new(),
        };
        (Report::new(&[sc.clone()], &policies, runs, settings), sc)
    }

    /// The numbers of every `points` list of the polylines whose tag starts as `open` does.
    fn polyline_points(svg: &str, open: &str) -> Vec<(f64, f64)> {
        let mut out = Vec::new();
        for line in svg.split("<polyline").skip(1) {
            if !line.starts_with(open) {
                continue;
            }
            let pts = line.split("points=\"").nth(1).unwrap();
            let pts = &pts[..pts.find('"').unwrap()];
            for p in pts.split_whitespace() {
                let (x, y) = p.split_once(',').unwrap();
                out.push((x.parse().unwrap(), y.parse().unwrap()));
            }
        }
        out
    }

    /// Calls faster than the axis's first decade (exponential service times, or a wide
    /// lognormal: a few µs) were drawn left of the plot, down to x = -120 (off the page).
    #[test]
    fn a_latency_below_the_axis_stays_on_the_plot() {
        let cdf = [
            (0.0, 0.0),
            (3.0, 0.045),
            (40.0, 0.09),
            (900.0, 0.5),
            (20_000.0, 1.0),
        ];
        let (rep, sc) = report("2a", 1.0, &["random", "oracle-jsq"], &cdf);
        let svg = rep.svg(&sc, 0.85, 1);
        // The CDF's polylines carry no title (the per-provider ones do).
        let pts = polyline_points(&svg, " fill=\"none\" stroke=\"");
        let cdf_pts: Vec<_> = pts.iter().filter(|&&(_, y)| y <= 390.0).collect();
        assert!(!cdf_pts.is_empty());
        for &&(x, y) in &cdf_pts {
            // The plot: x 70..830, y 55..390.
            assert!(
                (70.0..=830.0).contains(&x) && (55.0..=390.0).contains(&y),
                "({x}, {y})"
            );
        }
    }

    /// Each of the default run's 13 strategies is drawn its own way (the palette has 12
    /// colours: `recommended` was drawn as `random`).
    #[test]
    fn every_default_strategy_is_drawn_its_own_way() {
        let styles: Vec<_> = (0..13).map(|k| super::policy_style("x", k)).collect();
        for (i, a) in styles.iter().enumerate() {
            assert!(
                !styles[..i].contains(a),
                "strategy {i} is drawn as an earlier one"
            );
        }
    }
}
