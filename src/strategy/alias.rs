//! Weighted random draws in O(1): Vose's alias method in exact integer arithmetic, built once
//! per update from the configured weights.
//!
//! `random` and `leastactive` promise Dubbo's distribution exactly (`weight / total`, zero
//! weights never drawn), so the thresholds are integers in units of the total weight rather
//! than fixed-point fractions: a column keeps its own position when a uniform offset in
//! `[0, total)` falls below its threshold, else yields its alias. The only inexactness left is
//! that of turning 64 random bits into a bounded integer by multiply-shift (below 2^-64 · n),
//! the same as a prefix-sum pick. A draw is one random number, one multiply for the offset and
//! one load, where a binary search over prefix sums is a chain of log2(n) dependent loads.

use crate::rng::Rng;

pub(crate) struct Alias {
    /// Per column: `(threshold, alias)`; threshold in `[0, total]`. A `Vec` so that a table
    /// rebuilt for another subset reuses its memory (`rebuild`).
    columns: Vec<(u64, u32)>,
    total: u64,
}

/// The working lists of an alias table's construction, kept by a caller that rebuilds tables
/// often (a thread's filtered views) so that rebuilding allocates nothing once they have grown.
#[derive(Default)]
pub(crate) struct AliasScratch {
    left: Vec<u128>,
    small: Vec<usize>,
    large: Vec<usize>,
}

/// `if keep { a } else { b }` without a branch, for a condition that is a coin toss
/// (`std::hint::select_unpredictable` needs Rust 1.88; the crate supports 1.80).
#[inline(always)]
pub(crate) fn choose(keep: bool, a: usize, b: usize) -> usize {
    b ^ ((a ^ b) & (keep as usize).wrapping_neg())
}

impl Alias {
    /// None when the weights do not call for a weighted draw: all equal, or all zero (Dubbo
    /// then picks uniformly).
    pub fn new(weights: impl ExactSizeIterator<Item = u64> + Clone) -> Option<Alias> {
        let mut table = Alias::empty();
        table
            .rebuild(weights, &mut AliasScratch::default())
            .then_some(table)
    }

    /// Whether the table has columns to draw from (false for `empty`, and after a `rebuild`
    /// that returned false).
    #[inline(always)]
    pub fn is_weighted(&self) -> bool {
        self.total != 0
    }

    /// A table with no columns, to `rebuild`.
    pub fn empty() -> Alias {
        Alias {
            columns: Vec::new(),
            total: 0,
        }
    }

    /// Builds the table of `weights` in place, in its own memory and `scratch`'s; false (the
    /// table then holds nothing to draw from) when the weights do not call for a weighted draw,
    /// as for `new`.
    pub fn rebuild(
        &mut self,
        weights: impl ExactSizeIterator<Item = u64> + Clone,
        scratch: &mut AliasScratch,
    ) -> bool {
        self.columns.clear();
        self.total = 0;
        let n = weights.len();
        let total: u64 = weights.clone().sum();
        let mut it = weights.clone();
        let Some(first) = it.next() else {
            return false;
        };
        if total == 0 || it.all(|w| w == first) {
            return false;
        }
        // Column i holds weight_i · n in units where every column's capacity is `total`.
        let AliasScratch { left, small, large } = scratch;
        left.clear();
        left.extend(weights.map(|w| w as u128 * n as u128));
        let capacity = total as u128;
        let columns = &mut self.columns;
        columns.resize(n, (0, 0));
        small.clear();
        large.clear();
        for (i, &l) in left.iter().enumerate() {
            if l < capacity {
                small.push(i);
            } else {
                large.push(i);
            }
        }
        while let (Some(&s), Some(&l)) = (small.last(), large.last()) {
            small.pop();
            columns[s] = (left[s] as u64, l as u32);
            left[l] -= capacity - left[s];
            if left[l] < capacity {
                large.pop();
                small.push(l);
            }
        }
        // In exact arithmetic both lists empty together; whatever is left is full.
        for &i in large.iter().chain(small.iter()) {
            columns[i] = (total, i as u32);
        }
        self.total = total;
        true
    }

    // Always inline, for the reason given at `Rng::next_u64`.
    #[inline(always)]
    pub fn draw(&self, rng: &Rng) -> usize {
        let product = rng.next_u64() as u128 * self.columns.len() as u128;
        let column = (product >> 64) as usize;
        let offset = ((product as u64 as u128 * self.total as u128) >> 64) as u64;
        let (threshold, alias) = self.columns[column];
        // Which way this goes is a coin toss by design: a branch would be mispredicted about
        // half the time (about 14 % of a select+report through JNI, by perf).
        choose(offset < threshold, column, alias as usize)
    }

    /// A position of `0..n` by `table` (`Some` when the weights differ), else uniformly:
    /// `Alias::new` gives None for equal or all-zero weights.
    #[inline(always)]
    pub fn draw_or_uniform(table: Option<&Alias>, n: usize, rng: &Rng) -> usize {
        match table {
            Some(alias) => alias.draw(rng),
            None => rng.below(n as u64) as usize,
        }
    }

    /// Each position's share of all draws, in units of `1 / (n · total)` (for tests).
    #[cfg(test)]
    fn implied(&self) -> Vec<u128> {
        let mut mass = vec![0u128; self.columns.len()];
        for (i, &(t, a)) in self.columns.iter().enumerate() {
            mass[i] += t as u128;
            mass[a as usize] += self.total as u128 - t as u128;
        }
        mass
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_for_any_weights() {
        for weights in [
            vec![99u64, 1],
            vec![1, 99],
            vec![600, 0, 300, 60, 40],
            vec![100, 150, 200, 100, 150, 200, 100],
            vec![1, 1, 1, 1_000_000],
            vec![i32::MAX as u64, 1, i32::MAX as u64],
            vec![0, 0, 7],
            (1..=1000).collect(),
        ] {
            let alias = Alias::new(weights.iter().copied()).unwrap();
            // Exactly weight / total: mass / (n · total) == w / total.
            let n = weights.len() as u128;
            for (i, (&w, m)) in weights.iter().zip(alias.implied()).enumerate() {
                assert_eq!(m, w as u128 * n, "{weights:?}: position {i}");
            }
        }
    }

    #[test]
    fn uniform_cases_need_no_table() {
        assert!(Alias::new([5u64, 5, 5].into_iter()).is_none());
        assert!(Alias::new([0u64, 0].into_iter()).is_none());
        assert!(Alias::new(std::iter::empty::<u64>()).is_none());
    }

    #[test]
    fn zero_weights_are_never_drawn() {
        let alias = Alias::new([0u64, 3, 0, 1].into_iter()).unwrap();
        let rng = crate::rng::seeded_for_test(7);
        let mut counts = [0u32; 4];
        for _ in 0..40_000 {
            counts[alias.draw(&rng)] += 1;
        }
        assert_eq!((counts[0], counts[2]), (0, 0));
        // Binomial(40 000, 3/4): sd ≈ 87; 5 sd.
        assert!((counts[1] as i64 - 30_000).abs() < 435, "{counts:?}");
    }
}
