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

/// `subset.*`, resolved for picking subsets.
pub(crate) struct Subsetting {
    size: usize,
    key_hash: u64,
}

impl Subsetting {
    /// None when subsetting is off.
    pub fn new(config: &SubsetConfig) -> Option<Subsetting> {
        let key = config.key.as_deref().filter(|_| config.size > 0)?;
        Some(Subsetting {
            size: config.size as usize,
            key_hash: hash64(key.as_bytes(), KEY_SEED),
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
        let mut ranked: Vec<(u64, u32)> = members
            .iter()
            .enumerate()
            .filter(|(_, m)| eligible(m))
            .map(|(p, m)| (self.score(&m.address), p as u32))
            .collect();
        // The `size` best, in no order (a selection, not a sort: updates of large sets); the
        // same address twice ties, and the earlier position wins.
        if ranked.len() > self.size {
            ranked.select_nth_unstable_by(self.size - 1, |a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
            ranked.truncate(self.size);
        }
        let mut positions: Box<[u32]> = ranked.into_iter().map(|(_, p)| p).collect();
        positions.sort_unstable();
        positions
    }

    /// The invoker's rendezvous score for this consumer.
    fn score(&self, address: &str) -> u64 {
        mix64(hash64(address.as_bytes(), ADDRESS_SEED) ^ self.key_hash)
    }
}
