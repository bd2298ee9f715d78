//! Consumer-side slow start for the strategies beyond Dubbo (`slowstart.windowMs`).
//!
//! Dubbo's warm-up needs the provider's start time; when it is unknown (0), a provider that
//! joins is at full weight at once, and a load-aware strategy sees it with nothing in flight —
//! the classic flood of a new node. Slow start ramps the weight of an invoker that joins an
//! existing set from `slowstart.minWeightPercent` to 100 % over the window, as
//! `(elapsed / window)^(1 / aggression)` (Envoy's shape), on top of Dubbo's warm-up. Invokers of
//! the first set a balancer sees do not ramp (there is nothing to protect them from), nor does
//! an invoker once it is alone in the set.
//!
//! The ramp starts at the first pick after the update that added the invoker, a pick among a
//! single candidate (which skips the strategy) included (so it runs on the callers' timeline,
//! virtual or not), and is stamped in the invoker's state, which an update keeps.

use crate::balancer::{Member, Snapshot};
use crate::clock::{Clock, STEP_BACK_MS};
use crate::config::Config;
use std::fmt::Write as _;
use std::sync::atomic::{
    AtomicI64,
    Ordering::{Acquire, Relaxed, Release},
};

#[derive(Clone)]
pub(crate) struct SlowStart {
    window_ms: i64,
    min_fraction: f64,
    exponent: f64,
}

/// Per snapshot: until when some weight of the set ramps.
pub(crate) struct Ramp {
    /// `i64::MIN`: nobody ramps; `i64::MAX`: some joined invoker is not stamped yet.
    until_ms: AtomicI64,
}

const FIRST_SET: i64 = -1;
const UNSTAMPED: i64 = 0;

impl SlowStart {
    pub fn new(config: &Config) -> Option<SlowStart> {
        let c = &config.slow_start;
        (c.window_ms > 0).then(|| SlowStart {
            window_ms: c.window_ms,
            min_fraction: c.min_weight_percent as f64 / 100.0,
            exponent: 1.0 / c.aggression,
        })
    }

    /// Marks the invokers of a first set as exempt and computes the set's ramp. An invoker
    /// alone in its set is exempt too: it takes every call whatever its weight, and those
    /// picks skip the strategy, so no ramp would be stamped until another invoker joins; both
    /// would then ramp together, leaving the newcomer unprotected.
    pub fn prepare(&self, members: &[Member], previous: &Snapshot) -> Ramp {
        if previous.members.is_empty() || members.len() == 1 {
            for m in members {
                let _ = m
                    .state
                    .joined_ms
                    .compare_exchange(UNSTAMPED, FIRST_SET, Relaxed, Relaxed);
            }
        }
        let mut until = i64::MIN;
        for m in members {
            match m.state.joined_ms.load(Relaxed) {
                UNSTAMPED => until = i64::MAX,
                FIRST_SET => {}
                joined => until = until.max(joined.saturating_add(self.window_ms)),
            }
        }
        Ramp {
            until_ms: AtomicI64::new(until),
        }
    }

    /// Stats' `slow_start_percent`: the share of its weight the ramp leaves an invoker at
    /// `now_ms` (the stats' `effective_weight` is Dubbo's warm-up only). Absent without slow start.
    /// An invoker that joined and was not picked yet shows the ramp's lowest share, which its
    /// next pick starts from: 100 would read as "ramped" to an operator.
    pub fn stats_field(slow: Option<&SlowStart>, member: &Member, now_ms: i64, out: &mut String) {
        if let Some(slow) = slow {
            let waiting = member.state.joined_ms.load(Relaxed) == UNSTAMPED;
            let share = if waiting {
                slow.min_fraction
            } else {
                slow.factor(member, now_ms)
            };
            let percent = share * 100.0;
            let _ = write!(out, ",\"slow_start_percent\":{percent:.2}");
        }
    }

    /// Weight multiplier of an invoker at `now_ms`, in `[min, 1]`.
    pub fn factor(&self, member: &Member, now_ms: i64) -> f64 {
        let joined = member.state.joined_ms.load(Relaxed);
        if joined <= 0 {
            return 1.0;
        }
        let elapsed = now_ms.saturating_sub(joined);
        // A join more than a window (and `STEP_BACK_MS`) ahead was stamped before the clock
        // stepped back: its ramp cannot be placed, and it is not kept at the lowest weight for
        // as long as the step (`Ramp::active` marks it over for good).
        if elapsed >= self.window_ms || elapsed < -self.window_ms.saturating_add(STEP_BACK_MS) {
            return 1.0;
        }
        if elapsed <= 0 {
            return self.min_fraction;
        }
        let f = (elapsed as f64 / self.window_ms as f64).powf(self.exponent);
        f.max(self.min_fraction)
    }
}

impl Ramp {
    /// Starts the ramp of the invokers that joined, for a pick that does not go through the
    /// sampler (a single candidate): the ramp runs from the first pick after the update,
    /// whichever kind it is.
    pub fn stamp(
        slow: Option<&SlowStart>,
        ramp: Option<&Ramp>,
        snapshot: &Snapshot,
        clock: &Clock,
    ) {
        if let (Some(slow), Some(ramp)) = (slow, ramp) {
            ramp.active(slow, snapshot, clock);
        }
    }

    /// True while some weight of the set ramps at this call's time. The first pick after an
    /// update stamps the invokers that joined (once; O(n)).
    pub fn active(&self, slow: &SlowStart, snapshot: &Snapshot, clock: &Clock) -> bool {
        // Acquire: a ramp seen running must show the joined invokers' stamps made before it.
        let until = self.until_ms.load(Acquire);
        if until == i64::MIN {
            return false;
        }
        let now = clock.now_ms();
        if until != i64::MAX {
            if now >= until {
                return false;
            }
            // Ramps that end more than two windows (and `STEP_BACK_MS`) ahead began more than
            // a window ahead: the clock stepped back since (see `factor`).
            let ahead = slow
                .window_ms
                .saturating_mul(2)
                .saturating_add(STEP_BACK_MS);
            if until.saturating_sub(now) <= ahead {
                return true;
            }
        }
        // The first pick after the update (some joined invoker is not stamped yet), or the
        // first after the clock stepped back: stamps the joins, ends for good the ramps that
        // began more than a window ahead (else they would start over, from the lowest weight,
        // when the clock caught up with them), and finds when the others end (an invoker that
        // joined after the step ramps).
        let mut until = i64::MIN;
        for m in snapshot.members.iter() {
            let joined =
                match m
                    .state
                    .joined_ms
                    .compare_exchange(UNSTAMPED, now.max(1), Relaxed, Relaxed)
                {
                    Ok(_) => now.max(1),
                    Err(j) => j,
                };
            if joined == FIRST_SET {
                continue;
            }
            if joined.saturating_sub(now) > slow.window_ms.saturating_add(STEP_BACK_MS) {
                let _ = m
                    .state
                    .joined_ms
                    .compare_exchange(joined, FIRST_SET, Relaxed, Relaxed);
                continue;
            }
            until = until.max(joined.saturating_add(slow.window_ms));
        }
        self.until_ms.store(until, Release);
        now < until
    }
}

#[cfg(test)]
mod weak_memory {
    use super::*;
    use crate::strategy::Weights;
    use crate::{Balancer, Invoker};

    /// One thread's pick stamps the invoker that joined and publishes the ramp's end; another
    /// thread that finds the ramp running must price that invoker on the ramp, not at full
    /// weight. Fails only under a weak memory model (scripts/miri.sh: 10 of 32 schedules
    /// failed with the ramp's end stored `Relaxed`).
    #[test]
    fn a_ramp_seen_running_shows_the_joined_invokers_stamp() {
        let text = "loadbalance=p2c&slowstart.windowMs=60000";
        let config = Config::parse(text).unwrap();
        let b = Balancer::new(text).unwrap();
        b.update(&[Invoker::new(1, "10.0.0.1:1")]).unwrap();
        b.update(&[Invoker::new(1, "10.0.0.1:1"), Invoker::new(2, "10.0.0.2:1")])
            .unwrap();
        let snap = b.snapshot_for_tests();
        let ramp = Weights::of(&snap).unwrap().ramp.as_ref().unwrap();
        let slow = SlowStart::new(&config).unwrap();
        let now_us = 1_700_000_000_000_000;
        std::thread::scope(|s| {
            s.spawn(|| {
                ramp.active(&slow, &snap, &Clock::new(now_us));
            });
            while ramp.until_ms.load(Relaxed) == i64::MAX {
                std::thread::yield_now();
            }
            assert!(ramp.active(&slow, &snap, &Clock::new(now_us)));
            let f = slow.factor(&snap.members[1], now_us / 1000);
            assert!(
                f < 1.0,
                "the joined invoker at full weight while its ramp runs: {f}"
            );
        });
    }
}
