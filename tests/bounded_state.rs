//! State that a long-lived process keeps follows the current set, not the history of calls:
//! live heap bytes (a counting global allocator, per thread so that the harness's own
//! allocations do not count) plateau while the same kind of event repeats.

use polylb::{Balancer, Invoker, Outcome};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;

thread_local! {
    /// Bytes allocated minus bytes freed by this thread.
    static LIVE: Cell<isize> = const { Cell::new(0) };
}

fn count(delta: isize) {
    // Not during thread teardown, where the slot may be gone.
    let _ = LIVE.try_with(|live| live.set(live.get() + delta));
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size() as isize);
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count(-(layout.size() as isize));
        System.dealloc(ptr, layout)
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size() as isize);
        System.alloc_zeroed(layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size as isize - layout.size() as isize);
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn live_bytes() -> isize {
    LIVE.with(Cell::get)
}

/// roundrobin over a set that never changes, with a failover's retry now and then: each retry
/// ends the method's period and the period recorded after it is a new order (5,950 entries
/// here), which its lock-free picks hold until the snapshot drops. Those orders are bounded per
/// snapshot (4 MiB of entries): past that, failovers add nothing. (Before, each one kept its
/// 23.8 KB until 512 of them, 12 MB; at the longest period kept, 1 MB each, 512 MB.)
#[test]
fn roundrobin_failovers_in_a_stable_set_hold_bounded_memory() {
    let now = 1_700_000_000_000_000i64;
    let b = Balancer::new("loadbalance=roundrobin").unwrap();
    // Weights 10..109: gcd 1, a period of Σw = 5,950 picks, which fits (a kinetic tournament
    // records it after each failover).
    let set: Vec<Invoker> = (0..100)
        .map(|i| Invoker::new(i, format!("10.0.0.{i}:20880")).weight(10 + i as i32))
        .collect();
    b.update(&set).unwrap();
    let m = b.method("sayHello").unwrap();
    let period = 5_950;
    // Three periods between failovers: time for the tournament to reach its cycle and record it.
    let round = |b: &Balancer| {
        for _ in 0..3 * period {
            let id = b.select(m, b"", now).unwrap();
            b.report(m, id, 1000, Outcome::Success, now).unwrap();
        }
        let id = b.select(m, b"", now).unwrap();
        let retry = b.select_among(m, b"", &[], &[id], now).unwrap();
        b.report(m, retry, 1000, Outcome::Failure, now).unwrap();
    };
    let mut at = Vec::new();
    for r in 0..=400 {
        if r % 200 == 0 {
            at.push(live_bytes());
        }
        round(&b);
    }
    let grown = at[1] - at[0];
    let budget = 4 << 20;
    assert!(
        grown <= budget + (64 << 10),
        "200 failovers held {grown} B, beyond the 4 MiB budget of live periods' orders"
    );
    let later = at[2] - at[1];
    assert!(
        later <= 64 << 10,
        "200 more failovers on the same set held {later} B more: memory grows with history"
    );
    drop(b);
}

/// roundrobin's state per method in use stays small beside the set: the counters a method's
/// period starts from are a buffer per thread, not one of 8 bytes per invoker kept in every
/// method's state (10.5 bytes per invoker and method in all before, 2.3 after, at n = 1000).
#[test]
fn roundrobin_methods_in_use_do_not_each_keep_a_buffer_of_the_set() {
    let now = 1_700_000_000_000_000i64;
    let n = 1000usize;
    let b = Balancer::new("loadbalance=roundrobin").unwrap();
    let set: Vec<Invoker> = (0..n as u64)
        .map(|i| {
            Invoker::new(i, format!("10.0.{}.{}:20880", i / 250, i % 250))
                .weight(100 + (i % 3) as i32 * 50)
        })
        .collect();
    b.update(&set).unwrap();
    let use_method = |name: &str| {
        let m = b.method(name).unwrap();
        for _ in 0..4 {
            let id = b.select(m, b"", now).unwrap();
            b.report(m, id, 1000, Outcome::Success, now).unwrap();
        }
    };
    // The first method's period, and this thread's buffer, are paid once.
    use_method("warm");
    let methods = 100;
    let before = live_bytes();
    for i in 0..methods {
        use_method(&format!("method{i}"));
    }
    let per_method = (live_bytes() - before) / methods;
    // A buffer of the set's counters per method alone would be 8 bytes per invoker.
    let limit = (n * 8 / 2) as isize;
    assert!(
        per_method <= limit,
        "each roundrobin method in use holds {per_method} B at n = {n}: beyond {limit} B, \
         about what a per-method copy of the set's counters costs"
    );
    drop(b);
}

/// A method's calls on a set (`&[Invoker]`) at a time: a failover's retry, a router's
/// candidates, an update.
type Calls = fn(&Balancer, u32, &[Invoker], i64);

/// What an update to the empty set (every binding's close) leaves of roundrobin's state, per
/// method and invoker of the set it replaced, beside a balancer with the same methods that
/// never had a set. Dubbo keeps each invoker's counter until a select finds it unused for 60 s,
/// and an empty set has no selects, so the counters stay until the handle is freed (in Go, by a
/// garbage collection that the native bytes do nothing to prompt). `weight` gives the set's
/// weights; each method makes `first`'s calls, then picks part way into a period (most
/// counters are then not zero), then `last`'s.
fn roundrobin_close_leaves(
    n: usize,
    methods: usize,
    weight: fn(u64) -> i32,
    first: Option<Calls>,
    last: Option<Calls>,
) -> f64 {
    let now = 1_700_000_000_000_000i64;
    let set: Vec<Invoker> = (0..n as u64)
        .map(|i| Invoker::new(i, format!("10.0.{}.{}:20880", i / 250, i % 250)).weight(weight(i)))
        .collect();
    let baseline = live_bytes();
    let b = Balancer::new("loadbalance=roundrobin").unwrap();
    let ids: Vec<u32> = (0..methods)
        .map(|i| b.method(&format!("method{i}")).unwrap())
        .collect();
    let interned = live_bytes() - baseline;
    b.update(&set).unwrap();
    for (k, &m) in ids.iter().enumerate() {
        if let Some(first) = first {
            first(&b, m, &set, now);
        }
        for _ in 0..n / 2 + k {
            b.select(m, b"", now).unwrap();
        }
    }
    if let Some(last) = last {
        for &m in &ids {
            last(&b, m, &set, now);
        }
    }
    b.update(&[]).unwrap();
    b.update(&[]).unwrap();
    // This thread's cache of the balancer's set lets the replaced one go at its next call.
    assert!(b.select(ids[0], b"", now).is_err());
    let left = live_bytes() - baseline - interned;
    drop(b);
    left as f64 / (n * methods) as f64
}

/// A failover's retry: its walk ends the method's period.
fn failover(b: &Balancer, m: u32, _: &[Invoker], now: i64) {
    let first = b.select(m, b"", now).unwrap();
    b.select_among(m, b"", &[], &[first], now).unwrap();
}

/// A close leaves a compact record of each method's counters: 8 bytes per invoker, beside the
/// ids and weights (12 bytes per invoker, once when they are the set's period's, else per
/// method), and about a kilobyte per method — whatever the method's last call was. Not an
/// entry per invoker in each method's map (about 55 bytes: 68 to 75 per method and invoker
/// were left in all), nor a tournament's memory (190 to 220).
#[test]
fn roundrobin_close_leaves_a_compact_record_of_the_counters() {
    let three_weights: fn(u64) -> i32 = |i| 100 + (i % 3) as i32 * 50;
    let added: Calls = |b, m, set, _| {
        if m == b.method("method0").unwrap() {
            let mut more = set.to_vec();
            more.push(Invoker::new(99_999, "10.9.9.9:20880").weight(100));
            b.update(&more).unwrap();
        }
    };
    let reweighted: Calls = |b, m, set, _| {
        if m == b.method("method0").unwrap() {
            let mut changed = set.to_vec();
            changed[0] = changed[0].clone().weight(7);
            b.update(&changed).unwrap();
        }
    };
    let router: Calls = |b, m, set, now| {
        let candidates: Vec<u64> = set.iter().skip(1).map(|i| i.id).collect();
        b.select_among(m, b"", &candidates, &[], now).unwrap();
        b.select_among(m, b"", &candidates, &[], now).unwrap();
    };
    // (what the counters come from, n, methods, weights, calls first and last, whether the
    // record shares the ids and weights of the set's period)
    type Case = (
        &'static str,
        usize,
        usize,
        fn(u64) -> i32,
        Option<Calls>,
        Option<Calls>,
        bool,
    );
    let cases: [Case; 8] = [
        (
            "the set's period over three weights",
            1000,
            50,
            three_weights,
            None,
            None,
            true,
        ),
        (
            "the set's period over equal weights",
            500,
            20,
            |_| 100,
            None,
            None,
            true,
        ),
        (
            "periods recorded after failovers",
            200,
            20,
            |i| 10 + i as i32,
            Some(failover),
            None,
            false,
        ),
        (
            "tournaments, as no period fits",
            300,
            20,
            |i| 100_000 + 7 * i as i32,
            None,
            None,
            false,
        ),
        (
            "a failover's retry last",
            1000,
            50,
            three_weights,
            None,
            Some(failover),
            false,
        ),
        (
            "a router's candidates twice, last",
            1000,
            50,
            three_weights,
            None,
            Some(router),
            false,
        ),
        (
            "an update no select saw (a weight changed)",
            1000,
            50,
            three_weights,
            None,
            Some(reweighted),
            false,
        ),
        (
            "an update no select saw (an invoker added)",
            1000,
            50,
            three_weights,
            None,
            Some(added),
            false,
        ),
    ];
    let over: Vec<String> = cases
        .into_iter()
        .filter_map(|(name, n, methods, weight, first, last, shared)| {
            let per = roundrobin_close_leaves(n, methods, weight, first, last);
            let ids_and_weights = if shared { 12.0 / methods as f64 } else { 12.0 };
            let limit = 8.0 + ids_and_weights + 1024.0 / n as f64;
            (per > limit).then(|| {
                format!("{name} (n = {n}, {methods} methods): {per:.1} B, over {limit:.1}")
            })
        })
        .collect();
    assert!(
        over.is_empty(),
        "what a close left per method and invoker: {over:#?}"
    );
}
