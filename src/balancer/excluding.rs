//! Inner's failover picks: a pick over the whole set but a few invokers already tried, drawn as
//! the short paths draw, without building the candidate list.

use super::select::active_in;
use super::{Inner, Snapshot};
use crate::clock::Clock;
use crate::error::Status;
use crate::rng::Rng;
use crate::strategy::{best_of_pair_excluding, Ctx, Weights, WholeSet, WholeSetDraw};
use std::cell::Cell;

/// Most invokers a failover's pick may exclude and still be drawn from the whole set (see
/// `Inner::select_drawn_excluding`); a retry has tried one or two.
pub(super) const MAX_DRAWN_EXCLUSIONS: usize = 4;
/// Draws that may land on excluded invokers before the general path decides.
const EXCLUSION_TRIES: usize = 16;

/// Where a short path counts its pick: the thread's counter id, and the report's hint when the
/// snapshot is the thread's cached one.
#[derive(Clone, Copy)]
struct Counted<'a> {
    counter: u32,
    hint: Option<&'a Cell<u32>>,
}

impl Inner {
    /// A failover's pick (the whole set but a few invokers already tried) by `random`,
    /// `leastactive` or `p2c`, as `select_drawn` makes it, the draws that land on an excluded
    /// invoker drawn again: a draw from the whole set's weights conditioned on the rest is a
    /// draw from the rest's weights, which is the strategy's pick over them (for `leastactive`
    /// its first-idle draws; `p2c` counts the excluded as drawn already, and its sampler skips
    /// them exactly). O(1) where building the candidate list is O(n). None (before counting
    /// anything) where that does not apply or the draws keep missing (the rest weighs little,
    /// or only leastactive's scan can decide): the general path then picks.
    ///
    /// Which path picks never depends on this thread's snapshot cache (a cold cache pins the
    /// snapshot the slow way), so a seeded balancer's failover picks repeat whatever other
    /// balancers this thread called; and a call with every invoker excluded draws nothing.
    #[inline(never)]
    pub(super) fn select_drawn_excluding(
        &self,
        method: u32,
        excluded: &[u64],
        now_us: i64,
    ) -> Option<Result<u64, Status>> {
        if !self.methods.is_known(method) {
            return None;
        }
        if let Some(filter) = &self.filter {
            if filter.restricts_now() {
                return None;
            }
        }
        match self.pin_cached() {
            Some(pin) => {
                let rng = self.rng.on(Some(pin.rng()));
                let counted = Counted {
                    counter: pin.counter(),
                    hint: Some(pin.hint),
                };
                self.drawn_excluding_in(pin.snapshot, counted, rng, method, excluded, now_us)
            }
            None => {
                let pinned = self.pin();
                let rng = self.rng.on(pinned.rng_state());
                let counted = Counted {
                    counter: pinned.counter,
                    hint: None,
                };
                self.drawn_excluding_in(pinned.get(), counted, rng, method, excluded, now_us)
            }
        }
    }

    /// `select_drawn_excluding` on a pinned snapshot.
    fn drawn_excluding_in(
        &self,
        snapshot: &Snapshot,
        counted: Counted<'_>,
        rng: Rng<'_>,
        method: u32,
        excluded: &[u64],
        now_us: i64,
    ) -> Option<Result<u64, Status>> {
        let n = snapshot.members.len();
        if n < 2 || snapshot.local.is_some() || !snapshot.weights_settled(now_us) {
            return None;
        }
        let mut out = [usize::MAX; MAX_DRAWN_EXCLUSIONS];
        for (slot, id) in out.iter_mut().zip(excluded) {
            *slot = snapshot.position(*id).unwrap_or(usize::MAX);
        }
        let distinct_out = (0..out.len())
            .filter(|&i| out[i] != usize::MAX && !out[..i].contains(&out[i]))
            .count();
        if distinct_out >= n {
            // Nothing left: the general path answers NoCandidate, without a draw.
            return None;
        }
        let prepared = snapshot.prepared.as_ref()?;
        if self.drawn_pair {
            // p2c: its sampler over the whole set, the excluded invokers counted as drawn
            // already, draws the pair from the rest exactly (as over the list of the rest).
            let clock = Clock::new(now_us);
            let ctx = Ctx::whole_set(snapshot, self.methods.get(method)?, method, &clock, rng);
            let weights = prepared.downcast_ref::<Weights>()?;
            let pos = best_of_pair_excluding(&ctx, weights, &out)?;
            return Some(Ok(self.count_select_in(snapshot, counted, pos, method)));
        }
        let whole = prepared.downcast_ref::<WholeSet>()?;
        let idle_draws = match self.whole_set_draw {
            WholeSetDraw::FirstIdle { draws } => Some(draws as usize),
            _ => None,
        };
        let mut busy = 0;
        for _ in 0..EXCLUSION_TRIES {
            let pos = whole.draw(n, &rng);
            if out.contains(&pos) {
                continue;
            }
            match idle_draws {
                Some(draws) if active_in(snapshot, pos, method) != 0 => {
                    busy += 1;
                    if busy == draws {
                        return None;
                    }
                }
                _ => return Some(Ok(self.count_select_in(snapshot, counted, pos, method))),
            }
        }
        None
    }

    /// Counts a short path's select on the counters of the invoker at `pos`, and keeps `pos` as
    /// the thread's hint for the report; returns the invoker's id.
    #[inline(always)]
    fn count_select_in(
        &self,
        snapshot: &Snapshot,
        counted: Counted<'_>,
        pos: usize,
        method: u32,
    ) -> u64 {
        let (member, ..) = self.begin_call(snapshot, counted.counter, counted.hint, pos, method);
        member.id
    }
}
