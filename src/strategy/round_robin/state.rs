//! The per-method state: Dubbo's counters by invoker id, what stands in for them while a
//! period or a tournament serves the picks, writing them back when it ends, Dubbo's recycling
//! of the counters of invokers that left, and Dubbo's O(n) walk.

use super::live::Live;
use super::parked::Parked;
use super::period::{Kinetic, Period};
use super::tournaments::{Subset, Warming};
use super::{Ctx, PickSet, RECYCLE_MS};
use crate::balancer::{IdHasher, Snapshot};
use parking_lot::Mutex;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::hash::BuildHasherDefault;
use std::sync::Arc;

#[cfg(test)]
thread_local! {
    /// Entries this thread walked looking for the oldest of invokers outside the pick set.
    pub(super) static ENTRIES_WALKED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Entry {
    pub(super) weight: i32,
    pub(super) current: i64,
    pub(super) last_update_ms: i64,
}

#[derive(Default)]
pub(super) struct State {
    pub(super) entries: HashMap<u64, Entry, BuildHasherDefault<IdHasher>>,
    pub(super) period: Option<Period>,
    /// When no period fits: the counters of the set's invokers live here, not in `entries`.
    pub(super) kinetic: Option<Box<Kinetic>>,
    /// While invokers warm up: the counters of the set's invokers live here.
    pub(super) warming: Option<Box<Warming>>,
    /// The last subset picked from, and its counters while its tournament is live.
    pub(super) subset: Option<Box<Subset>>,
    /// While a period or a tournament is live: the last-update time of every invoker of the set.
    pub(super) last_select_ms: i64,
    /// While a period or a tournament is live: the oldest last-update among entries of invokers that left.
    pub(super) oldest_departed_ms: i64,
    /// The entries outside the fast path's pick set by last-update time (a min-heap; an item
    /// whose invoker came back or whose entry went is dropped when it comes up), complete for
    /// the pick set of the snapshot of generation `departed_of`: recycling then takes only the
    /// entries that are due, where a walk of every entry (under steady churn, the thousands of
    /// invokers that left in the last 60 s) ran after every update.
    pub(super) departed: BinaryHeap<Reverse<(i64, u64)>>,
    /// The generation whose pick set `departed` is complete for; None when it is not (a walk,
    /// a subset's or a warm-up's tournament, or a parked set may have made entries it lacks).
    pub(super) departed_of: Option<u64>,
    /// Whole-set picks made by Dubbo's walk since the fast path last failed to build (every
    /// weight zero), and after how many to try again (0 while building succeeds: at once).
    pub(super) slow_picks: u64,
    pub(super) rebuild_at: u64,
    /// The live period published for lock-free picks, while one is (see [`LiveSlots`]).
    ///
    /// [`LiveSlots`]: super::live::LiveSlots
    pub(super) open: Option<Arc<Live>>,
    /// A select has been served from the period or tournament since it was built. Until one
    /// is, no select has seen its set (an update builds ahead of the picks): ending it then
    /// must leave the entries as they were, as Dubbo's would be, weight changes unseen.
    pub(super) picked_since_build: bool,
    /// Since an update to the empty set: the counters of the set before it, not yet written
    /// into `entries`.
    pub(super) parked: Option<Parked>,
}

pub(super) struct PerMethod {
    /// Where this method's live periods are published in each snapshot's [`LiveSlots`].
    ///
    /// [`LiveSlots`]: super::live::LiveSlots
    pub(super) method_id: u32,
    pub(super) state: Mutex<State>,
}

impl State {
    /// Writes the counters implied by a parked record and by the live period or tournament
    /// back into `entries` and drops them.
    pub(super) fn materialize(&mut self) {
        self.unpark();
        self.materialize_held();
    }

    /// [`State::materialize`] for the period and tournaments only, a parked record left as it is.
    pub(super) fn materialize_held(&mut self) {
        if let Some(mut sub) = self.subset.take() {
            if let (true, Some(wrr)) = (sub.live, sub.wrr.as_ref()) {
                self.departed_of = None;
                for ((&id, &weight), current) in
                    sub.ids.iter().zip(&sub.weights).zip(wrr.counters())
                {
                    self.set_counter(id, weight, current);
                }
                sub.live = false;
            }
            self.subset = Some(sub);
        }
        if let Some(mut w) = self.warming.take() {
            if w.live {
                if !w.is_pick_set {
                    self.departed_of = None;
                }
                for (pos, weight, current) in w.wrr.counters() {
                    self.set_counter(w.ids[pos as usize], weight, current);
                }
                w.live = false;
            }
            self.warming = Some(w);
        }
        if !self.picked_since_build {
            // Built ahead of any select (by an update): no select saw its set, so the entries
            // stay as they are.
            if let Some(k) = self.kinetic.as_mut() {
                k.live = false;
            }
            self.period = None;
            return;
        }
        if let Some(mut k) = self.kinetic.take() {
            if k.live {
                for ((&id, &weight), current) in
                    k.ids.iter().zip(k.weights.iter()).zip(k.wrr.counters())
                {
                    self.set_counter(id, weight, current);
                }
                k.live = false;
            }
            self.kinetic = Some(k);
        }
        if let Some(p) = self.period.take() {
            Parked::of_period(p, self.last_select_ms).write_out(self);
        }
    }

    /// Stores an invoker's counter as of the latest pick. A zero counter is stored as no entry:
    /// Dubbo would create that entry at zero if the invoker is picked from again, and recycle it
    /// unseen if it left, so a method whose counters are back at zero (every period's end)
    /// keeps no per-invoker state.
    fn set_counter(&mut self, id: u64, weight: i32, current: i64) {
        self.set_counter_at(id, weight, current, self.last_select_ms);
    }

    /// [`State::set_counter`] as of a select at `last_update_ms`.
    pub(super) fn set_counter_at(
        &mut self,
        id: u64,
        weight: i32,
        current: i64,
        last_update_ms: i64,
    ) {
        if current == 0 {
            self.entries.remove(&id);
        } else {
            self.entries.insert(
                id,
                Entry {
                    weight,
                    current,
                    last_update_ms,
                },
            );
        }
    }

    /// Last-update times while a period or the tournament stands in for the pick set's
    /// entries. The oldest entry of an invoker outside the set is left unknown: the first pick
    /// served then runs the recycling, which finds it. Every method builds at every update,
    /// and under steady churn a method keeps thousands of entries of invokers that left (for
    /// 60 s): walking them per method per update cost milliseconds, for methods that may not
    /// be selected before the next update.
    pub(super) fn start_tracking(&mut self, now_ms: i64) {
        self.last_select_ms = now_ms;
        self.oldest_departed_ms = i64::MIN;
    }

    /// Last-update times while a tournament stands in for the entries of the invokers each
    /// pick updates (`picked`); the others age, as in Dubbo, towards recycling.
    pub(super) fn start_tracking_of(&mut self, now_ms: i64, picked: impl Fn(u64) -> bool) {
        self.forget_departed();
        self.last_select_ms = now_ms;
        self.oldest_departed_ms = self.oldest_outside(picked);
    }

    fn oldest_outside(&self, picked: impl Fn(u64) -> bool) -> i64 {
        #[cfg(test)]
        ENTRIES_WALKED.with(|w| w.set(w.get() + self.entries.len() as u64));
        self.entries
            .iter()
            .filter(|(id, _)| !picked(**id))
            .map(|(_, e)| e.last_update_ms)
            .min()
            .unwrap_or(i64::MAX)
    }

    /// `departed` no longer holds every entry outside the pick set: the next recycling of the
    /// fast path walks the entries once to make it again.
    pub(super) fn forget_departed(&mut self) {
        self.departed_of = None;
        self.departed.clear();
    }

    /// Dubbo's recycling for the fast path over `set`: the entries outside it gone once 60 s
    /// old. From `departed` when it is complete for this set (only the due entries are
    /// touched), else by a walk of every entry, which makes it.
    pub(super) fn recycle_fast(&mut self, now_ms: i64, set: PickSet<'_>) {
        let generation = set.snapshot.generation;
        if self.departed_of != Some(generation) {
            self.entries.retain(|id, e| {
                set.contains(*id) || now_ms.wrapping_sub(e.last_update_ms) <= RECYCLE_MS
            });
            #[cfg(test)]
            ENTRIES_WALKED.with(|w| w.set(w.get() + self.entries.len() as u64));
            // In the heap's own memory: a select allocates only when more entries are outside
            // than ever before.
            let mut outside = std::mem::take(&mut self.departed).into_vec();
            outside.clear();
            outside.extend(
                self.entries
                    .iter()
                    .filter(|(id, _)| !set.contains(**id))
                    .map(|(&id, e)| Reverse((e.last_update_ms, id))),
            );
            self.departed = BinaryHeap::from(outside);
            self.departed_of = Some(generation);
        } else {
            while let Some(&Reverse((at, id))) = self.departed.peek() {
                if now_ms.wrapping_sub(at) <= RECYCLE_MS {
                    break;
                }
                self.departed.pop();
                #[cfg(test)]
                ENTRIES_WALKED.with(|w| w.set(w.get() + 1));
                if set.contains(id) {
                    // Back in the set: its entry is updated by every pick again.
                    continue;
                }
                match self.entries.get(&id) {
                    Some(e) if now_ms.wrapping_sub(e.last_update_ms) > RECYCLE_MS => {
                        self.entries.remove(&id);
                    }
                    Some(e) => self.departed.push(Reverse((e.last_update_ms, id))),
                    None => {}
                }
            }
        }
        self.oldest_departed_ms = self.oldest_known_departed();
    }

    /// The oldest last-update `departed` holds (a lower bound of the entries' outside the set
    /// while it is complete).
    pub(super) fn oldest_known_departed(&self) -> i64 {
        self.departed.peek().map_or(i64::MAX, |r| (r.0).0)
    }

    /// After an update from the set of generation `previous` to `next`: the entries of the
    /// invokers that left the pick set (`left`, found once for every method) join `departed`,
    /// never a walk of the entries kept; false (and `departed` forgotten) when it was not
    /// complete for `previous`.
    pub(super) fn carry_departed(&mut self, previous: u64, left: &[u64], next: u64) -> bool {
        if self.departed_of != Some(previous) {
            self.forget_departed();
            return false;
        }
        for &id in left {
            if let Some(e) = self.entries.get(&id) {
                self.departed.push(Reverse((e.last_update_ms, id)));
            }
        }
        self.departed_of = Some(next);
        true
    }

    pub(super) fn recycle_departed(&mut self, snapshot: &Snapshot, now_ms: i64) {
        self.recycle_outside(now_ms, |id| snapshot.position(id).is_some());
    }

    /// Dubbo's recycling of the entries that picks no longer update (`picked` says which they
    /// do update): gone once 60 s old.
    pub(super) fn recycle_outside(&mut self, now_ms: i64, picked: impl Fn(u64) -> bool) {
        self.entries
            .retain(|id, e| picked(*id) || now_ms.wrapping_sub(e.last_update_ms) <= RECYCLE_MS);
        self.oldest_departed_ms = self.oldest_outside(picked);
    }

    /// Dubbo's select, O(n): add each weight, take the first maximum, subtract the total.
    pub(super) fn walk(&mut self, ctx: &Ctx<'_>, now_ms: i64) -> usize {
        self.last_select_ms = now_ms;
        // It may make entries outside the fast path's pick set.
        self.forget_departed();
        let mut best: Option<(usize, u64)> = None;
        let mut max = i64::MIN;
        let mut total = 0i64;
        for &pos in ctx.candidates {
            let pos = pos as usize;
            let w = ctx.weight(pos);
            let id = ctx.member(pos).id;
            let e = self.entries.entry(id).or_insert(Entry {
                weight: w,
                current: 0,
                last_update_ms: now_ms,
            });
            if e.weight != w {
                e.weight = w;
                e.current = 0;
            }
            e.current += w as i64;
            e.last_update_ms = now_ms;
            if best.is_none() || e.current > max {
                max = e.current;
                best = Some((pos, id));
            }
            total += w as i64;
        }
        if ctx.candidates.len() != self.entries.len() {
            #[cfg(test)]
            ENTRIES_WALKED.with(|w| w.set(w.get() + self.entries.len() as u64));
            self.entries
                .retain(|_, e| now_ms.wrapping_sub(e.last_update_ms) <= RECYCLE_MS);
        }
        let (pos, id) = best.expect("at least two candidates");
        if let Some(e) = self.entries.get_mut(&id) {
            e.current -= total;
        }
        pos
    }
}
