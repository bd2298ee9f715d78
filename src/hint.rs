//! Hints to the processor that change nothing the program sees.

/// Asks for the cache line at `p` ahead of its use. A hint: it reads nothing, faults on no
/// address, and does nothing off x86-64 (or under Miri, which has no use for it).
#[inline(always)]
pub(crate) fn prefetch<T>(p: *const T) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: a prefetch neither reads nor writes memory the program sees, and faults on no
    // address (invalid ones are dropped).
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>(p.cast());
    }
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    let _ = p;
}
