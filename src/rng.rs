//! Fast random numbers for the hot path: wyrand, per thread, or per balancer when seeded.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

const INCREMENT: u64 = 0xa076_1d64_78bd_642f;

pub(crate) fn mix(s: u64) -> u64 {
    let t = (s as u128).wrapping_mul((s ^ 0xe703_7ed1_a0b4_28db) as u128);
    ((t >> 64) as u64) ^ (t as u64)
}

/// A seed distinct per thread, per call and per process without a syscall: the address of a
/// local, the clock and a counter are enough for load balancing (this is not cryptographic).
pub(crate) fn fresh_seed() -> u64 {
    static CALLS: AtomicU64 = AtomicU64::new(0);
    let local = 0u8;
    let addr = &local as *const u8 as u64;
    mix(addr
        ^ crate::clock::wall_clock_us() as u64
        ^ u64::from(std::process::id()).rotate_left(32)
        ^ CALLS.fetch_add(INCREMENT, Ordering::Relaxed))
}

/// Where a balancer's random numbers come from: its own seeded sequence (shared by its
/// threads, which makes a single-threaded sequence reproducible), or else each thread's state.
pub(crate) struct RngSource {
    /// Boxed: one word, so that it fits in the balancer's first cache line with the other
    /// fields every call reads (only seeded balancers follow the pointer).
    seeded: Option<Box<AtomicU64>>,
}

/// The state of calls that have no thread state at hand (during a thread's teardown).
static UNCACHED: AtomicU64 = AtomicU64::new(0x9e37_79b9_7f4a_7c15);

/// A new start for the process-wide sequence (in a child of `fork`, which would otherwise
/// repeat its parent's).
#[cfg(unix)]
pub(crate) fn reseed_uncached() {
    UNCACHED.store(fresh_seed(), Ordering::Relaxed);
}

impl RngSource {
    pub fn new(seed: Option<u64>) -> RngSource {
        RngSource {
            seeded: seed.map(|seed| Box::new(AtomicU64::new(seed))),
        }
    }

    /// True when the balancer draws from its own seeded sequence (`on` then ignores the
    /// thread's state).
    #[inline(always)]
    pub fn is_seeded(&self) -> bool {
        self.seeded.is_some()
    }

    /// The generator of one call: the seeded sequence, else the calling thread's state (kept
    /// by the caller in its own thread-local block, so that a draw costs no thread-local
    /// lookup), else a process-wide sequence.
    #[inline]
    pub fn on<'a>(&'a self, thread: Option<&'a Cell<u64>>) -> Rng<'a> {
        match (&self.seeded, thread) {
            (None, Some(thread)) => Rng::Thread(thread),
            (Some(seeded), _) => Rng::Shared(seeded),
            (None, None) => Rng::Shared(&UNCACHED),
        }
    }
}

/// The random numbers of one call.
#[derive(Clone, Copy)]
pub(crate) enum Rng<'a> {
    Shared(&'a AtomicU64),
    Thread(&'a Cell<u64>),
}

impl Rng<'_> {
    // Always inline: the balancer's whole-set draws inline it at two sites, where the compiler
    // would otherwise keep one shared copy behind a call (about 20 more instructions a pick).
    #[inline(always)]
    pub fn next_u64(&self) -> u64 {
        match *self {
            Rng::Thread(state) => {
                let v = state.get().wrapping_add(INCREMENT);
                state.set(v);
                mix(v)
            }
            Rng::Shared(state) => mix(state
                .fetch_add(INCREMENT, Ordering::Relaxed)
                .wrapping_add(INCREMENT)),
        }
    }

    /// Uniform in `[0, bound)` by multiply-shift (bias below 2^-64 · bound, irrelevant here and
    /// 3x cheaper than rejection sampling on small ranges). `bound` must be positive.
    pub fn below(&self, bound: u64) -> u64 {
        ((self.next_u64() as u128 * bound as u128) >> 64) as u64
    }
}

/// A seeded generator for tests (leaked: tests are short-lived).
#[cfg(test)]
pub(crate) fn seeded_for_test(seed: u64) -> Rng<'static> {
    let source: &'static RngSource = Box::leak(Box::new(RngSource::new(Some(seed))));
    source.on(None)
}
