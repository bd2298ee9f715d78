//! `peakewma`: power of d choices over cost = peak-EWMA latency × (in flight + 1) / weight
//! (Finagle, linkerd, tower), with the textbook version's known weak spots designed out.
//!
//! The estimate (per invoker and method, lock-free atomics):
//! - **Peak EWMA with time decay.** A sample above the estimate replaces it at once (a peak);
//!   a lower one is averaged in with weight `1 - exp(-Δt / peakewma.decay)`, Δt being the time
//!   since the previous sample.
//! - **Failures are not fast.** A failed or timed-out call is recorded as at least
//!   `peakewma.failurePenalty` (1 s by default), so an invoker that answers errors in 1 ms looks
//!   slow, not fast; it is probed again only after the penalty (at most `peakewma.decay`), then
//!   twice as late each time it still fails.
//! - **Calls in flight for longer than the estimate count as slow.** While calls are in flight
//!   and none ends, the oldest of them is at least as old as the time since the invoker last made
//!   progress (a call it was sent ended, or it went from idle to busy); the effective latency is
//!   the larger of that age and the estimate. A stalled invoker looks slower every millisecond, before any
//!   of its calls returns — with one call in flight as well as with a hundred.
//! - **Cold start.** An invoker without a sample is priced at the method's typical estimate (an
//!   average of the invokers' estimates as successful calls end, so weighted by traffic), so it
//!   is neither flooded as "0 ms" nor shunned; with no sample anywhere, in flight / weight
//!   decides.
//!
//! The three weak spots of the textbook design, and what this one does instead:
//! 1. *Two slow invokers of four: best-of-2 picks the slow pair one time in six.* When the best
//!    of the d compared candidates still looks slow (effective latency above twice the typical
//!    one), the pick escalates: up to 8 more candidates by weight, or every candidate when that
//!    is at most 8 more, so a slow pair is never the end of the search while a fast invoker
//!    exists. A pick among healthy invokers still costs d looks.
//! 2. *With a 10 s decay, an invoker that stalled for 500 ms stays shunned for about 25 s.* The
//!    decay is tied to observed recovery: when an invoker that looks slow answers a call *sent
//!    after* its peak was observed, clearly faster than its estimate (beyond the 25 % band
//!    below), the cause is gone: the estimate moves halfway to the sample in log space (500 →
//!    22 → 4.7 ms for 1 ms samples), and back to the typical estimate as soon as it no longer
//!    looks slow. (Ordinary noise never triggers this: only an estimate above twice the
//!    typical one does, so a high-variance service keeps its textbook peak EWMA.) To see
//!    such calls at all, an invoker with nothing in flight that looks slow is probed: one call
//!    (claimed by one thread) once its last sample is older than twice the typical latency (at
//!    least decay / 1000, at most decay), so a stall that just ended is retried at once; the
//!    second probe waits as long again, and while probes find it still slow each later wait
//!    doubles (up to decay: g, g, 2g, 4g, ...), so a persistently slow invoker
//!    costs a few calls, not a steady share. A 500 ms stall is forgiven within tens of
//!    milliseconds of its end, not 25 s. An estimate nobody refreshes decays towards the
//!    typical one (its ratio to it shrinks in log space with the decay's time constant: a
//!    200× estimate is within 25 % after about 3.2 decays, a 2× one after about 1.1).
//! 3. *Many consumers, each with little in flight: in-flight signals vanish.* Latency signals
//!    are made to work alone: the in-flight age sees a stall with a single call in flight, the
//!    failure penalty sees errors, probes see recovery; and latencies within 25 % of the
//!    fastest candidate a pick compares count as equal, so that in flight and weight (not
//!    noise in the estimates) decide between equivalent invokers instead of every consumer
//!    herding onto the one that measured 1 % faster. (Measured from the fastest, not pairwise:
//!    see [`Field`].) With `peakewma.preferenceMs=P` (off by default), when even those are equal
//!    (same weight, same calls in flight — with many consumers nearly every pick), a
//!    preference order of this balancer's own decides instead of the draw: a ranking of the
//!    invokers by a hash of their id and a per-balancer salt, renewed every P ms. A consumer's
//!    calls then gather on its currently preferred invokers while they are free and spill to
//!    the next ones only when it has calls in flight there (a soft form of Finagle's
//!    aperture), so its own in-flight counts describe a larger part of those invokers' load;
//!    different consumers prefer different invokers, and the renewal spreads each consumer
//!    over the whole set. The price: a consumer making one call at a time sends them all to
//!    one invoker for P ms (harmless for latency, but not the binomial spread of the default).
//!    In the simulator's 50-consumer runs at 85 % load, with `peakewma.choices=0`, it cuts
//!    p99 by 2–10 % against drawn ties (docs/simulator.md).
//!
//! Weights: the first candidate is drawn in proportion to weight and kept unless a later one is
//! better. Between equivalent latencies, better means less loaded after this call relative to
//! weight (as `p2c`), so an idle cluster gets exactly the weights; otherwise the cost above
//! decides. Warm-up and slow start lower the weight, so a new invoker is not flooded.

use super::slow_start::{Ramp, SlowStart};
use super::weighted::{Sampler, SubsetWeights, Weights, SCALE};
use super::{Ctx, Prepared, PreparedData, Report, Strategy, StrategyKind};
use crate::balancer::{Member, MethodState, Snapshot};
use crate::clock::Clock;
use crate::config::Config;
use crate::error::Status;
use crate::invoker::Outcome;
use crate::rng::Rng;
use crate::scratch::with_scratch;
use crate::stats::{CallStats, EwmaCell};
use std::cell::RefCell;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// More candidates looked at when the best of the first d looks slow.
const ESCALATION: usize = 8;
/// Looks slow: effective latency above this multiple of the method's typical latency.
const SLOW: f64 = 2.0;
/// Latencies within this ratio are equivalent: load and weight decide.
const TIE: f64 = 1.25;

pub(crate) struct PeakEwma {
    /// 0 = every candidate.
    choices: usize,
    decay_us: f64,
    penalty_us: f64,
    probe_min_us: i64,
    probe_max_us: i64,
    slow: Option<SlowStart>,
    /// How long one preference order between otherwise equal invokers lasts, µs; 0 = none.
    preference_us: i64,
    /// This balancer's preference salt (from `seed` when set, else random).
    salt: u64,
}

/// A 64-bit mix (wyhash's), for preference ranks.
fn mix(s: u64) -> u64 {
    let t = (s as u128).wrapping_mul((s ^ 0xe703_7ed1_a0b4_28db) as u128);
    ((t >> 64) as u64) ^ (t as u64)
}

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
struct Typical {
    bits: AtomicU64,
}

impl Typical {
    fn get(method: &MethodState) -> f64 {
        method
            .ext_if_present::<Typical>()
            .map_or(0.0, |t| f64::from_bits(t.bits.load(Relaxed)))
    }
}

/// One candidate as a pick sees it.
#[derive(Clone, Copy)]
struct Look {
    pos: usize,
    active: i64,
    weight: u64,
    /// The estimate (0 = no sample yet).
    estimate: f64,
    /// Lower bound on the age of the oldest call in flight (0 when none is).
    age: f64,
    /// Some(last probe time) when a probe is due: the value to claim it from.
    probe: Option<i64>,
    /// This balancer's current preference between otherwise equal invokers (lower first).
    rank: u64,
}

/// What a pick knows of its moment, the same for every candidate it looks at.
#[derive(Clone, Copy)]
struct Moment {
    now_us: i64,
    /// The method's typical estimate (0 = none yet).
    typical: f64,
    /// This period's preference salt (None: preferences off).
    preference: Option<u64>,
}

impl Look {
    fn latency(&self, neutral: f64) -> f64 {
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
    pub fn new(config: &Config) -> Self {
        let decay_us = config.peakewma.decay_ms.saturating_mul(1000);
        PeakEwma {
            choices: config.peakewma.choices as usize,
            decay_us: decay_us as f64,
            penalty_us: config.peakewma.failure_penalty_ms as f64 * 1000.0,
            probe_min_us: (decay_us / 1000).max(1),
            probe_max_us: decay_us.max(1),
            slow: SlowStart::new(config),
            preference_us: config.peakewma.preference_ms.saturating_mul(1000),
            salt: match config.seed {
                Some(seed) => mix(seed ^ 0x5bd1_e995_a5a5_a5a5),
                None => crate::rng::fresh_seed(),
            },
        }
    }

    /// This balancer's preference salt for the current period (computed once per pick: a
    /// division and a mix); None when preferences are off.
    fn preference(&self, now_us: i64) -> Option<u64> {
        (self.preference_us > 0)
            .then(|| mix(self.salt ^ now_us.div_euclid(self.preference_us) as u64))
    }

    #[inline(always)]
    fn look(&self, ctx: &Ctx<'_>, pos: usize, weight: u64, at: &Moment) -> Look {
        self.look_at(ctx, ctx.member(pos), pos, weight, at)
    }

    /// [`PeakEwma::look`] at a member the caller already holds (`member` is at `pos`).
    #[inline(always)]
    fn look_at(
        &self,
        ctx: &Ctx<'_>,
        member: &Member,
        pos: usize,
        weight: u64,
        at: &Moment,
    ) -> Look {
        let Moment {
            now_us,
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
        let Some(stats) = member.state.methods.get(ctx.method_id) else {
            return look;
        };
        let cell = stats.ewma();
        look.active = stats.active();
        look.estimate = f64::from_bits(cell.estimate_bits.load(Relaxed));
        if typical > 0.0 && look.estimate > typical {
            // An estimate nobody refreshes decays towards the typical one, in log space (no
            // information is not "fast", as a decay towards 0 would say, nor "still slow").
            let age = now_us.saturating_sub(cell.sampled_us.load(Relaxed));
            if age as f64 > self.decay_us / 16.0 {
                let keep = (-(age as f64) / self.decay_us).exp();
                look.estimate = typical * (look.estimate / typical).powf(keep);
            }
        }
        if look.active > 0 {
            let progress = cell.progress_us.load(Relaxed);
            if progress > 0 {
                look.age = now_us.saturating_sub(progress).max(0) as f64;
            }
        } else if typical > 0.0 && look.estimate > SLOW * typical {
            // Idle and slow-looking: no ordinary pick would refresh its estimate.
            look.probe = self.probe_due(cell, typical, now_us);
        }
        look
    }

    /// The first wait before probing an invoker that looks slow: twice the typical latency
    /// (a stall that just ended is retried at once), clamped to [decay / 1000, decay].
    fn first_gap(&self, typical: f64) -> i64 {
        ((2.0 * typical) as i64).clamp(self.probe_min_us, self.probe_max_us)
    }

    /// An idle invoker that looks slow is probed once its last sample (or probe) is older than
    /// the current gap: twice the method's typical latency for the first two probes, then
    /// doubling at each claim while probes find it still slow (up to decay), back to the start
    /// when a sample shows recovery.
    fn probe_due(&self, cell: &EwmaCell, typical: f64, now_us: i64) -> Option<i64> {
        let probed = cell.probed_us.load(Relaxed);
        let last = cell.sampled_us.load(Relaxed).max(probed);
        let gap = match cell.probe_gap_us.load(Relaxed) {
            0 => self.first_gap(typical),
            g => g,
        };
        (now_us.saturating_sub(last) > gap).then_some(probed)
    }

    /// One thread wins the probe; the next one waits twice as long.
    #[inline]
    fn claim_probe(&self, ctx: &Ctx<'_>, look: &Look, now_us: i64, typical: f64) -> bool {
        // Almost every look has no probe due: decide that without a call.
        match look.probe {
            None => false,
            Some(probed) => self.claim_due_probe(ctx, look.pos, probed, now_us, typical),
        }
    }

    #[inline(never)]
    fn claim_due_probe(
        &self,
        ctx: &Ctx<'_>,
        pos: usize,
        probed: i64,
        now_us: i64,
        typical: f64,
    ) -> bool {
        let Some(stats) = ctx.stats(pos) else {
            return false;
        };
        let cell = stats.ewma();
        if cell
            .probed_us
            .compare_exchange(probed, now_us, Relaxed, Relaxed)
            .is_err()
        {
            return false;
        }
        let gap = match cell.probe_gap_us.load(Relaxed) {
            0 => self.first_gap(typical),
            g => (g.saturating_mul(2)).min(self.probe_max_us),
        };
        cell.probe_gap_us.store(gap, Relaxed);
        true
    }

    /// Looks at one more candidate: Some(pos) when it takes a probe, else it joins the field.
    #[inline(always)]
    fn consider<S: Store>(
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
    /// sampler's bookkeeping or a second lookup of each member. (Folded into `scan_rest` behind
    /// `is_exact`, skipping with `was_drawn` instead of `first`, it cost 2–6 % more instructions
    /// per scan.)
    #[inline(always)]
    fn scan_rest_of_set<S: Store>(
        &self,
        ctx: &Ctx<'_>,
        sampler: &Sampler<'_, '_>,
        first: usize,
        at: &Moment,
        field: &mut Field<S>,
    ) -> Option<usize> {
        for (p, member) in ctx.snapshot.members.iter().enumerate() {
            if p == first {
                continue;
            }
            let weight = sampler.configured_weight(member);
            if weight == 0 {
                continue;
            }
            let look = self.look_at(ctx, member, p, weight, at);
            if self.claim_probe(ctx, &look, at.now_us, at.typical) {
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
    fn scan_all(
        &self,
        ctx: &Ctx<'_>,
        sampler: &Sampler<'_, '_>,
        at: &Moment,
        first: Look,
    ) -> usize {
        let n = ctx.candidates.len();
        if n <= FIELD {
            self.scan_into(ctx, sampler, at, first, Inline::<FIELD>::new())
        } else if n <= SCAN_FIELD {
            self.scan_into(ctx, sampler, at, first, Inline::<SCAN_FIELD>::new())
        } else {
            self.scan_wide(ctx, sampler, at, first)
        }
    }

    /// `scan_all` into a field kept in `store`.
    #[inline(always)]
    fn scan_into<S: Store>(
        &self,
        ctx: &Ctx<'_>,
        sampler: &Sampler<'_, '_>,
        at: &Moment,
        first: Look,
        store: S,
    ) -> usize {
        let first_pos = first.pos;
        let mut field = Field::new(first, at.typical, store);
        let probe = if sampler.is_exact() {
            self.scan_rest_of_set(ctx, sampler, first_pos, at, &mut field)
        } else {
            self.scan_rest(ctx, sampler, at, &mut field)
        };
        probe.unwrap_or_else(|| field.choose(&ctx.rng).pos)
    }

    /// `scan_all` of a set wider than `SCAN_FIELD`, into this thread's buffer (it grows to the
    /// widest set scanned, then is reused: no allocation in steady state).
    #[inline(never)]
    fn scan_wide(
        &self,
        ctx: &Ctx<'_>,
        sampler: &Sampler<'_, '_>,
        at: &Moment,
        first: Look,
    ) -> usize {
        with_scratch(&WIDE_SCAN, |buffer| {
            buffer.clear();
            self.scan_into(ctx, sampler, at, first, buffer)
        })
    }

    /// The pick from a pair drawn by weight (`w` weighs as the sampler would), escalating when
    /// the better of the two looks slow.
    #[inline(always)]
    fn pick_of_pair(
        &self,
        ctx: &Ctx<'_>,
        weights: &Weights,
        (i, j): (usize, Option<usize>),
        w: impl Fn(usize) -> u64,
        at: &Moment,
    ) -> usize {
        let (now, typical) = (at.now_us, at.typical);
        let first = self.look(ctx, i, w(i), at);
        if self.claim_probe(ctx, &first, now, typical) {
            return i;
        }
        // Only the first weighs anything: it is the pick.
        let Some(j) = j else { return i };
        let second = self.look(ctx, j, w(j), at);
        if self.claim_probe(ctx, &second, now, typical) {
            return j;
        }
        // A pair needs no field: its fastest is one of the two.
        let neutral = neutral_latency(typical);
        let (a, b) = (first.entry(neutral), second.entry(neutral));
        let band = a.latency.min(b.latency) * TIE;
        let best = if better(&b, &a, band) { b } else { a };
        if !(typical > 0.0 && best.latency > SLOW * typical) || ctx.candidates.len() == 2 {
            return best.pos;
        }
        let mut sampler = Sampler::new(ctx, weights, self.slow.as_ref());
        sampler.mark(i);
        sampler.mark(j);
        let mut field = Field::new(first, typical, Inline::new());
        field.push(b);
        self.escalate(ctx, &mut sampler, 2, at, field)
    }

    /// [`PeakEwma::pick_of_pair`] over a filter's subset at configured weights (not all zero),
    /// from its own table; weighed in fixed point, as the sampler weighs a subset.
    #[inline(never)]
    fn pick_of_subset_pair(
        &self,
        ctx: &Ctx<'_>,
        weights: &Weights,
        subset: &SubsetWeights,
        at: &Moment,
    ) -> usize {
        let pair = subset.pair(ctx.candidates, &ctx.rng);
        let w = |p: usize| ctx.member(p).weight.max(0) as u64 * SCALE;
        self.pick_of_pair(ctx, weights, pair, w, at)
    }

    /// The best of d looks slow: look further before settling for it (every other candidate
    /// when that is at most `ESCALATION` more, else up to `ESCALATION` more drawn by weight,
    /// until one does not look slow).
    fn escalate(
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

/// The looks of one pick, compared once all are in: "equivalent latency" is measured from the
/// fastest of them, so it cannot drift. (Compared pairwise as they come, A ≈ B and B ≈ C let C
/// replace A although C is 1.25² × A, and in a scan in set order the last positions win such
/// chains: a full scan's share grew with an invoker's position in the set.)
struct Field<S: Store> {
    looks: S,
    /// The lowest latency seen.
    fastest: f64,
    /// The latency of an invoker without a sample.
    neutral: f64,
}

/// Looks a pick's field holds: the most a pick of `peakewma.choices` (at most 16) plus its
/// escalation compares.
const FIELD: usize = 16 + ESCALATION;
/// Looks a full scan's field holds on the stack (5 KB, left uninitialised); a wider set
/// goes to a thread-local buffer. (128 rather than 64: a scan of 100 into the buffer cost 8 %
/// more instructions.)
const SCAN_FIELD: usize = 128;

thread_local! {
    /// The looks of full scans wider than `SCAN_FIELD`, reused across picks.
    static WIDE_SCAN: RefCell<Vec<Entry>> = const { RefCell::new(Vec::new()) };
}

/// Where a field keeps its looks.
trait Store {
    fn push(&mut self, entry: Entry);
    fn as_slice(&self) -> &[Entry];
}

/// Up to N looks on the stack, not initialised until pushed (a pick pays for the looks it
/// takes, not for the capacity).
struct Inline<const N: usize> {
    entries: [MaybeUninit<Entry>; N],
    len: usize,
}

impl<const N: usize> Inline<N> {
    fn new() -> Self {
        Inline {
            entries: [const { MaybeUninit::uninit() }; N],
            len: 0,
        }
    }
}

impl<const N: usize> Store for Inline<N> {
    fn push(&mut self, entry: Entry) {
        // Never full: a pick gathers at most FIELD looks (`choices` ≤ 16, then ≤ ESCALATION
        // more), and `scan_all` takes an inline field only for a set that fits it.
        debug_assert!(self.len < N);
        if self.len < N {
            self.entries[self.len].write(entry);
            self.len += 1;
        }
    }

    fn as_slice(&self) -> &[Entry] {
        // SAFETY: the first `len` entries were written by `push`; `Entry` is `Copy`.
        unsafe { std::slice::from_raw_parts(self.entries.as_ptr().cast::<Entry>(), self.len) }
    }
}

impl Store for &mut Vec<Entry> {
    fn push(&mut self, entry: Entry) {
        Vec::push(self, entry);
    }

    fn as_slice(&self) -> &[Entry] {
        self
    }
}

/// What comparing one look needs, its latency settled (the neutral one without a sample).
#[derive(Clone, Copy)]
struct Entry {
    pos: usize,
    latency: f64,
    active: i64,
    weight: u64,
    rank: u64,
}

impl Look {
    fn entry(&self, neutral: f64) -> Entry {
        Entry {
            pos: self.pos,
            latency: self.latency(neutral),
            active: self.active,
            weight: self.weight,
            rank: self.rank,
        }
    }
}

impl<S: Store> Field<S> {
    /// A field whose first look (drawn by weight) is kept unless another is better.
    fn new(first: Look, typical: f64, mut looks: S) -> Self {
        let neutral = neutral_latency(typical);
        let first = first.entry(neutral);
        looks.push(first);
        Field {
            looks,
            fastest: first.latency,
            neutral,
        }
    }

    fn push(&mut self, entry: Entry) {
        if entry.latency < self.fastest {
            self.fastest = entry.latency;
        }
        self.looks.push(entry);
    }

    fn choose(&self, rng: &Rng<'_>) -> Entry {
        let band = self.fastest * TIE;
        let looks = self.looks.as_slice();
        let mut best = looks[0];
        for entry in &looks[1..] {
            if better(entry, &best, band) {
                best = *entry;
            }
        }
        // Rank 0: preferences are off (with them on, ranks differ and already decide ties).
        if best.pos != looks[0].pos && best.latency <= band && best.rank == 0 {
            return draw_among_ties(looks, best, band, rng);
        }
        best
    }
}

/// The pick once the first look lost to `best`, an equivalent latency: one of the looks tied
/// with it (latency within `band`, the same calls in flight relative to weight, the same
/// preference rank) that, like it, are better than the first, drawn in proportion to weight (a
/// weighted reservoir of one). A full scan's looks are in set order and `choose` keeps the
/// first of such ties, so without this draw the first idle invoker after a busy or slow one in
/// set order took every call that one lost (with many consumers each holding a call or two,
/// about a double share). Out of line: a pick whose first look stands pays one comparison.
#[inline(never)]
fn draw_among_ties(looks: &[Entry], best: Entry, band: f64, rng: &Rng<'_>) -> Entry {
    let first = &looks[0];
    let (mut pick, mut tied) = (best, 0u64);
    for c in &looks[1..] {
        let same_load =
            c.active as u128 * best.weight as u128 == best.active as u128 * c.weight as u128;
        if c.weight == 0
            || c.latency > band
            || !same_load
            || c.rank != best.rank
            || !better(c, first, band)
        {
            continue;
        }
        tied += c.weight;
        if tied == c.weight || rng.below(tied) < c.weight {
            pick = *c;
        }
    }
    pick
}

/// The latency of an invoker without a sample: the method's typical one. Before any success
/// there is none, and such an invoker counts as fast, ahead of any that has only failed.
fn neutral_latency(typical: f64) -> f64 {
    if typical > 0.0 {
        typical
    } else {
        1.0
    }
}

/// True when challenger `c` should replace incumbent `i`, latencies up to `band` counting as
/// equivalent (in a pick, TIE × the fastest latency it saw).
#[inline(always)]
fn better(c: &Entry, i: &Entry, band: f64) -> bool {
    let (lc, li) = (c.latency, i.latency);
    if lc <= band && li <= band {
        // Equivalent latencies: less loaded after this call, relative to weight (p2c); at equal
        // load and weight, this balancer's preference.
        return fewer_after_call(c, i)
            || (c.active == i.active && c.weight == i.weight && c.rank < i.rank);
    }
    lc * (c.active as f64 + 1.0) * (i.weight as f64)
        < li * (i.active as f64 + 1.0) * (c.weight as f64)
}

/// (c's calls in flight + 1) / c's weight ≤ i's calls in flight / i's weight, cross-multiplied:
/// in u64 when neither product overflows (always, short of millions of unreported calls at
/// the largest weights), else exactly in u128.
#[inline(always)]
fn fewer_after_call(c: &Entry, i: &Entry) -> bool {
    // Calls in flight are never negative (`CallStats::active` clamps at 0).
    let (ca, ia) = (c.active as u64, i.active as u64);
    match ((ca + 1).checked_mul(i.weight), ia.checked_mul(c.weight)) {
        (Some(left), Some(right)) => left <= right,
        _ => (ca as u128 + 1) * i.weight as u128 <= ia as u128 * c.weight as u128,
    }
}

impl Strategy for PeakEwma {
    fn kind(&self) -> StrategyKind {
        StrategyKind::PeakEwma
    }

    fn prepare(&self, members: &[Member], previous: &Snapshot) -> Prepared {
        Some(PreparedData::new(Weights::new(
            members,
            previous,
            self.slow.as_ref(),
        )))
    }

    fn select(&self, ctx: &Ctx<'_>) -> Result<usize, Status> {
        let weights = Weights::of(ctx.snapshot)?;
        let now = ctx.clock.now_us();
        let typical = Typical::get(ctx.method);
        let at = Moment {
            now_us: now,
            typical,
            preference: self.preference(now),
        };
        let k = ctx.candidates.len();
        let base = if self.choices == 0 {
            k
        } else {
            self.choices.min(k)
        };
        let slow = self.slow.as_ref();
        if base == 2 {
            if Sampler::exact_for(ctx, weights, slow) {
                // The common pick: the whole set at its configured weights, a pair.
                let w = |p: usize| match weights.total() {
                    0 => 1,
                    _ => ctx.member(p).weight.max(0) as u64,
                };
                return Ok(self.pick_of_pair(ctx, weights, weights.pair(&ctx.rng), w, &at));
            }
            if let Some(subset) = ctx.subset {
                if subset.total() > 0 && Sampler::configured_for(ctx, weights, slow) {
                    return Ok(self.pick_of_subset_pair(ctx, weights, subset, &at));
                }
            }
        }
        let mut sampler = Sampler::new(ctx, weights, slow);
        let Some(first) = sampler.draw() else {
            return Ok(ctx.candidates[0] as usize);
        };
        let look = self.look(ctx, first, sampler.weight(first), &at);
        if self.claim_probe(ctx, &look, now, typical) {
            return Ok(first);
        }
        if base >= k {
            return Ok(self.scan_all(ctx, &sampler, &at, look));
        }
        let mut field = Field::new(look, typical, Inline::<FIELD>::new());
        for _ in 1..base {
            let Some(p) = sampler.draw() else { break };
            if let Some(p) = self.consider(ctx, p, sampler.weight(p), &at, &mut field) {
                return Ok(p);
            }
        }
        let best = field.choose(&ctx.rng);
        if typical > 0.0 && best.latency > SLOW * typical {
            return Ok(self.escalate(ctx, &mut sampler, base, &at, field));
        }
        Ok(best.pos)
    }

    fn tracks_selects(&self) -> bool {
        true
    }

    fn sees_single_picks(&self) -> bool {
        self.slow.is_some()
    }

    fn single_pick(&self, snapshot: &Snapshot, clock: &Clock) {
        if let Ok(weights) = Weights::of(snapshot) {
            Ramp::stamp(self.slow.as_ref(), weights.ramp.as_ref(), snapshot, clock);
        }
    }

    fn on_select(
        &self,
        _method: &MethodState,
        _method_id: u32,
        stats: &CallStats,
        selected_before: u64,
        clock: &Clock,
    ) {
        // Idle to busy: the age of the oldest call in flight counts from now.
        if stats.was_idle(selected_before) {
            stats.ewma().progress_us.store(clock.now_us(), Relaxed);
        }
    }

    fn on_report(&self, r: &Report<'_>) {
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
        let sampled = cell.sampled_us.load(Relaxed);
        let peak = cell.peak_us.load(Relaxed);
        let sent = now.saturating_sub(r.elapsed_us);
        let typical = r.method.ext(Typical::default);
        let typical_now = f64::from_bits(typical.bits.load(Relaxed));
        let mut old_bits = cell.estimate_bits.load(Relaxed);
        let (estimate, recovered) = loop {
            let old = f64::from_bits(old_bits);
            let (new, is_peak, recovered) = if old <= 0.0 || sample >= old {
                (sample, true, false)
            } else if success
                && sent >= peak
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
            let successes = cell.successes.load(Relaxed).wrapping_add(1);
            cell.successes.store(successes, Relaxed);
            if typical_now <= 0.0 {
                // The success's own latency: the estimate may hold an earlier failure's
                // penalty, which would make a failure the measure of "typical".
                typical.bits.store(sample.to_bits(), Relaxed);
            } else if successes % 8 == 0 {
                typical.bits.store(
                    (typical_now + (estimate - typical_now) / 8.0).to_bits(),
                    Relaxed,
                );
            }
        }
    }

    fn stats_fields(&self, member: &Member, now_ms: i64, out: &mut String) {
        let estimate = member
            .state
            .methods
            .iter()
            .map(|(_, s)| f64::from_bits(s.ewma().estimate_bits.load(Relaxed)))
            .fold(0.0f64, f64::max);
        out.push_str(&format!(
            ",\"latency_estimate_us\":{}",
            estimate.round() as i64
        ));
        SlowStart::stats_field(self.slow.as_ref(), member, now_ms, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(active: i64, weight: u64) -> Entry {
        Entry {
            pos: 0,
            latency: 1.0,
            active,
            weight,
            rank: 0,
        }
    }

    /// Two selects of an idle invoker, both counted before either's `on_select` runs: the
    /// oldest call in flight is dated from then, not from the invoker's last progress (which
    /// made it look stalled for as long as it had been idle).
    #[test]
    fn two_selects_racing_on_an_idle_invoker_date_its_oldest_call_from_now() {
        let config = Config::parse("loadbalance=peakewma").unwrap();
        let strategy = PeakEwma::new(&config);
        let method = MethodState::default();
        let calls = crate::stats::MethodStats::default();
        let stats = calls.get_or_insert(0);
        let (idle_since, now) = (1_000, 5_000_000);
        stats.ewma().progress_us.store(idle_since, Relaxed);
        let first = stats.begin();
        let second = stats.begin();
        let clock = Clock::new(now);
        strategy.on_select(&method, 0, stats, first, &clock);
        strategy.on_select(&method, 0, stats, second, &clock);
        assert_eq!(stats.ewma().progress_us.load(Relaxed), now);
    }

    #[test]
    fn load_comparison_is_exact_past_u64_products() {
        // (c + 1) / wc <= i / wi, on both sides of equality, with products that fit u64 and
        // with products of about 2^71 (a weight of 2^31 in fixed point x 2^10, 2^30 calls).
        let big_weight = (i32::MAX as u64) << 10;
        let many = 1i64 << 30;
        for (c, i, expected) in [
            (entry(0, 100), entry(1, 100), true),
            (entry(1, 100), entry(1, 100), false),
            (entry(1, 200), entry(1, 100), true),
            (entry(2, 200), entry(1, 100), false),
            (entry(many - 1, big_weight), entry(many, big_weight), true),
            (entry(many, big_weight), entry(many, big_weight), false),
            (entry(many, big_weight), entry(many + 1, big_weight), true),
            (
                entry(2 * many + 1, 2 * big_weight),
                entry(many + 1, big_weight),
                true,
            ),
            (
                entry(2 * many + 2, 2 * big_weight),
                entry(many + 1, big_weight),
                false,
            ),
        ] {
            assert_eq!(
                (c.active as u64 + 1).checked_mul(i.weight).is_none(),
                c.active > 1000,
                "the large cases, and only they, overflow u64"
            );
            assert_eq!(
                fewer_after_call(&c, &i),
                expected,
                "c = {}/{}, i = {}/{}",
                c.active,
                c.weight,
                i.active,
                i.weight
            );
        }
    }
}
