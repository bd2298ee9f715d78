//! A value boxed and set once, without a lock.
//!
//! `std::sync::OnceLock` makes the threads that find it being initialised wait for the
//! initialiser. A `fork` taken while another thread initialises one leaves the child's copy
//! initialising for ever, and the child's first use of it waits for ever. The state created on
//! first use in the calls' path (overflow tables of per-method counters, what an update's first
//! pick finds out for the others) is set here instead: racing initialisers each build a value,
//! one is installed and the others drop theirs, so no thread ever waits for another.

use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};

pub(crate) struct OnceBox<T> {
    value: AtomicPtr<T>,
}

impl<T> OnceBox<T> {
    pub(crate) const fn new() -> Self {
        OnceBox {
            value: AtomicPtr::new(ptr::null_mut()),
        }
    }

    #[inline]
    pub(crate) fn get(&self) -> Option<&T> {
        // SAFETY: a non-null pointer is a leaked `Box<T>` installed by `get_or_init`, freed only
        // by `drop`, which has `&mut self`; the load pairs with the installing CAS, so the
        // value is fully written. SeqCst, as the CAS: the stats tables' overflow is found this
        // way by updates that must see every table a pick made (`InvokerState::left_set`).
        unsafe { self.value.load(Ordering::SeqCst).as_ref() }
    }

    /// The value, made by `init` if none is set. Threads that race here may each run `init`;
    /// the first to install its value wins and the others' values are dropped.
    pub(crate) fn get_or_init(&self, init: impl FnOnce() -> Box<T>) -> &T {
        if let Some(value) = self.get() {
            return value;
        }
        let fresh = Box::into_raw(init());
        match self.value.compare_exchange(
            ptr::null_mut(),
            fresh,
            Ordering::SeqCst,
            Ordering::SeqCst,
        ) {
            // SAFETY: `fresh` is now installed and lives until `drop`.
            Ok(_) => unsafe { &*fresh },
            Err(installed) => {
                // SAFETY: `fresh` was never shared: this thread still owns it.
                drop(unsafe { Box::from_raw(fresh) });
                // SAFETY: as in `get`: `installed` is non-null, installed by another thread.
                unsafe { &*installed }
            }
        }
    }
}

impl<T> Default for OnceBox<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Drop for OnceBox<T> {
    fn drop(&mut self) {
        let value = *self.value.get_mut();
        if !value.is_null() {
            // SAFETY: an installed value is a leaked `Box<T>` that nothing else frees.
            drop(unsafe { Box::from_raw(value) });
        }
    }
}

// SAFETY: shared access hands out `&T` to several threads (needs `T: Sync`), and the value may
// be built on one thread and dropped on another (needs `T: Send`), as with `OnceLock<Box<T>>`.
unsafe impl<T: Send + Sync> Sync for OnceBox<T> {}
// SAFETY: moving the `OnceBox` moves ownership of the boxed `T`.
unsafe impl<T: Send> Send for OnceBox<T> {}

#[cfg(test)]
mod tests {
    use super::OnceBox;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Barrier;

    /// Racing initialisers: every thread gets the one installed value, every value built is
    /// dropped exactly once (the losers' at once, the winner's with the box).
    #[test]
    fn racing_initialisers_agree_and_drop_every_loser() {
        static DROPS: AtomicUsize = AtomicUsize::new(0);
        struct Counted(usize);
        impl Drop for Counted {
            fn drop(&mut self) {
                DROPS.fetch_add(1, Ordering::Relaxed);
            }
        }
        let threads = 4;
        for _ in 0..50 {
            DROPS.store(0, Ordering::Relaxed);
            let built = AtomicUsize::new(0);
            let once = OnceBox::<Counted>::new();
            let barrier = Barrier::new(threads);
            let seen: Vec<usize> = std::thread::scope(|s| {
                let handles: Vec<_> = (0..threads)
                    .map(|t| {
                        let (once, barrier, built) = (&once, &barrier, &built);
                        s.spawn(move || {
                            barrier.wait();
                            once.get_or_init(|| {
                                built.fetch_add(1, Ordering::Relaxed);
                                Box::new(Counted(t))
                            })
                            .0
                        })
                    })
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            });
            assert!(seen.iter().all(|&v| v == seen[0]), "{seen:?}");
            assert_eq!(once.get().map(|c| c.0), Some(seen[0]));
            let built = built.load(Ordering::Relaxed);
            assert_eq!(
                DROPS.load(Ordering::Relaxed),
                built - 1,
                "the losers' values"
            );
            drop(once);
            assert_eq!(DROPS.load(Ordering::Relaxed), built, "and the winner's");
        }
    }

    #[test]
    fn an_unset_box_is_empty_and_drops_nothing() {
        let once = OnceBox::<String>::default();
        assert!(once.get().is_none());
        assert_eq!(once.get_or_init(|| Box::new("a".into())), "a");
        assert_eq!(once.get_or_init(|| Box::new("b".into())), "a");
    }
}
