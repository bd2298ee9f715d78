//! Periods of picks: the sequence from a known state repeats every Σw/gcd(w) picks, so one
//! period is computed ahead: the snapshot's shared period from all-zero counters
//! ([`fresh_period`]) by merging each weight's rotation or by simulating it, the others by
//! recording the picks of a tournament until its counters come back to where they
//! started ([`Kinetic`]).

use super::by_weight::Merge;
use super::smooth_wrr::SmoothWrr;
use super::weight_classes::Tournament;
use super::{PickSet, SnapshotData};
use crate::balancer::Member;
use std::sync::Arc;

/// Bounds on a precomputed period: its length, and the work to simulate it, in steps of the
/// walk over one invoker (about 20 ms).
pub(super) const MAX_PERIOD: u64 = 1 << 18;
const MAX_SIMULATION: u64 = 1 << 24;
/// What one step of the kinetic tournament costs, in steps of the walk over one invoker
/// (measured: 50 ns at n = 10, 120 ns at 100, 180 ns at 1,000, against about 1.2 ns per
/// invoker for the walk). Larger sets simulate a period with the tournament.
const KINETIC_STEP_COST: u64 = 128;

/// One period of picks from a known start state, for one generation of the set.
pub(super) struct Period {
    pub(super) generation: u64,
    /// The positions of the pick set's invokers (`PickSet`; None: the whole set, in order).
    pub(super) positions: Option<Box<[u32]>>,
    pub(super) ids: Arc<[u64]>,
    pub(super) weights: Arc<[i32]>,
    pub(super) order: Arc<[u32]>,
    /// Counters at `order[0]`; `None` means all zero (the shared period of a fresh method).
    /// `order` holds positions in the set.
    pub(super) start: Option<Box<[i64]>>,
    pub(super) total: i64,
    pub(super) next: usize,
    /// `order` is already paid for in its snapshot's budget of live periods (see
    /// [`LiveSlots`]): the snapshot's own fresh period, or one published before. Publishing it
    /// again then costs no entries.
    ///
    /// [`LiveSlots`]: super::live::LiveSlots
    pub(super) paid: bool,
    /// Its snapshot refused to publish it (no slot, or its share used up, which never comes
    /// back): picks stay behind the lock without asking again on every one.
    pub(super) refused: bool,
}

/// The period from all-zero counters, shared by every method that starts fresh on this set.
#[derive(Clone)]
pub(super) struct FreshPeriod {
    ids: Arc<[u64]>,
    weights: Arc<[i32]>,
    order: Arc<[u32]>,
    total: i64,
}

/// Picks over the pick set of one generation from a tournament over its counters.
pub(super) struct Kinetic {
    /// The tournament holds the pick set's counters (else only its memory is kept, for the
    /// next build: no allocation once it has grown).
    pub(super) live: bool,
    pub(super) generation: u64,
    /// The position in the set of each index of the tournament.
    pub(super) positions: Vec<u32>,
    pub(super) ids: Vec<u64>,
    pub(super) weights: Vec<i32>,
    pub(super) total: i64,
    pub(super) wrr: Tournament,
    /// The latest picks, while a period fits: once a period's worth have brought the counters
    /// back to where they were before them, the state is on its cycle and those picks are its
    /// period, with no simulation.
    pub(super) recording: Option<Recording>,
}

/// The last `length` picks of a tournament, and how many times each index was picked in
/// them. After a window of `L` picks an index's counter moved by `L·w − total·picks`, so the
/// counters are back where they were at the window's start exactly when every index was
/// picked `L·w / total` times (a whole number: `L` is `total / gcd(w)`). Counting
/// in a sliding window sees that at the first pick it holds, where comparing the counters only
/// at the end of consecutive windows (O(n) each) saw it up to a window later.
pub(super) struct Recording {
    /// Picks that make a period: Σw/gcd(w).
    pub(super) length: usize,
    /// The last picks (tournament indexes), oldest at `oldest` once `length` are held.
    picks: Vec<u32>,
    oldest: usize,
    /// Per index: its picks in the window, and the number a period gives it.
    counts: Vec<u32>,
    targets: Vec<u32>,
    /// Indexes whose count is their target.
    matched: usize,
}

impl Recording {
    /// A window of `length` picks over `weights` (summing to `total` > 0), reusing `memory`.
    pub(super) fn start(
        memory: Option<Recording>,
        length: usize,
        weights: &[i32],
        total: i64,
    ) -> Recording {
        let mut r = memory.unwrap_or(Recording {
            length,
            picks: Vec::new(),
            oldest: 0,
            counts: Vec::new(),
            targets: Vec::new(),
            matched: 0,
        });
        r.length = length;
        r.picks.clear();
        r.oldest = 0;
        r.counts.clear();
        r.counts.resize(weights.len(), 0);
        r.targets.clear();
        r.targets.extend(
            weights
                .iter()
                .map(|&w| (length as i64 * w as i64 / total) as u32),
        );
        r.matched = r.targets.iter().filter(|&&t| t == 0).count();
        r
    }

    /// Counts a pick of index `j` into the window (the oldest leaves it once it is full); true
    /// when the window is full and the counters are back where they were at its start.
    fn push(&mut self, j: u32) -> bool {
        if self.picks.len() < self.length {
            self.picks.push(j);
        } else {
            let gone = std::mem::replace(&mut self.picks[self.oldest], j);
            self.oldest = (self.oldest + 1) % self.length;
            self.count(gone, false);
        }
        self.count(j, true);
        self.picks.len() == self.length && self.matched == self.counts.len()
    }

    fn count(&mut self, j: u32, added: bool) {
        let (count, target) = (&mut self.counts[j as usize], self.targets[j as usize]);
        if *count == target {
            self.matched -= 1;
        }
        if added {
            *count += 1;
        } else {
            *count -= 1;
        }
        if *count == target {
            self.matched += 1;
        }
    }
}

impl Kinetic {
    /// Records a pick (tournament index `j`); the period of `generation`'s pick set when the
    /// recorded picks brought the counters back to where they were before them.
    pub(super) fn record(&mut self, j: u32, generation: u64) -> Option<Period> {
        let r = self.recording.as_mut()?;
        if !r.push(j) {
            return None;
        }
        // The picks from now on repeat the window's, oldest first, from the current counters.
        let (newer, older) = r.picks.split_at(r.oldest);
        let order: Arc<[u32]> = older
            .iter()
            .chain(newer)
            .map(|&j| self.positions[j as usize])
            .collect();
        // The period holds them now; the window's memory goes until a tournament records
        // again (after a failover's pick), instead of staying beside it for the method's life.
        r.picks = Vec::new();
        r.oldest = 0;
        let whole = self
            .positions
            .iter()
            .enumerate()
            .all(|(j, &p)| p as usize == j);
        Some(Period {
            generation,
            positions: (!whole).then(|| self.positions.as_slice().into()),
            ids: self.ids.as_slice().into(),
            weights: self.weights.as_slice().into(),
            order,
            start: Some(self.wrr.counters().collect()),
            total: self.total,
            next: 0,
            paid: false,
            refused: false,
        })
    }
}

/// The position in the set of index `j` of a pick set (`positions`: see [`Period::positions`]).
pub(super) fn position_of(positions: Option<&[u32]>, j: usize) -> usize {
    positions.map_or(j, |p| p[j] as usize)
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Σw / gcd(w), or `None` when all weights are zero.
pub(super) fn period_length(weights: impl Iterator<Item = i32>) -> Option<(u64, i64)> {
    let (mut g, mut total) = (0u64, 0i64);
    for w in weights {
        g = gcd(g, w as u64);
        total += w as i64;
    }
    (total > 0).then(|| (total as u64 / g, total))
}

/// Runs `steps` smooth-WRR picks from `current` (mutated), returning the positions picked.
fn simulate(current: &mut [i64], weights: &[i32], total: i64, steps: u64) -> Vec<u32> {
    let mut order = Vec::with_capacity(steps as usize);
    if current.len() as u64 > KINETIC_STEP_COST {
        let mut wrr = SmoothWrr::new(weights, current);
        order.extend((0..steps).map(|_| wrr.next()));
        for (c, now) in current.iter_mut().zip(wrr.counters()) {
            *c = now;
        }
        return order;
    }
    order.extend((0..steps).map(|_| walk_step(current, weights, total)));
    order
}

/// One pick of Dubbo's walk over plain counters: add each weight, take the first maximum,
/// subtract the total.
pub(super) fn walk_step(current: &mut [i64], weights: &[i32], total: i64) -> u32 {
    let (mut best, mut max) = (0usize, i64::MIN);
    for j in 0..current.len() {
        current[j] += weights[j] as i64;
        if j == 0 || current[j] > max {
            max = current[j];
            best = j;
        }
    }
    current[best] -= total;
    best as u32
}

/// The snapshot's shared period from all-zero counters, for a pick set that is the whole set
/// and counters that are all zero.
pub(super) fn fresh_period_for(set: PickSet<'_>, start: &[i64]) -> Option<Period> {
    let snapshot = set.snapshot;
    if set.local.is_some() || start.iter().any(|&c| c != 0) {
        return None;
    }
    let f = snapshot
        .prepared
        .as_ref()?
        .downcast_ref::<SnapshotData>()?
        .fresh
        .as_ref()?;
    Some(Period {
        generation: snapshot.generation,
        positions: None,
        ids: f.ids.clone(),
        weights: f.weights.clone(),
        order: f.order.clone(),
        start: None,
        total: f.total,
        next: 0,
        paid: true,
        refused: false,
    })
}

fn affordable(length: u64, n: usize) -> bool {
    length <= MAX_PERIOD
        && length.saturating_mul((n as u64).min(KINETIC_STEP_COST)) <= MAX_SIMULATION
}

/// The period from all-zero counters over `members`, when one fits.
pub(super) fn fresh_period(members: &[Member]) -> Option<FreshPeriod> {
    let (length, total) = period_length(members.iter().map(|m| m.weight))?;
    let weights: Vec<i32> = members.iter().map(|m| m.weight).collect();
    let merge = Merge::of(&weights);
    // A merge over k weights costs about k steps of the walk a pick.
    let cost_per_pick = merge.as_ref().map_or(members.len(), Merge::weights);
    if !affordable(length, cost_per_pick) {
        return None;
    }
    let order = match merge {
        Some(merge) => merge.order(total, length),
        None => {
            let mut current = vec![0i64; members.len()];
            let order = simulate(&mut current, &weights, total, length);
            debug_assert!(
                current.iter().all(|&c| c == 0),
                "smooth WRR returns to zero after Σw/g picks"
            );
            order
        }
    };
    Some(FreshPeriod {
        ids: members.iter().map(|m| m.id).collect(),
        weights: weights.into(),
        order: order.into(),
        total,
    })
}

#[cfg(test)]
mod tests {
    use super::super::smooth_wrr::tests::Lcg;
    use super::*;

    /// The window says "back where they were" at the first pick whose counters equal those
    /// of `length` picks before (found here by keeping every state of Dubbo's walk), not
    /// later, and never before; what it holds then is the sequence from there on.
    #[test]
    fn a_recording_sees_the_cycle_at_its_first_repeat() {
        let mut rng = Lcg(5);
        for case in 0..200 {
            let n = 1 + rng.below(12) as usize;
            let weights: Vec<i32> = (0..n).map(|_| rng.below(5) as i32).collect();
            let Some((period, total)) = period_length(weights.iter().copied()) else {
                continue;
            };
            let length = period as usize;
            // Counters off any cycle (an update's survivors), or on one (all zero).
            let mut current: Vec<i64> = match case % 4 {
                0 => vec![0; n],
                _ => (0..n).map(|_| rng.below(41) as i64 - 20).collect(),
            };
            let mut states = vec![current.clone()];
            let mut recording = Recording::start(None, length, &weights, total);
            let mut seen = None;
            for t in 1..=20 * length {
                let j = walk_step(&mut current, &weights, total);
                states.push(current.clone());
                let repeats = t >= length && states[t - length] == current;
                let said = recording.push(j);
                assert_eq!(said, repeats, "case {case}, pick {t}, weights {weights:?}");
                if said {
                    seen = Some(t);
                    break;
                }
            }
            let t = seen.unwrap_or_else(|| panic!("case {case}: no cycle in 20 periods"));
            let window: Vec<u32> = recording.picks[recording.oldest..]
                .iter()
                .chain(&recording.picks[..recording.oldest])
                .copied()
                .collect();
            let ahead: Vec<u32> = (0..length)
                .map(|_| walk_step(&mut current, &weights, total))
                .collect();
            assert_eq!(window, ahead, "case {case}: the window at pick {t}");
        }
    }
}
