//! Replacing the set: `Balancer::update` checks the invokers (`validate`), then builds and
//! publishes the next snapshot.

use super::snapshot::{IdIndex, SnapshotBody};
use super::{Balancer, IdHasher, Member, Snapshot};
use crate::clock::Clock;
use crate::config::Config;
use crate::error::{Error, Status};
use crate::invoker::Invoker;
use crate::strategy::weighted::SCALE;
use crate::strategy::{StrategyKind, Weights, WholeSet};
use crate::weight::time_dependent_until;
use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::sync::atomic::{AtomicBool, Ordering::Release};
use std::sync::Arc;

impl Balancer {
    /// Replaces the whole set atomically. State of ids that stay is kept; state of ids that left
    /// is dropped. A rejected update changes nothing.
    pub fn update(&self, invokers: &[Invoker]) -> Result<(), Error> {
        let inner = &*self.inner;
        validate(invokers, inner.strategy.kind(), &inner.config)?;
        let _cold = crate::fork::cold_call();
        let mut replaced = inner.update_lock.lock();
        let old = inner.snapshot.load_full();
        let mut until = i64::MIN;
        let members: Box<[Member]> = invokers
            .iter()
            .map(|inv| {
                let previous = old.position(inv.id).map(|p| &old.members[p]);
                let warmup_ms = if inv.warmup_ms < 0 {
                    inner.config.warmup_ms
                } else {
                    inv.warmup_ms
                };
                until = until.max(time_dependent_until(
                    inv.weight,
                    inv.start_time_ms,
                    warmup_ms,
                ));
                Member {
                    id: inv.id,
                    address: match previous {
                        Some(p) if *p.address == *inv.address => p.address.clone(),
                        _ => Arc::from(inv.address.as_str()),
                    },
                    // Empty is no zone, as the C ABI's (NULL, 0) is.
                    zone: inv.zone.as_deref().filter(|z| !z.is_empty()).map(Arc::from),
                    weight: inv.weight,
                    start_time_ms: inv.start_time_ms,
                    warmup_ms,
                    state: previous.map_or_else(Default::default, |p| p.state.clone()),
                }
            })
            .collect();
        let prepared = inner.strategy.prepare(&members, &old);
        let local = inner.filter.as_ref().and_then(|f| f.local_zone(&members));
        let snapshot = Arc::new(Snapshot::new(SnapshotBody {
            all: (0..members.len() as u32).collect(),
            members,
            by_id: IdIndex::new(&invokers.iter().map(|i| i.id).collect::<Vec<_>>()),
            time_dependent_until_ms: until,
            settled: AtomicBool::new(until == i64::MIN || Clock::new(0).now_ms() >= until),
            whole_set: prepared.as_ref().and_then(|p| p.downcast_arc::<WholeSet>()),
            pair_weights: prepared.as_ref().and_then(|p| p.downcast_arc::<Weights>()),
            prepared,
            local,
        }));
        inner.snapshot.store(snapshot.clone());
        // Threads compare this with their cached snapshot's generation (see `Inner::pin`).
        inner.generation.store(snapshot.generation, Release);
        if let Some(filter) = &inner.filter {
            filter.after_update(&snapshot);
        }
        let clock = Clock::new(0);
        inner
            .methods
            .each(|id, m| inner.strategy.after_update(m, id, &snapshot, &old, &clock));
        replaced.retain(|s| s.strong_count() > 0);
        replaced.push(Arc::downgrade(&old));
        drop(old);
        inner.forget_cached_snapshot();
        Ok(())
    }
}

/// Most points a hash ring may hold (`hash.nodes`, rounded down to a multiple of 4, times the
/// invokers): what 32-bit indexes reach.
pub(crate) const MAX_RING_POINTS: u64 = u32::MAX as u64;

/// Rings from this many points on (about 400 MB while built) are built only once the memory
/// their build needs is known to be there.
const PROBED_RING_POINTS: u64 = 1 << 24;
/// What a ring's build holds at its peak per point, besides the rings already built: its sorted
/// placements and its own points (8 B each), its buckets and shadowed points (the first build
/// of 160 × 100,000 points peaks at about 21 B per point; README).
const RING_BUILD_BYTES_PER_POINT: u64 = 24;

/// Refuses a ring whose build could not have the memory it needs. A failed allocation aborts a
/// Rust process (and its C, Go, Java or Python host) in the middle of the build, so where the
/// address space is limited (`ulimit -v`, a container's `RLIMIT_AS`, or no overcommit) such a
/// ring is an error of the update instead. The probe reserves the build's peak and releases it
/// at once (never touching the pages): the build that follows finds the room it left.
fn ring_memory_available(points: u64) -> Result<(), Error> {
    let bytes = points.saturating_mul(RING_BUILD_BYTES_PER_POINT);
    let fits =
        usize::try_from(bytes).is_ok_and(|bytes| Vec::<u8>::new().try_reserve_exact(bytes).is_ok());
    if fits {
        return Ok(());
    }
    Err(Error::new(
        Status::LimitExceeded,
        format!(
            "a ring of {points} points needs about {} MB while it is built, which this process \
             cannot allocate (its address-space limit, or the memory the system grants): use \
             fewer hash.nodes or invokers",
            bytes >> 20
        ),
    ))
}

/// Most the weights of one set may add up to: the strategies that scale weights (slow start,
/// warm-up draws, boundedhash's capacities, p2c's ties) add them up in 1/`SCALE` units in 64
/// bits. Only sets of more than 2^23 invokers weighing about `i32::MAX` each pass it (past it,
/// boundedhash's total wrapped and its bound was lost).
pub(crate) const MAX_TOTAL_WEIGHT: u64 = u64::MAX / SCALE;

/// Whether the (non-negative) weights add up to at most [`MAX_TOTAL_WEIGHT`].
fn total_weight_fits(weights: impl Iterator<Item = i32>) -> Result<(), Error> {
    let total = weights.fold(0u64, |t, w| t.saturating_add(w.max(0) as u64));
    if total > MAX_TOTAL_WEIGHT {
        return Err(Error::new(
            Status::LimitExceeded,
            format!(
                "the weights add up to {total}, more than the limit of {MAX_TOTAL_WEIGHT} \
                 (2^64 / {SCALE}: weights are added up in 1/{SCALE} units in 64 bits)"
            ),
        ));
    }
    Ok(())
}

fn validate(invokers: &[Invoker], kind: StrategyKind, config: &Config) -> Result<(), Error> {
    let hash_nodes = config.hash_nodes;
    // The hashing strategies place each invoker on the ring (in maglev's table, among
    // rendezvous' scores) by its address: with no address (a C caller that left `address_len`
    // at 0) every invoker's points are the same, and one of them takes every key.
    let hashing = kind.hashes_keys();
    // Each invoker of maglev's table owns slots of it (see `strategy::maglev`).
    let table = config.maglev_table_size;
    if kind == StrategyKind::Maglev && invokers.len() as u64 > u64::from(table) {
        return Err(Error::new(
            Status::LimitExceeded,
            format!(
                "{} invokers do not fit maglev's table of {table} slots: set \
                 maglev.tableSize to a prime of about 100 times the number of invokers",
                invokers.len()
            ),
        ));
    }
    // The ring indexes its points with 32 bits (its bucket index), so their count must fit.
    // Checked before anything is built: a ring that large would need over 32 GB anyway.
    let ring = matches!(
        kind,
        StrategyKind::ConsistentHash | StrategyKind::BoundedHash
    );
    let points = invokers.len() as u64 * u64::from(hash_nodes / 4 * 4);
    if ring && points > MAX_RING_POINTS {
        return Err(Error::new(
            Status::LimitExceeded,
            format!(
                "{} invokers with hash.nodes={hash_nodes} would place {points} points on the \
                 ring, more than its limit of {MAX_RING_POINTS} (a ring's build takes about \
                 {RING_BUILD_BYTES_PER_POINT} B per point)",
                invokers.len()
            ),
        ));
    }
    if ring && points >= PROBED_RING_POINTS {
        ring_memory_available(points)?;
    }
    total_weight_fits(invokers.iter().map(|i| i.weight))?;
    let mut seen: HashMap<u64, usize, BuildHasherDefault<IdHasher>> =
        HashMap::with_capacity_and_hasher(invokers.len(), Default::default());
    for (i, inv) in invokers.iter().enumerate() {
        if inv.id > i64::MAX as u64 {
            return Err(Error::new(
                Status::IdOutOfRange,
                format!(
                    "invoker #{i}: id {} is above INT64_MAX (select returns ids as int64)",
                    inv.id
                ),
            ));
        }
        if inv.weight < 0 {
            return Err(Error::new(
                Status::NegativeWeight,
                format!(
                    "invoker #{i} (id {}): weight {} is negative",
                    inv.id, inv.weight
                ),
            ));
        }
        if hashing && inv.address.is_empty() {
            return Err(Error::new(
                Status::InvalidArgument,
                format!(
                    "invoker #{i} (id {}): the address is empty, and a hashing strategy places \
                     each invoker by its address (on its ring, in its table, among its scores)",
                    inv.id
                ),
            ));
        }
        if let Some(first) = seen.insert(inv.id, i) {
            return Err(Error::new(
                Status::DuplicateId,
                format!(
                    "invoker #{i}: id {} is already used by invoker #{first}",
                    inv.id
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The weight limit at its edge: 2^23 invokers at `i32::MAX` fit, one more does not (the
    /// total in 1/1024 units would pass 2^64), nor does any total past the limit.
    #[test]
    fn weights_adding_up_past_the_limit_are_refused() {
        let max = |n| std::iter::repeat_n(i32::MAX, n);
        assert!(total_weight_fits(max(1 << 23)).is_ok());
        let e = total_weight_fits(max((1 << 23) + 1)).unwrap_err();
        assert_eq!(e.status, Status::LimitExceeded);
        assert_eq!(
            e.message,
            "the weights add up to 18014400648577023, more than the limit of \
             18014398509481983 (2^64 / 1024: weights are added up in 1/1024 units in 64 bits)"
        );
        let exactly = MAX_TOTAL_WEIGHT - (MAX_TOTAL_WEIGHT / i32::MAX as u64) * i32::MAX as u64;
        let at_limit =
            max((MAX_TOTAL_WEIGHT / i32::MAX as u64) as usize).chain([exactly as i32, -5, 0]);
        assert!(total_weight_fits(at_limit.clone()).is_ok());
        assert!(total_weight_fits(at_limit.chain([1])).is_err());
    }
}
