//! Inner's general select path: a pick over the whole set or among candidates, with exclusions
//! and filters, through the strategy; and the counting of a select as a call in flight.

use super::call_end::END_BYPASS;
use super::{Inner, Member, MethodState, Snapshot};
use crate::clock::Clock;
use crate::error::Status;
use crate::rng::Rng;
use crate::scratch::with_scratch;
use crate::stats::{CallStats, BYPASS};
use crate::strategy::{Ctx, SubsetWeights, WholeSet, WholeSetDraw};
use std::cell::{Cell, RefCell};
use std::sync::atomic::Ordering::Relaxed;

/// Calls of `method` in flight at position `pos`.
// Always inline: libpolylb.so's p2c select called it (in a closure) twice a pick, about 20
// instructions a call for about 8.
#[inline(always)]
pub(super) fn active_in(snapshot: &Snapshot, pos: usize, method: u32) -> i64 {
    snapshot.members[pos]
        .state
        .methods
        .get(method)
        .map_or(0, |s| s.active())
}

/// What the balancer's own whole-set draws came to.
enum Drawn {
    /// The strategy does not pick by such draws, or not now.
    NotApplicable,
    Pick(usize),
    /// `FirstIdle` draws all landed on busy invokers: the strategy decides.
    AllBusy,
}

/// What one select call knows before its strategy runs.
pub(super) struct Call<'a> {
    pub(super) snapshot: &'a Snapshot,
    /// This thread's counter id (see `SnapshotCache::counter`).
    pub(super) counter: u32,
    pub(super) method_state: &'a MethodState,
    pub(super) method: u32,
    pub(super) key: &'a [u8],
    pub(super) clock: &'a Clock,
    pub(super) rng: Rng<'a>,
    /// Where to keep the pick's position for the report (see `CachedSnapshot::hint`), when the
    /// snapshot is the thread's cached one.
    pub(super) hint: Option<&'a Cell<u32>>,
    /// Set when the pick was among a single candidate (the strategy did not run).
    pub(super) single: Cell<bool>,
}

impl Inner {
    /// select_among's work on one snapshot.
    #[inline]
    pub(super) fn select_in(
        &self,
        call: &Call<'_>,
        candidates: &[u64],
        excluded: &[u64],
    ) -> Result<u64, Status> {
        let snapshot = call.snapshot;
        if snapshot.members.is_empty() {
            return Err(Status::NoProvider);
        }
        // The common call (whole set, no filter) stays small; subsets and filters are out of line.
        let pos = if candidates.is_empty() && excluded.is_empty() && self.filter.is_none() {
            match self.draw_from_whole_set(snapshot, call.method, &call.rng, call.clock) {
                Drawn::Pick(pos) => pos,
                Drawn::AllBusy => self.pick(call, &snapshot.all, true, true, &[], None)?,
                Drawn::NotApplicable => self.pick(call, &snapshot.all, true, false, &[], None)?,
            }
        } else {
            self.pick_general(call, candidates, excluded)?
        };
        if self.counts_bypass && call.single.get() {
            return Ok(self.begin_bypass(snapshot, call.hint, pos, call.method));
        }
        let (member, stats, selected_before) =
            self.begin_call(snapshot, call.counter, call.hint, pos, call.method);
        if self.tracks_selects {
            self.strategy.on_select(
                call.method_state,
                call.method,
                &member.state,
                stats,
                selected_before,
                call.clock,
            );
        }
        Ok(member.id)
    }

    /// The draws of a strategy that picks from its prepared [`WholeSet`] when the whole set is
    /// the candidates and weights are static (see [`WholeSetDraw`]), made here without the
    /// virtual call: the same draws, so the same distribution and the same use of a seeded
    /// generator.
    #[inline]
    fn draw_from_whole_set(
        &self,
        snapshot: &Snapshot,
        method: u32,
        rng: &Rng<'_>,
        clock: &Clock,
    ) -> Drawn {
        // While invokers warm up the strategy's own path evaluates the weights.
        if self.whole_set_draw == WholeSetDraw::No || !snapshot.weights_static(clock) {
            return Drawn::NotApplicable;
        }
        let n = snapshot.members.len();
        if n == 1 {
            return Drawn::Pick(0);
        }
        let Some(whole) = snapshot
            .prepared
            .as_ref()
            .and_then(|p| p.downcast_ref::<WholeSet>())
        else {
            return Drawn::NotApplicable;
        };
        match self.whole_set_draw {
            WholeSetDraw::FirstIdle { draws } => {
                for _ in 0..draws {
                    let pos = whole.draw(n, rng);
                    if active_in(snapshot, pos, method) == 0 {
                        return Drawn::Pick(pos);
                    }
                }
                Drawn::AllBusy
            }
            _ => Drawn::Pick(whole.draw(n, rng)),
        }
    }

    /// Runs the strategy over `positions`; as Dubbo, a single candidate is returned without it.
    #[inline]
    pub(super) fn pick(
        &self,
        call: &Call<'_>,
        positions: &[u32],
        is_all: bool,
        drawn: bool,
        mask: &[u64],
        subset: Option<&SubsetWeights>,
    ) -> Result<usize, Status> {
        if positions.len() == 1 {
            call.single.set(true);
            if self.sees_single_picks {
                self.strategy
                    .single_pick(call.snapshot, call.method_state, call.clock);
            }
            return Ok(positions[0] as usize);
        }
        self.strategy.select(&Ctx {
            snapshot: call.snapshot,
            method: call.method_state,
            method_id: call.method,
            candidates: positions,
            is_all,
            drawn,
            mask,
            subset,
            key: call.key,
            clock: call.clock,
            rng: call.rng,
        })
    }

    /// The pick with candidates, exclusions, zone preference or outlier ejection.
    #[inline(never)]
    fn pick_general(
        &self,
        call: &Call<'_>,
        candidates: &[u64],
        excluded: &[u64],
    ) -> Result<usize, Status> {
        let (snapshot, clock) = (call.snapshot, call.clock);
        let n = snapshot.members.len();
        let pick =
            |positions: &[u32], is_all: bool, mask: &[u64], subset: Option<&SubsetWeights>| {
                self.pick(call, positions, is_all, false, mask, subset)
            };
        // Zone preference and outlier ejection narrow the candidates before the strategy runs.
        // Asked only once the call is known to pick: `needed` lifts expired ejections, which a
        // rejected call (an unknown candidate, every candidate excluded) must leave alone.
        let filter = || self.filter.as_ref().filter(|f| f.needed(snapshot, clock));
        let pos = if candidates.is_empty() && excluded.is_empty() {
            match filter() {
                None => pick(&snapshot.all, true, &[], None)?,
                Some(f) => f.with_view(snapshot, &call.rng, pick)?,
            }
        } else {
            let subset = |scratch: &mut (Vec<u64>, Vec<u32>)| {
                let (mask, positions) = scratch;
                mask.clear();
                if candidates.is_empty() {
                    mask.resize(n.div_ceil(64), u64::MAX);
                    if n % 64 != 0 {
                        mask[n / 64] = (1u64 << (n % 64)) - 1;
                    }
                } else {
                    mask.resize(n.div_ceil(64), 0);
                    for id in candidates {
                        let p = snapshot.position(*id).ok_or(Status::UnknownCandidate)?;
                        mask[p / 64] |= 1 << (p % 64);
                    }
                }
                for id in excluded {
                    if let Some(p) = snapshot.position(*id) {
                        mask[p / 64] &= !(1 << (p % 64));
                    }
                }
                positions.clear();
                for (w, &bits) in mask.iter().enumerate() {
                    let mut b = bits;
                    while b != 0 {
                        positions.push((w * 64 + b.trailing_zeros() as usize) as u32);
                        b &= b - 1;
                    }
                }
                if positions.is_empty() {
                    return Err(Status::NoCandidate);
                }
                if let Some(f) = filter() {
                    f.restrict(snapshot, mask, positions, &call.rng);
                }
                let is_all = positions.len() == n;
                pick(positions, is_all, mask, None)
            };
            with_scratch(&SCRATCH, subset)?
        };
        Ok(pos)
    }

    /// Counts a select of the invoker at `pos` as in flight (on this thread's cell when the
    /// counters are spread) and keeps `pos` as the report's hint, when there is one. Also
    /// returns the selects counted before this one (0 for spread counters).
    #[inline(always)]
    pub(super) fn begin_call<'s>(
        &self,
        snapshot: &'s Snapshot,
        counter: u32,
        hint: Option<&Cell<u32>>,
        pos: usize,
        method: u32,
    ) -> (&'s Member, &'s CallStats, u64) {
        let member = &snapshot.members[pos];
        let stats = member.state.methods.get_or_insert(method);
        // Spread counters are for strategies that never read calls in flight, so none of
        // them asks `on_select` what was selected before.
        let selected_before = if self.spread_counters {
            stats.begin_spread(counter);
            0
        } else {
            stats.begin()
        };
        if let Some(hint) = hint {
            hint.set(pos as u32);
        }
        (member, stats, selected_before)
    }

    /// `begin_call` for `adaptive`'s pick among a single candidate: counted in flight under the
    /// method's `BYPASS` key, where the load formula does not read it. Returns the invoker's id.
    #[inline(never)]
    pub(super) fn begin_bypass(
        &self,
        snapshot: &Snapshot,
        hint: Option<&Cell<u32>>,
        pos: usize,
        method: u32,
    ) -> u64 {
        let member = &snapshot.members[pos];
        let stats = member
            .state
            .methods
            .get_or_insert_in_tables(method | BYPASS);
        stats.begin();
        if self.end_path.load(Relaxed) != END_BYPASS {
            self.end_path.store(END_BYPASS, Relaxed);
        }
        if let Some(hint) = hint {
            hint.set(pos as u32);
        }
        member.id
    }
}

thread_local! {
    /// Candidate bitset and positions of subset calls, reused so that select never allocates
    /// in steady state.
    static SCRATCH: RefCell<(Vec<u64>, Vec<u32>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}
