//! Dubbo's weighted walk over the whole set while a few invokers warm up, in O(k log n) for k
//! invokers in warm-up instead of O(n): `random` makes the same draw and gets the same position
//! as the walk (`random::weighted_pick`), so seeded picks do not change; `leastactive` draws its
//! idle candidates by it, and `boundedhash` takes the whole set's total weight from it.
//!
//! The walk adds effective weights in position order and stops where the running sum passes a
//! random offset. Effective weights equal configured ones except for the invokers in warm-up at
//! the call's time (those whose warm-up ends after it, including a start time in the future):
//! with the configured weights' prefix sums kept, the running sum at a position is the prefix
//! sum minus what the warming invokers before it lack, which changes only at those k positions.
//! So the walk is k + 1 binary searches of the prefix sums, one per run of settled invokers.

use crate::balancer::Member;
use crate::weight::{effective_weight, time_dependent_until};

/// Beyond this many invokers in warm-up at once the plain walk is as good (and needs no buffer).
const MAX_WARMING: usize = 32;

/// The whole set's configured weights, for walks while some of it warms up.
pub(crate) struct WarmingWalk {
    /// `prefix[p]`: the configured weights of positions `0..p` (n + 1 sums).
    prefix: Box<[i64]>,
    /// Every invoker whose weight can depend on time, latest end of warm-up first: at a time
    /// t, those in warm-up are the ones before the first end ≤ t.
    by_end: Box<[(i64, u32)]>,
}

/// An invoker in warm-up at the walk's time.
#[derive(Clone, Copy, Default)]
struct Warming {
    pos: u32,
    configured: i64,
    effective: i64,
}

impl WarmingWalk {
    /// None when no invoker's weight depends on time.
    pub fn new(members: &[Member]) -> Option<WarmingWalk> {
        let mut by_end: Vec<(i64, u32)> = members
            .iter()
            .enumerate()
            .map(|(p, m)| {
                let end = time_dependent_until(m.weight, m.start_time_ms, m.warmup_ms);
                (end, p as u32)
            })
            .filter(|&(end, _)| end != i64::MIN)
            .collect();
        if by_end.is_empty() {
            return None;
        }
        by_end.sort_unstable_by(|a, b| b.cmp(a));
        let mut prefix = Vec::with_capacity(members.len() + 1);
        let mut sum = 0i64;
        prefix.push(0);
        for m in members {
            sum += m.weight.max(0) as i64;
            prefix.push(sum);
        }
        Some(WarmingWalk {
            prefix: prefix.into(),
            by_end: by_end.into(),
        })
    }

    /// The walk's position at `now_ms` over `members` (the set this was built from), from one
    /// draw of `below`, as the plain walk makes it: `below(n)` when every weight is 0, else
    /// `below(total)`. (Dubbo draws `below(n)` also when all weights are equal; with
    /// multiply-shift draws that is the same position: ⌊⌊r·n·w⌋ / w⌋ = ⌊r·n⌋.) None when more
    /// than `MAX_WARMING` invokers warm up at that time (the caller walks).
    pub fn pick(
        &self,
        members: &[Member],
        now_ms: i64,
        below: impl FnOnce(u64) -> u64,
    ) -> Option<usize> {
        let n = members.len();
        let mut buffer = [Warming::default(); MAX_WARMING];
        let k = self.in_warm_up(members, now_ms, &mut buffer)?;
        let warming = &mut buffer[..k];
        warming.sort_unstable_by_key(|w| w.pos);
        let lacking: i64 = warming.iter().map(|w| w.configured - w.effective).sum();
        let total = self.prefix[n] - lacking;
        if total <= 0 {
            return Some(below(n as u64) as usize);
        }
        let offset = below(total as u64) as i64;
        // Runs of settled positions [start, end), each followed by one warming position.
        let mut lacking_before = 0i64;
        let mut start = 0usize;
        for w in warming.iter() {
            let end = w.pos as usize;
            if offset < self.prefix[end] - lacking_before {
                return Some(self.search(start, end, offset + lacking_before));
            }
            if offset < self.prefix[end] - lacking_before + w.effective {
                return Some(end);
            }
            lacking_before += w.configured - w.effective;
            start = end + 1;
        }
        Some(self.search(start, n, offset + lacking_before))
    }

    /// The sum of the effective weights at `now_ms` over `members` (the set this was built
    /// from): the configured total less what the invokers in warm-up lack. None when more than
    /// `MAX_WARMING` warm up at that time (the caller sums them).
    pub fn total(&self, members: &[Member], now_ms: i64) -> Option<i64> {
        let mut buffer = [Warming::default(); MAX_WARMING];
        let k = self.in_warm_up(members, now_ms, &mut buffer)?;
        let lacking: i64 = buffer[..k].iter().map(|w| w.configured - w.effective).sum();
        Some(self.prefix[members.len()] - lacking)
    }

    /// The invokers below their configured weight at `now_ms`, into `buffer` (in no particular
    /// order): how many, or None when they do not fit.
    fn in_warm_up(
        &self,
        members: &[Member],
        now_ms: i64,
        buffer: &mut [Warming; MAX_WARMING],
    ) -> Option<usize> {
        let mut k = 0;
        for &(end, pos) in self.by_end.iter() {
            if end <= now_ms {
                break;
            }
            let m = &members[pos as usize];
            let effective = effective_weight(m.weight, m.start_time_ms, m.warmup_ms, now_ms);
            if effective == m.weight {
                continue;
            }
            if k == MAX_WARMING {
                return None;
            }
            buffer[k] = Warming {
                pos,
                configured: m.weight.max(0) as i64,
                effective: effective as i64,
            };
            k += 1;
        }
        Some(k)
    }

    /// The first position p in `start..end` whose prefix sum through it, `prefix[p + 1]`,
    /// exceeds `target` (the caller knows one does).
    fn search(&self, start: usize, end: usize, target: i64) -> usize {
        start + self.prefix[start + 1..=end].partition_point(|&s| s <= target)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::seeded_for_test;

    fn member(weight: i32, start_time_ms: i64, warmup_ms: i32) -> Member {
        Member {
            id: 0,
            address: "a".into(),
            zone: None,
            weight,
            start_time_ms,
            warmup_ms,
            state: Default::default(),
        }
    }

    /// Dubbo's walk over effective weights, as `random::weighted_pick` makes it.
    fn walk(members: &[Member], now_ms: i64, below: impl FnOnce(u64) -> u64) -> usize {
        let weights: Vec<i64> = members
            .iter()
            .map(|m| effective_weight(m.weight, m.start_time_ms, m.warmup_ms, now_ms) as i64)
            .collect();
        let total: i64 = weights.iter().sum();
        if total > 0 && weights.iter().any(|&w| w != weights[0]) {
            let mut offset = below(total as u64) as i64;
            for (p, w) in weights.iter().enumerate() {
                offset -= w;
                if offset < 0 {
                    return p;
                }
            }
            unreachable!("the offset is below the total");
        }
        below(members.len() as u64) as usize
    }

    /// Random sets (zero weights, equal weights, invokers in warm-up, started in the future,
    /// warm-up over, no start time) at random times: the same draw gives the same position as
    /// Dubbo's walk, every time.
    #[test]
    fn the_walk_by_runs_is_dubbos_walk_and_its_total_the_sum() {
        let rng = seeded_for_test(7);
        let now = 1_700_000_000_000i64;
        let mut cases = 0;
        for round in 0..3_000 {
            let n = 1 + rng.below(if round % 2 == 0 { 6 } else { 80 }) as usize;
            let weights: [i32; 4] = [0, 100, 100, 1 + rng.below(300) as i32];
            let members: Vec<Member> = (0..n)
                .map(|_| {
                    let weight = weights[rng.below(4) as usize];
                    let start = match rng.below(6) {
                        0 => 0,
                        1 => now + 1 + rng.below(5_000) as i64,
                        2 => now - 3_600_000,
                        _ => now - rng.below(700_000) as i64,
                    };
                    member(weight, start, 600_000)
                })
                .collect();
            let Some(walker) = WarmingWalk::new(&members) else {
                assert!(members
                    .iter()
                    .all(|m| m.start_time_ms == 0 || m.weight == 0));
                continue;
            };
            for _ in 0..5 {
                let t = now + rng.below(800_000) as i64 - 100_000;
                let draw = rng.next_u64();
                let by_runs = walker.pick(&members, t, |bound| {
                    ((draw as u128 * bound as u128) >> 64) as u64
                });
                let Some(by_runs) = by_runs else {
                    assert_eq!(walker.total(&members, t), None, "too many warm up for both");
                    continue;
                };
                let summed: i64 = members
                    .iter()
                    .map(|m| effective_weight(m.weight, m.start_time_ms, m.warmup_ms, t) as i64)
                    .sum();
                assert_eq!(
                    walker.total(&members, t),
                    Some(summed),
                    "round {round}, t {t}"
                );
                let by_walk = walk(&members, t, |bound| {
                    ((draw as u128 * bound as u128) >> 64) as u64
                });
                assert_eq!(by_runs, by_walk, "round {round}, n {n}, t {t}");
                cases += 1;
            }
        }
        assert!(cases > 10_000, "{cases} cases compared");
    }

    #[test]
    fn too_many_in_warm_up_at_once_is_left_to_the_walk() {
        let now = 1_700_000_000_000i64;
        let members: Vec<Member> = (0..40).map(|_| member(100, now - 1_000, 600_000)).collect();
        let walker = WarmingWalk::new(&members).unwrap();
        assert!(walker.pick(&members, now, |_| 0).is_none());
        // Once their warm-up is over, nothing warms up: the uniform draw.
        assert_eq!(walker.pick(&members, now + 600_000, |b| b - 1), Some(39));
    }
}
