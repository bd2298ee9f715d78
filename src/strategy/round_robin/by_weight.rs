//! The period from all-zero counters when few distinct weights share the set: a merge of one
//! rotation per weight, O(k) per pick for k distinct weights, instead of a simulation over
//! every counter (O(n) a pick by Dubbo's walk, O(log n) by the tournament).
//!
//! Invokers of equal weight gain equally on every step, so among them only picks reorder
//! counters. From all-zero counters the first of them in set order is their highest; once
//! picked it drops by the total below all of them, so the next in set order leads, and so on
//! round after round: the invokers of one weight are picked in a fixed rotation in set order.
//! Before step `t`'s pick the leader of weight `w` has been picked once per completed round,
//! so its counter is `t·w − total·rounds`; the pick is the highest leader, ties to the lower
//! position, as Dubbo's walk breaks them. Zero weights are never picked from all-zero counters
//! (their counters stay at 0 while the counters sum to 0 and the step's highest is above 0).

/// Above this many distinct positive weights the merge is no cheaper than the tournament.
const MAX_WEIGHTS: usize = 8;

/// One weight's invokers: positions in set order and where the rotation stands.
struct Rotation {
    weight: i64,
    positions: Vec<u32>,
    next: usize,
    rounds: i64,
}

/// The rotations of a set's distinct positive weights, from all-zero counters.
pub(super) struct Merge {
    rotations: Vec<Rotation>,
}

impl Merge {
    /// None for more than [`MAX_WEIGHTS`] distinct positive weights (or none).
    pub(super) fn of(weights: &[i32]) -> Option<Merge> {
        let mut rotations: Vec<Rotation> = Vec::new();
        for (pos, &w) in weights.iter().enumerate() {
            if w <= 0 {
                continue;
            }
            if let Some(r) = rotations.iter_mut().find(|r| r.weight == w as i64) {
                r.positions.push(pos as u32);
            } else if rotations.len() == MAX_WEIGHTS {
                return None;
            } else {
                rotations.push(Rotation {
                    weight: w as i64,
                    positions: vec![pos as u32],
                    next: 0,
                    rounds: 0,
                });
            }
        }
        (!rotations.is_empty()).then_some(Merge { rotations })
    }

    /// The number of rotations merged: what a pick compares.
    pub(super) fn weights(&self) -> usize {
        self.rotations.len()
    }

    /// The first `steps` picks of smooth WRR over the weights (which sum to `total`). Counters
    /// stay exact: a leader's is below the total in magnitude, and `t·w` below 2^49 for `t`
    /// within a period.
    pub(super) fn order(mut self, total: i64, steps: u64) -> Vec<u32> {
        let mut order = Vec::with_capacity(steps as usize);
        for t in 1..=steps as i64 {
            let (mut best, mut best_counter, mut best_pos) = (0, i64::MIN, u32::MAX);
            for (k, r) in self.rotations.iter().enumerate() {
                let counter = t * r.weight - total * r.rounds;
                let pos = r.positions[r.next];
                if counter > best_counter || (counter == best_counter && pos < best_pos) {
                    (best, best_counter, best_pos) = (k, counter, pos);
                }
            }
            order.push(best_pos);
            let r = &mut self.rotations[best];
            r.next += 1;
            if r.next == r.positions.len() {
                r.next = 0;
                r.rounds += 1;
            }
        }
        order
    }
}

#[cfg(test)]
mod tests {
    use super::super::period::{period_length, walk_step};
    use super::*;

    fn walked(weights: &[i32], steps: u64) -> Vec<u32> {
        let total: i64 = weights.iter().map(|&w| w as i64).sum();
        let mut current = vec![0i64; weights.len()];
        (0..steps)
            .map(|_| walk_step(&mut current, weights, total))
            .collect()
    }

    fn check(weights: &[i32]) {
        let (length, total) = period_length(weights.iter().copied()).unwrap();
        // Two periods: the second must repeat the first, as the walk's does (the start of
        // them for weights whose period is too long to keep).
        let steps = (2 * length).min(100_000);
        let merged = Merge::of(weights).map(|m| m.order(total, steps));
        assert_eq!(merged, Some(walked(weights, steps)), "{weights:?}");
    }

    #[test]
    fn the_merge_is_dubbos_walk() {
        check(&[1]);
        check(&[5, 1, 1]);
        check(&[1, 2, 3, 4]);
        check(&[100, 100, 100]);
        check(&[0, 7, 0, 3, 7]);
        check(&[3, 0, 0]);
        check(&[i32::MAX, 1, i32::MAX]);
        check(&[1, 2, 3, 4, 5, 6, 7, 8]);
        let mixed: Vec<i32> = (0..1000).map(|i| [100, 150, 200][i % 3]).collect();
        check(&mixed);
        // Weights that share no factor and repeat out of order: every tie of two leaders.
        let rng = crate::rng::seeded_for_test(11);
        for _ in 0..300 {
            let n = 1 + rng.below(40) as usize;
            let palette: Vec<i32> = (0..1 + rng.below(MAX_WEIGHTS as u64))
                .map(|_| rng.below(13) as i32)
                .collect();
            let weights: Vec<i32> = (0..n)
                .map(|_| palette[rng.below(palette.len() as u64) as usize])
                .collect();
            if weights.iter().any(|&w| w > 0) {
                check(&weights);
            }
        }
    }

    #[test]
    fn more_weights_than_the_merge_takes_are_left_to_the_simulation() {
        let nine: Vec<i32> = (1..=9).collect();
        assert!(Merge::of(&nine).is_none());
        assert!(Merge::of(&[0, 0]).is_none());
        assert_eq!(Merge::of(&[4, 0, 4, 9]).map(|m| m.weights()), Some(2));
        let eight: Vec<i32> = (1..=8).chain(1..=8).collect();
        assert_eq!(Merge::of(&eight).map(|m| m.weights()), Some(8));
    }
}
