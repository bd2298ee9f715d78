//! The ready cache: the discovered endpoints, which of them can take a call now, and the set
//! polylb balances over, kept in step.

use crate::ids::Ids;
use crate::report::Clock;
use polylb::{Balancer, Invoker};
use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::task::{Context, Poll};
use std::time::Instant;
use tower::discover::Change;
use tower::Service;

/// Describes a discovered endpoint to polylb (its `id` is given by the balancer).
pub type Describe<K> = dyn Fn(&K) -> Invoker + Send + Sync;

pub struct Endpoints<K, S> {
    by_id: HashMap<u64, Endpoint<K, S>, BuildHasherDefault<IdHasher>>,
    by_key: HashMap<K, u64>,
    /// polylb's set in order: discovery order, as a Dubbo directory lists its providers
    /// (`roundrobin` and others walk the set in order).
    members: Vec<u64>,
    /// Ids of the endpoints whose `poll_ready` returned `Ready(Ok)` since their last call.
    ready: Vec<u64>,
    /// Ids of the others, polled by [`poll_pending`](Endpoints::poll_pending).
    pending: Vec<u64>,
    ids: Ids<K>,
    /// Whether polylb's set is `members`: false after a refused update.
    published: bool,
}

struct Endpoint<K, S> {
    key: K,
    service: S,
    invoker: Invoker,
    ready: bool,
    /// Where the id is in `ready` or `pending`, for O(1) moves between them.
    slot: usize,
}

impl<K, S> Endpoints<K, S> {
    pub fn new() -> Self {
        Endpoints {
            by_id: HashMap::default(),
            by_key: HashMap::new(),
            members: Vec::new(),
            ready: Vec::new(),
            pending: Vec::new(),
            ids: Ids::new(),
            published: true,
        }
    }

    /// How many endpoints polylb's set holds.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    pub fn ready_ids(&self) -> &[u64] {
        &self.ready
    }

    /// Whether every endpoint is ready and polylb's set is exactly them: then a pick needs no
    /// candidate list.
    pub fn all_ready(&self) -> bool {
        self.pending.is_empty() && self.published
    }
}

impl<K: Hash + Eq + Clone, S> Endpoints<K, S> {
    /// Applies one poll's worth of discovery changes as one polylb update. Refused, the
    /// changes' new services are dropped and only their removals apply (discovery does not
    /// send a removal again: an endpoint it removed must not go on taking calls).
    pub fn apply(
        &mut self,
        changes: Vec<Change<K, S>>,
        describe: &Describe<K>,
        balancer: &Balancer,
        now: Instant,
    ) -> Result<(), polylb::Error> {
        let mut leaving = HashSet::new();
        let mut joining = Vec::new();
        for (key, service) in last_change_per_key(changes) {
            let known = self.by_key.get(&key).copied();
            match (service, known) {
                (None, Some(id)) => {
                    leaving.insert(id);
                }
                (None, None) => {}
                (Some(service), _) => {
                    let id = known.unwrap_or_else(|| self.ids.id(&key, now));
                    let invoker = Invoker {
                        id,
                        ..describe(&key)
                    };
                    joining.push((key, service, invoker));
                }
            }
        }
        if leaving.is_empty() && joining.is_empty() {
            return Ok(());
        }
        let replacing: HashMap<u64, &Invoker> = joining
            .iter()
            .filter(|(_, _, inv)| self.by_id.contains_key(&inv.id))
            .map(|(_, _, inv)| (inv.id, inv))
            .collect();
        let mut invokers: Vec<Invoker> = Vec::with_capacity(self.members.len() + joining.len());
        for id in self.members.iter().filter(|id| !leaving.contains(id)) {
            match (replacing.get(id), self.by_id.get(id)) {
                (Some(new), _) => invokers.push((*new).clone()),
                (None, Some(endpoint)) => invokers.push(endpoint.invoker.clone()),
                (None, None) => {}
            }
        }
        let newcomers = joining.iter().map(|(_, _, inv)| inv);
        invokers.extend(
            newcomers
                .filter(|inv| !replacing.contains_key(&inv.id))
                .cloned(),
        );
        if let Err(refused) = self.publish(balancer, &invokers) {
            if !leaving.is_empty() {
                // A part of a set polylb accepted is accepted: no weight, id or size it
                // refuses can come with fewer members.
                let staying: Vec<Invoker> = self
                    .members
                    .iter()
                    .filter(|id| !leaving.contains(id))
                    .filter_map(|id| self.by_id.get(id))
                    .map(|endpoint| endpoint.invoker.clone())
                    .collect();
                if self.publish(balancer, &staying).is_ok() {
                    self.remove(&leaving, now);
                }
            }
            return Err(refused);
        }

        self.remove(&leaving, now);
        for (key, service, invoker) in joining {
            let id = invoker.id;
            if let Some(endpoint) = self.by_id.get_mut(&id) {
                // A new service for a known key: it must show itself ready before a call.
                endpoint.service = service;
                endpoint.invoker = invoker;
                self.unlist(id);
            } else {
                self.ids.joined(&key);
                self.by_key.insert(key.clone(), id);
                self.members.push(id);
                let endpoint = Endpoint {
                    key,
                    service,
                    invoker,
                    ready: false,
                    slot: 0,
                };
                self.by_id.insert(id, endpoint);
            }
            self.list(id, false);
        }
        Ok(())
    }

    /// Polls the endpoints that are not ready; those whose `poll_ready` fails leave the set
    /// (one polylb update for them all), as tower's p2c balancer drops them.
    pub fn poll_pending<Req>(
        &mut self,
        cx: &mut Context<'_>,
        balancer: &Balancer,
        clock: Clock,
    ) -> Result<(), polylb::Error>
    where
        S: Service<Req>,
    {
        let mut failed = HashSet::new();
        let mut at = 0;
        while let Some(&id) = self.pending.get(at) {
            let Some(endpoint) = self.by_id.get_mut(&id) else {
                self.pending.swap_remove(at);
                continue;
            };
            match endpoint.service.poll_ready(cx) {
                Poll::Ready(Ok(())) => {
                    // The last pending id moves to `at`: look there again.
                    self.unlist(id);
                    self.list(id, true);
                }
                Poll::Ready(Err(_)) => {
                    failed.insert(id);
                    at += 1;
                }
                Poll::Pending => at += 1,
            }
        }
        if failed.is_empty() {
            return Ok(());
        }
        self.remove(&failed, clock());
        let invokers: Vec<Invoker> = self
            .members
            .iter()
            .filter_map(|id| self.by_id.get(id))
            .map(|endpoint| endpoint.invoker.clone())
            .collect();
        let published = self.publish(balancer, &invokers);
        // Refused (it never is for a smaller set of accepted invokers), polylb keeps the failed
        // endpoints, and calls are picked among the ready ones until an update succeeds.
        self.published &= published.is_ok();
        published
    }

    fn publish(&mut self, balancer: &Balancer, invokers: &[Invoker]) -> Result<(), polylb::Error> {
        // A refused update changes nothing in polylb: `published` stays as it was.
        balancer.update(invokers)?;
        self.published = true;
        Ok(())
    }

    /// Calls the endpoint `id`, which must be ready; its readiness is spent.
    pub fn call<Req>(&mut self, id: u64, request: Req) -> Option<S::Future>
    where
        S: Service<Req>,
    {
        let endpoint = self.by_id.get_mut(&id).filter(|e| e.ready)?;
        let response = endpoint.service.call(request);
        self.unlist(id);
        self.list(id, false);
        Some(response)
    }

    fn remove(&mut self, ids: &HashSet<u64>, now: Instant) {
        for &id in ids {
            self.unlist(id);
            if let Some(endpoint) = self.by_id.remove(&id) {
                self.by_key.remove(&endpoint.key);
                self.ids.leave(endpoint.key, id, now);
            }
        }
        self.members.retain(|id| !ids.contains(id));
    }

    /// Takes `id` out of `ready` or `pending`.
    fn unlist(&mut self, id: u64) {
        let Some(endpoint) = self.by_id.get(&id) else {
            return;
        };
        let list = if endpoint.ready {
            &mut self.ready
        } else {
            &mut self.pending
        };
        let slot = endpoint.slot;
        if list.get(slot) != Some(&id) {
            return;
        }
        list.swap_remove(slot);
        if let Some(moved) = list.get(slot).and_then(|m| self.by_id.get_mut(m)) {
            moved.slot = slot;
        }
    }

    /// Puts `id`, listed nowhere, in `ready` or `pending`.
    fn list(&mut self, id: u64, ready: bool) {
        let Some(endpoint) = self.by_id.get_mut(&id) else {
            return;
        };
        let list = if ready {
            &mut self.ready
        } else {
            &mut self.pending
        };
        endpoint.ready = ready;
        endpoint.slot = list.len();
        list.push(id);
    }
}

/// The changes in the order their keys first appear, each key with its last change: `Some`
/// joins or replaces, `None` leaves.
fn last_change_per_key<K: Hash + Eq + Clone, S>(changes: Vec<Change<K, S>>) -> Vec<(K, Option<S>)> {
    let mut at: HashMap<K, usize> = HashMap::with_capacity(changes.len());
    let mut last: Vec<(K, Option<S>)> = Vec::with_capacity(changes.len());
    for change in changes {
        let (key, service) = match change {
            Change::Insert(key, service) => (key, Some(service)),
            Change::Remove(key) => (key, None),
        };
        match at.get(&key) {
            Some(&i) => last[i].1 = service,
            None => {
                at.insert(key.clone(), last.len());
                last.push((key, service));
            }
        }
    }
    last
}

/// Ids are given out in sequence: a multiply spreads them over the table's buckets at a
/// fraction of SipHash's cost, on the path of every call.
#[derive(Default)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}
