//! The filtered whole set a pick draws from: the set's local zone while nothing is ejected,
//! else a view cached per thread and rebuilt only when an ejection starts or ends or the set
//! changes.

use super::Filter;
use crate::balancer::Snapshot;
use crate::rng::Rng;
use crate::scratch::with_scratch;
use crate::strategy::{AliasScratch, SubsetWeights};
use std::cell::RefCell;
use std::sync::atomic::Ordering::Acquire;

impl Filter {
    /// Runs `pick` over the filtered whole set (positions in set order, whether that is the
    /// whole set, and the membership mask).
    pub fn with_view<R>(
        &self,
        snapshot: &Snapshot,
        rng: &Rng,
        pick: impl FnOnce(&[u32], bool, &[u64], Option<&SubsetWeights>) -> R,
    ) -> R {
        if self.live.load(Acquire) == 0 {
            // Nothing ejected: every local invoker is healthy, so the local share is whole,
            // and the set's own local zone (or the whole set) is the view.
            return match &snapshot.local {
                Some(local) => pick(&local.positions, false, &local.mask, Some(&local.weights)),
                None => pick(&snapshot.all, true, &[], None),
            };
        }
        with_scratch(&VIEWS, |views| {
            self.pick_in_view(views, snapshot, rng, pick)
        })
    }

    /// `with_view` with this thread's views (or fresh ones).
    fn pick_in_view<R>(
        &self,
        views: &mut Views,
        snapshot: &Snapshot,
        rng: &Rng,
        pick: impl FnOnce(&[u32], bool, &[u64], Option<&SubsetWeights>) -> R,
    ) -> R {
        let epoch = self.epoch.load(Acquire);
        let Views { entries, scratch } = views;
        let view = &mut entries[self.uid as usize % CACHED];
        if !view.matches(self.uid, snapshot.generation, epoch) {
            self.build(view, snapshot, scratch);
            view.key = Some((self.uid, snapshot.generation, epoch));
        }
        let n = snapshot.members.len();
        if Self::stays_local(view.local_share, rng) {
            let is_all = view.local.len() == n;
            let weights = view.local_weights.as_ref().filter(|_| !is_all);
            pick(&view.local, is_all, &view.local_mask, weights)
        } else if view.healthy.len() == n {
            pick(&snapshot.all, true, &[], None)
        } else {
            let weights = view.healthy_weights.as_ref();
            pick(&view.healthy, false, &view.healthy_mask, weights)
        }
    }

    /// Rebuilds `view` in its own memory: once its buffers have grown, without allocating.
    fn build(&self, view: &mut View, snapshot: &Snapshot, scratch: &mut AliasScratch) {
        let n = snapshot.members.len();
        let words = n.div_ceil(64);
        view.healthy.clear();
        view.local.clear();
        view.healthy_mask.clear();
        view.healthy_mask.resize(words, 0);
        view.local_mask.clear();
        view.local_mask.resize(words, 0);
        let mut local_total = 0u64;
        // Drained among the invokers a pick can get: a zone whose weighted invokers are all
        // ejected is left with zero weights only, which must not draw its share of the calls.
        let members = &snapshot.members;
        let not_ejected = (0..n as u32).filter(|&p| !self.is_ejected(&members[p as usize]));
        let drained = self.drained(members, |p| self.is_local(snapshot, p), not_ejected);
        // The zone's health counts the invokers that take calls (see `health_counter`).
        let counts = self.health_counter(members, 0..n as u32);
        let mut local_healthy = 0u64;
        for (pos, m) in snapshot.members.iter().enumerate() {
            let local = !drained && self.is_local(snapshot, pos as u32);
            local_total += (local && counts(m)) as u64;
            if self.is_ejected(m) {
                continue;
            }
            view.healthy.push(pos as u32);
            view.healthy_mask[pos / 64] |= 1 << (pos % 64);
            if local {
                local_healthy += counts(m) as u64;
                view.local.push(pos as u32);
                view.local_mask[pos / 64] |= 1 << (pos % 64);
            }
        }
        if view.healthy.is_empty() {
            // Cannot happen with the ejection budget, but never leave a pick without candidates.
            view.healthy.extend(0..n as u32);
            view.healthy_mask.fill(u64::MAX);
        }
        view.local_share = self.local_share(local_total, local_healthy);
        rebuild_weights(&mut view.healthy_weights, snapshot, &view.healthy, scratch);
        rebuild_weights(&mut view.local_weights, snapshot, &view.local, scratch);
    }
}

/// `weights` rebuilt for `positions`, in the memory of the ones they replace.
fn rebuild_weights(
    weights: &mut Option<SubsetWeights>,
    snapshot: &Snapshot,
    positions: &[u32],
    scratch: &mut AliasScratch,
) {
    match weights {
        Some(weights) => weights.rebuild(&snapshot.members, positions, scratch),
        None => *weights = Some(SubsetWeights::new(&snapshot.members, positions)),
    }
}

/// One balancer's filtered whole set, as cached by one thread.
#[derive(Default)]
struct View {
    key: Option<(u64, u64, u64)>,
    healthy: Vec<u32>,
    healthy_mask: Vec<u64>,
    /// Draw tables of the two subsets (None until built).
    healthy_weights: Option<SubsetWeights>,
    local: Vec<u32>,
    local_mask: Vec<u64>,
    local_weights: Option<SubsetWeights>,
    local_share: u64,
}

impl View {
    fn matches(&self, uid: u64, generation: u64, epoch: u64) -> bool {
        self.key == Some((uid, generation, epoch))
    }
}

/// Views kept per thread, direct-mapped by the filter's uid (given out in turn, so the last
/// `CACHED` filters created never share a slot): a simulator, or a client of several services,
/// drives many balancers from one thread. Two filters in one slot take turns rebuilding it, in
/// its memory, so that even then a pick allocates nothing (it costs a pass over the set).
const CACHED: usize = 16;

#[derive(Default)]
struct Views {
    entries: [View; CACHED],
    /// The alias tables' working lists, shared by the thread's rebuilds.
    scratch: AliasScratch,
}

thread_local! {
    static VIEWS: RefCell<Views> = RefCell::new(Views::default());
}
