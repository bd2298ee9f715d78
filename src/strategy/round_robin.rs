//! `roundrobin`: smooth weighted round robin, exactly Dubbo's sequence (RoundRobinLoadBalance).
//!
//! Dubbo walks every invoker on every pick (O(n)). With static weights the sequence from a given
//! state is periodic with period Σw/gcd(w), so polylb computes one period ahead (on update, or
//! once enough O(n) picks have paid for it) and then serves picks in O(1) from it, producing the
//! identical sequence. A live period is published for lock-free picks: each takes a ticket from
//! one atomic cursor, so threads do not serialise on the method's lock. Where a period is too
//! long to keep (weights with a large sum and gcd 1) or the state is not yet on its cycle, picks
//! come from a kinetic tournament over the counters ([`SmoothWrr`]): the same sequence in
//! O(log n) amortised under the lock. While invokers warm up (weights that change with time),
//! whole-set picks step the warming invokers' counters one by one and the others in the
//! tournament ([`WarmingWrr`]): O(k + log n) for k in warm-up. With a zone preference every
//! whole-set pick narrows to the local zone (while nothing is ejected), so the zone is the set
//! that periods and the tournament serve ([`PickSet`]); the remote invokers' counters age
//! towards recycling as Dubbo's walk over the local ones leaves them. A subset that comes twice
//! in a row (a router's candidates) gets a tournament of its own ([`Subset`]); other subsets,
//! and subsets while invokers warm up, take Dubbo's O(m) walk. Counters are per method, keyed
//! by invoker id; an invoker that leaves keeps its counter until a select finds it unused for
//! more than 60 s (Dubbo's recycling), so one re-added within that period resumes where it was.

use super::smooth_wrr::SmoothWrr;
use super::warming_wrr::WarmingWrr;
use super::{Ctx, Prepared, PreparedData, Strategy, StrategyKind};
use crate::balancer::{IdHasher, Member, MethodState, Snapshot};
use crate::clock::Clock;
use crate::error::Status;
use crate::filter::LocalZone;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::sync::atomic::{
    AtomicI64, AtomicPtr, AtomicU64,
    Ordering::{AcqRel, Acquire, Relaxed, Release},
};
use std::sync::Arc;

pub(crate) struct RoundRobin;

/// Dubbo's RECYCLE_PERIOD: a constant, not configurable.
const RECYCLE_MS: i64 = 60_000;
/// Bounds on a precomputed period: its length, and the work to simulate it, in steps of the
/// walk over one invoker (about 20 ms).
const MAX_PERIOD: u64 = 1 << 18;
const MAX_SIMULATION: u64 = 1 << 24;
/// What one step of the kinetic tournament costs, in steps of the walk over one invoker
/// (measured: 50 ns at n = 10, 120 ns at 100, 180 ns at 1,000, against about 1.2 ns per
/// invoker for the walk). Larger sets simulate a period with the tournament.
const KINETIC_STEP_COST: u64 = 128;

#[derive(Clone, Copy, Debug)]
struct Entry {
    weight: i32,
    current: i64,
    last_update_ms: i64,
}

/// One period of picks from a known start state, for one generation of the set.
struct Period {
    generation: u64,
    /// The positions of the pick set's invokers (`PickSet`; None: the whole set, in order).
    positions: Option<Box<[u32]>>,
    ids: Arc<[u64]>,
    weights: Arc<[i32]>,
    order: Arc<[u32]>,
    /// Counters at `order[0]`; `None` means all zero (the shared period of a fresh method).
    /// `order` holds positions in the set.
    start: Option<Box<[i64]>>,
    total: i64,
    next: usize,
}

/// Picks over the pick set of one generation from a kinetic tournament over its counters.
struct Kinetic {
    /// The tournament holds the pick set's counters (else only its memory is kept, for the
    /// next build: no allocation once it has grown).
    live: bool,
    generation: u64,
    /// The position in the set of each index of the tournament.
    positions: Vec<u32>,
    ids: Vec<u64>,
    weights: Vec<i32>,
    total: i64,
    wrr: SmoothWrr,
    /// The picks since the counters were last `start`, while a period fits: once as many as a
    /// period (or a multiple of it covering the set) have brought the counters back to `start`,
    /// the state is on its cycle and those picks are its period, with no simulation.
    recording: Option<Recording>,
}

struct Recording {
    /// Picks that make a period: Σw/gcd(w), times what it takes to be at least the set's size
    /// (comparing the counters costs O(n) per attempt).
    length: usize,
    start: Vec<i64>,
    order: Vec<u32>,
}

impl Kinetic {
    /// Records a pick (at position `pos`); the period of `generation`'s pick set when the
    /// recorded picks brought the counters back to where they started.
    fn record(&mut self, pos: u32, generation: u64) -> Option<Period> {
        let r = self.recording.as_mut()?;
        r.order.push(pos);
        if r.order.len() < r.length {
            return None;
        }
        if !self.wrr.counters().eq(r.start.iter().copied()) {
            // Not on its cycle yet (after a failover's pick, or an update): try again from here.
            r.start.clear();
            r.start.extend(self.wrr.counters());
            r.order.clear();
            return None;
        }
        let whole = self
            .positions
            .iter()
            .enumerate()
            .all(|(j, &p)| p as usize == j);
        Some(Period {
            generation,
            positions: (!whole).then(|| self.positions.as_slice().into()),
            ids: self.ids.as_slice().into(),
            weights: self.weights.as_slice().into(),
            order: std::mem::take(&mut r.order).into(),
            start: Some(r.start.as_slice().into()),
            total: self.total,
            next: 0,
        })
    }
}

/// Picks over the whole set of one generation while some of it warms up.
struct Warming {
    /// False once the counters went back to the entries; the memory stays for the next build.
    live: bool,
    generation: u64,
    ids: Vec<u64>,
    wrr: WarmingWrr,
}

/// Picks over one subset of the set (a router's candidates, a zone's local invokers while some
/// invoker is ejected) that came on two subset picks in a row, from a kinetic tournament over its
/// counters: O(log m) instead of the walk's O(m), the invokers outside it untouched as Dubbo's
/// walk over the subset leaves them. Failover retries, whose exclusions change from call to
/// call, keep walking (a build costs about two walks); the subset they interrupt is rebuilt
/// at its next pick.
#[derive(Default)]
struct Subset {
    /// The subset's counters live in `wrr` (else only its positions are kept, to recognise it).
    live: bool,
    generation: u64,
    positions: Vec<u32>,
    ids: Vec<u64>,
    weights: Vec<i32>,
    /// The counters a build starts from (kept for its capacity).
    scratch: Vec<i64>,
    wrr: Option<SmoothWrr>,
}

/// What a snapshot carries for round robin.
struct SnapshotData {
    /// None when no period fits the set.
    fresh: Option<FreshPeriod>,
    lives: LiveSlots,
}

/// The period from all-zero counters, shared by every method that starts fresh on this set.
struct FreshPeriod {
    ids: Arc<[u64]>,
    weights: Arc<[i32]>,
    order: Arc<[u32]>,
    total: i64,
}

/// The invokers a whole-set select of a snapshot picks among: the whole set, or its local zone
/// when a zone preference narrows every such pick (`Snapshot::local`, nothing ejected). Its
/// picks are the ones a period or the set's tournament serves.
#[derive(Clone, Copy)]
struct PickSet<'a> {
    snapshot: &'a Snapshot,
    /// None: the whole set.
    local: Option<&'a LocalZone>,
}

impl<'a> PickSet<'a> {
    fn of(snapshot: &'a Snapshot) -> PickSet<'a> {
        PickSet {
            snapshot,
            local: snapshot.local.as_ref(),
        }
    }

    /// True when `ctx`'s candidates are this pick set (the local zone is recognised by
    /// identity: the filter hands out the snapshot's own positions).
    fn is_candidates_of(ctx: &Ctx<'_>) -> bool {
        match &ctx.snapshot.local {
            None => ctx.is_all,
            Some(local) => std::ptr::eq(&*local.positions, ctx.candidates),
        }
    }

    /// The position in the set of each index of the pick set.
    fn each_position(&self) -> impl Iterator<Item = u32> + 'a {
        let local = self.local;
        (0..self.members().len() as u32).map(move |j| local.map_or(j, |l| l.positions[j as usize]))
    }

    fn members(&self) -> impl ExactSizeIterator<Item = &'a Member> + 'a {
        let members = &self.snapshot.members;
        let local = self.local;
        (0..local.map_or(members.len(), |l| l.positions.len()))
            .map(move |j| &members[local.map_or(j, |l| l.positions[j] as usize)])
    }

    /// Whether the invoker `id` is in the pick set (its entry is updated by every pick).
    fn contains(&self, id: u64) -> bool {
        let Some(pos) = self.snapshot.position(id) else {
            return false;
        };
        self.local
            .map_or(true, |l| l.mask[pos / 64] & (1 << (pos % 64)) != 0)
    }
}

/// The position in the set of index `j` of a pick set (`positions`: see [`Period::positions`]).
fn position_of(positions: Option<&[u32]>, j: usize) -> usize {
    positions.map_or(j, |p| p[j] as usize)
}

#[derive(Default)]
struct State {
    entries: HashMap<u64, Entry, BuildHasherDefault<IdHasher>>,
    period: Option<Period>,
    /// When no period fits: the counters of the set's invokers live here, not in `entries`.
    kinetic: Option<Kinetic>,
    /// While invokers warm up: the counters of the set's invokers live here.
    warming: Option<Warming>,
    /// The last subset picked from, and its counters while its tournament is live.
    subset: Option<Subset>,
    /// While a period or a tournament is live: the last-update time of every invoker of the set.
    last_select_ms: i64,
    /// While a period or a tournament is live: the oldest last-update among entries of invokers that left.
    oldest_departed_ms: i64,
    /// Whole-set picks made by Dubbo's walk since the fast path last failed to build (every
    /// weight zero), and after how many to try again (0 while building succeeds: at once).
    slow_picks: u64,
    rebuild_at: u64,
    /// Reused for the counters a fast path starts from.
    scratch: Vec<i64>,
    /// The live period published for lock-free picks, while one is (see [`LiveSlots`]).
    open: Option<Arc<Live>>,
    /// A select has been served from the period or tournament since it was built. Until one
    /// is, no select has seen its set (an update builds ahead of the picks): ending it then
    /// must leave the entries as they were, as Dubbo's would be, weight changes unseen.
    picked_since_build: bool,
}

struct PerMethod {
    /// Where this method's live periods are published in each snapshot's [`LiveSlots`].
    method_id: u32,
    state: Mutex<State>,
}

/// A live period as lock-free picks see it: each pick takes a ticket; the mutex holder that
/// ends the period closes the cursor first, so the picks it counts are exactly those served.
struct Live {
    order: Arc<[u32]>,
    /// `order.len()`, and its reciprocal for a division-free ticket modulo (a 64-bit `div`
    /// was about a quarter of a pick's own time).
    len: u32,
    reciprocal: u64,
    /// Picks served since the period's first position (`CLOSED` set once it is over).
    cursor: AtomicU64,
    /// The latest pick's time (ms): every invoker of the set was "updated" then, as in Dubbo.
    last_select_ms: AtomicI64,
    /// The oldest last-update among entries of invokers that left (recycling is due 60 s later).
    oldest_departed_ms: AtomicI64,
}

const CLOSED: u64 = 1 << 63;

impl Live {
    /// A live period over `order`, its cursor at `start` (below `order.len()`).
    fn new(order: Arc<[u32]>, start: usize, last_select_ms: i64, oldest_departed_ms: i64) -> Live {
        let len = order.len() as u32;
        Live {
            order,
            len,
            reciprocal: (u64::MAX / u64::from(len)).wrapping_add(1),
            cursor: AtomicU64::new(start as u64),
            last_select_ms: AtomicI64::new(last_select_ms),
            oldest_departed_ms: AtomicI64::new(oldest_departed_ms),
        }
    }

    /// The position in `order` of a ticket: `ticket % len`, by Lemire's multiply-based modulo
    /// while the ticket fits in 32 bits (the first four billion picks of a live period).
    #[inline]
    fn position(&self, ticket: u64) -> usize {
        if ticket <= u64::from(u32::MAX) {
            let low = self.reciprocal.wrapping_mul(ticket);
            ((u128::from(low) * u128::from(self.len)) >> 64) as usize
        } else {
            (ticket % u64::from(self.len)) as usize
        }
    }
}

/// Methods with ids below this have a slot for a live period in each snapshot; picks of later
/// ones (services rarely have that many) come from the period under the method's lock.
const LIVE_SLOTS: usize = 128;
/// Live periods one snapshot may publish before further ones stay behind the lock: each method
/// publishes one per update, and again after a pick that had to take the lock (a pick on an
/// older snapshot, a tournament that settled), so this bounds the memory that churn can hold.
const MAX_LIVES_PER_SNAPSHOT: usize = 4 * LIVE_SLOTS;

/// Each method's live period, published in the snapshot it is for. A pick holds its snapshot,
/// which owns every [`Live`] its slots ever pointed to, so reading one needs no reference count
/// (an `ArcSwap` load was two locked instructions, about a fifth of a pick), and a pick on an
/// older snapshot never sees a newer set's period.
struct LiveSlots {
    slots: Box<[AtomicPtr<Live>]>,
    owned: Mutex<Vec<Arc<Live>>>,
}

impl LiveSlots {
    fn new() -> LiveSlots {
        LiveSlots {
            slots: (0..LIVE_SLOTS)
                .map(|_| AtomicPtr::new(std::ptr::null_mut()))
                .collect(),
            owned: Mutex::new(Vec::new()),
        }
    }

    #[inline]
    fn of(snapshot: &Snapshot) -> Option<&LiveSlots> {
        Some(
            &snapshot
                .prepared
                .as_ref()?
                .downcast_ref::<SnapshotData>()?
                .lives,
        )
    }

    /// The live period of `method_id` in this snapshot, open or closed.
    #[inline]
    fn get(&self, method_id: u32) -> Option<&Live> {
        let ptr = self.slots.get(method_id as usize)?.load(Acquire);
        // SAFETY: a non-null slot points into an `Arc<Live>` held by `owned`, which keeps
        // every one it receives until `self` drops.
        unsafe { ptr.as_ref() }
    }

    /// Publishes `live` in `method_id`'s slot; false when it has none or the snapshot has
    /// published its share.
    fn publish(&self, method_id: u32, live: &Arc<Live>) -> bool {
        let Some(slot) = self.slots.get(method_id as usize) else {
            return false;
        };
        let mut owned = self.owned.lock();
        if owned.len() >= MAX_LIVES_PER_SNAPSHOT {
            return false;
        }
        owned.push(live.clone());
        slot.store(Arc::as_ptr(live).cast_mut(), Release);
        true
    }
}

/// The lock-free pick of a whole-set select at static weights: a ticket of the method's live
/// period in `snapshot`. None when it has none, when the period closed under us (its mutex
/// holder has moved on), or when the state of invokers that left is due for recycling: the
/// locked path then serves the pick, from the same period.
#[inline(always)]
pub(crate) fn serve_live(snapshot: &Snapshot, method_id: u32, now_ms: i64) -> Option<usize> {
    let live = LiveSlots::of(snapshot)?.get(method_id)?;
    if now_ms.saturating_sub(live.oldest_departed_ms.load(Relaxed)) > RECYCLE_MS {
        return None;
    }
    let ticket = live.cursor.fetch_add(1, AcqRel);
    if ticket & CLOSED != 0 {
        return None;
    }
    // The latest select's own time, as Dubbo stamps it (earlier too, when the clock stepped
    // back); written once per millisecond, not per pick.
    if live.last_select_ms.load(Relaxed) != now_ms {
        live.last_select_ms.store(now_ms, Relaxed);
    }
    Some(live.order[live.position(ticket)] as usize)
}

impl State {
    /// Ends the live period, if any: folds the picks it served into the state's period.
    fn close_live(&mut self) {
        if let Some(live) = self.open.take() {
            // The cursor started at the period's position: it now is the position reached.
            let reached = live.cursor.fetch_or(CLOSED, AcqRel) & !CLOSED;
            if let Some(p) = self.period.as_mut() {
                // A set of one is never walked by Dubbo: its selects leave no trace.
                if reached != p.next as u64 && p.ids.len() > 1 {
                    self.picked_since_build = true;
                    self.last_select_ms = live.last_select_ms.load(Relaxed);
                }
                p.next = (reached % p.order.len() as u64) as usize;
            }
        }
    }

    /// Publishes the state's period for lock-free picks on `snapshot`, from its current
    /// position, when the period is of that snapshot's set.
    fn open_live(&mut self, snapshot: &Snapshot, method_id: u32) {
        self.close_live();
        let Some(p) = self
            .period
            .as_ref()
            .filter(|p| p.generation == snapshot.generation)
        else {
            return;
        };
        let Some(lives) = LiveSlots::of(snapshot) else {
            return;
        };
        let live = Arc::new(Live::new(
            p.order.clone(),
            p.next,
            self.last_select_ms,
            self.oldest_departed_ms,
        ));
        if lives.publish(method_id, &live) {
            self.open = Some(live);
        }
    }
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Σw / gcd(w), or `None` when all weights are zero.
fn period_length(weights: impl Iterator<Item = i32>) -> Option<(u64, i64)> {
    let (mut g, mut total) = (0u64, 0i64);
    for w in weights {
        g = gcd(g, w as u64);
        total += w as i64;
    }
    (total > 0).then(|| (total as u64 / g, total))
}

/// Runs `steps` smooth-WRR picks from `current` (mutated), returning the positions picked.
fn simulate(current: &mut [i64], weights: &[i32], total: i64, steps: u64) -> Vec<u32> {
    let mut order = Vec::with_capacity(steps as usize);
    if current.len() as u64 > KINETIC_STEP_COST {
        let mut wrr = SmoothWrr::new(weights, current);
        order.extend((0..steps).map(|_| wrr.next()));
        for (c, now) in current.iter_mut().zip(wrr.counters()) {
            *c = now;
        }
        return order;
    }
    order.extend((0..steps).map(|_| walk_step(current, weights, total)));
    order
}

/// One pick of Dubbo's walk over plain counters: add each weight, take the first maximum,
/// subtract the total.
pub(super) fn walk_step(current: &mut [i64], weights: &[i32], total: i64) -> u32 {
    let (mut best, mut max) = (0usize, i64::MIN);
    for j in 0..current.len() {
        current[j] += weights[j] as i64;
        if j == 0 || current[j] > max {
            max = current[j];
            best = j;
        }
    }
    current[best] -= total;
    best as u32
}

/// The snapshot's shared period from all-zero counters, for a pick set that is the whole set
/// and counters that are all zero.
fn fresh_period_for(set: PickSet<'_>, start: &[i64]) -> Option<Period> {
    let snapshot = set.snapshot;
    if set.local.is_some() || start.iter().any(|&c| c != 0) {
        return None;
    }
    let f = snapshot
        .prepared
        .as_ref()?
        .downcast_ref::<SnapshotData>()?
        .fresh
        .as_ref()?;
    Some(Period {
        generation: snapshot.generation,
        positions: None,
        ids: f.ids.clone(),
        weights: f.weights.clone(),
        order: f.order.clone(),
        start: None,
        total: f.total,
        next: 0,
    })
}

fn affordable(length: u64, n: usize) -> bool {
    length <= MAX_PERIOD
        && length.saturating_mul((n as u64).min(KINETIC_STEP_COST)) <= MAX_SIMULATION
}

impl State {
    /// Writes the counters implied by the live period or tournament back into `entries` and
    /// drops it.
    fn materialize(&mut self) {
        if let Some(mut sub) = self.subset.take() {
            if let (true, Some(wrr)) = (sub.live, sub.wrr.as_ref()) {
                for ((&id, &weight), current) in
                    sub.ids.iter().zip(&sub.weights).zip(wrr.counters())
                {
                    self.set_counter(id, weight, current);
                }
                sub.live = false;
            }
            self.subset = Some(sub);
        }
        if let Some(mut w) = self.warming.take() {
            if w.live {
                for (pos, weight, current) in w.wrr.counters() {
                    self.set_counter(w.ids[pos as usize], weight, current);
                }
                w.live = false;
            }
            self.warming = Some(w);
        }
        if !self.picked_since_build {
            // Built ahead of any select (by an update): no select saw its set, so the entries
            // stay as they are.
            if let Some(k) = self.kinetic.as_mut() {
                k.live = false;
            }
            self.period = None;
            return;
        }
        if let Some(mut k) = self.kinetic.take() {
            if k.live {
                for ((&id, &weight), current) in
                    k.ids.iter().zip(k.weights.iter()).zip(k.wrr.counters())
                {
                    self.set_counter(id, weight, current);
                }
                k.live = false;
            }
            self.kinetic = Some(k);
        }
        let Some(p) = self.period.take() else { return };
        // Picks by position in the set (the order's entries), read by index in the pick set.
        let positions = p.positions.as_deref();
        let span = positions.map_or(p.ids.len(), |ps| {
            ps.iter().max().map_or(0, |&m| m as usize + 1)
        });
        let mut picks = vec![0i64; span];
        for &pos in &p.order[..p.next] {
            picks[pos as usize] += 1;
        }
        let steps = p.next as i64;
        for (j, &id) in p.ids.iter().enumerate() {
            let start = p.start.as_ref().map_or(0, |s| s[j]);
            let w = p.weights[j];
            let picked = picks[position_of(positions, j)];
            self.set_counter(id, w, start + steps * w as i64 - p.total * picked);
        }
    }

    /// Stores an invoker's counter as of the latest pick. A zero counter is stored as no entry:
    /// Dubbo would create that entry at zero if the invoker is picked from again, and recycle it
    /// unseen if it left, so a method whose counters are back at zero (every period's end)
    /// keeps no per-invoker state.
    fn set_counter(&mut self, id: u64, weight: i32, current: i64) {
        if current == 0 {
            self.entries.remove(&id);
        } else {
            self.entries.insert(
                id,
                Entry {
                    weight,
                    current,
                    last_update_ms: self.last_select_ms,
                },
            );
        }
    }

    /// Sets up picks over the pick set of `snapshot` (the whole set, or its local zone) from
    /// the current counters (which must be materialized): the snapshot's precomputed period
    /// when they are all zero, else the kinetic tournament, which turns into a period once its
    /// picks are seen to cycle (O(n), no simulation: after a failover's pick over other
    /// candidates this runs again). False only when every weight is zero (Dubbo's walk then
    /// always takes the first invoker). Resets the counter of an invoker whose weight changed,
    /// as a Dubbo select would first do.
    fn build_fast_path(&mut self, snapshot: &Snapshot, now_ms: i64) -> bool {
        let set = PickSet::of(snapshot);
        let Some((length, _)) = period_length(set.members().map(|m| m.weight)) else {
            return false;
        };
        let mut start = std::mem::take(&mut self.scratch);
        self.starting_counters(set, &mut start);
        self.picked_since_build = false;
        match fresh_period_for(set, &start) {
            Some(period) => self.period = Some(period),
            None => self.build_kinetic(set, &start, length),
        }
        self.scratch = start;
        self.start_tracking(set, now_ms);
        // Built: an interruption rebuilds at the next whole-set pick.
        (self.slow_picks, self.rebuild_at) = (0, 0);
        true
    }

    /// The pick set's counters as its next select finds them, into `start`: an invoker whose
    /// weight changed restarts from zero, as a Dubbo select first does. The entries are not
    /// touched: the period or tournament writes every member's entry when it ends, once a
    /// select has been served from it (until then no select has seen the change, and a weight
    /// changed and changed back before one does restarts nothing, as in Dubbo).
    fn starting_counters(&self, set: PickSet<'_>, start: &mut Vec<i64>) {
        start.clear();
        for m in set.members() {
            let current = match self.entries.get(&m.id) {
                Some(e) if e.weight == m.weight => e.current,
                _ => 0,
            };
            start.push(current);
        }
    }

    /// The tournament over the pick set from `start` (a period of `length` picks), built in the
    /// memory of the previous one.
    fn build_kinetic(&mut self, set: PickSet<'_>, start: &[i64], length: u64) {
        let generation = set.snapshot.generation;
        let k = match self.kinetic.as_mut() {
            Some(k) => {
                k.positions.clear();
                k.positions.extend(set.each_position());
                k.ids.clear();
                k.ids.extend(set.members().map(|m| m.id));
                k.weights.clear();
                k.weights.extend(set.members().map(|m| m.weight));
                k.wrr.rebuild(&k.weights, start);
                k
            }
            None => {
                let weights: Vec<i32> = set.members().map(|m| m.weight).collect();
                self.kinetic.insert(Kinetic {
                    live: true,
                    generation,
                    positions: set.each_position().collect(),
                    ids: set.members().map(|m| m.id).collect(),
                    wrr: SmoothWrr::new(&weights, start),
                    weights,
                    total: 0,
                    recording: None,
                })
            }
        };
        k.live = true;
        k.generation = generation;
        k.total = k.weights.iter().map(|&w| w as i64).sum();
        // Record a multiple of the period at least the set's size, if that fits.
        let n = start.len() as u64;
        let recorded = length * n.div_ceil(length).max(1);
        match (recorded <= MAX_PERIOD, k.recording.as_mut()) {
            (false, _) => k.recording = None,
            (true, Some(r)) => {
                r.length = recorded as usize;
                r.start.clear();
                r.start.extend_from_slice(start);
                r.order.clear();
            }
            (true, None) => {
                k.recording = Some(Recording {
                    length: recorded as usize,
                    start: start.to_vec(),
                    order: Vec::new(),
                })
            }
        }
    }

    /// Last-update times while a period or the tournament stands in for the pick set's entries.
    fn start_tracking(&mut self, set: PickSet<'_>, now_ms: i64) {
        self.start_tracking_of(now_ms, |id| set.contains(id));
    }

    /// Last-update times while a tournament stands in for the entries of the invokers each
    /// pick updates (`picked`); the others age, as in Dubbo, towards recycling.
    fn start_tracking_of(&mut self, now_ms: i64, picked: impl Fn(u64) -> bool) {
        self.last_select_ms = now_ms;
        self.oldest_departed_ms = self.oldest_outside(picked);
    }

    fn oldest_outside(&self, picked: impl Fn(u64) -> bool) -> i64 {
        self.entries
            .iter()
            .filter(|(id, _)| !picked(**id))
            .map(|(_, e)| e.last_update_ms)
            .min()
            .unwrap_or(i64::MAX)
    }

    /// A pick from the period or the tournament, when one is set up for this snapshot.
    fn serve_fast(&mut self, method_id: u32, snapshot: &Snapshot, now_ms: i64) -> Option<usize> {
        let generation = snapshot.generation;
        let (pos, walked) =
            if let Some(p) = self.period.as_mut().filter(|p| p.generation == generation) {
                let pos = p.order[p.next] as usize;
                p.next = (p.next + 1) % p.order.len();
                (pos, p.ids.len() > 1)
            } else if let Some(k) = self
                .kinetic
                .as_mut()
                .filter(|k| k.live && k.generation == generation)
            {
                let pos = k.positions[k.wrr.next() as usize];
                let walked = k.ids.len() > 1;
                if let Some(period) = k.record(pos, generation) {
                    // Picks from a period need no lock; the tournament's counters are the
                    // period's start.
                    k.live = false;
                    self.period = Some(period);
                }
                (pos as usize, walked)
            } else {
                return None;
            };
        // A set of one is never walked by Dubbo: its selects leave no trace.
        if walked {
            self.picked_since_build = true;
            self.last_select_ms = now_ms;
        }
        if now_ms.saturating_sub(self.oldest_departed_ms) > RECYCLE_MS {
            let set = PickSet::of(snapshot);
            self.recycle_outside(now_ms, |id| set.contains(id));
        }
        // Picks from a period go lock-free again.
        self.open_live(snapshot, method_id);
        Some(pos)
    }

    /// Sets up the fast path again and decides when the next attempt may be made: at the next
    /// pick that finds none (building costs O(n), about two walks), or, after a failed attempt
    /// (every weight zero), after twice as many walks as before. The caller serves its pick
    /// from it next, which publishes it (publishing first would let lock-free picks take that
    /// position too).
    fn rebuild_fast_path(&mut self, snapshot: &Snapshot, now_ms: i64) {
        if self.build_fast_path(snapshot, now_ms) {
            // Warm-up is over: its tournament's memory (about 80 B per invoker) goes.
            self.warming = None;
        } else {
            self.slow_picks = 0;
            self.rebuild_at = (self.rebuild_at.max(1) * 2).min(1 << 20);
        }
    }

    fn recycle_departed(&mut self, snapshot: &Snapshot, now_ms: i64) {
        self.recycle_outside(now_ms, |id| snapshot.position(id).is_some());
    }

    /// Dubbo's recycling of the entries that picks no longer update (`picked` says which they
    /// do update): gone once 60 s old.
    fn recycle_outside(&mut self, now_ms: i64, picked: impl Fn(u64) -> bool) {
        self.entries
            .retain(|id, e| picked(*id) || now_ms.wrapping_sub(e.last_update_ms) <= RECYCLE_MS);
        self.oldest_departed_ms = self.oldest_outside(picked);
    }

    /// A subset pick at static weights from the subset's tournament: built (from the entries,
    /// O(m)) when the previous subset pick was over the same candidates of the same set. None
    /// otherwise (the candidates are remembered, the counters are in the entries): the caller
    /// walks.
    fn serve_subset(&mut self, ctx: &Ctx<'_>, now_ms: i64) -> Option<usize> {
        let snapshot = ctx.snapshot;
        let generation = snapshot.generation;
        let (same, live) = match &self.subset {
            Some(s) => (
                s.generation == generation && s.positions[..] == *ctx.candidates,
                s.live,
            ),
            None => (false, false),
        };
        let picked = |id: u64| snapshot.position(id).is_some_and(|p| ctx.contains(p));
        if !(same && live) {
            self.materialize();
            let sub = self.subset.get_or_insert_with(Subset::default);
            if !same {
                // Remembered for the next subset pick, unless a tournament was live over other
                // candidates: those usually come back right after a failover's pick, and are
                // rebuilt at once then.
                if !live {
                    sub.generation = generation;
                    sub.positions.clear();
                    sub.positions.extend_from_slice(ctx.candidates);
                }
                return None;
            }
            let entries = &self.entries;
            sub.ids.clear();
            sub.weights.clear();
            sub.scratch.clear();
            for &p in &sub.positions {
                let m = &snapshot.members[p as usize];
                let weight = m.weight.max(0);
                // A counter kept with another weight restarts from zero, as a Dubbo select does.
                let current = match entries.get(&m.id) {
                    Some(e) if e.weight == weight => e.current,
                    _ => 0,
                };
                sub.ids.push(m.id);
                sub.weights.push(weight);
                sub.scratch.push(current);
            }
            match sub.wrr.as_mut() {
                Some(wrr) => wrr.rebuild(&sub.weights, &sub.scratch),
                None => sub.wrr = Some(SmoothWrr::new(&sub.weights, &sub.scratch)),
            }
            sub.live = true;
            self.start_tracking_of(now_ms, picked);
        }
        let sub = self.subset.as_mut()?;
        let index = sub.wrr.as_mut()?.next();
        let pos = sub.positions[index as usize] as usize;
        self.last_select_ms = now_ms;
        if now_ms.saturating_sub(self.oldest_departed_ms) > RECYCLE_MS {
            self.recycle_outside(now_ms, picked);
        }
        Some(pos)
    }

    /// A whole-set pick while invokers warm up, from the [`WarmingWrr`] of `snapshot` at
    /// `now_ms`, built first (from the entries, O(n)) when there is none for that set and time.
    fn serve_warming(&mut self, snapshot: &Snapshot, now_ms: i64) -> usize {
        let generation = snapshot.generation;
        let current = self
            .warming
            .as_ref()
            .is_some_and(|w| w.live && w.generation == generation && w.wrr.covers(now_ms));
        if !current {
            self.materialize();
            let entries = &self.entries;
            let prior = |m: &Member| entries.get(&m.id).map(|e| (e.weight, e.current));
            match self.warming.as_mut() {
                Some(w) => {
                    w.wrr.rebuild(&snapshot.members, now_ms, prior);
                    w.ids.clear();
                    w.ids.extend(snapshot.members.iter().map(|m| m.id));
                    w.generation = generation;
                    w.live = true;
                }
                None => {
                    self.warming = Some(Warming {
                        live: true,
                        generation,
                        ids: snapshot.members.iter().map(|m| m.id).collect(),
                        wrr: WarmingWrr::new(&snapshot.members, now_ms, prior),
                    })
                }
            }
            self.start_tracking_of(now_ms, |id| snapshot.position(id).is_some());
        }
        let warming = self.warming.as_mut().expect("built above");
        let pos = warming.wrr.pick(&snapshot.members, now_ms) as usize;
        self.last_select_ms = now_ms;
        // Picks since the period was lost: when warm-up ends, a period is rebuilt at once
        // rather than after as many O(n) walks as it costs.
        self.slow_picks = self.slow_picks.saturating_add(1);
        if now_ms.saturating_sub(self.oldest_departed_ms) > RECYCLE_MS {
            self.recycle_departed(snapshot, now_ms);
        }
        pos
    }

    /// Dubbo's select, O(n): add each weight, take the first maximum, subtract the total.
    fn walk(&mut self, ctx: &Ctx<'_>, now_ms: i64) -> usize {
        self.last_select_ms = now_ms;
        let mut best: Option<(usize, u64)> = None;
        let mut max = i64::MIN;
        let mut total = 0i64;
        for &pos in ctx.candidates {
            let pos = pos as usize;
            let w = ctx.weight(pos);
            let id = ctx.member(pos).id;
            let e = self.entries.entry(id).or_insert(Entry {
                weight: w,
                current: 0,
                last_update_ms: now_ms,
            });
            if e.weight != w {
                e.weight = w;
                e.current = 0;
            }
            e.current += w as i64;
            e.last_update_ms = now_ms;
            if best.is_none() || e.current > max {
                max = e.current;
                best = Some((pos, id));
            }
            total += w as i64;
        }
        if ctx.candidates.len() != self.entries.len() {
            self.entries
                .retain(|_, e| now_ms.wrapping_sub(e.last_update_ms) <= RECYCLE_MS);
        }
        let (pos, id) = best.expect("at least two candidates");
        if let Some(e) = self.entries.get_mut(&id) {
            e.current -= total;
        }
        pos
    }
}

/// The period from all-zero counters over `members`, when one fits.
fn fresh_period(members: &[Member]) -> Option<FreshPeriod> {
    let (length, total) = period_length(members.iter().map(|m| m.weight))?;
    if !affordable(length, members.len()) {
        return None;
    }
    let weights: Vec<i32> = members.iter().map(|m| m.weight).collect();
    let mut current = vec![0i64; members.len()];
    let order = simulate(&mut current, &weights, total, length);
    debug_assert!(
        current.iter().all(|&c| c == 0),
        "smooth WRR returns to zero after Σw/g picks"
    );
    Some(FreshPeriod {
        ids: members.iter().map(|m| m.id).collect(),
        weights: weights.into(),
        order: order.into(),
        total,
    })
}

impl Strategy for RoundRobin {
    fn kind(&self) -> StrategyKind {
        StrategyKind::RoundRobin
    }

    fn tracks_reports(&self) -> bool {
        false
    }

    fn reads_in_flight(&self) -> bool {
        false
    }

    fn prepare(&self, members: &[Member], _previous: &Snapshot) -> Prepared {
        Some(PreparedData::new(SnapshotData {
            fresh: fresh_period(members),
            lives: LiveSlots::new(),
        }))
    }

    fn select(&self, ctx: &Ctx<'_>) -> Result<usize, Status> {
        let per_method = ctx.method.ext(|| PerMethod {
            method_id: ctx.method_id,
            state: Mutex::default(),
        });
        let now_ms = ctx.clock.now_ms();
        let static_weights = ctx.weights_static();
        let fast = static_weights && PickSet::is_candidates_of(ctx);
        if fast {
            if let Some(pos) = serve_live(ctx.snapshot, ctx.method_id, now_ms) {
                return Ok(pos);
            }
        }
        let mut st = per_method.state.lock();
        st.close_live();
        if fast {
            if let Some(pos) = st.serve_fast(per_method.method_id, ctx.snapshot, now_ms) {
                return Ok(pos);
            }
            st.materialize();
            // A fresh method, or one whose period or tournament a failover's pick (or warm-up)
            // interrupted: rebuild first (O(n)), so that this pick is served from it too. Only
            // while every weight is zero does this wait, and walk.
            if st.slow_picks >= st.rebuild_at {
                st.rebuild_fast_path(ctx.snapshot, now_ms);
                if let Some(pos) = st.serve_fast(per_method.method_id, ctx.snapshot, now_ms) {
                    return Ok(pos);
                }
            }
            st.slow_picks += 1;
        } else if ctx.is_all && !static_weights {
            return Ok(st.serve_warming(ctx.snapshot, now_ms));
        } else if static_weights {
            if let Some(pos) = st.serve_subset(ctx, now_ms) {
                return Ok(pos);
            }
        } else {
            st.materialize();
        }
        Ok(st.walk(ctx, now_ms))
    }

    fn after_update(
        &self,
        method: &MethodState,
        _method_id: u32,
        snapshot: &Snapshot,
        _previous: &Snapshot,
        clock: &Clock,
    ) {
        let Some(per_method) = method.ext_if_present::<PerMethod>() else {
            return;
        };
        let mut st = per_method.state.lock();
        st.close_live();
        st.materialize();
        if snapshot.members.is_empty() {
            return;
        }
        // The time of the latest select, which may be the caller's own, not the library's.
        let now_ms = if st.last_select_ms != 0 {
            st.last_select_ms
        } else {
            clock.now_ms()
        };
        // Building resets the counter of an invoker whose weight changed, as the next select
        // would: only right if that select finds the weights static. Judged on the selects'
        // timeline: a caller passing its own time may still be within a warm-up that the
        // library's clock has long passed.
        let until = snapshot.time_dependent_until_ms;
        if until != i64::MIN && now_ms < until {
            // The first whole-set select at static weights builds it.
            st.slow_picks = st.rebuild_at;
        } else if st.build_fast_path(snapshot, now_ms) {
            st.open_live(snapshot, per_method.method_id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn live(len: u32) -> Arc<Live> {
        Arc::new(Live::new((0..len).collect(), 0, 0, i64::MAX))
    }

    #[test]
    fn ticket_positions_equal_the_remainder() {
        let lens = [1, 2, 3, 7, 10, 1000, 65_521, MAX_PERIOD as u32];
        let near_edges = [0, 1, 2, 999, 1 << 31, u64::from(u32::MAX) - 1];
        for len in lens {
            let live = live(len);
            let mut tickets: Vec<u64> = near_edges.to_vec();
            tickets.extend([u64::from(u32::MAX), u64::from(u32::MAX) + 1, CLOSED - 1]);
            // And a spread of others, by a fixed multiplicative sequence.
            tickets.extend((0..10_000u64).map(|i| i.wrapping_mul(0x9E37_79B9) & 0xFFFF_FFFF));
            for t in tickets {
                assert_eq!(
                    live.position(t),
                    (t % u64::from(len)) as usize,
                    "{t} % {len}"
                );
            }
        }
    }

    #[test]
    fn a_snapshot_publishes_a_bounded_number_of_live_periods() {
        let lives = LiveSlots::new();
        assert!(lives.get(3).is_none());
        let first = live(5);
        assert!(lives.publish(3, &first));
        assert!(std::ptr::eq(lives.get(3).unwrap(), &*first));
        assert!(!lives.publish(LIVE_SLOTS as u32, &first), "no slot");
        for _ in 1..MAX_LIVES_PER_SNAPSHOT {
            assert!(lives.publish(4, &live(2)));
        }
        assert!(!lives.publish(4, &live(2)), "the snapshot's share is used");
        assert_eq!(lives.get(4).unwrap().len, 2);
        assert!(std::ptr::eq(lives.get(3).unwrap(), &*first));
    }
}
