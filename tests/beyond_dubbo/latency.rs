//! peakewma's latency signals.

use crate::common::*;
use crate::helpers::*;
use polylb::{Invoker, Outcome};
use std::collections::BTreeMap;

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

/// Invoker 1 stalls for 500 ms at t = 2 s (every call sent then ends at 2.5 s); otherwise
/// every invoker answers in about 1 ms.
fn stall_at_2s(id: u64, t: i64) -> (i64, Outcome) {
    if id == 1 && (2_000_000..2_500_000).contains(&t) {
        (2_500_000 - t, Outcome::Success)
    } else {
        (jitter(1_000, t, id), Outcome::Success)
    }
}

#[test]
fn peakewma_forgives_a_500ms_stall_at_once() {
    // Invoker 1 stalls for 500 ms at t = 2 s (every call sent then ends at 2.5 s), then is fast
    // again. The textbook design (10 s decay) keeps it shunned for about 25 s.
    let invokers: Vec<Invoker> = (1..=4).map(provider).collect();
    let mut w = World::new("loadbalance=peakewma&peakewma.decay=10000", 1, &invokers);
    let mut log = Vec::new();
    w.run(12_000_000, 500, stall_at_2s, &mut log);
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
fn peakewma_a_clock_stepping_back_does_not_prolong_a_stall() {
    // As `peakewma_forgives_a_500ms_stall_at_once`, but the wall clock steps back 60 s just
    // after the stall's calls end (an NTP step; the library's own clock is the wall clock).
    // The stall's peak and sample were stamped in the future of every later call: the estimate
    // neither decayed (negative age) nor was probed, and the invoker stayed shunned until the
    // clock caught up, 60 s later. It must come back as it does without the step.
    let invokers: Vec<Invoker> = (1..=4).map(provider).collect();
    for config in [
        "loadbalance=peakewma&peakewma.decay=10000",
        "loadbalance=peakewma&peakewma.choices=0&peakewma.preferenceMs=1000",
    ] {
        let mut w = World::new(config, 1, &invokers).with_clock(|t| {
            if t > 2_501_000 {
                t - 60_000_000
            } else {
                t
            }
        });
        let mut log = Vec::new();
        w.run(14_000_000, 500, stall_at_2s, &mut log);
        // With the preference order one invoker takes each second's calls: 11 periods at 0.25
        // each; 0.1 is far below the no-step share (0.2-0.3) and far above the 0 of a stall
        // prolonged by the step.
        let after = share(&log, 1, 3_000_000, 14_000_000);
        assert!(after > 0.1, "{config}: share after the step {after:.4}");
    }
}

#[test]
fn peakewma_a_slow_first_answer_is_replaced_by_the_next() {
    // Invoker 1 answers in 1 ms, but its first call, the client's first, paid a connection's
    // set-up: 300 ms. Invoker 2 answers in 40 ms and takes the calls meanwhile; invoker 3 fails
    // in 1 ms. The client sends 4 calls at a time and waits for them (examples/coldstart.rs).
    // Were that first answer a peak like any other, invoker 1 would be forgiven only down to
    // the method's typical estimate, which invoker 2 set, and stay level with it for about a
    // decay (10 s): a quarter to a half of the calls on the 40 ms invoker until then.
    for config in [
        "loadbalance=peakewma&seed=1",
        "loadbalance=peakewma&peakewma.choices=0&peakewma.preferenceMs=1000&seed=1",
    ] {
        let b = lb(config, &(1..=3).map(provider).collect::<Vec<_>>());
        let (mut now, mut first) = (NOW, true);
        let mut picks: Vec<(i64, u64)> = Vec::new();
        while now < NOW + 6_000_000 {
            let round: Vec<u64> = (0..4).map(|_| b.select(0, b"", now).unwrap()).collect();
            let mut round_end = now;
            for id in round {
                let (latency, outcome) = match id {
                    1 if std::mem::take(&mut first) => (300_000, Outcome::Success),
                    1 => (jitter(1_000, now, id), Outcome::Success),
                    2 => (jitter(40_000, now, id), Outcome::Success),
                    _ => (1_000, Outcome::Failure),
                };
                b.report(0, id, latency, outcome, now + latency).unwrap();
                round_end = round_end.max(now + latency);
                picks.push((now - NOW, id));
            }
            now = round_end + 100;
        }
        let late: Vec<u64> = picks
            .iter()
            .filter(|p| p.0 >= 3_000_000)
            .map(|p| p.1)
            .collect();
        let fast = late.iter().filter(|&&id| id == 1).count() as f64 / late.len() as f64;
        assert!(
            fast > 0.95,
            "{config}: the fast invoker's share from 3 s: {fast:.3}"
        );
        let estimate = stat(&b, now, 1, "latency_estimate_us");
        assert!(estimate < 5_000, "{config}: estimate {estimate} us");
    }
}

#[test]
fn peakewma_a_connection_set_up_does_not_leave_an_invoker_untried() {
    // Three equal invokers; each one's first call pays a connection's set-up (20 ms), later ones
    // take 0.8 ms; one call at a time. Were the method's typical estimate, which prices an
    // invoker without a sample, seeded by such a first answer, an invoker not yet tried would be
    // priced at 20 ms against 0.8 for the others and left untried for many calls (a third of the
    // seeds here, after 60 calls): every invoker is tried within the first calls.
    let mut untried_after = Vec::new();
    for seed in 1..=50 {
        let b = lb(
            &format!("loadbalance=peakewma&seed={seed}"),
            &(1..=3).map(provider).collect::<Vec<_>>(),
        );
        let mut now = NOW;
        let mut calls = [0usize; 4];
        for i in 0..60 {
            let id = b.select(0, b"", now).unwrap();
            let latency = if calls[id as usize] == 0 { 20_000 } else { 800 };
            now += latency;
            b.report(0, id, latency, Outcome::Success, now).unwrap();
            calls[id as usize] += 1;
            now += 1_000;
            if i == 11 && calls[1..].contains(&0) {
                untried_after.push((seed, calls));
            }
        }
    }
    assert!(
        untried_after.is_empty(),
        "an invoker still untried after 12 calls: {untried_after:?}"
    );
}

#[test]
fn peakewma_a_failure_after_the_first_answer_does_not_leave_the_typical_estimate_provisional() {
    // Invoker 1's first answer (20 ms) sets the typical estimate provisionally; its next call
    // fails, which settles its estimate for good, so no settling success follows: the first
    // success after it must end the provisional state, or a later invoker's one settling answer
    // (300 ms here) would become the typical estimate, and an invoker not yet tried would be
    // priced at 300 ms against invoker 1's 1 ms.
    let b = lb("loadbalance=peakewma&seed=3", &[provider(1)]);
    let mut now = NOW;
    let call = |among: u64, latency: i64, outcome: Outcome, now: &mut i64| {
        let id = b.select_among(0, b"", &[among], &[], *now).unwrap();
        *now += latency;
        b.report(0, id, latency, outcome, *now).unwrap();
        *now += 1_000;
    };
    call(1, 20_000, Outcome::Success, &mut now);
    call(1, 1_000, Outcome::Failure, &mut now);
    for _ in 0..200 {
        call(1, 1_000, Outcome::Success, &mut now);
    }
    b.update(&[provider(1), provider(2)]).unwrap();
    call(2, 1_000, Outcome::Success, &mut now);
    call(2, 300_000, Outcome::Success, &mut now);
    b.update(&[provider(1), provider(3)]).unwrap();
    let mut to_3 = 0;
    for _ in 0..40 {
        let id = b.select(0, b"", now).unwrap();
        now += 1_000;
        b.report(0, id, 1_000, Outcome::Success, now).unwrap();
        now += 1_000;
        to_3 += usize::from(id == 3);
    }
    assert!(to_3 >= 5, "the untried invoker got {to_3} of 40 calls");
}

#[test]
fn peakewma_a_reconnect_after_failures_does_not_leave_invokers_untried() {
    // Four equal invokers; every call fails (in 1 ms) until each has failed once, as while a
    // client starts before its providers accept connections; then each invoker's first success
    // pays a new connection's set-up (300 ms), later ones take about 1 ms; one call at a time,
    // 200 ms apart.
    // The failures settle each estimate, so the first success of the method was trusted as the
    // typical estimate: 300 ms, coming down 1/8 per 8 successes of the invoker that took the
    // calls while the others, priced at their own 300 ms first answers, waited (3, 8 and 11
    // of the first 350 calls here; 70 s). Each should get close to its quarter from 10 s on:
    // at least 0.1 each over 10–60 s (250 calls; with `preferenceMs=1000` one invoker takes
    // each second's calls, so a share is a binomial of 50 periods at 0.25: 0.1 is 2.4 sd).
    for config in [
        "loadbalance=peakewma&seed=7",
        "loadbalance=peakewma&peakewma.choices=0&peakewma.preferenceMs=1000&seed=7",
    ] {
        let b = lb(config, &(1..=4).map(provider).collect::<Vec<_>>());
        let (mut failed, mut connected) = ([false; 5], [false; 5]);
        let mut calls = [0usize; 5];
        let mut t = 0;
        while t < 60_000_000 {
            let id = b.select(0, b"", NOW + t).unwrap();
            let (latency, outcome) = if failed[1..].contains(&false) {
                failed[id as usize] = true;
                (1_000, Outcome::Failure)
            } else if !connected[id as usize] {
                connected[id as usize] = true;
                (300_000, Outcome::Success)
            } else {
                (jitter(1_000, t, id), Outcome::Success)
            };
            b.report(0, id, latency, outcome, NOW + t + latency)
                .unwrap();
            if t >= 10_000_000 {
                calls[id as usize] += 1;
            }
            t += latency + 200_000;
        }
        let total: usize = calls.iter().sum();
        for (id, &n) in calls.iter().enumerate().skip(1) {
            let share = n as f64 / total as f64;
            assert!(
                share >= 0.1,
                "{config}: invoker {id}'s share {share:.3} ({calls:?})"
            );
        }
    }
}

#[test]
fn peakewma_early_answers_do_not_erase_a_failure_penalty() {
    // Invoker 1 answers in 1 ms but fails half its calls (in 1 ms); the others answer in 5 ms.
    // A call every 5 µs keeps about 50 of its calls overlapping, so a success of a call sent
    // after its latest failure is rare: while its estimate took the fastest early success,
    // each success erased the last failure's penalty and it kept 0.29 of the calls here. A
    // failure ends the early answers: 0.09, as before early answers had a rule of their own.
    let invokers: Vec<Invoker> = (1..=4).map(provider).collect();
    let mut w = World::new("loadbalance=peakewma", 1, &invokers);
    let mut log = Vec::new();
    w.run(
        3_000_000,
        5,
        |id, t| match id {
            1 if (t / 5) % 2 == 0 => (1_000, Outcome::Failure),
            1 => (jitter(1_000, t, id), Outcome::Success),
            _ => (jitter(5_000, t, id), Outcome::Success),
        },
        &mut log,
    );
    let flaky = share(&log, 1, 500_000, 3_000_000);
    assert!(flaky < 0.15, "the failing invoker's share {flaky:.3}");
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

#[test]
fn peakewma_stats_show_the_latency_a_pick_prices_each_invoker_at() {
    // `latency_estimate_us` is the last samples' estimate; a pick also prices in the age of the
    // oldest call in flight and lets an estimate nobody refreshes fade towards the typical one.
    // An operator must see what the picks see: a stalled invoker that gets no calls showing
    // the lowest latency of the set, or a faded peak still showing 400 ms, says the opposite.
    let b = lb(
        "loadbalance=peakewma&seed=1",
        &(1..=2).map(provider).collect::<Vec<_>>(),
    );
    let mut now = NOW;
    for _ in 0..100 {
        let id = b.select(0, b"", now).unwrap();
        b.report(0, id, 1_000, Outcome::Success, now + 1_000)
            .unwrap();
        now += 2_000;
    }
    for id in [1, 2] {
        assert_eq!(stat(&b, now, id, "latency_now_us"), 1_000, "invoker {id}");
    }
    // Invoker 2 stalls: a call sent to it does not come back for 5 s.
    assert_eq!(b.select_among(0, b"", &[2], &[], now).unwrap(), 2);
    now += 5_000_000;
    for _ in 0..50 {
        let id = b.select(0, b"", now).unwrap();
        assert_eq!(id, 1, "a pick avoids the stalled invoker");
        b.report(0, id, 0, Outcome::Cancelled, now).unwrap();
    }
    assert_eq!(stat(&b, now, 2, "latency_estimate_us"), 1_000);
    assert_eq!(stat(&b, now, 2, "latency_now_us"), 5_000_000);
    assert_eq!(stat(&b, now, 1, "latency_now_us"), 1_000);
    b.report(0, 2, 0, Outcome::Cancelled, now).unwrap();
    assert_eq!(stat(&b, now, 2, "latency_now_us"), 1_000);
    // Invoker 1 answers once in 400 ms (a peak), then the set is idle for 3 decays (30 s): the
    // pick's price fades to typical × (400 ms / typical)^e^-3, a few ms; the estimate stays.
    let id = b.select_among(0, b"", &[1], &[], now).unwrap();
    b.report(0, id, 400_000, Outcome::Success, now).unwrap();
    assert_eq!(stat(&b, now, 1, "latency_now_us"), 400_000);
    now += 30_000_000;
    assert_eq!(stat(&b, now, 1, "latency_estimate_us"), 400_000);
    let faded = stat(&b, now, 1, "latency_now_us");
    assert!((1_000..10_000).contains(&faded), "faded price {faded} us");
}

/// An invoker that joined and was never picked has no counters for the method, yet picks price
/// it at the method's typical latency (cold start): its stats' `latency_now_us` says so too
/// (docs/abi-contract.md: "the typical one before its first sample"), not 0.
#[test]
fn peakewma_stats_price_an_untried_invoker_at_the_typical_latency() {
    let b = lb("loadbalance=peakewma&seed=1", &[provider(1), provider(2)]);
    let mut t = NOW;
    for _ in 0..200 {
        t += 1_000;
        let id = b.select(0, b"", t).unwrap();
        b.report(0, id, 5_000, Outcome::Success, t).unwrap();
    }
    b.update(&[provider(1), provider(2), provider(3)]).unwrap();
    assert_eq!(stat(&b, t, 1, "latency_now_us"), 5_000);
    assert_eq!(stat(&b, t, 3, "latency_estimate_us"), 0);
    assert_eq!(stat(&b, t, 3, "latency_now_us"), 5_000);
}

/// With several methods, an invoker's `latency_now_us` is the highest of its own prices and the
/// typical latencies of the methods it has no counters for: here the slowest method is one it
/// served quickly, and the price comes from the slowest method it never served.
#[test]
fn peakewma_stats_price_an_invoker_at_the_slowest_method_it_never_served() {
    let b = lb("loadbalance=peakewma&seed=1", &[provider(1), provider(2)]);
    let methods = [("slow", 9_000), ("middle", 4_000), ("fast", 2_000)]
        .map(|(name, us)| (b.method(name).unwrap(), us));
    let mut t = NOW;
    for _ in 0..200 {
        for &(m, us) in &methods {
            t += 1_000;
            let id = b.select(m, b"", t).unwrap();
            b.report(m, id, us, Outcome::Success, t).unwrap();
        }
    }
    b.update(&[provider(1), provider(2), provider(3)]).unwrap();
    let (slow, _) = methods[0];
    for _ in 0..20 {
        t += 1_000;
        let id = b.select_among(slow, b"", &[3], &[], t).unwrap();
        b.report(slow, id, 500, Outcome::Success, t).unwrap();
    }
    assert_eq!(stat(&b, t, 3, "latency_now_us"), 4_000);
    let (middle, _) = methods[1];
    t += 1_000;
    let id = b.select_among(middle, b"", &[3], &[], t).unwrap();
    b.report(middle, id, 500, Outcome::Success, t).unwrap();
    assert_eq!(stat(&b, t, 3, "latency_now_us"), 2_000);
}
