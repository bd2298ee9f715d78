//! Dubbo's smooth weighted round robin over a whole set (or the local zone's part of it) while
//! some invokers warm up, in O(k + log n) per pick for k invokers in warm-up instead of the
//! walk's O(n).
//!
//! Dubbo's walk adds each invoker's current (warm-up) weight to its counter, takes the first
//! highest counter and lowers it by the sum of the weights. The invokers past their warm-up
//! have fixed weights, so their counters are lines in the pick count, served by a tournament
//! ([`Tournament`]: by weight class or the kinetic tree); the few whose weight still changes
//! with time keep explicit counters, stepped one by one with their weight at the pick's time
//! (reset to zero when that weight changed, as Dubbo does). A pick compares the tournament's leader with those k
//! counters, ties going to the earlier position as in the walk.
//!
//! Which invokers warm up changes only when a warm-up ends (or the caller's time goes back
//! before one ended): the structure knows the window of times for which its split holds, and
//! the caller builds a new one outside it.

use super::weight_classes::Tournament;
use crate::balancer::Member;
use crate::weight::{effective_weight, time_dependent_until};

pub(crate) struct WarmingWrr {
    /// The lines of the invokers whose weight no longer changes, indexed in set order among
    /// themselves (an empty tree when every invoker warms up).
    settled: Tournament,
    /// Settled index → set position.
    settled_pos: Vec<u32>,
    /// The settled invokers' weights, by settled index.
    settled_weights: Vec<i32>,
    settled_total: i64,
    /// The settled counters a rebuild starts the tree from (kept for its capacity).
    scratch: Vec<i64>,
    /// The invokers in warm-up, in set order.
    warming: Vec<Warming>,
    /// The split above holds for picks at `from_ms <= now < until_ms`.
    from_ms: i64,
    until_ms: i64,
}

/// The counter of an invoker in warm-up, with the weight it was last stepped with.
struct Warming {
    pos: u32,
    weight: i32,
    current: i64,
}

impl WarmingWrr {
    /// The walk's state over the `members` at `positions` (ascending: the walk's order) at
    /// `now_ms`, from each invoker's `prior` counter and the weight it was kept with (None: no
    /// counter yet, that is zero).
    pub fn new(
        members: &[Member],
        positions: impl Iterator<Item = u32>,
        now_ms: i64,
        prior: impl Fn(&Member) -> Option<(i32, i64)>,
    ) -> WarmingWrr {
        let mut wrr = WarmingWrr {
            settled: Tournament::new(&[], &[]),
            settled_pos: Vec::new(),
            settled_weights: Vec::new(),
            settled_total: 0,
            scratch: Vec::new(),
            warming: Vec::new(),
            from_ms: 0,
            until_ms: 0,
        };
        wrr.rebuild(members, positions, now_ms, prior);
        wrr
    }

    /// Starts over as `new` does, in the memory this one holds: a failover pick (a subset walk)
    /// hands the counters back to the entries, and the next whole-set pick rebuilds here
    /// without allocating once the buffers fit the set.
    pub fn rebuild(
        &mut self,
        members: &[Member],
        positions: impl Iterator<Item = u32>,
        now_ms: i64,
        prior: impl Fn(&Member) -> Option<(i32, i64)>,
    ) {
        let (mut from_ms, mut until_ms) = (i64::MIN, i64::MAX);
        self.settled_pos.clear();
        self.settled_weights.clear();
        self.scratch.clear();
        self.warming.clear();
        for pos in positions {
            let m = &members[pos as usize];
            let end = time_dependent_until(m.weight, m.start_time_ms, m.warmup_ms);
            let counter = prior(m);
            if end != i64::MIN && end > now_ms {
                until_ms = until_ms.min(end);
                let (weight, current) = counter.unwrap_or((-1, 0));
                self.warming.push(Warming {
                    pos,
                    weight,
                    current,
                });
                continue;
            }
            if end != i64::MIN {
                from_ms = from_ms.max(end);
            }
            let weight = m.weight.max(0);
            // A counter kept with another weight restarts from zero, as a Dubbo select does.
            let current = match counter {
                Some((w, current)) if w == weight => current,
                _ => 0,
            };
            self.settled_pos.push(pos);
            self.settled_weights.push(weight);
            self.scratch.push(current);
        }
        self.settled.rebuild(&self.settled_weights, &self.scratch);
        self.settled_total = self.settled_weights.iter().map(|&w| w as i64).sum();
        self.from_ms = from_ms;
        self.until_ms = until_ms;
    }

    /// True when the invokers in warm-up at `now_ms` are the ones this was built with.
    pub fn covers(&self, now_ms: i64) -> bool {
        self.from_ms <= now_ms && now_ms < self.until_ms
    }

    /// The next pick at `now_ms` (which `covers` must accept) over the `members` this was
    /// built from: its set position.
    pub fn pick(&mut self, members: &[Member], now_ms: i64) -> u32 {
        let mut total = self.settled_total;
        for w in self.warming.iter_mut() {
            let m = &members[w.pos as usize];
            let weight = effective_weight(m.weight, m.start_time_ms, m.warmup_ms, now_ms);
            if weight != w.weight {
                w.weight = weight;
                w.current = 0;
            }
            w.current += weight as i64;
            total += weight as i64;
        }
        let leader = (!self.settled_pos.is_empty()).then(|| self.settled.advance());
        let (mut best_pos, mut best_value) = match leader {
            Some((index, value)) => (self.settled_pos[index as usize], value),
            None => (u32::MAX, i64::MIN),
        };
        let mut best_warming = None;
        for (i, w) in self.warming.iter().enumerate() {
            if w.current > best_value || (w.current == best_value && w.pos < best_pos) {
                (best_pos, best_value, best_warming) = (w.pos, w.current, Some(i));
            }
        }
        match (best_warming, leader) {
            (Some(i), _) => self.warming[i].current -= total,
            (None, Some((index, _))) => self.settled.lower(index, total),
            (None, None) => unreachable!("a pick has a settled leader or an invoker in warm-up"),
        }
        best_pos
    }

    /// Every invoker's `(set position, weight, counter)`, for handing the counters back to
    /// Dubbo's per-invoker entries.
    pub fn counters(&self) -> impl Iterator<Item = (u32, i32, i64)> + '_ {
        self.settled_pos
            .iter()
            .zip(self.settled_weights.iter())
            .zip(self.settled.counters())
            .map(|((&pos, &weight), current)| (pos, weight, current))
            .chain(self.warming.iter().map(|w| (w.pos, w.weight, w.current)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WARM_UP_MS: i32 = 600_000;
    const NOW: i64 = 1_700_000_000_000;

    fn member(id: u64, weight: i32, start_time_ms: i64) -> Member {
        Member {
            id,
            address: "a".into(),
            zone: None,
            weight,
            start_time_ms,
            warmup_ms: WARM_UP_MS,
            state: Default::default(),
        }
    }

    /// Dubbo's walk over plain counters of the `members` at `positions` with each invoker's
    /// weight at `now_ms`.
    fn walk(
        members: &[Member],
        positions: &[u32],
        counters: &mut [(i32, i64)],
        now_ms: i64,
    ) -> u32 {
        let (mut best, mut max, mut total) = (0, i64::MIN, 0i64);
        for &pos in positions {
            let (pos, m) = (pos as usize, &members[pos as usize]);
            let w = effective_weight(m.weight, m.start_time_ms, m.warmup_ms, now_ms);
            let c = &mut counters[pos];
            if c.0 != w {
                *c = (w, 0);
            }
            c.1 += w as i64;
            if c.1 > max {
                (best, max) = (pos, c.1);
            }
            total += w as i64;
        }
        counters[best].1 -= total;
        best as u32
    }

    #[test]
    fn picks_equal_the_walk_while_invokers_warm_up_and_finish() {
        let mut state = 5u64;
        let mut below = |bound: u64| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 33) % bound
        };
        let (mut builds, mut mixed) = (0, 0);
        // One structure for every case, rebuilt over sets of other sizes.
        let mut wrr = WarmingWrr::new(&[], std::iter::empty(), NOW, |_| None);
        for case in 0..60 {
            let n = 1 + below(40) as usize;
            let members: Vec<Member> = (0..n)
                .map(|i| {
                    let start = match below(4) {
                        0 => NOW - below(WARM_UP_MS as u64 + 5_000) as i64,
                        1 => NOW + below(3_000) as i64, // clock skew: weight 1 until then
                        2 => 0,
                        _ => NOW - 10 * WARM_UP_MS as i64,
                    };
                    // Even cases: four weights (the settled ones picked by weight class);
                    // odd ones: many (the kinetic tree).
                    let weight = match case % 2 {
                        0 => 25 * below(4) as i32 + 10,
                        _ => below(120) as i32,
                    };
                    member(i as u64, weight, start)
                })
                .collect();
            // Every third case walks a part of the set (a local zone), the others all of it.
            let positions: Vec<u32> = (0..n as u32)
                .filter(|&p| case % 3 != 0 || p == 0 || below(2) == 0)
                .collect();
            let mut counters: Vec<(i32, i64)> = (0..n).map(|_| (0, 0)).collect();
            let mut now = NOW;
            let mut built = false;
            for step in 0..3_000 {
                // Mostly forward, by up to a minute at times (warm-ups end), sometimes back.
                now += match below(50) {
                    0 => -(below(200_000) as i64),
                    1..=3 => below(60_000) as i64,
                    _ => below(3) as i64,
                };
                if !(built && wrr.covers(now)) {
                    if built {
                        let mut kept = vec![(0, 0); n];
                        for (pos, weight, current) in wrr.counters() {
                            kept[pos as usize] = (weight, current);
                        }
                        // Every build is followed by a pick, which resets any counter whose
                        // weight changed: handed back, the counters are the walk's.
                        assert_eq!(kept, counters, "case {case} step {step}: handed back");
                    }
                    builds += 1;
                    built = true;
                    let prior = |m: &Member| Some(counters[m.id as usize]);
                    wrr.rebuild(&members, positions.iter().copied(), now, prior);
                }
                let want = walk(&members, &positions, &mut counters, now);
                let got = wrr.pick(&members, now);
                assert_eq!(got, want, "case {case} step {step} at {now}");
                mixed += usize::from(!wrr.settled_pos.is_empty() && !wrr.warming.is_empty());
            }
        }
        assert!(
            builds > 300,
            "warm-ups ended and the clock went back: {builds} builds"
        );
        assert!(
            mixed > 100_000,
            "most picks mix both kinds: {mixed} of 180000"
        );
    }
}
