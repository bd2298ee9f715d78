//! Tests of the balancer as a whole: boundedhash's total of calls in flight across updates, and
//! the sampler of d choices over a real snapshot.

use super::*;
use crate::invoker::Invoker;
use crate::stats::NO_COUNTER;
use crate::strategy::{Ctx, Weights};
use std::sync::atomic::{AtomicBool, Ordering::Acquire};

/// Invokers 1–4 at 10.0.0.<id>:20880.
pub(super) fn four_invokers() -> Vec<Invoker> {
    (1..=4)
        .map(|id| Invoker::new(id, format!("10.0.0.{id}:20880")))
        .collect()
}

/// boundedhash's total of calls in flight when an invoker leaves with calls to it in flight,
/// and calls that pinned the replaced set before the update finish there after it: the
/// update's reading of the leaving invoker's counters must account for each of them exactly
/// once, whichever side of it they fall on. Driven by hand: `end_call` and `select_in` on
/// the replaced set are what a thread preempted between its pin and its count runs.
#[test]
fn boundedhash_total_counts_calls_finishing_on_a_replaced_set_once() {
    let b = Balancer::new("loadbalance=boundedhash").unwrap();
    let set = four_invokers();
    b.update(&set).unwrap();
    let method = b.method("m").unwrap();
    let method_state = b.inner.methods.get(method).unwrap();
    let total = || crate::strategy::whole_set_in_flight(method_state).unwrap_or(0);
    for _ in 0..3 {
        assert_eq!(b.select_among(method, b"", &[4], &[], 0), Ok(4));
    }
    assert_eq!(b.select_among(method, b"", &[1], &[], 0), Ok(1));
    assert_eq!(total(), 4);
    let old = b.inner.snapshot.load_full();
    b.update(&set[..3]).unwrap();
    assert_eq!(total(), 1, "the leaving invoker's calls are taken out");
    // A report that pinned the replaced set before the update ends one of invoker 4's
    // calls there: the update already took it out.
    let end = CallEnd {
        method,
        id: 4,
        elapsed_us: 1000,
        outcome: Outcome::Success,
        now_us: 0,
    };
    b.inner.end_call(&old, NO_COUNTER, &end);
    assert_eq!(total(), 1, "a call on a departed invoker ended twice");
    // A select that pinned the replaced set before the update picks invoker 4 there; its
    // report comes on the current set, which ignores it.
    let clock = Clock::new(0);
    let call = test_call(&b, &old, method_state, method, &clock);
    assert_eq!(b.inner.select_in(&call, &[4], &[]), Ok(4));
    b.report(method, 4, 1000, Outcome::Success, 0).unwrap();
    assert_eq!(
        total(),
        1,
        "a call on a departed invoker is counted for good"
    );
    // The other stragglers' reports, on either set, change nothing; the staying invoker's
    // call still ends.
    b.inner.end_call(&old, NO_COUNTER, &end);
    b.report(method, 4, 1000, Outcome::Success, 0).unwrap();
    b.report(method, 1, 1000, Outcome::Success, 0).unwrap();
    assert_eq!(total(), 0);
    // Invoker 4 comes back with fresh counters, and a late report on the replaced set of
    // one of its old calls does not end a new one.
    b.update(&set).unwrap();
    assert_eq!(b.select_among(method, b"", &[4], &[], 0), Ok(4));
    assert_eq!(total(), 1);
    b.inner.end_call(&old, NO_COUNTER, &end);
    assert_eq!(total(), 1);
    b.report(method, 4, 1000, Outcome::Success, 0).unwrap();
    assert_eq!(total(), 0);
}

/// An update that takes an invoker out makes it no counters for the methods it never served:
/// one per leaving invoker and interned method made boundedhash's update O(departed × m) in
/// time and memory (20 invokers replaced with 10,000 methods interned: 131 ms and 28 MB more).
#[test]
fn boundedhash_update_makes_no_counters_on_a_leaving_invoker() {
    let b = Balancer::new("loadbalance=boundedhash").unwrap();
    let set = four_invokers();
    b.update(&set).unwrap();
    let served = b.method("served").unwrap();
    for m in 0..300 {
        b.method(&format!("interned {m}")).unwrap();
    }
    let total = || {
        let m = b.inner.methods.get(served).unwrap();
        crate::strategy::whole_set_in_flight(m).unwrap_or(0)
    };
    // Two calls of `served` in flight on invoker 4 when it leaves.
    for _ in 0..2 {
        assert_eq!(b.select_among(served, b"", &[4], &[], 0), Ok(4));
    }
    assert_eq!(b.select_among(served, b"", &[1], &[], 0), Ok(1));
    let old = b.inner.snapshot.load_full();
    let leaving = &old.members.iter().find(|m| m.id == 4).unwrap().state;
    let counters = || leaving.methods.iter().count();
    assert_eq!(counters(), 1);
    b.update(&set[..3]).unwrap();
    assert_eq!(counters(), 1, "counters made on the leaving invoker");
    assert_eq!(total(), 1, "its calls in flight taken out");
    for _ in 0..2 {
        b.report(served, 4, 1000, Outcome::Success, 0).unwrap();
    }
    b.report(served, 1, 1000, Outcome::Success, 0).unwrap();
    assert_eq!(total(), 0);
}

/// A call as a select on an uncached snapshot makes it: no counter of this thread, no key.
fn test_call<'a>(
    b: &'a Balancer,
    snapshot: &'a Snapshot,
    method_state: &'a MethodState,
    method: u32,
    clock: &'a Clock,
) -> Call<'a> {
    Call {
        snapshot,
        counter: NO_COUNTER,
        method_state,
        method,
        key: b"",
        clock,
        rng: b.inner.rng.on(None),
        hint: None,
        single: Cell::new(false),
    }
}

/// boundedhash's total for a method whose first pick races an update that takes its invoker
/// out: the total does not exist yet when the update runs, so nothing there accounts for
/// the pick, yet it counts on the departed invoker and its report is ignored. Each of the
/// pick's steps is placed on the other side of the update by hand, as a preempted thread
/// would run them; with every call reported, each method's total must come back to 0.
#[test]
fn boundedhash_first_pick_of_a_method_racing_an_update_counts_once() {
    let b = Balancer::new("loadbalance=boundedhash").unwrap();
    let set = four_invokers();
    b.update(&set).unwrap();
    let clock = Clock::new(0);
    let call =
        |snapshot, method_state, method| test_call(&b, snapshot, method_state, method, &clock);
    let total = |method_state| crate::strategy::whole_set_in_flight(method_state).unwrap_or(0);

    // The whole pick on the replaced set, pinned before the update, after it.
    let m = b.method("m").unwrap();
    let m_state = b.inner.methods.get(m).unwrap();
    let old = b.inner.snapshot.load_full();
    b.update(&set[..3]).unwrap();
    assert_eq!(b.inner.select_in(&call(&old, m_state, m), &[4], &[]), Ok(4));
    b.report(m, 4, 1000, Outcome::Success, 0).unwrap();
    assert_eq!(
        total(m_state),
        0,
        "a first pick after the update stayed counted"
    );
    // Its twin reported on the replaced set: its end must not take out a call never counted.
    assert_eq!(b.inner.select_in(&call(&old, m_state, m), &[4], &[]), Ok(4));
    let end = CallEnd {
        method: m,
        id: 4,
        elapsed_us: 1000,
        outcome: Outcome::Success,
        now_us: 0,
    };
    b.inner.end_call(&old, NO_COUNTER, &end);
    assert_eq!(total(m_state), 0);

    // A first pick counted on the invoker before the update, and in the total after it (a
    // pick among candidates makes the total in `on_select`, after the count).
    b.update(&set).unwrap();
    let n = b.method("n").unwrap();
    let n_state = b.inner.methods.get(n).unwrap();
    let old = b.inner.snapshot.load_full();
    let (member, stats, selected_before) = b.inner.begin_call(&old, NO_COUNTER, None, 3, n);
    assert_eq!(member.id, 4);
    b.update(&set[..3]).unwrap();
    b.inner
        .strategy
        .on_select(n_state, n, &member.state, stats, selected_before, &clock);
    b.report(n, 4, 1000, Outcome::Success, 0).unwrap();
    assert_eq!(
        total(n_state),
        0,
        "a first pick straddling the update stayed counted"
    );
}

/// boundedhash keeps the whole set's calls in flight per method and brings it up to date on
/// every update. Calls selected and reported while a set is replaced must neither be lost
/// from that total nor counted twice: with every call reported, it is 0 after each round.
/// Every other update takes invoker 4 out, with calls to it in flight.
#[test]
fn boundedhash_in_flight_total_survives_updates_racing_calls() {
    in_flight_totals_survive_updates_racing_calls(1);
}

/// As above, each round calling another of 400 methods: invoker 4 comes back with fresh
/// counters every other round, so the round's method often has none on it when the update
/// takes it out, and a pick still on the replaced set makes them after the update looked —
/// the pick then seals them itself.
#[test]
fn boundedhash_in_flight_totals_survive_updates_racing_first_calls_of_methods() {
    in_flight_totals_survive_updates_racing_calls(400);
}

/// Rounds of calls by two workers on one of `methods` interned methods (round r calls the
/// (r mod methods)-th), each round's update racing them; every round must end with the
/// method's total at 0.
fn in_flight_totals_survive_updates_racing_calls(methods: usize) {
    use std::sync::atomic::AtomicUsize;
    const ROUNDS: usize = 3000;
    const WORKERS: usize = 2;
    let b = Balancer::new("loadbalance=boundedhash").unwrap();
    let set = four_invokers();
    b.update(&set).unwrap();
    let methods: Vec<u32> = (0..methods)
        .map(|m| b.method(&format!("m{m}")).unwrap())
        .collect();
    let methods = &methods;
    // Odd phases: the workers call (and update races them); even ones: each worker, its
    // calls all reported, parks by storing the phase.
    let phase = AtomicUsize::new(0);
    let parked: [AtomicUsize; WORKERS] = Default::default();
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        for (w, parked) in parked.iter().enumerate() {
            let (b, phase, stop) = (&b, &phase, &stop);
            scope.spawn(move || {
                let mut held = Vec::new();
                let mut i = 0u64;
                loop {
                    let p = phase.load(Acquire);
                    if p % 2 == 0 {
                        parked.store(p, Release);
                        if stop.load(Acquire) {
                            return;
                        }
                        std::thread::yield_now();
                        continue;
                    }
                    let method = methods[p.div_ceil(2) % methods.len()]; // round r: phase 2r - 1
                                                                         // Three calls held at once, so that invokers are busy during updates.
                    for _ in 0..3 {
                        i += 1;
                        let key = (w as u64 * 1_000_003 + i).to_le_bytes();
                        held.push(b.select(method, &key, 0).unwrap());
                    }
                    for id in held.drain(..) {
                        b.report(method, id, 100, Outcome::Success, 0).unwrap();
                    }
                }
            });
        }
        let mut drifted = Vec::new();
        for r in 1..=ROUNDS {
            phase.store(2 * r - 1, Release);
            // Let the workers start calling, then replace the set under them.
            std::thread::yield_now();
            b.update(if r % 2 == 0 { &set } else { &set[..3] }).unwrap();
            phase.store(2 * r, Release);
            while parked.iter().any(|p| p.load(Acquire) != 2 * r) {
                std::thread::yield_now();
            }
            let m = b.inner.methods.get(methods[r % methods.len()]).unwrap();
            let total = crate::strategy::whole_set_in_flight(m).unwrap_or(0);
            if total != 0 {
                drifted.push((r, total));
            }
        }
        stop.store(true, Release);
        assert!(
            drifted.is_empty(),
            "{} of {ROUNDS} rounds ended with a total in flight, the first: {:?}",
            drifted.len(),
            &drifted[..drifted.len().min(8)]
        );
    });
}

/// d choices draw distinct candidates in proportion to weight until none is left, at any
/// position: below 256 (tracked as bits) and beyond (a search of the sorted draws), by the
/// alias table, by skipping drawn weight when its tries collide, and uniformly.
#[test]
fn a_sampler_draws_each_candidate_at_most_once_at_any_position() {
    type WeightAt = fn(usize) -> i32;
    let cases: [(usize, WeightAt); 4] = [
        (20, |i| 100 + (i % 3) as i32 * 50),
        (20, |_| 100),
        // One heavy invoker: the alias table keeps landing on it once it is drawn.
        (40, |i| if i == 7 { 1_000_000 } else { 1 }),
        // Most weight on positions 250-299, on both sides of 256.
        (300, |i| if i >= 250 { 1_000 } else { 1 }),
    ];
    for (n, weight) in cases {
        let b = Balancer::new("loadbalance=p2c&seed=7").unwrap();
        let set: Vec<Invoker> = (0..n as u64)
            .map(|i| {
                Invoker::new(i, format!("10.0.{}.{}:1", i / 200, i % 200))
                    .weight(weight(i as usize))
            })
            .collect();
        b.update(&set).unwrap();
        let snapshot = b.inner.snapshot.load_full();
        let weights = snapshot
            .prepared
            .as_ref()
            .unwrap()
            .downcast_ref::<Weights>()
            .unwrap();
        let clock = Clock::new(0);
        let (mut below, mut beyond) = (0, 0);
        // Fewer under Miri (scripts/miri.sh), where 50 rounds take minutes.
        for round in 0..if cfg!(miri) { 5 } else { 50 } {
            let ctx = Ctx::whole_set(
                &snapshot,
                b.inner.methods.get(0).unwrap(),
                0,
                &clock,
                b.inner.rng.on(None),
            );
            let mut sampler = crate::strategy::Sampler::new(&ctx, weights, None);
            let mut drawn = Vec::new();
            while let Some(pos) = sampler.draw() {
                assert!(sampler.was_drawn(pos));
                drawn.push(pos);
            }
            let mut distinct = drawn.clone();
            distinct.sort_unstable();
            distinct.dedup();
            assert_eq!(
                distinct.len(),
                drawn.len(),
                "n = {n}, round {round}: {drawn:?}"
            );
            assert_eq!(drawn.len(), n.min(crate::strategy::MAX_DRAWS), "n = {n}");
            below += drawn.iter().filter(|&&p| p < 256).count();
            beyond += drawn.iter().filter(|&&p| p >= 256).count();
            for pos in 0..n {
                assert_eq!(
                    sampler.was_drawn(pos),
                    drawn.contains(&pos),
                    "n = {n}, {pos}"
                );
            }
        }
        if n > 256 {
            assert!(
                below > 0 && beyond > 0,
                "{below} below 256, {beyond} beyond"
            );
        }
    }
}

/// A ring whose points would not fit its 32-bit indexes is refused before anything is built
/// (it would also need over 32 GB); the set stays as it was.
#[test]
fn a_ring_past_its_point_limit_is_refused_and_changes_nothing() {
    let many: Vec<Invoker> = (0..65_537)
        .map(|i| Invoker::new(i, format!("10.{}.{}.1:1", i >> 8, i & 255)))
        .collect();
    assert!(many.len() as u64 * 65_536 > update::MAX_RING_POINTS);
    for strategy in ["consistenthash", "boundedhash"] {
        let b = Balancer::new(&format!("loadbalance={strategy}&hash.nodes=65536")).unwrap();
        b.update(&four_invokers()[..1]).unwrap();
        let e = b.update(&many).unwrap_err();
        assert_eq!(e.status, Status::LimitExceeded, "{strategy}");
        assert!(e.message.contains("hash.nodes=65536"), "{}", e.message);
        assert_eq!(b.select(0, b"k", 0).unwrap(), four_invokers()[0].id);
    }
    // Other strategies keep no ring.
    let b = Balancer::new("loadbalance=random&hash.nodes=65536").unwrap();
    b.update(&many).unwrap();
}

/// roundrobin picks on a replaced set (a select that pinned it before an update, the update
/// to the empty set included, finishing after) walk that set's list with the counters as they
/// are, as Dubbo's select over the list it was handed: each pick against the model.
#[test]
fn roundrobin_picks_on_replaced_sets_across_empty_updates_equal_dubbo() {
    for seed in 1..=200u64 {
        let mut rng = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut next = |bound: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % bound
        };
        let big = seed % 3 == 0;
        let b = Balancer::new("loadbalance=roundrobin").unwrap();
        let m = b.method("m").unwrap();
        let m_state = b.inner.methods.get(m).unwrap();
        let mut model = crate::dubbo_round_robin::DubboRoundRobin::default();
        let mut now_ms = 1_700_000_000_000i64;
        let weight = |next: &mut dyn FnMut(u64) -> u64| -> i32 {
            if big {
                100_000 + next(100_000) as i32
            } else {
                1 + next(6) as i32
            }
        };
        let mut set: Vec<(u64, i32)> = (1..=4 + next(4))
            .map(|id| (id, weight(&mut next)))
            .collect();
        let publish = |set: &[(u64, i32)]| {
            let invokers: Vec<Invoker> = set
                .iter()
                .map(|&(id, w)| Invoker::new(id, format!("10.0.0.{id}:1")).weight(w))
                .collect();
            b.update(&invokers).unwrap();
        };
        publish(&set);
        // Replaced sets still pinned by some select: (snapshot, its list).
        type Replaced = (Arc<Snapshot>, Vec<(u64, i32)>);
        let mut old: Vec<Replaced> = Vec::new();
        for step in 0..400 {
            match next(12) {
                0 | 1 => {
                    old.push((b.inner.snapshot.load_full(), set.clone()));
                    b.update(&[]).unwrap();
                    if next(2) == 0 {
                        old.push((b.inner.snapshot.load_full(), Vec::new()));
                        b.update(&[]).unwrap();
                    }
                    // Selects that pinned a replaced set finish now.
                    for _ in 0..next(3) {
                        let (snap, list) = &old[next(old.len() as u64) as usize];
                        if list.len() < 2 {
                            continue;
                        }
                        now_ms += next(3) as i64;
                        let clock = Clock::new(now_ms * 1000);
                        let got =
                            b.inner
                                .select_in(&test_call(&b, snap, m_state, m, &clock), &[], &[]);
                        let want = model.select(list, now_ms, false);
                        assert_eq!(
                            got,
                            Ok(want),
                            "seed {seed} step {step}: on a replaced set {list:?}"
                        );
                    }
                    if next(3) == 0 {
                        now_ms += 61_000;
                    }
                    if next(3) == 0 {
                        let i = next(set.len() as u64) as usize;
                        set[i].1 = weight(&mut next);
                    }
                    publish(&set);
                }
                2 => now_ms += 61_000,
                3 if !old.is_empty() => {
                    let (snap, list) = &old[next(old.len() as u64) as usize];
                    if list.len() < 2 {
                        continue;
                    }
                    now_ms += next(3) as i64;
                    let clock = Clock::new(now_ms * 1000);
                    let got = b
                        .inner
                        .select_in(&test_call(&b, snap, m_state, m, &clock), &[], &[]);
                    let want = model.select(list, now_ms, false);
                    assert_eq!(got, Ok(want), "seed {seed} step {step}: late on {list:?}");
                }
                4 => publish(&set),
                _ => {
                    for _ in 0..1 + next(20) {
                        now_ms += next(3) as i64;
                        let want = model.select(&set, now_ms, false);
                        let got = b.select(m, b"", now_ms * 1000).unwrap();
                        assert_eq!(got, want, "seed {seed} step {step}");
                    }
                }
            }
            if old.len() > 6 {
                old.remove(0);
            }
        }
    }
}
