//! The tournaments for picks that no period serves: one over a subset that comes twice in a
//! row ([`Subset`]), and one over the whole set while invokers warm up ([`Warming`]).

use super::state::State;
use super::warming_wrr::WarmingWrr;
use super::weight_classes::Tournament;
use super::{Ctx, PickSet, RECYCLE_MS};
use crate::balancer::{Member, Snapshot};

/// Picks over the whole set of one generation, or over its pick set (the local zone), while
/// some of it warms up.
pub(super) struct Warming {
    /// False once the counters went back to the entries; the memory stays for the next build.
    pub(super) live: bool,
    generation: u64,
    /// Every member's id, by set position.
    pub(super) ids: Vec<u64>,
    pub(super) wrr: WarmingWrr,
    /// Its set is the fast path's pick set (the local zone's invokers, or the whole set when
    /// no zone narrows whole-set picks): the counters it writes back are then all inside that
    /// set. False for the whole set while a local zone is the pick set (a spill-over).
    pub(super) is_pick_set: bool,
}

/// Picks over one subset of the set (a router's candidates, a zone's local invokers while some
/// invoker is ejected) that came on two subset picks in a row, from a tournament over its
/// counters: O(log m) (O(k + log m) for k distinct weights) instead of the walk's O(m), the invokers outside it untouched as Dubbo's
/// walk over the subset leaves them. Failover retries, whose exclusions change from call to
/// call, keep walking (a build costs about two walks); the subset they interrupt is rebuilt
/// at its next pick.
#[derive(Default)]
pub(super) struct Subset {
    /// The subset's counters live in `wrr` (else only its positions are kept, to recognise it).
    pub(super) live: bool,
    generation: u64,
    positions: Vec<u32>,
    pub(super) ids: Vec<u64>,
    pub(super) weights: Vec<i32>,
    /// The counters a build starts from (kept for its capacity).
    scratch: Vec<i64>,
    pub(super) wrr: Option<Tournament>,
}

impl State {
    /// A subset pick at static weights from the subset's tournament: built (from the entries,
    /// O(m)) when the previous subset pick was over the same candidates of the same set. None
    /// otherwise (the candidates are remembered, the counters are in the entries): the caller
    /// walks.
    pub(super) fn serve_subset(&mut self, ctx: &Ctx<'_>, now_ms: i64) -> Option<usize> {
        let snapshot = ctx.snapshot;
        let generation = snapshot.generation;
        let (same, live) = match &self.subset {
            Some(s) => (
                s.generation == generation && s.positions[..] == *ctx.candidates,
                s.live,
            ),
            None => (false, false),
        };
        let picked = |id: u64| snapshot.position(id).is_some_and(|p| ctx.contains(p));
        if !(same && live) {
            self.materialize();
            let sub = self.subset.get_or_insert_with(Box::default);
            if !same {
                // Remembered for the next subset pick, unless a tournament was live over other
                // candidates: those usually come back right after a failover's pick, and are
                // rebuilt at once then.
                if !live {
                    sub.generation = generation;
                    sub.positions.clear();
                    sub.positions.extend_from_slice(ctx.candidates);
                }
                return None;
            }
            let entries = &self.entries;
            sub.ids.clear();
            sub.weights.clear();
            sub.scratch.clear();
            for &p in &sub.positions {
                let m = &snapshot.members[p as usize];
                let weight = m.weight.max(0);
                // A counter kept with another weight restarts from zero, as a Dubbo select does.
                let current = match entries.get(&m.id) {
                    Some(e) if e.weight == weight => e.current,
                    _ => 0,
                };
                sub.ids.push(m.id);
                sub.weights.push(weight);
                sub.scratch.push(current);
            }
            match sub.wrr.as_mut() {
                Some(wrr) => wrr.rebuild(&sub.weights, &sub.scratch),
                None => sub.wrr = Some(Tournament::new(&sub.weights, &sub.scratch)),
            }
            sub.live = true;
            self.start_tracking_of(now_ms, picked);
        }
        let sub = self.subset.as_mut()?;
        let index = sub.wrr.as_mut()?.next();
        let pos = sub.positions[index as usize] as usize;
        self.last_select_ms = now_ms;
        if now_ms.saturating_sub(self.oldest_departed_ms) > RECYCLE_MS {
            self.recycle_outside(now_ms, picked);
        }
        Some(pos)
    }

    /// A pick over the whole set or over the pick set (`is_pick_set`: the local zone's invokers
    /// when a zone narrows whole-set picks) while invokers warm up, from the [`WarmingWrr`] of
    /// that set at `now_ms`, built first (from the entries, O(n)) when there is none for that
    /// set and time.
    pub(super) fn serve_warming(
        &mut self,
        snapshot: &Snapshot,
        is_pick_set: bool,
        now_ms: i64,
    ) -> usize {
        let generation = snapshot.generation;
        let current = self.warming.as_ref().is_some_and(|w| {
            w.live
                && w.generation == generation
                && w.is_pick_set == is_pick_set
                && w.wrr.covers(now_ms)
        });
        if !current {
            self.materialize();
            let entries = &self.entries;
            let prior = |m: &Member| entries.get(&m.id).map(|e| (e.weight, e.current));
            let set = match is_pick_set {
                true => PickSet::of(snapshot),
                false => PickSet::whole(snapshot),
            };
            let positions = || set.each_position();
            match self.warming.as_mut() {
                Some(w) => {
                    w.wrr.rebuild(&snapshot.members, positions(), now_ms, prior);
                    w.ids.clear();
                    w.ids.extend(snapshot.members.iter().map(|m| m.id));
                    w.generation = generation;
                    w.live = true;
                    w.is_pick_set = is_pick_set;
                }
                None => {
                    self.warming = Some(Box::new(Warming {
                        live: true,
                        generation,
                        ids: snapshot.members.iter().map(|m| m.id).collect(),
                        wrr: WarmingWrr::new(&snapshot.members, positions(), now_ms, prior),
                        is_pick_set,
                    }))
                }
            }
            if is_pick_set {
                // The invokers outside the pick set are those `departed` keeps, when
                // complete; else the first recycling finds them.
                self.start_tracking(now_ms);
                if self.departed_of == Some(generation) {
                    self.oldest_departed_ms = self.oldest_known_departed();
                }
            } else {
                self.start_tracking_of(now_ms, |id| snapshot.position(id).is_some());
            }
        }
        let warming = self.warming.as_mut().expect("built above");
        let pos = warming.wrr.pick(&snapshot.members, now_ms) as usize;
        self.last_select_ms = now_ms;
        // Picks since the period was lost: when warm-up ends, a period is rebuilt at once
        // rather than after as many O(n) walks as it costs.
        self.slow_picks = self.slow_picks.saturating_add(1);
        if now_ms.saturating_sub(self.oldest_departed_ms) > RECYCLE_MS {
            if is_pick_set {
                self.recycle_fast(now_ms, PickSet::of(snapshot));
            } else {
                self.recycle_departed(snapshot, now_ms);
            }
        }
        pos
    }
}
