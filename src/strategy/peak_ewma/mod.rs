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
//! - **Calls in flight for longer than the estimate count as slow.** While calls are in flight and
//!   none ends, the oldest of them is at least as old as the time since the invoker last made
//!   progress (a call it was sent ended, or it went from idle to busy); the effective latency is
//!   the larger of that age and the estimate. A stalled invoker looks slower every millisecond,
//!   before any of its calls returns — with one call in flight as well as with a hundred.
//!   (Read from the library's clock, which advances a kernel tick at a time, 4 ms on most
//!   kernels, the age is taken a tick shorter, so that a call sent just now never looks old;
//!   and a call whose report falls in the same tick as a peak counts as sent after it when it
//!   may have been.)
//! - **Cold start.** An invoker without a sample is priced at the method's typical estimate (an
//!   average of the invokers' estimates as successful calls end, so weighted by traffic), so it is
//!   neither flooded as "0 ms" nor shunned; with no sample anywhere, in flight / weight decides.
//!   Set by an early answer alone (below), the typical estimate stands only until the first success
//!   of a settled estimate replaces it, so that a connection's set-up does not price every invoker
//!   not yet tried as slow. An invoker's first success counts as such an early answer even after
//!   failures settled its estimate (a reconnect pays a set-up too). An invoker's first answers
//!   often pay a connection's set-up or the client's own start-up, and so may every call sent
//!   before the first answer came: until a success of a call sent after it settles the estimate (or
//!   a failure, whose penalty must stand, or the 16th success), the fastest early success stands,
//!   and the settling one replaces it when faster. (As a peak to forgive, a slow first answer came
//!   down only to the typical estimate: a 1 ms invoker whose first call took 300 ms stayed level
//!   for about a decay with a 40 ms one that carried the calls meanwhile; `examples/coldstart.rs`.)
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
//!
//! The code: [`look`] prices one candidate as a pick sees it now, [`probe`] decides and claims
//! the probes of idle invokers that look slow, [`field`] compares the looks of one pick,
//! [`search`] gathers them (a pair, d draws, a full scan, the escalation), and [`estimate`]
//! updates the estimate and the method's typical one on a report.

mod estimate;
mod field;
mod look;
mod probe;
mod search;
mod whole;

use super::slow_start::{Ramp, SlowStart};
use super::weighted::{Sampler, Weights};
use super::{Ctx, Prepared, PreparedData, Report, StatsAt, Strategy, StrategyKind};
use crate::balancer::{Member, MethodState, Snapshot};
use crate::clock::Clock;
use crate::config::Config;
use crate::error::Status;
use crate::stats::{CallStats, InvokerState, BYPASS};
use estimate::Typical;
use field::{Field, Inline, FIELD};
use look::Moment;
use std::fmt::Write as _;
use std::sync::atomic::AtomicI64;
use std::sync::atomic::Ordering::Relaxed;

/// More candidates looked at when the best of the first d looks slow.
const ESCALATION: usize = 8;
/// Looks slow: effective latency above this multiple of the method's typical latency.
const SLOW: f64 = 2.0;
/// Latencies within this ratio are equivalent: load and weight decide.
const TIE: f64 = 1.25;

/// How far ahead of a call's time a stamp must lie to mean that the clock stepped back (an NTP
/// step of the wall clock, which is the library's clock, or a caller's clock), rather than
/// threads reading the time a little apart.
const STEP_BACK_US: i64 = crate::clock::STEP_BACK_MS * 1000;

/// The time in `stamp`, unless the clock stepped back since it was written: then `restamp`,
/// written there too. A stamp from before such a step lies in the future of every later call,
/// so ages taken from it stay negative: a slow-looking invoker would neither decay nor be
/// probed, and no call would count as sent after its peak, until the clock caught up (as long
/// as the step: a 500 ms stall shunned its invoker for the whole of a 60 s step).
#[inline]
fn stamp_since_step(stamp: &AtomicI64, now_us: i64, restamp: i64) -> i64 {
    let t = stamp.load(Relaxed);
    if t <= now_us.saturating_add(STEP_BACK_US) {
        return t;
    }
    let restamp = restamp.max(1);
    let _ = stamp.compare_exchange(t, restamp, Relaxed, Relaxed);
    restamp
}

/// Configuration only: the state its picks read and write lives in the invokers' cells and the
/// method's [`Typical`], so a copy picks exactly as the original (the balancer keeps one for its
/// short path, see [`PeakEwma::whole_set_pick`]).
#[derive(Clone)]
pub(crate) struct PeakEwma {
    /// 0 = every candidate.
    choices: usize,
    decay_us: f64,
    penalty_us: f64,
    probe_min_us: i64,
    probe_max_us: i64,
    /// The library clock's tick (see `clock::library_tick_us`): a call read from it as sent
    /// before a peak may have been sent up to this much later.
    library_tick_us: i64,
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

impl PeakEwma {
    pub fn new(config: &Config) -> Self {
        let decay_us = config.peakewma.decay_ms.saturating_mul(1000);
        PeakEwma {
            choices: config.peakewma.choices as usize,
            decay_us: decay_us as f64,
            penalty_us: config.peakewma.failure_penalty_ms as f64 * 1000.0,
            probe_min_us: (decay_us / 1000).max(1),
            probe_max_us: decay_us.max(1),
            library_tick_us: crate::clock::library_tick_us(),
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

    /// What a pick knows of its moment: the time (read once), the method's typical estimate
    /// and this period's preference salt.
    #[inline(always)]
    fn moment(&self, clock: &Clock, method: &MethodState) -> Moment {
        let now_us = clock.now_us();
        Moment {
            now_us,
            slack_us: self.slack_us(clock.is_library()),
            typical: Typical::get(method),
            preference: self.preference(now_us),
        }
    }

    /// How much earlier than its time a moment may be: the library clock's tick when read from
    /// it (see `clock::library_tick_us`), 0 for a caller's own time.
    #[inline(always)]
    fn slack_us(&self, library_clock: bool) -> i64 {
        if library_clock {
            self.library_tick_us
        } else {
            0
        }
    }

    /// `base(k) == 2` (for k ≥ 2), said without the minimum: a pick among `k` candidates
    /// looks at a pair, with two choices or among two candidates (but for one choice).
    #[inline(always)]
    fn looks_at_pairs(&self, k: usize) -> bool {
        self.choices == 2 || (k == 2 && self.choices != 1)
    }

    /// The looks a pick among `k` candidates takes before it may escalate.
    #[inline(always)]
    fn base(&self, k: usize) -> usize {
        if self.choices == 0 {
            k
        } else {
            self.choices.min(k)
        }
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
        let at = self.moment(ctx.clock, ctx.method);
        let (now, typical) = (at.now_us, at.typical);
        let k = ctx.candidates.len();
        let base = self.base(k);
        let slow = self.slow.as_ref();
        if base == 2 {
            if Sampler::exact_for(ctx, weights, slow) {
                // The common pick (also the balancer's short path: `whole_set_pick`).
                return Ok(self.pick_of_whole_pair(ctx, weights, &at));
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

    fn single_pick(&self, snapshot: &Snapshot, _method: &MethodState, clock: &Clock) {
        if let Ok(weights) = Weights::of(snapshot) {
            Ramp::stamp(self.slow.as_ref(), weights.ramp.as_ref(), snapshot, clock);
        }
    }

    // Inline: the balancer's short path calls it directly (a call cost about 10 instructions
    // a pick).
    #[inline]
    fn on_select(
        &self,
        _method: &MethodState,
        _method_id: u32,
        _invoker: &InvokerState,
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
        self.update_estimate(r);
    }

    fn stats_fields(&self, member: &Member, at: &StatsAt<'_>, out: &mut String) {
        // The estimate alone is not what picks compare: an operator must see the price too
        // (a stalled invoker has the oldest call in flight, not its last samples' latency).
        let (mut estimate, mut price) = (0.0f64, 0.0f64);
        let slack_us = self.slack_us(at.library_clock);
        for (method, s) in member.state.methods.iter() {
            estimate = estimate.max(f64::from_bits(s.ewma().estimate_bits.load(Relaxed)));
            let typical = (at.method)(method & !BYPASS).map_or(0.0, Typical::get);
            price = price.max(self.price_now(s, typical, at.now_us, slack_us));
        }
        // A method this invoker has no counters for yet (never picked for it, e.g. one that
        // just joined): picks price it at the method's typical latency, and so do its stats.
        // The highest such is the first the invoker lacks in the methods sorted by typical
        // latency, once per stats call: looking up every interned method for every invoker
        // made a stats call O(invokers × methods) (394 ms at 1,000 × 100,000).
        let by_typical = at
            .per_call
            .get_or_init(|| {
                let mut v: Vec<(f64, u32)> = Vec::new();
                (at.each_method)(&mut |id, m| v.push((Typical::get(m), id)));
                v.sort_unstable_by(|a, b| b.0.total_cmp(&a.0));
                Box::new(v)
            })
            .downcast_ref::<Vec<(f64, u32)>>()
            .expect("one strategy per balancer, so one type per stats call");
        if let Some(&(typical, _)) = by_typical.iter().find(|&&(_, id)| {
            #[cfg(test)]
            STATS_LOOKUPS.with(|c| c.set(c.get() + 1));
            member.state.methods.get(id).is_none()
        }) {
            price = price.max(typical);
        }
        let _ = write!(
            out,
            ",\"latency_estimate_us\":{},\"latency_now_us\":{}",
            estimate.round() as i64,
            price.round() as i64
        );
        SlowStart::stats_field(self.slow.as_ref(), member, at.now_ms, out);
    }
}

#[cfg(test)]
thread_local! {
    static STATS_LOOKUPS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stats call looks up, for each invoker, the methods it has counters for and one more,
    /// not every method interned (O(invokers × methods): 394 ms at 1,000 × 100,000).
    #[test]
    fn stats_look_up_the_methods_an_invoker_lacks_once_per_call() {
        let b = crate::Balancer::new("loadbalance=peakewma").unwrap();
        let set: Vec<crate::Invoker> = (1..=100)
            .map(|i| crate::Invoker::new(i, format!("10.0.0.{i}:20880")))
            .collect();
        b.update(&set).unwrap();
        let ids: Vec<u32> = (0..1_000)
            .map(|m| b.method(&format!("m{m}")).unwrap())
            .collect();
        let mut now = 1_700_000_000_000_000;
        for (k, &m) in ids.iter().take(3).enumerate() {
            for i in 1..=100 {
                now += 1_000;
                let id = b.select_among(m, b"", &[i], &[], now).unwrap();
                b.report(m, id, 1_000 * (k as i64 + 1), crate::Outcome::Success, now)
                    .unwrap();
            }
        }
        STATS_LOOKUPS.with(|c| c.set(0));
        let stats = b.stats_json(now);
        assert!(stats.contains("latency_now_us"));
        let lookups = STATS_LOOKUPS.with(|c| c.get());
        // Each invoker: its three methods, sorted first by typical latency, then one it lacks.
        assert_eq!(lookups, 100 * 4);
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
        let invoker = crate::stats::InvokerState::default();
        strategy.on_select(&method, 0, &invoker, stats, first, &clock);
        strategy.on_select(&method, 0, &invoker, stats, second, &clock);
        assert_eq!(stats.ewma().progress_us.load(Relaxed), now);
    }

    /// The library's clock advances a tick (4 ms on most kernels) at a time while elapsed times
    /// are precise. Two invokers' answers, in a grpc-go client's order (each call sent after
    /// the previous one was reported): the first answers pay a connection's set-up; `b`'s
    /// 0.7 ms answer, read in the same tick as its first, settles its estimate and the method's
    /// typical latency, and its 1 ms answer after a 29 ms spike, in the spike's tick, shows a
    /// recovery. Read as sent before them (a caller's precise clock says so of the same
    /// numbers), the spike settled the estimate and became the typical latency itself.
    #[test]
    fn answers_within_a_tick_of_the_library_clock_count_as_sent_after() {
        let estimates = |tick_us: i64, clock: fn(i64) -> Clock| {
            let config = Config::parse("loadbalance=peakewma").unwrap();
            let mut strategy = PeakEwma::new(&config);
            strategy.library_tick_us = tick_us;
            let method = MethodState::default();
            let (a, b) = (
                crate::stats::MethodStats::default(),
                crate::stats::MethodStats::default(),
            );
            let (a, b) = (a.get_or_insert(0), b.get_or_insert(0));
            let start = 1_700_000_000_000_000;
            let report = |stats: &CallStats, elapsed_us: i64, tick: i64| {
                stats.begin();
                strategy.on_report(&Report {
                    method: &method,
                    stats,
                    ended: true,
                    elapsed_us,
                    outcome: crate::Outcome::Success,
                    clock: &clock(start + tick * 4_000),
                });
            };
            let estimate =
                |stats: &CallStats| f64::from_bits(stats.ewma().estimate_bits.load(Relaxed));
            report(a, 78_900, 0);
            report(b, 6_500, 2);
            report(b, 700, 2);
            let settled = (estimate(b), Typical::get(&method));
            report(b, 29_100, 10);
            report(b, 1_000, 10);
            (settled, estimate(b), Typical::get(&method))
        };
        let (settled, after_spike, typical) = estimates(4_000, Clock::library_at);
        assert_eq!(settled, (700.0, 700.0));
        // Halfway to the sample in log space: √(29.1 × 1) ms.
        assert!(
            (after_spike - (29_100.0f64 * 1_000.0).sqrt()).abs() < 1.0,
            "{after_spike}"
        );
        assert_eq!(typical, 700.0);

        let (settled, after_spike, typical) = estimates(4_000, Clock::new);
        assert_eq!(settled, (700.0, 78_900.0));
        assert_eq!((after_spike, typical), (29_100.0, 29_100.0));
    }

    /// A call sent just now, on an invoker that was idle, is dated from the coarse clock's last
    /// tick: the next tick must not make it look 4 ms old (4× a 1 ms estimate). A caller's own
    /// time is exact, and so is the age taken from it.
    #[test]
    fn the_age_of_a_call_in_flight_is_a_tick_shorter_on_the_library_clock() {
        let config = Config::parse("loadbalance=peakewma").unwrap();
        let mut strategy = PeakEwma::new(&config);
        strategy.library_tick_us = 4_000;
        let member = Member {
            id: 1,
            address: "10.0.0.1:20880".into(),
            zone: None,
            weight: 100,
            start_time_ms: 0,
            warmup_ms: 0,
            state: Default::default(),
        };
        let stats = member.state.methods.get_or_insert(0);
        stats
            .ewma()
            .estimate_bits
            .store(1_000f64.to_bits(), Relaxed);
        let tick = 1_700_000_000_000_000;
        stats.begin();
        stats.ewma().progress_us.store(tick, Relaxed);
        let method = MethodState::default();
        let seen = |clock: Clock| {
            let at = strategy.moment(&clock, &method);
            let look = strategy.look_at(&member, 0, 0, 100, &at);
            let price = strategy.price_now(stats, 0.0, at.now_us, at.slack_us);
            (look.latency(1.0), price)
        };
        assert_eq!(seen(Clock::library_at(tick + 4_000)), (1_000.0, 1_000.0));
        assert_eq!(seen(Clock::library_at(tick + 12_000)), (8_000.0, 8_000.0));
        assert_eq!(seen(Clock::new(tick + 4_000)), (4_000.0, 4_000.0));
    }
}
