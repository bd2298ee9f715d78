//! `adaptive`: power of two choices by Dubbo's provider-load formula (AdaptiveLoadBalance).
//!
//! Load = cpuLoad · (√ewma + 1) · (inflight + 1) / (successRatio · weight + 1). Until a provider
//! reports metrics its cpuLoad is 0, so every load is 0, every comparison ties and the choice
//! falls back to a weighted coin between the two candidates: the same degradation as Dubbo.

use super::{Ctx, Strategy, StrategyKind};
use crate::config::Config;
use crate::error::Status;
use crate::stats::CallStats;
use std::sync::atomic::Ordering::{Acquire, Relaxed};

/// Dubbo's pickTime, initialised to the first time anyone looks at it; returns it.
pub(crate) fn touch_pick_time(stats: &CallStats, now_ms: i64) -> i64 {
    match stats.adaptive().pick_time_ms.load(Relaxed) {
        0 => {
            // A racing first look may win instead: both stamps are "now".
            let _ = stats
                .adaptive()
                .pick_time_ms
                .compare_exchange(0, now_ms, Relaxed, Relaxed);
            stats.adaptive().pick_time_ms.load(Relaxed)
        }
        t => t,
    }
}

pub(crate) struct Adaptive {
    timeout_ms: i32,
}

impl Adaptive {
    pub fn new(config: &Config) -> Self {
        Adaptive {
            timeout_ms: config.timeout_ms,
        }
    }

    /// Dubbo's AdaptiveMetrics.getLoad, including its side effects: the latency estimate decays
    /// (halving per elapsed timeout) each time it is evaluated, and the first evaluation after a
    /// provider report applies a 2×timeout penalty.
    fn load(&self, ctx: &Ctx<'_>, pos: usize, weight: i32) -> f64 {
        let stats = ctx.stats_or_insert(pos);
        let now = ctx.clock.now_ms();
        let pick_time = touch_pick_time(stats, now);
        if !stats.adaptive().has_provider_metrics.load(Acquire) {
            // cpuLoad is 0 and there is nothing to decay: Dubbo's load is 0.
            return 0.0;
        }
        let timeout = self.timeout_ms;
        let mut m = stats.adaptive().model();
        // Not picked for two timeouts: load 0 forces a pick (Dubbo computes 2·timeout in 32 bits).
        if now.wrapping_sub(pick_time) > timeout.wrapping_mul(2) as i64 {
            return 0.0;
        }
        if m.current_time_ms > 0 {
            // Java long arithmetic: a provider clock far ahead wraps, it must not panic.
            let multiple = now.wrapping_sub(m.current_time_ms) / timeout as i64 + 1;
            if multiple > 0 {
                if m.provider_time_ms == m.current_time_ms {
                    m.last_latency_ms = timeout as i64 * 2;
                } else {
                    // Java masks a long shift count to its low six bits.
                    m.last_latency_ms >>= multiple & 63;
                }
                m.ewma = 0.5 * m.ewma + 0.5 * m.last_latency_ms as f64;
                m.current_time_ms = now;
            }
        }
        let requests = stats.selected() as f64;
        let successes = stats.succeeded() as f64;
        let inflight = stats.active() as f64;
        m.cpu_load * (m.ewma.sqrt() + 1.0) * (inflight + 1.0)
            / ((successes / (requests + 1.0)) * weight as f64 + 1.0)
    }

    fn choose_low_load(&self, ctx: &Ctx<'_>, a: usize, b: usize) -> usize {
        let (wa, wb) = (ctx.weight(a), ctx.weight(b));
        let (la, lb) = (self.load(ctx, a, wa), self.load(ctx, b, wb));
        if la.to_bits() == lb.to_bits() {
            let total = wa as i64 + wb as i64;
            if total > 0 {
                return if (ctx.rng.below(total as u64) as i64) < wa as i64 {
                    a
                } else {
                    b
                };
            }
            return if ctx.rng.below(2) == 0 { a } else { b };
        }
        if la > lb {
            b
        } else {
            a
        }
    }
}

impl Strategy for Adaptive {
    fn kind(&self) -> StrategyKind {
        StrategyKind::Adaptive
    }

    fn tracks_reports(&self) -> bool {
        false
    }

    fn select(&self, ctx: &Ctx<'_>) -> Result<usize, Status> {
        let c = ctx.candidates;
        let (a, b) = if c.len() == 2 {
            (c[0], c[1])
        } else {
            let n = c.len() as u64;
            let first = ctx.rng.below(n);
            let mut second = ctx.rng.below(n - 1);
            if second >= first {
                second += 1;
            }
            (c[first as usize], c[second as usize])
        };
        let chosen = self.choose_low_load(ctx, a as usize, b as usize);
        ctx.stats_or_insert(chosen)
            .adaptive()
            .pick_time_ms
            .store(ctx.clock.now_ms(), Relaxed);
        Ok(chosen)
    }
}
