//! The estimate's update on a report (peak EWMA with time decay, the failure penalty, recovery)
//! and the method's typical estimate it is measured against.

use super::{stamp_since_step, PeakEwma, SLOW, TIE};
use crate::balancer::MethodState;
use crate::invoker::Outcome;
use crate::strategy::Report;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

/// `1 - exp(-x)`, out of line: inline, the compiler computed `exp` on every report (it is
/// free of side effects, so it may be evaluated before the branches that need it).
#[inline(never)]
fn weight_of_long_step(x: f64) -> f64 {
    1.0 - (-x).exp()
}

/// Per method: the typical estimate (µs, `f64` bits; 0 = none yet), averaged over the estimates
/// of every invoker as calls end (so weighted by traffic). It is what "slow" and "cold" are
/// measured against, and of the same kind as the estimates (a peak EWMA of a high-variance
/// service sits near its recent maximum, well above a mean latency).
#[derive(Default)]
pub(super) struct Typical {
    bits: AtomicU64,
    /// Set by an early answer (see `SETTLED`) alone; the first success of a settled estimate
    /// replaces it.
    provisional: AtomicBool,
}

impl Typical {
    pub(super) fn get(method: &MethodState) -> f64 {
        method
            .ext_if_present::<Typical>()
            .map_or(0.0, |t| f64::from_bits(t.bits.load(Relaxed)))
    }
}

/// The top bit of [`EwmaCell::successes`](crate::stats::EwmaCell): the estimate no longer
/// rests on first answers alone (a success of a call sent after the first answer, a failure,
/// or [`EARLY_SUCCESSES`] successes have been seen).
const SETTLED: u64 = 1 << 63;
/// At most this many successes are early ones (see `update_estimate`).
const EARLY_SUCCESSES: u64 = 16;

impl PeakEwma {
    /// On a call's report: the invoker's estimate, its probe gap, and the method's typical
    /// estimate (the body of `on_report`).
    #[inline(always)]
    pub(super) fn update_estimate(&self, r: &Report<'_>) {
        let success = match r.outcome {
            Outcome::Success => true,
            Outcome::Failure | Outcome::Timeout => false,
            // Never sent: the invoker made no progress (a stalled one must keep its age).
            Outcome::Cancelled => return,
        };
        let cell = r.stats.ewma();
        let now = r.clock.now_us();
        if r.ended {
            cell.progress_us.store(now, Relaxed);
        }
        let elapsed = r.elapsed_us.max(1) as f64;
        let sample = if success {
            elapsed
        } else {
            elapsed.max(self.penalty_us)
        };
        let sent = now.saturating_sub(r.elapsed_us);
        let sampled = stamp_since_step(&cell.sampled_us, now, now);
        // A peak seen before the clock stepped back was seen before this call was sent.
        let peak = stamp_since_step(&cell.peak_us, now, sent);
        // Sent after the peak (or the first answer) was seen, as far as the clock can tell. The
        // library's clock lies up to a tick (4 ms on most kernels) before the moment it marks
        // while `elapsed` is precise, so a call shorter than a tick, sent after a report in the
        // same tick, read as sent before it: neither settled an estimate nor showed a recovery.
        // (A 1 ms provider whose second answer could not settle its estimate was settled by a
        // 29 ms spike after it, which became the method's typical latency; the spike was never
        // forgiven, and a 20 ms provider tied with both fast ones.)
        let after_peak = sent.saturating_add(self.slack_us(r.clock.is_library())) >= peak;
        // The first answers often pay a connection's set-up (or the client's own start-up),
        // and so may every call sent before the first answer came. Until a success of a call
        // sent after it settles the estimate, early successes keep the fastest of them, and the
        // settling one replaces it when faster, rather than being averaged in over a decay:
        // early answers are not a peak to forgive. A failure settles it at once (its penalty
        // must stand), and so does the EARLY_SUCCESSES-th success (a first answer stamped
        // later than the calls after it, by a clock that stepped back, must not keep it early).
        let counted = cell.successes.load(Relaxed);
        let early = success && counted & SETTLED == 0 && (counted & !SETTLED) < EARLY_SUCCESSES;
        let settles = early && ((peak != 0 && after_peak) || counted + 1 >= EARLY_SUCCESSES);
        let typical = r.method.ext(Typical::default);
        let typical_now = f64::from_bits(typical.bits.load(Relaxed));
        let mut old_bits = cell.estimate_bits.load(Relaxed);
        let (estimate, recovered) = loop {
            let old = f64::from_bits(old_bits);
            let (new, is_peak, recovered) = if old <= 0.0 {
                (sample, true, false)
            } else if early && !settles {
                (old.min(sample), false, false)
            } else if sample >= old {
                (sample, true, false)
            } else if settles {
                (sample, false, false)
            } else if success
                && after_peak
                && typical_now > 0.0
                && old > SLOW * typical_now
                && sample * TIE < old
            {
                // A slow-looking invoker answered a call sent after its peak was seen, clearly
                // faster: the cause is gone. Halfway there in log space (500 ms → 22 → 4.7 → 2.2
                // for 1 ms samples), and back to the typical estimate once no longer slow.
                let step = (old * sample).sqrt();
                let new = if step <= SLOW * typical_now {
                    typical_now.max(sample)
                } else {
                    step
                };
                (new, false, true)
            } else {
                // Weight of the new sample: 1 - exp(-Δt / decay) (series for small steps: the
                // common case at high rates, and cheaper than exp).
                let x = now.saturating_sub(sampled).max(0) as f64 / self.decay_us;
                let alpha = if x < 1e-3 {
                    x * (1.0 - 0.5 * x)
                } else {
                    weight_of_long_step(x)
                };
                (old + (sample - old) * alpha, false, false)
            };
            match cell.estimate_bits.compare_exchange_weak(
                old_bits,
                new.to_bits(),
                Relaxed,
                Relaxed,
            ) {
                Ok(_) => {
                    if is_peak {
                        cell.peak_us.store(now, Relaxed);
                    }
                    break (new, recovered);
                }
                Err(current) => old_bits = current,
            }
        };
        cell.sampled_us.store(now, Relaxed);
        // Probes back off only while they find no improvement; an invoker that fails is not
        // retried before the failure penalty has passed, then twice as late each time. (The
        // doubling is the probe's claim's: doubled here too, a failed probe's wait grew 4x.)
        if recovered && cell.probe_gap_us.load(Relaxed) != 0 {
            cell.probe_gap_us.store(0, Relaxed);
        } else if !success {
            let gap = cell.probe_gap_us.load(Relaxed);
            let longer = gap
                .max(self.penalty_us as i64)
                .clamp(self.probe_min_us, self.probe_max_us);
            if longer != gap {
                cell.probe_gap_us.store(longer, Relaxed);
            }
        }
        if success {
            // Every 8th success of an invoker moves the typical estimate 1/8 of the way: cheap,
            // and dominated by the invokers that take the traffic.
            let successes = (counted & !SETTLED).wrapping_add(1) & !SETTLED;
            let settled = if settles { SETTLED } else { counted & SETTLED };
            cell.successes.store(successes | settled, Relaxed);
            // An invoker's first success is an early answer for the typical estimate even when
            // failures settled its own estimate first: after a refused or reset connection it
            // pays a new connection's set-up. (Trusted, it made the typical estimate stand
            // there for minutes at a few calls per second, and invokers not yet tried, or
            // whose own first success paid it too, waited behind it.)
            let first = counted & !SETTLED == 0;
            if typical_now <= 0.0 {
                // The success's own latency: the estimate may hold an earlier failure's
                // penalty, which would make a failure the measure of "typical".
                typical.bits.store(sample.to_bits(), Relaxed);
                typical
                    .provisional
                    .store(first || (early && !settles), Relaxed);
            } else if (settles || !early) && !first && typical.provisional.load(Relaxed) {
                // Only an early answer set it, which may have paid a connection's set-up; it
                // prices every invoker not yet tried, which would wait for it to come down
                // (1/8 per 8 successes) behind invokers priced at their settled latency. The
                // first success of a settled estimate replaces it (a settling one, or any
                // later success once a failure settled the estimate: that never settles
                // again), but not an invoker's first success.
                typical.bits.store(sample.to_bits(), Relaxed);
                typical.provisional.store(false, Relaxed);
            } else if successes % 8 == 0 {
                typical.bits.store(
                    (typical_now + (estimate - typical_now) / 8.0).to_bits(),
                    Relaxed,
                );
            }
        } else if counted & SETTLED == 0 {
            cell.successes.store(counted | SETTLED, Relaxed);
        }
    }
}
