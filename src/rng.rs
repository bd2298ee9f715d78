//! Fast random numbers for the hot path: wyrand, per thread, or per balancer when seeded.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

const INCREMENT: u64 = 0xa076_1d64_78bd_642f;

fn mix(s: u64) -> u64 {
    let t = (s as u128).wrapping_mul((s ^ 0xe703_7ed1_a0b4_28db) as u128);
    ((t >> 64) as u64) ^ (t as u64)
}

thread_local! {
    static THREAD_STATE: Cell<u64> = Cell::new(seed_for_thread());
}

fn seed_for_thread() -> u64 {
    // Distinct per thread and per process without a syscall: the address of a thread-local and
    // the clock are enough for load balancing (this is not cryptographic randomness).
    let local = 0u8;
    let addr = &local as *const u8 as u64;
    mix(addr ^ crate::clock::wall_clock_us() as u64 ^ std::process::id() as u64)
}

/// A source of randomness for one balancer. Seeded balancers share one atomic state, which
/// makes a single-threaded sequence reproducible; unseeded ones never touch shared memory.
pub(crate) struct Rng {
    seeded: Option<AtomicU64>,
}

impl Rng {
    pub fn new(seed: Option<u64>) -> Rng {
        Rng {
            seeded: seed.map(AtomicU64::new),
        }
    }

    // Always inline: the balancer's whole-set draws inline it at two sites, where the compiler
    // would otherwise keep one shared copy behind a call (about 20 more instructions a pick).
    #[inline(always)]
    pub fn next_u64(&self) -> u64 {
        match &self.seeded {
            Some(state) => mix(state
                .fetch_add(INCREMENT, Ordering::Relaxed)
                .wrapping_add(INCREMENT)),
            None => THREAD_STATE.with(|s| {
                let v = s.get().wrapping_add(INCREMENT);
                s.set(v);
                mix(v)
            }),
        }
    }

    /// Uniform in `[0, bound)` by multiply-shift (bias below 2^-64 · bound, irrelevant here and
    /// 3x cheaper than rejection sampling on small ranges). `bound` must be positive.
    pub fn below(&self, bound: u64) -> u64 {
        ((self.next_u64() as u128 * bound as u128) >> 64) as u64
    }
}
