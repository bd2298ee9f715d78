//! `rendezvous`: weighted rendezvous hashing, also called highest random weight (Thaler and
//! Ravishankar, 1998; weights by Schindelhauer and Schomaker's logarithmic method, 2005). For
//! a key, every invoker draws a number `u` in (0, 1) from the key and its address, and the
//! invoker with the smallest `-ln(u) / weight` takes the key. So:
//! - an invoker takes a key with probability exactly its share of the weight: there is no
//!   table or ring whose slots or points round the shares;
//! - an invoker that leaves moves only its own keys, each to the key's next best invoker; one
//!   that joins takes keys only for itself; a weight change moves keys only to or from the
//!   invoker whose weight changed;
//! - a pick among some of the invokers (a failover retry that excludes those tried, a zone,
//!   outlier ejection) is the best of the candidates: the key's next choice in its own order,
//!   which every consumer shares, so a retried key lands where other consumers' retries of it
//!   land;
//! - nothing is built: an update hashes the addresses, and the set costs 16 bytes an invoker.
//!
//! The price is a pick that scores every candidate: O(n), where `maglev` reads one slot. For
//! sets of up to a few dozen invokers that is about as fast; for hundreds, use `maglev`.
//!
//! Like `maglev` (and unlike Dubbo's ring, hence a name of its own) it reads configured weights
//! only, never warm-up's, which would move keys while they ramp. An invoker of weight 0 takes no
//! key while a candidate weighs more; when none does, all count as equally weighted.
//!
//! The scores, part of the contract (the same in every process, version and language): `h =
//! mix64(hash64(address, "rendezad") ^ hash64(key, "rendezky"))` (see [`super::stable_hash`],
//! seeds as big-endian ASCII), `u = (⌊h / 2^12⌋ + 0.5) / 2^52`; equal `-ln(u) / weight` go to
//! the higher `h`, then to the earlier position (only equal addresses tie on `h`).

use super::stable_hash::{hash64, mix64};
use super::{Ctx, Prepared, PreparedData, Strategy, StrategyKind};
use crate::balancer::{Member, Snapshot};
use crate::error::Status;

pub(crate) struct Rendezvous;

const KEY_SEED: u64 = u64::from_be_bytes(*b"rendezky");
const ADDRESS_SEED: u64 = u64::from_be_bytes(*b"rendezad");

/// What picks read of a set, in set order.
pub(crate) struct Scores {
    entries: Box<[Entry]>,
    /// Every weighted invoker has the same weight: the highest `h` among them wins (`-ln(u)`
    /// falls as `h` rises), with no logarithm.
    equal_weights: bool,
    /// Some invoker has weight 0 (a pick must then tell weighted from unweighted candidates).
    any_unweighted: bool,
}

#[derive(Clone, Copy)]
struct Entry {
    address_hash: u64,
    /// The configured weight (0 for a weight of 0 or less).
    weight: f64,
    /// `1 / weight` (for the bound that spares most logarithms; infinite for weight 0).
    inverse_weight: f64,
}

/// A candidate whose lower bound `(1 - u) / weight` exceeds the best cost by this factor cannot
/// win: `-ln(u) ≥ 1 - u`, and the computed logarithm and quotients are within a few units in
/// the last place (2^-52 each) of the exact ones, far inside this margin.
const BOUND_MARGIN: f64 = 1.0 + 1e-9;

impl Scores {
    fn build(members: &[Member]) -> Scores {
        let entries: Box<[Entry]> = members
            .iter()
            .map(|m| Entry {
                address_hash: hash64(m.address.as_bytes(), ADDRESS_SEED),
                weight: f64::from(m.weight.max(0)),
                inverse_weight: 1.0 / f64::from(m.weight.max(0)),
            })
            .collect();
        let mut weights = entries.iter().map(|e| e.weight).filter(|&w| w > 0.0);
        let first = weights.next();
        let equal_weights = weights.all(|w| Some(w) == first);
        let any_unweighted = entries.iter().any(|e| e.weight == 0.0);
        Scores {
            entries,
            equal_weights,
            any_unweighted,
        }
    }

    /// The key's invoker among `positions` (in set order); None when there are none.
    #[inline]
    fn pick(&self, key: &[u8], positions: impl Iterator<Item = usize>) -> Option<usize> {
        let key_hash = hash64(key, KEY_SEED);
        if self.equal_weights && !self.any_unweighted {
            self.highest_h::<false>(key_hash, positions)
        } else if self.equal_weights {
            self.highest_h::<true>(key_hash, positions)
        } else {
            self.lowest_cost(key_hash, positions)
        }
    }

    /// Equal weights: `-ln(u)` falls as `h` rises, so the highest `h` wins, a weighted
    /// candidate over any unweighted one, the earlier on a tie. Without `MIXED` (no invoker of
    /// weight 0, the usual set) every candidate counts as weighted, and the loop is a plain
    /// maximum.
    #[inline]
    fn highest_h<const MIXED: bool>(
        &self,
        key_hash: u64,
        positions: impl Iterator<Item = usize>,
    ) -> Option<usize> {
        let mut positions = positions;
        let look = |pos: usize| {
            let entry = &self.entries[pos];
            (
                mix64(entry.address_hash ^ key_hash),
                !MIXED || entry.weight > 0.0,
            )
        };
        let mut best = positions.next()?;
        let (mut best_h, mut best_weighted) = look(best);
        for pos in positions {
            let (h, weighted) = look(pos);
            // Nearly always `weighted == best_weighted` and `h` lower: one branch taken.
            if weighted == best_weighted {
                if h > best_h {
                    (best, best_h) = (pos, h);
                }
            } else if weighted {
                (best, best_h, best_weighted) = (pos, h, true);
            }
        }
        Some(best)
    }

    /// Unequal weights: the lowest cost among weighted candidates, the higher `h` on a tie;
    /// when no candidate is weighted, the highest `h`.
    #[inline]
    fn lowest_cost(&self, key_hash: u64, positions: impl Iterator<Item = usize>) -> Option<usize> {
        let (mut cost, mut cost_h, mut cost_pos) = (f64::INFINITY, 0u64, None);
        // No candidate whose lower bound exceeds this can win.
        let mut bound = f64::INFINITY;
        let mut unweighted: Option<(u64, usize)> = None;
        for pos in positions {
            let entry = &self.entries[pos];
            let h = mix64(entry.address_hash ^ key_hash);
            if entry.weight > 0.0 {
                let u = unit_interval(h);
                // The k-th candidate passes the bound with probability about 1/k, so a pick
                // takes about ln n logarithms, not n.
                if (1.0 - u) * entry.inverse_weight > bound {
                    continue;
                }
                let c = -u.ln() / entry.weight;
                if c < cost || (c == cost && h > cost_h) {
                    (cost, cost_h, cost_pos) = (c, h, Some(pos));
                    bound = c * BOUND_MARGIN;
                }
            } else if cost_pos.is_none() && unweighted.is_none_or(|(best_h, _)| h > best_h) {
                unweighted = Some((h, pos));
            }
        }
        cost_pos.or(unweighted.map(|(_, pos)| pos))
    }
}

/// `h`'s top 52 bits as a number strictly between 0 and 1 (with 53, the top one would round up
/// to 1: f64 has no room for the half).
#[inline]
fn unit_interval(h: u64) -> f64 {
    ((h >> 12) as f64 + 0.5) * (1.0 / (1u64 << 52) as f64)
}

fn scores_of(snapshot: &Snapshot) -> Option<&Scores> {
    snapshot.prepared.as_ref()?.downcast_ref::<Scores>()
}

/// The pick of a whole-set select. None when `snapshot` has no scores (the empty set).
#[inline(always)]
pub(crate) fn score_pick(snapshot: &Snapshot, key: &[u8]) -> Option<usize> {
    let scores = scores_of(snapshot)?;
    scores.pick(key, 0..scores.entries.len())
}

/// The pick among `candidates` (positions in set order; the bitset is not needed).
pub(crate) fn score_pick_among(
    snapshot: &Snapshot,
    key: &[u8],
    candidates: &[u32],
    _mask: &[u64],
) -> Option<usize> {
    scores_of(snapshot)?.pick(key, candidates.iter().map(|&p| p as usize))
}

impl Strategy for Rendezvous {
    fn kind(&self) -> StrategyKind {
        StrategyKind::Rendezvous
    }

    fn tracks_reports(&self) -> bool {
        false
    }

    fn reads_in_flight(&self) -> bool {
        false
    }

    fn prepare(&self, members: &[Member], _previous: &Snapshot) -> Prepared {
        Some(PreparedData::new(Scores::build(members)))
    }

    fn select(&self, ctx: &Ctx<'_>) -> Result<usize, Status> {
        let pick = if ctx.is_all {
            score_pick(ctx.snapshot, ctx.key)
        } else {
            score_pick_among(ctx.snapshot, ctx.key, ctx.candidates, ctx.mask)
        };
        pick.ok_or(Status::NoProvider)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::InvokerState;
    use std::sync::Arc;

    fn scores(set: &[(&str, i32)]) -> Scores {
        let members: Vec<Member> = set
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
            .collect();
        Scores::build(&members)
    }

    fn owner(s: &Scores, key: u32) -> usize {
        s.pick(&key.to_le_bytes(), 0..s.entries.len()).unwrap()
    }

    #[test]
    fn unit_interval_stays_strictly_inside() {
        assert!(unit_interval(0) > 0.0);
        assert!(unit_interval(u64::MAX) < 1.0);
        assert!(unit_interval(u64::MAX).ln() < 0.0);
        assert!(unit_interval(1 << 12) > unit_interval(0));
    }

    #[test]
    fn the_equal_weight_shortcut_picks_what_the_logarithm_picks() {
        // Equal weights other than 1 take the shortcut; a set with one weight off by one does
        // not. Both must agree with the formula wherever the odd invoker does not win.
        let equal = scores(&[("a:1", 7), ("b:1", 7), ("c:1", 7), ("d:1", 7)]);
        assert!(equal.equal_weights);
        let formula = Scores {
            entries: equal.entries.clone(),
            equal_weights: false,
            any_unweighted: false,
        };
        for key in 0..20_000u32 {
            assert_eq!(owner(&equal, key), owner(&formula, key), "key {key}");
        }
    }

    #[test]
    fn the_bound_skips_only_candidates_that_cannot_win() {
        // Unequal weights take the bound; the same scores without it (every logarithm taken)
        // must pick alike, ties included.
        let set: Vec<(String, i32)> = (0..40)
            .map(|i| (format!("10.1.0.{i}:20880"), 1 + i % 7))
            .collect();
        let refs: Vec<(&str, i32)> = set.iter().map(|(a, w)| (a.as_str(), *w)).collect();
        let s = scores(&refs);
        assert!(!s.equal_weights);
        let unbounded = |key: &[u8]| {
            let key_hash = hash64(key, KEY_SEED);
            let mut best = (f64::INFINITY, 0u64, usize::MAX);
            for (pos, e) in s.entries.iter().enumerate() {
                let h = mix64(e.address_hash ^ key_hash);
                let cost = -unit_interval(h).ln() / e.weight;
                if cost < best.0 || (cost == best.0 && h > best.1) {
                    best = (cost, h, pos);
                }
            }
            best.2
        };
        for key in 0..20_000u32 {
            assert_eq!(owner(&s, key), unbounded(&key.to_le_bytes()), "key {key}");
        }
    }

    #[test]
    fn weight_zero_takes_keys_only_when_no_candidate_weighs_more() {
        let s = scores(&[("a:1", 0), ("b:1", 5), ("c:1", 0)]);
        for key in 0..1000u32 {
            assert_eq!(owner(&s, key), 1);
            let among = s.pick(&key.to_le_bytes(), [0usize, 2].into_iter()).unwrap();
            assert!(among == 0 || among == 2);
        }
        let mut seen = [0u32; 3];
        for key in 0..4000u32 {
            seen[s.pick(&key.to_le_bytes(), [0usize, 2].into_iter()).unwrap()] += 1;
        }
        // Binomial(4000, 1/2): sd 32, so 1,800–2,200 is over six sd wide.
        assert!((1800..=2200).contains(&seen[0]), "{seen:?}");
    }

    #[test]
    fn equal_addresses_tie_and_the_earlier_position_wins() {
        let s = scores(&[("a:1", 1), ("a:1", 1)]);
        for key in 0..100u32 {
            assert_eq!(owner(&s, key), 0);
        }
    }

    #[test]
    fn no_candidates_no_pick() {
        let s = scores(&[("a:1", 1)]);
        assert_eq!(s.pick(b"k", std::iter::empty()), None);
    }
}
