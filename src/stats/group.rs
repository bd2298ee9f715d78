//! Which cell of a spread counter set a thread counts in: the one of the processor it runs on,
//! where the processor can say which cheaply, else the one its counter id picks.
//!
//! By id, two busy threads whose ids agree modulo the cell count share a cell: one owns its
//! line and the other adds atomically beside it, reading the owner's line on every call, and
//! the line passes between the cores on every call of both (a select+report 15–25 → 27–39 ns a
//! thread in process). Threads keep their ids while the host moves its work between them — Go runs a
//! goroutine on whichever thread holds a processor, a pool hands tasks to whichever thread is
//! free — so which busy threads collide was left to chance. By processor, the threads running at
//! one moment count in different cells; a thread that moved adds atomically where another owns
//! the line, correct and uncontended until it moves back. The read's latency, twice a call,
//! costs a thread counting alone on spread counters about 1.5 ns per select+report (from Go,
//! where counters are always spread, 0–6 ns): kept for the tens of ns a collision costs
//! (bench/HISTORY.md part 23). Reading it once every 64 lookups instead measured no consistent
//! gain (part 24).

/// The group (before the modulo) of the calling thread, whose counter id is `counter`. By
/// processor once `decide` found the processor's number readable; until then, and elsewhere, by
/// id. Either is correct: the group only places the thread's counts.
#[inline(always)]
pub(super) fn of(counter: u32) -> usize {
    #[cfg(all(target_arch = "x86_64", target_os = "linux", not(miri)))]
    if processor::READABLE.load(std::sync::atomic::Ordering::Relaxed) {
        return processor::current();
    }
    counter as usize
}

/// Decides how threads are grouped, once, before a first set of cells is used (called where
/// cells are created, off the calls' path, so that `of` tests one flag).
#[cold]
pub(super) fn decide() {
    #[cfg(all(target_arch = "x86_64", target_os = "linux", not(miri)))]
    processor::decide();
}

#[cfg(all(target_arch = "x86_64", target_os = "linux", not(miri)))]
mod processor {
    use std::sync::atomic::{
        AtomicBool,
        Ordering::{Acquire, Relaxed, Release},
    };

    /// Whether `rdpid` reads the processor's number: when the processor has the instruction,
    /// which Linux then sets up (`TSC_AUX`) and its own vDSO `getcpu` uses — so a processor
    /// that lists it runs it. (A sub-nanosecond read; `sched_getcpu` costs 2.5 ns here.)
    pub(super) static READABLE: AtomicBool = AtomicBool::new(false);

    /// Once: in a virtual machine cpuid traps to the hypervisor (microseconds), and cells are
    /// created once per (invoker, method). A flag, not a `std::sync::Once`: a `fork` taken
    /// while another thread ran the `Once` left it running for ever in the child, whose next
    /// new cells then waited on it. Two threads may both ask cpuid; they store the same answer.
    pub(super) fn decide() {
        static DECIDED: AtomicBool = AtomicBool::new(false);
        if DECIDED.load(Acquire) {
            return;
        }
        // CPUID leaf 7, sub-leaf 0: ECX bit 22 lists RDPID.
        // SAFETY: every x86_64 processor has cpuid (unsafe to call in the oldest Rust
        // supported).
        #[allow(unused_unsafe)]
        let features = unsafe { std::arch::x86_64::__cpuid_count(7, 0) };
        READABLE.store(features.ecx & (1 << 22) != 0, Relaxed);
        DECIDED.store(true, Release);
    }

    /// The number of the processor running this thread (Linux keeps its NUMA node above bit
    /// 12 of the same register).
    #[inline(always)]
    pub(super) fn current() -> usize {
        let aux: u64;
        // SAFETY: only called when `READABLE`: the instruction exists; it reads a register
        // and touches no memory.
        unsafe {
            std::arch::asm!("rdpid {}", out(reg) aux, options(nomem, nostack, preserves_flags));
        }
        aux as usize & 0xfff
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        /// What `rdpid` reads is the processor the kernel says the thread runs on (compared
        /// when the thread did not move between the kernel's two answers around the read).
        #[test]
        fn the_group_is_the_processor_the_kernel_names() {
            decide();
            if !READABLE.load(Relaxed) {
                return;
            }
            let mut compared = 0;
            for _ in 0..10_000 {
                let kernel = || {
                    // SAFETY: sched_getcpu takes no argument and touches only its own state.
                    unsafe { libc::sched_getcpu() }
                };
                let before = kernel();
                let read = current();
                let after = kernel();
                if before >= 0 && before == after {
                    assert_eq!(read, before as usize, "rdpid against sched_getcpu");
                    compared += 1;
                }
            }
            assert!(compared > 0, "the thread moved between every pair of reads");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Without a readable processor number a thread's group is its id; with one, threads
    /// running on one processor share a group whatever their ids.
    #[test]
    fn the_group_follows_the_processor_where_it_is_readable() {
        decide();
        #[cfg(all(target_arch = "x86_64", target_os = "linux", not(miri)))]
        if processor::READABLE.load(std::sync::atomic::Ordering::Relaxed) {
            // Two ids read back to back on one thread: the same processor, bar a move between
            // the reads (retried).
            assert!((0..1000).any(|_| of(1) == of(2)));
            return;
        }
        assert_eq!((of(1), of(2), of(7)), (1, 2, 7));
    }
}
