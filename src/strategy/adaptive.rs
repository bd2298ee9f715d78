//! `adaptive`: power of two choices by Dubbo's provider-load formula (AdaptiveLoadBalance).
//!
//! Load = cpuLoad · (√ewma + 1) · (inflight + 1) / (successRatio · weight + 1). Until a provider
//! reports metrics its cpuLoad is 0, so every load is 0, every comparison ties and the choice
//! falls back to a weighted coin between the two candidates: the same degradation as Dubbo.
//!
//! Calls picked among a single candidate skip the strategy and are counted apart (see
//! `stats::BYPASS`): as in Dubbo, the formula's requests, successes and calls in flight are those
//! of the strategy's own picks.

use super::json_number::json_f64;
use super::{Ctx, StatsAt, Strategy, StrategyKind};
use crate::balancer::Snapshot;
use crate::config::Config;
use crate::error::Status;
use crate::rng::Rng;
use crate::stats::{CallStats, LatencyModel};
use std::fmt::Write as _;
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
}

/// Dubbo's AdaptiveMetrics.getLoad, including its side effects: the latency estimate decays
/// (halving per elapsed timeout) each time it is evaluated, and the first evaluation after a
/// provider report applies a 2×timeout penalty.
#[inline(always)]
fn load(timeout: i32, stats: &CallStats, now: i64, weight: i32) -> f64 {
    let pick_time = touch_pick_time(stats, now);
    if !stats.adaptive().has_provider_metrics.load(Acquire) {
        // cpuLoad is 0 and there is nothing to decay: Dubbo's load is 0.
        return 0.0;
    }
    load_reported(timeout, stats, pick_time, now, weight)
}

/// `load` once a provider has reported: its formula, and the model decayed. Out of line: a
/// leaf, it saves few registers, where inlined twice into a pick it made the pick's own spill
/// (about 37 instructions a pick more).
#[inline(never)]
fn load_reported(timeout: i32, stats: &CallStats, pick_time: i64, now: i64, weight: i32) -> f64 {
    let words = stats.adaptive();
    let mut model = words.model();
    let (load, decayed) = load_of(&mut model, timeout, stats, pick_time, now, weight);
    if decayed {
        words.store_decay(&model);
    }
    load
}

/// The load a pick at `now` would compute, and the model it would read, without the pick's
/// side effects (for stats): `None` before the provider's first metrics (load 0).
pub(crate) fn load_seen(
    timeout: i32,
    stats: &CallStats,
    now: i64,
    weight: i32,
) -> Option<(LatencyModel, f64)> {
    // A pick stamps an unset pick time with its own time before reading it.
    let pick_time = match stats.adaptive().pick_time_ms.load(Relaxed) {
        0 => now,
        t => t,
    };
    if !stats.adaptive().has_provider_metrics.load(Acquire) {
        return None;
    }
    let model = stats.adaptive().model();
    let (load, _) = load_of(&mut model.clone(), timeout, stats, pick_time, now, weight);
    Some((model, load))
}

/// getLoad once provider metrics exist: decays (or penalises) `m` as Dubbo does, then weighs;
/// true beside the load when `m` was decayed.
#[inline(always)]
fn load_of(
    m: &mut LatencyModel,
    timeout: i32,
    stats: &CallStats,
    pick_time: i64,
    now: i64,
    weight: i32,
) -> (f64, bool) {
    // Not picked for two timeouts: load 0 forces a pick (Dubbo computes 2·timeout in 32 bits).
    if now.wrapping_sub(pick_time) > timeout.wrapping_mul(2) as i64 {
        return (0.0, false);
    }
    let mut decayed = false;
    if m.current_time_ms > 0 {
        // Java long arithmetic: a provider clock far ahead wraps, it must not panic (nor the
        // count plus one, i64::MAX when the difference wraps to it with `timeout=1`).
        let elapsed = now.wrapping_sub(m.current_time_ms);
        // Within a timeout of the last decay, as at every look at a busy invoker, the quotient
        // is 0: no 64-bit division (tens of cycles) on the pick's critical path.
        let multiple = if (0..timeout as i64).contains(&elapsed) {
            1
        } else {
            (elapsed / timeout as i64).wrapping_add(1)
        };
        if multiple > 0 {
            if m.provider_time_ms == m.current_time_ms {
                m.last_latency_ms = timeout as i64 * 2;
            } else {
                // Java masks a long shift count to its low six bits.
                m.last_latency_ms >>= multiple & 63;
            }
            m.ewma = 0.5 * m.ewma + 0.5 * m.last_latency_ms as f64;
            m.current_time_ms = now;
            decayed = true;
        }
    }
    // A cancelled call was never sent: it is no request the provider failed to answer (only
    // its in-flight count is undone), so it must not lower the success ratio.
    let requests = stats.selected_by_begin().saturating_sub(stats.cancelled()) as f64;
    let successes = stats.succeeded() as f64;
    let inflight = stats.active() as f64;
    let load = m.cpu_load * (m.ewma.sqrt() + 1.0) * (inflight + 1.0)
        / ((successes / (requests + 1.0)) * weight as f64 + 1.0);
    (load, decayed)
}

/// The lower load of positions `a` and `b` (with their weights); equal loads go to a weighted
/// coin. The pick's time is stamped on the chosen one (Dubbo's pickTime).
#[inline(always)]
fn choose_low_load(
    timeout_ms: i32,
    snapshot: &Snapshot,
    method_id: u32,
    rng: &Rng<'_>,
    now: i64,
    (a, wa): (usize, i32),
    (b, wb): (usize, i32),
) -> usize {
    let stats = |p: usize| snapshot.members[p].state.methods.get_or_insert(method_id);
    let (la, lb) = (
        load(timeout_ms, stats(a), now, wa),
        load(timeout_ms, stats(b), now, wb),
    );
    let chosen = if la.to_bits() == lb.to_bits() {
        let total = wa as i64 + wb as i64;
        if total > 0 {
            if (rng.below(total as u64) as i64) < wa as i64 {
                a
            } else {
                b
            }
        } else if rng.below(2) == 0 {
            a
        } else {
            b
        }
    } else if la > lb {
        b
    } else {
        a
    };
    stats(chosen).adaptive().pick_time_ms.store(now, Relaxed);
    chosen
}

/// Two distinct candidates drawn uniformly (the only two when there are two), as Dubbo draws
/// them.
#[inline(always)]
fn draw_pair(candidates: &[u32], rng: &Rng<'_>) -> (usize, usize) {
    if candidates.len() == 2 {
        return (candidates[0] as usize, candidates[1] as usize);
    }
    let n = candidates.len() as u64;
    let first = rng.below(n);
    let mut second = rng.below(n - 1);
    if second >= first {
        second += 1;
    }
    (
        candidates[first as usize] as usize,
        candidates[second as usize] as usize,
    )
}

/// The pick of a select at static weights among `positions` (two or more: the whole set, or
/// its local zone), without a [`Ctx`]: the balancer's short path, with the same draws as
/// [`Adaptive::select`].
#[inline(always)]
pub(crate) fn pick_among(
    timeout_ms: i32,
    snapshot: &Snapshot,
    positions: &[u32],
    method_id: u32,
    rng: &Rng<'_>,
    now: i64,
) -> usize {
    let (a, b) = draw_pair(positions, rng);
    let weight = |p: usize| snapshot.members[p].weight;
    choose_low_load(
        timeout_ms,
        snapshot,
        method_id,
        rng,
        now,
        (a, weight(a)),
        (b, weight(b)),
    )
}

impl Strategy for Adaptive {
    fn kind(&self) -> StrategyKind {
        StrategyKind::Adaptive
    }

    fn tracks_reports(&self) -> bool {
        false
    }

    fn method_stats_fields(
        &self,
        stats: Option<&CallStats>,
        weight: i32,
        at: &StatsAt<'_>,
        out: &mut String,
    ) {
        match stats.and_then(|s| load_seen(self.timeout_ms, s, at.now_ms, weight)) {
            Some((model, load)) => {
                let _ =
                    write!(out,
                ",\"provider_metrics\":true,\"cpu_load\":{},\"latency_ewma_ms\":{},\"load\":{}",
                json_f64(model.cpu_load),
                json_f64(model.ewma),
                json_f64(load)
            );
            }
            None => out.push_str(",\"provider_metrics\":false,\"load\":0"),
        }
    }

    fn select(&self, ctx: &Ctx<'_>) -> Result<usize, Status> {
        let (a, b) = draw_pair(ctx.candidates, &ctx.rng);
        Ok(choose_low_load(
            self.timeout_ms,
            ctx.snapshot,
            ctx.method_id,
            &ctx.rng,
            ctx.clock.now_ms(),
            (a, ctx.weight(a)),
            (b, ctx.weight(b)),
        ))
    }
}
