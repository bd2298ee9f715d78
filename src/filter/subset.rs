//! Subsetting: each consumer prefers `subset.size` of the invokers, so that in a large fleet a
//! consumer talks to a few providers and a provider to a few consumers (Finagle's aperture,
//! gRPC's random subsetting). Which few is rendezvous hashing: every invoker scores
//! `mix(hash(address) ^ hash(subset.key))` and the highest scores win. So:
//!
//! - different keys take nearly independent subsets, and every invoker is in about
//!   `size / n` of the consumers' subsets (a binomial spread: give consumers distinct keys);
//! - the subset depends on the key and the invokers' addresses only, not on ids, set order,
//!   process or language: a consumer that restarts with its key gets its subset back;
//! - churn moves as little as it can: an invoker leaving a subset is replaced by the next best
//!   score, one joining the set displaces only the member it outscores, and invokers outside
//!   a subset come and go without changing it.
//!
//! With `subset.index` instead of a key (consumer i of the consumers 0, 1, 2, …), the subsets
//! are dealt out rather than drawn, as Google's deterministic subsetting deals them: lay out
//! the n eligible invokers in round 0's order, then round 1's, and so on (round r orders them
//! by score with r's hash in the key's place, so every round is a new shuffle), and give
//! consumer i the places `i·size .. (i+1)·size` of that sequence. A subset may run from one
//! round into the next, so round r + 1 first moves the invokers of round r's last `size − 1`
//! places out of its own first `size − 1` (each just behind them, in order): no subset holds
//! an invoker twice. Consumers 0 to C−1 then hold every invoker ⌊C·size/n⌋ or ⌈C·size/n⌉
//! times, for any C. (That needs n ≥ 3·size − 3, so that the moves never reach a round's last
//! places; with larger subsets, unless size divides n, a subset skips an invoker it holds
//! already and takes one more place, the next consumer's first: every such skip moves a count by
//! one, and they add up as a random walk, so the counts drift apart as C grows, by about
//! √(C·size/n), near keyed subsets' binomial spread.) Load-blind strategies can use these subsets.
//! Rounds reshuffle so that consumers sharing one subset are few (a fixed order would give
//! consumers i and i + n/size the same one, sharing every failure). The price is churn: an
//! invoker joining or leaving changes every round's places after it and n, so most consumers'
//! subsets change (with keys, only those that held it).
//!
//! An invoker of weight 0 is not taken while any invoker weighs more (it would hold a place
//! and serve nothing), and with `zone` the subset is taken among the local zone's invokers
//! while it has a weighted one. The subset is then what the zone would be: calls go there
//! while enough of it is healthy, and spill over (in proportion, as a zone's do) when too
//! much of it is ejected or a call's own candidates (a failover's, say) leave none of it.

use crate::balancer::Member;
use crate::config::SubsetConfig;
use crate::strategy::stable_hash::{hash64, mix64};

/// Seeds the key's hash ("subsetky") and the addresses' ("subsetad"): part of the contract,
/// as they decide which invokers each key takes.
const KEY_SEED: u64 = 0x7375_6273_6574_6b79;
const ADDRESS_SEED: u64 = 0x7375_6273_6574_6164;
/// Seeds a round's hash ("subsetrd"), which stands for the key in `subset.index`'s orders.
const ROUND_SEED: u64 = u64::from_be_bytes(*b"subsetrd");

/// `subset.*`, resolved for picking subsets.
pub(crate) struct Subsetting {
    size: usize,
    choice: Choice,
}

enum Choice {
    /// `subset.key`'s hash: the best scores.
    Key(u64),
    /// `subset.index`: consecutive places in the rounds' orders.
    Index(u32),
}

impl Subsetting {
    /// None when subsetting is off.
    pub fn new(config: &SubsetConfig) -> Option<Subsetting> {
        if config.size == 0 {
            return None;
        }
        let choice = match (&config.key, config.index) {
            (Some(key), _) => Choice::Key(hash64(key.as_bytes(), KEY_SEED)),
            (None, Some(index)) => Choice::Index(index),
            (None, None) => return None,
        };
        Some(Subsetting {
            size: config.size as usize,
            choice,
        })
    }

    /// The subset of a set, as positions in set order: the `size` best-scoring invokers among
    /// those eligible (every eligible invoker when there are no more than `size`).
    pub fn choose(&self, members: &[Member], zone: Option<&str>) -> Box<[u32]> {
        let weighted = |m: &Member| m.weight > 0;
        let local = |m: &Member| zone.is_some() && m.zone.as_deref() == zone;
        let (by_weight, by_zone) = if members.iter().any(|m| weighted(m) && local(m)) {
            (true, true)
        } else {
            (members.iter().any(weighted), false)
        };
        let eligible = |m: &Member| (!by_weight || weighted(m)) && (!by_zone || local(m));
        let eligible: Vec<(u64, u32)> = members
            .iter()
            .enumerate()
            .filter(|(_, m)| eligible(m))
            .map(|(p, m)| (hash64(m.address.as_bytes(), ADDRESS_SEED), p as u32))
            .collect();
        let mut positions: Box<[u32]> = if eligible.len() <= self.size {
            eligible.into_iter().map(|(_, p)| p).collect()
        } else {
            match self.choice {
                Choice::Key(key_hash) => self.best_scores(eligible, key_hash),
                Choice::Index(index) => self.dealt(&eligible, index, members.len()),
            }
        };
        positions.sort_unstable();
        positions
    }

    /// The `size` best scores with `key_hash`, in no order (a selection, not a sort: updates of
    /// large sets); the same address twice ties, and the earlier position wins.
    fn best_scores(&self, eligible: Vec<(u64, u32)>, key_hash: u64) -> Box<[u32]> {
        let mut ranked: Vec<(u64, u32)> = eligible
            .into_iter()
            .map(|(address_hash, p)| (mix64(address_hash ^ key_hash), p))
            .collect();
        ranked.select_nth_unstable_by(self.size - 1, |a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        ranked.truncate(self.size);
        ranked.into_iter().map(|(_, p)| p).collect()
    }

    /// Consumer `index`'s places in the rounds' orders (see the module doc), as positions.
    fn dealt(&self, eligible: &[(u64, u32)], index: u32, set_len: usize) -> Box<[u32]> {
        let n = eligible.len() as u64;
        // size < n: a subset ends in the round it starts in, or in the next.
        let start = u64::from(index) * self.size as u64;
        let (mut round, mut place) = (start / n, (start % n) as usize);
        let mut order = round_order(eligible, round, self.size);
        let mut taken = vec![false; set_len];
        let mut chosen = Vec::with_capacity(self.size);
        while chosen.len() < self.size {
            if place == order.len() {
                round += 1;
                place = 0;
                order = round_order(eligible, round, self.size);
            }
            let p = order[place];
            place += 1;
            if !std::mem::replace(&mut taken[p as usize], true) {
                chosen.push(p);
            }
        }
        chosen.into()
    }
}

/// Round `round`'s order of the eligible invokers (address hash, position) for subsets of
/// `size`: their shuffle (see [`shuffled`]), then the invokers of the previous round's last
/// `size − 1` places moved out of its first `size − 1`.
fn round_order(eligible: &[(u64, u32)], round: u64, size: usize) -> Vec<u32> {
    let order = shuffled(eligible, round);
    let n = order.len();
    if round == 0 || size < 2 || n < 3 * size - 3 {
        return order;
    }
    // The previous round's last places are its shuffle's: its own moves stop short of them.
    let previous = shuffled(eligible, round - 1);
    let tail = &previous[n - (size - 1)..];
    let mut head: Vec<u32> = Vec::with_capacity(n);
    let mut behind: Vec<u32> = Vec::with_capacity(n);
    for p in order {
        if head.len() < size - 1 && !tail.contains(&p) {
            head.push(p);
        } else {
            behind.push(p);
        }
    }
    head.extend(behind);
    head
}

/// The eligible invokers (address hash, position) by score with the round's hash, best first,
/// the earlier position on a tie.
fn shuffled(eligible: &[(u64, u32)], round: u64) -> Vec<u32> {
    let round_hash = hash64(&round.to_le_bytes(), ROUND_SEED);
    let mut ranked: Vec<(u64, u32)> = eligible
        .iter()
        .map(|&(address_hash, p)| (mix64(address_hash ^ round_hash), p))
        .collect();
    ranked.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    ranked.into_iter().map(|(_, p)| p).collect()
}
