//! `Balancer::stats_json`: the set and its counters as JSON.

use super::{Balancer, Inner, Snapshot};
use crate::clock::Clock;
use crate::stats::BYPASS;
use crate::strategy::{MethodVisitor, StatsAt};
use crate::weight::effective_weight;
use std::fmt::Write as _;

impl Balancer {
    /// A JSON snapshot of the set and its counters (summed over methods, plus a per-method
    /// breakdown); effective weights are evaluated at `now_us`.
    pub fn stats_json(&self, now_us: i64) -> String {
        let _cold = crate::fork::cold_call();
        let inner = &*self.inner;
        let snapshot = inner.snapshot.load();
        let mut names = names_in_rows(inner, &snapshot);
        #[cfg(test)]
        AFTER_NAMES.with(|hook| hook.take().map(|f| f()));
        let clock = Clock::new(now_us);
        let (now_ms, now_us) = (clock.now_ms(), clock.now_us());
        let method = |id: u32| inner.methods.get(id);
        let each_method = |f: &mut MethodVisitor<'_>| inner.methods.each(|id, m| f(id, m));
        let at = StatsAt {
            now_us,
            now_ms,
            library_clock: clock.is_library(),
            method: &method,
            each_method: &each_method,
            snapshot: &snapshot,
            per_call: &std::cell::OnceCell::new(),
        };
        let mut out = String::with_capacity(256 + snapshot.members.len() * 256);
        out.push_str("{\"strategy\":");
        json_str(&mut out, inner.strategy.kind().name());
        out.push_str(",\"invokers\":[");
        for (i, m) in snapshot.members.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let mut sums = [0u64; 6];
            let rows = method_rows(m.state.methods.iter().map(|(method, s)| {
                let row = [
                    if inner.spread_counters {
                        s.in_flight()
                    } else {
                        s.active()
                    } as u64,
                    s.selected(),
                    s.succeeded(),
                    s.failed(),
                    s.timeouts(),
                    s.succeeded_elapsed_us(),
                ];
                for (sum, v) in sums.iter_mut().zip(row) {
                    *sum = sum.saturating_add(v);
                }
                (method, row)
            }));
            let weight = effective_weight(m.weight, m.start_time_ms, m.warmup_ms, now_ms);
            let _ = write!(out, "{{\"id\":{},\"address\":", m.id);
            json_str(&mut out, &m.address);
            if let Some(zone) = &m.zone {
                out.push_str(",\"zone\":");
                json_str(&mut out, zone);
            }
            let mean_us = sums[5].checked_div(sums[2]).unwrap_or(0);
            let _ = write!(out,
                ",\"weight\":{},\"effective_weight\":{},\"start_time_ms\":{},\"warmup_ms\":{},\"active\":{},\"selected\":{},\"succeeded\":{},\"failures\":{},\"timeouts\":{},\"mean_success_us\":{}",
                m.weight,
                weight,
                m.start_time_ms,
                m.warmup_ms,
                sums[0],
                sums[1],
                sums[2],
                sums[3],
                sums[4],
                mean_us
            );
            inner.strategy.stats_fields(m, &at, &mut out);
            if let Some(filter) = &inner.filter {
                filter.stats_fields(&snapshot, i as u32, now_ms, &mut out);
            }
            out.push_str(",\"methods\":[");
            for (k, (method, row)) in rows.into_iter().enumerate() {
                if k > 0 {
                    out.push(',');
                }
                out.push_str("{\"method\":");
                let name = match names.binary_search_by_key(&method, |&(id, _)| id) {
                    Ok(k) => Some(k),
                    // The invoker's first call of this method came after the names were read
                    // (another thread's pick during this call): its name is looked up now, or
                    // the row would read as the service level's, "".
                    Err(k) => inner.methods.names_of(|id| id == method).pop().map(|n| {
                        names.insert(k, n);
                        k
                    }),
                };
                json_str(&mut out, name.map_or("", |k| &names[k].1));
                let _ = write!(out,
                    ",\"active\":{},\"selected\":{},\"succeeded\":{},\"failures\":{},\"timeouts\":{}",
                    row[0], row[1], row[2], row[3], row[4]
                );
                inner.strategy.method_stats_fields(
                    m.state.methods.get(method),
                    weight,
                    &at,
                    &mut out,
                );
                out.push('}');
            }
            out.push_str("]}");
        }
        out.push_str("]}");
        out
    }
}

/// The names of the methods some invoker of the set has counters for, by id.
fn names_in_rows(inner: &Inner, snapshot: &Snapshot) -> Vec<(u32, Box<str>)> {
    let mut used: Vec<u64> = Vec::new();
    for m in snapshot.members.iter() {
        for (method, _) in m.state.methods.iter() {
            let id = (method & !BYPASS) as usize;
            if used.len() <= id / 64 {
                used.resize(id / 64 + 1, 0);
            }
            used[id / 64] |= 1 << (id % 64);
        }
    }
    inner.methods.names_of(|id| {
        used.get(id as usize / 64)
            .is_some_and(|w| w & 1 << (id % 64) != 0)
    })
}

/// One row per method, in method order: a method's calls picked among a single candidate
/// (counted under its `BYPASS` key) are its calls too. Sorted rather than searched: an
/// invoker that thousands of methods call would cost a search per method, and a stats call
/// over such a set minutes (7 s at 4,000 methods over 1,000 invokers).
fn method_rows(rows: impl Iterator<Item = (u32, [u64; 6])>) -> Vec<(u32, [u64; 6])> {
    let mut rows: Vec<(u32, [u64; 6])> = rows.map(|(m, row)| (m & !BYPASS, row)).collect();
    rows.sort_unstable_by(|a, b| {
        #[cfg(test)]
        ROW_COMPARISONS.with(|c| c.set(c.get() + 1));
        a.0.cmp(&b.0)
    });
    rows.dedup_by(|later, kept| {
        if later.0 != kept.0 {
            return false;
        }
        for (a, v) in kept.1.iter_mut().zip(later.1) {
            *a = a.saturating_add(v);
        }
        true
    });
    rows
}

#[cfg(test)]
thread_local! {
    /// Run by the next stats call of this thread once it has read the names of its rows.
    static AFTER_NAMES: std::cell::Cell<Option<Box<dyn FnOnce()>>> = const { std::cell::Cell::new(None) };
    static ROW_COMPARISONS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

pub(crate) fn json_str(out: &mut String, s: &str) {
    if !s.bytes().any(|b| b == b'"' || b == b'\\' || b < 0x20) {
        out.push('"');
        out.push_str(s);
        out.push('"');
        return;
    }
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn method_rows_merge_bypass_rows_in_method_order() {
        let rows = method_rows(
            [
                (7, [1, 2, 3, 4, 5, 6]),
                (2 | BYPASS, [1, 1, 1, 1, 1, 1]),
                (2, [10, 10, 10, 10, 10, 10]),
                (7 | BYPASS, [u64::MAX, 0, 0, 0, 0, 0]),
            ]
            .into_iter(),
        );
        assert_eq!(rows, vec![(2, [11; 6]), (7, [u64::MAX, 2, 3, 4, 5, 6])]);
    }

    /// A stats call copies the names of the methods in its rows, not of every method interned
    /// (10 ms per call at 100,000 interned, one in use).
    #[test]
    fn a_stats_call_copies_only_the_names_of_methods_with_counters() {
        let b = Balancer::new("loadbalance=random").unwrap();
        let set: Vec<crate::Invoker> = (1..=3)
            .map(|i| crate::Invoker::new(i, format!("10.0.0.{i}:20880")))
            .collect();
        b.update(&set).unwrap();
        let ids: Vec<u32> = (0..10_000)
            .map(|m| b.method(&format!("m{m}")).unwrap())
            .collect();
        let now = 1_700_000_000_000_000;
        for &m in [ids[17], ids[9_000]].iter() {
            let id = b.select(m, b"", now).unwrap();
            b.report(m, id, 1_000, crate::Outcome::Success, now)
                .unwrap();
        }
        super::super::methods::NAMES_COPIED.with(|c| c.set(0));
        let stats: serde_json::Value = serde_json::from_str(&b.stats_json(now)).unwrap();
        let copied = super::super::methods::NAMES_COPIED.with(|c| c.get());
        assert_eq!(copied, 2);
        let mut named: Vec<&str> = stats["invokers"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|i| i["methods"].as_array().unwrap())
            .map(|m| m["method"].as_str().unwrap())
            .collect();
        named.sort_unstable();
        assert_eq!(named, ["m17", "m9000"]);
    }

    /// A method whose first calls come while a stats call runs, after it read the names of its
    /// rows (another thread's picks), keeps its name in the rows: they read "" (the service
    /// level's name) when the names were only those of methods with counters at the start.
    #[test]
    fn a_method_first_served_during_a_stats_call_keeps_its_name() {
        let b = std::sync::Arc::new(Balancer::new("loadbalance=random").unwrap());
        let set: Vec<crate::Invoker> = (1..=3)
            .map(|i| crate::Invoker::new(i, format!("10.0.0.{i}:20880")))
            .collect();
        b.update(&set).unwrap();
        let now = 1_700_000_000_000_000;
        // Interned before the stats call, first picked during it.
        let say_hello = b.method("sayHello").unwrap();
        let other = b.clone();
        AFTER_NAMES.with(|hook| {
            hook.set(Some(Box::new(move || {
                let id = other.select_among(say_hello, b"", &[2], &[], now).unwrap();
                other
                    .report(say_hello, id, 1_000, crate::Outcome::Success, now)
                    .unwrap();
            })))
        });
        let stats: serde_json::Value = serde_json::from_str(&b.stats_json(now)).unwrap();
        let rows: Vec<(u64, &str)> = stats["invokers"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|i| {
                let id = i["id"].as_u64().unwrap();
                i["methods"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(move |m| (id, m["method"].as_str().unwrap()))
            })
            .collect();
        assert_eq!(rows, [(2, "sayHello")]);
    }

    /// Merging the rows of m methods takes O(m log m) comparisons, not one search per method.
    #[test]
    fn method_rows_of_many_methods_are_not_searched_one_by_one() {
        let m = 4096u32;
        // Table order is hash order: any permutation, here a stride through the ids.
        let rows = (0..2 * m).map(|i| {
            let method = i.wrapping_mul(2_654_435_761) % m;
            let method = if i < m { method } else { method | BYPASS };
            (method, [1; 6])
        });
        ROW_COMPARISONS.with(|c| c.set(0));
        let merged = method_rows(rows);
        let comparisons = ROW_COMPARISONS.with(|c| c.get());
        assert_eq!(merged.len(), m as usize);
        assert!(merged.iter().all(|(_, row)| *row == [2; 6]));
        // 2m log2(2m) = 106,496; one search per row is about m^2 = 16.8 million.
        let bound = 2 * 2 * m as u64 * 13;
        assert!(
            comparisons <= bound,
            "{comparisons} comparisons, bound {bound}"
        );
    }
}
