//! Orderings the simulator must show on small scenarios (a few seconds of virtual time each).
//! The simulator's modules are compiled in from examples/simulate; its goals are reported by
//! the example, not asserted here.

#[allow(dead_code)]
#[path = "../examples/simulate/engine/mod.rs"]
mod engine;
#[allow(dead_code)]
#[path = "../examples/simulate/oracle.rs"]
mod oracle;
#[allow(dead_code)]
#[path = "../examples/simulate/policy.rs"]
mod policy;
#[allow(dead_code)]
#[path = "../examples/simulate/provider.rs"]
mod provider;
#[allow(dead_code)]
#[path = "../examples/simulate/rng.rs"]
mod rng;
#[allow(dead_code)]
#[path = "../examples/simulate/scenario.rs"]
mod scenario;

use engine::{PolicySpec, RunResult, RunSpec};

fn spec(id: &str, secs: f64, policy: &str, load: f64, consumers: usize, seed: u64) -> RunSpec {
    RunSpec {
        scenario: scenario::build(id, Some((secs * 1e6) as i64), &scenario::Model::default())
            .expect("a known scenario"),
        policy: PolicySpec::parse(policy),
        load,
        consumers,
        seed,
        timeout_us: 1_000_000,
        retries: 0,
        buckets: 20,
    }
}

fn run(id: &str, secs: f64, policy: &str, load: f64, consumers: usize, seed: u64) -> RunResult {
    engine::run(&spec(id, secs, policy, load, consumers, seed)).expect("a known strategy")
}

/// The strategies below have landed: a configuration the library rejects (a renamed option, a
/// strategy gone missing) must fail the test, not skip it.
fn assert_known(config: &str) {
    if let Err(e) = polylb::Balancer::new(&format!("loadbalance={config}")) {
        panic!("the library rejects 'loadbalance={config}': {e}");
    }
}

#[test]
fn leastactive_beats_random_with_one_slow_provider() {
    for seed in [1, 2] {
        for consumers in [1, 50] {
            let la = run("2a", 3.0, "leastactive", 0.85, consumers, seed);
            let rnd = run("2a", 3.0, "random", 0.85, consumers, seed);
            assert!(
                la.p99_us < 0.9 * rnd.p99_us,
                "seed {seed}, {consumers} consumers: leastactive p99 {} vs random {}",
                la.p99_us,
                rnd.p99_us
            );
            // And it sends the slow provider less than its even share.
            assert!(la.providers[0].share < 0.22, "{:?}", la.providers[0]);
            // Random's share of the slow provider is Binomial(attempts, 1/4) / attempts: within
            // 5 sd (about ±0.011 for the ~41 000 attempts of these runs).
            let sd = (0.25 * 0.75 / rnd.attempts as f64).sqrt();
            assert!(
                (rnd.providers[0].share - 0.25).abs() <= 5.0 * sd,
                "random's share of provider 0: {} (1/4 ± {:.4})",
                rnd.providers[0].share,
                5.0 * sd
            );
        }
    }
}

#[test]
fn peakewma_avoids_the_fast_failing_provider() {
    assert_known("peakewma");
    for consumers in [1, 50] {
        let ewma = run("4", 4.0, "peakewma", 0.7, consumers, 1);
        let rnd = run("4", 4.0, "random", 0.7, consumers, 1);
        assert!(rnd.error_rate() > 0.2, "random: {}", rnd.error_rate());
        assert!(
            ewma.providers[0].share < 0.05 && ewma.error_rate() < 0.05,
            "{consumers} consumers: peakewma sent {:.2} % to the failing provider, error rate {:.3} %",
            ewma.providers[0].share * 100.0,
            ewma.error_rate() * 100.0
        );
    }
}

#[test]
fn peakewma_preference_helps_many_consumers() {
    // 50 consumers at 85 % load, each with about one call in flight: with a per-balancer
    // preference between equal invokers, a consumer's calls gather where its own in-flight
    // counts mean something (a GC pause scenario, 6 s). One seed's p99 ratio spreads from
    // about 0.87 to 1.01 (standard deviation about 0.045), so the mean over 8 seeds is
    // asserted, below 0.99: 0.938 and 0.955 in the runs before and after a peakewma change
    // (session 32), about 2 standard errors (0.016) or more from the bound. (Asserted per seed
    // at 3 % on two seeds, it failed on a version of that change, with seed 2 at 1.5 %.)
    assert_known("peakewma&peakewma.preferenceMs=1000");
    let ratios: Vec<f64> = (1..=8)
        .map(|seed| {
            let drawn = run("3", 6.0, "peakewma&peakewma.choices=0", 0.85, 50, seed);
            let preferred = run(
                "3",
                6.0,
                "peakewma&peakewma.choices=0&peakewma.preferenceMs=1000",
                0.85,
                50,
                seed,
            );
            preferred.p99_us / drawn.p99_us
        })
        .collect();
    let mean = ratios.iter().sum::<f64>() / ratios.len() as f64;
    assert!(
        mean < 0.99,
        "p99 with a preference / without, per seed: {ratios:.3?}, mean {mean:.3}"
    );
}

#[test]
fn boundedhash_keeps_max_mean_load_within_c() {
    // The library's default balance factor, and a tolerance for counting requests over a window
    // rather than the in-flight load the bound applies to.
    const C: f64 = 1.25;
    const TOLERANCE: f64 = 0.10;
    let ch_run = run("7", 4.0, "consistenthash", 0.7, 1, 1);
    // Probing the key mapping (selects undone by `Cancelled`) leaves nothing in flight.
    assert_eq!(ch_run.in_flight_left, Some(0));
    let ch = ch_run.hash.expect("scenario 7 measures hashing");
    // The plain ring moves exactly the removed provider's keys, and hot keys unbalance it.
    assert!(
        ch.ideal_moved > 0.05 && ch.moved == ch.ideal_moved,
        "{ch:?}"
    );
    assert!(ch.max_mean > C + TOLERANCE, "{ch:?}");
    assert_known("boundedhash");
    let bh = run("7", 4.0, "boundedhash", 0.7, 1, 1)
        .hash
        .expect("scenario 7 measures hashing");
    assert!(
        bh.max_mean <= C + TOLERANCE,
        "boundedhash max/mean {:.3} above {C} + {TOLERANCE}",
        bh.max_mean
    );
    // It moves at least the keys that had to move, and keeps the rest where the ring puts them:
    // the bound spills a hot key only while its owner is full, so a key's usual provider stays
    // its owner (all of them did in this run; 2 % of the keys is allowed for spills). Without
    // this, a policy that ignores the key (about 7 keys in 8 move, and max/mean is near 1)
    // would pass every check here.
    assert!(bh.moved >= bh.ideal_moved, "{bh:?}");
    assert!(bh.moved <= bh.ideal_moved + 0.02, "{bh:?}");
    // Many consumers each bound only their own calls in flight: no factor holds globally,
    // but hot keys must still spread better than on the plain ring.
    let many = run("7", 4.0, "boundedhash", 0.7, 50, 1)
        .hash
        .expect("scenario 7 measures hashing");
    assert!(many.max_mean < ch.max_mean, "{many:?} vs {ch:?}");
    assert!(
        many.moved >= many.ideal_moved && many.moved <= many.ideal_moved + 0.02,
        "{many:?}"
    );
}

#[test]
fn rendezvous_moves_only_the_removed_providers_keys_with_many_consumers_too() {
    assert_known("rendezvous");
    for consumers in [1, 50] {
        let h = run("7", 4.0, "rendezvous", 0.7, consumers, 1)
            .hash
            .expect("scenario 7 measures hashing");
        // The removed provider held about an eighth of the keys; those, and no other, move.
        assert!(
            h.ideal_moved > 0.05 && h.moved == h.ideal_moved,
            "{consumers} consumers: {h:?}"
        );
    }
}

#[test]
fn deterministic_for_a_seed() {
    for policy in ["leastactive", "adaptive", "oracle-sed"] {
        let a = run("6", 3.0, policy, 0.85, 5, 7);
        let b = run("6", 3.0, policy, 0.85, 5, 7);
        assert_eq!(
            (a.calls, a.ok, a.failures, a.timeouts, a.attempts, a.events),
            (b.calls, b.ok, b.failures, b.timeouts, b.attempts, b.events),
            "{policy}"
        );
        assert_eq!(a.p99_us, b.p99_us);
        let sa: Vec<f64> = a.providers.iter().map(|p| p.share).collect();
        let sb: Vec<f64> = b.providers.iter().map(|p| p.share).collect();
        assert_eq!(sa, sb);
        if policy != "oracle-sed" {
            assert_eq!(
                a.in_flight_left,
                Some(0),
                "{policy}: every select was reported"
            );
        }
        let c = run("6", 3.0, policy, 0.85, 5, 8);
        assert_ne!(
            (a.ok, a.events),
            (c.ok, c.events),
            "another seed, another run"
        );
    }
}

/// The runs of one seed with 1 and with 50 consumers face the same calls: which consumer makes
/// a call is drawn apart from the calls themselves. The oracles, which see every consumer's
/// calls, then do exactly the same; a call's consumer drawn from the calls' own stream shifted
/// every later call (and a p99 by about 8 %).
#[test]
fn consumer_counts_face_the_same_calls() {
    for policy in ["oracle-jsq", "oracle-sed"] {
        let one = run("2a", 2.0, policy, 0.85, 1, 11);
        let many = run("2a", 2.0, policy, 0.85, 50, 11);
        assert_eq!(
            (one.calls, one.ok, one.p99_us, one.p999_us),
            (many.calls, many.ok, many.p99_us, many.p999_us),
            "{policy}"
        );
    }
    let (one, many) = (
        run("2a", 2.0, "random", 0.85, 1, 11),
        run("2a", 2.0, "random", 0.85, 50, 11),
    );
    assert_eq!(one.calls, many.calls);
}

#[test]
fn oracles_bound_the_easy_cases() {
    // Equal providers: JSQ is hard to beat, and far better than random under heavy requests.
    let jsq = run("1", 3.0, "oracle-jsq", 0.85, 1, 3);
    let rnd = run("1", 3.0, "random", 0.85, 1, 3);
    assert!(
        jsq.p99_us < 0.8 * rnd.p99_us,
        "{} vs {}",
        jsq.p99_us,
        rnd.p99_us
    );
    // Full information: the oracles never call the failing provider.
    for o in ["oracle-jsq", "oracle-sed"] {
        let r = run("4", 2.0, o, 0.85, 1, 3);
        assert_eq!(r.failures + r.timeouts, 0, "{o}");
        assert_eq!(r.providers[0].share, 0.0, "{o}");
    }
    // Unequal speeds: SED knows them, JSQ does not.
    let sed = run("5", 4.0, "oracle-sed", 0.85, 1, 3);
    let jsq = run("5", 4.0, "oracle-jsq", 0.85, 1, 3);
    assert!(sed.p99_us < jsq.p99_us, "{} vs {}", sed.p99_us, jsq.p99_us);
}

#[test]
fn faults_cost_what_they_should() {
    // A GC pause shows in random's tail, not in the oracle's.
    let rnd = run("3", 3.0, "random", 0.7, 1, 1);
    let sed = run("3", 3.0, "oracle-sed", 0.7, 1, 1);
    assert!(rnd.p99_us > 100_000.0, "random p99 {}", rnd.p99_us);
    assert!(sed.p99_us < 20_000.0, "sed p99 {}", sed.p99_us);
    // Churn: a crash resets calls in flight, a frozen host times them out; random keeps
    // calling both until the registry drops them.
    let r = run("6", 10.0, "random", 0.7, 1, 1);
    assert!(
        r.failures > 0 && r.timeouts > 0,
        "{} {}",
        r.failures,
        r.timeouts
    );
    // Failover retries hide most of the fast failures.
    let mut s = spec("4", 2.0, "random", 0.7, 1, 1);
    s.retries = 2;
    let retried = engine::run(&s).unwrap();
    assert!(retried.error_rate() < 0.03, "{}", retried.error_rate());
    assert!(retried.attempts > retried.calls);
}

/// Failover with every provider tried picks again among them, as Dubbo's reselect and the
/// oracles do: two providers, a timeout the +5 ms one always hits and the other sometimes, two
/// retries. Before, a third attempt found every provider excluded and the call ended as "no
/// provider" (about 17 % of the calls), hiding its real outcome.
#[test]
fn a_failover_that_tried_every_provider_picks_among_them_again() {
    for policy in ["random", "leastactive", "peakewma", "oracle-jsq"] {
        let mut s = spec("x10", 3.0, policy, 0.3, 1, 1);
        s.timeout_us = 2_000;
        s.retries = 2;
        let r = engine::run(&s).unwrap();
        assert_eq!(r.no_provider, 0, "{policy}: both providers are up");
        assert!(
            r.attempts > r.calls + r.calls / 10,
            "{policy}: retries were made"
        );
        assert!(
            r.timeouts > 0,
            "{policy}: calls that timed out three times count as timeouts"
        );
        assert_eq!(r.calls, r.ok + r.failures + r.timeouts, "{policy}");
    }
}

/// Latencies beyond 2^32 µs (71.6 minutes) are kept whole: a provider that hangs, a timeout of
/// 5000 s and one retry make the slowest successes wait 5000 s and more (they were cut to
/// 4295 s).
#[test]
fn latencies_beyond_32_bits_of_microseconds_are_kept() {
    let mut s = spec("x5", 2.0, "random", 0.5, 1, 1);
    s.timeout_us = 5_000_000_000;
    s.retries = 1;
    let r = engine::run(&s).unwrap();
    assert!(r.p999_us >= 5e9, "p999 {} µs", r.p999_us);
    assert!(r.p999_us < 5.01e9, "p999 {} µs", r.p999_us);
}

/// Load 1.0 of the stress scenarios whose provider changes speed is the time average of the
/// providers' speeds over the run (x4's degrading provider averages 0.43 of a normal one, not
/// the 0.5 it was counted at).
#[test]
fn a_changing_speed_counts_at_its_time_average_in_the_capacity() {
    let d = 20_000_000;
    for id in ["x2", "x3", "x4"] {
        let sc = scenario::build(id, Some(d), &scenario::Model::default()).unwrap();
        let one = sc.providers[1].capacity_rps(1.0);
        let (mut at, mut factor, mut served) = (0, 1.0, 0.0);
        for (t, action) in &sc.timeline {
            if let scenario::Action::Speed(0, f) = action {
                served += (t - at) as f64 / factor;
                (at, factor) = (*t, *f);
            }
        }
        served += (d - at) as f64 / factor;
        let expected = one * (sc.providers.len() as f64 - 1.0 + served / d as f64);
        assert!(
            (sc.capacity_rps / expected - 1.0).abs() < 1e-3,
            "{id}: capacity {} calls/s, the timeline's average {expected}",
            sc.capacity_rps
        );
    }
}

#[test]
fn every_scenario_runs_with_one_and_many_consumers() {
    for id in scenario::ALL_IDS {
        for consumers in [1, 50] {
            for policy in ["roundrobin", "oracle-jsq"] {
                let r = run(id, 1.0, policy, 0.7, consumers, 1);
                assert!(r.calls > 1_000, "{id} {policy}: {} calls", r.calls);
                assert_eq!(
                    r.calls,
                    r.ok + r.failures + r.timeouts + r.no_provider,
                    "{id} {policy}: every call ends once"
                );
                let share: f64 = r.providers.iter().map(|p| p.share).sum();
                assert!((share - 1.0).abs() < 1e-9);
                if policy == "roundrobin" {
                    assert_eq!(
                        r.in_flight_left,
                        Some(0),
                        "{id}: the library's in-flight counts"
                    );
                }
            }
        }
    }
    assert!(scenario::build("nope", None, &scenario::Model::default()).is_none());
}

#[test]
fn utilisation_is_work_done_even_on_a_paused_provider() {
    // Every provider serves the same mix of calls, so utilisation per unit of share is the same
    // for all of them, the paused one included: a worker frozen by a GC pause serves nothing.
    let r = run("3", 6.0, "oracle-sed", 0.7, 1, 1);
    let per_share: Vec<f64> = r
        .providers
        .iter()
        .map(|p| p.utilisation / p.share)
        .collect();
    let others = per_share[1..].iter().sum::<f64>() / (per_share.len() - 1) as f64;
    assert!(
        (per_share[0] / others - 1.0).abs() < 0.03,
        "utilisation per share: paused {:.3}, others {:.3} ({:?})",
        per_share[0],
        others,
        r.providers
    );
}

#[test]
fn a_copied_fleet_keeps_each_fault_and_its_share() {
    let model = scenario::Model::default();
    let build = |id: &str| scenario::build(id, Some(10_000_000), &model).unwrap();

    // Churn: every copy's provider crashes, leaves and comes back, on its own index.
    let one = build("6");
    let three = build("6").copied(3).unwrap();
    let n = one.providers.len();
    assert_eq!(three.providers.len(), 3 * n);
    assert_eq!(three.initial.len(), 3 * one.initial.len());
    assert!((three.capacity_rps - 3.0 * one.capacity_rps).abs() < 1e-6);
    assert_eq!(three.timeline.len(), 3 * one.timeline.len());
    assert!(three.timeline.windows(2).all(|w| w[0].0 <= w[1].0));
    let index = |a: &scenario::Action| match *a {
        scenario::Action::Join(p)
        | scenario::Action::Leave(p)
        | scenario::Action::Crash(p)
        | scenario::Action::Freeze(p)
        | scenario::Action::Speed(p, _) => p,
    };
    for c in 0..3 {
        let copy: Vec<_> = three
            .timeline
            .iter()
            .filter(|(_, a)| index(a) / n == c)
            .map(|&(at, a)| (at, index(&a) % n))
            .collect();
        let original: Vec<_> = one
            .timeline
            .iter()
            .map(|&(at, a)| (at, index(&a)))
            .collect();
        assert_eq!(copy, original, "copy {c}");
    }
    assert_eq!(three.label(), "6-churn-x3");
    assert!(three.heading().contains("24 providers"));

    // GC pause: one stalling provider per copy of 8, their pauses in turn.
    let four = build("3").copied(4).unwrap();
    let stalls: Vec<_> = four
        .providers
        .iter()
        .enumerate()
        .filter_map(|(i, p)| p.stall.map(|s| (i, s)))
        .collect();
    assert_eq!(
        stalls.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
        [0, 8, 16, 24]
    );
    let period = stalls[0].1.period_us;
    for (c, (_, s)) in stalls.iter().enumerate() {
        assert_eq!(s.first_us, stalls[0].1.first_us + period * c as i64 / 4);
    }

    // One copy is the scenario itself; the hashing probe is not copied.
    assert_eq!(build("1").copied(1).unwrap().label(), "1-incident");
    assert!(build("7").copied(2).is_err());

    // And a copied fleet runs: the fast-failing quarter of 16 providers is avoided as one of 4.
    let mut s = spec("4", 3.0, "peakewma", 0.7, 1, 1);
    s.scenario = s.scenario.copied(4).unwrap();
    let r = engine::run(&s).unwrap();
    assert_eq!(r.providers.len(), 16);
    let failing: f64 = r.providers.iter().step_by(4).map(|p| p.share).sum();
    assert!(
        failing < 0.05 && r.error_rate() < 0.05,
        "{:.2} % of attempts to the failing providers, error rate {:.3} %",
        failing * 100.0,
        r.error_rate() * 100.0
    );
}

#[test]
fn orca_weighs_providers_by_the_capacity_they_report() {
    assert_known("orca");
    // Providers of 1, 2, 4, 4, 4, 4, 8 and 8 workers, equal configured weights, 50 consumers:
    // each consumer's own in-flight counts cannot tell them apart, the providers' reports can.
    let orca = run("x1", 4.0, "orca&orca.blackoutMs=0", 0.7, 50, 1);
    let la = run("x1", 4.0, "leastactive", 0.7, 50, 1);
    assert!(
        orca.p99_us < 0.5 * la.p99_us,
        "orca p99 {} vs leastactive {}",
        orca.p99_us,
        la.p99_us
    );
    // The shares follow the workers (1/35 of the capacity per worker), within 15 %.
    for (p, workers) in orca
        .providers
        .iter()
        .zip([1.0, 2.0, 4.0, 4.0, 4.0, 4.0, 8.0, 8.0])
    {
        let expected = workers / 35.0;
        assert!(
            (p.share - expected).abs() < 0.15 * expected,
            "share {} for {workers} workers (expected {expected:.3})",
            p.share
        );
    }
    // Without reports (another strategy's balancer never reads them) the shares stay even:
    // roundrobin deals an eighth to each.
    let rr = run("x1", 4.0, "roundrobin", 0.7, 50, 1);
    assert!(
        (rr.providers[0].share - 0.125).abs() < 0.01,
        "{:?}",
        rr.providers[0]
    );
}
