//! Reference behaviour, written from the specs (docs/, ../shared/research/dubbo-spec.md) as
//! plainly as possible, independent of the library's code: Dubbo's warm-up weight, Dubbo's
//! round robin, Dubbo's hash ring, `boundedhash`'s bound, and `maglev`'s table.

use md5::{Digest, Md5};
use std::collections::HashMap;

/// The sequences' own generator, so that a seed names a sequence for good.
pub use crate::common::SplitMix as Rng;

/// Dubbo's `getWeight` (spec section 1): warm-up in single precision, 1 for a start time in
/// the future, the full weight at uptime 0 or past the warm-up; negative weights become 0.
pub fn dubbo_weight(weight: i32, start_ms: i64, warmup_ms: i32, now_ms: i64) -> i32 {
    if weight <= 0 {
        return 0;
    }
    if start_ms <= 0 {
        return weight;
    }
    let uptime = now_ms - start_ms;
    if uptime < 0 {
        return 1;
    }
    if uptime > 0 && uptime < warmup_ms as i64 {
        let ww = (uptime as f32 / (warmup_ms as f32 / weight as f32)) as i32;
        return if ww < 1 { 1 } else { ww.min(weight) };
    }
    weight
}

pub use crate::common::DubboRoundRobin;

/// Dubbo's ring points of one address (spec section 6), cached: 4 per MD5 of `address + i`.
#[derive(Default)]
pub struct Points {
    cache: HashMap<(String, u32), Vec<u32>>,
}

pub fn key_point(key: &[u8]) -> u32 {
    let d = Md5::digest(key);
    u32::from_le_bytes([d[0], d[1], d[2], d[3]])
}

impl Points {
    fn of(&mut self, address: &str, nodes: u32) -> &[u32] {
        self.cache
            .entry((address.to_string(), nodes))
            .or_insert_with(|| {
                let mut out = Vec::new();
                for i in 0..nodes / 4 {
                    let d = Md5::digest(format!("{address}{i}").as_bytes());
                    for h in 0..4 {
                        out.push(u32::from_le_bytes([
                            d[4 * h],
                            d[4 * h + 1],
                            d[4 * h + 2],
                            d[4 * h + 3],
                        ]));
                    }
                }
                out
            })
    }

    /// The ring of `list` (id, address) as Dubbo builds it for that list: a later invoker
    /// overwrites an earlier one's point. Sorted by point.
    pub fn ring(&mut self, list: &[(u64, String)], nodes: u32) -> Vec<(u32, u64)> {
        let mut owner: HashMap<u32, u64> = HashMap::new();
        for (id, address) in list {
            for &p in self.of(address, nodes) {
                owner.insert(p, *id);
            }
        }
        let mut ring: Vec<(u32, u64)> = owner.into_iter().collect();
        ring.sort_unstable();
        ring
    }
}

/// The ring's owners clockwise from `point` (the first at or after it, wrapping), each point
/// once.
pub fn clockwise(ring: &[(u32, u64)], point: u32) -> impl Iterator<Item = u64> + '_ {
    let start = ring.partition_point(|&(p, _)| p < point);
    ring[start..]
        .iter()
        .chain(&ring[..start])
        .map(|&(_, id)| id)
}

/// `boundedhash`'s pick (docs/strategies.md, src/strategy/bounded_hash.rs's module doc) at
/// static weights: the first owner clockwise whose calls in flight, counting this one, stay
/// within ⌈factor × (in flight + 1) × w / W⌉, else the least loaded relative to weight.
/// `cands` are (id, weight, in flight) in set order; `in_flight` and `total_weight` are the
/// whole set's for a whole-set pick, the candidates' otherwise.
pub fn bounded_pick(
    ring: &[(u32, u64)],
    point: u32,
    cands: &[(u64, u64, i64)],
    factor: f64,
    in_flight: i64,
    total_weight: u64,
) -> u64 {
    let all_zero = total_weight == 0;
    let total = if all_zero {
        cands.len() as u64
    } else {
        total_weight
    };
    let weight = |w: u64| if all_zero { 1 } else { w };
    let per_weight = factor * (in_flight + 1) as f64 / total as f64;
    let takes = |id: u64| {
        let &(_, w, a) = cands.iter().find(|c| c.0 == id).unwrap();
        let w = weight(w);
        // ⌈x⌉ of a computed capacity: a whole number rounding left a hair above is itself.
        w > 0 && (a as f64) < (per_weight * w as f64 * (1.0 - 1e-12)).ceil()
    };
    if let Some(id) = clockwise(ring, point).find(|&id| takes(id)) {
        return id;
    }
    let mut best = (cands[0].0, i64::MAX, 1u64);
    for &(id, w, a) in cands {
        let w = weight(w);
        if w > 0 && (a as u128 + 1) * (best.2 as u128) < (best.1 as u128 + 1) * w as u128 {
            best = (id, a, w);
        }
    }
    best.0
}

/// `maglev`'s 64-bit hash (src/strategy/maglev.rs's module doc and `hash64`'s doc in
/// src/strategy/stable_hash.rs): the
/// length times 0x9e3779b97f4a7c15 xored into the seed, then each 8-byte little-endian word
/// (the last zero-padded) multiplied by 0xc2b2ae3d27d4eb4f, xored in, the sum rotated left 27
/// and multiplied by 0x9e3779b97f4a7c15; then murmur3's 64-bit finalizer.
pub fn maglev_hash(bytes: &[u8], seed: u64) -> u64 {
    let mut h = seed ^ (bytes.len() as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    for chunk in bytes.chunks(8) {
        let mut word = [0u8; 8];
        word[..chunk.len()].copy_from_slice(chunk);
        let w = u64::from_le_bytes(word).wrapping_mul(0xc2b2_ae3d_27d4_eb4f);
        h = (h ^ w).rotate_left(27).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

const MAGLEV_KEY_SEED: u64 = u64::from_be_bytes(*b"maglevke");
const MAGLEV_OFFSET_SEED: u64 = u64::from_be_bytes(*b"maglevof");
const MAGLEV_SKIP_SEED: u64 = u64::from_be_bytes(*b"maglevsk");

/// `maglev`'s table of a set of (id, address, configured weight), as its doc states it, owner
/// ids per slot: turns in order of k / weight (ties: address, then set order), each taking the
/// first free slot of the invoker's list offset, offset + skip, … (mod size); weight 0 takes
/// no turn unless every weight is 0 (then each counts as 1). Found by scanning for the next
/// turn, not with a heap as the library does.
pub fn maglev_table(set: &[(u64, String, i32)], size: u64) -> Vec<u64> {
    let all_zero = set.iter().all(|s| s.2 <= 0);
    let mut turns: Vec<(&str, usize, u64, u64)> = set
        .iter()
        .enumerate()
        .filter(|(_, s)| all_zero || s.2 > 0)
        .map(|(i, s)| (s.1.as_str(), i, s.0, if all_zero { 1 } else { s.2 as u64 }))
        .collect();
    turns.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
    let offset: Vec<u64> = turns
        .iter()
        .map(|t| maglev_hash(t.0.as_bytes(), MAGLEV_OFFSET_SEED) % size)
        .collect();
    let skip: Vec<u64> = turns
        .iter()
        .map(|t| maglev_hash(t.0.as_bytes(), MAGLEV_SKIP_SEED) % (size - 1) + 1)
        .collect();
    let mut taken = vec![0u64; turns.len()];
    let mut tried = vec![0u64; turns.len()];
    let mut table: Vec<Option<u64>> = vec![None; size as usize];
    for _ in 0..size {
        // The next turn: the smallest (taken + 1) / weight, the first in order on a tie.
        let mut next = 0;
        for i in 1..turns.len() {
            if (taken[i] + 1) * turns[next].3 < (taken[next] + 1) * turns[i].3 {
                next = i;
            }
        }
        loop {
            let slot = ((offset[next] + tried[next] * skip[next]) % size) as usize;
            tried[next] += 1;
            if table[slot].is_none() {
                table[slot] = Some(turns[next].2);
                break;
            }
        }
        taken[next] += 1;
    }
    table.into_iter().map(Option::unwrap).collect()
}

/// `maglev`'s pick among `candidates` (ids with configured weights, in set order) on `table`:
/// the key's slot (hash · size / 2^64) if a candidate owns it, else the next slot within 4096
/// that a candidate owns, else the candidate at hash mod the candidates' total weight (walked
/// in order), or at hash mod count when every candidate weighs 0.
pub fn maglev_pick(table: &[u64], key: &[u8], candidates: &[(u64, i32)]) -> u64 {
    let hash = maglev_hash(key, MAGLEV_KEY_SEED);
    let slot = ((hash as u128 * table.len() as u128) >> 64) as usize;
    let scanned = (0..=4096.min(table.len() - 1))
        .map(|d| table[(slot + d) % table.len()])
        .find(|id| candidates.iter().any(|c| c.0 == *id));
    if let Some(id) = scanned {
        return id;
    }
    let total: u64 = candidates.iter().map(|c| c.1.max(0) as u64).sum();
    if total == 0 {
        return candidates[(hash % candidates.len() as u64) as usize].0;
    }
    let mut point = hash % total;
    for &(id, weight) in candidates {
        let weight = weight.max(0) as u64;
        if point < weight {
            return id;
        }
        point -= weight;
    }
    unreachable!("the point is below the total")
}

/// A set as `maglev_table` takes it: (id, address, configured weight) in set order.
pub type MaglevSet = Vec<(u64, String, i32)>;

/// Maglev tables by (set, size), as `Points` caches ring points.
#[derive(Default)]
pub struct MaglevTables {
    cache: HashMap<(MaglevSet, u64), Vec<u64>>,
}

impl MaglevTables {
    pub fn of(&mut self, set: MaglevSet, size: u64) -> &[u64] {
        self.cache
            .entry((set.clone(), size))
            .or_insert_with(|| maglev_table(&set, size))
    }
}

/// `rendezvous`' pick among `candidates` (id, address, configured weight), as its module doc
/// (src/strategy/rendezvous.rs) states it: h = SplitMix64's finaliser of (the address's hash,
/// seed "rendezad") xor (the key's hash, seed "rendezky"), u = (h >> 12 + 0.5) / 2^52; the
/// smallest -ln(u) / weight wins, ties to the higher h, then the earlier candidate. Weight 0
/// only when no candidate weighs more, and then every candidate counts as weight 1.
pub fn rendezvous_pick(candidates: &[(u64, String, i32)], key: &[u8]) -> u64 {
    let key_hash = maglev_hash(key, u64::from_be_bytes(*b"rendezky"));
    let any_weighted = candidates.iter().any(|c| c.2 > 0);
    let scored = candidates
        .iter()
        .filter(|c| !any_weighted || c.2 > 0)
        .map(|c| {
            let a = maglev_hash(c.1.as_bytes(), u64::from_be_bytes(*b"rendezad"));
            let h = splitmix_finaliser(a ^ key_hash);
            let u = ((h >> 12) as f64 + 0.5) / 4_503_599_627_370_496.0;
            let weight = if any_weighted { c.2 as f64 } else { 1.0 };
            (-u.ln() / weight, h, c.0)
        });
    let mut best: Option<(f64, u64, u64)> = None;
    for s in scored {
        if best.is_none_or(|b| s.0 < b.0 || (s.0 == b.0 && s.1 > b.1)) {
            best = Some(s);
        }
    }
    best.expect("a candidate").2
}

fn splitmix_finaliser(z: u64) -> u64 {
    let z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    let z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Subsetting's choice (src/filter/subset.rs's module doc): each invoker scores SplitMix64's
/// finaliser of (the address's hash, seed "subsetad") xor (the key's hash, seed "subsetky");
/// the `size` highest scores are the subset, ties to the earlier in set order. Eligible: the
/// weighted invokers of the zone if there is one, else the weighted ones, else all. The set is
/// (id, address, configured weight, zone) in set order.
pub fn subset_members(
    set: &[(u64, &str, i32, &str)],
    key: &str,
    size: usize,
    zone: Option<&str>,
) -> Vec<u64> {
    let key_hash = maglev_hash(key.as_bytes(), u64::from_be_bytes(*b"subsetky"));
    let local = |z: &str| zone.is_some_and(|own| !z.is_empty() && z == own);
    let weighted_local = set.iter().any(|i| i.2 > 0 && local(i.3));
    let weighted = set.iter().any(|i| i.2 > 0);
    let eligible = |i: &(u64, &str, i32, &str)| {
        if weighted_local {
            i.2 > 0 && local(i.3)
        } else {
            !weighted || i.2 > 0
        }
    };
    let mut scored: Vec<(u64, usize, u64)> = set
        .iter()
        .enumerate()
        .filter(|(_, i)| eligible(i))
        .map(|(p, i)| {
            let a = maglev_hash(i.1.as_bytes(), u64::from_be_bytes(*b"subsetad"));
            (splitmix_finaliser(a ^ key_hash), p, i.0)
        })
        .collect();
    scored.sort_by(|x, y| y.0.cmp(&x.0).then(x.1.cmp(&y.1)));
    scored.into_iter().take(size).map(|(_, _, id)| id).collect()
}

/// `subset.index`'s choice (src/filter/subset.rs's module doc): the eligible invokers (as for
/// keys) in round 0's order, then round 1's, …, round r ordering them by score with the hash
/// of r's 8 little-endian bytes (seed "subsetrd") in the key's place, best first, the earlier in
/// set order on a tie, and from round 1 on (when n ≥ 3 × size − 3) the invokers of the previous
/// round's last size − 1 places moved behind the first size − 1 others; consumer `index` takes
/// the places from index × size on, skipping an invoker it holds already, until it holds
/// `size` (all of them when there are no more).
pub fn dealt_members(
    set: &[(u64, &str, i32, &str)],
    index: u32,
    size: usize,
    zone: Option<&str>,
) -> Vec<u64> {
    // The eligible invokers, by subset_members' rule: a size that takes them all.
    let eligible = subset_members(set, "any", usize::MAX, zone);
    if eligible.len() <= size {
        return eligible;
    }
    let shuffled = |round: usize| {
        let round_hash = maglev_hash(
            &(round as u64).to_le_bytes(),
            u64::from_be_bytes(*b"subsetrd"),
        );
        let mut ranked: Vec<(u64, usize, u64)> = set
            .iter()
            .enumerate()
            .filter(|(_, i)| eligible.contains(&i.0))
            .map(|(p, i)| {
                let a = maglev_hash(i.1.as_bytes(), u64::from_be_bytes(*b"subsetad"));
                (splitmix_finaliser(a ^ round_hash), p, i.0)
            })
            .collect();
        ranked.sort_by(|x, y| y.0.cmp(&x.0).then(x.1.cmp(&y.1)));
        ranked.into_iter().map(|r| r.2).collect::<Vec<u64>>()
    };
    let n = eligible.len();
    let order = |round: usize| {
        let plain = shuffled(round);
        if round == 0 || size < 2 || n < 3 * size - 3 {
            return plain;
        }
        let tail = shuffled(round - 1)[n - (size - 1)..].to_vec();
        let head: Vec<u64> = plain
            .iter()
            .copied()
            .filter(|id| !tail.contains(id))
            .take(size - 1)
            .collect();
        let rest = plain.iter().copied().filter(|id| !head.contains(id));
        head.iter().copied().chain(rest).collect::<Vec<u64>>()
    };
    let mut chosen: Vec<u64> = Vec::new();
    let mut place = index as usize * size;
    while chosen.len() < size {
        let id = order(place / n)[place % n];
        if !chosen.contains(&id) {
            chosen.push(id);
        }
        place += 1;
    }
    chosen
}
