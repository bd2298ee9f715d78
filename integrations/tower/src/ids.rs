//! The ids polylb knows endpoints by, given out per discovery key.
//!
//! A key that leaves and comes back within [`RETAIN`] gets its old id again, so polylb resumes
//! the state it keeps for a departed id over that window (`roundrobin`'s counters, recycled
//! after 60 s as Dubbo recycles a URL's) instead of starting a new endpoint cold. Past it, the
//! key is forgotten and a return gets a fresh id, as polylb's state has gone too. Memory is
//! bounded under churn of keys that never return: a retired key is kept at most [`RETAIN`],
//! and at most [`MAX_RETIRED`] of them at once (the oldest forgotten first).

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::time::{Duration, Instant};

/// How long a departed key keeps its id: polylb's `roundrobin` keeps a departed id's counters
/// for 60 s.
pub const RETAIN: Duration = Duration::from_secs(60);

/// The most departed keys remembered at once.
pub const MAX_RETIRED: usize = 65_536;

#[derive(Debug)]
pub struct Ids<K> {
    /// The next id never given out: ids are never reused for another key, so a late report of
    /// an old endpoint's call never lands on a different one.
    next: u64,
    retired: HashMap<K, Retired>,
    /// Departures in time order, for expiry; an entry whose key returned (or left again later)
    /// no longer matches `retired` and is skipped.
    departures: VecDeque<(K, Instant)>,
}

#[derive(Debug, Clone, Copy)]
struct Retired {
    id: u64,
    at: Instant,
}

impl<K> Ids<K> {
    pub fn new() -> Self {
        Ids {
            next: 1,
            retired: HashMap::new(),
            departures: VecDeque::new(),
        }
    }
}

impl<K: Hash + Eq + Clone> Ids<K> {
    /// The id for a key about to join the set at `now`: its old one if it left less than
    /// [`RETAIN`] ago, else a new one. The key stays retired until [`joined`](Ids::joined), so
    /// that a join polylb refuses leaves it as it was.
    pub fn id(&mut self, key: &K, now: Instant) -> u64 {
        self.expire(now);
        match self.retired.get(key) {
            Some(r) => r.id,
            None => {
                let id = self.next;
                self.next += 1;
                id
            }
        }
    }

    /// `key` is in the set (under the id [`id`](Ids::id) gave).
    pub fn joined(&mut self, key: &K) {
        self.retired.remove(key);
    }

    /// Remembers that `key`, known as `id`, left the set at `now`.
    pub fn leave(&mut self, key: K, id: u64, now: Instant) {
        self.expire(now);
        // Bounding the departures bounds the retired keys too (each has one), also when keys
        // that come back and leave again leave stale departures behind.
        while self.departures.len() >= MAX_RETIRED {
            self.forget_oldest();
        }
        self.departures.push_back((key.clone(), now));
        self.retired.insert(key, Retired { id, at: now });
    }

    fn expire(&mut self, now: Instant) {
        while let Some((_, at)) = self.departures.front() {
            if now.saturating_duration_since(*at) < RETAIN {
                break;
            }
            self.forget_first();
        }
    }

    /// Drops the oldest departure; true if its key was still retired under it.
    fn forget_first(&mut self) -> bool {
        let Some((key, at)) = self.departures.pop_front() else {
            return false;
        };
        let current = self.retired.get(&key).is_some_and(|r| r.at == at);
        if current {
            self.retired.remove(&key);
        }
        current
    }

    /// Forgets the key that left longest ago, dropping stale departures on the way.
    fn forget_oldest(&mut self) {
        while !self.departures.is_empty() && !self.forget_first() {}
    }

    /// How many departed keys are remembered.
    #[cfg(test)]
    pub fn retired(&self) -> usize {
        self.retired.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_back_within_the_window_keeps_its_id_and_later_gets_a_new_one() {
        let t0 = Instant::now();
        let mut ids = Ids::new();
        let join = |ids: &mut Ids<&str>, key, now| {
            let id = ids.id(&key, now);
            ids.joined(&key);
            id
        };
        let a = join(&mut ids, "a", t0);
        let b = join(&mut ids, "b", t0);
        assert_ne!(a, b);
        ids.leave("a", a, t0);
        assert_eq!(join(&mut ids, "a", t0 + RETAIN / 2), a);
        ids.leave("a", a, t0 + RETAIN / 2);
        let back = join(&mut ids, "a", t0 + RETAIN / 2 + RETAIN);
        assert!(back != a && back != b, "{back}");
        assert_eq!(ids.retired(), 0);
    }

    #[test]
    fn a_stale_departure_does_not_expire_a_later_one() {
        let t0 = Instant::now();
        let mut ids = Ids::new();
        let a = ids.id(&"a", t0);
        ids.leave("a", a, t0);
        assert_eq!(ids.id(&"a", t0 + RETAIN / 2), a);
        ids.joined(&"a");
        ids.leave("a", a, t0 + RETAIN / 2);
        // The first departure expires here; the second is younger than RETAIN.
        assert_eq!(ids.id(&"a", t0 + RETAIN + RETAIN / 4), a);
    }

    #[test]
    fn a_flapping_key_leaves_a_bounded_trail() {
        let t0 = Instant::now();
        let mut ids = Ids::new();
        let a = ids.id(&"a", t0);
        for _ in 0..(2 * MAX_RETIRED) {
            ids.leave("a", a, t0);
            assert_eq!(ids.id(&"a", t0), a);
            ids.joined(&"a");
        }
        assert!(ids.departures.len() <= MAX_RETIRED);
    }

    #[test]
    fn churn_of_unique_keys_stays_bounded() {
        let t0 = Instant::now();
        let mut ids = Ids::new();
        for k in 0..(MAX_RETIRED as u64 + 1000) {
            let id = ids.id(&k, t0);
            ids.joined(&k);
            ids.leave(k, id, t0);
        }
        assert_eq!(ids.retired(), MAX_RETIRED);
        assert!(ids.departures.len() <= MAX_RETIRED);
        // The oldest were forgotten first: key 0 gets a new id, the last key its old one.
        let last = MAX_RETIRED as u64 + 999;
        assert_eq!(ids.id(&last, t0), last + 1);
        assert_eq!(ids.id(&0, t0), MAX_RETIRED as u64 + 1001);
        // Everything has expired a window later.
        ids.id(&u64::MAX, t0 + RETAIN);
        assert_eq!(ids.retired(), 0);
    }
}
