//! The comparison of a pick's looks: the field they gather in (on the stack or in a buffer),
//! the band of equivalent latencies measured from the fastest, and what "better" means.

use super::look::{neutral_latency, Look};
use super::{ESCALATION, TIE};
use crate::rng::Rng;
use std::mem::MaybeUninit;

/// The looks of one pick, compared once all are in: "equivalent latency" is measured from the
/// fastest of them, so it cannot drift. (Compared pairwise as they come, A ≈ B and B ≈ C let C
/// replace A although C is 1.25² × A, and in a scan in set order the last positions win such
/// chains: a full scan's share grew with an invoker's position in the set.)
pub(super) struct Field<S: Store> {
    looks: S,
    /// The lowest latency seen.
    pub(super) fastest: f64,
    /// The latency of an invoker without a sample.
    pub(super) neutral: f64,
}

/// Looks a pick's field holds: the most a pick of `peakewma.choices` (at most 16) plus its
/// escalation compares.
pub(super) const FIELD: usize = 16 + ESCALATION;
/// Looks a full scan's field holds on the stack (5 KB, left uninitialised); a wider set
/// goes to a thread-local buffer. (128 rather than 64: a scan of 100 into the buffer cost 8 %
/// more instructions.)
pub(super) const SCAN_FIELD: usize = 128;

/// Where a field keeps its looks.
pub(super) trait Store {
    fn push(&mut self, entry: Entry);
    fn as_slice(&self) -> &[Entry];
}

/// Up to N looks on the stack, not initialised until pushed (a pick pays for the looks it
/// takes, not for the capacity).
pub(super) struct Inline<const N: usize> {
    entries: [MaybeUninit<Entry>; N],
    len: usize,
}

impl<const N: usize> Inline<N> {
    pub(super) fn new() -> Self {
        Inline {
            entries: [const { MaybeUninit::uninit() }; N],
            len: 0,
        }
    }
}

impl<const N: usize> Store for Inline<N> {
    fn push(&mut self, entry: Entry) {
        // Never full: a pick gathers at most FIELD looks (`choices` ≤ 16, then ≤ ESCALATION
        // more), and `scan_all` takes an inline field only for a set that fits it.
        debug_assert!(self.len < N);
        if self.len < N {
            self.entries[self.len].write(entry);
            self.len += 1;
        }
    }

    fn as_slice(&self) -> &[Entry] {
        // SAFETY: the first `len` entries were written by `push`; `Entry` is `Copy`.
        unsafe { std::slice::from_raw_parts(self.entries.as_ptr().cast::<Entry>(), self.len) }
    }
}

impl Store for &mut Vec<Entry> {
    fn push(&mut self, entry: Entry) {
        Vec::push(self, entry);
    }

    fn as_slice(&self) -> &[Entry] {
        self
    }
}

/// What comparing one look needs, its latency settled (the neutral one without a sample).
#[derive(Clone, Copy)]
pub(super) struct Entry {
    pub(super) pos: usize,
    pub(super) latency: f64,
    active: i64,
    weight: u64,
    rank: u64,
}

impl Look {
    pub(super) fn entry(&self, neutral: f64) -> Entry {
        Entry {
            pos: self.pos,
            latency: self.latency(neutral),
            active: self.active,
            weight: self.weight,
            rank: self.rank,
        }
    }
}

impl<S: Store> Field<S> {
    /// A field whose first look (drawn by weight) is kept unless another is better.
    // Always inline: called, it took a scan's field (5 KB on the stack) by copy.
    #[inline(always)]
    pub(super) fn new(first: Look, typical: f64, mut looks: S) -> Self {
        let neutral = neutral_latency(typical);
        let first = first.entry(neutral);
        looks.push(first);
        Field {
            looks,
            fastest: first.latency,
            neutral,
        }
    }

    pub(super) fn push(&mut self, entry: Entry) {
        if entry.latency < self.fastest {
            self.fastest = entry.latency;
        }
        self.looks.push(entry);
    }

    pub(super) fn choose(&self, rng: &Rng<'_>) -> Entry {
        let band = self.fastest * TIE;
        let looks = self.looks.as_slice();
        let mut best = looks[0];
        for entry in &looks[1..] {
            if better(entry, &best, band) {
                best = *entry;
            }
        }
        // Rank 0: preferences are off (with them on, ranks differ and already decide ties).
        if best.pos != looks[0].pos && best.latency <= band && best.rank == 0 {
            return draw_among_ties(looks, best, band, rng);
        }
        best
    }
}

/// The pick once the first look lost to `best`, an equivalent latency: one of the looks tied
/// with it (latency within `band`, the same calls in flight relative to weight, the same
/// preference rank) that, like it, are better than the first, drawn in proportion to weight (a
/// weighted reservoir of one). A full scan's looks are in set order and `choose` keeps the
/// first of such ties, so without this draw the first idle invoker after a busy or slow one in
/// set order took every call that one lost (with many consumers each holding a call or two,
/// about a double share). Out of line: a pick whose first look stands pays one comparison.
#[inline(never)]
fn draw_among_ties(looks: &[Entry], best: Entry, band: f64, rng: &Rng<'_>) -> Entry {
    let first = &looks[0];
    let (mut pick, mut tied) = (best, 0u64);
    for c in &looks[1..] {
        let same_load =
            c.active as u128 * best.weight as u128 == best.active as u128 * c.weight as u128;
        if c.weight == 0
            || c.latency > band
            || !same_load
            || c.rank != best.rank
            || !better(c, first, band)
        {
            continue;
        }
        tied += c.weight;
        if tied == c.weight || rng.below(tied) < c.weight {
            pick = *c;
        }
    }
    pick
}

/// True when challenger `c` should replace incumbent `i`, latencies up to `band` counting as
/// equivalent (in a pick, TIE × the fastest latency it saw).
#[inline(always)]
pub(super) fn better(c: &Entry, i: &Entry, band: f64) -> bool {
    let (lc, li) = (c.latency, i.latency);
    if lc <= band && li <= band {
        // Equivalent latencies: less loaded after this call, relative to weight (p2c); at equal
        // load and weight, this balancer's preference.
        return fewer_after_call(c, i)
            || (c.active == i.active && c.weight == i.weight && c.rank < i.rank);
    }
    lc * (c.active as f64 + 1.0) * (i.weight as f64)
        < li * (i.active as f64 + 1.0) * (c.weight as f64)
}

/// (c's calls in flight + 1) / c's weight ≤ i's calls in flight / i's weight, cross-multiplied:
/// in u64 when neither product overflows (always, short of millions of unreported calls at
/// the largest weights), else exactly in u128.
#[inline(always)]
fn fewer_after_call(c: &Entry, i: &Entry) -> bool {
    // Calls in flight are never negative (`CallStats::active` clamps at 0).
    let (ca, ia) = (c.active as u64, i.active as u64);
    match ((ca + 1).checked_mul(i.weight), ia.checked_mul(c.weight)) {
        (Some(left), Some(right)) => left <= right,
        _ => (ca as u128 + 1) * i.weight as u128 <= ia as u128 * c.weight as u128,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(active: i64, weight: u64) -> Entry {
        Entry {
            pos: 0,
            latency: 1.0,
            active,
            weight,
            rank: 0,
        }
    }

    #[test]
    fn load_comparison_is_exact_past_u64_products() {
        // (c + 1) / wc <= i / wi, on both sides of equality, with products that fit u64 and
        // with products of about 2^71 (a weight of 2^31 in fixed point x 2^10, 2^30 calls).
        let big_weight = (i32::MAX as u64) << 10;
        let many = 1i64 << 30;
        for (c, i, expected) in [
            (entry(0, 100), entry(1, 100), true),
            (entry(1, 100), entry(1, 100), false),
            (entry(1, 200), entry(1, 100), true),
            (entry(2, 200), entry(1, 100), false),
            (entry(many - 1, big_weight), entry(many, big_weight), true),
            (entry(many, big_weight), entry(many, big_weight), false),
            (entry(many, big_weight), entry(many + 1, big_weight), true),
            (
                entry(2 * many + 1, 2 * big_weight),
                entry(many + 1, big_weight),
                true,
            ),
            (
                entry(2 * many + 2, 2 * big_weight),
                entry(many + 1, big_weight),
                false,
            ),
        ] {
            assert_eq!(
                (c.active as u64 + 1).checked_mul(i.weight).is_none(),
                c.active > 1000,
                "the large cases, and only they, overflow u64"
            );
            assert_eq!(
                fewer_after_call(&c, &i),
                expected,
                "c = {}/{}, i = {}/{}",
                c.active,
                c.weight,
                i.active,
                i.weight
            );
        }
    }
}
