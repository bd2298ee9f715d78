//! The common picks over the whole set at configured weights: a pair drawn by weight (two
//! looks, unless a probe is due or the better of the two looks slow), and the full scan of
//! `peakewma.choices=0`. The strategy's `select` makes them, and so does the balancer's short
//! path ([`PeakEwma::whole_set_pick`]) without the general path or a context: the same
//! functions, so that both make the same draws and the same decisions.

use super::look::Moment;
use super::search::PairLooks;
use super::PeakEwma;
use crate::balancer::{Member, MethodState, Snapshot};
use crate::clock::Clock;
use crate::rng::Rng;
use crate::strategy::weighted::{Sampler, Weights};
use crate::strategy::Ctx;

/// The weight a pick over the whole set at configured weights compares: the configured one, 1
/// for everyone when all weigh 0 (Dubbo's rule), as the sampler weighs them.
#[inline(always)]
fn configured_weight(weights: &Weights, member: &Member) -> u64 {
    match weights.total() {
        0 => 1,
        _ => member.weight.max(0) as u64,
    }
}

impl PeakEwma {
    /// The pick of a pair over the whole set at configured weights (`ctx` is the whole set,
    /// `Sampler::exact_for` holds and two looks are the base).
    #[inline(always)]
    pub(super) fn pick_of_whole_pair(
        &self,
        ctx: &Ctx<'_>,
        weights: &Weights,
        at: &Moment,
    ) -> usize {
        let pair = weights.pair(&ctx.rng);
        self.pick_of_pair(
            ctx,
            weights,
            pair,
            // Always inline: left to the compiler it stayed a call, twice a pick (about 10
            // instructions a call).
            #[inline(always)]
            |m| configured_weight(weights, m),
            at,
        )
    }

    /// The balancer's short path: `select`'s pick over the whole of `snapshot` (at least two
    /// invokers, no filter narrowing it) when it is a common pick — two looks, or with `SCAN`
    /// a look at every invoker ([`PeakEwma::scans_whole_sets`]), at weights that do not depend
    /// on time (no warm-up, no slow-start ramp) — and None otherwise, before any draw, so that
    /// the general path then makes the same pick. The caller counts the call and runs
    /// `on_select`, as the general path does. The looks read the snapshot directly: a context
    /// (`Ctx`), built and read through memory, cost about 40 instructions a pick; only the
    /// rare escalation builds one. (`SCAN` is a parameter of its own so that the pair's path,
    /// without it, stays as short as it was.)
    #[inline(always)]
    pub(crate) fn whole_set_pick<const SCAN: bool>(
        &self,
        snapshot: &Snapshot,
        method: &MethodState,
        method_id: u32,
        clock: &Clock,
        rng: Rng<'_>,
    ) -> Option<usize> {
        let weights = snapshot.pair_weights.as_deref()?;
        let n = snapshot.members.len();
        debug_assert_eq!(self.looks_at_pairs(n), self.base(n) == 2);
        if SCAN && !self.looks_at_pairs(n) {
            return self.whole_set_scan(snapshot, method, method_id, weights, clock, rng);
        }
        if !self.looks_at_pairs(n)
            || !Sampler::configured_at(snapshot, weights, self.slow.as_ref(), clock)
        {
            return None;
        }
        let at = self.moment(clock, method);
        let pair = weights.pair(&rng);
        let looks = self.look_at_pair(
            &snapshot.members,
            method_id,
            n,
            pair,
            #[inline(always)]
            |m| configured_weight(weights, m),
            &at,
        );
        let pos = match looks {
            PairLooks::Pick(pos) => pos,
            PairLooks::Slow(first, second) => {
                let ctx = Ctx::whole_set(snapshot, method, method_id, clock, rng);
                self.escalate_pair(&ctx, weights, first, second, &at)
            }
        };
        Some(pos)
    }

    /// True when some pick of this configuration looks at every invoker of the whole set
    /// (`peakewma.choices=0`, or more choices than two, over a set no larger): the balancer
    /// then tries `whole_set_pick::<true>` instead of the pair's short path.
    pub(crate) fn scans_whole_sets(&self) -> bool {
        self.choices != 1 && self.choices != 2
    }

    /// `select`'s full scan of the whole set at configured weights (of more than two invokers)
    /// when that is the pick (every invoker looked at, weights that do not depend on time),
    /// else None: the first look drawn by weight (as the sampler's first draw: uniform when the
    /// weights are equal or all 0), then a probe it may claim, then every other invoker in set
    /// order; without the general path, its sampler and its dispatch: about 200 instructions
    /// less a pick.
    #[inline(always)]
    fn whole_set_scan(
        &self,
        snapshot: &Snapshot,
        method: &MethodState,
        method_id: u32,
        weights: &Weights,
        clock: &Clock,
        rng: Rng<'_>,
    ) -> Option<usize> {
        let members = &snapshot.members;
        let n = members.len();
        if self.base(n) < n || !Sampler::configured_at(snapshot, weights, self.slow.as_ref(), clock)
        {
            return None;
        }
        let at = self.moment(clock, method);
        let first = weights.first_draw(&rng);
        let member = &members[first];
        let look = self.look_at(
            member,
            method_id,
            first,
            configured_weight(weights, member),
            &at,
        );
        if self.claim_probe_in(members, method_id, &look, at.now_us, at.typical) {
            return Some(first);
        }
        Some(self.scan_whole_set(
            members,
            method_id,
            look,
            #[inline(always)]
            |m| configured_weight(weights, m),
            &at,
            &rng,
        ))
    }
}
