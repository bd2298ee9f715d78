//! `consistenthash`: Dubbo's MD5 ring (ConsistentHashLoadBalance), built on update only.

use super::{Ctx, Prepared, PreparedData, Strategy, StrategyKind};
use crate::balancer::{Member, Snapshot};
use crate::config::Config;
use crate::error::Status;
use md5::{Digest, Md5};
use std::cmp::Reverse;
use std::collections::HashMap;
use std::sync::Arc;

pub(crate) struct ConsistentHash {
    /// MD5 digests per invoker: each gives four points, so hash.nodes is rounded down to 4k.
    digests_per_invoker: u32,
}

/// The ring: `(point, owner position)` sorted by point. A pick reads its key's bucket and the
/// owner beside the point it lands on, so one cache line usually serves both (parallel arrays
/// of points and owners cost a third line per pick on large rings).
pub(crate) struct Ring {
    addresses: Box<[Arc<str>]>,
    points: Box<[(u32, u32)]>,
    /// Points that collided with a later invoker's and lost (Dubbo's later put wins), sorted:
    /// with them the ring knows every placement, so the next update can reuse it.
    shadowed: Box<[(u32, u32)]>,
    /// `buckets[b]` is the index of the first point whose top bits are at least `b` (one more
    /// entry for the end): a lookup starts in its key's bucket of about four points instead of
    /// a binary search over the whole ring (eleven dependent loads at n = 10, eighteen at 1000).
    buckets: Box<[u32]>,
    /// `32 - log2(buckets - 1)`: a point's bucket is `point >> shift`.
    shift: u32,
    /// MD5 digests per address (four points each): a pick among few candidates hashes their
    /// addresses again rather than walk the ring.
    digests_per_invoker: u32,
}

/// Points per bucket the index aims at.
const POINTS_PER_BUCKET: usize = 4;

/// Walk steps that cost as much as one MD5 digest of an address: measured at n = 10,000, a
/// digest and its four points about 890 instructions, a step 11 (`boundedhash`) to 14.
const STEPS_PER_DIGEST: u64 = 75;

impl ConsistentHash {
    pub fn new(config: &Config) -> Self {
        ConsistentHash {
            digests_per_invoker: config.hash_nodes / 4,
        }
    }

    /// The ring of `members`. Points depend only on addresses, so the points of addresses that
    /// were on `previous` are taken from it: an update hashes only new addresses and merges
    /// sorted runs, instead of 40 MD5 digests per invoker and a sort of 160·n points.
    pub(crate) fn build(&self, members: &[Member], previous: Option<&Ring>) -> Ring {
        if let Some(ring) = previous.and_then(|old| self.build_from(old, members)) {
            return ring;
        }
        // (point, position) as one integer: sorting those took half the instructions of
        // sorting the pairs (a pair's comparison is two).
        let mut placed: Vec<u64> = Vec::new();
        for (pos, m) in members.iter().enumerate() {
            points_of(&m.address, self.digests_per_invoker, |point| {
                placed.push(u64::from(point) << 32 | pos as u64)
            });
        }
        placed.sort_unstable();
        let mut split = Split::with_capacity(placed.len());
        for placement in placed {
            split.push(((placement >> 32) as u32, placement as u32));
        }
        split.into_ring(members, self.digests_per_invoker)
    }

    /// The points of one address, for the invoker at `pos`.
    fn place(&self, address: &str, pos: u32, out: &mut Vec<(u32, u32)>) {
        points_of(address, self.digests_per_invoker, |point| {
            out.push((point, pos))
        });
    }

    /// The incremental build; None when addresses repeat (their points coincide, and which
    /// copy a surviving point belonged to is ambiguous): the full build handles that.
    fn build_from(&self, old: &Ring, members: &[Member]) -> Option<Ring> {
        let mut new_pos: HashMap<&str, u32> = HashMap::with_capacity(members.len());
        for (pos, m) in members.iter().enumerate() {
            if new_pos.insert(&m.address, pos as u32).is_some() {
                return None;
            }
        }
        let mut remap = Vec::with_capacity(old.addresses.len());
        let mut seen: HashMap<&str, ()> = HashMap::with_capacity(old.addresses.len());
        for a in old.addresses.iter() {
            if seen.insert(a, ()).is_some() {
                return None;
            }
            remap.push(new_pos.get(&**a).copied());
        }
        // New addresses: hash them, as sorted runs to merge.
        let mut fresh: Vec<(u32, u32)> = Vec::new();
        for (pos, m) in members.iter().enumerate() {
            if !seen.contains_key(&*m.address) {
                self.place(&m.address, pos as u32, &mut fresh);
            }
        }
        fresh.sort_unstable();
        let mut shadowed: Vec<(u32, u32)> = old
            .shadowed
            .iter()
            .filter_map(|&(point, owner)| remap[owner as usize].map(|p| (point, p)))
            .collect();
        // Positions may have moved: equal points must be ordered by new position again.
        shadowed.sort_unstable();
        let extra = merge(&shadowed, &fresh);
        // The old ring's winners that stay, merged with the few others: one pass over the
        // ring, run by run between the others' points, without a list of all placements (the
        // winners stay sorted, as their points are distinct and filtering keeps their order).
        let mut split = Split::with_capacity(old.points.len() + extra.len());
        let keep = |run: &[(u32, u32)], split: &mut Split| {
            for &(point, owner) in run {
                if let Some(pos) = remap[owner as usize] {
                    split.push((point, pos));
                }
            }
        };
        let mut rest = &old.points[..];
        for e in extra {
            let before = rest.partition_point(|&(point, _)| point < e.0);
            keep(&rest[..before], &mut split);
            rest = &rest[before..];
            // A winner at the same point goes first if it stays, at a lower position.
            if let Some(&(point, owner)) = rest.first().filter(|&&(point, _)| point == e.0) {
                if let Some(pos) = remap[owner as usize].filter(|&pos| pos < e.1) {
                    split.push((point, pos));
                    rest = &rest[1..];
                }
            }
            split.push(e);
        }
        keep(rest, &mut split);
        Some(split.into_ring(members, self.digests_per_invoker))
    }
}

/// Placements in (point, position) order, parted into the ring's points and the shadowed ones:
/// of equal points the last (the later invoker's) wins, as Dubbo's later put does.
struct Split {
    points: Vec<(u32, u32)>,
    shadowed: Vec<(u32, u32)>,
    /// The latest placement, not yet known to win.
    last: Option<(u32, u32)>,
}

impl Split {
    fn with_capacity(placements: usize) -> Split {
        Split {
            points: Vec::with_capacity(placements),
            shadowed: Vec::new(),
            last: None,
        }
    }

    #[inline]
    fn push(&mut self, placement: (u32, u32)) {
        if let Some(last) = self.last.replace(placement) {
            if last.0 == placement.0 {
                self.shadowed.push(last);
            } else {
                self.points.push(last);
            }
        }
    }

    fn into_ring(mut self, members: &[Member], digests: u32) -> Ring {
        self.points.extend(self.last);
        Ring::from_parts(members, self.points, self.shadowed, digests)
    }
}

/// Merges two lists sorted by (point, position).
fn merge(a: &[(u32, u32)], b: &[(u32, u32)]) -> Vec<(u32, u32)> {
    let mut out = Vec::with_capacity(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        if a[i] <= b[j] {
            out.push(a[i]);
            i += 1;
        } else {
            out.push(b[j]);
            j += 1;
        }
    }
    out.extend_from_slice(&a[i..]);
    out.extend_from_slice(&b[j..]);
    out
}

/// Each point of `address` on a ring of `digests` MD5 digests per address, in Dubbo's order.
fn points_of(address: &str, digests: u32, mut each: impl FnMut(u32)) {
    let mut number = itoa_buffer();
    for i in 0..digests {
        let digest = Md5::new()
            .chain_update(address.as_bytes())
            .chain_update(format_u32(&mut number, i))
            .finalize();
        for h in 0..4 {
            each(le_word(&digest, h));
        }
    }
}

fn le_word(digest: &[u8], h: usize) -> u32 {
    u32::from_le_bytes([
        digest[4 * h],
        digest[4 * h + 1],
        digest[4 * h + 2],
        digest[4 * h + 3],
    ])
}

fn itoa_buffer() -> [u8; 10] {
    [0; 10]
}

fn format_u32(buf: &mut [u8; 10], mut v: u32) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    &buf[i..]
}

/// The point of a key: the first four digest bytes, little-endian.
pub(crate) fn key_point(key: &[u8]) -> u32 {
    super::key_digest::md5_first_word(key)
}

impl Ring {
    /// The ring of placements sorted by (point, position): among equal points the highest
    /// position wins, as a later put() overwrites an earlier one in Dubbo's TreeMap.
    #[cfg(test)]
    fn from_placements(members: &[Member], placed: &[(u32, u32)], digests: u32) -> Ring {
        let mut split = Split::with_capacity(placed.len());
        for &placement in placed {
            split.push(placement);
        }
        split.into_ring(members, digests)
    }

    /// The ring of `points` (distinct, sorted) and `shadowed` (sorted).
    fn from_parts(
        members: &[Member],
        points: Vec<(u32, u32)>,
        shadowed: Vec<(u32, u32)>,
        digests: u32,
    ) -> Ring {
        let count = (points.len() / POINTS_PER_BUCKET).next_power_of_two();
        let shift = 32 - count.trailing_zeros();
        let mut buckets = Vec::with_capacity(count + 1);
        let mut i = 0;
        for b in 0..count as u64 {
            while i < points.len() && ((points[i].0 as u64) >> shift) < b {
                i += 1;
            }
            buckets.push(i as u32);
        }
        buckets.push(points.len() as u32);
        Ring {
            addresses: members.iter().map(|m| m.address.clone()).collect(),
            points: points.into(),
            shadowed: shadowed.into(),
            buckets: buckets.into(),
            shift,
            digests_per_invoker: digests,
        }
    }

    /// True when the ring was built from these addresses, in this order (only addresses place
    /// points, so it can be kept).
    pub(crate) fn placed_like(&self, members: &[Member]) -> bool {
        self.addresses.len() == members.len()
            && self
                .addresses
                .iter()
                .zip(members)
                .all(|(a, m)| **a == *m.address)
    }

    /// Index of the first point at or after `h`, wrapping past the end.
    #[inline]
    pub(crate) fn ceiling(&self, h: u32) -> usize {
        // Every point of an earlier bucket is below `h`, every point of a later one above it.
        let b = ((h as u64) >> self.shift) as usize;
        let (lo, hi) = (self.buckets[b] as usize, self.buckets[b + 1] as usize);
        let i = lo + self.points[lo..hi].partition_point(|&(p, _)| p < h);
        if i == self.points.len() {
            0
        } else {
            i
        }
    }

    /// The owner of the point `index` positions into the ring, wrapping once past the end
    /// (`index < 2 · len`: a walk never goes round twice). A subtraction, not a division: this
    /// is on every pick.
    #[inline]
    pub(crate) fn owner_at(&self, index: usize) -> usize {
        let len = self.points.len();
        let i = if index >= len { index - len } else { index };
        self.points[i].1 as usize
    }

    /// The key's owner (`h` its point) on a ring built from the invokers in `mask` (a bitset
    /// over positions, `candidates` those positions) alone, as Dubbo builds per candidate list.
    /// Walks the ring when that is cheaper, else hashes the candidates' addresses.
    pub(crate) fn placed_among(&self, h: u32, candidates: &[u32], mask: &[u64]) -> Option<usize> {
        if self.hashing_pays(candidates.len()) {
            self.hash_placed(h, candidates)
        } else {
            self.walk_placed(h, |pos| mask[pos / 64] & (1u64 << (pos % 64)) != 0)
        }
    }

    /// True when hashing the addresses of `candidates` invokers costs less than walking to the
    /// first of their points: the walk takes about n / c steps (each invoker places as many
    /// points), hashing c × hash.nodes / 4 digests.
    pub(crate) fn hashing_pays(&self, candidates: usize) -> bool {
        #[cfg(test)]
        if let Some(forced) = FORCE_HASHING.with(|f| f.get()) {
            return forced;
        }
        let c = candidates as u64;
        let hashing = c
            .saturating_mul(c)
            .saturating_mul(self.digests_per_invoker as u64);
        hashing.saturating_mul(STEPS_PER_DIGEST) < self.addresses.len() as u64
    }

    /// `placed_among` by a walk clockwise from `h` to the first point an invoker that `accepts`
    /// takes placed there: the winner of a collision when it accepts, else the latest of those
    /// it shadowed there that accept (Dubbo's later put wins). At most once round the ring.
    pub(crate) fn walk_placed(&self, h: u32, accepts: impl FnMut(usize) -> bool) -> Option<usize> {
        self.walk_placed_taking(h, accepts, |_| true)
    }

    /// The owner of the first point clockwise from `h`, on the ring of the invokers that
    /// `accepts` (Dubbo's ring of a candidate list: at a collision the latest of them), that
    /// `takes` the key. At most once round the ring.
    pub(crate) fn walk_placed_taking(
        &self,
        h: u32,
        mut accepts: impl FnMut(usize) -> bool,
        mut takes: impl FnMut(usize) -> bool,
    ) -> Option<usize> {
        if self.points.is_empty() {
            return None;
        }
        let start = self.ceiling(h);
        // The shadowed points are sorted and each lies at a winner's point, so the walk meets
        // them in order: a cursor moves along with it (a binary search per step cost ten times
        // the rest of the step on large rings).
        let mut next = self
            .shadowed
            .partition_point(|&(p, _)| p < self.points[start].0);
        let mut upcoming = self.shadowed_point(next);
        for range in [start..self.points.len(), 0..start] {
            for &(point, owner) in &self.points[range] {
                let winner_accepted = accepts(owner as usize);
                if winner_accepted && takes(owner as usize) {
                    return Some(owner as usize);
                }
                if point as u64 == upcoming {
                    // An accepted winner owns the point even without room: the invokers it
                    // shadowed there do not.
                    let mut latest = None;
                    while let Some(&(p, o)) = self.shadowed.get(next) {
                        if p != point {
                            break;
                        }
                        if !winner_accepted && accepts(o as usize) {
                            latest = Some(o as usize);
                        }
                        next += 1;
                    }
                    if let Some(o) = latest.filter(|&o| takes(o)) {
                        return Some(o);
                    }
                    upcoming = self.shadowed_point(next);
                }
            }
            next = 0;
            upcoming = self.shadowed_point(0);
        }
        None
    }

    /// The point of `shadowed[next]`, or a value no point has when there is none.
    fn shadowed_point(&self, next: usize) -> u64 {
        self.shadowed.get(next).map_or(u64::MAX, |&(p, _)| p as u64)
    }

    /// `placed_among` by hashing the addresses of the invokers at `candidates` again:
    /// the nearest of their points clockwise from `h`, the latest of them at a collision.
    pub(crate) fn hash_placed(&self, h: u32, candidates: &[u32]) -> Option<usize> {
        // Distance clockwise from `h`, then the later position first.
        let mut best: Option<(u32, Reverse<u32>)> = None;
        for &pos in candidates {
            points_of(
                &self.addresses[pos as usize],
                self.digests_per_invoker,
                |point| {
                    let here = (point.wrapping_sub(h), Reverse(pos));
                    if best.is_none_or(|b| here < b) {
                        best = Some(here);
                    }
                },
            );
        }
        best.map(|(_, Reverse(pos))| pos as usize)
    }

    /// The owner of the first point that won its collision (the points a whole-set pick sees)
    /// clockwise from `h` that `takes`, by a walk: at most once round the ring.
    pub(crate) fn walk_winners(
        &self,
        h: u32,
        mut takes: impl FnMut(usize) -> bool,
    ) -> Option<usize> {
        if self.points.is_empty() {
            return None;
        }
        let start = self.ceiling(h);
        for range in [start..self.points.len(), 0..start] {
            for &(_, owner) in &self.points[range] {
                if takes(owner as usize) {
                    return Some(owner as usize);
                }
            }
        }
        None
    }

    /// `walk_placed_taking` over the invokers at `candidates` (`mask` their bitset) by hashing
    /// their addresses again; `takes` is asked once per candidate.
    pub(crate) fn hash_placed_taking(
        &self,
        h: u32,
        candidates: &[u32],
        mask: &[u64],
        mut takes: impl FnMut(usize) -> bool,
    ) -> Option<usize> {
        let mut best: Option<(u32, usize)> = None;
        for &pos in candidates {
            let pos = pos as usize;
            if !takes(pos) {
                continue;
            }
            points_of(&self.addresses[pos], self.digests_per_invoker, |point| {
                let distance = point.wrapping_sub(h);
                if best.is_none_or(|(d, _)| distance < d) && self.owns_among(point, pos, mask) {
                    best = Some((distance, pos));
                }
            });
        }
        best.map(|(_, pos)| pos)
    }

    /// Whether the invoker at `pos`, which placed `point`, owns it on the ring of the invokers
    /// in `mask`: no later one of them placed it too (Dubbo's later put wins).
    fn owns_among(&self, point: u32, pos: usize, mask: &[u64]) -> bool {
        let in_mask = |p: usize| mask[p / 64] & (1u64 << (p % 64)) != 0;
        let winner = self.points[self.ceiling(point)].1 as usize;
        if winner == pos {
            return true;
        }
        if in_mask(winner) {
            return false;
        }
        // Shadowed there (rare): by invokers that are not candidates only?
        let from = self
            .shadowed
            .partition_point(|&(p, o)| (p, o) <= (point, pos as u32));
        !self.shadowed[from..]
            .iter()
            .take_while(|&&(p, _)| p == point)
            .any(|&(_, o)| in_mask(o as usize))
    }
}

#[cfg(test)]
thread_local! {
    /// Some(true) makes every pick among candidates hash them, Some(false) walk.
    pub(crate) static FORCE_HASHING: std::cell::Cell<Option<bool>> = const { std::cell::Cell::new(None) };
}

pub(crate) fn ring_of(snapshot: &Snapshot) -> Option<&Ring> {
    snapshot.prepared.as_ref()?.downcast_ref::<Ring>()
}

/// The pick of a whole-set select: the owner of the first point at or after the key's.
/// None when `snapshot` has no ring.
#[inline(always)]
pub(crate) fn ring_pick(snapshot: &Snapshot, key: &[u8]) -> Option<usize> {
    let ring = ring_of(snapshot)?;
    Some(ring.owner_at(ring.ceiling(key_point(key))))
}

/// The key's owner among the invokers in `mask` (a bitset over positions; `candidates` lists
/// them), as a ring built from them alone would answer. None when no point is theirs (or there
/// is no ring).
pub(crate) fn ring_pick_among(
    snapshot: &Snapshot,
    key: &[u8],
    candidates: &[u32],
    mask: &[u64],
) -> Option<usize> {
    ring_of(snapshot)?.placed_among(key_point(key), candidates, mask)
}

impl Strategy for ConsistentHash {
    fn kind(&self) -> StrategyKind {
        StrategyKind::ConsistentHash
    }

    fn tracks_reports(&self) -> bool {
        false
    }

    fn reads_in_flight(&self) -> bool {
        false
    }

    fn prepare(&self, members: &[Member], previous: &Snapshot) -> Prepared {
        // Only addresses (in order) place points: keep the ring when they did not change, so
        // weight or id churn never pays for 40 MD5 digests per invoker.
        let old = previous.prepared.as_ref();
        let old_ring = old.and_then(|p| p.downcast_ref::<Ring>());
        if old_ring.is_some_and(|ring| ring.placed_like(members)) {
            return old.cloned();
        }
        Some(PreparedData::new(self.build(members, old_ring)))
    }

    fn select(&self, ctx: &Ctx<'_>) -> Result<usize, Status> {
        if ctx.is_all {
            return ring_pick(ctx.snapshot, ctx.key).ok_or(Status::NoProvider);
        }
        ring_of(ctx.snapshot).ok_or(Status::NoProvider)?;
        ring_pick_among(ctx.snapshot, ctx.key, ctx.candidates, ctx.mask)
            .or_else(|| ctx.candidates.first().map(|&p| p as usize))
            .ok_or(Status::NoCandidate)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The vectors' `ring_point_sample`: the points Dubbo derives from MD5 inputs "address" + i
    /// (the digest's little-endian words), for the vectors' provider address: the digest's
    /// words, and the same points from `points_of` at (i, word).
    #[test]
    fn ring_points_equal_dubbos_sample() {
        const ADDRESS: &str = "10.0.0.1:20880";
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut checked = 0;
        for dir in [root.join("tests/vectors"), root.join("../shared/vectors")] {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for path in entries.filter_map(|e| e.ok().map(|e| e.path())) {
                if path.extension().is_none_or(|x| x != "json") {
                    continue;
                }
                let text = std::fs::read_to_string(&path).unwrap();
                let v: serde_json::Value = serde_json::from_str(&text).unwrap();
                let Some(sample) = v["consistent_hash"]["ring_point_sample"].as_array() else {
                    continue;
                };
                for p in sample {
                    let input = p["md5_input"].as_str().unwrap();
                    let word = p["word"].as_u64().unwrap() as usize;
                    let point = p["point"].as_u64().unwrap() as u32;
                    let digest = Md5::new().chain_update(input.as_bytes()).finalize();
                    assert_eq!(le_word(&digest, word), point, "{input} word {word}");
                    let Some(i) = input
                        .strip_prefix(ADDRESS)
                        .and_then(|i| i.parse::<u32>().ok())
                    else {
                        continue;
                    };
                    let mut points = Vec::new();
                    points_of(ADDRESS, i + 1, |p| points.push(p));
                    assert_eq!(points[4 * i as usize + word], point, "{input} word {word}");
                    checked += 1;
                }
            }
        }
        assert!(checked >= 12, "checked {checked} sample points");
    }

    fn members(addresses: &[String]) -> Vec<Member> {
        addresses
            .iter()
            .enumerate()
            .map(|(i, a)| Member {
                id: i as u64,
                address: Arc::from(a.as_str()),
                zone: None,
                weight: 100,
                start_time_ms: 0,
                warmup_ms: 0,
                state: Default::default(),
            })
            .collect()
    }

    /// The bucketed lookup finds the same point as a binary search over the whole ring.
    #[test]
    fn ceiling_equals_a_full_binary_search() {
        let ch = ConsistentHash {
            digests_per_invoker: 40,
        };
        let rng = crate::rng::seeded_for_test(3);
        for n in [1usize, 2, 3, 10, 77, 1000] {
            let addresses: Vec<String> = (0..n)
                .map(|i| format!("10.1.{}.{}:1", i / 250, i % 250))
                .collect();
            let ring = ch.build(&members(&addresses), None);
            let full = |h: u32| match ring.points.partition_point(|&(p, _)| p < h) {
                i if i == ring.points.len() => 0,
                i => i,
            };
            let mut probes: Vec<u32> = vec![0, 1, u32::MAX, u32::MAX - 1];
            for &(p, _) in ring.points.iter().step_by(7) {
                probes.extend([p, p.wrapping_sub(1), p.wrapping_add(1)]);
            }
            probes.extend((0..5_000).map(|_| rng.next_u64() as u32));
            for h in probes {
                assert_eq!(ring.ceiling(h), full(h), "n = {n}, h = {h}");
            }
        }
    }

    /// Reusing the previous ring gives exactly the ring a full build gives, through
    /// additions, removals, reorders (which change collision winners) and repeated addresses.
    #[test]
    fn incremental_build_equals_full_build() {
        let ch = ConsistentHash {
            digests_per_invoker: 40,
        };
        let rng = crate::rng::seeded_for_test(11);
        let pool: Vec<String> = (0..2_400)
            .map(|i| format!("10.{}.{}.1:20880", i / 250, i % 250))
            .collect();
        let mut previous: Option<Ring> = None;
        let mut collisions = 0;
        for round in 0..12 {
            let n = 1_600 + rng.below(600) as usize;
            let mut chosen: Vec<String> = Vec::with_capacity(n);
            let start = rng.below(pool.len() as u64) as usize;
            for k in 0..n {
                chosen.push(pool[(start + k * 7) % pool.len()].clone());
            }
            // Shuffle a window, so surviving invokers change position.
            for k in (1..200).rev() {
                let j = rng.below(k as u64 + 1) as usize;
                chosen.swap(k, j);
            }
            if round % 5 == 4 {
                chosen.push(chosen[3].clone());
            }
            let ms = members(&chosen);
            let full = ch.build(&ms, None);
            let incremental = ch.build(&ms, previous.as_ref());
            assert_eq!(full.points, incremental.points, "round {round}");
            let mut a = full.shadowed.to_vec();
            let mut b = incremental.shadowed.to_vec();
            a.sort_unstable();
            b.sort_unstable();
            assert_eq!(a, b, "round {round}");
            if round % 5 != 4 {
                // Distinct addresses: only true point collisions shadow anything.
                collisions += full.shadowed.len();
            }
            previous = Some(incremental);
        }
        assert!(collisions > 0, "no collision exercised the winner rule");
    }

    /// A pick among candidates by the definition: the nearest placement clockwise from `h`
    /// (a point at `h` itself first) that an accepted invoker placed, the latest at a tie.
    fn reference_placed(
        placed: &[(u32, u32)],
        h: u32,
        accepts: &dyn Fn(usize) -> bool,
    ) -> Option<usize> {
        placed
            .iter()
            .filter(|&&(_, o)| accepts(o as usize))
            .min_by_key(|&&(p, o)| (p.wrapping_sub(h), Reverse(o)))
            .map(|&(_, o)| o as usize)
    }

    /// Each point with its winner, the latest invoker there.
    fn winners_of(placed: &[(u32, u32)]) -> Vec<(u32, u32)> {
        let mut winners = std::collections::BTreeMap::new();
        for &(p, o) in placed {
            let w = winners.entry(p).or_insert(o);
            *w = (*w).max(o);
        }
        winners.into_iter().collect()
    }

    /// The nearest point clockwise from `h` whose winner `takes`.
    fn reference_winners(
        winners: &[(u32, u32)],
        h: u32,
        takes: &dyn Fn(usize) -> bool,
    ) -> Option<usize> {
        winners
            .iter()
            .filter(|&&(_, o)| takes(o as usize))
            .min_by_key(|&&(p, _)| p.wrapping_sub(h))
            .map(|&(_, o)| o as usize)
    }

    /// The nearest point clockwise from `h` whose owner on the ring of the invokers that
    /// `accepts` (the latest of them placed there) `has_room`.
    fn reference_placed_taking(
        placed: &[(u32, u32)],
        h: u32,
        accepts: &dyn Fn(usize) -> bool,
        has_room: &dyn Fn(usize) -> bool,
    ) -> Option<usize> {
        let theirs: Vec<(u32, u32)> = placed
            .iter()
            .copied()
            .filter(|&(_, o)| accepts(o as usize))
            .collect();
        reference_winners(&winners_of(&theirs), h, has_room)
    }

    /// Random candidate lists: a few invokers, or all but a few (exclusions), or all.
    fn subset(rng: &crate::rng::Rng<'_>, n: usize) -> (Vec<u32>, Vec<u64>) {
        let mut mask = vec![0u64; n.div_ceil(64)];
        let chosen = match rng.below(3) {
            0 => (0..1 + rng.below(4))
                .map(|_| rng.below(n as u64) as usize)
                .collect(),
            1 => {
                let excluded: Vec<usize> = (0..1 + rng.below(4))
                    .map(|_| rng.below(n as u64) as usize)
                    .collect();
                (0..n).filter(|p| !excluded.contains(p)).collect()
            }
            _ => (0..n).collect::<Vec<_>>(),
        };
        for p in chosen {
            mask[p / 64] |= 1 << (p % 64);
        }
        let positions = (0..n as u32)
            .filter(|&p| mask[p as usize / 64] & (1 << (p % 64)) != 0)
            .collect();
        (positions, mask)
    }

    /// Keys at every point, beside it, at both ends of the ring, and at random.
    fn probes(rng: &crate::rng::Rng<'_>, placed: &[(u32, u32)], random: usize) -> Vec<u32> {
        let mut probes = vec![0, 1, u32::MAX];
        for &(p, _) in placed {
            probes.extend([p, p.wrapping_sub(1), p.wrapping_add(1)]);
        }
        probes.extend((0..random).map(|_| rng.next_u64() as u32));
        probes
    }

    /// The walks (a cursor through the collided points; the winners' walk) give the reference's
    /// answer on random rings crowded with collisions, two-, three- and more-way, at the ends.
    #[test]
    fn walks_equal_the_reference_on_crowded_rings() {
        let rng = crate::rng::seeded_for_test(29);
        let mut cases = 0;
        for _ in 0..300 {
            let n = 1 + rng.below(12) as usize;
            let spread = 1 + rng.below(40) as u32;
            let mut placed: Vec<(u32, u32)> = Vec::new();
            for pos in 0..n as u32 {
                for _ in 0..rng.below(6) {
                    let p = match rng.below(8) {
                        0 => u32::MAX - rng.below(2) as u32,
                        1 => rng.below(2) as u32,
                        _ => (rng.below(spread as u64) as u32).wrapping_mul(0x0800_0001),
                    };
                    placed.push((p, pos));
                }
            }
            placed.sort_unstable();
            placed.dedup();
            let addresses: Vec<String> = (0..n).map(|i| format!("a{i}")).collect();
            let ring = Ring::from_placements(&members(&addresses), &placed, 1);
            let winners = winners_of(&placed);
            for _ in 0..4 {
                let (_, mask) = subset(&rng, n);
                let in_mask = |p: usize| mask[p / 64] & (1 << (p % 64)) != 0;
                let room: Vec<bool> = (0..n).map(|_| rng.below(3) != 0).collect();
                let takes = |p: usize| in_mask(p) && room[p];
                for h in probes(&rng, &placed, 20) {
                    assert_eq!(
                        ring.walk_placed(h, in_mask),
                        reference_placed(&placed, h, &in_mask),
                        "{placed:?} {h}"
                    );
                    assert_eq!(
                        ring.walk_winners(h, takes),
                        reference_winners(&winners, h, &takes),
                        "{placed:?} {h}"
                    );
                    assert_eq!(
                        ring.walk_placed_taking(h, in_mask, |p| room[p]),
                        reference_placed_taking(&placed, h, &in_mask, &|p| room[p]),
                        "{placed:?} {h}"
                    );
                    cases += 1;
                }
            }
        }
        assert!(cases > 20_000, "{cases}");
    }

    /// Hashing the candidates' addresses again gives the walk's (and the reference's) answer on
    /// MD5 rings with repeated addresses (every point collides) and collisions between addresses.
    #[test]
    fn hashing_equals_the_walk_on_md5_rings() {
        let rng = crate::rng::seeded_for_test(31);
        let ch = ConsistentHash {
            digests_per_invoker: 40,
        };
        let mut natural_collisions = 0;
        let (mut cases, mut hashed_cases) = (0, 0);
        for n in [1usize, 2, 5, 17, 64, 200, 3_000] {
            let mut addresses: Vec<String> = (0..n)
                .map(|i| format!("10.2.{}.{}:20880", i / 250, i % 250))
                .collect();
            for i in 1..n {
                if rng.below(8) == 0 {
                    addresses[i] = addresses[rng.below(i as u64) as usize].clone();
                }
            }
            let ring = ch.build(&members(&addresses), None);
            let mut placed = Vec::new();
            for (pos, a) in addresses.iter().enumerate() {
                points_of(a, ch.digests_per_invoker, |p| placed.push((p, pos as u32)));
            }
            placed.sort_unstable();
            let winners = winners_of(&placed);
            let winner_at = |p: u32| ring.points[ring.ceiling(p)].1 as usize;
            let natural: Vec<(u32, u32)> = ring
                .shadowed
                .iter()
                .copied()
                .filter(|&(p, o)| addresses[o as usize] != addresses[winner_at(p)])
                .collect();
            natural_collisions += natural.len();
            for _ in 0..if n < 100 { 30 } else { 40 } {
                let (mut positions, mut mask) = subset(&rng, n);
                if n >= 100 {
                    // Few candidates (hashing many costs too much here; the walk is tested
                    // above), among them both sides of a collision or only the one that lost.
                    let pool = if natural.is_empty() || rng.below(2) == 0 {
                        &ring.shadowed
                    } else {
                        &natural[..]
                    };
                    let (p, o) = pool[rng.below(pool.len() as u64) as usize];
                    positions = vec![o];
                    if rng.below(2) == 0 {
                        positions.push(winner_at(p) as u32);
                    }
                    positions.extend((0..rng.below(4)).map(|_| rng.below(n as u64) as u32));
                    positions.sort_unstable();
                    positions.dedup();
                    mask.fill(0);
                    for &q in &positions {
                        mask[q as usize / 64] |= 1 << (q % 64);
                    }
                }
                let in_mask = |p: usize| mask[p / 64] & (1 << (p % 64)) != 0;
                let room: Vec<bool> = (0..n).map(|_| rng.below(4) != 0).collect();
                let takes = |p: usize| in_mask(p) && room[p];
                let theirs: Vec<(u32, u32)> = placed
                    .iter()
                    .copied()
                    .filter(|&(_, o)| in_mask(o as usize))
                    .collect();
                let their_winners: Vec<(u32, u32)> = winners
                    .iter()
                    .copied()
                    .filter(|&(_, o)| takes(o as usize))
                    .collect();
                let sample: Vec<(u32, u32)> = (0..if theirs.is_empty() { 0 } else { 20 })
                    .map(|_| theirs[rng.below(theirs.len() as u64) as usize])
                    .collect();
                // Hashing is for few candidates (and slow in a debug build).
                let hashed = positions.len() <= 8;
                for h in probes(&rng, &sample, 20) {
                    let want = reference_placed(&theirs, h, &in_mask);
                    assert_eq!(ring.walk_placed(h, in_mask), want, "n = {n}, h = {h}");
                    if hashed {
                        assert_eq!(ring.hash_placed(h, &positions), want, "n = {n}, h = {h}");
                    }
                    assert_eq!(
                        ring.placed_among(h, &positions, &mask),
                        want,
                        "n = {n}, h = {h}"
                    );
                    let want = reference_winners(&their_winners, h, &takes);
                    assert_eq!(ring.walk_winners(h, takes), want, "n = {n}, h = {h}");
                    let want = reference_placed_taking(&placed, h, &in_mask, &|p| room[p]);
                    let got = ring.walk_placed_taking(h, in_mask, |p| room[p]);
                    assert_eq!(got, want, "n = {n}, h = {h}");
                    if hashed {
                        let got = ring.hash_placed_taking(h, &positions, &mask, |p| room[p]);
                        assert_eq!(got, want, "n = {n}, h = {h}");
                        hashed_cases += 1;
                    }
                    cases += 1;
                }
            }
        }
        assert!(natural_collisions > 0, "no collision between addresses");
        assert!(hashed_cases > 10_000, "{cases} {hashed_cases}");
    }
}
