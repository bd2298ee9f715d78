//! Per-thread scratch buffers that keep the general pick paths free of allocation.

use std::cell::RefCell;
use std::thread::LocalKey;

/// Runs `f` on this thread's buffer in `key`, or on a fresh one when the buffer is gone or in
/// use. Gone when a thread-exit hook calls the library (a pthread key destructor runs after the
/// thread locals are destroyed, where `LocalKey::with` would panic); in use never today (a
/// pick does not nest).
pub(crate) fn with_scratch<T: Default, R>(
    key: &'static LocalKey<RefCell<T>>,
    f: impl FnOnce(&mut T) -> R,
) -> R {
    let mut f = Some(f);
    let done = key.try_with(|cell| {
        let mut buffer = cell.try_borrow_mut().ok()?;
        f.take().map(|f| f(&mut buffer))
    });
    match (done, f) {
        (Ok(Some(result)), _) => result,
        (_, Some(f)) => f(&mut T::default()),
        (_, None) => unreachable!("f ran and returned its result"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        static BUFFER: RefCell<Vec<u32>> = const { RefCell::new(Vec::new()) };
    }

    #[test]
    fn the_threads_buffer_is_reused_and_a_busy_one_is_not_shared() {
        with_scratch(&BUFFER, |b| b.push(7));
        assert_eq!(with_scratch(&BUFFER, |b| b.clone()), [7]);
        // Nested: the buffer is borrowed, so the inner call gets a fresh one.
        let inner = with_scratch(&BUFFER, |_| with_scratch(&BUFFER, |b| b.len()));
        assert_eq!(inner, 0);
    }
}
