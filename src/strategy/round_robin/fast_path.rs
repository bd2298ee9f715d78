//! The locked fast path of whole-set picks at static weights: setting up the period or the
//! tournament over the pick set from the current counters, and serving picks from it
//! (which publishes the period again for lock-free picks).

use super::period::{fresh_period_for, period_length, Kinetic, Recording, MAX_PERIOD};
use super::state::State;
use super::weight_classes::Tournament;
use super::{PickSet, RECYCLE_MS};
use crate::balancer::Snapshot;
use crate::scratch::with_scratch;
use std::cell::RefCell;

thread_local! {
    /// The counters a fast path starts from, reused so that a rebuild in a select (after a
    /// failover's pick among other candidates) does not allocate. Per thread, not per method:
    /// kept in each method's state, it held 8 bytes per invoker for every method in use.
    static STARTING_COUNTERS: RefCell<Vec<i64>> = const { RefCell::new(Vec::new()) };
}

#[cfg(test)]
thread_local! {
    /// Fast paths this thread set up: what an update costs per method, counted.
    pub(super) static BUILDS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

impl State {
    /// Sets up picks over the pick set of `snapshot` (the whole set, or its local zone) from
    /// the current counters (which must be materialized): the snapshot's precomputed period
    /// when they are all zero, else a tournament ([`Tournament`]), which turns into a period
    /// once its picks are seen to cycle (O(n), no simulation: after a failover's pick over
    /// other candidates this runs again). False only when every weight is zero (Dubbo's walk then
    /// always takes the first invoker). Resets the counter of an invoker whose weight changed,
    /// as a Dubbo select would first do.
    pub(super) fn build_fast_path(&mut self, snapshot: &Snapshot, now_ms: i64) -> bool {
        #[cfg(test)]
        BUILDS.with(|b| b.set(b.get() + 1));
        let set = PickSet::of(snapshot);
        let Some((length, _)) = period_length(set.members().map(|m| m.weight)) else {
            return false;
        };
        self.picked_since_build = false;
        with_scratch(&STARTING_COUNTERS, |start| {
            self.starting_counters(set, start);
            match fresh_period_for(set, start) {
                Some(period) => self.period = Some(period),
                None => self.build_kinetic(set, start, length),
            }
        });
        self.start_tracking(now_ms);
        // Built: an interruption rebuilds at the next whole-set pick.
        (self.slow_picks, self.rebuild_at) = (0, 0);
        true
    }

    /// The pick set's counters as its next select finds them, into `start`: an invoker whose
    /// weight changed restarts from zero, as a Dubbo select first does. The entries are not
    /// touched: the period or tournament writes every member's entry when it ends, once a
    /// select has been served from it (until then no select has seen the change, and a weight
    /// changed and changed back before one does restarts nothing, as in Dubbo).
    fn starting_counters(&self, set: PickSet<'_>, start: &mut Vec<i64>) {
        start.clear();
        for m in set.members() {
            let current = match self.entries.get(&m.id) {
                Some(e) if e.weight == m.weight => e.current,
                _ => 0,
            };
            start.push(current);
        }
    }

    /// The tournament over the pick set from `start` (a period of `length` picks), built in the
    /// memory of the previous one.
    fn build_kinetic(&mut self, set: PickSet<'_>, start: &[i64], length: u64) {
        let generation = set.snapshot.generation;
        let k = match self.kinetic.as_mut() {
            Some(k) => {
                k.positions.clear();
                k.positions.extend(set.each_position());
                k.ids.clear();
                k.ids.extend(set.members().map(|m| m.id));
                k.weights.clear();
                k.weights.extend(set.members().map(|m| m.weight));
                k
            }
            None => {
                let weights: Vec<i32> = set.members().map(|m| m.weight).collect();
                self.kinetic.insert(Box::new(Kinetic {
                    live: true,
                    generation,
                    positions: set.each_position().collect(),
                    ids: set.members().map(|m| m.id).collect(),
                    weights,
                    wrr: Tournament::new(&[], &[]),
                    total: 0,
                    recording: None,
                }))
            }
        };
        k.wrr.rebuild(&k.weights, start);
        k.live = true;
        k.generation = generation;
        k.total = k.weights.iter().map(|&w| w as i64).sum();
        // Record a period's picks, if that fits.
        k.recording = (length <= MAX_PERIOD)
            .then(|| Recording::start(k.recording.take(), length as usize, &k.weights, k.total));
    }

    /// A pick from the period or the tournament, when one is set up for this snapshot.
    pub(super) fn serve_fast(
        &mut self,
        method_id: u32,
        snapshot: &Snapshot,
        now_ms: i64,
    ) -> Option<usize> {
        let generation = snapshot.generation;
        let (pos, walked) =
            if let Some(p) = self.period.as_mut().filter(|p| p.generation == generation) {
                let pos = p.order[p.next] as usize;
                p.next = (p.next + 1) % p.order.len();
                (pos, p.ids.len() > 1)
            } else if let Some(k) = self
                .kinetic
                .as_mut()
                .filter(|k| k.live && k.generation == generation)
            {
                let j = k.wrr.next();
                let pos = k.positions[j as usize];
                let walked = k.ids.len() > 1;
                if let Some(period) = k.record(j, generation) {
                    // Picks from a period need no lock; the tournament's counters are the
                    // period's start.
                    k.live = false;
                    self.period = Some(period);
                }
                (pos as usize, walked)
            } else {
                return None;
            };
        // A set of one is never walked by Dubbo: its selects leave no trace.
        if walked {
            self.picked_since_build = true;
            self.last_select_ms = now_ms;
        }
        if now_ms.saturating_sub(self.oldest_departed_ms) > RECYCLE_MS {
            self.recycle_fast(now_ms, PickSet::of(snapshot));
        }
        // Picks from a period go lock-free again.
        self.open_live(snapshot, method_id);
        Some(pos)
    }

    /// Moves the period or tournament of set `from` (a generation) over to `to`, a generation
    /// with the same pick set and weights, where it goes on with the same counters. False
    /// (nothing changed) when none serves `from`, or when a subset's or a warm-up's tournament
    /// holds counters too: the caller then rebuilds as for any update.
    pub(super) fn carry_over(&mut self, from: u64, to: u64) -> bool {
        let held_elsewhere = self.subset.as_ref().is_some_and(|s| s.live)
            || self.warming.as_ref().is_some_and(|w| w.live);
        if held_elsewhere {
            return false;
        }
        if let Some(p) = self.period.as_mut().filter(|p| p.generation == from) {
            p.generation = to;
            // The new snapshot has a share of live periods of its own: the period is offered
            // to it afresh, and its order is paid for there unless it is the fresh period's
            // (start all zero), which that snapshot holds anyway.
            p.paid = p.start.is_none();
            p.refused = false;
            return true;
        }
        match self
            .kinetic
            .as_mut()
            .filter(|k| k.live && k.generation == from)
        {
            Some(k) => {
                k.generation = to;
                true
            }
            None => false,
        }
    }

    /// Sets up the fast path again and decides when the next attempt may be made: at the next
    /// pick that finds none (building costs O(n), about two walks), or, after a failed attempt
    /// (every weight zero), after twice as many walks as before. The caller serves its pick
    /// from it next, which publishes it (publishing first would let lock-free picks take that
    /// position too).
    pub(super) fn rebuild_fast_path(&mut self, snapshot: &Snapshot, now_ms: i64) {
        if self.build_fast_path(snapshot, now_ms) {
            // Warm-up is over: its tournament's memory (about 80 B per invoker) goes.
            self.warming = None;
        } else {
            self.slow_picks = 0;
            self.rebuild_at = (self.rebuild_at.max(1) * 2).min(1 << 20);
        }
    }
}
