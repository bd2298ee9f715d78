//! The strategies beyond Dubbo (`p2c`, `peakewma`, `boundedhash`, `maglev`, `rendezvous`) and
//! the options every strategy takes (zone preference, outlier ejection) plus slow start:
//! weighted distributions, churn, concurrency, per-method isolation, warm-up,
//! missing/zero/stale/equal metrics, failure and timeout feedback, and no allocation on the hot
//! path.
//!
//! Statistical checks allow 5 binomial standard deviations; the virtual-time scenarios (a small
//! event loop in helpers.rs) check bounds with wide margins, and their seeds are fixed.

#[path = "../common/mod.rs"]
mod common;

mod bounded_hash;
mod checklist;
mod choices;
mod concurrency;
mod config;
mod distribution;
mod helpers;
mod keyed;
mod latency;
mod maglev;
mod orca;
mod outlier;
mod rendezvous;
mod subset;
mod warmup;
mod zone;

use std::cell::Cell;

// ---------------------------------------------------------------------------------------------
// A counting allocator that counts per thread, so that the other tests of this binary (running on
// other threads) do not disturb the no-allocation check.

struct Counting;
thread_local! {
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

unsafe impl std::alloc::GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
        std::alloc::System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        std::alloc::System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
        std::alloc::System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations() -> usize {
    ALLOCATIONS.with(|c| c.get())
}
