//! `Balancer::call`: the selected call is in flight until it ends, reported exactly once — with
//! its outcome and its measured time by `finish` or `finish_with` (its `Result`), as cancelled
//! when dropped unfinished, as failed while a panic that began during it unwinds it — and its
//! errors are select's.

mod common;
use common::*;
use polylb::{Outcome, Status};
use std::time::Duration;

fn total(b: &polylb::Balancer, ids: &[u64], field: &str) -> i64 {
    ids.iter().map(|&id| stat(b, 0, id, field)).sum()
}

#[test]
fn a_call_is_in_flight_until_it_ends_and_reported_once() {
    let b = balancer("loadbalance=leastactive", &[provider(1), provider(2)]);
    let m = b.method("sayHello").unwrap();
    let first = b.call(m, b"").unwrap();
    assert_eq!(total(&b, &[1, 2], "active"), 1);
    // leastactive sees it: the next call goes to the idle invoker.
    let second = b.call(m, b"").unwrap();
    assert_ne!(second.id(), first.id());
    assert_eq!(second.method(), m);
    first.finish(Outcome::Success).unwrap();
    assert_eq!(total(&b, &[1, 2], "succeeded"), 1);
    assert_eq!(total(&b, &[1, 2], "active"), 1);
    drop(second); // unfinished: cancelled, no verdict
    assert_eq!(total(&b, &[1, 2], "active"), 0);
    assert_eq!(total(&b, &[1, 2], "succeeded"), 1);
    assert_eq!(total(&b, &[1, 2], "failures"), 0);

    b.call(m, b"").unwrap().finish(Outcome::Timeout).unwrap();
    assert_eq!(total(&b, &[1, 2], "failures"), 1);
    assert_eq!(total(&b, &[1, 2], "timeouts"), 1);

    // `?` and early returns leave through drop as well.
    let early = |fail: bool| -> Result<(), Status> {
        let call = b.call(m, b"")?;
        if fail {
            return Err(Status::InvalidArgument);
        }
        call.finish(Outcome::Success)
    };
    assert_eq!(early(true), Err(Status::InvalidArgument));
    early(false).unwrap();
    assert_eq!(total(&b, &[1, 2], "active"), 0);
    assert_eq!(total(&b, &[1, 2], "selected"), 5);
    assert_eq!(total(&b, &[1, 2], "succeeded"), 2);
}

#[test]
fn a_panic_during_the_call_reports_it_failed() {
    let b = balancer("loadbalance=leastactive", &[provider(1), provider(2)]);
    // No `AssertUnwindSafe`: a balancer is `RefUnwindSafe`, still sound after a panic.
    let unwound = std::panic::catch_unwind(|| {
        let _call = b.call(0, b"").unwrap();
        assert_eq!(total(&b, &[1, 2], "active"), 1);
        panic!("the connection was refused");
    });
    assert!(unwound.is_err());
    assert_eq!(total(&b, &[1, 2], "active"), 0);
    assert_eq!(total(&b, &[1, 2], "failures"), 1);

    // A call made while a panic already unwinds (in a Drop) is not that panic's failure.
    struct CallsWhileUnwinding<'a>(&'a polylb::Balancer);
    impl Drop for CallsWhileUnwinding<'_> {
        fn drop(&mut self) {
            let _early_return = self.0.call(0, b"").unwrap();
        }
    }
    let unwound = std::panic::catch_unwind(|| {
        let _during = CallsWhileUnwinding(&b);
        panic!("another bug");
    });
    assert!(unwound.is_err());
    assert_eq!(total(&b, &[1, 2], "active"), 0);
    assert_eq!(total(&b, &[1, 2], "failures"), 1);
    assert_eq!(total(&b, &[1, 2], "selected"), 2);
}

#[test]
fn finish_with_reads_the_calls_result() {
    let b = balancer("loadbalance=leastactive", &[provider(1)]);
    let ok: Result<(), std::io::Error> = Ok(());
    b.call(0, b"").unwrap().finish_with(&ok).unwrap();
    let refused: Result<(), _> = Err(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
    b.call(0, b"").unwrap().finish_with(&refused).unwrap();
    let late: Result<(), _> = Err(std::io::Error::from(std::io::ErrorKind::TimedOut));
    b.call(0, b"").unwrap().finish_with(&late).unwrap();
    let other: Result<u32, String> = Err("no route".into());
    b.call(0, b"").unwrap().finish_with(&other).unwrap();
    assert_eq!(stat(&b, 0, 1, "succeeded"), 1);
    assert_eq!(stat(&b, 0, 1, "failures"), 3);
    assert_eq!(stat(&b, 0, 1, "timeouts"), 1);

    // A socket read past its timeout (WouldBlock on Unix), and timeouts boxed or wrapped.
    let read = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    read.set_read_timeout(Some(Duration::from_millis(1)))
        .unwrap();
    let past: Result<usize, std::io::Error> = read.recv(&mut [0u8; 8]);
    b.call(0, b"").unwrap().finish_with(&past).unwrap();
    let boxed: Result<(), Box<dyn std::error::Error + Send + Sync>> =
        Err(Box::new(std::io::Error::from(std::io::ErrorKind::TimedOut)));
    b.call(0, b"").unwrap().finish_with(&boxed).unwrap();
    #[derive(Debug)]
    struct Wrapper(std::io::Error);
    impl std::fmt::Display for Wrapper {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "request failed")
        }
    }
    impl std::error::Error for Wrapper {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }
    let wrapped: Result<(), Box<dyn std::error::Error>> = Err(Box::new(Wrapper(
        std::io::Error::from(std::io::ErrorKind::TimedOut),
    )));
    b.call(0, b"").unwrap().finish_with(&wrapped).unwrap();
    // io::Error::other(e) reports e's source as its own, not e: its inner error is looked into.
    let other_io: Result<(), _> = Err(std::io::Error::other(std::io::Error::from(
        std::io::ErrorKind::TimedOut,
    )));
    b.call(0, b"").unwrap().finish_with(&other_io).unwrap();
    assert_eq!(stat(&b, 0, 1, "failures"), 7);
    assert_eq!(stat(&b, 0, 1, "timeouts"), 5);

    // An error type of one's own is opaque to finish_with; finish_with_error reads its chain.
    let own: Result<(), Wrapper> = Err(Wrapper(std::io::Error::from(std::io::ErrorKind::TimedOut)));
    b.call(0, b"").unwrap().finish_with(&own).unwrap();
    b.call(0, b"").unwrap().finish_with_error(&own).unwrap();
    let own_refused: Result<(), Wrapper> = Err(Wrapper(std::io::Error::from(
        std::io::ErrorKind::ConnectionRefused,
    )));
    b.call(0, b"")
        .unwrap()
        .finish_with_error(&own_refused)
        .unwrap();
    let own_ok: Result<(), Wrapper> = Ok(());
    b.call(0, b"").unwrap().finish_with_error(&own_ok).unwrap();
    assert_eq!(stat(&b, 0, 1, "succeeded"), 2);
    assert_eq!(stat(&b, 0, 1, "failures"), 10);
    assert_eq!(stat(&b, 0, 1, "timeouts"), 6);
    assert_eq!(stat(&b, 0, 1, "active"), 0);
}

#[test]
fn the_measured_time_reaches_the_balancer() {
    let b = balancer("loadbalance=shortestresponse", &[provider(1)]);
    let call = b.call(0, b"").unwrap();
    std::thread::sleep(Duration::from_millis(20));
    call.finish(Outcome::Success).unwrap();
    let mean = stat(&b, 0, 1, "mean_success_us");
    // At least the sleep; far less than a second unless the machine stalls.
    assert!(
        (20_000..1_000_000).contains(&mean),
        "mean success {mean} µs"
    );
}

#[test]
fn calls_among_candidates_and_errors_are_selects() {
    let b = balancer(
        "loadbalance=random&seed=5",
        &[provider(1), provider(2), provider(3)],
    );
    for _ in 0..100 {
        let call = b.call_among(0, b"", &[1, 2, 3], &[1, 2]).unwrap();
        assert_eq!(call.id(), 3);
        let other = b.call_among(0, b"", &[], &[3]).unwrap();
        assert_ne!(other.id(), 3);
    }
    assert_eq!(total(&b, &[1, 2, 3], "active"), 0);
    assert_eq!(
        b.call_among(0, b"", &[1], &[1]).unwrap_err(),
        Status::NoCandidate
    );
    assert_eq!(b.call(99, b"").unwrap_err(), Status::UnknownMethod);
    b.update(&[]).unwrap();
    assert_eq!(b.call(0, b"").unwrap_err(), Status::NoProvider);
}

#[test]
fn calls_on_many_threads_during_updates_end_with_nothing_in_flight() {
    let b = balancer("loadbalance=p2c", &[provider(1), provider(2), provider(3)]);
    for name in ["m0", "m1", "m2", "m3"] {
        b.method(name).unwrap();
    }
    std::thread::scope(|s| {
        for t in 0..4 {
            let b = &b;
            s.spawn(move || {
                for i in 0..5_000u32 {
                    let call = b.call(t, b"").unwrap();
                    if i % 3 != 0 {
                        call.finish(if i % 2 == 0 {
                            Outcome::Success
                        } else {
                            Outcome::Failure
                        })
                        .unwrap();
                    }
                }
            });
        }
        s.spawn(|| {
            for i in 0..500 {
                let set = if i % 2 == 0 {
                    vec![provider(1), provider(2), provider(3)]
                } else {
                    vec![provider(2), provider(3), provider(4)]
                };
                b.update(&set).unwrap();
            }
        });
    });
    let stats: serde_json::Value = serde_json::from_str(&b.stats_json(0)).unwrap();
    let invokers = stats["invokers"].as_array().unwrap();
    assert_eq!(invokers.len(), 3);
    for inv in invokers {
        assert_eq!(inv["active"], 0, "{inv}");
    }
}

/// An async task holds its `Call` across `.await`s and may resume on another worker thread: the
/// `Call` is `Send`, and a call made on one thread is reported by the thread that finishes it.
#[test]
fn a_call_can_end_on_another_thread() {
    let b = balancer("loadbalance=leastactive", &[provider(1), provider(2)]);
    let m = b.method("sayHello").unwrap();
    std::thread::scope(|s| {
        let finished = b.call(m, b"").unwrap();
        let dropped = b.call(m, b"").unwrap();
        assert_eq!(total(&b, &[1, 2], "active"), 2);
        s.spawn(move || {
            std::thread::sleep(Duration::from_millis(5));
            finished.finish(Outcome::Success).unwrap();
            drop(dropped);
        })
        .join()
        .unwrap();
    });
    assert_eq!(total(&b, &[1, 2], "active"), 0);
    assert_eq!(total(&b, &[1, 2], "succeeded"), 1);
    assert_eq!(total(&b, &[1, 2], "failures"), 0);
    let latency: i64 = [1, 2]
        .iter()
        .map(|&id| stat(&b, 0, id, "mean_success_us"))
        .max()
        .unwrap();
    assert!(
        latency >= 5_000,
        "the time from the select to the finish: {latency} us"
    );
}

/// `into_owned`: the call outlives the borrow it was made from (a `'static` future's), is still
/// in flight, and is reported once — by the owned call, not by the one it replaced.
#[test]
fn an_owned_call_outlives_the_borrow_and_is_reported_once() {
    let b = balancer("loadbalance=leastactive", &[provider(1), provider(2)]);
    let m = b.method("sayHello").unwrap();
    fn start(b: &polylb::Balancer, m: u32) -> polylb::Call<'static> {
        b.call(m, b"").unwrap().into_owned()
    }
    let owned = start(&b, m);
    assert_eq!(owned.method(), m);
    // The borrowed call ended without a report: still one call in flight, nothing cancelled.
    assert_eq!(total(&b, &[1, 2], "active"), 1);
    assert_eq!(total(&b, &[1, 2], "selected"), 1);
    let id = owned.id();
    let worker = std::thread::spawn(move || owned.finish(Outcome::Failure));
    worker.join().unwrap().unwrap();
    assert_eq!(stat(&b, 0, id, "failures"), 1);
    assert_eq!(total(&b, &[1, 2], "active"), 0);

    // Dropped unfinished, even after the balancer it came from is gone: cancelled, counted out.
    let clone = b.clone();
    let owned = clone.call(m, b"").unwrap().into_owned();
    drop(clone);
    assert_eq!(total(&b, &[1, 2], "active"), 1);
    drop(owned);
    assert_eq!(total(&b, &[1, 2], "active"), 0);
    assert_eq!(total(&b, &[1, 2], "failures"), 1);
    assert_eq!(total(&b, &[1, 2], "selected"), 2);
}

#[test]
fn a_balancer_prints_its_strategy_and_set_size() {
    let b = balancer("loadbalance=p2c", &[provider(1), provider(2), provider(3)]);
    assert_eq!(
        format!("{b:?}"),
        "Balancer { strategy: \"p2c\", invokers: 3 }"
    );
}
