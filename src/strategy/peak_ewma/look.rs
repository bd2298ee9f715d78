//! What one candidate costs a pick now: its estimate (decayed towards the typical one when
//! nobody refreshes it), the age of its oldest call in flight, its preference rank and whether
//! a probe is due.

use super::{mix, stamp_since_step, PeakEwma, SLOW, STEP_BACK_US};
use crate::balancer::Member;
use crate::stats::CallStats;
use crate::strategy::Ctx;
use std::sync::atomic::{AtomicI64, Ordering::Relaxed};

/// One candidate as a pick sees it.
#[derive(Clone, Copy)]
pub(super) struct Look {
    pub(super) pos: usize,
    pub(super) active: i64,
    pub(super) weight: u64,
    /// The estimate (0 = no sample yet).
    estimate: f64,
    /// Lower bound on the age of the oldest call in flight (0 when none is).
    age: f64,
    /// Some(last probe time) when a probe is due: the value to claim it from.
    pub(super) probe: Option<i64>,
    /// This balancer's current preference between otherwise equal invokers (lower first).
    pub(super) rank: u64,
}

/// What a pick knows of its moment, the same for every candidate it looks at.
#[derive(Clone, Copy)]
pub(super) struct Moment {
    pub(super) now_us: i64,
    /// How much earlier than `now_us` the moment may be: the library clock's tick (0 for a
    /// caller's time). Ages are lower bounds: a call the coarse clock dates a tick back may
    /// have been sent just now.
    pub(super) slack_us: i64,
    /// The method's typical estimate (0 = none yet).
    pub(super) typical: f64,
    /// This period's preference salt (None: preferences off).
    pub(super) preference: Option<u64>,
}

impl Look {
    pub(super) fn latency(&self, neutral: f64) -> f64 {
        let e = if self.estimate > 0.0 {
            self.estimate
        } else {
            neutral
        };
        // Not `f64::max`: neither is NaN, and its NaN handling costs a full scan about three
        // instructions per candidate.
        if self.age > e {
            self.age
        } else {
            e
        }
    }
}

impl PeakEwma {
    #[inline(always)]
    pub(super) fn look(&self, ctx: &Ctx<'_>, pos: usize, weight: u64, at: &Moment) -> Look {
        self.look_at(ctx.member(pos), ctx.method_id, pos, weight, at)
    }

    /// [`PeakEwma::look`] at a member the caller already holds (`member` is at `pos`), for
    /// method `method_id`: no context to read them through (the short path has none).
    #[inline(always)]
    pub(super) fn look_at(
        &self,
        member: &Member,
        method_id: u32,
        pos: usize,
        weight: u64,
        at: &Moment,
    ) -> Look {
        let Moment {
            now_us,
            slack_us,
            typical,
            preference,
        } = *at;
        let mut look = Look {
            pos,
            active: 0,
            weight,
            estimate: 0.0,
            age: 0.0,
            probe: None,
            // The invoker's rank in this period's preference order (lower first); 0 for all
            // when preferences are off.
            rank: preference.map_or(0, |salt| mix(member.id ^ salt)),
        };
        let Some(stats) = member.state.methods.get(method_id) else {
            return look;
        };
        let cell = stats.ewma();
        look.active = stats.active();
        look.estimate = f64::from_bits(cell.estimate_bits.load(Relaxed));
        if typical > 0.0 && look.estimate > typical {
            let sampled = stamp_since_step(&cell.sampled_us, now_us, now_us);
            look.estimate = self.faded(look.estimate, typical, sampled, now_us);
        }
        if look.active > 0 {
            let progress = stamp_since_step(&cell.progress_us, now_us, now_us);
            if progress > 0 {
                look.age = now_us
                    .saturating_sub(progress)
                    .saturating_sub(slack_us)
                    .max(0) as f64;
            }
        } else if typical > 0.0 && look.estimate > SLOW * typical {
            // Idle and slow-looking: no ordinary pick would refresh its estimate.
            look.probe = self.probe_due(cell, typical, now_us);
        }
        look
    }
}

impl PeakEwma {
    /// An estimate above the typical one, last refreshed at `sampled_us`, as a pick at `now_us`
    /// uses it: one nobody refreshes decays towards the typical one, in log space (no
    /// information is not "fast", as a decay towards 0 would say, nor "still slow").
    #[inline(always)]
    fn faded(&self, estimate: f64, typical: f64, sampled_us: i64, now_us: i64) -> f64 {
        let age = now_us.saturating_sub(sampled_us);
        if age as f64 > self.decay_us / 16.0 {
            let keep = (-(age as f64) / self.decay_us).exp();
            return typical * (estimate / typical).powf(keep);
        }
        estimate
    }

    /// The latency a pick at `now_us` prices an (invoker, method) at, read as
    /// [`PeakEwma::look_at`] reads it but without writing (for stats): the larger of its
    /// estimate (faded; the typical one without a sample) and the age of its oldest call in
    /// flight; 0 when nothing is known.
    pub(super) fn price_now(
        &self,
        stats: &CallStats,
        typical: f64,
        now_us: i64,
        slack_us: i64,
    ) -> f64 {
        let cell = stats.ewma();
        let mut estimate = f64::from_bits(cell.estimate_bits.load(Relaxed));
        if typical > 0.0 && estimate > typical {
            estimate = self.faded(
                estimate,
                typical,
                stamp_read(&cell.sampled_us, now_us),
                now_us,
            );
        }
        if estimate <= 0.0 {
            estimate = typical;
        }
        let mut age = 0.0;
        if stats.active() > 0 {
            let progress = stamp_read(&cell.progress_us, now_us);
            if progress > 0 {
                age = now_us
                    .saturating_sub(progress)
                    .saturating_sub(slack_us)
                    .max(0) as f64;
            }
        }
        if age > estimate {
            age
        } else {
            estimate
        }
    }
}

/// A stamp as [`stamp_since_step`] reads it, without restamping one from before a step back
/// of the clock (it reads as `now_us`).
fn stamp_read(stamp: &AtomicI64, now_us: i64) -> i64 {
    let t = stamp.load(Relaxed);
    if t <= now_us.saturating_add(STEP_BACK_US) {
        t
    } else {
        now_us
    }
}

/// The latency of an invoker without a sample: the method's typical one. Before any success
/// there is none, and such an invoker counts as fast, ahead of any that has only failed.
pub(super) fn neutral_latency(typical: f64) -> f64 {
    if typical > 0.0 {
        typical
    } else {
        1.0
    }
}
