//! Zone preference (and subsets, which take its place): which invokers are local, when a zone
//! is drained, and how much of the traffic stays local as its invokers are ejected.

use super::Filter;
use crate::balancer::{Member, Snapshot};
use crate::rng::Rng;
use crate::strategy::SubsetWeights;

impl Filter {
    /// The local zone of a new set, for its snapshot: with subsetting, the consumer's subset.
    /// None when a pick with nothing ejected takes the whole set: no zone or subset
    /// configured, or no invoker (or every invoker) local.
    pub fn local_zone(&self, members: &[Member]) -> Option<LocalZone> {
        let positions: Box<[u32]> = match &self.subset {
            // Taken among weighted invokers while there are any: never drained when built.
            Some(subsetting) => subsetting.choose(members, self.zone.as_deref()),
            None => {
                self.zone.as_ref()?;
                let local = |p: u32| self.in_zone(&members[p as usize]);
                if self.drained(members, local, 0..members.len() as u32) {
                    return None;
                }
                (0..members.len() as u32).filter(|&p| local(p)).collect()
            }
        };
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

    /// Whether the invoker at set position `p` is one calls prefer (is "local"): in this
    /// consumer's subset with subsetting (every invoker is when the snapshot has no local
    /// zone: the subset is the whole set), else in its zone.
    pub(super) fn is_local(&self, snapshot: &Snapshot, p: u32) -> bool {
        match &self.subset {
            Some(_) => snapshot
                .local
                .as_ref()
                .is_none_or(|l| l.contains(p as usize)),
            None => self.in_zone(&snapshot.members[p as usize]),
        }
    }

    pub(super) fn in_zone(&self, member: &Member) -> bool {
        matches!((&self.zone, &member.zone), (Some(z), Some(m)) if **z == **m)
    }

    /// Every local invoker among `positions` weighs 0 while some other one does not: the zone
    /// is drained (its weights were set to 0 to move its traffic away), so it is preferred no
    /// more and calls go where the weights are, as a set's zero weights send them. (A subset
    /// takes weighted invokers while there are any, so it drains only as they are ejected.)
    pub(super) fn drained(
        &self,
        members: &[Member],
        local: impl Fn(u32) -> bool,
        positions: impl IntoIterator<Item = u32>,
    ) -> bool {
        let (mut any_local, mut local_weight, mut other_weight) = (false, false, false);
        for p in positions {
            let weighted = members[p as usize].weight > 0;
            if local(p) {
                any_local = true;
                local_weight |= weighted;
            } else {
                other_weight |= weighted;
            }
        }
        any_local && !local_weight && other_weight
    }

    /// Which local invokers the zone's health counts: where weight 0 drains an invoker and
    /// some of `positions` weighs more, the weighted ones only. A drained invoker takes no
    /// calls, so it is no capacity of the zone whether or not it is ejected (as for the
    /// ejection budget): counted, the ejection of a drained invoker spilled calls out of a
    /// zone whose weighted invokers were all healthy, and drained invokers that were not
    /// ejected kept every call in a zone that had lost most of its weighted capacity.
    pub(super) fn health_counter(
        &self,
        members: &[Member],
        positions: impl IntoIterator<Item = u32>,
    ) -> impl Fn(&Member) -> bool {
        let any_weighted = self.weights_drain
            && positions
                .into_iter()
                .any(|p| members[p as usize].weight > 0);
        move |m: &Member| !any_weighted || m.weight > 0
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

impl LocalZone {
    /// Whether set position `pos` is local.
    #[inline]
    pub fn contains(&self, pos: usize) -> bool {
        self.mask[pos / 64] & (1 << (pos % 64)) != 0
    }
}
