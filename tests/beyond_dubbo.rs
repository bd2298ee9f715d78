//! The strategies beyond Dubbo (`p2c`, `peakewma`, `boundedhash`) and the options every strategy
//! takes (zone preference, outlier ejection) plus slow start: weighted distributions, churn,
//! concurrency, per-method isolation, warm-up, missing/zero/stale/equal metrics, failure and
//! timeout feedback, and no allocation on the hot path.
//!
//! Statistical checks allow 5 binomial standard deviations; the virtual-time scenarios (a small
//! event loop below) check bounds with wide margins, and their seeds are fixed.

mod common;
use common::*;
use polylb::{Balancer, Invoker, Outcome, Status, StrategyKind};
use std::cell::Cell;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::sync::Arc;

const NOW: i64 = 1_700_000_000_000_000; // µs
const NEW: [&str; 3] = ["p2c", "peakewma", "boundedhash"];

// ---------------------------------------------------------------------------------------------
// A counting allocator that counts per thread, so that the other tests of this file (running on
// other threads) do not disturb the no-allocation check.

struct Counting;
thread_local! {
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

unsafe impl std::alloc::GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
        std::alloc::System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        std::alloc::System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
        std::alloc::System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations() -> usize {
    ALLOCATIONS.with(|c| c.get())
}

// ---------------------------------------------------------------------------------------------
// Helpers.

fn lb(config: &str, invokers: &[Invoker]) -> Balancer {
    balancer(config, invokers)
}

/// Selects without reporting (the call stays in flight).
fn hold(b: &Balancer, method: u32, n: usize, now: i64) -> Vec<u64> {
    (0..n)
        .map(|_| b.select(method, b"", now).unwrap())
        .collect()
}

fn active(b: &Balancer, id: u64) -> i64 {
    stat(b, NOW, id, "active")
}

/// A closed loop with `in_flight` calls always outstanding (FIFO completion, equal latency):
/// returns the picks per id over `draws` selects.
fn closed_loop(b: &Balancer, in_flight: usize, draws: usize) -> BTreeMap<u64, usize> {
    closed_loop_tracking(b, in_flight, draws, 0).0
}

/// [`closed_loop`], also returning the lowest and highest number of calls in flight at `id`
/// seen after each of the `draws` selects.
fn closed_loop_tracking(
    b: &Balancer,
    in_flight: usize,
    draws: usize,
    id: u64,
) -> (BTreeMap<u64, usize>, usize, usize) {
    let mut queue: std::collections::VecDeque<u64> = hold(b, 0, in_flight, NOW).into();
    let mut c = BTreeMap::new();
    let mut at_id = queue.iter().filter(|&&q| q == id).count();
    let (mut lo, mut hi) = (usize::MAX, 0);
    for _ in 0..draws {
        let done = queue.pop_front().unwrap();
        b.report(0, done, 1000, Outcome::Success, NOW).unwrap();
        let picked = b.select(0, b"", NOW).unwrap();
        *c.entry(picked).or_insert(0) += 1;
        queue.push_back(picked);
        at_id = at_id + usize::from(picked == id) - usize::from(done == id);
        (lo, hi) = (lo.min(at_id), hi.max(at_id));
    }
    for id in queue {
        b.report(0, id, 1000, Outcome::Success, NOW).unwrap();
    }
    (c, lo, hi)
}

/// A tiny virtual-time world: `consumers` balancers share the providers; a call is started every
/// `gap_us` (consumers take turns) and ends after the latency `world(id, sent_us)` says.
/// Returns every pick as (time, consumer, id).
/// A call in flight: (ends at, consumer, invoker id, sent at, outcome code).
type Call = (i64, usize, u64, i64, u8);

struct World {
    balancers: Vec<Balancer>,
    calls: BinaryHeap<Reverse<Call>>,
    now: i64,
}

impl World {
    fn new(config: &str, consumers: usize, invokers: &[Invoker]) -> World {
        let balancers = (0..consumers)
            .map(|c| lb(&format!("{config}&seed={}", 17 + c), invokers))
            .collect();
        World {
            balancers,
            calls: BinaryHeap::new(),
            now: 0,
        }
    }

    fn run(
        &mut self,
        until_us: i64,
        gap_us: i64,
        mut world: impl FnMut(u64, i64) -> (i64, Outcome),
        log: &mut Vec<(i64, usize, u64)>,
    ) {
        let mut turn = 0;
        while self.now < until_us {
            while let Some(&Reverse((end, c, id, sent, outcome))) = self.calls.peek() {
                if end > self.now {
                    break;
                }
                self.calls.pop();
                let outcome = match outcome {
                    0 => Outcome::Success,
                    1 => Outcome::Failure,
                    _ => Outcome::Timeout,
                };
                self.balancers[c]
                    .report(0, id, end - sent, outcome, NOW + end)
                    .unwrap();
            }
            let c = turn % self.balancers.len();
            turn += 1;
            let id = self.balancers[c].select(0, b"", NOW + self.now).unwrap();
            let (latency, outcome) = world(id, self.now);
            let code = match outcome {
                Outcome::Success => 0,
                Outcome::Failure => 1,
                _ => 2,
            };
            self.calls
                .push(Reverse((self.now + latency.max(0), c, id, self.now, code)));
            log.push((self.now, c, id));
            self.now += gap_us;
        }
    }
}

/// Share of picks of `id` among the picks in [from, to).
fn share(log: &[(i64, usize, u64)], id: u64, from: i64, to: i64) -> f64 {
    let window: Vec<_> = log.iter().filter(|p| p.0 >= from && p.0 < to).collect();
    window.iter().filter(|p| p.2 == id).count() as f64 / window.len().max(1) as f64
}

/// A little deterministic jitter (±20 %) so that latencies are not all equal.
fn jitter(base: i64, t: i64, id: u64) -> i64 {
    let h = (t as u64 ^ id.wrapping_mul(0x9E37_79B9_7F4A_7C15)).wrapping_mul(0xD6E8_FEB8_6659_FD93);
    base * (80 + (h >> 59) as i64 * 40 / 31) / 100
}

// ---------------------------------------------------------------------------------------------
// Configuration.

#[test]
fn new_names_and_keys_parse() {
    for name in NEW {
        let b = Balancer::new(&format!("loadbalance={name}")).unwrap();
        assert_eq!(b.strategy_name(), name);
        assert!(StrategyKind::from_name(name).unwrap().is_beyond_dubbo());
    }
    let c = polylb::Config::parse(
        "loadbalance=peakewma&peakewma.choices=3&peakewma.decay=5000&peakewma.failurePenalty=0\
         &peakewma.preferenceMs=250&zone=z1&zone.minHealthyPercent=50\
         &outlier.consecutiveFailures=3&outlier.failureRate=40&outlier.windowMs=2000\
         &outlier.minRequests=5&outlier.baseEjectionMs=100&outlier.maxEjectionMs=1000\
         &outlier.maxEjectionPercent=50&slowstart.windowMs=30000&slowstart.minWeightPercent=5\
         &slowstart.aggression=2.5",
    )
    .unwrap();
    assert_eq!(c.peakewma.choices, 3);
    assert_eq!(c.peakewma.decay_ms, 5000);
    assert_eq!(c.peakewma.failure_penalty_ms, 0);
    assert_eq!(c.peakewma.preference_ms, 250);
    assert_eq!(polylb::Config::default().peakewma.preference_ms, 0);
    let p2c = polylb::Config::parse("loadbalance=p2c&p2c.choices=0").unwrap();
    assert_eq!(p2c.p2c_choices, 0);
    let bounded = polylb::Config::parse("loadbalance=boundedhash&boundedhash.factor=1.5").unwrap();
    assert_eq!(bounded.boundedhash_factor, 1.5);
    assert_eq!(c.zone.as_deref(), Some("z1"));
    assert_eq!(c.zone_min_healthy_percent, 50);
    assert_eq!(c.outlier.consecutive_failures, 3);
    assert_eq!(c.outlier.failure_rate_percent, 40);
    assert_eq!(c.outlier.max_ejection_percent, 50);
    assert_eq!(c.slow_start.window_ms, 30000);
    assert_eq!(c.slow_start.aggression, 2.5);
    let keys: Vec<&str> = polylb::Config::keys().map(|(k, _)| k).collect();
    for k in [
        "p2c.choices",
        "peakewma.decay",
        "boundedhash.factor",
        "zone",
        "outlier.baseEjectionMs",
    ] {
        assert!(keys.contains(&k), "{k} missing from the key table");
    }
}

#[test]
fn options_that_would_do_nothing_are_errors() {
    for (text, mention) in [
        ("p2c.choices=1", "p2c.choices"),
        ("p2c.choices=17", "p2c.choices"),
        ("peakewma.decay=0", "peakewma.decay"),
        ("peakewma.failurePenalty=-1", "peakewma.failurePenalty"),
        ("peakewma.preferenceMs=-1", "peakewma.preferenceMs"),
        ("boundedhash.factor=0.9", "boundedhash.factor"),
        ("boundedhash.factor=nan", "boundedhash.factor"),
        ("zone.minHealthyPercent=50", "zone"),
        ("zone=a&zone.minHealthyPercent=0", "zone.minHealthyPercent"),
        ("outlier.baseEjectionMs=100", "outlier.consecutiveFailures"),
        (
            "outlier.consecutiveFailures=3&outlier.windowMs=5000",
            "outlier.failureRate",
        ),
        (
            "outlier.consecutiveFailures=3&outlier.minRequests=5",
            "outlier.failureRate",
        ),
        (
            "outlier.failureRate=0&outlier.consecutiveFailures=3&outlier.minRequests=5",
            "outlier.failureRate",
        ),
        ("zone=a&zone.minHealthyPercent=50", "outlier ejection"),
        // A strategy's own options, given to another strategy (a slip, not a setting).
        ("loadbalance=peakewma&p2c.choices=0", "loadbalance=p2c only"),
        (
            "loadbalance=p2c&peakewma.choices=0",
            "loadbalance=peakewma only",
        ),
        ("peakewma.preferenceMs=1000", "loadbalance=peakewma only"),
        (
            "loadbalance=consistenthash&boundedhash.factor=2",
            "loadbalance=boundedhash only",
        ),
        // In any order, and with an empty (absent) window.
        (
            "loadbalance=p2c&slowstart.minWeightPercent=20&slowstart.windowMs=0",
            "slowstart.windowMs",
        ),
        (
            "loadbalance=p2c&slowstart.windowMs=0&slowstart.minWeightPercent=20",
            "slowstart.minWeightPercent",
        ),
        (
            "loadbalance=p2c&slowstart.windowMs=&slowstart.aggression=2",
            "slowstart.aggression",
        ),
        ("outlier.failureRate=101", "outlier.failureRate"),
        (
            "outlier.consecutiveFailures=2&outlier.baseEjectionMs=500000",
            "outlier.maxEjectionMs",
        ),
        (
            "loadbalance=random&slowstart.windowMs=1000",
            "p2c, peakewma and boundedhash",
        ),
        (
            "loadbalance=p2c&slowstart.aggression=2",
            "slowstart.windowMs",
        ),
        (
            "loadbalance=p2c&slowstart.aggression=0",
            "slowstart.aggression",
        ),
        (
            "outlier.consecutivefailures=3",
            "did you mean 'outlier.consecutiveFailures'",
        ),
    ] {
        let e = Balancer::new(text)
            .err()
            .unwrap_or_else(|| panic!("{text} accepted"));
        assert_eq!(e.status, Status::InvalidConfig, "{text}");
        assert!(e.message.contains(mention), "{text}: {}", e.message);
    }
}

#[test]
fn options_with_empty_values_are_absent() {
    // An empty value means "absent" (as in Dubbo): the default stays, and an absent option
    // cannot be one that would do nothing.
    for text in [
        "loadbalance=random&p2c.choices=",
        "loadbalance=roundrobin&slowstart.windowMs=&slowstart.aggression=",
        "outlier.windowMs=&outlier.baseEjectionMs=",
        "zone=&zone.minHealthyPercent=",
        "loadbalance=p2c&slowstart.windowMs=&slowstart.minWeightPercent=",
        "outlier.consecutiveFailures=3&outlier.minRequests=",
    ] {
        let b = Balancer::new(text).unwrap_or_else(|e| panic!("{text}: {}", e.message));
        drop(b);
    }
    // A value given twice is still an error, empty or not.
    assert!(Balancer::new("seed=&seed=1").is_err());
}

#[test]
fn outlier_rules_given_as_0_are_off_not_errors() {
    // 0 is each rule's documented "off", as slowstart.windowMs=0 is slow start's: given on its
    // own it turns ejection off, it is not an option that would do nothing (the error said
    // "set outlier.consecutiveFailures ... to enable" to the config that had just set it).
    for text in [
        "outlier.consecutiveFailures=0",
        "outlier.failureRate=0",
        "loadbalance=p2c&outlier.consecutiveFailures=0&outlier.failureRate=0",
        "loadbalance=p2c&slowstart.windowMs=0",
    ] {
        let b = Balancer::new(text).unwrap_or_else(|e| panic!("{text}: {}", e.message));
        assert!(!b.config().outlier.enabled(), "{text}");
    }
    // The other outlier keys still need a rule that is on.
    let text = "outlier.consecutiveFailures=0&outlier.baseEjectionMs=100";
    let e = Balancer::new(text)
        .err()
        .unwrap_or_else(|| panic!("{text} accepted"));
    assert_eq!(e.status, Status::InvalidConfig);
    assert!(
        e.message.contains("outlier.baseEjectionMs has no effect"),
        "{text}: {}",
        e.message
    );
}

// ---------------------------------------------------------------------------------------------
// Weighted distribution.

#[test]
fn p2c_gives_a_99_to_1_idle_pair_its_weights() {
    let b = lb(
        "loadbalance=p2c&seed=1",
        &[provider(1).weight(99), provider(2).weight(1)],
    );
    let draws = 100_000;
    let c = counts(&b, 0, draws, NOW);
    assert_binomial(c[&1], draws, 0.99, 5.0, "weight 99");
    // Many invokers, skewed and zero weights, idle: exactly the weights.
    let b = lb(
        "loadbalance=p2c&seed=2",
        &[
            provider(1).weight(600),
            provider(2).weight(0),
            provider(3).weight(300),
            provider(4).weight(60),
            provider(5).weight(40),
        ],
    );
    let c = counts(&b, 0, draws, NOW);
    assert_eq!(c.get(&2), None, "a zero weight was picked");
    for (id, w) in [(1, 600.0), (3, 300.0), (4, 60.0), (5, 40.0)] {
        assert_binomial(c[&id], draws, w / 1000.0, 5.0, &format!("p2c id {id}"));
    }
}

#[test]
fn new_strategies_follow_weights_when_idle() {
    // Idle, equal (or no) latency: every new strategy spreads by weight. boundedhash spreads
    // distinct keys by its ring (weights do not place points, as in Dubbo), so it is checked
    // with equal weights only.
    for name in ["p2c", "peakewma"] {
        let b = lb(
            &format!("loadbalance={name}&seed=3&{name}.choices=3"),
            &[
                provider(1).weight(50),
                provider(2).weight(30),
                provider(3).weight(20),
            ],
        );
        let draws = 60_000;
        let c = counts(&b, 0, draws, NOW);
        for (id, p) in [(1, 0.5), (2, 0.3), (3, 0.2)] {
            assert_binomial(c[&id], draws, p, 5.0, &format!("{name} id {id}"));
        }
    }
    let b = lb(
        "loadbalance=boundedhash",
        &(1..=4).map(provider).collect::<Vec<_>>(),
    );
    let mut c = BTreeMap::new();
    for k in 0..20_000u32 {
        let id = b.select(0, &k.to_le_bytes(), NOW).unwrap();
        b.report(0, id, 1000, Outcome::Success, NOW).unwrap();
        *c.entry(id).or_insert(0usize) += 1;
    }
    for id in 1..=4 {
        // 160 virtual nodes: shares within about ±25 % of even.
        assert!(
            c[&id] > 3_500 && c[&id] < 6_500,
            "boundedhash id {id}: {}",
            c[&id]
        );
    }
}

#[test]
fn full_scans_skip_zero_weights_and_spread_all_zero_sets_evenly() {
    // `choices=0` looks at every invoker; idle with equal latency, the first (drawn by weight)
    // is kept, so the weights decide: a zero weight never, unless all weigh 0 (then uniform,
    // Dubbo's rule).
    let draws = 40_000;
    for options in [
        "peakewma.choices=0",
        "peakewma.choices=0&peakewma.preferenceMs=1000",
    ] {
        let b = lb(
            &format!("loadbalance=peakewma&seed=9&{options}"),
            &[
                provider(1).weight(60),
                provider(2).weight(0),
                provider(3).weight(30),
                provider(4).weight(10),
            ],
        );
        let c = counts(&b, 0, draws, NOW);
        assert_eq!(c.get(&2), None, "{options}: a zero weight was picked");
        if !options.contains("preference") {
            for (id, p) in [(1, 0.6), (3, 0.3), (4, 0.1)] {
                assert_binomial(c[&id], draws, p, 5.0, &format!("{options}: id {id}"));
            }
        }
        let b = lb(
            &format!("loadbalance=peakewma&seed=10&{options}"),
            &(1..=4).map(|id| provider(id).weight(0)).collect::<Vec<_>>(),
        );
        let c = counts(&b, 0, draws, NOW);
        if options.contains("preference") {
            // One preferred invoker per period, all of them weighing the same (1).
            assert_eq!(c.len(), 1, "{options}: {c:?}");
        } else {
            for id in 1..=4 {
                assert_binomial(c[&id], draws, 0.25, 5.0, &format!("all zero: id {id}"));
            }
        }
    }
}

#[test]
fn p2c_in_flight_settles_in_proportion_to_weight() {
    let b = lb(
        "loadbalance=p2c&seed=4",
        &[provider(1).weight(300), provider(2).weight(100)],
    );
    // With 40 calls in flight, "less loaded after this call relative to weight" holds the pair
    // at its balance point, 30 calls at 1 and 10 at 2: a pick that would leave 1 with 31 (31/300
    // > 10/100) or 2 with 11 goes the other way, so after each pick 1 holds 30 ± 1. A strategy
    // that ignores load (a weighted coin: also 3:1 on average) lets 1's count wander as
    // Binomial(40, 3/4), sd 2.7: over 40 000 picks it strays by 8 or more.
    let (c, lo, hi) = closed_loop_tracking(&b, 40, 40_000, 1);
    assert!(
        lo >= 29 && hi <= 31,
        "weight 3:1 under load: in flight at 1 ranged over {lo}..={hi}, not 30 ± 1"
    );
    // The share follows: within 5 binomial sd of 3/4 (a closed loop is tighter still).
    assert_binomial(c[&1], 40_000, 0.75, 5.0, "p2c, weight 3:1 under load");
    // Equal weights under load: in flight stays balanced (ordinary P2C: a small gap; comparing
    // every candidate: at most 1).
    for (choices, gap) in [(2, 3), (0, 1)] {
        let b = lb(
            &format!("loadbalance=p2c&seed=5&p2c.choices={choices}"),
            &(1..=5).map(provider).collect::<Vec<_>>(),
        );
        hold(&b, 0, 53, NOW);
        let a: Vec<i64> = (1..=5).map(|id| active(&b, id)).collect();
        let (lo, hi) = (a.iter().min().unwrap(), a.iter().max().unwrap());
        assert!(
            hi - lo <= gap,
            "choices={choices}: in flight not balanced: {a:?}"
        );
    }
}

#[test]
fn peakewma_under_load_honours_weights_between_equal_latencies() {
    let b = lb(
        "loadbalance=peakewma&seed=6",
        &[provider(1).weight(300), provider(2).weight(100)],
    );
    // Equal latencies: load relative to weight decides (as p2c), so the 40 calls in flight stay
    // at 30 : 10 within one call, which a load-blind weighted coin (3:1 on average too, but
    // with 1's count wandering as Binomial(40, 3/4), sd 2.7) does not.
    let (c, lo, hi) = closed_loop_tracking(&b, 40, 40_000, 1);
    assert!(
        lo >= 29 && hi <= 31,
        "weight 3:1 under load: in flight at 1 ranged over {lo}..={hi}, not 30 ± 1"
    );
    assert_binomial(c[&1], 40_000, 0.75, 5.0, "peakewma, weight 3:1 under load");
}

#[test]
fn peakewma_preference_orders_equal_invokers() {
    let four: Vec<Invoker> = (1..=4).map(provider).collect();
    let spec = "loadbalance=peakewma&peakewma.choices=0&seed=21";
    // Off (the default): one call at a time spreads over equal invokers as drawn.
    let b = lb(spec, &four);
    let c = counts(&b, 0, 4000, NOW);
    for id in 1..=4 {
        assert_binomial(c[&id], 4000, 0.25, 5.0, "without a preference");
    }
    // On: within one period, calls made one at a time all go to this balancer's preferred
    // invoker...
    let b = lb(&format!("{spec}&peakewma.preferenceMs=1000"), &four);
    let c = counts(&b, 0, 400, NOW);
    assert_eq!(c.len(), 1, "one preferred invoker per period: {c:?}");
    let preferred = *c.keys().next().unwrap();
    // ... and calls in flight there spill to the others, one each, before any gets a second.
    let held = hold(&b, 0, 4, NOW);
    let mut distinct = held.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), 4, "{held:?}");
    assert_eq!(held[0], preferred);
    for id in held {
        b.report(0, id, 1000, Outcome::Success, NOW).unwrap();
    }
    // The order is renewed every period: over 400 periods each invoker is preferred about a
    // quarter of the time.
    let mut firsts = BTreeMap::new();
    for period in 1..=400i64 {
        let now = NOW + period * 1_000_000 + 123;
        let id = b.select(0, b"", now).unwrap();
        b.report(0, id, 1000, Outcome::Success, now).unwrap();
        *firsts.entry(id).or_insert(0usize) += 1;
    }
    for id in 1..=4 {
        let n = firsts.get(&id).copied().unwrap_or(0);
        assert_binomial(n, 400, 0.25, 5.0, "preferred per period");
    }
    // Unequal weights keep the weighted draw: an idle 99:1 pair still splits 99:1.
    let b = lb(
        "loadbalance=peakewma&peakewma.choices=0&peakewma.preferenceMs=1000&seed=22",
        &[provider(1).weight(99), provider(2).weight(1)],
    );
    let c = counts(&b, 0, 20_000, NOW);
    assert_binomial(
        c.get(&2).copied().unwrap_or(0),
        20_000,
        0.01,
        5.0,
        "99:1 with a preference",
    );
}

#[test]
fn peakewma_equivalent_latency_is_measured_from_the_fastest() {
    // Estimates 1.0 / 1.2 / 1.45 / 1.75 ms: each within 1.25x of the next, the last 1.75x the
    // first. Comparing every candidate, only 1 and 2 are equivalent to the fastest; all idle,
    // the preference of each period picks between those two. Compared pairwise in set order,
    // chains 1 -> 2 -> 3 -> 4 of "equivalent" replacements reached 3 and 4 (the last positions).
    // With 30 and 100 invokers (the others at 1.9 ms) the scan takes its wider field, then its
    // thread-local buffer; with the graded four last in the set as well, so that a scan that
    // dropped looks past some capacity would miss them.
    for (n, last) in [
        (4u64, false),
        (30, false),
        (30, true),
        (100, false),
        (100, true),
    ] {
        // 1 = the fastest.
        let grade = |id: u64| if last { n + 1 - id } else { id };
        let latency = |id: u64| {
            [1_000, 1_200, 1_450, 1_750]
                .get(grade(id) as usize - 1)
                .copied()
                .unwrap_or(1_900)
        };
        let b = lb(
            "loadbalance=peakewma&peakewma.choices=0&peakewma.preferenceMs=1000&peakewma.decay=100000000&seed=23",
            &(1..=n).map(provider).collect::<Vec<_>>(),
        );
        for id in 1..=n {
            b.report(0, id, latency(id), Outcome::Success, NOW).unwrap();
        }
        let mut picks = BTreeMap::new();
        for period in 1..=400i64 {
            let now = NOW + period * 1_000_000 + 7;
            let id = b.select(0, b"", now).unwrap();
            // The same latency again leaves its estimate where it was.
            b.report(0, id, latency(id), Outcome::Success, now).unwrap();
            *picks.entry(grade(id)).or_insert(0usize) += 1;
        }
        assert_eq!(
            picks.keys().copied().collect::<Vec<_>>(),
            [1, 2],
            "n={n}, graded last: {last}: {picks:?}"
        );
        assert_binomial(picks[&1], 400, 0.5, 5.0, "preferred of the two equivalent");
    }
}

#[test]
fn boundedhash_capacities_follow_weights() {
    let b = lb(
        "loadbalance=boundedhash&boundedhash.factor=1.25",
        &[
            provider(1).weight(300),
            provider(2).weight(100),
            provider(3).weight(100),
        ],
    );
    // 500 distinct keys, nothing reported: each invoker stays within ⌈1.25 × share⌉ (+1 for the
    // pick that brought the total up).
    for k in 0..500u32 {
        b.select(0, &k.to_le_bytes(), NOW).unwrap();
    }
    for (id, w) in [(1, 0.6), (2, 0.2), (3, 0.2)] {
        let cap = (1.25f64 * 500.0 * w).ceil() as i64 + 1;
        assert!(active(&b, id) <= cap, "id {id}: {} > {cap}", active(&b, id));
    }
}

// ---------------------------------------------------------------------------------------------
// Choices, slow pairs, full scans.

#[test]
fn p2c_more_choices_avoid_a_loaded_pair() {
    // Invokers 1 and 2 hold 20 calls each: best-of-2 still picks them when it draws that pair
    // (1 in 6); comparing all four never does.
    for (choices, expected) in [("2", 1.0 / 6.0), ("4", 0.0), ("0", 0.0)] {
        let b = lb(
            &format!("loadbalance=p2c&seed=7&p2c.choices={choices}"),
            &(1..=4).map(provider).collect::<Vec<_>>(),
        );
        for id in [1, 2] {
            for _ in 0..20 {
                b.select_among(0, b"", &[id], &[], NOW).unwrap();
            }
        }
        let draws = 30_000;
        let c = counts(&b, 0, draws, NOW);
        let slow = c.get(&1).copied().unwrap_or(0) + c.get(&2).copied().unwrap_or(0);
        if expected == 0.0 {
            assert_eq!(slow, 0, "choices={choices}");
        } else {
            assert_binomial(slow, draws, expected, 5.0, "best of 2, slow pair");
        }
    }
}

#[test]
fn full_scans_draw_ties_among_the_least_loaded_by_weight_not_by_set_order() {
    // Invoker 1 holds a call; the others are idle. A full scan keeps the first candidate (drawn
    // by weight) when it is idle; when it is invoker 1, any idle invoker is less loaded, and the
    // one taken must again be drawn by weight, not be the first idle one in set order: with
    // many consumers, each holding a call or two, a set-order choice sends the invoker after a
    // busy one a double share. Expected: each idle invoker's share of the idle weight.
    let draws = 30_000;
    for (spec, weights) in [
        ("loadbalance=p2c&p2c.choices=0&seed=31", [10, 10, 10, 10]),
        ("loadbalance=p2c&p2c.choices=4&seed=32", [10, 10, 10, 10]),
        ("loadbalance=p2c&p2c.choices=0&seed=33", [10, 10, 20, 10]),
        (
            "loadbalance=peakewma&peakewma.choices=0&seed=34",
            [10, 10, 10, 10],
        ),
        (
            "loadbalance=peakewma&peakewma.choices=0&seed=35",
            [10, 10, 20, 10],
        ),
    ] {
        let invokers: Vec<Invoker> = (1..=4u64)
            .map(|id| provider(id).weight(weights[id as usize - 1]))
            .collect();
        let b = lb(spec, &invokers);
        // Equal latencies everywhere (peakewma): load and weight decide.
        for id in 1..=4 {
            b.select_among(0, b"", &[id], &[], NOW).unwrap();
            b.report(0, id, 1000, Outcome::Success, NOW).unwrap();
        }
        b.select_among(0, b"", &[1], &[], NOW).unwrap();
        let c = counts(&b, 0, draws, NOW);
        assert_eq!(c.get(&1), None, "{spec}: the busy invoker was picked");
        let idle: i32 = weights[1..].iter().sum();
        for id in 2..=4u64 {
            let p = weights[id as usize - 1] as f64 / idle as f64;
            assert_binomial(c[&id], draws, p, 5.0, &format!("{spec}: id {id}"));
        }
    }
}

#[test]
fn peakewma_escalates_past_a_slow_pair() {
    // Two slow invokers of four (10 ms vs 1 ms). Textbook best-of-2 sends them at least the
    // slow pair's 1/6; peakewma looks further when the best of its pair looks slow.
    let invokers: Vec<Invoker> = (1..=4).map(provider).collect();
    let mut w = World::new("loadbalance=peakewma", 1, &invokers);
    let mut log = Vec::new();
    w.run(
        20_000_000,
        2_000,
        |id, t| {
            let base = if id <= 2 { 10_000 } else { 1_000 };
            (jitter(base, t, id), Outcome::Success)
        },
        &mut log,
    );
    let slow = share(&log, 1, 2_000_000, 20_000_000) + share(&log, 2, 2_000_000, 20_000_000);
    assert!(
        slow < 0.03,
        "slow pair's share {slow:.4} (textbook best-of-2: >= 0.167)"
    );
}

// ---------------------------------------------------------------------------------------------
// peakewma's latency signals.

#[test]
fn peakewma_avoids_a_slow_invoker_and_returns_when_it_recovers() {
    let invokers: Vec<Invoker> = (1..=4).map(provider).collect();
    let mut w = World::new("loadbalance=peakewma", 1, &invokers);
    let mut log = Vec::new();
    // Invoker 1 is 20x slower for the first 10 s, then as fast as the others. Probes back off
    // while it stays slow (at most one per decay = 10 s), so it is back within about 10 s.
    w.run(
        25_000_000,
        1_000,
        |id, t| {
            let base = if id == 1 && t < 10_000_000 {
                20_000
            } else {
                1_000
            };
            (jitter(base, t, id), Outcome::Success)
        },
        &mut log,
    );
    let slow = share(&log, 1, 1_000_000, 10_000_000);
    assert!(slow < 0.02, "slow invoker's share {slow:.4}");
    let back = share(&log, 1, 21_000_000, 25_000_000);
    assert!(back > 0.12, "recovered invoker's share {back:.4}");
}

#[test]
fn peakewma_forgives_a_500ms_stall_at_once() {
    // Invoker 1 stalls for 500 ms at t = 2 s (every call sent then ends at 2.5 s), then is fast
    // again. The textbook design (10 s decay) keeps it shunned for about 25 s.
    let invokers: Vec<Invoker> = (1..=4).map(provider).collect();
    let mut w = World::new("loadbalance=peakewma&peakewma.decay=10000", 1, &invokers);
    let mut log = Vec::new();
    w.run(
        12_000_000,
        500,
        |id, t| {
            if id == 1 && (2_000_000..2_500_000).contains(&t) {
                (2_500_000 - t, Outcome::Success)
            } else {
                (jitter(1_000, t, id), Outcome::Success)
            }
        },
        &mut log,
    );
    // During the stall it is avoided (calls in flight for longer than the estimate look slow).
    let during = share(&log, 1, 2_050_000, 2_500_000);
    assert!(during < 0.05, "share during the stall {during:.4}");
    // Back to a fair share within a fraction of a second of its end (probes see the recovery),
    // not 25 s.
    let back = (0..100)
        .map(|k| 2_500_000 + k * 50_000)
        .find(|&t| share(&log, 1, t, t + 50_000) > 0.15)
        .expect("never back");
    assert!(
        back - 2_500_000 <= 300_000,
        "back {} ms after the stall",
        (back - 2_500_000) / 1000
    );
    let recovered = share(&log, 1, 3_000_000, 12_000_000);
    assert!(
        recovered > 0.2,
        "share from 0.5 s after the stall {recovered:.4}"
    );
}

#[test]
fn peakewma_sees_a_stall_with_one_call_in_flight_per_consumer() {
    // 40 consumers, each sending a call every 40 ms (little in flight each). Invoker 1 hangs
    // from t = 1 s to t = 4 s (its calls return at 4 s). Each consumer learns it from its own
    // call in flight growing old: the stalled invoker gets a handful of calls, not a quarter.
    let invokers: Vec<Invoker> = (1..=4).map(provider).collect();
    let mut w = World::new("loadbalance=peakewma", 40, &invokers);
    let mut log = Vec::new();
    w.run(
        6_000_000,
        1_000,
        |id, t| {
            if id == 1 && (1_000_000..4_000_000).contains(&t) {
                (4_000_000 - t, Outcome::Success)
            } else {
                (jitter(2_000, t, id), Outcome::Success)
            }
        },
        &mut log,
    );
    let sent = log
        .iter()
        .filter(|p| p.2 == 1 && (1_000_000..4_000_000).contains(&p.0))
        .count();
    // A quarter of 3000 calls would be 750; each consumer sends it about one call (plus rare
    // probes).
    assert!(sent < 150, "{sent} calls sent to the stalled invoker");
}

#[test]
fn peakewma_a_cancelled_call_is_no_progress_of_a_stalled_invoker() {
    // Invoker 1 holds a call that never returns; its age makes it look slow. A second call
    // picked for it and cancelled (never sent) is no sign of life: the age must stay.
    let b = lb(
        "loadbalance=peakewma&peakewma.choices=0&seed=3",
        &[provider(1), provider(2)],
    );
    for k in 0..200 {
        let t = NOW + k * 1000;
        let id = b.select(0, b"", t).unwrap();
        b.report(0, id, 1000, Outcome::Success, t).unwrap();
    }
    let stuck_at = NOW + 1_000_000;
    assert_eq!(b.select_among(0, b"", &[1], &[], stuck_at).unwrap(), 1);
    let later = stuck_at + 5_000_000;
    // Invoker 2 is busier by calls in flight: only the stalled call's age keeps picks off 1.
    for _ in 0..3 {
        assert_eq!(b.select_among(0, b"", &[2], &[], later).unwrap(), 2);
    }
    let to_stalled = |t: i64| {
        (0..100)
            .filter(|_| {
                let id = b.select(0, b"", t).unwrap();
                b.report(0, id, 1000, Outcome::Success, t).unwrap();
                id == 1
            })
            .count()
    };
    assert_eq!(to_stalled(later), 0, "the stall was not seen");
    let id = b.select_among(0, b"", &[1], &[], later).unwrap();
    b.report(0, id, 0, Outcome::Cancelled, later).unwrap();
    assert_eq!(
        to_stalled(later + 1000),
        0,
        "a cancelled call made the stalled invoker look healthy"
    );
}

#[test]
fn peakewma_fast_failures_and_timeouts_do_not_look_fast() {
    for bad in [Outcome::Failure, Outcome::Timeout] {
        let invokers: Vec<Invoker> = (1..=4).map(provider).collect();
        let mut w = World::new("loadbalance=peakewma", 1, &invokers);
        let mut log = Vec::new();
        // Invoker 1 answers errors in 100 µs; the others succeed in 5 ms.
        w.run(
            10_000_000,
            2_000,
            |id, t| {
                if id == 1 {
                    (100, bad)
                } else {
                    (jitter(5_000, t, id), Outcome::Success)
                }
            },
            &mut log,
        );
        let s = share(&log, 1, 1_000_000, 10_000_000);
        assert!(s < 0.02, "{bad:?}: failing invoker's share {s:.4}");
    }
}

#[test]
fn peakewma_a_failing_invoker_is_probed_twice_as_late_each_time() {
    // Documented (`peakewma.failurePenalty`): a failing invoker is probed again after the
    // penalty (1 s), then twice as late each time it still fails, up to the decay (10 s): waits
    // of 1, 2, 4, 8, 10, 10 s. A select every 10 ms; invoker 1 is in a pair half the time, so a
    // due probe is taken within a few selects.
    let b = lb(
        "loadbalance=peakewma&seed=41",
        &(1..=4).map(provider).collect::<Vec<_>>(),
    );
    for k in 0..200 {
        let t = NOW + k * 1000;
        let id = b.select(0, b"", t).unwrap();
        b.report(0, id, 1000, Outcome::Success, t).unwrap();
    }
    let failed_at = NOW + 1_000_000;
    assert_eq!(b.select_among(0, b"", &[1], &[], failed_at).unwrap(), 1);
    b.report(0, 1, 100, Outcome::Failure, failed_at).unwrap();
    let mut probes = vec![failed_at];
    let mut t = failed_at;
    while t < failed_at + 36_000_000 {
        t += 10_000;
        let id = b.select(0, b"", t).unwrap();
        if id == 1 {
            probes.push(t);
            b.report(0, id, 100, Outcome::Failure, t).unwrap();
        } else {
            b.report(0, id, 1000, Outcome::Success, t).unwrap();
        }
    }
    let waits: Vec<i64> = probes.windows(2).map(|w| w[1] - w[0]).collect();
    let expected = [1_000_000, 2_000_000, 4_000_000, 8_000_000, 10_000_000];
    assert!(waits.len() >= expected.len(), "probes after {waits:?} µs");
    for (wait, expected) in waits.iter().zip(expected) {
        assert!(
            (expected..expected + 200_000).contains(wait),
            "waits between probes {waits:?} µs, expected {expected:?}"
        );
    }
}

#[test]
fn peakewma_missing_zero_stale_and_equal_metrics() {
    let invokers = [provider(1).weight(200), provider(2), provider(3)];
    // Missing: no report ever (every call cancelled) → weights decide.
    let b = lb("loadbalance=peakewma&seed=8", &invokers);
    let draws = 40_000;
    let mut c = BTreeMap::new();
    for _ in 0..draws {
        let id = b.select(0, b"", NOW).unwrap();
        b.report(0, id, 0, Outcome::Cancelled, NOW).unwrap();
        *c.entry(id).or_insert(0usize) += 1;
    }
    assert_binomial(c[&1], draws, 0.5, 5.0, "missing metrics, weight 200");
    // Zero: latencies of 0 µs are fine (no division by zero, no NaN in stats).
    let b = lb("loadbalance=peakewma&seed=9", &invokers);
    let draws = 40_000;
    let mut c = BTreeMap::new();
    for _ in 0..draws {
        let id = b.select(0, b"", NOW).unwrap();
        b.report(0, id, 0, Outcome::Success, NOW).unwrap();
        *c.entry(id).or_insert(0usize) += 1;
    }
    assert_binomial(c[&1], draws, 0.5, 5.0, "zero latency, weight 200");
    let v: serde_json::Value = serde_json::from_str(&b.stats_json(NOW)).unwrap();
    assert!(v["invokers"][0]["latency_estimate_us"].as_i64().unwrap() >= 1);
    // Equal: all 1 ms → weights decide.
    let c = counts(&b, 0, draws, NOW);
    assert_binomial(c[&1], draws, 0.5, 5.0, "equal latency, weight 200");
    // Stale: invoker 2 was slow long ago and has not been picked since. It is probed once its
    // estimate is old, and a fast probe brings it back.
    let b = lb(
        "loadbalance=peakewma&seed=10",
        &[provider(1), provider(2), provider(3)],
    );
    for _ in 0..100 {
        for id in 1..=3u64 {
            b.select_among(0, b"", &[id], &[], NOW).unwrap();
            let latency = if id == 2 { 200_000 } else { 1_000 };
            b.report(0, id, latency, Outcome::Success, NOW).unwrap();
        }
    }
    let c = counts(&b, 0, 3000, NOW + 1000);
    assert_eq!(
        c.get(&2),
        None,
        "the slow invoker is avoided while its estimate is fresh"
    );
    // A minute later (6 decays) the stale estimate has decayed towards the typical one: the
    // invoker takes its share again, and being fast there, keeps it.
    let later = NOW + 60_000_000;
    let mut total = BTreeMap::new();
    for step in 0..300 {
        for (id, n) in counts(&b, 0, 3, later + step * 10_000) {
            *total.entry(id).or_insert(0) += n;
        }
    }
    assert!(
        total.get(&2).copied().unwrap_or(0) > 200,
        "stale slow invoker not back: {total:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Warm-up, slow start, churn.

#[test]
fn a_warming_invoker_is_not_flooded() {
    // Invoker 4 started 6 s ago with the default 10 min warm-up: effective weight 1 of 100.
    let now_ms = NOW / 1000;
    for name in ["p2c", "peakewma"] {
        let b = lb(
            &format!("loadbalance={name}&seed=11"),
            &[
                provider(1),
                provider(2),
                provider(3),
                provider(4).start_time_ms(now_ms - 6_000),
            ],
        );
        // Under load (30 in flight) and idle alike, it gets about its weight (1 / 301), never
        // the flood a least-loaded rule would give an empty invoker.
        let c = closed_loop(&b, 30, 30_000);
        let s = c.get(&4).copied().unwrap_or(0) as f64 / 30_000.0;
        assert!(
            s < 0.02,
            "{name}: warming invoker's share under load {s:.4}"
        );
        let c = counts(&b, 0, 30_000, NOW);
        assert_binomial(
            c.get(&4).copied().unwrap_or(0),
            30_000,
            1.0 / 301.0,
            5.0,
            name,
        );
    }
}

#[test]
fn slow_start_ramps_an_invoker_that_joins() {
    for name in NEW {
        let config = format!(
            "loadbalance={name}&seed=12&slowstart.windowMs=60000&slowstart.minWeightPercent=10"
        );
        let first: Vec<Invoker> = (1..=3).map(provider).collect();
        let b = lb(&config, &first);
        // The first set does not ramp.
        let draws = 40_000;
        if name != "boundedhash" {
            let c = counts(&b, 0, draws, NOW);
            for id in 1..=3 {
                assert_binomial(c[&id], draws, 1.0 / 3.0, 5.0, "first set");
            }
        }
        let mut all = first.clone();
        all.push(provider(4));
        b.update(&all).unwrap();
        if name == "boundedhash" {
            // The joining invoker's capacity ramps: with 300 keys in flight it holds at most its
            // ramped share (10 % weight at t = 0 → 10 of 310 → ⌈1.25 × 301 × 10 / 310⌉ = 13).
            for k in 0..300u32 {
                b.select(0, &k.to_le_bytes(), NOW).unwrap();
            }
            assert!(
                active(&b, 4) <= 13,
                "joining invoker holds {}",
                active(&b, 4)
            );
            continue;
        }
        // At t = 0: 10 % of the weight; at 30 s: 50 % (linear); after 60 s: full.
        for (dt, w) in [(0, 10.0), (30_000_000, 50.0), (61_000_000, 100.0)] {
            let c = counts(&b, 0, draws, NOW + dt);
            let p = w / (300.0 + w);
            assert_binomial(
                c.get(&4).copied().unwrap_or(0),
                draws,
                p,
                5.0,
                &format!("{name} at +{dt} µs"),
            );
        }
    }
}

#[test]
fn stats_show_the_slow_start_ramp() {
    // effective_weight is Dubbo's warm-up only; slow_start_percent is what the ramp leaves.
    for name in NEW {
        let config = format!(
            "loadbalance={name}&seed=12&slowstart.windowMs=60000&slowstart.minWeightPercent=10&slowstart.aggression=2"
        );
        let b = lb(&config, &(1..=3).map(provider).collect::<Vec<_>>());
        b.update(&(1..=4).map(provider).collect::<Vec<_>>())
            .unwrap();
        // The first pick after the update stamps the ramp's start.
        let id = b.select(0, b"k", NOW).unwrap();
        b.report(0, id, 1000, Outcome::Success, NOW).unwrap();
        for (dt, percent) in [(0, 10.0), (15_000_000, 50.0), (60_000_000, 100.0)] {
            let v: serde_json::Value = serde_json::from_str(&b.stats_json(NOW + dt)).unwrap();
            let rows = v["invokers"].as_array().unwrap();
            for row in rows {
                let expected = if row["id"] == 4 { percent } else { 100.0 };
                assert_eq!(
                    row["slow_start_percent"].as_f64(),
                    Some(expected),
                    "{name} at +{dt} µs: {row}"
                );
                assert_eq!(row["effective_weight"], 100, "{name}");
            }
        }
        let plain = lb(&format!("loadbalance={name}"), &[provider(1)]);
        assert!(
            !plain.stats_json(NOW).contains("slow_start_percent"),
            "{name}"
        );
    }
}

#[test]
fn slow_start_does_not_ramp_an_invoker_that_served_alone() {
    // The set is replaced by a single invoker, 3, which takes every call (without the strategy,
    // so no ramp is stamped) for two minutes; then 4 joins. 3 has nothing to ramp from, and 4
    // is the one to protect: 4 starts at 10 % of 3's weight, not both at 10 % (which would
    // split the calls evenly at once).
    for name in ["p2c", "peakewma"] {
        let config = format!(
            "loadbalance={name}&seed=13&slowstart.windowMs=60000&slowstart.minWeightPercent=10"
        );
        let b = lb(&config, &[provider(1), provider(2)]);
        b.update(&[provider(3)]).unwrap();
        counts(&b, 0, 100, NOW);
        b.update(&[provider(3), provider(4)]).unwrap();
        let draws = 40_000;
        let c = counts(&b, 0, draws, NOW + 120_000_000);
        let joined = c.get(&4).copied().unwrap_or(0);
        assert_binomial(joined, draws, 10.0 / 110.0, 5.0, name);
    }
}

#[test]
fn slow_start_ramp_starts_at_a_single_candidate_pick() {
    // Invoker 4 joins and is first reached through picks among it alone (a router's subset),
    // which skip the strategy. Its ramp starts at the first of them: at +30 s it is at 50 %
    // (linear), and after the window it takes its full share once the whole set is offered.
    // Left unstamped, it read 100 % and then began ramping from 10 % at the first pick among
    // several, a minute after it started taking calls.
    for name in NEW {
        let config = format!(
            "loadbalance={name}&seed=14&slowstart.windowMs=60000&slowstart.minWeightPercent=10"
        );
        let b = lb(&config, &(1..=3).map(provider).collect::<Vec<_>>());
        b.update(&(1..=4).map(provider).collect::<Vec<_>>())
            .unwrap();
        for _ in 0..10 {
            let id = b.select_among(0, b"k", &[4], &[], NOW).unwrap();
            assert_eq!(id, 4);
            b.report(0, id, 1000, Outcome::Success, NOW).unwrap();
        }
        let v: serde_json::Value = serde_json::from_str(&b.stats_json(NOW + 30_000_000)).unwrap();
        let row = v["invokers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["id"] == 4)
            .unwrap()
            .clone();
        assert_eq!(
            row["slow_start_percent"].as_f64(),
            Some(50.0),
            "{name}: {row}"
        );
        if name == "boundedhash" {
            continue;
        }
        let draws = 40_000;
        let c = counts(&b, 0, draws, NOW + 61_000_000);
        let joined = c.get(&4).copied().unwrap_or(0);
        assert_binomial(joined, draws, 0.25, 5.0, name);
    }
}

#[test]
fn invokers_added_and_removed_leave_no_stale_state() {
    for name in NEW {
        let b = lb(
            &format!("loadbalance={name}&seed=13"),
            &(1..=4).map(provider).collect::<Vec<_>>(),
        );
        // Invoker 2 gets calls in flight and a slow estimate, then leaves with them.
        for _ in 0..10 {
            b.select_among(0, b"k", &[2], &[], NOW).unwrap();
        }
        b.report(0, 2, 900_000, Outcome::Success, NOW).unwrap();
        b.update(&[provider(1), provider(3), provider(4)]).unwrap();
        // Reports for the departed id are harmless.
        for _ in 0..20 {
            b.report(0, 2, 1000, Outcome::Success, NOW).unwrap();
        }
        // Back again: a fresh start (nothing in flight, no estimate, no ejection).
        b.update(&(1..=4).map(provider).collect::<Vec<_>>())
            .unwrap();
        assert_eq!(active(&b, 2), 0, "{name}");
        let v: serde_json::Value = serde_json::from_str(&b.stats_json(NOW)).unwrap();
        if name == "peakewma" {
            assert_eq!(v["invokers"][1]["latency_estimate_us"], 0, "{name}");
        }
        // And it takes its share again (keys for boundedhash: the departed calls were taken out
        // of the total in flight, so capacities are not inflated by them).
        let picks = |b: &Balancer| -> Vec<u64> {
            (0..20_000u32)
                .map(|k| {
                    let id = b.select(0, &k.to_le_bytes(), NOW).unwrap();
                    b.report(0, id, 1000, Outcome::Success, NOW).unwrap();
                    id
                })
                .collect()
        };
        let got = picks(&b);
        if name == "boundedhash" {
            // Keys with nothing in flight are deterministic: exactly what a balancer that never
            // saw invoker 2's history picks, key by key.
            let fresh = lb(
                &format!("loadbalance={name}&seed=13"),
                &(1..=4).map(provider).collect::<Vec<_>>(),
            );
            assert!(
                got == picks(&fresh),
                "{name}: history changed key placement"
            );
            // Under load the bound decides: one hot key held 40 times walks on along the ring
            // where the fresh balancer's does only if the departed calls left the in-flight
            // total (with them, every capacity is larger and the key stays longer).
            let hot = |b: &Balancer| -> Vec<u64> {
                (0..40).map(|_| b.select(0, b"hot", NOW).unwrap()).collect()
            };
            let held = hot(&b);
            assert_eq!(held, hot(&fresh), "{name}: departed calls still count");
            for id in held {
                b.report(0, id, 1000, Outcome::Success, NOW).unwrap();
            }
        } else {
            // Nothing in flight and equal estimates: each pick is uniform over the four, so
            // invoker 2's count is Binomial(20 000, 1/4); 5 sigma is 5 * 61 = 306 picks.
            let n = got.iter().filter(|&&id| id == 2).count();
            assert_binomial(
                n,
                got.len(),
                0.25,
                5.0,
                &format!("{name}: re-added invoker"),
            );
        }
        // Removing everything and selecting is the usual error.
        b.update(&[]).unwrap();
        assert_eq!(b.select(0, b"", NOW), Err(Status::NoProvider));
    }
}

#[test]
fn methods_are_isolated() {
    for name in NEW {
        let b = lb(
            &format!("loadbalance={name}&seed=14"),
            &[provider(1), provider(2)],
        );
        let (m1, m2) = (b.method("a").unwrap(), b.method("b").unwrap());
        // Method a: invoker 1 is loaded and slow.
        for _ in 0..50 {
            b.select_among(m1, b"k", &[1], &[], NOW).unwrap();
        }
        b.select_among(m1, b"k", &[1], &[], NOW).unwrap();
        b.report(m1, 1, 500_000, Outcome::Failure, NOW).unwrap();
        // Method b does not see it: both invokers share b's calls.
        let picks = |b: &Balancer, m: u32| -> Vec<u64> {
            (0..4000u32)
                .map(|k| {
                    let id = b.select(m, &k.to_le_bytes(), NOW).unwrap();
                    b.report(m, id, 1000, Outcome::Success, NOW).unwrap();
                    id
                })
                .collect()
        };
        let got = picks(&b, m2);
        if name == "boundedhash" {
            // Key placement with nothing in flight is deterministic: key by key what a balancer
            // that never saw method a's calls picks.
            let fresh = lb(
                &format!("loadbalance={name}&seed=14"),
                &[provider(1), provider(2)],
            );
            let m = fresh.method("b").unwrap();
            assert!(
                got == picks(&fresh, m),
                "{name}: method b sees method a's state"
            );
        } else {
            // Uniform over two: Binomial(4000, 1/2), 5 sigma = 5 * 31.6 = 158 picks.
            let n = got.iter().filter(|&&id| id == 1).count();
            assert_binomial(
                n,
                got.len(),
                0.5,
                5.0,
                &format!("{name}: method b, invoker 1"),
            );
        }
        // And method a does avoid invoker 1.
        let c = counts(&b, m1, 1000, NOW);
        assert!(c.get(&1).copied().unwrap_or(0) < 100, "{name}: {c:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// boundedhash.

#[test]
fn boundedhash_matches_consistenthash_under_light_load() {
    let invokers: Vec<Invoker> = (1..=10).map(provider).collect();
    let ch = lb("loadbalance=consistenthash", &invokers);
    let bh = lb("loadbalance=boundedhash", &invokers);
    for k in 0..5_000u32 {
        let key = format!("user-{k}");
        let a = ch.select(0, key.as_bytes(), NOW).unwrap();
        let b = bh.select(0, key.as_bytes(), NOW).unwrap();
        assert_eq!(a, b, "key {key}");
        ch.report(0, a, 10, Outcome::Success, NOW).unwrap();
        bh.report(0, b, 10, Outcome::Success, NOW).unwrap();
    }
}

#[test]
fn boundedhash_spreads_a_hot_key_within_the_bound_and_returns_it() {
    let invokers: Vec<Invoker> = (1..=8).map(provider).collect();
    let b = lb("loadbalance=boundedhash&boundedhash.factor=1.25", &invokers);
    let owner = b.select(0, b"hot", NOW).unwrap();
    b.report(0, owner, 10, Outcome::Success, NOW).unwrap();
    let held: Vec<u64> = (0..400)
        .map(|_| b.select(0, b"hot", NOW).unwrap())
        .collect();
    let cap = (1.25f64 * 400.0 / 8.0).ceil() as i64 + 1;
    for id in 1..=8 {
        assert!(active(&b, id) <= cap, "id {id}: {} > {cap}", active(&b, id));
    }
    // The walk went on along the ring: most invokers took part.
    assert!((1..=8).filter(|&id| active(&b, id) > 0).count() >= 6);
    for id in held {
        b.report(0, id, 10, Outcome::Success, NOW).unwrap();
    }
    // Load gone: the key is home again.
    assert_eq!(b.select(0, b"hot", NOW).unwrap(), owner);
}

#[test]
fn boundedhash_never_loops() {
    // Zero weights, a subset, exclusions, invokers with the same address (the later one owns
    // every shared point, the earlier one none), counts that disagree (reports without selects).
    let invokers = [
        Invoker::new(1, "10.0.0.1:1").weight(0),
        Invoker::new(2, "10.0.0.1:1").weight(0),
        Invoker::new(3, "10.0.0.3:1").weight(0),
    ];
    let b = lb("loadbalance=boundedhash&boundedhash.factor=1.0", &invokers);
    for k in 0..2000u32 {
        b.report(0, 1 + (k % 3) as u64, 10, Outcome::Success, NOW)
            .unwrap();
        let id = b
            .select_among(0, &k.to_le_bytes(), &[1, 2], &[2], NOW)
            .unwrap();
        assert_eq!(id, 1);
        b.select(0, &k.to_le_bytes(), NOW).unwrap();
    }
}

// ---------------------------------------------------------------------------------------------
// Zone preference.

fn zoned() -> Vec<Invoker> {
    vec![
        provider(1).zone("a"),
        provider(2).zone("a"),
        provider(3).zone("b"),
        provider(4).zone("b"),
        provider(5),
    ]
}

/// The C ABI and every binding read an empty zone as no zone; `Invoker::zone("")` in Rust must
/// mean the same, or the same deployment would show a zone `""` in stats from Rust only.
#[test]
fn an_empty_zone_is_no_zone_as_through_the_c_abi() {
    let b = Balancer::new("loadbalance=random&zone=a").unwrap();
    b.update(&[provider(1).zone(""), provider(2), provider(3).zone("a")])
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(&b.stats_json(NOW)).unwrap();
    let invokers = v["invokers"].as_array().unwrap();
    let of = |id: u64| invokers.iter().find(|i| i["id"] == id).unwrap();
    assert_eq!(of(1).get("zone"), None, "{}", of(1));
    assert_eq!(of(1).get("zone"), of(2).get("zone"));
    assert_eq!(of(3)["zone"], "a");
    assert_eq!(of(1)["local"], of(2)["local"]);
}

#[test]
fn zone_preference_keeps_calls_local_for_every_strategy() {
    for kind in StrategyKind::ALL {
        let b = lb(
            &format!("loadbalance={}&zone=a&seed=15", kind.name()),
            &zoned(),
        );
        for k in 0..2000u32 {
            let id = b.select(0, &k.to_le_bytes(), NOW).unwrap();
            b.report(0, id, 1000, Outcome::Success, NOW).unwrap();
            assert!(id <= 2, "{}: picked {id}", kind.name());
        }
        // Within a caller's subset too.
        let id = b.select_among(0, b"k", &[2, 3, 5], &[], NOW).unwrap();
        assert_eq!(id, 2, "{}", kind.name());
        // A subset without local invokers spills over.
        let id = b.select_among(0, b"k", &[3, 4], &[], NOW).unwrap();
        assert!(id == 3 || id == 4);
    }
}

/// The strategies that never pick a zero weight while another candidate weighs something
/// (Dubbo's ring ignores weights; its leastactive, shortestresponse and adaptive may return a
/// zero-weight invoker that is alone in being least loaded or fastest).
const NEVER_PICK_A_ZERO_WEIGHT: [StrategyKind; 5] = [
    StrategyKind::Random,
    StrategyKind::RoundRobin,
    StrategyKind::P2c,
    StrategyKind::PeakEwma,
    StrategyKind::BoundedHash,
];

#[test]
fn a_zone_drained_by_zero_weights_is_preferred_no_more() {
    // Every invoker of zone a set to weight 0 (to move its traffic away): calls go where the
    // weights are, as a set's zero weights send them, instead of staying local and spreading
    // evenly over the drained invokers (the rule for a set that weighs nothing at all).
    let drained: Vec<Invoker> = zoned()
        .into_iter()
        .map(|i| match i.id {
            1 | 2 => i.weight(0),
            _ => i,
        })
        .collect();
    for kind in NEVER_PICK_A_ZERO_WEIGHT {
        for options in ["", "&outlier.consecutiveFailures=3"] {
            let b = lb(
                &format!("loadbalance={}&zone=a&seed=15{options}", kind.name()),
                &drained,
            );
            for k in 0..500u32 {
                let id = b.select(0, &k.to_le_bytes(), NOW).unwrap();
                b.report(0, id, 1000, Outcome::Success, NOW).unwrap();
                assert!(
                    id > 2,
                    "{}{options}: picked drained invoker {id}",
                    kind.name()
                );
            }
        }
    }
    // One local invoker still weighing something keeps the zone preferred.
    let partly: Vec<Invoker> = zoned()
        .into_iter()
        .map(|i| if i.id == 1 { i.weight(0) } else { i })
        .collect();
    let b = lb("loadbalance=random&zone=a&seed=15", &partly);
    for k in 0..500u32 {
        assert_eq!(b.select(0, &k.to_le_bytes(), NOW).unwrap(), 2);
        b.report(0, 2, 1000, Outcome::Success, NOW).unwrap();
    }
}

#[test]
fn a_zone_left_with_zero_weights_by_ejections_is_preferred_no_more() {
    // Zone a: invoker 1 weighs 100, invoker 2 weighs 0. Once 1 is ejected the zone's healthy
    // invokers weigh nothing: staying local (50 % healthy, below 70 %, would keep 5 calls in
    // 7 there) would send them to the zero weight while 3, 4 and 5 weigh something. Over the
    // whole set and over a caller's subset, for the strategies that never pick a zero weight
    // while another candidate weighs something.
    let set: Vec<Invoker> = zoned()
        .into_iter()
        .map(|i| if i.id == 2 { i.weight(0) } else { i })
        .collect();
    for kind in NEVER_PICK_A_ZERO_WEIGHT {
        // One balancer for whole-set picks, one for a caller's subset (roundrobin's counters
        // are shared by both kinds of pick, and mixing them is not what is tested here).
        let [whole, subset] = [0, 1].map(|_| {
            let b = lb(
                &format!(
                    "loadbalance={}&zone=a&seed=23&outlier.consecutiveFailures=1\
                     &outlier.maxEjectionPercent=50&outlier.baseEjectionMs=1000000\
                     &outlier.maxEjectionMs=1000000",
                    kind.name()
                ),
                &set,
            );
            b.report(0, 1, 10, Outcome::Failure, NOW).unwrap();
            assert!(active_ejected(&b, 1), "{}", kind.name());
            b
        });
        for k in 0..500u32 {
            let key = k.to_le_bytes();
            let id = whole.select(0, &key, NOW).unwrap();
            whole.report(0, id, 1000, Outcome::Success, NOW).unwrap();
            assert!(id > 2, "{}: picked {id}", kind.name());
            let id = subset.select_among(0, &key, &[1, 2, 3], &[], NOW).unwrap();
            subset.report(0, id, 1000, Outcome::Success, NOW).unwrap();
            assert_eq!(id, 3, "{}: subset pick", kind.name());
        }
    }
}

/// consistenthash with a zone preference answers as its ring walked to the first local
/// invoker (what a caller naming the local invokers as candidates gets): each key keeps its
/// owner when that owner is local, and the keys of remote owners go to the local invoker that
/// follows on the ring. Also while a remote invoker is ejected (the filtered path).
#[test]
fn zone_preference_on_the_ring_is_the_walk_to_the_first_local_invoker() {
    let set: Vec<Invoker> = (1..=12)
        .map(|id| provider(id).zone(["a", "b", "c"][id as usize % 3]))
        .collect();
    let local: Vec<u64> = (1..=12).filter(|id| id % 3 == 1).collect();
    let plain = lb("loadbalance=consistenthash", &set);
    let zoned = lb("loadbalance=consistenthash&zone=b", &set);
    let ejecting = lb(
        "loadbalance=consistenthash&zone=b&outlier.consecutiveFailures=1\
         &outlier.maxEjectionPercent=10&outlier.baseEjectionMs=1000000\
         &outlier.maxEjectionMs=1000000",
        &set,
    );
    ejecting.report(0, 3, 10, Outcome::Failure, NOW).unwrap();
    assert!(ejecting.stats_json(NOW).contains("\"ejected\":true"));
    let mut kept = 0;
    for k in 0..3000u32 {
        let key = format!("key-{k}");
        let owner = plain.select(0, key.as_bytes(), NOW).unwrap();
        let walked = plain
            .select_among(0, key.as_bytes(), &local, &[], NOW)
            .unwrap();
        kept += (owner == walked) as u32;
        assert_eq!(local.contains(&owner), owner == walked, "key {key}");
        for b in [&zoned, &ejecting] {
            assert_eq!(
                b.select(0, key.as_bytes(), NOW).unwrap(),
                walked,
                "key {key}"
            );
        }
    }
    // About a third of the keys are owned by local invokers to begin with (4 of 12).
    assert!((800..1200).contains(&kept), "{kept} keys kept their owner");
}

#[test]
fn zone_preference_spills_over_as_local_health_drops() {
    let config = "loadbalance=random&zone=a&seed=16&zone.minHealthyPercent=70\
                  &outlier.consecutiveFailures=1&outlier.maxEjectionPercent=50\
                  &outlier.baseEjectionMs=1000000&outlier.maxEjectionMs=1000000";
    let b = lb(config, &zoned());
    // One of the two local invokers ejected: 50 % healthy < 70 % → stays local with probability
    // 0.5 / 0.7; the rest spills over to every healthy invoker (1 local of 4).
    b.report(0, 1, 10, Outcome::Failure, NOW).unwrap();
    let draws = 40_000;
    let c = counts(&b, 0, draws, NOW);
    assert_eq!(c.get(&1), None, "ejected invoker picked");
    let p_local = 5.0 / 7.0 + 2.0 / 7.0 * 0.25;
    assert_binomial(c[&2], draws, p_local, 5.0, "local share at 50 % health");
    // Both local invokers ejected: everything spills over.
    b.report(0, 2, 10, Outcome::Failure, NOW).unwrap();
    let c = counts(&b, 0, 3000, NOW);
    assert_eq!(c.get(&1).or(c.get(&2)), None);
    for id in 3..=5 {
        assert_binomial(c[&id], 3000, 1.0 / 3.0, 5.0, "spill-over");
    }
}

#[test]
fn filtered_subsets_are_drawn_by_weight() {
    // The local zone and the not-ejected invokers are subsets with draw tables of their own,
    // which p2c, peakewma, random and leastactive draw from: an idle cluster (each call
    // reported at once) still gets exactly the weights within them, and a zero weight is never
    // drawn while another candidate weighs something.
    let set = vec![
        provider(1).zone("a").weight(100),
        provider(2).zone("a").weight(300),
        provider(3).zone("a").weight(0),
        provider(4).zone("b").weight(100),
        provider(5).zone("b").weight(100),
    ];
    let draws = 40_000;
    for (name, seed) in [
        ("p2c", 31),
        ("peakewma", 40),
        ("random", 34),
        ("leastactive", 37),
    ] {
        let local = lb(&format!("loadbalance={name}&zone=a&seed={seed}"), &set);
        let c = counts(&local, 0, draws, NOW);
        assert_eq!(c.get(&3).or(c.get(&4)).or(c.get(&5)), None, "{name}: {c:?}");
        let what = format!("{name}: local subset, weight 100 of 400");
        assert_binomial(c[&1], draws, 0.25, 5.0, &what);

        let ejecting = format!(
            "loadbalance={name}&seed={}&outlier.consecutiveFailures=1\
             &outlier.maxEjectionPercent=50&outlier.baseEjectionMs=1000000\
             &outlier.maxEjectionMs=1000000",
            seed + 1
        );
        let healthy = lb(&ejecting, &set);
        healthy.report(0, 2, 10, Outcome::Failure, NOW).unwrap();
        let c = counts(&healthy, 0, draws, NOW);
        assert_eq!(c.get(&2).or(c.get(&3)), None, "{name}: {c:?}");
        for id in [1, 4, 5] {
            let what = format!("{name}: not-ejected subset, equal weights");
            assert_binomial(c[&id], draws, 1.0 / 3.0, 5.0, &what);
        }

        // While an invoker of the subset warms up, its effective weight applies, not the
        // table's: invoker 1 halfway through its warm-up weighs half (Dubbo's ramp is linear in
        // uptime), so 50 of 350.
        let mut warming = set.clone();
        warming[0] = warming[0]
            .clone()
            .start_time_ms(NOW / 1000 - 300_000)
            .warmup_ms(600_000);
        let ramping = lb(
            &format!("loadbalance={name}&zone=a&seed={}", seed + 2),
            &warming,
        );
        let c = counts(&ramping, 0, draws, NOW);
        let what = format!("{name}: warming invoker in the local subset");
        assert_binomial(c[&1], draws, 50.0 / 350.0, 5.0, &what);
    }
    // leastactive with the local heavyweight busy: the least count is 0 and the idle local
    // invokers are 1 (weight 100) and 3 (weight 0), so every pick is 1, although the subset's
    // draws land on the busy one three times in four.
    let local = lb("loadbalance=leastactive&zone=a&seed=36", &set);
    while local.select(0, b"", NOW).unwrap() != 2 {}
    for id in [1u64, 3] {
        for _ in 0..active(&local, id) {
            local.report(0, id, 1000, Outcome::Success, NOW).unwrap();
        }
    }
    assert_eq!(active(&local, 2), 1, "one call held on the heavyweight");
    let c = counts(&local, 0, 4_000, NOW);
    assert_eq!(
        c.get(&1),
        Some(&4_000),
        "only the idle weighted invoker: {c:?}"
    );
}

#[test]
fn options_unset_or_inert_change_nothing() {
    // A zone no invoker has, and outlier ejection that never fires, keep every Dubbo strategy's
    // sequence exactly as without them (same seed).
    for kind in StrategyKind::ALL {
        let invokers: Vec<Invoker> = (1..=6).map(|i| provider(i).weight(10 * i as i32)).collect();
        let plain = lb(&format!("loadbalance={}&seed=21", kind.name()), &invokers);
        let opts = lb(
            &format!(
                "loadbalance={}&seed=21&zone=nowhere&outlier.consecutiveFailures=1000",
                kind.name()
            ),
            &invokers,
        );
        for k in 0..3000u32 {
            let key = k.to_le_bytes();
            let a = plain.select(0, &key, NOW + k as i64).unwrap();
            let b = opts.select(0, &key, NOW + k as i64).unwrap();
            assert_eq!(a, b, "{} diverged at call {k}", kind.name());
            let outcome = if k % 7 == 0 {
                Outcome::Failure
            } else {
                Outcome::Success
            };
            let latency = 1000 + (k % 13) as i64 * 100;
            plain
                .report(0, a, latency, outcome, NOW + k as i64)
                .unwrap();
            opts.report(0, b, latency, outcome, NOW + k as i64).unwrap();
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Outlier ejection.

#[test]
fn outlier_ejection_backs_off_and_returns() {
    for kind in StrategyKind::ALL {
        let b = lb(
            &format!(
                "loadbalance={}&seed=17&outlier.consecutiveFailures=3&outlier.baseEjectionMs=1000\
                 &outlier.maxEjectionMs=2500&outlier.maxEjectionPercent=50{}",
                kind.name(),
                // Failures must not also look slow here: ejection alone is under test.
                if *kind == StrategyKind::PeakEwma {
                    "&peakewma.failurePenalty=0"
                } else {
                    ""
                }
            ),
            &(1..=4).map(provider).collect::<Vec<_>>(),
        );
        let name = kind.name();
        let ms = |t: i64| NOW + t * 1000;
        let picks = |t: i64| -> BTreeMap<u64, usize> {
            let mut c = BTreeMap::new();
            for k in 0..400u32 {
                let id = b.select(0, &k.to_le_bytes(), ms(t)).unwrap();
                b.report(0, id, 1000, Outcome::Success, ms(t)).unwrap();
                *c.entry(id).or_insert(0) += 1;
            }
            c
        };
        // Two failures, a success, two failures: never 3 in a row.
        for outcome in [
            Outcome::Failure,
            Outcome::Timeout,
            Outcome::Success,
            Outcome::Failure,
            Outcome::Failure,
        ] {
            b.report(0, 1, 10, outcome, ms(0)).unwrap();
        }
        assert!(picks(0).contains_key(&1), "{name}: ejected too early");
        for _ in 0..3 {
            b.report(0, 1, 10, Outcome::Failure, ms(0)).unwrap();
        }
        assert!(!picks(1).contains_key(&1), "{name}: not ejected");
        assert!(!picks(999).contains_key(&1), "{name}: back too early");
        assert!(picks(1000).contains_key(&1), "{name}: not back after 1 s");
        // Ejected again at once: twice as long.
        for _ in 0..3 {
            b.report(0, 1, 10, Outcome::Failure, ms(1000)).unwrap();
        }
        assert!(
            !picks(2999).contains_key(&1),
            "{name}: second ejection too short"
        );
        assert!(
            picks(3000).contains_key(&1),
            "{name}: second ejection too long"
        );
        // Third in a row: capped at 2.5 s.
        for _ in 0..3 {
            b.report(0, 1, 10, Outcome::Failure, ms(3000)).unwrap();
        }
        assert!(
            !picks(5499).contains_key(&1),
            "{name}: third ejection too short"
        );
        assert!(picks(5500).contains_key(&1), "{name}: cap not applied");
        let v: serde_json::Value = serde_json::from_str(&b.stats_json(ms(5500))).unwrap();
        assert_eq!(v["invokers"][0]["ejections"], 3, "{name}");
    }
}

#[test]
fn outlier_failure_rate_rule() {
    let b = lb(
        "loadbalance=p2c&seed=18&outlier.failureRate=50&outlier.minRequests=10\
         &outlier.windowMs=1000&outlier.maxEjectionPercent=50",
        &(1..=4).map(provider).collect::<Vec<_>>(),
    );
    // 30 % failures (never 50 % once the window has 10 calls): stays.
    for k in 0..50 {
        let outcome = if k % 10 < 3 {
            Outcome::Failure
        } else {
            Outcome::Success
        };
        b.report(0, 1, 10, outcome, NOW).unwrap();
    }
    assert_eq!(stat(&b, NOW, 1, "ejections"), 0);
    // A new window at 60 %: ejected once it has 10 calls.
    let t = NOW + 2_000_000;
    for k in 0..10 {
        let outcome = if k % 5 >= 2 {
            Outcome::Failure
        } else {
            Outcome::Success
        };
        b.report(0, 1, 10, outcome, t).unwrap();
    }
    assert_eq!(stat(&b, t, 1, "ejections"), 1);
    let c = counts(&b, 0, 1000, t);
    assert_eq!(c.get(&1), None);
}

#[test]
fn outlier_ejection_never_ejects_everyone() {
    for percent in [0, 10, 50, 100] {
        let b = lb(
            &format!(
                "loadbalance=random&seed=19&outlier.consecutiveFailures=1\
                 &outlier.maxEjectionPercent={percent}"
            ),
            &(1..=10).map(provider).collect::<Vec<_>>(),
        );
        // A bad network: every invoker fails.
        for round in 0..5 {
            for id in 1..=10 {
                b.report(0, id, 10, Outcome::Failure, NOW + round).unwrap();
            }
        }
        let ejected = (1..=10).filter(|&id| active_ejected(&b, id)).count();
        // 0 % never ejects; otherwise at least one invoker and never all.
        let budget = if percent == 0 {
            0
        } else {
            (10 * percent / 100).clamp(1, 9)
        };
        assert_eq!(ejected, budget, "maxEjectionPercent={percent}");
        let c = counts(&b, 0, 2000, NOW);
        assert_eq!(c.len(), 10 - budget);
        // A caller subset made only of ejected invokers is still answered.
        let ejected_ids: Vec<u64> = (1..=10).filter(|&id| active_ejected(&b, id)).collect();
        if !ejected_ids.is_empty() {
            let id = b.select_among(0, b"", &ejected_ids, &[], NOW).unwrap();
            assert!(ejected_ids.contains(&id));
        }
    }
    // A set shrinking below its ejections lifts the extra ones.
    let b = lb(
        "loadbalance=p2c&outlier.consecutiveFailures=1&outlier.maxEjectionPercent=50",
        &(1..=10).map(provider).collect::<Vec<_>>(),
    );
    for id in 1..=5 {
        b.report(0, id, 10, Outcome::Failure, NOW).unwrap();
    }
    b.update(&(1..=4).map(provider).collect::<Vec<_>>())
        .unwrap();
    let ejected = (1..=4).filter(|&id| active_ejected(&b, id)).count();
    assert_eq!(ejected, 2);
}

/// An ejection that is over frees its place in the budget even when no pick came between to
/// lift it: reports alone (a consumer whose calls all fail fast, say) must not be refused.
#[test]
fn an_ejection_that_is_over_leaves_the_budget_without_a_pick_between() {
    // 10 invokers at 10 %: one ejection at a time; a first ejection lasts 1 s.
    let b = lb(
        "loadbalance=random&seed=3&outlier.consecutiveFailures=1&outlier.baseEjectionMs=1000",
        &(1..=10).map(provider).collect::<Vec<_>>(),
    );
    b.report(0, 1, 10, Outcome::Failure, NOW).unwrap();
    assert!(active_ejected(&b, 1));
    b.report(0, 2, 10, Outcome::Failure, NOW + 500_000).unwrap();
    assert!(!active_ejected(&b, 2), "over budget while 1 is out");
    // 1's ejection ended at NOW + 1 s; nothing was picked since.
    b.report(0, 2, 10, Outcome::Failure, NOW + 1_500_000)
        .unwrap();
    assert!(!active_ejected(&b, 1), "1's ejection is over");
    assert!(active_ejected(&b, 2), "2 takes the freed place");
    let c = counts(&b, 0, 2000, NOW + 1_600_000);
    assert_eq!(c.get(&2), None);
    assert!(c.contains_key(&1));
}

/// A method's typical latency starts from its first success's own latency, not from an
/// estimate that a failure penalty inflated: seeded at the penalty (1 s), a fast invoker that
/// failed once would look typical at about 1 s and come back only at the decay's pace (10 s).
#[test]
fn peakewma_a_failure_before_the_first_success_does_not_seed_the_typical_latency() {
    let b = lb("loadbalance=peakewma", &[provider(1), provider(2)]);
    let mut t = NOW;
    let mut call = |outcome| {
        assert_eq!(b.select_among(0, b"", &[1], &[], t).unwrap(), 1);
        b.report(0, 1, 1000, outcome, t + 1000).unwrap();
        t += 2000;
    };
    call(Outcome::Failure);
    for _ in 0..4 {
        call(Outcome::Success);
    }
    let v: serde_json::Value = serde_json::from_str(&b.stats_json(t)).unwrap();
    let estimate = v["invokers"][0]["latency_estimate_us"].as_i64().unwrap();
    // 1 s after the failure, then halfway to 1 ms in log space per success: 31.6, 5.6, 2.4 ms,
    // then the typical 1 ms.
    assert!(estimate <= 2_500, "estimate {estimate} µs");
}

fn active_ejected(b: &Balancer, id: u64) -> bool {
    let v: serde_json::Value = serde_json::from_str(&b.stats_json(NOW)).unwrap();
    v["invokers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["id"] == id)
        .unwrap()["ejected"]
        .as_bool()
        .unwrap()
}

#[test]
fn consistenthash_with_ejection_moves_only_the_ejected_keys() {
    let invokers: Vec<Invoker> = (1..=5).map(provider).collect();
    let b = lb(
        "loadbalance=consistenthash&outlier.consecutiveFailures=1&outlier.maxEjectionPercent=20",
        &invokers,
    );
    let keys: Vec<String> = (0..2000).map(|k| format!("k{k}")).collect();
    let before: Vec<u64> = keys
        .iter()
        .map(|k| b.select(0, k.as_bytes(), NOW).unwrap())
        .collect();
    b.report(0, 3, 10, Outcome::Failure, NOW).unwrap();
    for (k, &was) in keys.iter().zip(&before) {
        let now = b.select(0, k.as_bytes(), NOW).unwrap();
        if was == 3 {
            assert_ne!(now, 3);
        } else {
            assert_eq!(now, was, "key {k} moved");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Concurrency and allocation.

#[test]
fn concurrent_selection_on_one_shared_instance() {
    let configs = [
        "loadbalance=p2c",
        "loadbalance=peakewma",
        "loadbalance=boundedhash",
        "loadbalance=p2c&zone=a&outlier.consecutiveFailures=2&outlier.maxEjectionPercent=50\
         &outlier.baseEjectionMs=1&slowstart.windowMs=1000",
        "loadbalance=peakewma&zone=b&outlier.failureRate=30&outlier.minRequests=5\
         &outlier.baseEjectionMs=1",
        "loadbalance=roundrobin&zone=a&outlier.consecutiveFailures=1&outlier.baseEjectionMs=1",
    ];
    for config in configs {
        let b = Arc::new(lb(config, &zoned()));
        let methods: Vec<u32> = ["", "x"].iter().map(|m| b.method(m).unwrap()).collect();
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                let (b, methods) = (b.clone(), methods.clone());
                std::thread::spawn(move || {
                    for i in 0..20_000u64 {
                        let m = methods[(i % 2) as usize];
                        let now = NOW + (i as i64) * 100;
                        let key = (t << 32 | i).to_le_bytes();
                        let id = if i % 5 == 0 {
                            b.select_among(m, &key, &[1, 3, 4], &[3], now).unwrap()
                        } else {
                            b.select(m, &key, now).unwrap()
                        };
                        let outcome = match (id + i) % 9 {
                            0 => Outcome::Failure,
                            1 => Outcome::Timeout,
                            2 => Outcome::Cancelled,
                            _ => Outcome::Success,
                        };
                        b.report(m, id, 500 + (i % 7) as i64 * 300, outcome, now)
                            .unwrap();
                        if i % 4000 == 0 && t == 0 {
                            b.update(&zoned()).unwrap();
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let v: serde_json::Value = serde_json::from_str(&b.stats_json(NOW)).unwrap();
        let mut selected = 0;
        for inv in v["invokers"].as_array().unwrap() {
            assert_eq!(inv["active"], 0, "{config}: calls left in flight");
            selected += inv["selected"].as_u64().unwrap();
        }
        assert_eq!(selected, 80_000, "{config}");
    }
}

#[test]
fn no_allocation_on_the_hot_path() {
    let now = NOW;
    let mut configs: Vec<String> = NEW
        .iter()
        .map(|n| format!("loadbalance={n}&seed=1"))
        .collect();
    for n in NEW {
        configs.push(format!(
            "loadbalance={n}&seed=1&zone=a&outlier.consecutiveFailures=2\
             &outlier.maxEjectionPercent=50&outlier.baseEjectionMs=1000000\
             &outlier.maxEjectionMs=1000000&slowstart.windowMs=1000000"
        ));
    }
    for kind in StrategyKind::ALL {
        configs.push(format!(
            "loadbalance={}&seed=1&zone=a&outlier.consecutiveFailures=2&outlier.failureRate=60\
             &outlier.baseEjectionMs=1000000&outlier.maxEjectionMs=1000000",
            kind.name()
        ));
    }
    // Picks that gather their looks (d choices, full scans) and the preference order.
    for options in [
        "p2c.choices=0",
        "peakewma.choices=4",
        "peakewma.choices=0&peakewma.preferenceMs=1000",
    ] {
        let strategy = options.split('.').next().unwrap();
        configs.push(format!("loadbalance={strategy}&seed=1&{options}"));
    }
    // Full scans of more candidates than a pick's field holds: a wider field on the stack,
    // then (beyond 128) the thread's reused buffer.
    for n in [40, 200] {
        let wide: Vec<Invoker> = (1..=n).map(provider).collect();
        let b = lb(
            "loadbalance=peakewma&seed=1&peakewma.choices=0&peakewma.preferenceMs=1000",
            &wide,
        );
        let round = |i: i64| {
            let id = b.select(0, b"", now + i).unwrap();
            b.report(0, id, 1000 + (i % 50) * 100, Outcome::Success, now + i)
                .unwrap();
        };
        (0..20_000).for_each(round);
        let before = allocations();
        (20_000..40_000).for_each(round);
        assert_eq!(allocations() - before, 0, "full scan of {n}: allocated");
    }
    for config in configs {
        let mut invokers = zoned();
        // Warming and (later) joining invokers exercise the time-dependent weight paths.
        invokers.push(provider(6).zone("a").start_time_ms(now / 1000 - 30_000));
        let b = lb(&config, &invokers);
        invokers.push(provider(7).zone("a"));
        b.update(&invokers).unwrap();
        let m = b.method("m").unwrap();
        // Invoker 4 fails until it is ejected (for good); everyone else is fine.
        // Round robin leaves its precomputed period on subset picks (rebuilt, amortised): whole
        // set only there.
        let subsets = !config.contains("roundrobin");
        let round = |i: u64, subset: bool| {
            let subset = subset && subsets;
            let key = i.to_le_bytes();
            let id = if subset {
                b.select_among(m, &key, &[1, 2, 4, 6, 7], &[2], now + i as i64)
                    .unwrap()
            } else {
                b.select(m, &key, now + i as i64).unwrap()
            };
            let outcome = if id == 4 {
                Outcome::Failure
            } else {
                Outcome::Success
            };
            b.report(m, id, 1000 + (i % 50) as i64 * 100, outcome, now + i as i64)
                .unwrap();
        };
        b.report(m, 4, 10, Outcome::Failure, now).unwrap();
        b.report(m, 4, 10, Outcome::Failure, now).unwrap();
        for i in 0..20_000 {
            round(i, i % 2 == 0);
        }
        let before = allocations();
        for i in 20_000..40_000 {
            round(i, i % 2 == 0);
        }
        assert_eq!(
            allocations() - before,
            0,
            "{config}: the hot path allocated"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// The options against the remaining checklist: weights, churn, methods, warm-up, outcomes.

#[test]
fn options_keep_weights_within_what_they_leave() {
    // Zone a holds invokers 1 (weight 300) and 2 (weight 100): local picks follow the weights.
    let invokers = [
        provider(1).zone("a").weight(300),
        provider(2).zone("a"),
        provider(3).zone("b").weight(500),
    ];
    for name in ["random", "p2c", "peakewma"] {
        let b = lb(&format!("loadbalance={name}&zone=a&seed=22"), &invokers);
        let draws = 40_000;
        let c = counts(&b, 0, draws, NOW);
        assert_eq!(c.get(&3), None, "{name}");
        assert_binomial(c[&1], draws, 0.75, 5.0, &format!("{name} in zone"));
    }
    // With invoker 3 of 1..=4 ejected, the others keep their relative weights.
    let invokers = [
        provider(1).weight(100),
        provider(2).weight(200),
        provider(3),
        provider(4).weight(700),
    ];
    let b = lb(
        "loadbalance=p2c&seed=23&outlier.consecutiveFailures=1&outlier.maxEjectionPercent=25",
        &invokers,
    );
    b.report(0, 3, 10, Outcome::Timeout, NOW).unwrap();
    let draws = 40_000;
    let c = counts(&b, 0, draws, NOW);
    assert_eq!(c.get(&3), None);
    assert_binomial(c[&2], draws, 0.2, 5.0, "weight 200 of 1000 left");
    assert_binomial(c[&4], draws, 0.7, 5.0, "weight 700 of 1000 left");
}

#[test]
fn options_follow_churn() {
    let b = lb(
        "loadbalance=p2c&seed=24&zone=a&outlier.consecutiveFailures=1&outlier.maxEjectionPercent=50",
        &[provider(1).zone("a"), provider(2).zone("a"), provider(3).zone("b"), provider(4).zone("b")],
    );
    b.report(0, 1, 10, Outcome::Failure, NOW).unwrap();
    assert!(active_ejected(&b, 1));
    // Invoker 1 leaves while ejected and comes back: a fresh start, not ejected.
    b.update(&[
        provider(2).zone("a"),
        provider(3).zone("b"),
        provider(4).zone("b"),
    ])
    .unwrap();
    b.update(&[
        provider(1).zone("a"),
        provider(2).zone("a"),
        provider(3).zone("b"),
        provider(4).zone("b"),
    ])
    .unwrap();
    assert!(!active_ejected(&b, 1));
    let c = counts(&b, 0, 2000, NOW);
    assert!(c[&1] > 700 && c[&2] > 700 && c.len() == 2, "{c:?}");
    // Invokers change zones: the preference follows at once.
    b.update(&[
        provider(1).zone("b"),
        provider(2).zone("b"),
        provider(3).zone("a"),
        provider(4).zone("a"),
    ])
    .unwrap();
    let c = counts(&b, 0, 2000, NOW);
    assert!(c.keys().all(|&id| id >= 3), "{c:?}");
}

#[test]
fn outlier_state_is_per_invoker_not_per_method() {
    // An invoker is healthy or not: failures of any method count, and an ejection applies to
    // every method (strategy state such as in-flight counts stays per method).
    let b = lb(
        "loadbalance=p2c&seed=25&outlier.consecutiveFailures=3&outlier.maxEjectionPercent=50",
        &[provider(1), provider(2), provider(3)],
    );
    let (m1, m2) = (b.method("a").unwrap(), b.method("b").unwrap());
    b.report(m1, 1, 10, Outcome::Failure, NOW).unwrap();
    b.report(m2, 1, 10, Outcome::Timeout, NOW).unwrap();
    b.report(m1, 1, 10, Outcome::Failure, NOW).unwrap();
    for m in [0, m1, m2] {
        assert_eq!(counts(&b, m, 500, NOW).get(&1), None, "method {m}");
    }
}

#[test]
fn slow_start_and_options_compose_with_warmup() {
    // Invoker 4 joins an existing set, warming up too (60 s of a 10 min warm-up: weight 10 of
    // 100) and ramping (slow start 30 s from 20 %): effective weight 10 × 0.2 = 2 at first.
    let now_ms = NOW / 1000;
    let b = lb(
        "loadbalance=p2c&seed=26&slowstart.windowMs=30000&slowstart.minWeightPercent=20",
        &[provider(1), provider(2), provider(3)],
    );
    b.update(&[
        provider(1),
        provider(2),
        provider(3),
        provider(4).start_time_ms(now_ms - 60_000),
    ])
    .unwrap();
    let draws = 60_000;
    let c = counts(&b, 0, draws, NOW);
    assert_binomial(
        c.get(&4).copied().unwrap_or(0),
        draws,
        2.0 / 302.0,
        5.0,
        "warm-up x ramp",
    );
    // After the ramp, the warm-up alone: 90 s of 600 s → 15.
    let c = counts(&b, 0, draws, NOW + 30_000_000);
    assert_binomial(
        c.get(&4).copied().unwrap_or(0),
        draws,
        15.0 / 315.0,
        5.0,
        "warm-up only",
    );
}

#[test]
fn p2c_and_boundedhash_count_calls_in_flight_whatever_the_outcome() {
    // p2c's only signal is the caller's own in-flight count: failures and timeouts end calls
    // like successes, cancelled calls undo the count; the outcome itself is outlier ejection's
    // business.
    for name in ["p2c", "boundedhash"] {
        let b = lb(
            &format!("loadbalance={name}&seed=27"),
            &[provider(1), provider(2)],
        );
        for outcome in [
            Outcome::Success,
            Outcome::Failure,
            Outcome::Timeout,
            Outcome::Cancelled,
        ] {
            let ids = hold(&b, 0, 40, NOW);
            assert!(active(&b, 1) + active(&b, 2) == 40);
            for id in ids {
                b.report(0, id, 5000, outcome, NOW).unwrap();
            }
            assert_eq!(active(&b, 1) + active(&b, 2), 0, "{name} {outcome:?}");
        }
        if name == "p2c" {
            let c = counts(&b, 0, 4000, NOW);
            assert!(c[&1] > 1000 && c[&2] > 1000, "{name}: {c:?}");
        }
    }
}

#[test]
fn boundedhash_gives_a_warming_invoker_its_keys_gradually_and_keeps_them() {
    // Invoker 4 started 60 s ago (10 % of its weight with the default 10 min warm-up): it takes
    // about 10 % of the keys the ring gives it; at 300 s, about 50 % — a superset.
    let now_ms = NOW / 1000;
    let mut invokers: Vec<Invoker> = (1..=3).map(provider).collect();
    invokers.push(provider(4).start_time_ms(now_ms - 60_000));
    let b = lb("loadbalance=boundedhash", &invokers);
    let plain = lb(
        "loadbalance=consistenthash",
        &(1..=4).map(provider).collect::<Vec<_>>(),
    );
    let keys: Vec<[u8; 4]> = (0..20_000u32).map(|k| k.to_le_bytes()).collect();
    let own: Vec<bool> = keys
        .iter()
        .map(|k| plain.select(0, k, NOW).unwrap() == 4)
        .collect();
    let pick = |t: i64| -> Vec<bool> {
        keys.iter()
            .map(|k| {
                let id = b.select(0, k, t).unwrap();
                b.report(0, id, 100, Outcome::Success, t).unwrap();
                id == 4
            })
            .collect()
    };
    let early = pick(NOW);
    let later = pick(NOW + 240_000_000);
    let owned = own.iter().filter(|&&o| o).count();
    let early_n = early.iter().filter(|&&o| o).count();
    let later_n = later.iter().filter(|&&o| o).count();
    assert_binomial(early_n, owned, 0.10, 5.0, "keys taken at 10 % weight");
    assert_binomial(later_n, owned, 0.50, 5.0, "keys taken at 50 % weight");
    assert!(
        early.iter().zip(&later).all(|(e, l)| !e || *l),
        "a key taken early moved away later"
    );
}

#[test]
fn boundedhash_keeps_the_ring_when_every_invoker_warms_up_together() {
    // A full redeploy: every invoker 60 s into Dubbo's 10-min warm-up (10 % of its weight), or
    // every id new under slow start. Relative to each other they weigh the same, so under light
    // load every key stays where consistenthash puts it (a share relative to full weight made
    // most keys skip every owner and fall back to the first invoker of the set).
    let now_ms = NOW / 1000;
    let warming: Vec<Invoker> = (1..=4)
        .map(|i| {
            provider(i)
                .start_time_ms(now_ms - 60_000)
                .warmup_ms(600_000)
        })
        .collect();
    let ramped = lb(
        "loadbalance=boundedhash&slowstart.windowMs=60000",
        &(1..=4).map(provider).collect::<Vec<_>>(),
    );
    let green: Vec<Invoker> = (5..=8).map(provider).collect();
    ramped.update(&green).unwrap();
    for (b, set) in [
        (lb("loadbalance=boundedhash", &warming), &warming),
        (ramped, &green),
    ] {
        let ch = lb("loadbalance=consistenthash", set);
        for k in 0..2_000u32 {
            let key = format!("key-{k}");
            let got = b.select(0, key.as_bytes(), NOW).unwrap();
            b.report(0, got, 1000, Outcome::Success, NOW).unwrap();
            let ring = ch.select(0, key.as_bytes(), NOW).unwrap();
            ch.report(0, ring, 1000, Outcome::Success, NOW).unwrap();
            assert_eq!(got, ring, "key {key}");
        }
    }
}

#[test]
fn boundedhash_bound_is_the_exact_ceiling() {
    // ⌈factor × (in flight + 1) / n⌉ at equal weights, computed exactly: in f64, 1.25 × 28 / 5
    // is 7.000000000000001, and its ceiling let an invoker take an 8th call.
    for (factor, num, den, n) in [
        ("1.25", 5i64, 4i64, 5u64),
        ("1.5", 3, 2, 3),
        ("1.1", 11, 10, 4),
    ] {
        let b = lb(
            &format!("loadbalance=boundedhash&boundedhash.factor={factor}"),
            &(1..=n).map(provider).collect::<Vec<_>>(),
        );
        let mut active: BTreeMap<u64, i64> = BTreeMap::new();
        let mut reached = false;
        for calls in 1..=80i64 {
            // Nothing is reported: `calls` are in flight after this select.
            let id = b.select(0, b"hot-key", NOW).unwrap();
            let held = active.entry(id).or_insert(0);
            *held += 1;
            let d = den * n as i64;
            let bound = (num * calls + d - 1) / d;
            assert!(
                *held <= bound,
                "factor {factor}, {n} invokers: invoker {id} holds {held} of {calls}, bound {bound}"
            );
            reached |= *held == bound && (num * calls) % d == 0;
        }
        // The bound was met exactly where factor × calls / n is whole (the rounding case);
        // 1.1 (not a binary fraction) is checked for the bound only.
        assert!(
            reached || factor == "1.1",
            "factor {factor}: no whole bound was reached"
        );
    }
}

/// Provider metrics are adaptive's: any other strategy accepts and ignores them. (Each
/// strategy's per-method words share their space, so metrics written for a peakewma or
/// shortestresponse balancer would overwrite its latency estimates.)
#[test]
fn provider_metrics_leave_other_strategies_unchanged() {
    let invokers: Vec<Invoker> = (1..=4).map(provider).collect();
    for strategy in ["peakewma", "shortestresponse", "leastactive", "random"] {
        let config = format!("loadbalance={strategy}&seed=21");
        let (plain, fed) = (lb(&config, &invokers), lb(&config, &invokers));
        let run = |b: &Balancer, metrics: bool| -> Vec<u64> {
            (0..2_000i64)
                .map(|k| {
                    let now = NOW + k * 1_000;
                    let id = b.select(0, b"", now).unwrap();
                    // Invoker 1 is slow, so the latency-aware strategies have estimates to lose.
                    let rt = if id == 1 { 40_000 } else { 1_000 + k % 7 };
                    b.report(0, id, rt, Outcome::Success, now).unwrap();
                    if metrics {
                        for other in 1..=4 {
                            b.report_provider_metrics(0, other, now / 1000, 5.0, 7, now)
                                .unwrap();
                        }
                    }
                    id
                })
                .collect()
        };
        let (a, b) = (run(&plain, false), run(&fed, true));
        assert_eq!(a, b, "{strategy}: the picks changed");
        let end = NOW + 2_000 * 1_000;
        assert_eq!(plain.stats_json(end), fed.stats_json(end), "{strategy}");
        // Bad metrics are still rejected with a clear error.
        assert_eq!(
            fed.report_provider_metrics(0, 1, 1, -1.0, 0, end),
            Err(Status::InvalidArgument)
        );
    }
}
