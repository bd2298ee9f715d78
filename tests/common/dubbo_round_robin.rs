//! Dubbo's RoundRobinLoadBalance as a model, for the integration tests and, by path, the
//! crate's own (`src/balancer/tests.rs`).

/// Dubbo's RoundRobinLoadBalance for one method (spec section 3): counters keyed by invoker
/// identity, the list walked in order, strict `>` (ties to the earliest), 60 s recycling when
/// the list's size differs from the map's, and a list of one returned untouched.
#[derive(Default, Clone, Debug, PartialEq)]
pub struct DubboRoundRobin {
    /// id -> (weight, current, last update ms)
    map: std::collections::HashMap<u64, (i32, i64, i64)>,
    /// Ids last updated by a pick at the library's clock: the time the pick read may be a few
    /// ms later than the model's.
    fuzzy: std::collections::HashSet<u64>,
}

impl DubboRoundRobin {
    /// The model holding these counters: id -> (weight, current, last update ms).
    pub fn with_counters(counters: impl IntoIterator<Item = (u64, (i32, i64, i64))>) -> Self {
        DubboRoundRobin {
            map: counters.into_iter().collect(),
            fuzzy: Default::default(),
        }
    }

    /// Whether a pick at `now_ms` could recycle otherwise than the model says: some counter's
    /// age within 50 ms of the 60 s limit while this pick or that counter's last one was at
    /// the library's clock (`fuzzy`), read a moment after the model's reading.
    pub fn ambiguous(&self, list: &[(u64, i32)], now_ms: i64, fuzzy: bool) -> bool {
        list.len() != self.map.len()
            && self.map.iter().any(|(id, e)| {
                (fuzzy || self.fuzzy.contains(id)) && (now_ms - e.2 - 60_000).abs() <= 50
            })
    }

    /// Dubbo's pick over `list` at `now_ms` (`fuzzy`: at the library's clock).
    pub fn select(&mut self, list: &[(u64, i32)], now_ms: i64, fuzzy: bool) -> u64 {
        if list.len() == 1 {
            return list[0].0;
        }
        for &(id, _) in list {
            match fuzzy {
                true => self.fuzzy.insert(id),
                false => self.fuzzy.remove(&id),
            };
        }
        let (mut best, mut max, mut total) = (None, i64::MIN, 0i64);
        for &(id, w) in list {
            let e = self.map.entry(id).or_insert((w, 0, now_ms));
            if e.0 != w {
                e.0 = w;
                e.1 = 0;
            }
            e.1 += w as i64;
            e.2 = now_ms;
            if best.is_none() || e.1 > max {
                max = e.1;
                best = Some(id);
            }
            total += w as i64;
        }
        if list.len() != self.map.len() {
            self.map.retain(|_, e| {
                if e.1 != 0 {
                    match now_ms - e.2 {
                        60_000 => RECYCLE_EDGES.with(|c| c.set((c.get().0 + 1, c.get().1))),
                        60_001 => RECYCLE_EDGES.with(|c| c.set((c.get().0, c.get().1 + 1))),
                        _ => {}
                    }
                }
                now_ms - e.2 <= 60_000
            });
        }
        let id = best.unwrap();
        self.map.get_mut(&id).unwrap().1 -= total;
        id
    }
}

thread_local! {
    static RECYCLE_EDGES: std::cell::Cell<(u64, u64)> = const { std::cell::Cell::new((0, 0)) };
}

/// Non-zero counters of invokers outside a select's list that this thread's models found
/// exactly 60,000 ms old (kept) and 60,001 ms old (recycled): whether a test reached the edge.
pub fn recycle_edges() -> (u64, u64) {
    RECYCLE_EDGES.with(|c| c.get())
}
