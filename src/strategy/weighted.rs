//! Drawing distinct candidates in proportion to weight: the sampling half of `p2c` and
//! `peakewma` (and the weights of `boundedhash`).
//!
//! Weights are honoured by sampling, not only by comparing: P2C that samples uniformly and then
//! compares load / weight gives a 99 %-weight invoker about 66 % of an idle cluster's traffic
//! (tower #696). Here the first candidate is drawn in proportion to weight and kept unless a
//! later one is clearly less loaded, so an idle cluster sees exactly the weights.
//!
//! Fast path (whole set, no warm-up or slow start in progress): an alias table of the configured
//! weights (Vose), built on update, so that a draw is one random number and two loads whatever
//! n; a distinct draw retries a few times, then skips the weight intervals of the candidates
//! already drawn in prefix sums (exact, no rejection). Otherwise (a subset, or weights that
//! depend on time) a few rejection rounds over the same table, then an exact O(k) walk over the
//! candidates' effective weights. Never allocates.

use super::alias::{Alias, AliasScratch};
use super::slow_start::{Ramp, SlowStart};
use super::Ctx;
use crate::balancer::{Member, Snapshot};
use crate::clock::Clock;
use crate::error::Status;

/// Fixed-point scale of effective weights while they ramp (slow start multiplies them).
pub(crate) const SCALE: u64 = 1024;
/// Rejection rounds before the exact walk.
const TRIES: usize = 16;
/// Most candidates one pick may draw (`choices` ≤ 16, plus peakewma's escalation).
pub(crate) const MAX_DRAWS: usize = 24;

/// Configured weights of one fixed subset of the set (the local zone, or the invokers not
/// ejected), built when the filter prepares that subset: draws among it in O(1) instead of
/// rejection rounds over the whole set's table.
pub(crate) struct SubsetWeights {
    /// The subset's draw table; empty (`is_weighted` false) when its weights are all equal or
    /// all zero: uniform draws. Kept, empty, for the next `rebuild`.
    alias: Alias,
    /// Running sums of the subset's weights, in subset order (for distinct pairs).
    prefix: Vec<u64>,
}

impl SubsetWeights {
    pub fn new(members: &[Member], positions: &[u32]) -> SubsetWeights {
        let mut subset = SubsetWeights {
            alias: Alias::empty(),
            prefix: Vec::new(),
        };
        subset.rebuild(members, positions, &mut AliasScratch::default());
        subset
    }

    /// Rebuilds these weights for another subset in their own memory (and `scratch`'s): a
    /// thread's filtered view is rebuilt on every ejection, on the calls' path, which must not
    /// allocate once its buffers have grown.
    pub fn rebuild(&mut self, members: &[Member], positions: &[u32], scratch: &mut AliasScratch) {
        let weights = positions
            .iter()
            .map(|&p| members[p as usize].weight.max(0) as u64);
        self.prefix.clear();
        self.prefix.extend(weights.clone().scan(0u64, |sum, w| {
            *sum += w;
            Some(*sum)
        }));
        self.alias.rebuild(weights, scratch);
    }

    /// The draw table, None when the subset's draws are uniform.
    #[inline(always)]
    fn table(&self) -> Option<&Alias> {
        self.alias.is_weighted().then_some(&self.alias)
    }

    /// Sum of the subset's configured weights.
    pub fn total(&self) -> u64 {
        self.prefix.last().copied().unwrap_or(0)
    }

    /// A position of `positions` (those the weights were built from) by configured weight.
    #[inline]
    pub fn draw(&self, positions: &[u32], rng: &crate::rng::Rng) -> usize {
        positions[Alias::draw_or_uniform(self.table(), positions.len(), rng)] as usize
    }

    /// Two distinct positions of `positions` (at least two), as [`Weights::pair`] draws them
    /// from the whole set.
    #[inline(always)]
    pub fn pair(&self, positions: &[u32], rng: &crate::rng::Rng) -> (usize, Option<usize>) {
        let (i, j) = distinct_pair(&self.prefix, self.table(), rng);
        (positions[i] as usize, j.map(|j| positions[j] as usize))
    }
}

/// Built on update for the whole set.
pub(crate) struct Weights {
    prefix: Box<[u64]>,
    /// Alias table: `(threshold << 32) | alias` per position; a draw of column i keeps i when the
    /// fraction (32 bits) is below the threshold, else takes the alias.
    alias: Box<[u64]>,
    total: u64,
    /// Every configured weight is the same (draws are uniform).
    equal: bool,
    pub ramp: Option<Ramp>,
}

impl Weights {
    /// The weights prepared for `snapshot` by a strategy that uses them (p2c, peakewma).
    pub(crate) fn of(snapshot: &Snapshot) -> Result<&Weights, Status> {
        snapshot
            .prepared
            .as_ref()
            .and_then(|p| p.downcast_ref::<Weights>())
            .ok_or(Status::NoProvider)
    }

    pub fn new(members: &[Member], previous: &Snapshot, slow: Option<&SlowStart>) -> Weights {
        let mut total = 0u64;
        let prefix = members
            .iter()
            .map(|m| {
                total += m.weight.max(0) as u64;
                total
            })
            .collect();
        let equal = members.iter().all(|m| m.weight == members[0].weight);
        Weights {
            alias: if equal || total == 0 {
                Box::new([])
            } else {
                alias_table(members, total)
            },
            prefix,
            total,
            equal,
            ramp: slow.map(|s| s.prepare(members, previous)),
        }
    }

    /// A position drawn in proportion to configured weight (total > 0, weights not all equal).
    #[inline(always)]
    fn alias_draw(&self, rng: &crate::rng::Rng) -> usize {
        let product = rng.next_u64() as u128 * self.alias.len() as u128;
        let column = (product >> 64) as usize;
        let fraction = (product as u64) >> 32;
        let entry = self.alias[column];
        // A coin toss by design: branchless (see `Alias::draw`).
        super::alias::choose(
            fraction < entry >> 32,
            column,
            (entry & 0xffff_ffff) as usize,
        )
    }

    /// Two distinct positions of the whole set, the first in proportion to configured weight,
    /// the second by weight among the rest — what two [`Sampler::draw`]s give on the fast path,
    /// for the common pick. The second is None when only the first has any weight. Needs at
    /// least two positions.
    // Always inline: left to the compiler it stays a call in p2c's and peakewma's select
    // (about 25 instructions a pick with its prologue and the pair returned through memory).
    #[inline(always)]
    pub fn pair(&self, rng: &crate::rng::Rng) -> (usize, Option<usize>) {
        let weighted = !self.equal && self.total != 0;
        distinct_pair(&self.prefix, weighted.then_some(self), rng)
    }

    /// A position drawn in proportion to configured weight, from any table (total > 0).
    #[inline]
    fn draw_configured(&self, rng: &crate::rng::Rng) -> usize {
        if self.equal {
            rng.below(self.prefix.len() as u64) as usize
        } else {
            self.alias_draw(rng)
        }
    }

    /// The first position a [`Sampler`] over the whole set at configured weights draws: uniform
    /// when the weights are equal or all 0, else by the alias table.
    #[inline(always)]
    pub fn first_draw(&self, rng: &crate::rng::Rng) -> usize {
        if self.equal || self.total == 0 {
            rng.below(self.prefix.len() as u64) as usize
        } else {
            self.alias_draw(rng)
        }
    }

    /// Sum of the configured weights of the whole set.
    pub fn total(&self) -> u64 {
        self.total
    }

    fn position_of(&self, offset: u64) -> usize {
        self.prefix.partition_point(|&s| s <= offset)
    }
}

/// A weighted draw table: [`Weights`]' fixed-point one or an exact [`Alias`].
trait Table {
    fn draw_index(&self, rng: &crate::rng::Rng) -> usize;
}

impl Table for Weights {
    #[inline(always)]
    fn draw_index(&self, rng: &crate::rng::Rng) -> usize {
        self.alias_draw(rng)
    }
}

impl Table for Alias {
    #[inline(always)]
    fn draw_index(&self, rng: &crate::rng::Rng) -> usize {
        self.draw(rng)
    }
}

/// Two distinct indices of `0..prefix.len()` (at least two), the first drawn from `table` in
/// proportion to weight (uniformly without a table: equal or all-zero weights), the second by
/// weight among the rest; None for the second when only the first weighs anything. `prefix`
/// holds the running sums of the weights the table follows. A few redraws first (the common
/// case: the first draw does not dominate), then an exact skip of the first's interval.
#[inline(always)]
fn distinct_pair(
    prefix: &[u64],
    table: Option<&impl Table>,
    rng: &crate::rng::Rng,
) -> (usize, Option<usize>) {
    let n = prefix.len();
    let Some(table) = table else {
        let first = rng.below(n as u64) as usize;
        let mut second = rng.below(n as u64 - 1) as usize;
        if second >= first {
            second += 1;
        }
        return (first, Some(second));
    };
    let first = table.draw_index(rng);
    let weight_of = |p: usize| prefix[p] - if p == 0 { 0 } else { prefix[p - 1] };
    if n == 2 {
        let other = 1 - first;
        return (first, (weight_of(other) > 0).then_some(other));
    }
    for _ in 0..4 {
        let second = table.draw_index(rng);
        if second != first {
            return (first, Some(second));
        }
    }
    // A dominant first weight: skip its interval in the prefix sums (exact).
    let wf = weight_of(first);
    let left = prefix[n - 1] - wf;
    if left == 0 {
        return (first, None);
    }
    let mut offset = rng.below(left);
    if offset >= prefix[first] - wf {
        offset += wf;
    }
    (first, Some(prefix.partition_point(|&s| s <= offset)))
}

/// Vose's alias method over the configured weights (each column's threshold in 32-bit fixed
/// point).
fn alias_table(members: &[Member], total: u64) -> Box<[u64]> {
    let n = members.len();
    // Scaled so that the mean column is exactly 2^32.
    let scaled: Vec<u128> = members
        .iter()
        .map(|m| ((m.weight.max(0) as u128) << 32) * n as u128 / total as u128)
        .collect();
    let mut left: Vec<u128> = scaled;
    let mut table = vec![0u64; n];
    let (mut small, mut large): (Vec<usize>, Vec<usize>) =
        (0..n).partition(|&i| left[i] < 1u128 << 32);
    while let (Some(&s), Some(&l)) = (small.last(), large.last()) {
        small.pop();
        table[s] = ((left[s] as u64) << 32) | l as u64;
        left[l] -= (1u128 << 32) - left[s];
        if left[l] < 1u128 << 32 {
            large.pop();
            small.push(l);
        }
    }
    // What is left is full (up to rounding): keeps its own column.
    for i in large.into_iter().chain(small) {
        table[i] = ((u32::MAX as u64) << 32) | i as u64;
    }
    table.into()
}

/// The weights of one pick, and the candidates it has drawn so far.
pub(crate) struct Sampler<'c, 'a> {
    ctx: &'c Ctx<'a>,
    weights: &'c Weights,
    /// Some while a slow-start ramp is in progress at this call's time.
    slow: Option<&'c SlowStart>,
    /// Configured weights are exact: whole set, no warm-up, no ramp.
    exact: bool,
    /// Every candidate weighs 0: draws are uniform and comparisons use weight 1 (Dubbo's rule).
    all_zero: bool,
    /// A subset at configured weights (no warm-up or ramp) whose table the filter prepared.
    subset: Option<&'c SubsetWeights>,
    /// Drawn positions, in ascending order (for interval skipping, and distinctness beyond
    /// `SEEN_BITS`).
    drawn: [u32; MAX_DRAWS],
    len: usize,
    /// Drawn positions below `SEEN_BITS`, as bits: d choices ask "drawn?" about twenty times
    /// per pick, and a bit test is shorter than a binary search over up to 24 positions.
    seen: [u64; SEEN_WORDS],
}

const SEEN_WORDS: usize = 4;
const SEEN_BITS: usize = 64 * SEEN_WORDS;

impl<'c, 'a> Sampler<'c, 'a> {
    pub fn new(ctx: &'c Ctx<'a>, weights: &'c Weights, slow: Option<&'c SlowStart>) -> Self {
        let ramping = match (slow, &weights.ramp) {
            (Some(s), Some(r)) => r.active(s, ctx.snapshot, ctx.clock),
            _ => false,
        };
        let exact = ctx.is_all && !ramping && ctx.weights_static();
        let subset = match ctx.subset {
            Some(s) if !exact && !ramping && s.total() > 0 && ctx.weights_static() => Some(s),
            _ => None,
        };
        Sampler {
            ctx,
            weights,
            slow: if ramping { slow } else { None },
            exact,
            all_zero: exact && weights.total == 0,
            subset,
            drawn: [0; MAX_DRAWS],
            len: 0,
            seen: [0; SEEN_WORDS],
        }
    }

    /// True when the configured weights apply as they are (the fast path).
    pub fn is_exact(&self) -> bool {
        self.exact
    }

    /// True while a slow-start ramp changes some weight at this call's time.
    pub fn is_ramping(&self) -> bool {
        self.slow.is_some()
    }

    /// True when the configured weights apply as they are at this call: whole set, no warm-up,
    /// no slow-start ramp (what [`Sampler::new`] decides, without building a sampler).
    // Always inline, as `pair`: a few compares that otherwise cost a call (about 25 instructions).
    #[inline(always)]
    pub fn exact_for(ctx: &Ctx<'_>, weights: &Weights, slow: Option<&SlowStart>) -> bool {
        ctx.is_all && Self::configured_for(ctx, weights, slow)
    }

    /// True when no weight depends on time at this call (no warm-up, no slow-start ramp), so
    /// that configured weights decide, over the whole set or a filter's subset.
    #[inline(always)]
    pub fn configured_for(ctx: &Ctx<'_>, weights: &Weights, slow: Option<&SlowStart>) -> bool {
        Self::configured_at(ctx.snapshot, weights, slow, ctx.clock)
    }

    /// [`Sampler::configured_for`] of `snapshot` at `clock`'s instant, without a context.
    #[inline(always)]
    pub fn configured_at(
        snapshot: &Snapshot,
        weights: &Weights,
        slow: Option<&SlowStart>,
        clock: &Clock,
    ) -> bool {
        snapshot.weights_static(clock)
            && match (slow, &weights.ramp) {
                (Some(s), Some(r)) => !r.active(s, snapshot, clock),
                _ => true,
            }
    }

    /// The weight a comparison uses: configured on the fast path, otherwise effective (Dubbo's
    /// warm-up, then slow start) in fixed point; 1 for everyone when all weigh 0.
    pub fn weight(&self, pos: usize) -> u64 {
        if self.all_zero {
            return 1;
        }
        if self.exact {
            return self.ctx.member(pos).weight.max(0) as u64;
        }
        self.effective(pos)
    }

    /// [`Sampler::weight`] of a member of the whole set when the sampler is exact (the
    /// configured weight; 1 for everyone when all weigh 0).
    #[inline(always)]
    pub fn configured_weight(&self, member: &Member) -> u64 {
        debug_assert!(self.exact);
        if self.all_zero {
            1
        } else {
            member.weight.max(0) as u64
        }
    }

    /// Effective weight in fixed point (0 only for a zero weight).
    pub fn effective(&self, pos: usize) -> u64 {
        let w = self.ctx.weight(pos).max(0) as u64;
        if w == 0 {
            return 0;
        }
        match self.slow {
            None => w * SCALE,
            Some(s) => {
                let f = s.factor(self.ctx.member(pos), self.ctx.clock.now_ms());
                ((w * SCALE) as f64 * f).max(1.0) as u64
            }
        }
    }

    #[inline]
    pub fn was_drawn(&self, pos: usize) -> bool {
        if pos < SEEN_BITS {
            return self.seen[pos / 64] >> (pos % 64) & 1 == 1;
        }
        match self.len {
            // A full scan asks this of every candidate with one drawn (its first).
            1 => self.drawn[0] == pos as u32,
            _ => self.drawn[..self.len].binary_search(&(pos as u32)).is_ok(),
        }
    }

    /// Counts `pos` as drawn (a candidate looked at outside the sampler).
    pub fn mark(&mut self, pos: usize) {
        if self.len < MAX_DRAWS && !self.was_drawn(pos) {
            self.record(pos);
        }
    }

    fn record(&mut self, pos: usize) {
        let mut i = self.len;
        while i > 0 && self.drawn[i - 1] > pos as u32 {
            self.drawn[i] = self.drawn[i - 1];
            i -= 1;
        }
        self.drawn[i] = pos as u32;
        self.len += 1;
        if pos < SEEN_BITS {
            self.seen[pos / 64] |= 1 << (pos % 64);
        }
    }

    /// Draws a candidate not drawn before, in proportion to weight (zero weights never, unless
    /// every candidate weighs 0). None when no such candidate is left.
    // Inline, with the rare cases out of line: d choices call this d times per pick, and as
    // one large function it cost about 16 instructions per call in saved registers alone
    // (`peakewma.choices=16` at n = 100: 4,651 -> 4,525 instructions per select+report).
    #[inline(always)]
    pub fn draw(&mut self) -> Option<usize> {
        if self.len == MAX_DRAWS {
            return None;
        }
        let pos = if self.exact {
            self.draw_exact()?
        } else {
            self.draw_inexact()?
        };
        self.record(pos);
        Some(pos)
    }

    /// `draw` of a subset, or while weights change with time (warm-up, slow start).
    #[inline(never)]
    fn draw_inexact(&mut self) -> Option<usize> {
        let pos = if let Some(subset) = self.subset {
            match (0..TRIES)
                .map(|_| subset.draw(self.ctx.candidates, &self.ctx.rng))
                .find(|&p| !self.was_drawn(p))
            {
                Some(p) => p,
                None => self.draw_by_walk()?,
            }
        } else {
            match self.draw_by_rejection() {
                Some(p) => p,
                None => self.draw_by_walk()?,
            }
        };
        Some(pos)
    }

    #[inline]
    fn draw_exact(&self) -> Option<usize> {
        let w = self.weights;
        if self.all_zero || w.equal {
            return self.draw_uniform();
        }
        // A few tries from the alias table (the common case: the first draw, or a second one
        // that is not dominated by the first), then an exact skip over the drawn intervals.
        for _ in 0..4 {
            let p = w.alias_draw(&self.ctx.rng);
            if !self.was_drawn(p) {
                return Some(p);
            }
        }
        self.draw_skipping_drawn()
    }

    /// `draw_exact` when every candidate weighs the same for the pick: uniform over the rest.
    #[inline(never)]
    fn draw_uniform(&self) -> Option<usize> {
        let left = self.weights.prefix.len() - self.len;
        if left == 0 {
            return None;
        }
        let mut p = self.ctx.rng.below(left as u64) as usize;
        for &d in &self.drawn[..self.len] {
            if p >= d as usize {
                p += 1;
            }
        }
        Some(p)
    }

    /// `draw_exact` after its tries from the alias table all landed on drawn candidates.
    #[inline(never)]
    fn draw_skipping_drawn(&self) -> Option<usize> {
        let w = self.weights;
        let rng = &self.ctx.rng;
        let taken: u64 = self.drawn[..self.len]
            .iter()
            .map(|&d| self.ctx.member(d as usize).weight.max(0) as u64)
            .sum();
        let left = w.total - taken;
        if left == 0 {
            return None;
        }
        // Skip the weight intervals of the drawn candidates (ascending): an exact draw among
        // the rest, with one random number.
        let mut offset = rng.below(left);
        for &d in &self.drawn[..self.len] {
            let wd = self.ctx.member(d as usize).weight.max(0) as u64;
            if offset >= w.prefix[d as usize] - wd {
                offset += wd;
            }
        }
        Some(w.position_of(offset))
    }

    fn draw_by_rejection(&self) -> Option<usize> {
        let w = self.weights;
        if w.total == 0 || self.all_zero {
            return None;
        }
        let rng = &self.ctx.rng;
        for _ in 0..TRIES {
            let pos = w.draw_configured(rng);
            if !self.ctx.contains(pos) || self.was_drawn(pos) {
                continue;
            }
            // Drawn by configured weight; accepted with probability effective / configured.
            let full = self.ctx.member(pos).weight as u64 * SCALE;
            let effective = self.effective(pos);
            if effective >= full || rng.below(full) < effective {
                return Some(pos);
            }
        }
        None
    }

    fn draw_by_walk(&mut self) -> Option<usize> {
        let ctx = self.ctx;
        if !self.all_zero {
            let mut total = 0u64;
            for &p in ctx.candidates {
                if !self.was_drawn(p as usize) {
                    total += self.effective(p as usize);
                }
            }
            if total > 0 {
                let mut offset = ctx.rng.below(total);
                for &p in ctx.candidates {
                    if self.was_drawn(p as usize) {
                        continue;
                    }
                    let e = self.effective(p as usize);
                    if offset < e {
                        return Some(p as usize);
                    }
                    offset -= e;
                }
                unreachable!("the offset is below the total");
            }
            if self.len > 0 {
                // The candidates that weigh something are all drawn.
                return None;
            }
            self.all_zero = true;
        }
        let left = ctx.candidates.len() - self.len;
        if left == 0 {
            return None;
        }
        let mut k = ctx.rng.below(left as u64) as usize;
        for &p in ctx.candidates {
            if self.was_drawn(p as usize) {
                continue;
            }
            if k == 0 {
                return Some(p as usize);
            }
            k -= 1;
        }
        None
    }

    /// Effective weight as a fraction of the configured one (1 on the fast path): below 1 while
    /// an invoker warms up or ramps.
    pub fn fraction_of_full(&self, pos: usize) -> f64 {
        if self.exact || self.all_zero {
            return 1.0;
        }
        let full = self.ctx.member(pos).weight.max(0) as u64 * SCALE;
        if full == 0 {
            return 1.0;
        }
        (self.effective(pos) as f64 / full as f64).min(1.0)
    }

    /// Whether a full scan should look at `pos` (zero weights only when all weigh 0).
    pub fn counts(&self, pos: usize) -> bool {
        self.all_zero || self.weight(pos) > 0
    }
}

#[cfg(test)]
mod tests {
    use super::alias_table;
    use crate::balancer::Member;
    use std::sync::Arc;

    fn members(weights: &[i32]) -> Vec<Member> {
        weights
            .iter()
            .enumerate()
            .map(|(i, &w)| Member {
                id: i as u64,
                address: Arc::from(format!("10.0.0.{i}:1").as_str()),
                zone: None,
                weight: w,
                start_time_ms: 0,
                warmup_ms: 0,
                state: Default::default(),
            })
            .collect()
    }

    /// The probability each position gets from the table, exactly.
    fn implied(table: &[u64]) -> Vec<f64> {
        let n = table.len() as f64;
        let mut p = vec![0.0; table.len()];
        for (i, &e) in table.iter().enumerate() {
            let keep = (e >> 32) as f64 / 4_294_967_296.0;
            p[i] += keep / n;
            p[(e & 0xffff_ffff) as usize] += (1.0 - keep) / n;
        }
        p
    }

    #[test]
    fn alias_table_is_exact() {
        for weights in [
            vec![99, 1],
            vec![1, 99],
            vec![600, 0, 300, 60, 40],
            vec![100, 150, 200, 100, 150, 200, 100],
            vec![1, 1, 1, 1_000_000],
            vec![i32::MAX, 1, i32::MAX],
        ] {
            let total: u64 = weights.iter().map(|&w| w as u64).sum();
            let p = implied(&alias_table(&members(&weights), total));
            for (i, &w) in weights.iter().enumerate() {
                let want = w as f64 / total as f64;
                assert!(
                    (p[i] - want).abs() < 1e-8,
                    "{weights:?}: {i}: {} vs {want}",
                    p[i]
                );
            }
        }
    }
}
