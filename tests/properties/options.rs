//! Options a deployment sets, each within the range `src/config/keys.rs` accepts. `None` leaves the
//! key out (its default applies); a key is only given where the parser accepts it, so that every
//! drawn configuration builds a balancer.

use proptest::prelude::*;

/// Zones of invokers (`Inv::zone`) and of the consumer (`Opts::zone`); "zq" has no invoker.
pub(crate) const ZONES: [&str; 4] = ["z0", "z1", "z2", "zq"];

#[derive(Clone, Debug, Default)]
pub(crate) struct Opts {
    hash_nodes: Option<u32>,
    warmup_ms: Option<i32>,
    slide_period_ms: Option<i64>,
    timeout_ms: Option<i32>,
    p2c_choices: Option<u32>,
    pe_choices: Option<u32>,
    pe_decay_ms: Option<i64>,
    pe_penalty_ms: Option<i64>,
    pe_preference_ms: Option<i64>,
    bh_factor: Option<f64>,
    /// maglev.tableSize: primes of at least the largest set the sequences draw (14 ids).
    mg_table: Option<u32>,
    /// Index into `ZONES`.
    zone: Option<u8>,
    zone_min_healthy: Option<u32>,
    outlier: Option<Outlier>,
    slow_start: Option<Slow>,
}

#[derive(Clone, Debug)]
struct Outlier {
    consecutive: Option<u32>,
    /// The failure-rate rule, with its window and minimum calls.
    rate: Option<(u32, Option<i64>, Option<u32>)>,
    base_ms: Option<i64>,
    max_ms: Option<i64>,
    max_percent: Option<u32>,
}

#[derive(Clone, Debug)]
struct Slow {
    window_ms: i64,
    min_percent: Option<u32>,
    aggression: Option<f64>,
}

fn maybe<T: std::fmt::Debug + Clone + 'static>(
    s: impl Strategy<Value = T> + 'static,
) -> BoxedStrategy<Option<T>> {
    prop_oneof![1 => Just(None), 2 => s.prop_map(Some)].boxed()
}

fn choices() -> impl Strategy<Value = u32> {
    prop_oneof![Just(0u32), Just(2), Just(16), 2u32..=16]
}

fn arb_outlier() -> impl Strategy<Value = Outlier> {
    (
        // Mostly low thresholds: ejections are what the filters' checks need.
        maybe(prop_oneof![2 => Just(1u32), 1 => 2u32..5]),
        maybe((
            prop_oneof![Just(100u32), 1u32..=100],
            maybe(1i64..20_000),
            maybe(1u32..8),
        )),
        prop_oneof![Just(None), (1i64..120_000).prop_map(Some)],
        maybe(0i64..600_000),
        maybe(prop_oneof![Just(0u32), Just(100), 0u32..=100]),
    )
        .prop_map(|(consecutive, rate, base_ms, extra, max_percent)| {
            // Enabled by at least one rule, else every outlier key is an error.
            let consecutive = if rate.is_none() {
                consecutive.or(Some(1))
            } else {
                consecutive
            };
            // The longest ejection is at least the first (the default 300 000 is above any
            // base drawn here).
            let max_ms = extra.map(|e| base_ms.unwrap_or(30_000) + e);
            Outlier {
                consecutive,
                rate,
                base_ms,
                max_ms,
                max_percent,
            }
        })
}

pub(crate) fn arb_opts() -> impl Strategy<Value = Opts> {
    (
        (
            maybe(prop_oneof![Just(4u32), 4u32..=1024]),
            maybe(prop_oneof![
                Just(i32::MIN),
                -1i32..1,
                1i32..400_000,
                Just(i32::MAX)
            ]),
            maybe(prop_oneof![Just(1i64), 1i64..60_000, Just(i64::MAX)]),
            maybe(prop_oneof![Just(1i32), 1i32..5_000, Just(i32::MAX)]),
            maybe(choices()),
        ),
        (
            maybe(choices()),
            maybe(prop_oneof![Just(1i64), 1i64..100_000]),
            maybe(prop_oneof![Just(0i64), 0i64..10_000]),
            maybe(prop_oneof![Just(0i64), Just(1), 0i64..5_000]),
            maybe(prop_oneof![Just(1.0f64), Just(100.0), 1.0f64..=100.0]),
            maybe(prop_oneof![Just(17u32), Just(101), Just(65537)]),
        ),
        (
            maybe(0u8..4),
            maybe(prop_oneof![Just(1u32), Just(100), 1u32..=100]),
            prop_oneof![1 => Just(None), 3 => arb_outlier().prop_map(Some)],
            maybe(
                (
                    prop_oneof![Just(1i64), 1i64..200_000],
                    maybe(prop_oneof![Just(1u32), Just(100), 1u32..=100]),
                    maybe(prop_oneof![Just(0.1f64), Just(10.0), 0.1f64..=10.0]),
                )
                    .prop_map(|(window_ms, min_percent, aggression)| Slow {
                        window_ms,
                        min_percent,
                        aggression,
                    }),
            ),
        ),
    )
        .prop_map(|(a, b, c)| Opts {
            hash_nodes: a.0,
            warmup_ms: a.1,
            slide_period_ms: a.2,
            timeout_ms: a.3,
            p2c_choices: a.4,
            pe_choices: b.0,
            pe_decay_ms: b.1,
            pe_penalty_ms: b.2,
            pe_preference_ms: b.3,
            bh_factor: b.4,
            mg_table: b.5,
            zone: c.0,
            zone_min_healthy: c.1,
            outlier: c.2,
            slow_start: c.3,
        })
}

/// Mostly drawn options, sometimes none at all (the configuration most tests use).
pub(crate) fn arb_any_opts() -> impl Strategy<Value = Opts> {
    prop_oneof![1 => Just(Opts::default()), 4 => arb_opts()]
}

impl Opts {
    /// The options the parser accepts for `strategy`, as a config string.
    pub(crate) fn config(&self, strategy: &str, seed: u64) -> String {
        fn text<T: std::fmt::Display>(v: &Option<T>) -> Option<String> {
            v.as_ref().map(T::to_string)
        }
        let mut pairs = vec![
            ("loadbalance", Some(strategy.to_string())),
            ("seed", Some(seed.to_string())),
            ("hash.nodes", text(&self.hash_nodes)),
            ("warmup", text(&self.warmup_ms)),
            ("shortestresponse.slidePeriod", text(&self.slide_period_ms)),
            ("timeout", text(&self.timeout_ms)),
            ("zone", self.zone.map(|z| ZONES[z as usize].to_string())),
        ];
        match strategy {
            "p2c" => pairs.push(("p2c.choices", text(&self.p2c_choices))),
            "peakewma" => pairs.extend([
                ("peakewma.choices", text(&self.pe_choices)),
                ("peakewma.decay", text(&self.pe_decay_ms)),
                ("peakewma.failurePenalty", text(&self.pe_penalty_ms)),
                ("peakewma.preferenceMs", text(&self.pe_preference_ms)),
            ]),
            "boundedhash" => pairs.push(("boundedhash.factor", text(&self.bh_factor))),
            "maglev" => pairs.push(("maglev.tableSize", text(&self.mg_table))),
            _ => {}
        }
        if let Some(o) = &self.outlier {
            pairs.extend([
                ("outlier.consecutiveFailures", text(&o.consecutive)),
                ("outlier.baseEjectionMs", text(&o.base_ms)),
                ("outlier.maxEjectionMs", text(&o.max_ms)),
                ("outlier.maxEjectionPercent", text(&o.max_percent)),
            ]);
            if let Some((rate, window, min)) = &o.rate {
                pairs.extend([
                    ("outlier.failureRate", Some(rate.to_string())),
                    ("outlier.windowMs", text(window)),
                    ("outlier.minRequests", text(min)),
                ]);
            }
            if self.zone.is_some() {
                pairs.push(("zone.minHealthyPercent", text(&self.zone_min_healthy)));
            }
        }
        if let (Some(slow), true) = (&self.slow_start, has_slow_start(strategy)) {
            pairs.extend([
                ("slowstart.windowMs", Some(slow.window_ms.to_string())),
                ("slowstart.minWeightPercent", text(&slow.min_percent)),
                ("slowstart.aggression", text(&slow.aggression)),
            ]);
        }
        let given: Vec<String> = pairs
            .into_iter()
            .filter_map(|(k, v)| v.map(|v| format!("{k}={v}")))
            .collect();
        given.join("&")
    }

    /// What `config(strategy, seed)` must parse to, field by field.
    pub(crate) fn expected(&self, strategy: &str, seed: u64) -> polylb::Config {
        let mut c = polylb::Config {
            strategy: polylb::StrategyKind::from_name(strategy).unwrap(),
            seed: Some(seed),
            ..polylb::Config::default()
        };
        fn set<T>(field: &mut T, v: Option<T>) {
            if let Some(v) = v {
                *field = v;
            }
        }
        set(&mut c.hash_nodes, self.hash_nodes);
        set(&mut c.warmup_ms, self.warmup_ms);
        set(&mut c.slide_period_ms, self.slide_period_ms);
        set(&mut c.timeout_ms, self.timeout_ms);
        if strategy == "p2c" {
            set(&mut c.p2c_choices, self.p2c_choices);
        }
        if strategy == "peakewma" {
            set(&mut c.peakewma.choices, self.pe_choices);
            set(&mut c.peakewma.decay_ms, self.pe_decay_ms);
            set(&mut c.peakewma.failure_penalty_ms, self.pe_penalty_ms);
            set(&mut c.peakewma.preference_ms, self.pe_preference_ms);
        }
        if strategy == "boundedhash" {
            set(&mut c.boundedhash_factor, self.bh_factor);
        }
        if strategy == "maglev" {
            set(&mut c.maglev_table_size, self.mg_table);
        }
        c.zone = self.zone.map(|z| ZONES[z as usize].to_string());
        if let Some(o) = &self.outlier {
            set(&mut c.outlier.consecutive_failures, o.consecutive);
            if let Some((rate, window, min)) = o.rate {
                c.outlier.failure_rate_percent = rate;
                set(&mut c.outlier.window_ms, window);
                set(&mut c.outlier.min_requests, min);
            }
            set(&mut c.outlier.base_ejection_ms, o.base_ms);
            set(&mut c.outlier.max_ejection_ms, o.max_ms);
            set(&mut c.outlier.max_ejection_percent, o.max_percent);
            if self.zone.is_some() {
                set(&mut c.zone_min_healthy_percent, self.zone_min_healthy);
            }
        }
        if let (Some(slow), true) = (&self.slow_start, has_slow_start(strategy)) {
            c.slow_start.window_ms = slow.window_ms;
            set(&mut c.slow_start.min_weight_percent, slow.min_percent);
            set(&mut c.slow_start.aggression, slow.aggression);
        }
        c
    }
}

fn has_slow_start(strategy: &str) -> bool {
    polylb::StrategyKind::from_name(strategy)
        .unwrap()
        .has_slow_start()
}

/// At most this many of a set of `n` may be ejected at once (documented with
/// `outlier.maxEjectionPercent`: at least one invoker, never all; 0 % never ejects).
pub(crate) fn ejection_budget(n: usize, percent: u32) -> usize {
    if n < 2 || percent == 0 {
        0
    } else {
        (n * percent as usize / 100).clamp(1, n - 1)
    }
}

/// The stats rows the budget counts (documented with `outlier.maxEjectionPercent`): the
/// weighted invokers while the set has any (a weight-0 one is ejected outside it), else all;
/// all of them for `consistenthash`, `adaptive`, `leastactive` and `shortestresponse`, which
/// send calls to weight-0 invokers.
pub(crate) fn budget_rows<'r>(
    strategy: polylb::StrategyKind,
    rows: impl IntoIterator<Item = &'r serde_json::Value> + Clone,
) -> Vec<&'r serde_json::Value> {
    let weighted = |r: &serde_json::Value| r["weight"].as_i64().unwrap() > 0;
    let drains = !matches!(
        strategy,
        polylb::StrategyKind::ConsistentHash
            | polylb::StrategyKind::Adaptive
            | polylb::StrategyKind::LeastActive
            | polylb::StrategyKind::ShortestResponse
    );
    let any_weighted = drains && rows.clone().into_iter().any(weighted);
    rows.into_iter()
        .filter(|r| !any_weighted || weighted(r))
        .collect()
}
