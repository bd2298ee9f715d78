//! Exact smooth weighted round robin (Dubbo's and nginx's sequence) in O(log n) amortised per
//! pick, for any weights and any starting counters.
//!
//! After `t` steps an invoker's counter is `base + t·weight`, where `base` drops by the total
//! weight each time it is picked: a set of lines, and each pick is the first line that is
//! highest at `t`. A kinetic tournament tree keeps, for every subtree, its winner at the
//! current step and the first step at which its comparison can flip; a step refreshes only the
//! subtrees with such an event due, then moves the picked line down along its path to the root.
//! Ties go to the lower position, as in Dubbo's walk (`current > max` keeps the first maximum).

const NEVER: i64 = i64::MAX;
const NONE: u32 = u32::MAX;
/// Steps between moving the time origin, so that `step · weight` stays far from overflow.
const REBASE_EVERY: i64 = 1 << 20;

/// A subtree's winning line (copied up from its leaf, so that a comparison reads the two
/// children side by side instead of chasing their winners' positions) and its events.
#[derive(Clone, Copy)]
struct Node {
    base: i64,
    weight: i64,
    /// The first step at which this node's comparison may change winner.
    flips_at: i64,
    /// The earliest `flips_at` in the node's subtree.
    due_at: i64,
    /// The winning position; `NONE` for a subtree of padding leaves.
    winner: u32,
}

const EMPTY: Node = Node {
    base: 0,
    weight: 0,
    flips_at: NEVER,
    due_at: NEVER,
    winner: NONE,
};

pub(crate) struct SmoothWrr {
    total: i64,
    step: i64,
    /// Leaves are `size..size + n`; node `k` has children `2k` and `2k + 1`. A counter is
    /// `base + step · weight`.
    size: usize,
    nodes: Box<[Node]>,
}

impl SmoothWrr {
    /// The sequence from `counters` (Dubbo's `current` values, in set order) with `weights`.
    /// Weights must be non-negative (a sum of zero: every counter stays where it is).
    pub fn new(weights: &[i32], counters: &[i64]) -> SmoothWrr {
        let mut tree = SmoothWrr {
            total: 0,
            step: 0,
            size: 0,
            nodes: Box::new([]),
        };
        tree.rebuild(weights, counters);
        tree
    }

    /// Starts over from `counters` with `weights`, as `new` does, reusing the tree's memory
    /// when the set is no larger than the one it last held.
    pub fn rebuild(&mut self, weights: &[i32], counters: &[i64]) {
        debug_assert_eq!(weights.len(), counters.len());
        let n = weights.len();
        let size = n.next_power_of_two().max(2);
        if self.nodes.len() < 2 * size {
            self.nodes = vec![EMPTY; 2 * size].into();
        } else {
            self.nodes[..2 * size].fill(EMPTY);
        }
        self.total = weights.iter().map(|&w| w as i64).sum();
        self.step = 0;
        self.size = size;
        for (pos, (&w, &c)) in weights.iter().zip(counters).enumerate() {
            self.nodes[size + pos] = Node {
                base: c,
                weight: w as i64,
                winner: pos as u32,
                ..EMPTY
            };
        }
        for k in (1..size).rev() {
            self.recompute(k);
        }
    }

    /// The next pick: every counter grows by its weight, the first highest is picked and drops
    /// by the total.
    pub fn next(&mut self) -> u32 {
        let (picked, _) = self.advance();
        self.lower(picked, self.total);
        picked
    }

    /// One step without a pick: every counter grows by its weight; returns the first highest
    /// and its counter. The caller then lowers whichever line it picks (`lower`), or none when
    /// the pick went to a counter kept outside the tournament.
    pub fn advance(&mut self) -> (u32, i64) {
        if self.step == REBASE_EVERY {
            self.rebase();
        }
        self.step += 1;
        self.refresh(1);
        let root = self.nodes[1];
        (root.winner, root.base + self.step * root.weight)
    }

    /// Lowers the counter at `pos` by `amount` (a pick's total weight).
    pub fn lower(&mut self, pos: u32, amount: i64) {
        let mut k = self.size + pos as usize;
        self.nodes[k].base -= amount;
        while k > 1 {
            k /= 2;
            self.recompute(k);
        }
    }

    /// The counter at `pos` now.
    #[inline]
    pub fn counter(&self, pos: usize) -> i64 {
        let leaf = &self.nodes[self.size + pos];
        leaf.base + self.step * leaf.weight
    }

    /// The counters now (Dubbo's `current` values), in set order.
    pub fn counters(&self) -> impl Iterator<Item = i64> + '_ {
        self.nodes[self.size..2 * self.size]
            .iter()
            .take_while(|leaf| leaf.winner != NONE)
            .map(|leaf| leaf.base + self.step * leaf.weight)
    }

    /// Brings the subtree at `k` up to the current step.
    fn refresh(&mut self, k: usize) {
        if self.nodes[k].due_at > self.step {
            return;
        }
        // Leaves never have an event, so `k` is internal here.
        self.refresh(2 * k);
        self.refresh(2 * k + 1);
        self.recompute(k);
    }

    /// Re-decides node `k` from its children (which must be current).
    #[inline]
    fn recompute(&mut self, k: usize) {
        let (left, right) = (self.nodes[2 * k], self.nodes[2 * k + 1]);
        let (winner, flips_at) = if right.winner == NONE {
            (left, NEVER)
        } else if left.winner == NONE {
            (right, NEVER)
        } else if left.base + self.step * left.weight >= right.base + self.step * right.weight {
            // The right line takes over once strictly above the left one.
            (left, self.overtakes(&right, &left, false))
        } else {
            // The left line takes over as soon as it is level (ties go left).
            (right, self.overtakes(&left, &right, true))
        };
        self.nodes[k] = Node {
            flips_at,
            due_at: flips_at.min(left.due_at).min(right.due_at),
            ..winner
        };
    }

    /// The first step after the current one at which `rising`'s counter reaches (`on_tie`) or
    /// passes `leading`'s, both lines as they are now.
    #[inline]
    fn overtakes(&self, rising: &Node, leading: &Node, on_tie: bool) -> i64 {
        let gain = rising.weight - leading.weight;
        if gain <= 0 {
            return NEVER;
        }
        // gap(s) = base_leading - base_rising - s·gain; it is > 0 (or ≥ 0) at the current step.
        let (quotient, remainder) = floor_div(leading.base - rising.base, gain);
        let at = if on_tie {
            quotient + i64::from(remainder != 0)
        } else {
            quotient + 1
        };
        at.max(self.step + 1)
    }

    /// Moves the time origin to the current step (counters unchanged).
    fn rebase(&mut self) {
        let step = self.step;
        for node in self.nodes[..2 * self.size].iter_mut() {
            node.base += step * node.weight;
            for t in [&mut node.flips_at, &mut node.due_at] {
                if *t != NEVER {
                    *t -= step;
                }
            }
        }
        self.step = 0;
    }
}

/// `(⌊a / b⌋, a mod b)` for `b > 0`. A float division plus an exact correction: an integer
/// division is the slowest instruction of a step, and there is one per node on the pick's path.
#[inline]
fn floor_div(a: i64, b: i64) -> (i64, i64) {
    let mut q = (a as f64 / b as f64) as i64;
    // The float quotient is within one or two of the exact one while |a| < 2^53; the loops
    // make it exact whatever the magnitude.
    let mut r = a.wrapping_sub(q.wrapping_mul(b));
    while r < 0 {
        q -= 1;
        r += b;
    }
    while r >= b {
        q += 1;
        r -= b;
    }
    (q, r)
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// Dubbo's O(n) walk, as roundrobin runs it where no tournament is used.
    fn walk(current: &mut [i64], weights: &[i32]) -> u32 {
        let total: i64 = weights.iter().map(|&w| w as i64).sum();
        super::super::period::walk_step(current, weights, total)
    }

    /// A small deterministic generator for the round-robin tests.
    pub(in super::super) struct Lcg(pub(in super::super) u64);
    impl Lcg {
        pub(in super::super) fn below(&mut self, bound: u64) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (self.0 >> 33) % bound
        }
    }

    /// The tree, new and `reused` (rebuilt over whatever set it held before), against the walk.
    fn check(weights: &[i32], start: &[i64], steps: usize, reused: &mut SmoothWrr) {
        let mut current = start.to_vec();
        let mut tree = SmoothWrr::new(weights, start);
        reused.rebuild(weights, start);
        for step in 0..steps {
            let want = walk(&mut current, weights);
            assert_eq!(tree.next(), want, "step {step}, weights {weights:?}");
            assert_eq!(
                reused.next(),
                want,
                "step {step}, rebuilt, weights {weights:?}"
            );
        }
        assert_eq!(tree.counters().collect::<Vec<_>>(), current);
        assert_eq!(reused.counters().collect::<Vec<_>>(), current);
    }

    #[test]
    fn equals_the_walk_for_random_weights_and_counters() {
        let mut rng = Lcg(11);
        let mut reused = SmoothWrr::new(&[], &[]);
        for case in 0..400 {
            // Sizes of exactly a power of two too: their leaves fill the tree's last level.
            let n = if case % 7 == 0 {
                1 << rng.below(6)
            } else {
                1 + rng.below(40) as usize
            };
            // Small weight ranges make ties and zero weights common; large ones make long periods.
            let range = [2, 4, 10, 1000, 1 << 30][case % 5];
            let weights: Vec<i32> = (0..n).map(|_| rng.below(range) as i32).collect();
            if weights.iter().all(|&w| w == 0) {
                continue;
            }
            let spread = range as i64 * n as i64;
            let start: Vec<i64> = (0..n)
                .map(|_| {
                    if case % 3 == 0 {
                        0
                    } else {
                        rng.below(2 * spread as u64) as i64 - spread
                    }
                })
                .collect();
            check(&weights, &start, 2000, &mut reused);
        }
    }

    #[test]
    fn equal_weights_go_in_set_order() {
        let mut tree = SmoothWrr::new(&[5, 5, 5, 5], &[0; 4]);
        let picks: Vec<u32> = (0..8).map(|_| tree.next()).collect();
        assert_eq!(picks, [0, 1, 2, 3, 0, 1, 2, 3]);
    }

    #[test]
    fn stays_exact_across_a_rebase_of_the_time_origin() {
        let weights = [3, 1_000_000_007, 5, 999_999_937];
        let mut tree = SmoothWrr::new(&weights, &[0; 4]);
        let mut current = [0i64; 4];
        tree.step = REBASE_EVERY - 50;
        for node in tree.nodes.iter_mut() {
            node.base -= (REBASE_EVERY - 50) * node.weight;
        }
        for k in (1..tree.size).rev() {
            tree.recompute(k);
        }
        for step in 0..200 {
            assert_eq!(tree.next(), walk(&mut current, &weights), "step {step}");
        }
        assert!(tree.step < REBASE_EVERY);
    }
}
