//! `peakewma` after a slow first answer, in virtual time: a fast invoker whose first call was
//! slow (a connection's set-up, a client's class loading), beside a slower invoker that takes
//! the traffic meanwhile and a failing one. The per-second picks show how soon the fast invoker
//! carries the calls again. (While a slow first answer was a peak to forgive, it stayed priced
//! at the method's typical estimate, which the slow one had set, for about a decay: half the
//! calls on the slow invoker until 16 s with the default configuration below.)
//!
//! `cargo run --release --example coldstart -- [config]` (default: the recommended
//! configuration); `WARM=1` gives the fast invoker an ordinary first call, for comparison.
//! Each round sends 4 calls at once and waits for all of them, as a client with a few requests
//! in flight: a round that includes the slow invoker takes its 40 ms.
use polylb::{Balancer, Invoker, Outcome};

fn main() {
    let config = std::env::args().nth(1).unwrap_or_else(|| {
        "loadbalance=peakewma&peakewma.choices=0&peakewma.preferenceMs=1000&seed=1".into()
    });
    let lb = Balancer::new(&config).unwrap();
    let (fast, slow, failing) = (1, 2, 3);
    lb.update(&[
        Invoker::new(fast, "10.0.0.1:20880"),
        Invoker::new(slow, "10.0.0.2:20880"),
        Invoker::new(failing, "10.0.0.3:20880"),
    ])
    .unwrap();
    let m = lb.method("hello").unwrap();
    let start: i64 = 1_000_000_000_000;
    let mut now = start;
    let mut cold = std::env::var_os("WARM").is_none();
    let mut picks = [[0u32; 4]; 20];
    while now - start < 20_000_000 {
        let round: Vec<u64> = (0..4).map(|_| lb.select(m, b"", now).unwrap()).collect();
        let mut round_end = now;
        for &id in &round {
            let (latency_us, outcome) = match id {
                1 if cold => (300_000, Outcome::Success),
                1 => (1_000, Outcome::Success),
                2 => (40_000, Outcome::Success),
                _ => (1_000, Outcome::Failure),
            };
            if id == fast {
                cold = false;
            }
            lb.report(m, id, latency_us, outcome, now + latency_us)
                .unwrap();
            round_end = round_end.max(now + latency_us);
            picks[((now - start) / 1_000_000) as usize][id as usize] += 1;
        }
        now = round_end + 100;
    }
    println!("{config}");
    println!("second  fast (1 ms)  slow (40 ms)  failing");
    for (second, p) in picks.iter().enumerate() {
        println!("{second:>6}  {:>11}  {:>12}  {:>7}", p[1], p[2], p[3]);
    }
}
