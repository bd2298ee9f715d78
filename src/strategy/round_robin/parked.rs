//! What an update to the empty set (every binding's close) keeps of a method's counters: one
//! compact record, written out as Dubbo's per-invoker entries only when a select or an update
//! needs them.
//!
//! Dubbo keeps each invoker's counter until a select finds it unused for 60 s, and an empty set
//! has no selects: the counters stay until the set comes back, or for the handle's life. As
//! entries they cost about 55 bytes per method and invoker; kept as the period they stand for,
//! up to 1 MB per method (a long period's order). The record holds the counters a live period
//! or tournament implies, 8 bytes per invoker beside the ids and weights (shared with the
//! period's when it was the set's own), and every other entry stowed at about 20 bytes.

use super::period::{position_of, Kinetic, Period};
use super::state::{Entry, State};
use std::collections::HashMap;
use std::sync::Arc;

pub(super) struct Parked {
    ids: Arc<[u64]>,
    weights: Arc<[i32]>,
    counters: Box<[i64]>,
    /// The latest select's time, which the entries take as their last update.
    last_select_ms: i64,
    /// The entries the record does not stand for (its invokers' counters when the period or
    /// tournament ended before the close: a failover's walk, a subset's or a warm-up's picks,
    /// an update no select saw since; and invokers that left or are outside the local zone).
    rest: Option<Box<Stowed>>,
}

/// Entries kept compact while the set is empty: 20 bytes each (by last update, in runs of one
/// time), not a hash map's 55 to 70.
struct Stowed {
    ids: Box<[u64]>,
    weights: Box<[i32]>,
    counters: Box<[i64]>,
    /// (last update, entries with it), in the order of the entries above.
    runs: Box<[(i64, u32)]>,
}

impl Stowed {
    /// Takes every entry out of `entries` (which keeps no memory).
    fn of<S>(entries: &mut HashMap<u64, Entry, S>) -> Option<Box<Stowed>>
    where
        S: Default,
    {
        if entries.is_empty() {
            return None;
        }
        let mut all: Vec<(u64, Entry)> = std::mem::take(entries).into_iter().collect();
        all.sort_unstable_by_key(|(id, e)| (e.last_update_ms, *id));
        let mut runs: Vec<(i64, u32)> = Vec::new();
        for (_, e) in &all {
            match runs.last_mut() {
                Some((t, count)) if *t == e.last_update_ms => *count += 1,
                _ => runs.push((e.last_update_ms, 1)),
            }
        }
        Some(Box::new(Stowed {
            ids: all.iter().map(|(id, _)| *id).collect(),
            weights: all.iter().map(|(_, e)| e.weight).collect(),
            counters: all.iter().map(|(_, e)| e.current).collect(),
            runs: runs.into_boxed_slice(),
        }))
    }

    fn restore(self, state: &mut State) {
        state.entries.reserve(self.ids.len());
        let mut at = 0;
        for &(last_update_ms, count) in self.runs.iter() {
            for j in at..at + count as usize {
                state.entries.insert(
                    self.ids[j],
                    Entry {
                        weight: self.weights[j],
                        current: self.counters[j],
                        last_update_ms,
                    },
                );
            }
            at += count as usize;
        }
    }
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
            rest: None,
        }
    }

    fn of_kinetic(k: &Kinetic, last_select_ms: i64) -> Parked {
        Parked {
            ids: k.ids.as_slice().into(),
            weights: k.weights.as_slice().into(),
            counters: k.wrr.counters().collect(),
            last_select_ms,
            rest: None,
        }
    }

    /// No period's or tournament's counters: only the entries.
    fn empty() -> Parked {
        Parked {
            ids: Arc::new([]),
            weights: Arc::new([]),
            counters: Box::new([]),
            last_select_ms: 0,
            rest: None,
        }
    }

    pub(super) fn write_out(self, state: &mut State) {
        if let Some(rest) = self.rest {
            // Disjoint from the record's invokers, whose entries parking removed.
            rest.restore(state);
        }
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
        self.forget_departed();
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
            self.parked = Some(parked);
        }
        // The other entries (all of them when the last pick was a walk, a subset's or a
        // warm-up's, or when no select saw the set since an update built its period) are
        // kept compact too. None are left when the set was empty before (any select or update
        // in between wrote the record out).
        if !self.entries.is_empty() {
            let parked = self.parked.get_or_insert_with(Parked::empty);
            debug_assert!(parked.rest.is_none());
            parked.rest = Stowed::of(&mut self.entries);
        }
        self.entries.shrink_to_fit();
        self.departed = Default::default();
        self.kinetic = None;
        self.warming = None;
        self.subset = None;
    }

    /// Writes a parked record's counters into the entries, before anything reads them.
    pub(super) fn unpark(&mut self) {
        if let Some(parked) = self.parked.take() {
            self.forget_departed();
            parked.write_out(self);
        }
    }
}
