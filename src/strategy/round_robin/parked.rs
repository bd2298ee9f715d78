//! What an update to the empty set (every binding's close) keeps of a method's counters: one
//! compact record of the pick set's counters, written out as Dubbo's per-invoker entries only
//! when a select or an update needs them.
//!
//! Dubbo keeps each invoker's counter until a select finds it unused for 60 s, and an empty set
//! has no selects: the counters stay until the set comes back, or for the handle's life. As
//! entries they cost about 55 bytes per method and invoker; kept as the period they stand for,
//! up to 1 MB per method (a long period's order). The record holds 8 bytes per invoker, beside
//! the ids and weights, which it shares with the period's when it was the set's own.

use super::period::{position_of, Kinetic, Period};
use super::state::State;
use std::sync::Arc;

pub(super) struct Parked {
    ids: Arc<[u64]>,
    weights: Arc<[i32]>,
    counters: Box<[i64]>,
    /// The latest select's time, which the entries take as their last update.
    last_select_ms: i64,
}

impl Parked {
    /// The counters a period implies at its position.
    pub(super) fn of_period(p: Period, last_select_ms: i64) -> Parked {
        // Picks by position in the set (the order's entries), read by index in the pick set.
        let positions = p.positions.as_deref();
        let span = positions.map_or(p.ids.len(), |ps| {
            ps.iter().max().map_or(0, |&m| m as usize + 1)
        });
        let mut picks = vec![0i64; span];
        for &pos in &p.order[..p.next] {
            picks[pos as usize] += 1;
        }
        let steps = p.next as i64;
        let counters = (0..p.ids.len())
            .map(|j| {
                let start = p.start.as_ref().map_or(0, |s| s[j]);
                start + steps * p.weights[j] as i64 - p.total * picks[position_of(positions, j)]
            })
            .collect();
        Parked {
            ids: p.ids,
            weights: p.weights,
            counters,
            last_select_ms,
        }
    }

    fn of_kinetic(k: &Kinetic, last_select_ms: i64) -> Parked {
        Parked {
            ids: k.ids.as_slice().into(),
            weights: k.weights.as_slice().into(),
            counters: k.wrr.counters().collect(),
            last_select_ms,
        }
    }

    pub(super) fn write_out(self, state: &mut State) {
        for ((&id, &weight), &current) in self.ids.iter().zip(&*self.weights).zip(&*self.counters) {
            state.set_counter_at(id, weight, current, self.last_select_ms);
        }
    }
}

impl State {
    /// After an update to the empty set: the counters of the period or tournament serving the
    /// picks go into a record instead of the entries, and the tournaments' memory, kept for the
    /// next build in a set that stays, goes.
    pub(super) fn park(&mut self) {
        let parked = if self.picked_since_build {
            match (self.period.take(), self.kinetic.as_ref().filter(|k| k.live)) {
                (Some(p), _) => Some(Parked::of_period(p, self.last_select_ms)),
                (None, Some(k)) => Some(Parked::of_kinetic(k, self.last_select_ms)),
                (None, None) => None,
            }
        } else {
            None
        };
        if let Some(k) = self.kinetic.as_mut() {
            k.live = false;
        }
        // A subset's or warm-up's counters (rarely live here) go into the entries, and the
        // period, if no select saw it, goes with nothing written, as for any update. A record
        // already parked (the set was empty before too) stays.
        self.materialize_held();
        if let Some(parked) = parked {
            // A period or a tournament is built only after the record is written out.
            debug_assert!(self.parked.is_none());
            // Entries of its invokers, left by a walk before the period or tournament took
            // over, are stale: writing the record out overwrites or removes each of them.
            for id in parked.ids.iter() {
                self.entries.remove(id);
            }
            self.entries.shrink_to_fit();
            self.parked = Some(parked);
        }
        self.kinetic = None;
        self.warming = None;
        self.subset = None;
    }

    /// Writes a parked record's counters into the entries, before anything reads them.
    pub(super) fn unpark(&mut self) {
        if let Some(parked) = self.parked.take() {
            parked.write_out(self);
        }
    }
}
