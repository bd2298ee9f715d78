//! The interplay of options: every strategy with a random valid combination of the cross-cutting
//! options (zone, outlier ejection, warm-up, slow start, subsets, weight 0, candidates and
//! exclusions, methods), driven by seeded random sequences through the public Rust API, checked
//! against what README.md and docs/strategies.md promise after every pick. A twin balancer with
//! the same config receives every call but the rejected ones: its picks and stats must stay
//! identical (a rejected call changes nothing).

mod common;

use common::SplitMix as Gen;
use polylb::{Balancer, Invoker, LoadReport, Outcome, Status, StrategyKind};
use serde_json::Value;

#[derive(Clone, Debug)]
struct Opts {
    text: String,
    zone: bool,
    subset: bool,
    min_healthy: u64,
}

fn draw_config(g: &mut Gen, kind: StrategyKind) -> Opts {
    let mut parts = vec![
        format!("loadbalance={}", kind.name()),
        format!("seed={}", g.below(1000)),
    ];
    let zone = g.percent(50);
    let outlier = g.percent(60);
    let by_key = kind.takes_subset();
    let by_index = matches!(
        kind,
        StrategyKind::Random | StrategyKind::RoundRobin | StrategyKind::Orca
    ) || by_key;
    let subset = by_index && g.percent(40);
    if zone {
        parts.push("zone=z0".into());
    }
    if subset {
        parts.push(format!("subset.size={}", 1 + g.below(4)));
        if by_key && g.percent(50) {
            parts.push(format!("subset.key=consumer{}", g.below(5)));
        } else {
            parts.push(format!("subset.index={}", g.below(6)));
        }
    }
    let mut min_healthy = 70;
    if outlier {
        parts.push(format!("outlier.consecutiveFailures={}", 1 + g.below(3)));
        if g.percent(30) {
            parts.push(format!("outlier.failureRate={}", 1 + g.below(100)));
            parts.push(format!("outlier.minRequests={}", 1 + g.below(5)));
        }
        if g.percent(70) {
            parts.push(format!("outlier.maxEjectionPercent={}", g.below(101)));
        }
        if g.percent(50) {
            parts.push(format!("outlier.baseEjectionMs={}", 500 + g.below(5000)));
        }
        if g.percent(40) {
            min_healthy = 1 + g.below(100);
            if subset {
                parts.push(format!("subset.minHealthyPercent={min_healthy}"));
            } else if zone {
                parts.push(format!("zone.minHealthyPercent={min_healthy}"));
            } else {
                min_healthy = 70;
            }
        }
    }
    if kind.has_slow_start() && g.percent(50) {
        parts.push(format!("slowstart.windowMs={}", 1 + g.below(20_000)));
        if g.percent(50) {
            parts.push(format!("slowstart.minWeightPercent={}", 1 + g.below(100)));
        }
    }
    if g.percent(40) {
        parts.push(format!("warmup={}", g.below(200_000) as i64 - 10_000));
    }
    match kind {
        StrategyKind::P2c if g.percent(50) => {
            parts.push(format!("p2c.choices={}", g.pick(&[0, 2, 3, 16])))
        }
        StrategyKind::PeakEwma => {
            if g.percent(50) {
                parts.push(format!("peakewma.choices={}", g.pick(&[0, 2, 3, 16])));
            }
            if g.percent(50) {
                parts.push(format!("peakewma.preferenceMs={}", g.pick(&[0, 1000, 50])));
            }
        }
        StrategyKind::Maglev if g.percent(50) => {
            parts.push(format!("maglev.tableSize={}", g.pick(&[11, 13, 101])))
        }
        StrategyKind::BoundedHash if g.percent(50) => {
            parts.push(format!("boundedhash.factor={}", g.pick(&["1", "1.5", "3"])))
        }
        StrategyKind::Orca => {
            if g.percent(50) {
                parts.push("orca.blackoutMs=0".into());
            }
            if g.percent(50) {
                parts.push(format!("orca.updateMs={}", 1 + g.below(2000)));
            }
        }
        _ => {}
    }
    // Any order.
    for i in (1..parts.len()).rev() {
        let j = g.below(i as u64 + 1) as usize;
        parts.swap(i, j);
    }
    Opts {
        text: parts.join("&"),
        zone,
        subset,
        min_healthy,
    }
}

const NOW0_US: i64 = 1_700_000_000_000_000;

fn draw_set(g: &mut Gen, now_ms: i64, valid: bool, kind: StrategyKind) -> Vec<Invoker> {
    let n = g.below(9) as usize;
    let mut ids: Vec<u64> = (1..=10).collect();
    for i in (1..ids.len()).rev() {
        let j = g.below(i as u64 + 1) as usize;
        ids.swap(i, j);
    }
    let mut set: Vec<Invoker> = ids[..n]
        .iter()
        .map(|&id| {
            let mut inv = Invoker::new(id, format!("10.0.0.{id}:20880")).weight(g.pick(&[
                0,
                0,
                1,
                50,
                100,
                100,
                200,
                100_000,
                i32::MAX,
            ]));
            match g.below(4) {
                0 => {}
                1 => inv = inv.zone("z0"),
                _ => inv = inv.zone("z1"),
            }
            match g.below(4) {
                0 => {}
                1 => inv = inv.start_time_ms(now_ms + g.below(3000) as i64),
                _ => inv = inv.start_time_ms(now_ms - g.below(300_000) as i64),
            }
            if g.percent(50) {
                inv = inv.warmup_ms(g.below(200_000) as i32);
            }
            inv
        })
        .collect();
    if !valid {
        match g.below(3) {
            0 if !set.is_empty() => {
                let dup = set[0].clone().weight(7);
                set.push(dup);
            }
            1 if !set.is_empty() => set[0].weight = -1,
            _ => set.push(Invoker::new(u64::MAX, "10.9.9.9:1")),
        }
    }
    let _ = kind;
    set
}

struct Row {
    id: u64,
    weight: i64,
    local: bool,
    in_subset: bool,
    ejected: bool,
}

fn rows(stats: &str, now_us: i64) -> Vec<Row> {
    let v: Value = serde_json::from_str(stats).expect("stats json");
    let now_ms = now_us / 1000;
    v["invokers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| Row {
            id: r["id"].as_u64().unwrap(),
            weight: r["weight"].as_i64().unwrap(),
            local: r["local"].as_bool().unwrap_or(false),
            in_subset: r["in_subset"].as_bool().unwrap_or(false),
            ejected: r["ejected_until_ms"]
                .as_i64()
                .is_some_and(|u| u != 0 && u > now_ms),
        })
        .collect()
}

fn weights_drain(kind: StrategyKind) -> bool {
    !matches!(
        kind,
        StrategyKind::ConsistentHash
            | StrategyKind::Adaptive
            | StrategyKind::LeastActive
            | StrategyKind::ShortestResponse
    )
}

struct Case {
    kind: StrategyKind,
    opts: Opts,
    a: Balancer,
    b: Balancer,
    set: Vec<Invoker>,
    now_us: i64,
    methods: Vec<u32>,
    outstanding: Vec<(u32, u64)>,
    log: Vec<String>,
}

impl Case {
    fn fail(&self, what: &str) -> ! {
        panic!(
            "{what}\nconfig: {}\nlast steps:\n{}",
            self.opts.text,
            self.log[self.log.len().saturating_sub(30)..].join("\n")
        );
    }

    fn check_twins(&self) {
        let (sa, sb) = (
            self.a.stats_json(self.now_us),
            self.b.stats_json(self.now_us),
        );
        // An expired ejection is lifted by whichever call looks first (documented): compare
        // the ejections that still stand.
        let norm = |s: &str| {
            let mut v: Value = serde_json::from_str(s).unwrap();
            for r in v["invokers"].as_array_mut().unwrap() {
                if r["ejected_until_ms"]
                    .as_i64()
                    .is_some_and(|u| u <= self.now_us / 1000)
                {
                    r["ejected"] = Value::Bool(false);
                    r["ejected_until_ms"] = Value::from(0);
                }
            }
            v
        };
        if norm(&sa) != norm(&sb) {
            self.fail(&format!("twins' stats differ:\nA {sa}\nB {sb}"));
        }
    }

    /// What the docs promise of one successful pick, given the state before it.
    fn check_pick(&self, before: &[Row], cands: &[u64], excluded: &[u64], got: u64) {
        let eligible: Vec<&Row> = before
            .iter()
            .filter(|r| cands.is_empty() || cands.contains(&r.id))
            .filter(|r| !excluded.contains(&r.id))
            .collect();
        let Some(picked) = eligible.iter().find(|r| r.id == got) else {
            self.fail(&format!("picked {got} outside the call's candidates"));
        };
        let healthy: Vec<&&Row> = eligible.iter().filter(|r| !r.ejected).collect();
        if picked.ejected && !healthy.is_empty() {
            self.fail(&format!(
                "picked ejected {got} while {} healthy candidates",
                healthy.len()
            ));
        }
        let pool: Vec<&&Row> = if healthy.is_empty() {
            eligible.iter().collect()
        } else {
            healthy.clone()
        };
        // roundrobin is Dubbo's walk: over changing candidate lists Dubbo's counters can put a
        // weight-0 invoker first (its counter stays at 0 while the others go negative).
        let rr_among = self.kind == StrategyKind::RoundRobin;
        if weights_drain(self.kind)
            && !rr_among
            && picked.weight == 0
            && pool.iter().any(|r| r.weight > 0)
            && eligible.len() > 1
        {
            self.fail(&format!(
                "picked weight-0 {got} while a weighted candidate was available"
            ));
        }
        // Preference (zone or subset): while every counted local candidate is healthy and
        // the local ones are not drained, the pick is local.
        if self.opts.zone || self.opts.subset {
            let is_local = |r: &Row| {
                if self.opts.subset {
                    r.in_subset
                } else {
                    r.local
                }
            };
            // A subset of the whole set (no local zone in the snapshot) is every invoker.
            let any_in_subset = before.iter().any(|r| r.in_subset);
            if self.opts.subset && !any_in_subset {
                return;
            }
            let local_healthy: Vec<&&Row> =
                healthy.iter().copied().filter(|r| is_local(r)).collect();
            let drained = !local_healthy.is_empty()
                && local_healthy.iter().all(|r| r.weight == 0)
                && healthy.iter().any(|r| !is_local(r) && r.weight > 0);
            let any_weighted = weights_drain(self.kind) && eligible.iter().any(|r| r.weight > 0);
            let counted: Vec<&&Row> = eligible
                .iter()
                .filter(|r| is_local(r) && (!any_weighted || r.weight > 0))
                .collect();
            let counted_healthy = counted.iter().filter(|r| !r.ejected).count() as u64;
            let total = counted.len() as u64;
            if !drained
                && counted_healthy > 0
                && counted_healthy * 100 >= total * self.opts.min_healthy
                && !is_local(picked)
            {
                self.fail(&format!(
                    "picked non-local {got} while the local candidates were healthy"
                ));
            }
        }
    }

    fn step(&mut self, g: &mut Gen) {
        let roll = g.below(100);
        if roll < 10 {
            let valid = g.percent(80);
            let set = draw_set(g, self.now_us / 1000, valid, self.kind);
            let ra = self.a.update(&set);
            self.log.push(format!(
                "update {:?} -> {:?}",
                set.iter()
                    .map(|i| (
                        i.id,
                        i.weight,
                        i.zone.clone(),
                        i.start_time_ms - self.now_us / 1000,
                        i.warmup_ms
                    ))
                    .collect::<Vec<_>>(),
                ra.as_ref().map_err(|e| e.status)
            ));
            match ra {
                Ok(()) => {
                    if !valid {
                        self.fail("an invalid update was accepted");
                    }
                    self.b.update(&set).expect("twin update");
                    self.set = set;
                }
                Err(e) => {
                    if valid && e.status != Status::LimitExceeded {
                        self.fail(&format!("a valid update was rejected: {e}"));
                    }
                }
            }
        } else if roll < 55 {
            let method = if g.percent(5) {
                999
            } else {
                g.pick(&self.methods)
            };
            let key: Vec<u8> = (0..g.below(6)).map(|_| g.below(4) as u8).collect();
            let ids: Vec<u64> = self.set.iter().map(|i| i.id).collect();
            let (cands, excluded): (Vec<u64>, Vec<u64>) = if g.percent(50) {
                (Vec::new(), Vec::new())
            } else {
                let mut c: Vec<u64> = ids.iter().copied().filter(|_| g.percent(60)).collect();
                if g.percent(5) {
                    c.push(77); // unknown
                }
                let e: Vec<u64> = (1..=11).filter(|_| g.percent(25)).collect();
                (c, e)
            };
            let before = rows(&self.a.stats_json(self.now_us), self.now_us);
            let ra = self
                .a
                .select_among(method, &key, &cands, &excluded, self.now_us);
            self.log.push(format!(
                "select m{method} key {key:?} cands {cands:?} excl {excluded:?} at {} -> {ra:?}",
                (self.now_us - NOW0_US) / 1000
            ));
            // Expected errors, in order.
            let expected = if !self.methods.contains(&method) {
                Some(Status::UnknownMethod)
            } else if self.set.is_empty() {
                Some(Status::NoProvider)
            } else if cands.iter().any(|c| !ids.contains(c)) {
                Some(Status::UnknownCandidate)
            } else if ids
                .iter()
                .filter(|i| cands.is_empty() || cands.contains(i))
                .all(|i| excluded.contains(i))
            {
                Some(Status::NoCandidate)
            } else {
                None
            };
            match (ra, expected) {
                (Ok(id), None) => {
                    self.check_pick(&before, &cands, &excluded, id);
                    let rb = self
                        .b
                        .select_among(method, &key, &cands, &excluded, self.now_us);
                    if rb != Ok(id) {
                        self.fail(&format!("twin picked {rb:?}, A {id}"));
                    }
                    self.outstanding.push((method, id));
                }
                (Err(s), Some(e)) if s == e => {
                    // A rejected call: the twin never sees it.
                }
                (r, e) => self.fail(&format!("select gave {r:?}, expected error {e:?}")),
            }
        } else if roll < 85 {
            if self.outstanding.is_empty() {
                return;
            }
            let i = g.below(self.outstanding.len() as u64) as usize;
            let (method, id) = self.outstanding.swap_remove(i);
            let outcome = g.pick(&[
                Outcome::Success,
                Outcome::Failure,
                Outcome::Failure,
                Outcome::Timeout,
                Outcome::Cancelled,
            ]);
            let elapsed = g.below(50_000) as i64;
            let bad = g.percent(5);
            let (m, e) = if bad {
                if g.percent(50) {
                    (999, elapsed)
                } else {
                    (method, -1)
                }
            } else {
                (method, elapsed)
            };
            let ra = self.a.report(m, id, e, outcome, self.now_us);
            self.log
                .push(format!("report m{m} id {id} {e}us {outcome:?} -> {ra:?}"));
            if bad {
                if ra.is_ok() {
                    self.fail("a bad report was accepted");
                }
                self.outstanding.push((method, id));
            } else {
                if ra.is_err() {
                    self.fail("a report was rejected");
                }
                self.b.report(m, id, e, outcome, self.now_us).unwrap();
            }
        } else if roll < 90 && self.kind == StrategyKind::Orca && !self.set.is_empty() {
            let id = self.set[g.below(self.set.len() as u64) as usize].id;
            let r = LoadReport {
                qps: 1.0 + g.below(1000) as f64,
                eps: 0.0,
                utilization: 0.05 + g.below(100) as f64 / 100.0,
            };
            self.log.push(format!("load {id} {r:?}"));
            self.a.report_load(id, r, self.now_us).unwrap();
            self.b.report_load(id, r, self.now_us).unwrap();
        } else {
            let dt = if g.percent(5) {
                60_000_000
            } else {
                g.below(3_000_000) as i64
            };
            self.now_us += dt;
            self.log.push(format!("time +{} ms", dt / 1000));
        }
        self.check_twins();
    }
}

fn run_case(seed: u64, steps: usize) {
    let mut g = Gen(seed);
    let kind = g.pick(StrategyKind::ALL);
    let opts = draw_config(&mut g, kind);
    let a =
        Balancer::new(&opts.text).unwrap_or_else(|e| panic!("config {} rejected: {e}", opts.text));
    let b = Balancer::new(&opts.text).unwrap();
    let mut methods = vec![0];
    for name in ["m1", "m2"] {
        let ma = a.method(name).unwrap();
        assert_eq!(ma, b.method(name).unwrap());
        methods.push(ma);
    }
    let mut case = Case {
        kind,
        opts,
        a,
        b,
        set: Vec::new(),
        now_us: NOW0_US,
        methods,
        outstanding: Vec::new(),
        log: vec![format!("seed {seed}")],
    };
    for _ in 0..steps {
        case.step(&mut g);
    }
}

#[test]
fn options_interplay_random_sequences() {
    let cases: u64 = std::env::var("INTERPLAY_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(400);
    let first: u64 = std::env::var("INTERPLAY_FIRST")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    for seed in first..first + cases {
        run_case(0x1A7E_4F1A_u64.wrapping_add(seed), 150);
    }
}

/// A rejected `select_among` (every candidate excluded, or an unknown candidate) is no pick:
/// it must not lift an expired ejection, which would change how the next report of that
/// invoker counts towards outlier ejection (a twin that never got the call counts it
/// otherwise).
#[test]
fn a_rejected_select_leaves_the_outlier_state() {
    let cfg = "loadbalance=random&seed=1&outlier.consecutiveFailures=1&outlier.baseEjectionMs=1000&outlier.maxEjectionPercent=50";
    let set = [Invoker::new(1, "10.0.0.1:1"), Invoker::new(2, "10.0.0.2:1")];
    let (a, b) = (Balancer::new(cfg).unwrap(), Balancer::new(cfg).unwrap());
    let t = NOW0_US;
    for lb in [&a, &b] {
        lb.update(&set).unwrap();
        let id = lb.select(0, b"", t).unwrap();
        lb.report(0, id, 10, Outcome::Failure, t).unwrap(); // ejected until t + 1 s
    }
    let later = t + 2_000_000;
    assert_eq!(
        a.select_among(0, b"", &[1, 2], &[1, 2], later),
        Err(Status::NoCandidate)
    );
    assert_eq!(
        a.select_among(0, b"", &[1, 3], &[], later),
        Err(Status::UnknownCandidate)
    );
    assert_eq!(a.stats_json(later), b.stats_json(later));
    // A late failure report of either invoker counts the same on both.
    for id in [1, 2] {
        a.report(0, id, 10, Outcome::Failure, later).unwrap();
        b.report(0, id, 10, Outcome::Failure, later).unwrap();
    }
    assert_eq!(a.stats_json(later), b.stats_json(later));
}
