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
        // Text is wrapped to the room it has (a scenario's capacity note, a fleet's heading
        // and strategies with options ran off the page or over the next panel), and what
        // follows it moves down.
        let title = wrap(&format!("{}: {}", sc.label(), sc.heading()), TITLE_CHARS);
        let subtitle = wrap(
            &format!(
                "load {} % of {:.0} calls/s ({}), {} consumer(s){}; lines: latency CDF of \
                 successful calls per strategy, dashed: oracles",
                load_pct(load),
                sc.capacity_rps,
                sc.capacity_text(),
                consumers,
                if self.s.seeds > 1 { ", first seed" } else { "" }
            ),
            SUBTITLE_CHARS,
        );
        let sub_y = 37.0 + 18.0 * (title.len() - 1) as f64;
        let head = sub_y - 37.0 + 15.0 * (subtitle.len() - 1) as f64;
        let legend: Vec<Vec<String>> = cells
            .iter()
            .map(|(p, runs)| {
                let r = runs[0];
                let entry = format!(
                    "{p} p99 {} err {}",
                    fmt_ms(r.p99_us),
                    fmt_err(r.error_rate())
                );
                wrap(&entry, LEGEND_CHARS)
            })
            .collect();
        let legend_h: f64 = legend
            .iter()
            .map(|l| 17.0 + 13.0 * (l.len() - 1) as f64)
            .sum();
        // The legend starts 10 px into the plot (at 55 + head) and ends before the panels.
        let cdf_h = (440.0 + head).max(55.0 + head + 10.0 + legend_h + 15.0);
        let title_lines = cells
            .iter()
            .map(|(p, _)| wrap(p, PANEL_TITLE_CHARS).len())
            .max()
            .unwrap_or(1);
        let title_extra = 13.0 * (title_lines - 1) as f64;
        let row_h = panel_h + 30.0 + title_extra;
        let n = cells.first().map_or(0, |(_, r)| r[0].providers.len());
        let key_extra = if n > PALETTE.len() { 14.0 } else { 0.0 };
        let height = cdf_h + 60.0 + rows as f64 * row_h + key_extra;
        let mut s = String::new();
        let _ = write!(
            s,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" \
             viewBox=\"0 0 {width} {height}\" font-family=\"sans-serif\" font-size=\"11\">\
             <rect width=\"100%\" height=\"100%\" fill=\"white\"/>"
        );
        for (i, line) in title.iter().enumerate() {
            let _ = write!(
                s,
                "<text x=\"20\" y=\"{}\" font-size=\"14\" font-weight=\"bold\">{}</text>",
                20.0 + 18.0 * i as f64,
                escape(line)
            );
        }
        for (i, line) in subtitle.iter().enumerate() {
            let _ = write!(
                s,
                "<text x=\"20\" y=\"{}\" font-size=\"12\">{}</text>",
                sub_y + 15.0 * i as f64,
                escape(line)
            );
        }
        // Latency CDF, tail scale: y = -log10(1 - q).
        let (x0, y0, w, h) = (70.0, 55.0 + head, 760.0, 335.0);
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
        let mut ly = y0 + 10.0;
        for (k, ((p, runs), entry)) in cells.iter().zip(&legend).enumerate() {
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
            let lx = x0 + w + 20.0;
            let _ = write!(
                s,
                "<line x1=\"{lx}\" y1=\"{ly}\" x2=\"{}\" y2=\"{ly}\" stroke=\"{color}\" stroke-width=\"2\"{dash}/>",
                lx + 22.0,
            );
            for line in entry {
                let _ = write!(
                    s,
                    "<text x=\"{}\" y=\"{}\">{}</text>",
                    lx + 28.0,
                    ly + 4.0,
                    escape(line)
                );
                ly += 13.0;
            }
            ly += 4.0;
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
                top + 20.0 + title_extra + row * row_h,
            );
            let (pw, ph) = (panel_w - 60.0, panel_h - 30.0);
            let name = wrap(p, PANEL_TITLE_CHARS);
            for (i, line) in name.iter().enumerate() {
                let _ = write!(
                    s,
                    "<text x=\"{bx}\" y=\"{}\" font-weight=\"bold\">{}</text>",
                    by - 4.0 - 13.0 * (name.len() - 1 - i) as f64,
                    escape(line)
                );
            }
            let _ = write!(
                s,
                "<rect x=\"{bx}\" y=\"{by}\" width=\"{pw}\" height=\"{ph}\" fill=\"none\" stroke=\"#888\"/>\
                 <text x=\"{}\" y=\"{}\" text-anchor=\"end\">{:.0}/s</text>\
                 <text x=\"{}\" y=\"{}\" text-anchor=\"end\">0</text>\
                 <text x=\"{}\" y=\"{}\" text-anchor=\"end\">{} s</text>",
                bx - 3.0,
                by + 9.0,
                rate_max,
                bx - 3.0,
                by + ph,
                bx + pw,
                by + ph + 13.0,
                fmt_secs(r.duration_us)
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
        let ky = height - 12.0 - key_extra;
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
                "<text x=\"20\" y=\"{}\">… colours repeat every {} providers (a line's \
                 tooltip names its provider)</text>",
                ky + key_extra,
                PALETTE.len()
            );
        }
        s.push_str("</svg>\n");
        s
    }
}

/// Characters per line of the title (bold, 14 px), the subtitle (12 px), a legend entry (right
/// of the CDF, 11 px) and a panel's title (bold, 11 px), from the room each has.
const TITLE_CHARS: usize = 130;
const SUBTITLE_CHARS: usize = 165;
const LEGEND_CHARS: usize = 44;
const PANEL_TITLE_CHARS: usize = 50;

/// `text` in lines of at most `max` characters, broken before a `&` (a strategy's options),
/// after a `,` or `;`, or at a space; a word longer than a line is cut.
fn wrap(text: &str, max: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut rest = text.trim();
    while rest.chars().count() > max {
        let cut = rest.char_indices().nth(max).map_or(rest.len(), |(i, _)| i);
        let head = &rest[..cut + rest[cut..].chars().next().map_or(0, char::len_utf8)];
        // (end of this line, start of the next), the last break that leaves a line.
        let brk = head
            .char_indices()
            .rev()
            .filter_map(|(i, c)| match c {
                '&' if i > 0 && i <= cut => Some((i, i)),
                ' ' if i > 0 => Some((i, i + 1)),
                ',' | ';' if i < cut => Some((i + 1, i + 1)),
                _ => None,
            })
            .next()
            .unwrap_or((cut, cut));
        lines.push(rest[..brk.0].trim_end().to_string());
        rest = rest[brk.1..].trim_start();
    }
    lines.push(rest.to_string());
    lines
}

/// A run's length for an axis: 15 s, 0.5 s (`{:.0}` read 0.5 s as 0 s).
fn fmt_secs(us: i64) -> String {
    let s = format!("{:.3}", us as f64 / 1e6);
    s.trim_end_matches('0').trim_end_matches('.').to_string()
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
        report_of(sc, labels, cdf)
    }

    fn report_of(sc: Scenario, labels: &[&str], cdf: &[(f64, f64)]) -> (Report, Scenario) {
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
        let settings = Settings::one_run_for_tests();
        (
            Report::new(std::slice::from_ref(&sc), &policies, runs, settings),
            sc,
        )
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

    /// A `<text>` element: x, y, font size, bold, anchored at its start, and its text.
    struct Text {
        x: f64,
        y: f64,
        size: f64,
        bold: bool,
        start: bool,
        text: String,
    }

    fn texts(svg: &str) -> Vec<Text> {
        let attr = |tag: &str, name: &str| -> Option<String> {
            let from = tag.find(&format!(" {name}=\""))? + name.len() + 3;
            Some(tag[from..from + tag[from..].find('"')?].to_string())
        };
        svg.split("<text ")
            .skip(1)
            .map(|t| {
                let (tag, rest) = t.split_once('>').unwrap();
                let tag = &format!(" {tag}");
                let text = rest[..rest.find("</text>").unwrap()]
                    .replace("&lt;", "<")
                    .replace("&gt;", ">")
                    .replace("&quot;", "\"")
                    .replace("&amp;", "&");
                Text {
                    x: attr(tag, "x").unwrap().parse().unwrap(),
                    y: attr(tag, "y").unwrap().parse().unwrap(),
                    size: attr(tag, "font-size").map_or(11.0, |v| v.parse().unwrap()),
                    bold: attr(tag, "font-weight").is_some(),
                    start: attr(tag, "text-anchor").is_none(),
                    text,
                }
            })
            .collect()
    }

    /// Text ran off the page or over its neighbour: scenario 6's capacity note in every
    /// subtitle of the default run, a fleet's heading, a strategy with options in the legend
    /// and over the next panel's title, and the note that colours repeat (over the key).
    /// Widths are estimated at 0.55 em a character (0.6 bold), above DejaVu Sans's average.
    #[test]
    fn text_stays_on_the_page_and_off_its_neighbours() {
        let long =
            "peakewma&peakewma.choices=0&peakewma.preferenceMs=1000&outlier.consecutiveFailures=5";
        let labels = [
            "recommended",
            long,
            "leastactive",
            "oracle-jsq",
            "oracle-sed",
        ];
        let cdf = [(100.0, 0.0), (900.0, 0.5), (20_000.0, 1.0)];
        let model = Model::default();
        for sc in [
            build("6", Some(2_000_000), &model).unwrap(),
            build("8", Some(2_000_000), &model)
                .unwrap()
                .copied(4)
                .unwrap(),
            build("2a", Some(2_000_000), &model).unwrap(),
        ] {
            let (rep, sc) = report_of(sc, &labels, &cdf);
            let svg = rep.svg(&sc, 0.85, 1);
            let height: f64 = svg
                .split("height=\"")
                .nth(1)
                .unwrap()
                .split('"')
                .next()
                .unwrap()
                .parse()
                .unwrap();
            let texts = texts(&svg);
            let right = |t: &Text| {
                let em = if t.bold { 0.6 } else { 0.55 };
                t.x + em * t.size * t.text.chars().count() as f64
            };
            for t in texts.iter().filter(|t| t.start) {
                assert!(
                    right(t) <= 1200.0,
                    "{}: '{}' ends at {:.0}",
                    sc.label(),
                    t.text,
                    right(t)
                );
                assert!(t.y <= height, "{}: '{}' below the page", sc.label(), t.text);
                for u in texts
                    .iter()
                    .filter(|u| u.start && u.x > t.x && (u.y - t.y).abs() < 1.0)
                {
                    assert!(
                        right(t) <= u.x,
                        "{}: '{}' runs into '{}'",
                        sc.label(),
                        t.text,
                        u.text
                    );
                }
            }
            // Every part of the long label is there, in order.
            let legend: String = texts
                .iter()
                .filter(|t| t.x == 878.0)
                .map(|t| t.text.as_str())
                .collect();
            assert!(legend.contains(long), "{legend}");
        }
    }

    #[test]
    fn wrap_breaks_before_options_and_at_spaces() {
        assert_eq!(super::wrap("random", 10), ["random"]);
        assert_eq!(
            super::wrap("peakewma&peakewma.choices=0&x=1", 20),
            ["peakewma", "&peakewma.choices=0", "&x=1"]
        );
        assert_eq!(super::wrap("one two, three", 9), ["one two,", "three"]);
        assert_eq!(super::wrap("abcdefghij", 4), ["abcd", "efgh", "ij"]);
    }

    /// A run shorter than a second was labelled "0 s" (`{:.0}`).
    #[test]
    fn a_short_run_is_labelled_by_its_length() {
        let (rep, sc) = report("2a", 0.5, &["random"], &[(100.0, 0.0), (900.0, 1.0)]);
        let svg = rep.svg(&sc, 0.85, 1);
        assert!(svg.contains(">0.5 s</text>"));
        assert_eq!(super::fmt_secs(15_000_000), "15");
        assert_eq!(super::fmt_secs(2_250_000), "2.25");
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
