//! The words one strategy keeps per (invoker, method), in one shared space of [`CallStats`]:
//! adaptive's metrics and latency model (behind a one-byte lock), peakewma's estimate and
//! shortestresponse's window.

use super::CallStats;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64};

/// Words that one strategy keeps per (invoker, method). A balancer has one strategy, so
/// adaptive's metrics, peakewma's estimate and shortestresponse's window never live in the
/// same `CallStats` and share its space.
#[repr(C)]
pub(super) union StrategyWords {
    adaptive: std::mem::ManuallyDrop<AdaptiveWords>,
    ewma: std::mem::ManuallyDrop<EwmaCell>,
    window: std::mem::ManuallyDrop<ResponseWindow>,
}

// Initialised through the widest view, which has no padding: every byte of every view starts
// initialised, and zero (`all_strategy_words_start_at_zero`).
const _: () = assert!(
    std::mem::size_of::<StrategyWords>() == std::mem::size_of::<AdaptiveWords>()
        && std::mem::size_of::<AdaptiveWords>() == 56
);

impl Default for StrategyWords {
    fn default() -> Self {
        StrategyWords {
            adaptive: Default::default(),
        }
    }
}

/// adaptive's per-(invoker, method) state: Dubbo's AdaptiveMetrics, behind a one-byte lock.
/// (A `parking_lot::Mutex<LatencyModel>` is the same lock, but its padding would leave the
/// union two words wider and this struct a line longer.)
#[repr(C)]
pub struct AdaptiveWords {
    lock: parking_lot::RawMutex,
    /// A provider has reported metrics for this invoker and method (until then its load is 0
    /// whatever the model says, so picks need not lock it).
    pub has_provider_metrics: AtomicBool,
    /// Explicit, so that no byte of the union is padding.
    _reserved: [u8; 6],
    /// When the invoker was last picked (ms; 0 = not yet), Dubbo's pickTime.
    pub pick_time_ms: AtomicI64,
    model: std::cell::UnsafeCell<LatencyModel>,
}

// SAFETY: `model` is only reached through `ModelGuard`, which holds `lock`.
unsafe impl Sync for AdaptiveWords {}

impl Default for AdaptiveWords {
    fn default() -> Self {
        AdaptiveWords {
            lock: <parking_lot::RawMutex as parking_lot::lock_api::RawMutex>::INIT,
            has_provider_metrics: AtomicBool::new(false),
            _reserved: [0; 6],
            pick_time_ms: AtomicI64::new(0),
            model: Default::default(),
        }
    }
}

impl AdaptiveWords {
    /// The model, locked until the guard drops.
    pub fn model(&self) -> ModelGuard<'_> {
        parking_lot::lock_api::RawMutex::lock(&self.lock);
        ModelGuard(self)
    }
}

/// adaptive's model, locked.
pub struct ModelGuard<'a>(&'a AdaptiveWords);

impl std::ops::Deref for ModelGuard<'_> {
    type Target = LatencyModel;
    fn deref(&self) -> &LatencyModel {
        // SAFETY: this guard holds the lock.
        unsafe { &*self.0.model.get() }
    }
}

impl std::ops::DerefMut for ModelGuard<'_> {
    fn deref_mut(&mut self) -> &mut LatencyModel {
        // SAFETY: this guard holds the lock, and `&mut self` makes this the only reference.
        unsafe { &mut *self.0.model.get() }
    }
}

impl Drop for ModelGuard<'_> {
    fn drop(&mut self) {
        // SAFETY: the lock was taken by `AdaptiveWords::model` for this guard.
        unsafe { parking_lot::lock_api::RawMutex::unlock(&self.0.lock) };
    }
}

/// shortestresponse's per-(invoker, method) window: what Dubbo's RpcStatus counts less the
/// offsets its window keeps, in one word (see `strategy::shortest_response`).
#[derive(Default)]
#[repr(C)]
pub struct ResponseWindow {
    /// The window's successes and the sum of their latencies, truncated to whole ms per call
    /// (kept here, not read from the spread statistics: those would be many lines to sum for
    /// each candidate of every pick).
    pub successes: AtomicU64,
}

/// peakewma's per-(invoker, method) state: plain atomics, so that a pick reads it without a
/// lock. Times are the caller's `now_us` timeline (Unix µs); 0 = never.
#[derive(Default)]
#[repr(C)]
pub struct EwmaCell {
    /// Latency estimate in µs as `f64` bits; 0 = no sample yet.
    pub estimate_bits: AtomicU64,
    /// When the last sample was taken.
    pub sampled_us: AtomicI64,
    /// When the estimate last jumped up to a sample (a peak).
    pub peak_us: AtomicI64,
    /// When this invoker was last probed while it looked slow.
    pub probed_us: AtomicI64,
    /// Current wait between probes (doubles while probes find it still slow; 0 = not backing off).
    pub probe_gap_us: AtomicI64,
    /// Last sign of progress: a call ended, or the invoker went from idle to busy. While calls
    /// are in flight, the oldest of them is at least `now - progress_us` old.
    pub progress_us: AtomicI64,
    /// Successful reports (every 8th moves the method's typical estimate) in the low 63 bits;
    /// the top bit set once a success of a call sent after the first answer, a failure, or
    /// enough successes were seen (until then the estimate rests on answers that may have paid
    /// a connection's set-up). Here
    /// rather than read from the spread statistics, whose sum is a line per group of threads;
    /// written with a plain load and store, as a lost update under a race only shifts that
    /// cadence or lets one more early answer replace the estimate (never beyond the first few
    /// successes).
    pub successes: AtomicU64,
}

/// Latency/load model fields; each strategy documents which ones it uses.
#[derive(Default, Clone, Debug)]
pub struct LatencyModel {
    // Dubbo adaptive (AdaptiveMetrics), times in ms.
    pub provider_time_ms: i64,
    pub current_time_ms: i64,
    pub cpu_load: f64,
    pub last_latency_ms: i64,
    pub ewma: f64,
}

impl CallStats {
    /// adaptive's metrics (only an adaptive balancer calls this).
    #[inline]
    pub fn adaptive(&self) -> &AdaptiveWords {
        // SAFETY: every view of the union is valid for the zero bits it starts with (integer
        // atomics; a lock that is free at zero and plain numbers behind it), and a balancer's
        // one strategy only ever uses one view, so no view reads what another wrote.
        unsafe { &self.words.adaptive }
    }

    /// peakewma's estimate (only a peakewma balancer calls this).
    #[inline]
    pub fn ewma(&self) -> &EwmaCell {
        // SAFETY: as in `adaptive`.
        unsafe { &self.words.ewma }
    }

    /// shortestresponse's window (only a shortestresponse balancer calls this).
    #[inline]
    pub fn window(&self) -> &ResponseWindow {
        // SAFETY: as in `ewma`.
        unsafe { &self.words.window }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering::Relaxed;

    #[test]
    fn all_strategy_words_start_at_zero() {
        let s = CallStats::default();
        let e = s.ewma();
        for word in [
            &e.sampled_us,
            &e.peak_us,
            &e.probed_us,
            &e.probe_gap_us,
            &e.progress_us,
        ] {
            assert_eq!(word.load(Relaxed), 0);
        }
        assert_eq!(e.estimate_bits.load(Relaxed), 0);
        assert_eq!(e.successes.load(Relaxed), 0);
        assert_eq!(s.window().successes.load(Relaxed), 0);
        let a = s.adaptive();
        assert!(!a.has_provider_metrics.load(Relaxed));
        assert_eq!(a.pick_time_ms.load(Relaxed), 0);
        let m = a.model();
        assert_eq!(
            (m.provider_time_ms, m.current_time_ms, m.last_latency_ms),
            (0, 0, 0)
        );
        assert_eq!((m.cpu_load, m.ewma), (0.0, 0.0));
    }

    /// adaptive's model is behind a lock of its own making: updates from several threads at
    /// once are not lost.
    #[test]
    fn the_adaptive_model_lock_excludes() {
        let s = CallStats::default();
        let threads = 4;
        let rounds = 20_000;
        let start = std::sync::Barrier::new(threads);
        std::thread::scope(|scope| {
            for _ in 0..threads {
                scope.spawn(|| {
                    start.wait();
                    for _ in 0..rounds {
                        let mut m = s.adaptive().model();
                        // A read, then a write: without the lock, threads overwrite each other.
                        let seen = m.last_latency_ms;
                        m.last_latency_ms = std::hint::black_box(seen) + 1;
                    }
                });
            }
        });
        assert_eq!(
            s.adaptive().model().last_latency_ms,
            (threads * rounds) as i64
        );
    }
}
