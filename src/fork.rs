//! `fork()`: a child goes on with copies of its parent's balancers, so it must find them
//! unlocked, and draw random numbers of its own rather than its parent's.
//!
//! The cold calls (update, method interning, stats) take locks (a set's update lock, the method
//! names' lock) that a fork while another thread holds them would leave held for ever in the
//! child, whose next such call would then hang. So a fork waits for the cold calls in flight,
//! and a cold call that begins during a fork waits for it. The hot calls are not waited for:
//! `roundrobin`'s per-method state, `adaptive`'s model and an outlier ejection take a lock for
//! a moment, which a fork at that moment leaves held in the child (docs/abi-contract.md).

#[cfg(unix)]
use std::sync::atomic::Ordering::AcqRel;
use std::sync::atomic::{
    AtomicU64,
    Ordering::{Acquire, Release},
};

/// Cold calls in flight (the low 32 bits) and forks under way (the high 32 bits).
static STATE: AtomicU64 = AtomicU64::new(0);
const FORK: u64 = 1 << 32;
#[cfg(unix)]
const CALLS: u64 = FORK - 1;

/// A cold call in flight, until dropped. Not nested: a fork that came between an outer and an
/// inner one would wait for the outer while the inner waits for the fork.
pub(crate) struct ColdCall(());

pub(crate) fn cold_call() -> ColdCall {
    loop {
        if STATE.fetch_add(1, Acquire) < FORK {
            return ColdCall(());
        }
        STATE.fetch_sub(1, Release);
        while STATE.load(Acquire) >= FORK {
            std::thread::yield_now();
        }
    }
}

impl Drop for ColdCall {
    fn drop(&mut self) {
        STATE.fetch_sub(1, Release);
    }
}

/// Installs the fork handlers, once; called before a balancer exists, so before any call.
pub(crate) fn install_handlers() {
    #[cfg(unix)]
    {
        // A flag rather than a `Once`: a fork while another thread is inside a `Once` leaves
        // it running for good in the child, whose first balancer would then wait for ever.
        // Whoever sets the flag registers; a balancer built meanwhile on another thread is
        // unguarded until that returns, as any fork before the first balancer is.
        static INSTALLED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        if !INSTALLED.swap(true, std::sync::atomic::Ordering::Relaxed) {
            // Fails only for lack of memory; a fork is then as unguarded as in any library.
            // SAFETY: registers handlers with no preconditions.
            unsafe { libc::pthread_atfork(Some(prepare), Some(parent), Some(child)) };
        }
    }
}

#[cfg(unix)]
extern "C" fn prepare() {
    STATE.fetch_add(FORK, AcqRel);
    while STATE.load(Acquire) & CALLS != 0 {
        std::thread::yield_now();
    }
}

#[cfg(unix)]
extern "C" fn parent() {
    STATE.fetch_sub(FORK, Release);
}

#[cfg(unix)]
extern "C" fn child() {
    // The child's only thread is the forking one: no call is in flight, and no other fork.
    STATE.store(0, Release);
    crate::balancer::reseed_after_fork();
}
