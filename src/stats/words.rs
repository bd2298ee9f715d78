//! The words one strategy keeps per (invoker, method), in one shared space of [`CallStats`]:
//! adaptive's metrics and latency model, peakewma's estimate and shortestresponse's window.

use super::CallStats;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering::Relaxed};

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

/// adaptive's per-(invoker, method) state: Dubbo's AdaptiveMetrics, one relaxed atomic per
/// field (f64s as their bits). No lock, as in Dubbo, whose fields are plain: a pick's decay and
/// a provider's report race there as here, and a race can only lose one decay step or one
/// report's penalty, never tear a number. (A one-byte lock around the model cost a pick four
/// locked instructions: 8 % of adaptive's select+report on one thread, 19 % on two.)
#[repr(C)]
pub struct AdaptiveWords {
    /// A provider has reported metrics for this invoker and method (until then its load is 0
    /// whatever the model says, so picks need not read it). Set after the model's fields.
    pub has_provider_metrics: AtomicBool,
    /// Explicit, so that no byte of the union is padding.
    _reserved: [u8; 7],
    /// When the invoker was last picked (ms; 0 = not yet), Dubbo's pickTime.
    pub pick_time_ms: AtomicI64,
    provider_time_ms: AtomicI64,
    current_time_ms: AtomicI64,
    cpu_load_bits: AtomicU64,
    last_latency_ms: AtomicI64,
    ewma_bits: AtomicU64,
}

impl Default for AdaptiveWords {
    fn default() -> Self {
        AdaptiveWords {
            has_provider_metrics: AtomicBool::new(false),
            _reserved: [0; 7],
            pick_time_ms: AtomicI64::new(0),
            provider_time_ms: AtomicI64::new(0),
            current_time_ms: AtomicI64::new(0),
            cpu_load_bits: AtomicU64::new(0),
            last_latency_ms: AtomicI64::new(0),
            ewma_bits: AtomicU64::new(0),
        }
    }
}

impl AdaptiveWords {
    /// The model as it reads now (each field as last written).
    #[inline]
    pub fn model(&self) -> LatencyModel {
        LatencyModel {
            provider_time_ms: self.provider_time_ms.load(Relaxed),
            current_time_ms: self.current_time_ms.load(Relaxed),
            cpu_load: f64::from_bits(self.cpu_load_bits.load(Relaxed)),
            last_latency_ms: self.last_latency_ms.load(Relaxed),
            ewma: f64::from_bits(self.ewma_bits.load(Relaxed)),
        }
    }

    /// Writes what a pick's decay changes: the latency, the estimate and the time it was
    /// decayed to.
    #[inline]
    pub fn store_decay(&self, m: &LatencyModel) {
        self.last_latency_ms.store(m.last_latency_ms, Relaxed);
        self.ewma_bits.store(m.ewma.to_bits(), Relaxed);
        self.current_time_ms.store(m.current_time_ms, Relaxed);
    }

    /// Writes a provider's report: the whole model.
    pub fn store_report(&self, m: &LatencyModel) {
        self.provider_time_ms.store(m.provider_time_ms, Relaxed);
        self.cpu_load_bits.store(m.cpu_load.to_bits(), Relaxed);
        self.store_decay(m);
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
        // SAFETY: every view of the union is valid for the zero bits it starts with (atomic
        // integers and a boolean), and a balancer's one strategy only ever uses one view, so no
        // view reads what another wrote.
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

    /// A report writes the whole model and reads back as written; a pick's decay writes its
    /// three fields and leaves the provider's time and load as reported.
    #[test]
    fn the_adaptive_model_reads_back_as_written() {
        let s = CallStats::default();
        let words = s.adaptive();
        let reported = LatencyModel {
            provider_time_ms: 1_700_000_000_123,
            current_time_ms: 1_700_000_000_123,
            cpu_load: 0.75,
            last_latency_ms: 42,
            ewma: 21.5,
        };
        words.store_report(&reported);
        let m = words.model();
        assert_eq!(
            (m.provider_time_ms, m.current_time_ms, m.last_latency_ms),
            (1_700_000_000_123, 1_700_000_000_123, 42)
        );
        assert_eq!((m.cpu_load, m.ewma), (0.75, 21.5));
        words.store_decay(&LatencyModel {
            provider_time_ms: 1,
            current_time_ms: 1_700_000_000_500,
            cpu_load: 9.0,
            last_latency_ms: 21,
            ewma: 21.25,
        });
        let m = words.model();
        assert_eq!(
            (m.provider_time_ms, m.current_time_ms, m.last_latency_ms),
            (1_700_000_000_123, 1_700_000_000_500, 21)
        );
        assert_eq!((m.cpu_load, m.ewma), (0.75, 21.25));
    }
}
