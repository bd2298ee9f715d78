//! Time for one call: caller-driven (`now_us`) or read from a coarse clock at most once.

use std::cell::Cell;

/// The library's clock: `CLOCK_REALTIME_COARSE` costs a few ns where a precise wall-clock read
/// costs about 24 ns on these VMs, more than a whole pick. It advances once per kernel tick
/// (4 ms on most kernels; `clock_getres` gives it), which the strategies' rules over milliseconds
/// and seconds can bear (Dubbo's own clock is `currentTimeMillis`); a rule comparing times
/// within a tick must allow for it.
///
/// To use this clock, pass `now_us = 0`: a reading handed back as `now_us` counts as the
/// caller's own time, which the balancer takes as exact, so `peakewma` loses its allowance for
/// the tick.
// `as i64`: `time_t` and `c_long` are 32 bits wide on 32-bit Linux, 64 elsewhere.
#[allow(clippy::unnecessary_cast)]
pub fn wall_clock_us() -> i64 {
    #[cfg(target_os = "linux")]
    {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec.
        if unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut ts) } == 0 {
            return ts.tv_sec as i64 * 1_000_000 + ts.tv_nsec as i64 / 1000;
        }
    }
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

/// How coarsely [`wall_clock_us`] advances, in µs: the kernel's tick (4 ms at the common
/// HZ=250, 1 ms at 1000, 10 ms at 100); 0 where the precise clock stands in. A time read from
/// it lies behind the moment it marks, by more than a tick at times (2 to 6 ms with a 4 ms tick
/// on the VMs measured), but two readings lie apart by their true distance give or take about a
/// tick, while elapsed times a caller measures are precise. Read once per balancer (a system
/// call's worth), not per call.
#[allow(clippy::unnecessary_cast)] // as `wall_clock_us`
pub(crate) fn library_tick_us() -> i64 {
    #[cfg(target_os = "linux")]
    {
        let mut res = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        let mut ts = res;
        // SAFETY: `res` and `ts` are valid, writable timespecs.
        let coarse = unsafe {
            libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut ts) == 0
                && libc::clock_getres(libc::CLOCK_REALTIME_COARSE, &mut res) == 0
        };
        if coarse {
            return (res.tv_sec as i64)
                .saturating_mul(1_000_000)
                .saturating_add(res.tv_nsec as i64 / 1000);
        }
    }
    0
}

/// How far ahead of a call's time a time stamped in the state must lie to mean that the clock
/// stepped back since (an NTP step of the wall clock, or a caller's clock), rather than that
/// threads read the time a little apart (a call that read it just before another thread's
/// report, callers passing their own times). Added to every such rule's own span.
pub(crate) const STEP_BACK_MS: i64 = 1_000;

/// The time of one call, read lazily so that strategies which never look at it pay nothing.
pub(crate) struct Clock {
    now_us: Cell<i64>,
    /// The time is the library's clock (the caller passed 0), not the caller's own.
    library: bool,
}

impl Clock {
    /// `now_us == 0` means "read the library's clock when first needed".
    pub fn new(now_us: i64) -> Clock {
        Clock {
            now_us: Cell::new(now_us),
            library: now_us == 0,
        }
    }

    /// The library's clock at a given time, as a call would have read it.
    #[cfg(test)]
    pub fn library_at(now_us: i64) -> Clock {
        Clock {
            now_us: Cell::new(now_us),
            library: true,
        }
    }

    /// True when this call's time is the library's clock (which only moves forward, give or
    /// take a clock adjustment), not a time the caller passed.
    pub fn is_library(&self) -> bool {
        self.library
    }

    #[inline]
    pub fn now_us(&self) -> i64 {
        let t = self.now_us.get();
        if t != 0 {
            return t;
        }
        let t = wall_clock_us();
        self.now_us.set(t);
        t
    }

    #[inline]
    pub fn now_ms(&self) -> i64 {
        self.now_us().div_euclid(1000)
    }
}
