//! `consistenthash`: Dubbo's MD5 ring (ConsistentHashLoadBalance), built on update only.

use super::{Ctx, Prepared, PreparedData, Strategy, StrategyKind};
use crate::balancer::{Member, Snapshot};
use crate::config::Config;
use crate::error::Status;
use md5::{Digest, Md5};
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
}

/// Points per bucket the index aims at.
const POINTS_PER_BUCKET: usize = 4;

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
        let mut placed: Vec<(u32, u32)> = Vec::new();
        for (pos, m) in members.iter().enumerate() {
            self.place(&m.address, pos as u32, &mut placed);
        }
        placed.sort_unstable();
        Ring::from_placements(members, &placed)
    }

    /// The points of one address, for the invoker at `pos`.
    fn place(&self, address: &str, pos: u32, out: &mut Vec<(u32, u32)>) {
        let mut number = itoa_buffer();
        for i in 0..self.digests_per_invoker {
            let digest = Md5::new()
                .chain_update(address.as_bytes())
                .chain_update(format_u32(&mut number, i))
                .finalize();
            for h in 0..4 {
                out.push((le_word(&digest, h), pos));
            }
        }
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
        let survivors = |pairs: &mut dyn Iterator<Item = (u32, u32)>| -> Vec<(u32, u32)> {
            pairs
                .filter_map(|(point, owner)| remap[owner as usize].map(|p| (point, p)))
                .collect()
        };
        let kept = survivors(&mut old.points.iter().copied());
        let mut shadowed = survivors(&mut old.shadowed.iter().copied());
        // Positions may have moved: equal points must be ordered by new position again.
        shadowed.sort_unstable();
        // `kept` stays sorted: its points are distinct and filtering keeps their order.
        let extra = merge(&shadowed, &fresh);
        Some(Ring::from_placements(members, &merge(&kept, &extra)))
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
    fn from_placements(members: &[Member], placed: &[(u32, u32)]) -> Ring {
        let mut points = Vec::with_capacity(placed.len());
        let mut shadowed = Vec::new();
        for (i, &(point, owner)) in placed.iter().enumerate() {
            if placed.get(i + 1).is_some_and(|next| next.0 == point) {
                shadowed.push((point, owner));
                continue;
            }
            points.push((point, owner));
        }
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

    pub(crate) fn len(&self) -> usize {
        self.points.len()
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

    /// The owner of the point at `index` (as `owner_at`) on a ring built from the invokers
    /// `accepts` takes alone: the winner of a collision when it is one of them, else the latest
    /// of them that the winner shadowed there (in Dubbo's put order); None when none placed it.
    fn owner_among(&self, index: usize, accepts: impl Fn(usize) -> bool) -> Option<usize> {
        let len = self.points.len();
        let (point, owner) = self.points[if index >= len { index - len } else { index }];
        if accepts(owner as usize) {
            return Some(owner as usize);
        }
        if self.shadowed.is_empty() {
            return None;
        }
        let end = self.shadowed.partition_point(|&(p, _)| p <= point);
        self.shadowed[..end]
            .iter()
            .rev()
            .take_while(|&&(p, _)| p == point)
            .map(|&(_, o)| o as usize)
            .find(|&o| accepts(o))
    }
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

/// The key's owner among the invokers in `mask` (a bitset over positions), as a ring built from
/// them alone would answer: walk clockwise to the first point one of them owns. Bounded by the
/// ring's size: no endless loop. None when no point is theirs (or there is no ring).
pub(crate) fn ring_pick_among(snapshot: &Snapshot, key: &[u8], mask: &[u64]) -> Option<usize> {
    let ring = ring_of(snapshot)?;
    let start = ring.ceiling(key_point(key));
    let in_mask = |pos: usize| mask[pos / 64] & (1u64 << (pos % 64)) != 0;
    (0..ring.len()).find_map(|k| ring.owner_among(start + k, in_mask))
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
        ring_pick_among(ctx.snapshot, ctx.key, ctx.mask)
            .or_else(|| ctx.candidates.first().map(|&p| p as usize))
            .ok_or(Status::NoCandidate)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
