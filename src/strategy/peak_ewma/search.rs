//! The search for a pick: a pair drawn by weight, d draws, a full scan (on the stack or in a
//! thread-local buffer), and the escalation when the best of them still looks slow.

use super::field::{better, Entry, Field, Inline, Store, FIELD, SCAN_FIELD};
use super::look::{neutral_latency, Look, Moment};
use super::{PeakEwma, ESCALATION, SLOW, TIE};
use crate::balancer::Member;
use crate::rng::Rng;
use crate::scratch::with_scratch;
use crate::strategy::weighted::{Sampler, SubsetWeights, Weights, SCALE};
use crate::strategy::Ctx;
use std::cell::RefCell;

/// What the looks at a pair drawn by weight came to ([`PeakEwma::look_at_pair`]).
pub(super) enum PairLooks {
    /// The pick: a probe it claimed, or the better of the two, which does not look slow (or
    /// no other candidate is left).
    Pick(usize),
    /// The better of the two looks slow and other candidates are left: the search goes on
    /// from both looks (`escalate_pair`).
    Slow(Look, Look),
}

thread_local! {
    /// The looks of full scans wider than `SCAN_FIELD`, reused across picks.
    static WIDE_SCAN: RefCell<Vec<Entry>> = const { RefCell::new(Vec::new()) };
}

/// The candidates a full scan looks at after its first draw.
trait Rest {
    /// How many candidates the scan covers, the first included.
    fn len(&self) -> usize;
    /// Looks at each of them (as `by` prices them): Some(pos) when one takes a probe, else all
    /// join `field`.
    fn scan<S: Store>(&self, by: &PeakEwma, at: &Moment, field: &mut Field<S>) -> Option<usize>;
}

/// The rest of the whole set at configured weights, in set order.
struct SetRest<'m, W: Fn(&Member) -> u64> {
    members: &'m [Member],
    method_id: u32,
    /// The position drawn first.
    first: usize,
    w: W,
}

impl<W: Fn(&Member) -> u64> Rest for SetRest<'_, W> {
    fn len(&self) -> usize {
        self.members.len()
    }

    #[inline(always)]
    fn scan<S: Store>(&self, by: &PeakEwma, at: &Moment, field: &mut Field<S>) -> Option<usize> {
        by.scan_rest_of_set(self, at, field)
    }
}

/// The candidates of a context not drawn yet, in set order.
struct CandidateRest<'c, 's, 'a> {
    ctx: &'c Ctx<'a>,
    sampler: &'c Sampler<'s, 'a>,
}

impl Rest for CandidateRest<'_, '_, '_> {
    fn len(&self) -> usize {
        self.ctx.candidates.len()
    }

    #[inline(always)]
    fn scan<S: Store>(&self, by: &PeakEwma, at: &Moment, field: &mut Field<S>) -> Option<usize> {
        by.scan_rest(self.ctx, self.sampler, at, field)
    }
}

impl PeakEwma {
    /// Looks at one more candidate: Some(pos) when it takes a probe, else it joins the field.
    #[inline(always)]
    pub(super) fn consider<S: Store>(
        &self,
        ctx: &Ctx<'_>,
        pos: usize,
        weight: u64,
        at: &Moment,
        field: &mut Field<S>,
    ) -> Option<usize> {
        let look = self.look(ctx, pos, weight, at);
        if self.claim_probe(ctx, &look, at.now_us, at.typical) {
            return Some(pos);
        }
        field.push(look.entry(field.neutral));
        None
    }

    /// [`PeakEwma::scan_rest`] of a full scan over the whole set at configured weights, with
    /// one candidate (`first`) drawn: the members in order, without the candidate list, the
    /// sampler's bookkeeping or a second lookup of each member, and without a context (the
    /// balancer's short path has none). `w` weighs as the sampler would. (Folded into
    /// `scan_rest` behind `is_exact`, skipping with `was_drawn` instead of `first`, it cost
    /// 2–6 % more instructions per scan.)
    #[inline(always)]
    fn scan_rest_of_set<S: Store>(
        &self,
        set: &SetRest<'_, impl Fn(&Member) -> u64>,
        at: &Moment,
        field: &mut Field<S>,
    ) -> Option<usize> {
        for (p, member) in set.members.iter().enumerate() {
            if p == set.first {
                continue;
            }
            let weight = (set.w)(member);
            if weight == 0 {
                continue;
            }
            let look = self.look_at(member, set.method_id, p, weight, at);
            if self.claim_probe_in(set.members, set.method_id, &look, at.now_us, at.typical) {
                return Some(p);
            }
            field.push(look.entry(field.neutral));
        }
        None
    }

    /// Looks at every candidate not drawn yet (in set order).
    fn scan_rest<S: Store>(
        &self,
        ctx: &Ctx<'_>,
        sampler: &Sampler<'_, '_>,
        at: &Moment,
        field: &mut Field<S>,
    ) -> Option<usize> {
        for &p in ctx.candidates {
            let p = p as usize;
            if sampler.was_drawn(p) {
                continue;
            }
            // Zero only for an invoker that does not count (weight 0 among others).
            let weight = sampler.weight(p);
            if weight == 0 {
                continue;
            }
            if let Some(probe) = self.consider(ctx, p, weight, at, field) {
                return Some(probe);
            }
        }
        None
    }

    /// Every candidate (`first`, drawn by weight, and the rest in set order), each looked at
    /// once: into a field on the stack when the set fits one (`FIELD`, else `SCAN_FIELD`),
    /// else into this thread's reusable buffer.
    pub(super) fn scan_all(
        &self,
        ctx: &Ctx<'_>,
        sampler: &Sampler<'_, '_>,
        at: &Moment,
        first: Look,
    ) -> usize {
        if sampler.is_exact() {
            let set = SetRest {
                members: &ctx.snapshot.members,
                method_id: ctx.method_id,
                first: first.pos,
                w: |m: &Member| sampler.configured_weight(m),
            };
            return self.scan_with(&set, at, first, &ctx.rng);
        }
        self.scan_with(&CandidateRest { ctx, sampler }, at, first, &ctx.rng)
    }

    /// The full scan of the whole set at configured weights from its first draw (what
    /// `select` makes of it, through `scan_all`), without a context: the balancer's short
    /// path. `w` weighs as the sampler would. Out of line: inlined into the short path, in
    /// libpolylb.so, its looks called what they inline here.
    #[inline(never)]
    pub(super) fn scan_whole_set(
        &self,
        members: &[Member],
        method_id: u32,
        first: Look,
        w: impl Fn(&Member) -> u64,
        at: &Moment,
        rng: &Rng<'_>,
    ) -> usize {
        let set = SetRest {
            members,
            method_id,
            first: first.pos,
            w,
        };
        self.scan_with(&set, at, first, rng)
    }

    /// A full scan from `first`, the others as `rest` looks at them, into the field that fits
    /// their number.
    #[inline(always)]
    fn scan_with<R: Rest>(&self, rest: &R, at: &Moment, first: Look, rng: &Rng<'_>) -> usize {
        let n = rest.len();
        if n <= FIELD {
            self.scan_into(rest, at, first, Inline::<FIELD>::new(), rng)
        } else if n <= SCAN_FIELD {
            self.scan_into(rest, at, first, Inline::<SCAN_FIELD>::new(), rng)
        } else {
            self.scan_wide(rest, at, first, rng)
        }
    }

    /// A full scan into a field kept in `store`.
    #[inline(always)]
    fn scan_into<R: Rest, S: Store>(
        &self,
        rest: &R,
        at: &Moment,
        first: Look,
        store: S,
        rng: &Rng<'_>,
    ) -> usize {
        let mut field = Field::new(first, at.typical, store);
        rest.scan(self, at, &mut field)
            .unwrap_or_else(|| field.choose(rng).pos)
    }

    /// A full scan of a set wider than `SCAN_FIELD`, into this thread's buffer (it grows to
    /// the widest set scanned, then is reused: no allocation in steady state).
    #[inline(never)]
    fn scan_wide<R: Rest>(&self, rest: &R, at: &Moment, first: Look, rng: &Rng<'_>) -> usize {
        with_scratch(&WIDE_SCAN, |buffer| {
            buffer.clear();
            self.scan_into(rest, at, first, buffer, rng)
        })
    }

    /// The pick from a pair drawn by weight (`w` weighs as the sampler would), escalating when
    /// the better of the two looks slow.
    #[inline(always)]
    pub(super) fn pick_of_pair(
        &self,
        ctx: &Ctx<'_>,
        weights: &Weights,
        pair: (usize, Option<usize>),
        w: impl Fn(&Member) -> u64,
        at: &Moment,
    ) -> usize {
        let (members, k) = (&ctx.snapshot.members, ctx.candidates.len());
        match self.look_at_pair(members, ctx.method_id, k, pair, w, at) {
            PairLooks::Pick(pos) => pos,
            PairLooks::Slow(first, second) => self.escalate_pair(ctx, weights, first, second, at),
        }
    }

    /// The looks at a pair drawn by weight among `k` candidates of `members` (`w` weighs as
    /// the sampler would), for method `method_id`: what [`PeakEwma::pick_of_pair`] decides
    /// before it escalates, without a context (the balancer's short path has none).
    #[inline(always)]
    pub(super) fn look_at_pair(
        &self,
        members: &[Member],
        method_id: u32,
        k: usize,
        (i, j): (usize, Option<usize>),
        w: impl Fn(&Member) -> u64,
        at: &Moment,
    ) -> PairLooks {
        let (now, typical) = (at.now_us, at.typical);
        let member = &members[i];
        let first = self.look_at(member, method_id, i, w(member), at);
        if self.claim_probe_in(members, method_id, &first, now, typical) {
            return PairLooks::Pick(i);
        }
        // Only the first weighs anything: it is the pick.
        let Some(j) = j else {
            return PairLooks::Pick(i);
        };
        let member = &members[j];
        let second = self.look_at(member, method_id, j, w(member), at);
        if self.claim_probe_in(members, method_id, &second, now, typical) {
            return PairLooks::Pick(j);
        }
        // A pair needs no field: its fastest is one of the two.
        let neutral = neutral_latency(typical);
        let (a, b) = (first.entry(neutral), second.entry(neutral));
        let band = a.latency.min(b.latency) * TIE;
        let best = if better(&b, &a, band) { b } else { a };
        if !(typical > 0.0 && best.latency > SLOW * typical) || k == 2 {
            return PairLooks::Pick(best.pos);
        }
        PairLooks::Slow(first, second)
    }

    /// The better of a pair (`first`, `second`) looks slow: the escalation, with both drawn.
    /// Out of line: rare, and a pick that does not escalate pays nothing for it.
    #[inline(never)]
    pub(super) fn escalate_pair(
        &self,
        ctx: &Ctx<'_>,
        weights: &Weights,
        first: Look,
        second: Look,
        at: &Moment,
    ) -> usize {
        let mut sampler = Sampler::new(ctx, weights, self.slow.as_ref());
        sampler.mark(first.pos);
        sampler.mark(second.pos);
        let mut field = Field::new(first, at.typical, Inline::new());
        field.push(second.entry(field.neutral));
        self.escalate(ctx, &mut sampler, 2, at, field)
    }

    /// [`PeakEwma::pick_of_pair`] over a filter's subset at configured weights (not all zero),
    /// from its own table; weighed in fixed point, as the sampler weighs a subset.
    #[inline(never)]
    pub(super) fn pick_of_subset_pair(
        &self,
        ctx: &Ctx<'_>,
        weights: &Weights,
        subset: &SubsetWeights,
        at: &Moment,
    ) -> usize {
        let pair = subset.pair(ctx.candidates, &ctx.rng);
        let w = |m: &Member| m.weight.max(0) as u64 * SCALE;
        self.pick_of_pair(ctx, weights, pair, w, at)
    }

    /// The best of d looks slow: look further before settling for it (every other candidate
    /// when that is at most `ESCALATION` more, else up to `ESCALATION` more drawn by weight,
    /// until one does not look slow).
    pub(super) fn escalate(
        &self,
        ctx: &Ctx<'_>,
        sampler: &mut Sampler<'_, '_>,
        base: usize,
        at: &Moment,
        mut field: Field<Inline<FIELD>>,
    ) -> usize {
        if ctx.candidates.len() <= base + ESCALATION {
            return self
                .scan_rest(ctx, sampler, at, &mut field)
                .unwrap_or_else(|| field.choose(&ctx.rng).pos);
        }
        for _ in 0..ESCALATION {
            let Some(p) = sampler.draw() else { break };
            if let Some(p) = self.consider(ctx, p, sampler.weight(p), at, &mut field) {
                return p;
            }
            if field.fastest <= SLOW * at.typical {
                break;
            }
        }
        field.choose(&ctx.rng).pos
    }
}
