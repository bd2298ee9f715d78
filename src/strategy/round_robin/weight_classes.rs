//! Exact smooth weighted round robin over sets with few distinct weights, in O(k + log n) per
//! pick for k distinct weights, from any starting counters.
//!
//! Counters of equal weight grow together, so their order changes only when one of them is
//! picked (and drops by the total): each weight class is a heap ordered by counter (then by
//! position, the first maximum winning as in Dubbo's walk), and a pick compares the k heads.
//! The kinetic tournament ([`SmoothWrr`]) handles any weights but pays for every crossing of
//! two lines of different slopes; with three distinct weights over 1,000 invokers a step of it
//! cost several times this one (which is what the calls after a membership change pay, until
//! the counters are seen back on a period).
//!
//! [`SmoothWrr`]: super::smooth_wrr::SmoothWrr

use super::smooth_wrr::SmoothWrr;
use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// Above this many distinct weights the tournament is used instead.
pub(super) const MAX_CLASSES: usize = 8;
/// Steps between moving the time origin, so that `step · weight` stays far from overflow.
const REBASE_EVERY: i64 = 1 << 20;

/// One counter, as `base + step · weight` of its class.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Line {
    base: i64,
    pos: u32,
}

impl Ord for Line {
    /// The heap's head is the highest counter, and among equal ones the first in set order.
    fn cmp(&self, other: &Line) -> Ordering {
        self.base
            .cmp(&other.base)
            .then_with(|| other.pos.cmp(&self.pos))
    }
}

impl PartialOrd for Line {
    fn partial_cmp(&self, other: &Line) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

struct Class {
    weight: i64,
    lines: BinaryHeap<Line>,
}

pub(crate) struct ClassWrr {
    total: i64,
    step: i64,
    /// Only the first `used` hold this set's classes (the others are memory for a next one).
    classes: Vec<Class>,
    used: usize,
    /// The class of the line the latest `advance` returned.
    leader: usize,
    /// Per position: its class, and its line's base (kept beside the heap's copy so that the
    /// counters can be read in set order).
    class_of: Vec<u8>,
    bases: Vec<i64>,
}

impl ClassWrr {
    /// An empty one, to be `rebuild`t.
    pub fn new() -> ClassWrr {
        ClassWrr {
            total: 0,
            step: 0,
            classes: Vec::new(),
            used: 0,
            leader: 0,
            class_of: Vec::new(),
            bases: Vec::new(),
        }
    }

    /// Starts over from `counters` (Dubbo's `current` values, in set order) with `weights`
    /// (non-negative), reusing the memory held. False, leaving it empty, when the weights
    /// take more than [`MAX_CLASSES`] distinct values.
    pub fn rebuild(&mut self, weights: &[i32], counters: &[i64]) -> bool {
        debug_assert_eq!(weights.len(), counters.len());
        for class in &mut self.classes {
            class.lines.clear();
        }
        self.used = 0;
        self.class_of.clear();
        self.bases.clear();
        self.total = weights.iter().map(|&w| w as i64).sum();
        self.step = 0;
        for (pos, (&w, &c)) in weights.iter().zip(counters).enumerate() {
            let weight = w as i64;
            let class = match self.classes[..self.used]
                .iter()
                .position(|k| k.weight == weight)
            {
                Some(class) => class,
                None if self.used == MAX_CLASSES => {
                    self.rebuild(&[], &[]);
                    return false;
                }
                None => {
                    if self.used == self.classes.len() {
                        self.classes.push(Class {
                            weight,
                            lines: BinaryHeap::new(),
                        });
                    }
                    self.classes[self.used].weight = weight;
                    self.used += 1;
                    self.used - 1
                }
            };
            self.classes[class].lines.push(Line {
                base: c,
                pos: pos as u32,
            });
            self.class_of.push(class as u8);
            self.bases.push(c);
        }
        true
    }

    /// The next pick: every counter grows by its weight, the first highest is picked and drops
    /// by the total. The set must not be empty.
    pub fn next(&mut self) -> u32 {
        let (pos, _) = self.advance();
        self.lower(pos, self.total);
        pos
    }

    /// One step without a pick: every counter grows by its weight; returns the first highest
    /// and its counter. The caller then lowers that line (`lower`), or none when the pick went
    /// to a counter kept outside. The set must not be empty.
    pub fn advance(&mut self) -> (u32, i64) {
        if self.step == REBASE_EVERY {
            self.rebase();
        }
        self.step += 1;
        let step = self.step;
        let mut best: Option<(usize, i64, u32)> = None;
        for (c, class) in self.classes[..self.used].iter().enumerate() {
            let Some(head) = class.lines.peek() else {
                continue;
            };
            let value = head.base + step * class.weight;
            let wins = match best {
                None => true,
                Some((_, v, pos)) => value > v || (value == v && head.pos < pos),
            };
            if wins {
                best = Some((c, value, head.pos));
            }
        }
        let (class, value, pos) = best.expect("a pick from an empty set");
        self.leader = class;
        (pos, value)
    }

    /// Lowers the counter at `pos`, the line the latest `advance` returned, by `amount` (a
    /// pick's total weight).
    pub fn lower(&mut self, pos: u32, amount: i64) {
        if let Some(mut head) = self.classes[self.leader].lines.peek_mut() {
            debug_assert_eq!(head.pos, pos, "only the leader is lowered");
            head.base -= amount;
        }
        self.bases[pos as usize] -= amount;
    }

    /// The counter at `pos` now.
    #[inline]
    pub fn counter(&self, pos: usize) -> i64 {
        self.bases[pos] + self.step * self.classes[self.class_of[pos] as usize].weight
    }

    /// Moves the time origin to the current step (counters unchanged). A class's lines all
    /// move by the same amount, so its heap keeps its order.
    fn rebase(&mut self) {
        let step = self.step;
        for class in &mut self.classes[..self.used] {
            let shift = step * class.weight;
            let lines = std::mem::take(&mut class.lines);
            let mut lines = lines.into_vec();
            for line in &mut lines {
                line.base += shift;
            }
            class.lines = BinaryHeap::from(lines);
        }
        for (base, &class) in self.bases.iter_mut().zip(&self.class_of) {
            *base += step * self.classes[class as usize].weight;
        }
        self.step = 0;
    }
}

/// A tournament over a pick set's counters: by weight class when the weights take at most
/// [`MAX_CLASSES`] values, else the kinetic tree (whose memory is kept for the next build).
pub(super) struct Tournament {
    by_class: bool,
    len: usize,
    classes: ClassWrr,
    tree: SmoothWrr,
}

impl Tournament {
    pub fn new(weights: &[i32], counters: &[i64]) -> Tournament {
        let mut t = Tournament {
            by_class: false,
            len: 0,
            classes: ClassWrr::new(),
            tree: SmoothWrr::new(&[], &[]),
        };
        t.rebuild(weights, counters);
        t
    }

    /// Starts over from `counters` with `weights`, in the memory held.
    pub fn rebuild(&mut self, weights: &[i32], counters: &[i64]) {
        self.len = weights.len();
        self.by_class = self.classes.rebuild(weights, counters);
        if !self.by_class {
            self.tree.rebuild(weights, counters);
        }
    }

    /// The next pick (an index into the weights it was built with).
    #[inline]
    pub fn next(&mut self) -> u32 {
        if self.by_class {
            self.classes.next()
        } else {
            self.tree.next()
        }
    }

    /// One step without a pick (see [`SmoothWrr::advance`]).
    #[inline]
    pub fn advance(&mut self) -> (u32, i64) {
        if self.by_class {
            self.classes.advance()
        } else {
            self.tree.advance()
        }
    }

    /// Lowers the line the latest `advance` returned, at `pos`, by `amount`.
    #[inline]
    pub fn lower(&mut self, pos: u32, amount: i64) {
        if self.by_class {
            self.classes.lower(pos, amount)
        } else {
            self.tree.lower(pos, amount)
        }
    }

    /// The counters now, in the order of the weights.
    pub fn counters(&self) -> impl Iterator<Item = i64> + '_ {
        (0..self.len).map(|j| {
            if self.by_class {
                self.classes.counter(j)
            } else {
                self.tree.counter(j)
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::smooth_wrr::tests::Lcg;
    use super::*;

    fn walk(current: &mut [i64], weights: &[i32]) -> u32 {
        let total: i64 = weights.iter().map(|&w| w as i64).sum();
        super::super::period::walk_step(current, weights, total)
    }

    fn counters(wrr: &ClassWrr) -> Vec<i64> {
        (0..wrr.bases.len()).map(|p| wrr.counter(p)).collect()
    }

    /// New and reused (rebuilt over whatever set it held before) against Dubbo's walk, for
    /// random sets of up to `MAX_CLASSES` distinct weights and random starting counters.
    #[test]
    fn equals_the_walk_for_few_weights_and_any_counters() {
        let mut rng = Lcg(23);
        let mut reused = ClassWrr::new();
        for case in 0..400 {
            let n = 1 + rng.below(60) as usize;
            let classes = 1 + rng.below(MAX_CLASSES as u64);
            // Small weights make ties and zero weights common; large ones long periods.
            let scale = [1, 3, 1000, 1 << 28][case % 4];
            let palette: Vec<i32> = (0..classes)
                .map(|_| (rng.below(scale + 1)) as i32)
                .collect();
            let weights: Vec<i32> = (0..n)
                .map(|_| palette[rng.below(classes) as usize])
                .collect();
            if weights.iter().all(|&w| w == 0) {
                continue;
            }
            let spread = (scale as i64 + 1) * n as i64;
            let start: Vec<i64> = (0..n)
                .map(|_| match case % 3 {
                    0 => 0,
                    _ => rng.below(2 * spread as u64) as i64 - spread,
                })
                .collect();
            let mut current = start.clone();
            let mut fresh = ClassWrr::new();
            assert!(fresh.rebuild(&weights, &start));
            assert!(reused.rebuild(&weights, &start));
            for step in 0..2000 {
                let want = walk(&mut current, &weights);
                assert_eq!(fresh.next(), want, "step {step}, weights {weights:?}");
                assert_eq!(reused.next(), want, "step {step}, reused");
            }
            assert_eq!(counters(&fresh), current);
            assert_eq!(counters(&reused), current);
        }
    }

    #[test]
    fn refuses_more_distinct_weights_than_it_serves() {
        let mut wrr = ClassWrr::new();
        let weights: Vec<i32> = (1..=MAX_CLASSES as i32 + 1).collect();
        assert!(!wrr.rebuild(&weights, &vec![0; weights.len()]));
        assert!(wrr.bases.is_empty());
        assert!(wrr.rebuild(&weights[1..], &[0; MAX_CLASSES]));
        assert_eq!(wrr.bases.len(), MAX_CLASSES);
    }

    #[test]
    fn stays_exact_across_a_rebase_of_the_time_origin() {
        let weights = [1_000_000_007, 3, 1_000_000_007, 3];
        let mut wrr = ClassWrr::new();
        assert!(wrr.rebuild(&weights, &[0; 4]));
        let mut current = [0i64; 4];
        for step in 0..REBASE_EVERY + 100 {
            assert_eq!(wrr.next(), walk(&mut current, &weights), "step {step}");
        }
        assert!(wrr.step < REBASE_EVERY);
        assert_eq!(counters(&wrr), current);
    }
}
