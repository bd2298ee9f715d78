//! Zone preference: which invokers are local, when a zone is drained, and how much of the
//! traffic stays local as its invokers are ejected.

use super::Filter;
use crate::balancer::Member;
use crate::rng::Rng;
use crate::strategy::SubsetWeights;

impl Filter {
    /// The local zone of a new set, for its snapshot. None when a pick with nothing ejected
    /// takes the whole set: no zone configured, or no invoker (or every invoker) local.
    pub fn local_zone(&self, members: &[Member]) -> Option<LocalZone> {
        self.zone.as_ref()?;
        if self.drained(members) {
            return None;
        }
        let positions: Box<[u32]> = (0..members.len() as u32)
            .filter(|&p| self.is_local(&members[p as usize]))
            .collect();
        if positions.is_empty() || positions.len() == members.len() {
            return None;
        }
        let mut mask = vec![0u64; members.len().div_ceil(64)];
        for &p in positions.iter() {
            mask[p as usize / 64] |= 1 << (p % 64);
        }
        Some(LocalZone {
            weights: SubsetWeights::new(members, &positions),
            mask: mask.into(),
            positions,
        })
    }

    pub(super) fn is_local(&self, member: &Member) -> bool {
        matches!((&self.zone, &member.zone), (Some(z), Some(m)) if **z == **m)
    }

    /// Every local invoker weighs 0 while some other invoker does not: the zone is drained (its
    /// weights were set to 0 to move its traffic away), so it is preferred no more and calls
    /// go where the weights are, as a set's zero weights send them.
    pub(super) fn drained<'m>(&self, members: impl IntoIterator<Item = &'m Member>) -> bool {
        let (mut local, mut local_weight, mut other_weight) = (false, false, false);
        for m in members {
            if self.is_local(m) {
                local = true;
                local_weight |= m.weight > 0;
            } else {
                other_weight |= m.weight > 0;
            }
        }
        local && !local_weight && other_weight
    }

    /// The local share as a 32-bit fixed-point probability: 1 << 32 = always local.
    pub(super) fn local_share(&self, local_total: u64, local_healthy: u64) -> u64 {
        if local_total == 0 || local_healthy == 0 {
            return 0;
        }
        let needed = local_total * self.min_healthy_percent;
        if local_healthy * 100 >= needed {
            1 << 32
        } else {
            ((local_healthy * 100) << 32) / needed
        }
    }

    pub(super) fn stays_local(share: u64, rng: &Rng) -> bool {
        share >= 1 << 32 || (share > 0 && rng.below(1 << 32) < share)
    }
}

/// The local zone's invokers of one set, built on update: what a pick over the whole set
/// narrows to while no invoker is ejected (always, without outlier ejection), with no
/// per-thread view to look up.
pub(crate) struct LocalZone {
    /// Positions in set order (at least one, fewer than the whole set).
    pub positions: Box<[u32]>,
    /// Membership bitset over positions.
    pub mask: Box<[u64]>,
    pub weights: SubsetWeights,
}
