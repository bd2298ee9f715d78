//! plb_balancer_report_queue: reports handed over in shared memory, written here as a binding
//! would (the producer protocol of include/polylb.h), are applied by the next select or stats
//! exactly as plb_report calls would be.

use polylb::ffi::*;
use std::ptr::{null, null_mut};
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Clone, Copy)]
struct Handle(*mut plb_balancer);
unsafe impl Send for Handle {}
unsafe impl Sync for Handle {}

#[derive(Clone, Copy)]
struct Queue(*mut plb_report_queue);
unsafe impl Send for Queue {}
unsafe impl Sync for Queue {}

fn new_balancer(config: &str, n: u64) -> Handle {
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
    assert_eq!(s, PLB_OK, "{config}");
    let addresses: Vec<String> = (0..n).map(|i| format!("10.3.0.{i}:20880")).collect();
    let set: Vec<plb_invoker> = addresses
        .iter()
        .enumerate()
        .map(|(i, a)| plb_invoker {
            id: i as u64 + 1,
            address: a.as_ptr(),
            address_len: a.len(),
            weight: 100,
            start_time_ms: 0,
            warmup_ms: -1,
            zone: null(),
            zone_len: 0,
        })
        .collect();
    let s = unsafe { plb_balancer_update(b, set.as_ptr(), set.len(), null_mut(), 0, null_mut()) };
    assert_eq!(s, PLB_OK);
    Handle(b)
}

fn queue_of(b: Handle) -> Option<Queue> {
    let mut q = null_mut();
    assert_eq!(unsafe { plb_balancer_report_queue(b.0, &mut q) }, PLB_OK);
    (!q.is_null()).then_some(Queue(q))
}

fn atomic<'a>(p: *mut u64) -> &'a AtomicU64 {
    unsafe { AtomicU64::from_ptr(p) }
}

/// The producer side of the protocol in include/polylb.h. False when the queue is full.
fn push(q: Queue, method: u32, id: u64, elapsed_us: i64, outcome: i32) -> bool {
    let q = q.0;
    let tail = atomic(unsafe { &raw mut (*q).tail });
    loop {
        let p = tail.load(Ordering::Relaxed);
        let slot = unsafe { (*q).slots.add((p & (*q).mask) as usize) };
        let seq = atomic(unsafe { &raw mut (*slot).seq });
        let turn = seq.load(Ordering::Acquire);
        if turn == p {
            if tail
                .compare_exchange(p, p + 1, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
            {
                unsafe {
                    (*slot).id = id;
                    (*slot).elapsed_us = elapsed_us;
                    (*slot).method = method;
                    (*slot).outcome = outcome;
                }
                seq.store(p + 1, Ordering::Release);
                return true;
            }
        } else if (turn as i64).wrapping_sub(p as i64) < 0 {
            return false;
        }
    }
}

fn stats(b: Handle) -> serde_json::Value {
    let mut buf = vec![0u8; 1 << 16];
    let mut len = 0usize;
    let s = unsafe { plb_balancer_stats(b.0, 0, buf.as_mut_ptr() as *mut _, buf.len(), &mut len) };
    assert_eq!(s, PLB_OK);
    serde_json::from_slice(&buf[..len]).unwrap()
}

fn active(b: Handle) -> Vec<i64> {
    stats(b)["invokers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["active"].as_i64().unwrap())
        .collect()
}

#[test]
fn offered_only_where_reports_are_counters() {
    for config in [
        "loadbalance=random",
        "loadbalance=roundrobin",
        "loadbalance=leastactive",
        "loadbalance=consistenthash",
        "loadbalance=adaptive",
        "loadbalance=p2c",
    ] {
        let b = new_balancer(config, 3);
        let q = queue_of(b).unwrap_or_else(|| panic!("{config} offers a queue"));
        assert_eq!(queue_of(b).unwrap().0, q.0, "one queue per balancer");
        unsafe { plb_balancer_free(b.0) };
    }
    for config in [
        "loadbalance=shortestresponse",
        "loadbalance=peakewma",
        "loadbalance=boundedhash",
        "loadbalance=random&outlier.consecutiveFailures=3",
    ] {
        let b = new_balancer(config, 3);
        assert!(queue_of(b).is_none(), "{config} needs each report at once");
        unsafe { plb_balancer_free(b.0) };
    }
    let mut q = null_mut();
    assert_eq!(
        unsafe { plb_balancer_report_queue(null(), &mut q) },
        PLB_ERR_NULL_POINTER
    );
    let b = new_balancer("loadbalance=random", 1);
    assert_eq!(
        unsafe { plb_balancer_report_queue(b.0, null_mut()) },
        PLB_ERR_NULL_POINTER
    );
    unsafe { plb_balancer_free(b.0) };
}

/// leastactive sees a queued report at its next pick: with invoker 1 busy and its call
/// reported through the queue, the pick is a tie again, as after plb_report.
#[test]
fn the_next_select_sees_queued_reports() {
    let b = new_balancer("loadbalance=leastactive", 2);
    let q = queue_of(b).unwrap();
    let first = unsafe { plb_select(b.0, 0, null(), 0, 0) };
    assert!(first > 0);
    // While `first` is in flight, leastactive must pick the other one.
    let second = unsafe { plb_select(b.0, 0, null(), 0, 0) };
    assert_ne!(first, second);
    assert!(push(q, 0, second as u64, 1500, PLB_OUTCOME_SUCCESS));
    // The queued report frees `second`: the next pick must avoid `first` again.
    for _ in 0..50 {
        let id = unsafe { plb_select(b.0, 0, null(), 0, 0) };
        assert_eq!(id, second, "the queued report was applied before the pick");
        assert!(push(q, 0, id as u64, 1500, PLB_OUTCOME_FAILURE));
    }
    assert!(push(q, 0, first as u64, 10, PLB_OUTCOME_TIMEOUT));
    let s = stats(b);
    let rows = s["invokers"].as_array().unwrap();
    let by_id = |id: i64| rows.iter().find(|r| r["id"] == id).unwrap();
    assert_eq!(by_id(second)["succeeded"], 1);
    assert_eq!(by_id(second)["failures"], 50);
    assert_eq!(by_id(first)["timeouts"], 1);
    assert_eq!(active(b), vec![0, 0]);
    unsafe { plb_balancer_free(b.0) };
}

/// Reports the library would refuse are dropped; an unknown id is ignored as plb_report does.
#[test]
fn bad_queued_reports_change_nothing() {
    let b = new_balancer("loadbalance=random", 2);
    let q = queue_of(b).unwrap();
    let id = unsafe { plb_select(b.0, 0, null(), 0, 0) };
    assert!(push(q, 0, id as u64, 5, 99), "an unknown outcome");
    assert!(
        push(q, 7, id as u64, 5, PLB_OUTCOME_SUCCESS),
        "an unknown method"
    );
    assert!(
        push(q, 0, id as u64, -5, PLB_OUTCOME_SUCCESS),
        "a negative time"
    );
    assert!(
        push(q, 0, 12345, 5, PLB_OUTCOME_SUCCESS),
        "an id not in the set"
    );
    assert_eq!(active(b).iter().sum::<i64>(), 1, "still in flight");
    assert!(push(q, 0, id as u64, 5, PLB_OUTCOME_SUCCESS));
    assert_eq!(active(b), vec![0, 0]);
    unsafe { plb_balancer_free(b.0) };
}

/// Four threads select and hand their reports over through the queue (falling back to
/// plb_report when it is full) while a fifth updates the set: every call ends exactly once.
#[test]
fn concurrent_producers_with_updates_leave_nothing_in_flight() {
    let b = new_balancer("loadbalance=leastactive", 8);
    let q = queue_of(b).unwrap();
    let fallbacks = AtomicU64::new(0);
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let fallbacks = &fallbacks;
            s.spawn(move || {
                // Capture the handles whole (not their raw-pointer fields).
                let (b, q) = (b, q);
                let mut held = Vec::new();
                for i in 0..40_000u64 {
                    let id = unsafe { plb_select(b.0, 0, null(), 0, 0) };
                    assert!(id > 0);
                    held.push(id as u64);
                    // Keep a few calls open, as concurrent RPCs do.
                    if held.len() > (t as usize + i as usize) % 5 {
                        let id = held.swap_remove(0);
                        if !push(q, 0, id, 100, PLB_OUTCOME_SUCCESS) {
                            fallbacks.fetch_add(1, Ordering::Relaxed);
                            let s = unsafe { plb_report(b.0, 0, id, 100, PLB_OUTCOME_SUCCESS, 0) };
                            assert_eq!(s, PLB_OK);
                        }
                    }
                }
                for id in held {
                    if !push(q, 0, id, 100, PLB_OUTCOME_CANCELLED) {
                        unsafe { plb_report(b.0, 0, id, 100, PLB_OUTCOME_CANCELLED, 0) };
                    }
                }
            });
        }
        s.spawn(move || {
            let b = b;
            for round in 0..2_000u64 {
                // Weights change; the ids stay, so their counters must stay exact.
                let addresses: Vec<String> = (0..8).map(|i| format!("10.3.0.{i}:20880")).collect();
                let set: Vec<plb_invoker> = addresses
                    .iter()
                    .enumerate()
                    .map(|(i, a)| plb_invoker {
                        id: i as u64 + 1,
                        address: a.as_ptr(),
                        address_len: a.len(),
                        weight: 50 + ((round + i as u64) % 4) as i32 * 25,
                        start_time_ms: 0,
                        warmup_ms: -1,
                        zone: null(),
                        zone_len: 0,
                    })
                    .collect();
                let s = unsafe {
                    plb_balancer_update(b.0, set.as_ptr(), set.len(), null_mut(), 0, null_mut())
                };
                assert_eq!(s, PLB_OK);
            }
        });
    });
    let s = stats(b);
    let rows = s["invokers"].as_array().unwrap();
    let sum = |k: &str| rows.iter().map(|r| r[k].as_u64().unwrap()).sum::<u64>();
    assert_eq!(sum("selected"), 160_000);
    assert_eq!(sum("active"), 0, "every call ended exactly once");
    assert!(sum("succeeded") > 150_000);
    println!(
        "fallbacks to plb_report: {}",
        fallbacks.load(Ordering::Relaxed)
    );
    unsafe { plb_balancer_free(b.0) };
}
