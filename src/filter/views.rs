//! The filtered whole set a pick draws from: the set's local zone while nothing is ejected,
//! else a view cached per thread and rebuilt only when an ejection starts or ends or the set
//! changes.

use super::Filter;
use crate::balancer::Snapshot;
use crate::rng::Rng;
use crate::scratch::with_scratch;
use crate::strategy::SubsetWeights;
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
        let slot = views.slot(self.uid, snapshot.generation, epoch);
        let view = &mut views.entries[slot];
        if !view.matches(self.uid, snapshot.generation, epoch) {
            self.build(view, snapshot);
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

    fn build(&self, view: &mut View, snapshot: &Snapshot) {
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
        for (pos, m) in snapshot.members.iter().enumerate() {
            let local = !drained && self.is_local(snapshot, pos as u32);
            local_total += local as u64;
            if self.is_ejected(m) {
                continue;
            }
            view.healthy.push(pos as u32);
            view.healthy_mask[pos / 64] |= 1 << (pos % 64);
            if local {
                view.local.push(pos as u32);
                view.local_mask[pos / 64] |= 1 << (pos % 64);
            }
        }
        if view.healthy.is_empty() {
            // Cannot happen with the ejection budget, but never leave a pick without candidates.
            view.healthy.extend(0..n as u32);
            view.healthy_mask.fill(u64::MAX);
        }
        view.local_share = self.local_share(local_total, view.local.len() as u64);
        view.healthy_weights = Some(SubsetWeights::new(&snapshot.members, &view.healthy));
        view.local_weights = Some(SubsetWeights::new(&snapshot.members, &view.local));
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

/// A few balancers' views per thread (a simulator may drive many balancers from one thread).
const CACHED: usize = 4;

#[derive(Default)]
struct Views {
    entries: [View; CACHED],
    next: usize,
}

impl Views {
    /// The entry of balancer `uid` (current or stale), or the one to reuse for it.
    fn slot(&mut self, uid: u64, _generation: u64, _epoch: u64) -> usize {
        if let Some(i) = self
            .entries
            .iter()
            .position(|v| v.key.is_some_and(|k| k.0 == uid))
        {
            return i;
        }
        let i = self.next;
        self.next = (self.next + 1) % CACHED;
        self.entries[i].key = None;
        i
    }
}

thread_local! {
    static VIEWS: RefCell<Views> = RefCell::new(Views::default());
}
