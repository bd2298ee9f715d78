//! `maglev`: Maglev consistent hashing (Eisenbud et al., NSDI 2016) with weights, as Envoy
//! offers it: a lookup table of a prime number of slots (`maglev.tableSize`, default 65537),
//! each slot owned by one invoker, built on update only. A pick hashes the key and reads one
//! slot, in constant time whatever the set's size (Dubbo's ring needs an MD5 digest and a
//! search). Not Dubbo's `consistenthash`: keys map to other invokers than Dubbo's ring maps
//! them to, which is why it is a strategy of its own.
//!
//! The table is a function of the set's addresses and configured weights only (never of their
//! order, nor of time: warm-up would move keys while it lasts), so every consumer with the
//! same set maps a key to the same invoker, in every language and polylb version:
//! - each address hashes (see [`hash64`]) to an `offset` in `0..M` and a `skip` in `1..M`,
//!   which give its preference list `offset, offset + skip, offset + 2·skip, …` (mod M, a
//!   permutation of the slots since M is prime);
//! - invokers take turns claiming the first free slot of their list; an invoker of weight
//!   `w` takes its `k`-th turn at time `k / w` (ties in address order, then set order), so it
//!   ends up with a share of the slots proportional to its weight;
//! - invokers of weight 0 own no slot, unless every invoker has weight 0: then all count as
//!   weight 1.
//!
//! A key's slot is `hash64(key) · M / 2^64`. A pick among some of the invokers (a failover
//! that excludes one, a zone, outlier ejection) keeps the key's owner when it is a candidate,
//! so keys of the others never move; otherwise it takes the owner of the next slot that a
//! candidate owns, looking at most [`SCAN_LIMIT`] slots ahead, and failing that (candidates
//! owning almost none of the table) the candidate at `hash64(key)` in proportion to weight
//! (so a weight-0 one only when all are; then at `hash64(key) mod candidates`).

use super::stable_hash::hash64;
use super::{Ctx, Prepared, PreparedData, Strategy, StrategyKind};
use crate::balancer::{Member, Snapshot};
use crate::config::Config;
use crate::error::Status;
use std::sync::Arc;

pub(crate) struct Maglev {
    table_size: u32,
}

/// The lookup table of one set, with what it was built from (so that an update that changes
/// neither addresses nor weights keeps it).
pub(crate) struct Table {
    /// The owner (set position) of each slot.
    slots: Box<[u32]>,
    built_from: Box<[(Arc<str>, i32)]>,
}

/// Slots a pick among candidates looks at past the key's own before it falls back: a
/// candidate that owns a fraction `f` of the table is missed with probability `(1-f)^4096`.
pub(crate) const SCAN_LIMIT: usize = 4096;

/// Seeds of the three hashes: a key's slot, an address's offset and its skip.
const KEY_SEED: u64 = 0x6d61_676c_6576_6b65; // "maglevke"
const OFFSET_SEED: u64 = 0x6d61_676c_6576_6f66; // "maglevof"
const SKIP_SEED: u64 = 0x6d61_676c_6576_736b; // "maglevsk"

/// `hash` scaled to `0..size` (the high half of the 128-bit product: no division).
#[inline]
fn scaled(hash: u64, size: usize) -> usize {
    ((u128::from(hash) * size as u128) >> 64) as usize
}

/// The slot a key maps to in a table of `size` slots, and the key's hash.
#[inline]
pub(crate) fn key_slot(key: &[u8], size: usize) -> (usize, u64) {
    let hash = hash64(key, KEY_SEED);
    (scaled(hash, size), hash)
}

impl Maglev {
    pub fn new(config: &Config) -> Self {
        Maglev {
            table_size: config.maglev_table_size,
        }
    }

    pub(crate) fn build(&self, members: &[Member]) -> Table {
        let size = self.table_size as usize;
        let built_from = members
            .iter()
            .map(|m| (m.address.clone(), m.weight))
            .collect();
        let all_zero = members.iter().all(|m| m.weight <= 0);
        // Turn order: address, then set position (equal addresses hash alike, so only their
        // order tells them apart).
        let mut order: Vec<usize> = (0..members.len())
            .filter(|&p| all_zero || members[p].weight > 0)
            .collect();
        order.sort_by(|&a, &b| members[a].address.cmp(&members[b].address).then(a.cmp(&b)));
        let weight = |p: usize| {
            if all_zero {
                1
            } else {
                members[p].weight as u64
            }
        };
        let mut next_slot: Vec<u64> = Vec::with_capacity(order.len());
        let mut skip: Vec<u64> = Vec::with_capacity(order.len());
        for &p in &order {
            let address = members[p].address.as_bytes();
            next_slot.push(hash64(address, OFFSET_SEED) % size as u64);
            skip.push(hash64(address, SKIP_SEED) % (size as u64 - 1) + 1);
        }
        if order.is_empty() {
            return Table {
                slots: Box::new([]),
                built_from,
            };
        }
        let mut fill = Fill {
            slots: vec![FREE; size].into_boxed_slice(),
            next_slot,
            skip,
            order: &order,
            pending: [0; AHEAD],
            turns: 0,
        };
        if order.iter().all(|&p| weight(p) == weight(order[0])) {
            // Equal weights (the usual set): turns go round in order, as `take_turns` would
            // give them, without its cost.
            for turn in 0..size {
                fill.take(turn % order.len());
            }
        } else {
            take_turns(&order, weight, size, |rank| fill.take(rank));
        }
        fill.finish();
        Table {
            slots: fill.slots,
            built_from,
        }
    }
}

/// A slot no invoker has claimed yet.
const FREE: u32 = u32::MAX;

/// Turns between a turn's arrival, when its first slot is prefetched, and its claim: the table
/// outgrows the L1 cache at about 8,000 slots, and a claim waited for its slot's line (65,537
/// slots: 2.7 → 1.5 ms per build at equal weights; 1,000,003 slots: 80–95 → 36 ms).
const AHEAD: usize = 8;

/// The table as invokers claim its slots, in turn order.
struct Fill<'a> {
    slots: Box<[u32]>,
    /// Per rank (position in `order`): the next slot of its preference list, and its step.
    next_slot: Vec<u64>,
    skip: Vec<u64>,
    order: &'a [usize],
    /// The last `AHEAD` turns taken, not yet claimed (a ring, by turn number).
    pending: [usize; AHEAD],
    turns: usize,
}

impl Fill<'_> {
    /// The next turn: the invoker at `order[rank]`'s. Claimed `AHEAD` turns later, in order.
    #[inline]
    fn take(&mut self, rank: usize) {
        self.prefetch(rank);
        let at = self.turns % AHEAD;
        if self.turns >= AHEAD {
            self.claim(self.pending[at]);
        }
        self.pending[at] = rank;
        self.turns += 1;
    }

    /// Claims the turns still pending.
    fn finish(&mut self) {
        for turn in self.turns.saturating_sub(AHEAD)..self.turns {
            self.claim(self.pending[turn % AHEAD]);
        }
    }

    /// The first free slot of the invoker at `order[rank]`'s list, claimed.
    #[inline]
    fn claim(&mut self, rank: usize) {
        let size = self.slots.len() as u64;
        let slot = loop {
            let slot = self.next_slot[rank] as usize;
            self.next_slot[rank] += self.skip[rank];
            if self.next_slot[rank] >= size {
                self.next_slot[rank] -= size;
            }
            if self.slots[slot] == FREE {
                break slot;
            }
        };
        self.slots[slot] = self.order[rank] as u32;
    }

    /// Asks for the line of the invoker's next slot (the one its claim looks at first).
    #[inline]
    fn prefetch(&self, rank: usize) {
        let slot = self.next_slot[rank] as usize;
        crate::hint::prefetch(self.slots.as_ptr().wrapping_add(slot));
    }
}

/// Hands `take` the ranks (positions in `order`) of the invokers that take the table's `turns`
/// turns, in turn order: turn `k` of the invoker of weight `w` is due at `k / w`, ties to the
/// lower rank.
///
/// Invokers of one weight take their turns at the same times, in rank order, so each weight's
/// turns are one sorted stream. With few distinct weights (the usual weighted set) a scan of
/// the streams' next turns merges them; with many, a calendar of the turns' times orders them
/// (with few, its buckets would fill with turns due at the same time, to be sorted). The order
/// is the same either way.
fn take_turns(
    order: &[usize],
    weight: impl Fn(usize) -> u64,
    turns: usize,
    mut take: impl FnMut(usize),
) {
    let mut by_weight: Vec<(u64, usize)> = order
        .iter()
        .enumerate()
        .map(|(rank, &p)| (weight(p), rank))
        .collect();
    by_weight.sort_unstable();
    // One stream per weight, in weight order; the gathering stops one past the limit (the
    // calendar then takes every invoker). `order` is never empty here.
    let mut streams: Vec<Stream> = Vec::new();
    let mut start = 0;
    while start < by_weight.len() && streams.len() <= SCANNED_WEIGHTS {
        let w = by_weight[start].0;
        let end = start + by_weight[start..].partition_point(|&(v, _)| v == w);
        streams.push(Stream {
            next: Turn {
                k: 1,
                weight: w,
                rank: by_weight[start].1,
            },
            at: start,
            group: start..end,
        });
        start = end;
    }
    if streams.len() <= SCANNED_WEIGHTS {
        for _ in 0..turns {
            let mut best = 0;
            for s in 1..streams.len() {
                if streams[s].next < streams[best].next {
                    best = s;
                }
            }
            let stream = &mut streams[best];
            take(stream.next.rank);
            // The group's next invoker at the same time, or its first one a turn later.
            stream.at += 1;
            if stream.at == stream.group.end {
                stream.at = stream.group.start;
                stream.next.k += 1;
            }
            stream.next.rank = by_weight[stream.at].1;
        }
    } else {
        calendar_turns(&by_weight, turns, take);
    }
}

/// [`take_turns`] for many distinct weights: a calendar of the turns' times. Turn `k` of
/// weight `w` goes to bucket `⌊k · q / w⌋`, which is monotone in `k / w`, so emptying the
/// buckets in order and sorting each (about four turns) gives the rule's order. (A heap
/// of every invoker's next turn gives it too, at about 50 ns a turn at n = 1000.)
fn calendar_turns(by_weight: &[(u64, usize)], turns: usize, mut take: impl FnMut(usize)) {
    const NONE: u32 = u32::MAX;
    let n = by_weight.len();
    let total: u128 = by_weight.iter().map(|&(w, _)| u128::from(w)).sum();
    // By time (turns + n) / total every invoker of weight w has had more than that time × w
    // - 1 turns, `turns` in all: later turns are never taken, and the last bucket needed is
    // that time's. q makes them about turns / 4.
    let until = (turns + n) as u128;
    let q = ((turns as u128 / 4 + 1) * total / until).max(1) as u64;
    let buckets = (until * u128::from(q) / total) as usize;
    // k · q stays below 2^57 for every turn looked at (q ≤ turns × the largest weight, and no
    // invoker gets more than one turn past the last bucket); checked all the same.
    let bucket_of = |k: u64, w: u64| -> Option<usize> {
        let b = (k.checked_mul(q)? / w) as usize;
        (b <= buckets).then_some(b)
    };
    let mut head = vec![NONE; buckets + 1];
    let mut link = vec![NONE; n];
    let mut k = vec![1u64; n];
    for (i, &(w, _)) in by_weight.iter().enumerate() {
        if let Some(b) = bucket_of(1, w) {
            link[i] = head[b];
            head[b] = i as u32;
        }
    }
    let mut due: Vec<Turn> = Vec::new();
    let mut left = turns;
    for b in 0..=buckets {
        let mut i = head[b];
        while i != NONE {
            let item = i as usize;
            i = link[item];
            let (weight, rank) = by_weight[item];
            // Every turn of this invoker that falls in this bucket, then its next bucket.
            let mut next = Some(b);
            while next == Some(b) {
                due.push(Turn {
                    k: k[item],
                    weight,
                    rank,
                });
                k[item] += 1;
                next = bucket_of(k[item], weight);
            }
            if let Some(next) = next {
                link[item] = head[next];
                head[next] = item as u32;
            }
        }
        due.sort_unstable();
        for turn in due.drain(..).take(left) {
            take(turn.rank);
            left -= 1;
        }
        if left == 0 {
            return;
        }
    }
}

/// Up to this many distinct weights, [`take_turns`] scans them instead of keeping a heap.
const SCANNED_WEIGHTS: usize = 8;

/// One weight's invokers: the next turn among them (that of the invoker at `by_weight[at]`),
/// their positions in `by_weight`.
struct Stream {
    next: Turn,
    at: usize,
    group: std::ops::Range<usize>,
}

/// One invoker's `k`-th turn to claim a slot, due at `k / weight`; ties go to the lower rank.
#[derive(PartialEq, Eq)]
struct Turn {
    k: u64,
    weight: u64,
    rank: usize,
}

impl Ord for Turn {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        // k ≤ 2^24 and weights < 2^31: the products fit in 64 bits.
        (self.k * other.weight)
            .cmp(&(other.k * self.weight))
            .then(self.rank.cmp(&other.rank))
    }
}

impl PartialOrd for Turn {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Table {
    /// True when `members` have this table's addresses and weights, in the same order.
    fn built_like(&self, members: &[Member]) -> bool {
        self.built_from.len() == members.len()
            && self
                .built_from
                .iter()
                .zip(members)
                .all(|((address, weight), m)| *weight == m.weight && **address == *m.address)
    }

    #[cfg(test)]
    fn slots_owned(&self, members: usize) -> Vec<u32> {
        let mut owned = vec![0u32; members];
        for &owner in self.slots.iter() {
            owned[owner as usize] += 1;
        }
        owned
    }

    /// The key's invoker among those `accepts` takes (see the module doc).
    #[inline]
    fn pick(&self, key: &[u8], candidates: &[u32], accepts: impl Fn(usize) -> bool) -> usize {
        let (slot, hash) = key_slot(key, self.slots.len());
        let owner = self.slots[slot] as usize;
        if accepts(owner) {
            return owner;
        }
        let (through_key, after_key) = self.slots.split_at(slot + 1);
        after_key
            .iter()
            .chain(through_key)
            .take(SCAN_LIMIT)
            .map(|&o| o as usize)
            .find(|&o| accepts(o))
            .unwrap_or_else(|| self.by_weight(hash, candidates))
    }

    /// The candidate at the key's hash in proportion to weight, when no slot within the scan
    /// is a candidate's (the candidates own almost none of the table): a drained one (weight
    /// 0) takes no call while a weighted one is left. By the hash alone, a weight-1 invoker
    /// beside drained ones sent them most of its failovers. All drained: by the hash alone.
    #[cold]
    fn by_weight(&self, hash: u64, candidates: &[u32]) -> usize {
        let weight = |c: u32| self.built_from[c as usize].1.max(0) as u64;
        let total: u64 = candidates.iter().map(|&c| weight(c)).sum();
        if total == 0 {
            return candidates[(hash % candidates.len() as u64) as usize] as usize;
        }
        let mut point = hash % total;
        for &c in candidates {
            match point.checked_sub(weight(c)) {
                Some(rest) => point = rest,
                None => return c as usize,
            }
        }
        unreachable!("the point is below the candidates' total weight")
    }
}

fn table_of(snapshot: &Snapshot) -> Option<&Table> {
    snapshot
        .prepared
        .as_ref()?
        .downcast_ref::<Table>()
        .filter(|t| !t.slots.is_empty())
}

/// The pick of a whole-set select. None when `snapshot` has no table.
#[inline(always)]
pub(crate) fn table_pick(snapshot: &Snapshot, key: &[u8]) -> Option<usize> {
    let table = table_of(snapshot)?;
    let (slot, _) = key_slot(key, table.slots.len());
    Some(table.slots[slot] as usize)
}

/// The pick among the invokers in `mask` (a bitset over positions; `candidates` lists them in
/// set order). None when there is no table.
pub(crate) fn table_pick_among(
    snapshot: &Snapshot,
    key: &[u8],
    candidates: &[u32],
    mask: &[u64],
) -> Option<usize> {
    let contains = |pos: usize| mask[pos / 64] & (1u64 << (pos % 64)) != 0;
    Some(table_of(snapshot)?.pick(key, candidates, contains))
}

impl Strategy for Maglev {
    fn kind(&self) -> StrategyKind {
        StrategyKind::Maglev
    }

    fn tracks_reports(&self) -> bool {
        false
    }

    fn reads_in_flight(&self) -> bool {
        false
    }

    fn prepare(&self, members: &[Member], previous: &Snapshot) -> Prepared {
        let old = previous.prepared.as_ref();
        if old
            .and_then(|p| p.downcast_ref::<Table>())
            .is_some_and(|table| table.built_like(members))
        {
            return old.cloned();
        }
        Some(PreparedData::new(self.build(members)))
    }

    fn select(&self, ctx: &Ctx<'_>) -> Result<usize, Status> {
        if ctx.is_all {
            return table_pick(ctx.snapshot, ctx.key).ok_or(Status::NoProvider);
        }
        table_pick_among(ctx.snapshot, ctx.key, ctx.candidates, ctx.mask).ok_or(Status::NoProvider)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::InvokerState;

    fn members(weights: &[(&str, i32)]) -> Vec<Member> {
        weights
            .iter()
            .enumerate()
            .map(|(i, &(address, weight))| Member {
                id: i as u64,
                address: address.into(),
                zone: None,
                weight,
                start_time_ms: 0,
                warmup_ms: 0,
                state: Arc::new(InvokerState::default()),
            })
            .collect()
    }

    fn maglev(size: u32) -> Maglev {
        Maglev { table_size: size }
    }

    #[test]
    fn slots_follow_the_weights_and_not_the_order() {
        let set = [("a:1", 100), ("b:1", 200), ("c:1", 300), ("d:1", 0)];
        let table = maglev(65537).build(&members(&set));
        let owned = table.slots_owned(4);
        assert_eq!(owned.iter().sum::<u32>(), 65537);
        assert_eq!(owned[3], 0, "weight 0 owns nothing");
        for (pos, share) in [(0, 1.0 / 6.0), (1, 2.0 / 6.0), (2, 3.0 / 6.0)] {
            let got = owned[pos] as f64 / 65537.0;
            assert!((got - share).abs() < 0.001, "{pos}: {got} against {share}");
        }
        // The same set in another order: each address keeps the same slots.
        let reversed: Vec<_> = set.iter().rev().copied().collect();
        let other = maglev(65537).build(&members(&reversed));
        for (a, b) in table.slots.iter().zip(other.slots.iter()) {
            assert_eq!(set[*a as usize].0, reversed[*b as usize].0);
        }
    }

    /// The merged streams and the calendar give the turns of the rule itself: each turn to the
    /// invoker whose next turn `k / w` is earliest, ties to the lower rank (found here by a scan
    /// of all).
    #[test]
    fn turns_merged_by_weight_or_by_calendar_are_the_turns_of_the_rule() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        };
        const MAX: u64 = i32::MAX as u64;
        for case in 0..101 {
            // The last case: a whole default table's turns over 50 weights near the largest.
            let last = case == 100;
            let n = if last { 50 } else { 1 + (next() % 40) as usize };
            // Few distinct weights, multiples of each other (many ties across weights), many,
            // many near the largest (the calendar's products at their largest), or one of the
            // largest among small ones (its turns fill the calendar's buckets).
            let palette = [1u64, 2, 3, 4, 6, 100, 150, 200, 7, 1 << 30];
            let weights: Vec<u64> = (0..n)
                .map(|i| match case % 5 {
                    _ if last => MAX - next() % 1000,
                    0 => palette[(next() % 3) as usize],
                    1 => palette[(next() % palette.len() as u64) as usize],
                    2 => 1 + next() % 1000,
                    3 => MAX - next() % 1000,
                    _ if i == 0 => MAX,
                    _ => 1 + next() % 20,
                })
                .collect();
            // `order` as the build makes it: ranks map to set positions in some order.
            let mut order: Vec<usize> = (0..n).collect();
            for i in (1..n).rev() {
                order.swap(i, (next() % (i as u64 + 1)) as usize);
            }
            let turns = if last {
                65537
            } else {
                1 + (next() % 3000) as usize
            };
            let mut merged = Vec::new();
            take_turns(&order, |p| weights[p], turns, |rank| merged.push(rank));
            let mut k = vec![1u64; n];
            for (t, &got) in merged.iter().enumerate() {
                let due = |rank: usize| (k[rank], weights[order[rank]]);
                let mut best = 0;
                for rank in 1..n {
                    let ((kb, wb), (kr, wr)) = (due(best), due(rank));
                    if kr * wb < kb * wr {
                        best = rank;
                    }
                }
                assert_eq!(got, best, "case {case}, turn {t}: {weights:?}");
                k[best] += 1;
            }
            assert_eq!(merged.len(), turns);
        }
    }

    #[test]
    fn all_zero_weights_share_the_table_equally() {
        let table = maglev(10007).build(&members(&[("a:1", 0), ("b:1", 0)]));
        let owned = table.slots_owned(2);
        assert!(owned[0].abs_diff(owned[1]) <= 1, "{owned:?}");
    }

    #[test]
    fn a_leaving_invoker_moves_its_own_keys_and_few_others() {
        let addresses: Vec<String> = (0..20).map(|i| format!("10.0.0.{i}:20880")).collect();
        let set: Vec<(&str, i32)> = addresses.iter().map(|a| (a.as_str(), 100)).collect();
        let m = maglev(65537);
        let before = m.build(&members(&set));
        let after = m.build(&members(&set[1..]));
        let mut moved_others = 0;
        for (&b, &a) in before.slots.iter().zip(after.slots.iter()) {
            let (was, now) = (set[b as usize].0, set[1 + a as usize].0);
            if was != set[0].0 && was != now {
                moved_others += 1;
            }
        }
        // Maglev's disruption beyond the leaving invoker's own slots is small (the paper's
        // figure: a few per cent of the table at this size).
        let share = moved_others as f64 / 65537.0;
        assert!(share < 0.03, "{share}");
    }

    #[test]
    fn picks_among_candidates_keep_a_candidate_owner_and_otherwise_scan() {
        let table = maglev(257).build(&members(&[("a:1", 1), ("b:1", 1), ("c:1", 1)]));
        let all = [0u32, 1, 2];
        for i in 0..2000u32 {
            let key = i.to_le_bytes();
            let owner = table.pick(&key, &all, |_| true);
            let among = table.pick(&key, &[0, 2], |p| p != 1);
            if owner != 1 {
                assert_eq!(among, owner);
            } else {
                let (slot, _) = key_slot(&key, 257);
                let next = (1..257)
                    .map(|d| table.slots[(slot + d) % 257] as usize)
                    .find(|&o| o != 1)
                    .unwrap();
                assert_eq!(among, next);
            }
        }
        // Candidates that own no slot: the hash picks among them.
        let weighted = maglev(257).build(&members(&[("a:1", 1), ("b:1", 0), ("c:1", 0)]));
        let mut seen = [0; 3];
        for i in 0..1000u32 {
            seen[weighted.pick(&i.to_le_bytes(), &[1, 2], |p| p != 0)] += 1;
        }
        assert!(seen[0] == 0 && seen[1] > 400 && seen[2] > 400, "{seen:?}");
        // Beside them a weighted candidate that owns too few slots for the scan to find: the
        // fallback goes to it, never to the drained ones.
        let table = maglev(65537).build(&members(&[
            ("a:1", 10_000),
            ("b:1", 1),
            ("c:1", 0),
            ("d:1", 3),
        ]));
        let owned = table.slots_owned(4);
        assert_eq!(owned[2], 0);
        let mut seen = [0u32; 4];
        for i in 0..20_000u32 {
            seen[table.pick(&i.to_le_bytes(), &[1, 2, 3], |p| p != 0)] += 1;
        }
        assert_eq!(seen[2], 0, "{seen:?}");
        assert_eq!(seen[0], 0, "{seen:?}");
    }
}
