//! Concurrency stress through the C ABI: threads mix every call on one handle — select,
//! select_among, report, report_provider_metrics, stats, method and update — and the last
//! plb_balancer_free happens after the last use, on whichever thread finishes last.
//!
//! Checked: no call ever returns a status outside its documented set (never PLB_ERR_PANIC),
//! every pick is a candidate of some set the balancer held, and once every thread has reported
//! every select nothing is in flight. With a stable set, the counters add up exactly.

use polylb::ffi::*;
use std::collections::HashMap;
use std::ptr::{null, null_mut};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};

/// Every strategy the library knows, Dubbo's six first: new ones are covered as they land.
fn strategies() -> Vec<&'static str> {
    polylb::StrategyKind::ALL.iter().map(|k| k.name()).collect()
}
const THREADS: usize = 4;

/// The handle, shared across threads as the C contract allows (every function taking a
/// `const plb_balancer *` is thread-safe).
#[derive(Clone, Copy)]
struct Handle(*mut plb_balancer);
unsafe impl Send for Handle {}
unsafe impl Sync for Handle {}

fn new_balancer(config: &str) -> Handle {
    let mut b = null_mut();
    let s = unsafe {
        plb_balancer_new(
            config.as_ptr(),
            config.len(),
            &mut b,
            null_mut(),
            0,
            null_mut(),
        )
    };
    assert_eq!(s, PLB_OK);
    Handle(b)
}

/// Membership rotates over ids 1..=12 (4 to 11 of them) with changing weights and addresses.
fn set_of(round: u64) -> Vec<(u64, String, i32)> {
    let n = 4 + round % 8;
    (0..n)
        .map(|k| {
            let id = 1 + (round + k) % 12;
            (
                id,
                format!("10.9.{}.{id}:20880", round % 3),
                ((round + k) % 4) as i32 * 40,
            )
        })
        .collect()
}

fn update(b: Handle, set: &[(u64, String, i32)]) -> i32 {
    let raw: Vec<plb_invoker> = set
        .iter()
        .map(|(id, addr, w)| plb_invoker {
            id: *id,
            address: addr.as_ptr(),
            address_len: addr.len(),
            weight: *w,
            start_time_ms: 0,
            warmup_ms: -1,
            zone: null(),
            zone_len: 0,
        })
        .collect();
    unsafe { plb_balancer_update(b.0, raw.as_ptr(), raw.len(), null_mut(), 0, null_mut()) }
}

fn stats(b: Handle, now: i64) -> serde_json::Value {
    // The size may change between the two calls while others update: retry until it fits.
    let mut cap = 256;
    loop {
        let mut buf = vec![0u8; cap];
        let mut len = 0usize;
        let s = unsafe { plb_balancer_stats(b.0, now, buf.as_mut_ptr() as *mut _, cap, &mut len) };
        match s {
            PLB_OK => return serde_json::from_slice(&buf[..len]).expect("stats are JSON"),
            PLB_ERR_BUFFER_TOO_SMALL => {
                assert!(len >= cap);
                cap = len + 64;
            }
            other => panic!("stats returned {other}"),
        }
    }
}

fn assert_idle(v: &serde_json::Value) {
    for r in v["invokers"].as_array().unwrap() {
        assert_eq!(
            r["active"], 0,
            "in flight after every select was reported: {r}"
        );
    }
}

/// Method names interned by a worker, with the id each got.
type Names = HashMap<String, u32>;

/// Names interned concurrently got one id each, the same on every thread, and the ids are dense
/// after the service level's 0 (1..=n for n names): a racing intern neither splits a name
/// into two ids nor skips one.
fn assert_interned_once(b: Handle, per_thread: &[Names]) {
    let mut all: Names = HashMap::new();
    for names in per_thread {
        for (name, &id) in names {
            let first = *all.entry(name.clone()).or_insert(id);
            assert_eq!(first, id, "{name} interned as {first} and as {id}");
        }
    }
    let mut ids: Vec<u32> = all.values().copied().collect();
    ids.sort_unstable();
    assert_eq!(ids, (1..=all.len() as u32).collect::<Vec<_>>(), "{all:?}");
    for (name, &id) in &all {
        let mut again = u32::MAX;
        let s = unsafe { plb_balancer_method(b.0, name.as_ptr(), name.len(), &mut again) };
        assert_eq!((s, again), (PLB_OK, id), "{name} changed id");
    }
}

/// One worker: `iters` mixed calls. Returns (selects, successes, failures, timeouts).
fn worker(b: Handle, t: usize, iters: u64, churn: bool) -> [u64; 4] {
    worker_names(b, t, iters, churn).0
}

/// `worker`, also returning the names it interned.
fn worker_names(b: Handle, t: usize, iters: u64, churn: bool) -> ([u64; 4], Names) {
    let mut names = Names::new();
    let mut tally = [0u64; 4];
    let mut methods = vec![0u32];
    let mut held: Vec<(u32, u64)> = Vec::new();
    let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ (t as u64 + 1);
    for i in 0..iters {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let now = if i % 7 == 0 {
            0
        } else {
            1_700_000_000_000_000 + (i as i64) * 1000
        };
        let m = methods[(x >> 8) as usize % methods.len()];
        match x % 16 {
            0..=5 => {
                let key = (x >> 20).to_le_bytes();
                let r = unsafe { plb_select(b.0, m, key.as_ptr(), key.len(), now) };
                if r >= 0 {
                    assert!((1..=12).contains(&r), "select gave {r}");
                    held.push((m, r as u64));
                    tally[0] += 1;
                } else {
                    assert!(churn, "select failed on a stable set: {r}");
                    assert_eq!(r, -(PLB_ERR_NO_PROVIDER as i64));
                }
            }
            6 | 7 => {
                let cands = [1 + (x >> 12) % 12, 1 + (x >> 16) % 12, 1 + (x >> 24) % 12];
                let excl = [1 + (x >> 32) % 12];
                let (c, nc) = if x & 0x100 == 0 {
                    (cands.as_ptr(), cands.len())
                } else {
                    (null(), 0)
                };
                let r =
                    unsafe { plb_select_among(b.0, m, null(), 0, c, nc, excl.as_ptr(), 1, now) };
                if r >= 0 {
                    assert!((1..=12).contains(&r) && r as u64 != excl[0], "gave {r}");
                    if nc > 0 {
                        assert!(cands.contains(&(r as u64)), "{r} not a candidate");
                    }
                    held.push((m, r as u64));
                    tally[0] += 1;
                } else {
                    let code = (-r) as i32;
                    assert!(
                        [
                            PLB_ERR_NO_PROVIDER,
                            PLB_ERR_NO_CANDIDATE,
                            PLB_ERR_UNKNOWN_CANDIDATE
                        ]
                        .contains(&code),
                        "select_among returned {code}"
                    );
                }
            }
            8..=11 => {
                // Report the oldest held call, or hold a few to keep calls in flight.
                if held.len() > 3 || (x >> 40) % 2 == 0 {
                    if let Some((m, id)) = held.pop() {
                        let outcome = ((x >> 33) % 4) as i32;
                        let elapsed = ((x >> 44) % 50_000) as i64;
                        let s = unsafe { plb_report(b.0, m, id, elapsed, outcome, now) };
                        assert_eq!(s, PLB_OK);
                        if outcome < 3 {
                            tally[1 + outcome as usize] += 1;
                        }
                    }
                }
            }
            12 => {
                let s = unsafe {
                    plb_report_provider_metrics(
                        b.0,
                        m,
                        1 + (x >> 9) % 12,
                        (i as i64) + 1,
                        ((x >> 50) % 100) as f64 / 100.0,
                        ((x >> 30) % 20_000) as i64,
                        now,
                    )
                };
                assert_eq!(s, PLB_OK);
            }
            13 => {
                let v = stats(b, now);
                assert!(v["invokers"].as_array().is_some());
            }
            14 => {
                let name = format!("m{}", (x >> 10) % 6);
                let mut id = u32::MAX;
                let s = unsafe { plb_balancer_method(b.0, name.as_ptr(), name.len(), &mut id) };
                assert_eq!(s, PLB_OK);
                // Six names, m0..m5, shared by every thread: six ids after the service's 0.
                assert!((1..=6).contains(&id), "{name} got {id}");
                assert_eq!(*names.entry(name).or_insert(id), id, "an id changed");
                if !methods.contains(&id) {
                    methods.push(id);
                }
            }
            _ => {
                if churn {
                    let round = (x >> 5) % 40;
                    let s = if round == 39 {
                        update(b, &[])
                    } else {
                        update(b, &set_of(round))
                    };
                    assert_eq!(s, PLB_OK);
                }
            }
        }
    }
    for (m, id) in held {
        let s = unsafe { plb_report(b.0, m, id, 1000, PLB_OUTCOME_SUCCESS, 0) };
        assert_eq!(s, PLB_OK);
        tally[1] += 1;
    }
    (tally, names)
}

/// Updates race selects; the thread that finishes last frees the handle.
#[test]
fn every_call_mixed_with_updates_then_last_free() {
    for strategy in strategies() {
        let b = new_balancer(&format!("loadbalance={strategy}"));
        assert_eq!(update(b, &set_of(0)), PLB_OK);
        let remaining = Arc::new(AtomicUsize::new(THREADS));
        let start = Arc::new(Barrier::new(THREADS));
        let threads: Vec<_> = (0..THREADS)
            .map(|t| {
                let (remaining, start) = (remaining.clone(), start.clone());
                std::thread::spawn(move || {
                    start.wait();
                    worker(b, t, 20_000, true);
                    // Before the free, put back a fixed set and check nothing is in flight:
                    // only the last thread can, since the others have finished all their calls.
                    if remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
                        let v = stats(b, 0);
                        assert_idle(&v);
                        unsafe { plb_balancer_free(b.0) };
                        true
                    } else {
                        false
                    }
                })
            })
            .collect();
        let freed: usize = threads
            .into_iter()
            .map(|t| t.join().expect("worker panicked") as usize)
            .sum();
        assert_eq!(freed, 1, "{strategy}: freed exactly once");
    }
}

/// A stable set: the counters add up exactly across threads.
#[test]
fn stable_set_counters_add_up() {
    for strategy in strategies() {
        let b = new_balancer(&format!("loadbalance={strategy}"));
        let set: Vec<(u64, String, i32)> = (1..=12)
            .map(|id| (id, format!("10.8.0.{id}:20880"), 10 * id as i32))
            .collect();
        assert_eq!(update(b, &set), PLB_OK);
        // Started together, so that the threads race to intern the same names.
        let start = Arc::new(Barrier::new(THREADS));
        let threads: Vec<_> = (0..THREADS)
            .map(|t| {
                let start = start.clone();
                std::thread::spawn(move || {
                    start.wait();
                    worker_names(b, t, 20_000, false)
                })
            })
            .collect();
        let mut total = [0u64; 4];
        let mut names = Vec::new();
        for t in threads {
            let (tally, interned) = t.join().unwrap();
            for (sum, v) in total.iter_mut().zip(tally) {
                *sum += v;
            }
            names.push(interned);
        }
        assert_interned_once(b, &names);
        let v = stats(b, 0);
        assert_idle(&v);
        let field = |f: &str| -> u64 {
            v["invokers"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r[f].as_u64().unwrap())
                .sum()
        };
        assert_eq!(field("selected"), total[0], "{strategy}");
        assert_eq!(field("succeeded"), total[1], "{strategy}");
        assert_eq!(field("failures"), total[2] + total[3], "{strategy}");
        assert_eq!(field("timeouts"), total[3], "{strategy}");
        unsafe { plb_balancer_free(b.0) };
    }
}

/// Many short-lived balancers, each used by several threads and freed by the last user, while
/// other balancers are created: handles never interfere, and free after last use is clean.
#[test]
fn many_handles_freed_by_their_last_user() {
    let handles: Vec<(Handle, Arc<AtomicUsize>)> = (0..48)
        .map(|k| {
            let b = new_balancer(&format!(
                "loadbalance={}",
                strategies()[k % strategies().len()]
            ));
            assert_eq!(update(b, &set_of(k as u64)), PLB_OK);
            (b, Arc::new(AtomicUsize::new(THREADS)))
        })
        .collect();
    let handles = Arc::new(handles);
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let handles = handles.clone();
            std::thread::spawn(move || {
                let mut freed = 0;
                for k in 0..handles.len() {
                    let (b, users) = &handles[(k + t * 7) % handles.len()];
                    worker(*b, t, 300, true);
                    if users.fetch_sub(1, Ordering::AcqRel) == 1 {
                        assert_idle(&stats(*b, 0));
                        unsafe { plb_balancer_free(b.0) };
                        freed += 1;
                    }
                }
                freed
            })
        })
        .collect();
    let freed: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(freed, 48);
}
