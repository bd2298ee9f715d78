//! `shortestresponse`: the lowest (window-average successful latency × (in flight + 1)),
//! weighted random among ties (Dubbo's ShortestResponseLoadBalance, 2.7.14+ with the window).

use super::{ties::least_by, Ctx, Report, Strategy, StrategyKind};
use crate::config::Config;
use crate::error::Status;
use crate::invoker::Outcome;
use crate::stats::CallStats;
use std::sync::atomic::{AtomicI64, Ordering::Relaxed};

pub(crate) struct ShortestResponse {
    slide_period_ms: i64,
}

/// When the method's current window started. Dubbo keeps one per balancer instance; polylb keeps
/// one per method, so a busy method's reset does not wipe a quiet one's only samples.
struct Window {
    started_ms: AtomicI64,
}

impl ShortestResponse {
    pub fn new(config: &Config) -> Self {
        ShortestResponse {
            slide_period_ms: config.slide_period_ms,
        }
    }
}

/// Average successful latency in the window (whole ms, integer division as Dubbo) × (active + 1).
/// An invoker with no success in the window estimates 0 and so wins: Dubbo's documented quirk.
fn estimate(stats: Option<&CallStats>) -> i64 {
    let Some(s) = stats else { return 0 };
    let w = s.window();
    let succeeded = w
        .succeeded_calls
        .load(Relaxed)
        .saturating_sub(w.window_succeeded.load(Relaxed));
    if succeeded == 0 {
        return 0;
    }
    let elapsed = w
        .succeeded_elapsed_ms
        .load(Relaxed)
        .saturating_sub(w.window_elapsed_ms.load(Relaxed));
    ((elapsed / succeeded) as i64).saturating_mul(s.active() + 1)
}

impl Strategy for ShortestResponse {
    fn kind(&self) -> StrategyKind {
        StrategyKind::ShortestResponse
    }

    fn select(&self, ctx: &Ctx<'_>) -> Result<usize, Status> {
        let window = ctx.method.ext(|| Window {
            started_ms: AtomicI64::new(ctx.clock.now_ms()),
        });
        let pos = least_by(ctx, |pos| estimate(ctx.stats(pos)));
        // A tumbling window, reset lazily after the pick (the triggering select still saw the
        // old window, as in Dubbo). One thread wins the CAS and moves every window start.
        let now = ctx.clock.now_ms();
        let started = window.started_ms.load(Relaxed);
        if now.wrapping_sub(started) > self.slide_period_ms
            && window
                .started_ms
                .compare_exchange(started, now, Relaxed, Relaxed)
                .is_ok()
        {
            for m in ctx.snapshot.members.iter() {
                if let Some(s) = m.state.methods.get(ctx.method_id) {
                    let w = s.window();
                    w.window_succeeded
                        .store(w.succeeded_calls.load(Relaxed), Relaxed);
                    w.window_elapsed_ms
                        .store(w.succeeded_elapsed_ms.load(Relaxed), Relaxed);
                }
            }
        }
        Ok(pos)
    }

    fn on_report(&self, r: &Report<'_>) {
        if r.outcome == Outcome::Success {
            let w = r.stats.window();
            w.succeeded_calls.fetch_add(1, Relaxed);
            w.succeeded_elapsed_ms
                .fetch_add((r.elapsed_us / 1000) as u64, Relaxed);
        }
    }
}
