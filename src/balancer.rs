//! The Balancer: an immutable snapshot of the set swapped on update, method interning, and the
//! select/report plumbing around the strategies.

use crate::clock::Clock;
use crate::config::Config;
use crate::error::{Error, Status};
use crate::filter::{Filter, LocalZone};
use crate::invoker::{Invoker, Outcome};
use crate::rng::{fresh_seed, Rng, RngSource};
use crate::scratch::with_scratch;
use crate::stats::{CallStats, InvokerState, BYPASS, NO_COUNTER};
use crate::strategy::{
    best_of_pair, best_of_pair_excluding, best_of_subset_pair, Ctx, Prepared, PreparedData, Report,
    Strategy, StrategyKind, SubsetWeights, Weights, WholeSet, WholeSetDraw,
};
use crate::weight::{effective_weight, time_dependent_until};
use arc_swap::ArcSwap;
use parking_lot::Mutex;
use std::any::Any;
use std::cell::{Cell, RefCell, UnsafeCell};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::marker::PhantomData;
use std::sync::atomic::{
    AtomicBool, AtomicU32, AtomicU64, AtomicU8,
    Ordering::{Acquire, Relaxed, Release},
};
use std::sync::{Arc, OnceLock, Weak};

/// Method ids are small integers; this many may be interned per balancer.
pub const MAX_METHODS: u32 = 1 << 20;

/// One invoker of a snapshot. Exactly one cache line, aligned to one: a pick reads a member
/// whole, and unaligned members would straddle two lines.
#[repr(align(64))]
pub(crate) struct Member {
    pub id: u64,
    pub address: Arc<str>,
    pub zone: Option<Arc<str>>,
    pub weight: i32,
    pub start_time_ms: i64,
    /// Resolved: the invoker's own warm-up, or the balancer default when it gave a negative one.
    pub warmup_ms: i32,
    pub state: Arc<InvokerState>,
}

const _: () = assert!(std::mem::size_of::<Member>() == 64);

/// An immutable view of the set. Readers load it without blocking; update swaps a new one in.
pub(crate) struct Snapshot {
    pub generation: u64,
    /// Everything else, read through `Deref`. Only the balancer's drop writes it, to empty it
    /// (see `Inner::drop`): threads keep snapshots in their caches past the balancer's life.
    body: UnsafeCell<SnapshotBody>,
}

// SAFETY: the body is `Sync`, and written only by `Snapshot::empty_out`, whose caller
// guarantees that no reference to it exists.
unsafe impl Sync for Snapshot {}

pub(crate) struct SnapshotBody {
    pub members: Box<[Member]>,
    pub by_id: IdIndex,
    /// Positions 0..n, so that "every invoker" is a candidate slice like any other.
    pub all: Box<[u32]>,
    /// Weights depend on time before this instant (ms); `i64::MIN` when no invoker warms up.
    /// (Any invoker with a start time sets it, to the end of its warm-up: for a set from Dubbo
    /// URLs, which all carry a `timestamp`, usually an instant long past.)
    pub time_dependent_until_ms: i64,
    /// The library's clock has passed `time_dependent_until_ms`: set by the update or by the
    /// first call that read the clock past it, so that later calls on the library's clock know
    /// the weights are static without reading it. (Calls that pass their own time compare it
    /// instead: it need not be the library's.)
    pub settled: AtomicBool,
    pub prepared: Prepared,
    /// With zone preference: the local zone, where picks over the whole set go while no invoker
    /// is ejected. None when they go to the whole set (see `Filter::local_zone`).
    pub local: Option<LocalZone>,
}

impl SnapshotBody {
    fn empty() -> SnapshotBody {
        SnapshotBody {
            members: Box::new([]),
            by_id: IdIndex::new(&[]),
            all: Box::new([]),
            time_dependent_until_ms: i64::MIN,
            settled: AtomicBool::new(true),
            prepared: None,
            local: None,
        }
    }
}

impl std::ops::Deref for Snapshot {
    type Target = SnapshotBody;

    #[inline(always)]
    fn deref(&self) -> &SnapshotBody {
        // SAFETY: written only by `empty_out`, when no reference to it may exist.
        unsafe { &*self.body.get() }
    }
}

impl Snapshot {
    fn new(generation: u64, body: SnapshotBody) -> Snapshot {
        Snapshot {
            generation,
            body: UnsafeCell::new(body),
        }
    }

    fn empty() -> Snapshot {
        Snapshot::new(0, SnapshotBody::empty())
    }

    /// Frees what the snapshot holds, leaving an empty set.
    ///
    /// # Safety
    /// No reference to its body exists, nor will until it drops: no call runs or will run on
    /// its balancer (which is being dropped), and the thread caches that hold it read a
    /// snapshot only after they find their balancer's uid in the slot.
    unsafe fn empty_out(&self) {
        *self.body.get() = SnapshotBody::empty();
    }

    #[inline]
    pub fn position(&self, id: u64) -> Option<usize> {
        self.by_id.get(id)
    }

    /// `weights_static` when it needs no clock read: no start times, or the library's clock
    /// already seen past every warm-up.
    #[inline]
    pub fn known_static(&self, clock: &Clock) -> bool {
        self.time_dependent_until_ms == i64::MIN
            || (clock.is_library() && self.settled.load(Relaxed))
    }

    /// True when no invoker's weight depends on time for a call at `now_us` (0 = the library's
    /// clock), known without reading a clock; false also when finding out needs a clock read
    /// (the short paths leave that to the general path, which reads it).
    #[inline(always)]
    pub fn weights_settled(&self, now_us: i64) -> bool {
        let until = self.time_dependent_until_ms;
        until == i64::MIN
            || if now_us == 0 {
                self.settled.load(Relaxed)
            } else {
                now_us.div_euclid(1000) >= until
            }
    }

    /// True when no invoker's weight depends on time at `clock`'s instant. Reads the library's
    /// clock only until it has once been past every warm-up.
    #[inline]
    pub fn weights_static(&self, clock: &Clock) -> bool {
        if self.known_static(clock) {
            return true;
        }
        let past = clock.now_ms() >= self.time_dependent_until_ms;
        if past && clock.is_library() {
            self.settled.store(true, Relaxed);
        }
        past
    }
}

/// Id → position for one snapshot: open addressing over a power-of-two table at most half
/// full, built once per update, so that a report finds its invoker in about one probe.
pub(crate) struct IdIndex {
    /// `(id, position)`; `EMPTY_ID` marks a free slot (ids are at most `i64::MAX`).
    slots: Box<[(u64, u32)]>,
    shift: u32,
}

const EMPTY_ID: u64 = u64::MAX;

impl IdIndex {
    fn new(ids: &[u64]) -> IdIndex {
        let capacity = (ids.len() * 2).next_power_of_two().max(2);
        let mut index = IdIndex {
            slots: vec![(EMPTY_ID, 0); capacity].into_boxed_slice(),
            shift: 64 - capacity.trailing_zeros(),
        };
        let mask = capacity - 1;
        for (pos, &id) in ids.iter().enumerate() {
            let mut slot = index.home(id);
            while index.slots[slot].0 != EMPTY_ID {
                slot = (slot + 1) & mask;
            }
            index.slots[slot] = (id, pos as u32);
        }
        index
    }

    #[inline]
    fn home(&self, id: u64) -> usize {
        // Fibonacci hashing: the top bits of one multiply spread sequential ids evenly.
        (id.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> self.shift) as usize
    }

    #[inline]
    fn get(&self, id: u64) -> Option<usize> {
        if id == EMPTY_ID {
            return None;
        }
        let mask = self.slots.len() - 1;
        let mut slot = self.home(id);
        loop {
            let (k, pos) = self.slots[slot];
            if k == id {
                return Some(pos as usize);
            }
            if k == EMPTY_ID {
                return None;
            }
            slot = (slot + 1) & mask;
        }
    }
}

/// Ids are caller-chosen integers: one multiply spreads them well enough for a hash table.
#[derive(Default)]
pub(crate) struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ b as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (v ^ (v >> 32))
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .rotate_left(29);
    }
}

/// Per-method state owned by the strategy (round-robin counters, response windows). Kept as
/// [`PreparedData`], so that reading it back is a compare against a constant `TypeId` rather
/// than a virtual `type_id` call (peakewma reads it on every pick and report).
#[derive(Default)]
pub struct MethodState {
    ext: OnceLock<PreparedData>,
}

impl MethodState {
    #[inline]
    pub(crate) fn ext<T: Any + Send + Sync>(&self, init: impl FnOnce() -> T) -> &T {
        self.ext
            .get_or_init(|| PreparedData::new(init()))
            .downcast_ref::<T>()
            .expect("a balancer has one strategy, so one method-state type")
    }

    #[inline]
    pub(crate) fn ext_if_present<T: Any + Send + Sync>(&self) -> Option<&T> {
        self.ext.get()?.downcast_ref::<T>()
    }
}

const SEGMENTS: usize = 21;
/// Methods with ids below this live in one eagerly allocated block (about 3 KB): a lookup is a
/// bounds check and an index. Services rarely have more methods; later ones go to segments.
const SMALL: u32 = 128;

/// Interned method names. Ids are dense; state lives in segments of doubling size so that a
/// lookup by id is two loads and never blocks, and existing entries never move.
#[repr(C)]
struct Methods {
    /// First: read on every call, it sits in the balancer's first cache line (see `Inner`).
    count: AtomicU32,
    small: Box<[MethodState]>,
    names: Mutex<HashMap<Box<str>, u32>>,
    segments: [OnceLock<Box<[MethodState]>>; SEGMENTS],
}

impl Methods {
    fn new() -> Methods {
        let m = Methods {
            names: Mutex::new(HashMap::new()),
            count: AtomicU32::new(0),
            small: (0..SMALL).map(|_| MethodState::default()).collect(),
            segments: std::array::from_fn(|_| OnceLock::new()),
        };
        m.intern("").expect("the service level always fits");
        m
    }

    /// Segment and offset of a method id at or above `SMALL`.
    fn locate(id: u32) -> (usize, usize) {
        let big = id - SMALL;
        let k = 31 - (big + 1).leading_zeros();
        (k as usize, (big + 1 - (1 << k)) as usize)
    }

    /// True when `id` was interned (ids are dense, and an id's state exists before its count
    /// is published).
    #[inline]
    fn is_known(&self, id: u32) -> bool {
        id < self.count.load(std::sync::atomic::Ordering::Acquire)
    }

    #[inline]
    fn get(&self, id: u32) -> Option<&MethodState> {
        if !self.is_known(id) {
            return None;
        }
        if id < SMALL {
            return Some(&self.small[id as usize]);
        }
        let (seg, off) = Self::locate(id);
        self.segments[seg].get().map(|s| &s[off])
    }

    fn intern(&self, name: &str) -> Result<u32, Error> {
        let mut names = self.names.lock();
        if let Some(&id) = names.get(name) {
            return Ok(id);
        }
        let id = names.len() as u32;
        if id >= MAX_METHODS {
            return Err(Error::new(
                Status::LimitExceeded,
                format!(
                    "too many methods: at most {MAX_METHODS} names may be interned per balancer"
                ),
            ));
        }
        if id >= SMALL {
            let (seg, _) = Self::locate(id);
            self.segments[seg]
                .get_or_init(|| (0..1usize << seg).map(|_| MethodState::default()).collect());
        }
        names.insert(name.into(), id);
        self.count
            .store(id + 1, std::sync::atomic::Ordering::Release);
        Ok(id)
    }

    fn names_by_id(&self) -> Vec<Box<str>> {
        let names = self.names.lock();
        let mut v = vec![Box::<str>::from(""); names.len()];
        for (name, &id) in names.iter() {
            v[id as usize] = name.clone();
        }
        v
    }

    /// Every method interned so far, with its id. An update calls it after publishing its set:
    /// read under the names' lock, the count then either has a method or its interning came
    /// after the publication, so no pick of it can still pin the replaced set (an atomic read
    /// alone may precede the publication's store becoming visible, and miss a method whose
    /// first pick then sees the old set).
    fn each(&self, mut f: impl FnMut(u32, &MethodState)) {
        let count = {
            let _names = self.names.lock();
            self.count.load(std::sync::atomic::Ordering::Acquire)
        };
        for id in 0..count {
            if let Some(m) = self.get(id) {
                f(id, m);
            }
        }
    }
}

// The fields every select and report read come first, in the allocation's first cache line
// (`repr(C)` keeps the order; the alignment puts the line boundary at the start): a call then
// touches one line of the balancer instead of three.
#[repr(C, align(64))]
struct Inner {
    /// Unique per balancer for the process's life: tells apart thread-cached snapshots.
    uid: u64,
    /// The current snapshot's generation, published after it is stored.
    generation: AtomicU64,
    rng: RngSource,
    /// The strategy's `whole_set_draw()`, `tracks_selects()` and `tracks_reports()`, asked once.
    whole_set_draw: WholeSetDraw,
    tracks_selects: bool,
    tracks_reports: bool,
    /// The strategy's `sees_single_picks()`, asked once.
    sees_single_picks: bool,
    /// A report has more to do than count the call's end: the strategy follows reports, or a
    /// filter (outlier ejection) does.
    learns_from_reports: bool,
    /// `select_drawn` applies: the strategy picks by whole-set draws, needs no `on_select`,
    /// and no filter narrows the set.
    drawn_fast: bool,
    /// As `drawn_fast`, for [`WholeSetDraw::BestOfPair`] (`select_drawn::<true>`).
    drawn_pair: bool,
    /// `select_live` applies: `roundrobin`, no filter narrowing the set.
    live_period: bool,
    /// `select_on_ring` applies: `consistenthash`, no filter narrowing the set.
    whole_ring: bool,
    /// `select_adaptive` applies: `adaptive`, no filter narrowing the set.
    adaptive_pair: bool,
    /// `adaptive`: picks among a single candidate are counted under the method's `BYPASS` key,
    /// out of sight of the load formula (see `stats::BYPASS`).
    counts_bypass: bool,
    /// How a report ends its call: `END_PLAIN`, `END_SPREAD` (`spread_counters`), or
    /// `END_BYPASS` once some call was counted under a `BYPASS` key (reports must look there
    /// too). One byte, so that the common report reads one flag, as before the third way.
    end_path: AtomicU8,
    /// The strategy neither reads calls in flight nor follows selects or reports: its call
    /// counters are statistics, spread per thread once a second thread counts on an invoker
    /// (see `CallStats::begin_spread`).
    spread_counters: bool,
    /// Its `count` is read on every call too (`Methods` leads with it).
    methods: Methods,
    config: Config,
    strategy: Box<dyn Strategy>,
    snapshot: ArcSwap<Snapshot>,
    /// Held by an update. Its sets that threads may still cache (pruned on each update), so
    /// that the balancer's drop can free what they hold.
    update_lock: Mutex<Vec<Weak<Snapshot>>>,
    /// Zone preference and outlier ejection; None when neither is configured.
    filter: Option<Filter>,
}

/// Calls of `method` in flight at position `pos`.
#[inline]
fn active_in(snapshot: &Snapshot, pos: usize, method: u32) -> i64 {
    snapshot.members[pos]
        .state
        .methods
        .get(method)
        .map_or(0, |s| s.active())
}

/// What the balancer's own whole-set draws came to.
enum Drawn {
    /// The strategy does not pick by such draws, or not now.
    NotApplicable,
    Pick(usize),
    /// `FirstIdle` draws all landed on busy invokers: the strategy decides.
    AllBusy,
}

/// Most invokers a failover's pick may exclude and still be drawn from the whole set (see
/// `Inner::select_drawn_excluding`); a retry has tried one or two.
const MAX_DRAWN_EXCLUSIONS: usize = 4;
/// Draws that may land on excluded invokers before the general path decides.
const EXCLUSION_TRIES: usize = 16;

/// One report's arguments.
struct CallEnd {
    method: u32,
    id: u64,
    elapsed_us: i64,
    outcome: Outcome,
    now_us: i64,
}

/// What one select call knows before its strategy runs.
/// `Inner::end_path`'s values.
const END_PLAIN: u8 = 0;
const END_SPREAD: u8 = 1;
const END_BYPASS: u8 = 2;

struct Call<'a> {
    snapshot: &'a Snapshot,
    /// This thread's counter id (see `SnapshotCache::counter`).
    counter: u32,
    method_state: &'a MethodState,
    method: u32,
    key: &'a [u8],
    clock: &'a Clock,
    rng: Rng<'a>,
    /// Where to keep the pick's position for the report (see `CachedSnapshot::hint`), when the
    /// snapshot is the thread's cached one.
    hint: Option<&'a Cell<u32>>,
    /// Set when the pick was among a single candidate (the strategy did not run).
    single: Cell<bool>,
}

impl Inner {
    /// select_among's work on one snapshot.
    #[inline]
    fn select_in(
        &self,
        call: &Call<'_>,
        candidates: &[u64],
        excluded: &[u64],
    ) -> Result<u64, Status> {
        let snapshot = call.snapshot;
        if snapshot.members.is_empty() {
            return Err(Status::NoProvider);
        }
        // The common call (whole set, no filter) stays small; subsets and filters are out of line.
        let pos = if candidates.is_empty() && excluded.is_empty() && self.filter.is_none() {
            match self.draw_from_whole_set(snapshot, call.method, &call.rng, call.clock) {
                Drawn::Pick(pos) => pos,
                Drawn::AllBusy => self.pick(call, &snapshot.all, true, true, &[], None)?,
                Drawn::NotApplicable => self.pick(call, &snapshot.all, true, false, &[], None)?,
            }
        } else {
            self.pick_general(call, candidates, excluded)?
        };
        if self.counts_bypass && call.single.get() {
            return Ok(self.begin_bypass(snapshot, call.hint, pos, call.method));
        }
        let (member, stats, selected_before) =
            self.begin_call(snapshot, call.counter, call.hint, pos, call.method);
        if self.tracks_selects {
            self.strategy.on_select(
                call.method_state,
                call.method,
                stats,
                selected_before,
                call.clock,
            );
        }
        Ok(member.id)
    }

    /// The draws of a strategy that picks from its prepared [`WholeSet`] when the whole set is
    /// the candidates and weights are static (see [`WholeSetDraw`]), made here without the
    /// virtual call: the same draws, so the same distribution and the same use of a seeded
    /// generator.
    #[inline]
    fn draw_from_whole_set(
        &self,
        snapshot: &Snapshot,
        method: u32,
        rng: &Rng<'_>,
        clock: &Clock,
    ) -> Drawn {
        // While invokers warm up the strategy's own path evaluates the weights.
        if self.whole_set_draw == WholeSetDraw::No || !snapshot.weights_static(clock) {
            return Drawn::NotApplicable;
        }
        let n = snapshot.members.len();
        if n == 1 {
            return Drawn::Pick(0);
        }
        let Some(whole) = snapshot
            .prepared
            .as_ref()
            .and_then(|p| p.downcast_ref::<WholeSet>())
        else {
            return Drawn::NotApplicable;
        };
        match self.whole_set_draw {
            WholeSetDraw::FirstIdle { draws } => {
                for _ in 0..draws {
                    let pos = whole.draw(n, rng);
                    if active_in(snapshot, pos, method) == 0 {
                        return Drawn::Pick(pos);
                    }
                }
                Drawn::AllBusy
            }
            _ => Drawn::Pick(whole.draw(n, rng)),
        }
    }

    /// Runs the strategy over `positions`; as Dubbo, a single candidate is returned without it.
    #[inline]
    fn pick(
        &self,
        call: &Call<'_>,
        positions: &[u32],
        is_all: bool,
        drawn: bool,
        mask: &[u64],
        subset: Option<&SubsetWeights>,
    ) -> Result<usize, Status> {
        if positions.len() == 1 {
            call.single.set(true);
            if self.sees_single_picks {
                self.strategy.single_pick(call.snapshot, call.clock);
            }
            return Ok(positions[0] as usize);
        }
        self.strategy.select(&Ctx {
            snapshot: call.snapshot,
            method: call.method_state,
            method_id: call.method,
            candidates: positions,
            is_all,
            drawn,
            mask,
            subset,
            key: call.key,
            clock: call.clock,
            rng: call.rng,
        })
    }

    /// The pick with candidates, exclusions, zone preference or outlier ejection.
    #[inline(never)]
    fn pick_general(
        &self,
        call: &Call<'_>,
        candidates: &[u64],
        excluded: &[u64],
    ) -> Result<usize, Status> {
        let (snapshot, clock) = (call.snapshot, call.clock);
        let n = snapshot.members.len();
        let pick =
            |positions: &[u32], is_all: bool, mask: &[u64], subset: Option<&SubsetWeights>| {
                self.pick(call, positions, is_all, false, mask, subset)
            };
        // Zone preference and outlier ejection narrow the candidates before the strategy runs.
        let filter = self.filter.as_ref().filter(|f| f.needed(snapshot, clock));
        let pos = if candidates.is_empty() && excluded.is_empty() {
            match filter {
                None => pick(&snapshot.all, true, &[], None)?,
                Some(f) => f.with_view(snapshot, &call.rng, pick)?,
            }
        } else {
            let subset = |scratch: &mut (Vec<u64>, Vec<u32>)| {
                let (mask, positions) = scratch;
                mask.clear();
                if candidates.is_empty() {
                    mask.resize(n.div_ceil(64), u64::MAX);
                    if n % 64 != 0 {
                        mask[n / 64] = (1u64 << (n % 64)) - 1;
                    }
                } else {
                    mask.resize(n.div_ceil(64), 0);
                    for id in candidates {
                        let p = snapshot.position(*id).ok_or(Status::UnknownCandidate)?;
                        mask[p / 64] |= 1 << (p % 64);
                    }
                }
                for id in excluded {
                    if let Some(p) = snapshot.position(*id) {
                        mask[p / 64] &= !(1 << (p % 64));
                    }
                }
                positions.clear();
                for (w, &bits) in mask.iter().enumerate() {
                    let mut b = bits;
                    while b != 0 {
                        positions.push((w * 64 + b.trailing_zeros() as usize) as u32);
                        b &= b - 1;
                    }
                }
                if positions.is_empty() {
                    return Err(Status::NoCandidate);
                }
                if let Some(f) = filter {
                    f.restrict(snapshot, mask, positions, &call.rng);
                }
                let is_all = positions.len() == n;
                pick(positions, is_all, mask, None)
            };
            with_scratch(&SCRATCH, subset)?
        };
        Ok(pos)
    }

    /// The short paths of a select over the whole set (`select_drawn`), or None for the
    /// general path.
    // Two separate tests rather than one branch: sharing one test made random's and
    // leastactive's select through the shared library about 10 instructions longer (register
    // pressure).
    #[inline(always)]
    fn select_short(&self, method: u32, key: &[u8], now_us: i64) -> Option<Result<u64, Status>> {
        if self.drawn_fast {
            if let Some(result) = self.select_drawn::<false>(method, key, now_us) {
                return Some(result);
            }
        }
        if self.drawn_pair {
            if let Some(result) = self.select_drawn::<true>(method, key, now_us) {
                return Some(result);
            }
        }
        if self.live_period {
            if let Some(result) = self.select_live(method, now_us) {
                return Some(result);
            }
        }
        if self.whole_ring {
            if let Some(result) = self.select_on_ring(method, key) {
                return Some(result);
            }
        }
        if self.adaptive_pair {
            if let Some(result) = self.select_adaptive(method, now_us) {
                return Some(result);
            }
        }
        None
    }

    /// The common call of `adaptive`: Dubbo's pair and load comparison over the whole set (or
    /// its local zone) of the thread's cached snapshot at static weights, nothing ejected,
    /// without building the strategy's context. None when any of that does not hold, or with
    /// fewer than two invokers.
    #[inline(always)]
    fn select_adaptive(&self, method: u32, now_us: i64) -> Option<Result<u64, Status>> {
        let pin = self.short_pin(method)?;
        let snapshot = pin.snapshot;
        if snapshot.members.len() < 2 || !snapshot.weights_settled(now_us) {
            return None;
        }
        let rng = self.rng.on(Some(pin.rng));
        let pick = |positions: &[u32]| {
            crate::strategy::adaptive_pick(
                self.config.timeout_ms,
                snapshot,
                positions,
                method,
                &rng,
                Clock::new(now_us).now_ms(),
            )
        };
        let pos = match &snapshot.local {
            None => pick(&snapshot.all),
            // As the general path: a single candidate is the pick, without the strategy.
            Some(local) if local.positions.len() == 1 => {
                let pos = local.positions[0] as usize;
                let id = self.begin_bypass(snapshot, Some(pin.hint), pos, method);
                return Some(Ok(id));
            }
            Some(local) => pick(&local.positions),
        };
        Some(Ok(self.count_select(&pin, pos, method)))
    }

    /// The common call of `consistenthash`: the key's owner on the ring of the thread's cached
    /// snapshot (the whole set or its local zone, nothing ejected; the ring ignores weights),
    /// without building the strategy's context. None when any of that does not hold, or with
    /// fewer than two invokers (the general path answers those as Dubbo does).
    #[inline(always)]
    fn select_on_ring(&self, method: u32, key: &[u8]) -> Option<Result<u64, Status>> {
        let pin = self.short_pin(method)?;
        let snapshot = pin.snapshot;
        if snapshot.members.len() < 2 {
            return None;
        }
        let pos = match &snapshot.local {
            None => crate::strategy::ring_pick(snapshot, key)?,
            Some(local) => crate::strategy::ring_pick_among(snapshot, key, &local.mask)?,
        };
        Some(Ok(self.count_select(&pin, pos, method)))
    }

    /// A short path's start: the method is known and this thread's cached snapshot is current.
    #[inline(always)]
    fn short_pin(&self, method: u32) -> Option<CachedPin<'_>> {
        if !self.methods.is_known(method) {
            return None;
        }
        if let Some(filter) = &self.filter {
            if filter.restricts_now() {
                return None;
            }
        }
        self.pin_cached()
    }

    /// Counts a short path's select on the counters of the invoker at `pos`, and keeps `pos` as
    /// the thread's hint for the report; returns the invoker's id.
    #[inline(always)]
    fn count_select_in(
        &self,
        snapshot: &Snapshot,
        counted: Counted<'_>,
        pos: usize,
        method: u32,
    ) -> u64 {
        let (member, ..) = self.begin_call(snapshot, counted.counter, counted.hint, pos, method);
        member.id
    }

    #[inline(always)]
    fn count_select(&self, pin: &CachedPin<'_>, pos: usize, method: u32) -> u64 {
        let (member, ..) = self.begin_call(pin.snapshot, pin.counter, Some(pin.hint), pos, method);
        member.id
    }

    /// Counts a select of the invoker at `pos` as in flight (on this thread's cell when the
    /// counters are spread) and keeps `pos` as the report's hint, when there is one. Also
    /// returns the selects counted before this one (0 for spread counters).
    #[inline(always)]
    fn begin_call<'s>(
        &self,
        snapshot: &'s Snapshot,
        counter: u32,
        hint: Option<&Cell<u32>>,
        pos: usize,
        method: u32,
    ) -> (&'s Member, &'s CallStats, u64) {
        let member = &snapshot.members[pos];
        let stats = member.state.methods.get_or_insert(method);
        // Spread counters are for strategies that never read calls in flight, so none of
        // them asks `on_select` what was selected before.
        let selected_before = if self.spread_counters {
            stats.begin_spread(counter);
            0
        } else {
            stats.begin()
        };
        if let Some(hint) = hint {
            hint.set(pos as u32);
        }
        (member, stats, selected_before)
    }

    /// `begin_call` for `adaptive`'s pick among a single candidate: counted in flight under the
    /// method's `BYPASS` key, where the load formula does not read it. Returns the invoker's id.
    #[inline(never)]
    fn begin_bypass(
        &self,
        snapshot: &Snapshot,
        hint: Option<&Cell<u32>>,
        pos: usize,
        method: u32,
    ) -> u64 {
        let member = &snapshot.members[pos];
        let stats = member
            .state
            .methods
            .get_or_insert_in_tables(method | BYPASS);
        stats.begin();
        if self.end_path.load(Relaxed) != END_BYPASS {
            self.end_path.store(END_BYPASS, Relaxed);
        }
        if let Some(hint) = hint {
            hint.set(pos as u32);
        }
        member.id
    }

    /// The common call of `roundrobin`: a ticket of the method's live period in the thread's
    /// cached snapshot (the whole set or its local zone, nothing ejected, static weights: a
    /// period is only ever published for that set), without building the strategy's context.
    /// None when any of that does not hold; the general path then makes the call, and the
    /// strategy's own `select` serves it from the same period.
    #[inline(always)]
    fn select_live(&self, method: u32, now_us: i64) -> Option<Result<u64, Status>> {
        let pin = self.short_pin(method)?;
        let snapshot = pin.snapshot;
        if !snapshot.weights_settled(now_us) {
            return None;
        }
        let pos = crate::strategy::serve_live(snapshot, method, Clock::new(now_us).now_ms())?;
        Some(Ok(self.count_select(&pin, pos, method)))
    }

    /// The common call of a strategy whose pick is the balancer's own draw (`random`,
    /// `leastactive`; with `PAIR`, `p2c`'s best of a pair): the whole set (or its local zone),
    /// nothing ejected, static weights, the thread's cached snapshot current (the caller checks
    /// `drawn_fast` or `drawn_pair`). None when any of that does not hold (before anything is
    /// drawn); the general path then makes the call. Each path makes the same draws as the
    /// strategy's own `select` would, so seeded runs do not depend on which one picked.
    #[inline(always)]
    fn select_drawn<const PAIR: bool>(
        &self,
        method: u32,
        key: &[u8],
        now_us: i64,
    ) -> Option<Result<u64, Status>> {
        let pin = self.short_pin(method)?;
        let snapshot = pin.snapshot;
        let n = snapshot.members.len();
        if n < 2 || !snapshot.weights_settled(now_us) {
            return None;
        }
        let prepared = snapshot.prepared.as_ref()?;
        let rng = self.rng.on(Some(pin.rng));
        if let Some(local) = &snapshot.local {
            let pos = self.pick_in_zone::<PAIR>(local, snapshot, method, key, now_us, rng);
            return Some(pos.map(|pos| self.count_select(&pin, pos, method)));
        }
        // The draws of `draw_from_whole_set` (or p2c's pair), written out: calling it (and
        // matching its `Drawn`) here costs about 30 more instructions per select+report
        // (random: 216 → 245 in process, 349 → 385 through the shared library).
        let pos = if PAIR {
            let weights = prepared.downcast_ref::<Weights>()?;
            best_of_pair(weights, &snapshot.members, &rng, |p| {
                active_in(snapshot, p, method)
            })
        } else {
            let whole = prepared.downcast_ref::<WholeSet>()?;
            match self.whole_set_draw {
                WholeSetDraw::FirstIdle { draws } => {
                    let mut idle = None;
                    for _ in 0..draws {
                        let pos = whole.draw(n, &rng);
                        if active_in(snapshot, pos, method) == 0 {
                            idle = Some(pos);
                            break;
                        }
                    }
                    match idle {
                        Some(pos) => pos,
                        None => {
                            let busy = self
                                .pick_after_busy_draws(snapshot, None, method, key, now_us, rng);
                            match busy {
                                Ok(pos) => pos,
                                Err(status) => return Some(Err(status)),
                            }
                        }
                    }
                }
                _ => whole.draw(n, &rng),
            }
        };
        Some(Ok(self.count_select(&pin, pos, method)))
    }

    /// `select_drawn`'s pick within the set's local zone (zone preference, nothing ejected):
    /// the draws the strategy makes over a filter's subset (see `Filter::with_view`), from the
    /// zone's own table.
    #[inline(never)]
    fn pick_in_zone<const PAIR: bool>(
        &self,
        local: &LocalZone,
        snapshot: &Snapshot,
        method: u32,
        key: &[u8],
        now_us: i64,
        rng: Rng<'_>,
    ) -> Result<usize, Status> {
        let (positions, weights) = (&*local.positions, &local.weights);
        if positions.len() == 1 {
            return Ok(positions[0] as usize);
        }
        let active = |p: usize| active_in(snapshot, p, method);
        if PAIR {
            let members = &snapshot.members;
            return Ok(best_of_subset_pair(
                weights, positions, members, &rng, active,
            ));
        }
        match self.whole_set_draw {
            WholeSetDraw::FirstIdle { draws } => {
                for _ in 0..draws {
                    let pos = weights.draw(positions, &rng);
                    if active(pos) == 0 {
                        return Ok(pos);
                    }
                }
                self.pick_after_busy_draws(snapshot, Some(local), method, key, now_us, rng)
            }
            _ => Ok(weights.draw(positions, &rng)),
        }
    }

    /// A failover's pick (the whole set but a few invokers already tried) by `random`,
    /// `leastactive` or `p2c`, as `select_drawn` makes it, the draws that land on an excluded
    /// invoker drawn again: a draw from the whole set's weights conditioned on the rest is a
    /// draw from the rest's weights, which is the strategy's pick over them (for `leastactive`
    /// its first-idle draws; `p2c` counts the excluded as drawn already, and its sampler skips
    /// them exactly). O(1) where building the candidate list is O(n). None (before counting
    /// anything) where that does not apply or the draws keep missing (the rest weighs little,
    /// or only leastactive's scan can decide): the general path then picks.
    ///
    /// Which path picks never depends on this thread's snapshot cache (a cold cache pins the
    /// snapshot the slow way), so a seeded balancer's failover picks repeat whatever other
    /// balancers this thread called; and a call with every invoker excluded draws nothing.
    #[inline(never)]
    fn select_drawn_excluding(
        &self,
        method: u32,
        excluded: &[u64],
        now_us: i64,
    ) -> Option<Result<u64, Status>> {
        if !self.methods.is_known(method) {
            return None;
        }
        if let Some(filter) = &self.filter {
            if filter.restricts_now() {
                return None;
            }
        }
        match self.pin_cached() {
            Some(pin) => {
                let rng = self.rng.on(Some(pin.rng));
                let counted = Counted {
                    counter: pin.counter,
                    hint: Some(pin.hint),
                };
                self.drawn_excluding_in(pin.snapshot, counted, rng, method, excluded, now_us)
            }
            None => {
                let pinned = self.pin();
                let rng = self.rng.on(pinned.rng_state());
                let counted = Counted {
                    counter: pinned.counter,
                    hint: None,
                };
                self.drawn_excluding_in(pinned.get(), counted, rng, method, excluded, now_us)
            }
        }
    }

    /// `select_drawn_excluding` on a pinned snapshot.
    fn drawn_excluding_in(
        &self,
        snapshot: &Snapshot,
        counted: Counted<'_>,
        rng: Rng<'_>,
        method: u32,
        excluded: &[u64],
        now_us: i64,
    ) -> Option<Result<u64, Status>> {
        let n = snapshot.members.len();
        if n < 2 || snapshot.local.is_some() || !snapshot.weights_settled(now_us) {
            return None;
        }
        let mut out = [usize::MAX; MAX_DRAWN_EXCLUSIONS];
        for (slot, id) in out.iter_mut().zip(excluded) {
            *slot = snapshot.position(*id).unwrap_or(usize::MAX);
        }
        let distinct_out = (0..out.len())
            .filter(|&i| out[i] != usize::MAX && !out[..i].contains(&out[i]))
            .count();
        if distinct_out >= n {
            // Nothing left: the general path answers NoCandidate, without a draw.
            return None;
        }
        let prepared = snapshot.prepared.as_ref()?;
        if self.drawn_pair {
            // p2c: its sampler over the whole set, the excluded invokers counted as drawn
            // already, draws the pair from the rest exactly (as over the list of the rest).
            let clock = Clock::new(now_us);
            let ctx = Ctx::whole_set(snapshot, self.methods.get(method)?, method, &clock, rng);
            let weights = prepared.downcast_ref::<Weights>()?;
            let pos = best_of_pair_excluding(&ctx, weights, &out)?;
            return Some(Ok(self.count_select_in(snapshot, counted, pos, method)));
        }
        let whole = prepared.downcast_ref::<WholeSet>()?;
        let idle_draws = match self.whole_set_draw {
            WholeSetDraw::FirstIdle { draws } => Some(draws),
            _ => None,
        };
        let mut busy = 0;
        for _ in 0..EXCLUSION_TRIES {
            let pos = whole.draw(n, &rng);
            if out.contains(&pos) {
                continue;
            }
            match idle_draws {
                Some(draws) if active_in(snapshot, pos, method) != 0 => {
                    busy += 1;
                    if busy == draws {
                        return None;
                    }
                }
                _ => return Some(Ok(self.count_select_in(snapshot, counted, pos, method))),
            }
        }
        None
    }

    /// The strategy's pick once every `FirstIdle` draw (over the whole set, or over `zone`)
    /// found a busy invoker.
    #[inline(never)]
    fn pick_after_busy_draws(
        &self,
        snapshot: &Snapshot,
        zone: Option<&LocalZone>,
        method: u32,
        key: &[u8],
        now_us: i64,
        rng: Rng<'_>,
    ) -> Result<usize, Status> {
        let method_state = self.methods.get(method).ok_or(Status::UnknownMethod)?;
        let call = Call {
            snapshot,
            counter: NO_COUNTER,
            method_state,
            method,
            key,
            clock: &Clock::new(now_us),
            rng,
            hint: None,
            single: Cell::new(false),
        };
        match zone {
            Some(z) => self.pick(&call, &z.positions, false, true, &z.mask, Some(&z.weights)),
            None => self.pick(&call, &snapshot.all, true, true, &[], None),
        }
    }

    /// A report's work on one snapshot: the call's counters, then what the strategy and the
    /// filter learn from it (only for those that follow reports).
    #[inline]
    fn end_call(&self, snapshot: &Snapshot, counter: u32, end: &CallEnd) {
        self.end_call_at(snapshot, snapshot.position(end.id), counter, end);
    }

    /// `end_call` with the invoker's position found (None: the id is not in the set).
    #[inline]
    fn end_call_at(&self, snapshot: &Snapshot, pos: Option<usize>, counter: u32, end: &CallEnd) {
        // A report for an id no longer in the set is accepted and ignored.
        let Some(pos) = pos else {
            return;
        };
        let path = self.end_path.load(Relaxed);
        let elapsed_us = end.elapsed_us as u64;
        let stats = snapshot.members[pos]
            .state
            .methods
            .get_or_insert(end.method);
        let ended = if path == END_SPREAD {
            stats.end_spread(counter, end.outcome, elapsed_us);
            true
        } else if path == END_BYPASS {
            return self.end_call_with_bypass(snapshot, pos, counter, end);
        } else {
            stats.end(counter, end.outcome, elapsed_us)
        };
        if self.learns_from_reports {
            self.learn_from_report(snapshot, pos, stats, ended, end);
        }
    }

    /// `end_call_at` for an `adaptive` balancer that has counted calls under a `BYPASS` key.
    /// A report carries no token saying how its call was picked: it ends a call the strategy
    /// picked while one is in flight on this invoker, else one picked among a single
    /// candidate. The counts are exact whenever the two kinds do not overlap on an invoker;
    /// when they do, an outcome may be booked to the other kind, and that kind's count of
    /// calls in flight stays one too high until the other call's report.
    #[cold]
    #[inline(never)]
    fn end_call_with_bypass(&self, snapshot: &Snapshot, pos: usize, counter: u32, end: &CallEnd) {
        let elapsed_us = end.elapsed_us as u64;
        let methods = &snapshot.members[pos].state.methods;
        let (stats, ended) = match self.end_with_bypass(methods, counter, end, elapsed_us) {
            Some(stats) => (stats, true),
            // Neither had a call in flight: the method's own count the report, as for any
            // report without a call (adaptive's counters are never spread).
            None => {
                let stats = methods.get_or_insert(end.method);
                (stats, stats.end(counter, end.outcome, elapsed_us))
            }
        };
        if self.learns_from_reports {
            self.learn_from_report(snapshot, pos, stats, ended, end);
        }
    }

    /// `end_call_at`'s end of a call of an `adaptive` balancer that has counted calls under a
    /// `BYPASS` key: the counters where a call in flight was ended (the method's own first),
    /// or None when neither had one (the method's own then count the report, as for any report
    /// without a call).
    #[inline(never)]
    fn end_with_bypass<'s>(
        &self,
        methods: &'s crate::stats::MethodStats,
        counter: u32,
        end: &CallEnd,
        elapsed_us: u64,
    ) -> Option<&'s CallStats> {
        let own = methods.get(end.method);
        if let Some(stats) = own.filter(|s| s.try_end(counter, end.outcome, elapsed_us)) {
            return Some(stats);
        }
        methods
            .get_slow(end.method | BYPASS)
            .filter(|s| s.try_end(counter, end.outcome, elapsed_us))
    }

    /// `end_call` on a snapshot pinned the general way (no current cached one).
    #[inline(never)]
    fn end_call_pinned(&self, end: &CallEnd) {
        let pinned = self.pin();
        self.end_call(pinned.get(), pinned.counter, end);
    }

    #[inline]
    fn learn_from_report(
        &self,
        snapshot: &Snapshot,
        pos: usize,
        stats: &CallStats,
        ended: bool,
        end: &CallEnd,
    ) {
        let clock = Clock::new(end.now_us);
        if self.tracks_reports {
            if let Some(method_state) = self.methods.get(end.method) {
                self.strategy.on_report(&Report {
                    method: method_state,
                    stats,
                    ended,
                    elapsed_us: end.elapsed_us,
                    outcome: end.outcome,
                    clock: &clock,
                });
            }
        }
        if let Some(filter) = &self.filter {
            filter.on_report(snapshot, pos, end.outcome, &clock);
        }
    }

    /// Pins the current snapshot for one call. The thread's cached one is used while its
    /// generation is current; otherwise (first call, after an update, nested call, or during
    /// thread teardown) `pin_slow` refreshes the cache or loads from the arc-swap.
    #[inline]
    fn pin(&self) -> Pinned<'_> {
        let generation = self.generation.load(Acquire);
        // One thread-local lookup per call (in a shared library each is a function call).
        if let Ok(cache) = CACHE.try_with(|cell| cell.get()) {
            // SAFETY: `cache` is this thread's own cache, alive until the thread exits (not
            // during this call); `in_call` keeps a nested call (none exists today) off it.
            unsafe {
                if !(*cache).in_call {
                    let slot = &(*cache).slots[self.uid as usize % CACHED];
                    if let Some(snap) = &slot.snapshot {
                        if slot.uid == self.uid && snap.generation == generation {
                            (*cache).in_call = true;
                            return Pinned {
                                snapshot: Arc::as_ptr(snap),
                                counter: (*cache).counter,
                                cache,
                                _loaded: None,
                                _inner: PhantomData,
                            };
                        }
                    }
                }
            }
        }
        self.pin_slow()
    }

    #[cold]
    #[inline(never)]
    fn pin_slow(&self) -> Pinned<'_> {
        let loaded = |inner: &Inner| {
            let guard = inner.snapshot.load();
            Pinned {
                snapshot: Arc::as_ptr(&guard),
                counter: NO_COUNTER,
                cache: std::ptr::null_mut(),
                _loaded: Some(guard),
                _inner: PhantomData,
            }
        };
        let Ok(cache) = CACHE.try_with(|cell| cell.get()) else {
            return loaded(self);
        };
        // SAFETY: as in `pin`; the slot borrow ends before the replaced snapshot is dropped.
        let (snapshot, replaced) = unsafe {
            if (*cache).in_call {
                return loaded(self);
            }
            if (*cache).counter == 0 {
                // This thread's first call.
                (*cache).counter = next_counter();
                (*cache).rng.set(fresh_seed());
            }
            let slot = &mut (*cache).slots[self.uid as usize % CACHED];
            slot.uid = self.uid;
            let replaced = slot.snapshot.replace(self.snapshot.load_full());
            let snapshot = slot.snapshot.as_ref().map_or(std::ptr::null(), Arc::as_ptr);
            (*cache).in_call = true;
            (snapshot, replaced)
        };
        drop(replaced);
        Pinned {
            snapshot,
            counter: unsafe { (*cache).counter },
            cache,
            _loaded: None,
            _inner: PhantomData,
        }
    }
}

/// Where a short path counts its pick: the thread's counter id, and the report's hint when the
/// snapshot is the thread's cached one.
#[derive(Clone, Copy)]
struct Counted<'a> {
    counter: u32,
    hint: Option<&'a Cell<u32>>,
}

/// This thread's cached snapshot of a balancer while it is current, for the common calls: no
/// `in_call` flag to set and clear and nothing to drop. Sound because those calls make no call
/// that could come back into a balancer on this thread (and so replace the slot) while they
/// hold it.
struct CachedPin<'a> {
    snapshot: &'a Snapshot,
    /// This thread's counter id (see `SnapshotCache::counter`).
    counter: u32,
    rng: &'a Cell<u64>,
    /// See `CachedSnapshot::hint`.
    hint: &'a Cell<u32>,
}

impl Inner {
    /// The thread's cached snapshot when it is current and no call on this thread is under way;
    /// otherwise None (the caller then takes the general path, which pins with `pin`).
    #[inline]
    fn pin_cached(&self) -> Option<CachedPin<'_>> {
        let generation = self.generation.load(Acquire);
        let cache = CACHE.try_with(|cell| cell.get()).ok()?;
        // SAFETY: this thread's own cache, alive until the thread exits (not during this call).
        // With `in_call` false no outer call reads a slot, and the holder of the pin makes no
        // call that could replace the slot (see `CachedPin`).
        unsafe {
            if (*cache).in_call {
                return None;
            }
            let slot = &(*cache).slots[self.uid as usize % CACHED];
            let snapshot = slot.snapshot.as_deref()?;
            if slot.uid != self.uid || snapshot.generation != generation {
                return None;
            }
            Some(CachedPin {
                snapshot,
                counter: (*cache).counter,
                rng: &(*cache).rng,
                hint: &slot.hint,
            })
        }
    }
}

/// A snapshot held for the length of one call: from this thread's cache (which keeps its Arc
/// until this thread's next call on the balancer; `in_call` is set until the pin drops) or
/// loaded from the arc-swap.
struct Pinned<'a> {
    snapshot: *const Snapshot,
    /// This thread's counter id (`NO_COUNTER` without a cache).
    counter: u32,
    /// This thread's cache when the snapshot is its slot's; its `in_call` is cleared on drop.
    cache: *mut SnapshotCache,
    _loaded: Option<arc_swap::Guard<Arc<Snapshot>>>,
    _inner: PhantomData<&'a Inner>,
}

impl Pinned<'_> {
    /// This thread's random state (without a thread-local lookup of its own), if it has one.
    #[inline]
    fn rng_state(&self) -> Option<&Cell<u64>> {
        // SAFETY: this thread's own cache, alive while `self` is; nothing else on this thread
        // takes a reference to its `rng` during the call.
        (!self.cache.is_null()).then(|| unsafe { &(*self.cache).rng })
    }

    #[inline]
    fn get(&self) -> &Snapshot {
        // SAFETY: the cache slot or `loaded` keeps the snapshot alive while `self` lives (no
        // call can replace the slot while `in_call` is set).
        unsafe { &*self.snapshot }
    }
}

impl Drop for Pinned<'_> {
    #[inline]
    fn drop(&mut self) {
        if !self.cache.is_null() {
            // SAFETY: this thread's own cache (a pin never leaves its thread: it is !Send).
            unsafe { (*self.cache).in_call = false };
        }
    }
}

impl Inner {
    /// Drops this thread's cached snapshot of this balancer, if it holds one. Called on update
    /// (so that the updating thread does not keep the replaced set alive until its next call,
    /// which may never come: an update to an empty set is how bindings release a closed
    /// balancer's state) and on drop. Other threads' copies go at their next call on it, or are
    /// emptied by the drop.
    fn forget_cached_snapshot(&self) {
        let _ = CACHE.try_with(|cell| {
            // SAFETY: this thread's own cache; neither caller runs inside a call on it.
            let cache = unsafe { &mut *cell.get() };
            if cache.in_call {
                return None;
            }
            let slot = &mut cache.slots[self.uid as usize % CACHED];
            (slot.uid == self.uid)
                .then(|| slot.snapshot.take())
                .flatten()
        });
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Free this thread's cached snapshot now rather than at its next reuse of the slot.
        self.forget_cached_snapshot();
        // Other threads keep the sets they cached until their slot goes to another balancer
        // or they exit, which may be never: what those sets hold (invokers, their counters,
        // rings, tables) goes now, and each thread's slot keeps an empty snapshot.
        let current = self.snapshot.load_full();
        let replaced = std::mem::take(self.update_lock.get_mut());
        for snapshot in replaced
            .iter()
            .filter_map(Weak::upgrade)
            .chain(Some(current))
        {
            // SAFETY: the balancer is being dropped, so no call on it runs or will run, and a
            // thread's cache reads a snapshot's body only after finding the balancer's uid in
            // its slot, which no live balancer has. Holding the snapshot here, no other thread
            // drops it meanwhile.
            unsafe { snapshot.empty_out() };
        }
    }
}

/// A load balancer over one set of invokers. Thread-safe: share it by reference or clone it
/// (clones share everything).
#[derive(Clone)]
pub struct Balancer {
    inner: Arc<Inner>,
}

static NEXT_UID: AtomicU64 = AtomicU64::new(1);

/// Counter ids given out so far (see `stats::NO_COUNTER`).
static COUNTERS_GIVEN: AtomicU64 = AtomicU64::new(0);

/// A new thread's counter id, in `1..NO_COUNTER`: unique among live threads unless the process
/// has started about four billion threads, and in turn, so that threads spread over the cells.
fn next_counter() -> u32 {
    (COUNTERS_GIVEN.fetch_add(1, Relaxed) % u64::from(NO_COUNTER - 1)) as u32 + 1
}

/// Snapshots cached per thread, direct-mapped by balancer uid (given out in turn, so the last 64
/// balancers created never share a slot). A program calling more balancers than this from one
/// thread takes the slow pin (a reference count and an arc-swap load) on every call that finds
/// another balancer in the slot: with 8 slots, 16 balancers used in turn made `random`'s
/// select+report 1.8× slower than with 64, and 64 balancers 1.4×. A slot costs 24 B per thread
/// and keeps at most one snapshot.
const CACHED: usize = 64;

struct CachedSnapshot {
    uid: u64,
    snapshot: Option<Arc<Snapshot>>,
    /// The position of this thread's last pick on a short path, a hint for its report: a
    /// report on the selecting thread then finds its invoker without the id index (at
    /// n = 1000, a cache miss). Checked against the id before use, so a stale hint only costs
    /// the lookup it would have made anyway.
    hint: Cell<u32>,
}

struct SnapshotCache {
    /// Set while this thread runs a call on a cached snapshot: a nested call (none today) must
    /// not replace the slot that the outer one reads.
    in_call: bool,
    /// This thread's counter id (0 = not assigned yet): it owns the counts of the (invoker,
    /// method)s it counted on first, and picks its cell of spread counters.
    counter: u32,
    /// This thread's random state (unseeded balancers draw from it).
    rng: Cell<u64>,
    slots: [CachedSnapshot; CACHED],
}

thread_local! {
    /// Each thread keeps the snapshot it last used of up to `CACHED` balancers, so that a call
    /// costs a generation compare instead of arc-swap's atomic read-modify-writes. A cached
    /// snapshot outlives an update only until this thread's next call on that balancer (or a
    /// call on another balancer mapped to the same slot, or the balancer's drop, which empties
    /// it): ids that left are never served from it, and their state is freed then.
    static CACHE: UnsafeCell<SnapshotCache> = const {
        UnsafeCell::new(SnapshotCache {
            in_call: false,
            counter: 0,
            rng: Cell::new(0),
            slots: [const {
                CachedSnapshot {
                    uid: 0,
                    snapshot: None,
                    hint: Cell::new(u32::MAX),
                }
            }; CACHED],
        })
    };
}

thread_local! {
    /// Candidate bitset and positions of subset calls, reused so that select never allocates
    /// in steady state.
    static SCRATCH: RefCell<(Vec<u64>, Vec<u32>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

impl Balancer {
    pub fn new(config: &str) -> Result<Balancer, Error> {
        Ok(Self::build(Config::parse(config)?))
    }

    /// A balancer for a hand-built config (say [`Config::default`] with fields changed). Its
    /// fields must lie within the ranges `parse` accepts ([`Config::validate`]); one outside
    /// them is `Status::InvalidConfig` naming the config key, as the same value in a config
    /// string would be. (Options that would do nothing, which `parse` also rejects, are not
    /// looked for here: a struct cannot say which fields were set on purpose.)
    pub fn with_config(config: Config) -> Result<Balancer, Error> {
        config.validate()?;
        Ok(Self::build(config))
    }

    fn build(config: Config) -> Balancer {
        let strategy = config.strategy.build(&config);
        let filter = Filter::new(&config);
        // A short path of `select_short` may serve a call when no `on_select` follows the pick.
        // Filters narrow the set only while an invoker is ejected (checked by `short_pin`) or
        // to the set's local zone (`Snapshot::local`), which every short path serves.
        let short = !strategy.tracks_selects();
        let spread_counters =
            !strategy.reads_in_flight() && !strategy.tracks_reports() && !strategy.tracks_selects();
        Balancer {
            inner: Arc::new(Inner {
                rng: RngSource::new(config.seed),
                uid: NEXT_UID.fetch_add(1, Relaxed),
                generation: AtomicU64::new(0),
                whole_set_draw: strategy.whole_set_draw(),
                tracks_selects: strategy.tracks_selects(),
                sees_single_picks: strategy.sees_single_picks(),
                tracks_reports: strategy.tracks_reports(),
                learns_from_reports: strategy.tracks_reports() || config.outlier.enabled(),
                drawn_fast: short
                    && !matches!(
                        strategy.whole_set_draw(),
                        WholeSetDraw::No | WholeSetDraw::BestOfPair
                    ),
                drawn_pair: short && strategy.whole_set_draw() == WholeSetDraw::BestOfPair,
                live_period: short && strategy.kind() == StrategyKind::RoundRobin,
                whole_ring: short && strategy.kind() == StrategyKind::ConsistentHash,
                adaptive_pair: short && strategy.kind() == StrategyKind::Adaptive,
                counts_bypass: strategy.kind() == StrategyKind::Adaptive,
                end_path: AtomicU8::new(if spread_counters {
                    END_SPREAD
                } else {
                    END_PLAIN
                }),
                spread_counters,
                strategy,
                config,
                snapshot: ArcSwap::from_pointee(Snapshot::empty()),
                methods: Methods::new(),
                update_lock: Mutex::new(Vec::new()),
                filter,
            }),
        }
    }

    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    pub fn strategy_name(&self) -> &'static str {
        self.inner.strategy.kind().name()
    }

    /// Replaces the whole set atomically. State of ids that stay is kept; state of ids that left
    /// is dropped. A rejected update changes nothing.
    pub fn update(&self, invokers: &[Invoker]) -> Result<(), Error> {
        validate(invokers)?;
        let inner = &*self.inner;
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
        let snapshot = Arc::new(Snapshot::new(
            old.generation + 1,
            SnapshotBody {
                all: (0..members.len() as u32).collect(),
                members,
                by_id: IdIndex::new(&invokers.iter().map(|i| i.id).collect::<Vec<_>>()),
                time_dependent_until_ms: until,
                settled: AtomicBool::new(until == i64::MIN || Clock::new(0).now_ms() >= until),
                prepared,
                local,
            },
        ));
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

    /// Interns a method name (the empty name is id 0, the service level).
    pub fn method(&self, name: &str) -> Result<u32, Error> {
        self.inner.methods.intern(name)
    }

    /// Picks an invoker of the whole set for one call of `method` and counts the call as in
    /// flight until it is reported.
    // Always inline, short paths included: across the C ABI and JNI the common pick then makes
    // no call (random: 348 -> 325 instructions per select+report through libpolylb.so, p2c
    // 492 -> 467; strategies without a short path pay about 15-20 more for the larger frame).
    #[inline(always)]
    pub fn select(&self, method: u32, key: &[u8], now_us: i64) -> Result<u64, Status> {
        if let Some(result) = self.inner.select_short(method, key, now_us) {
            return result;
        }
        self.select_general(method, key, &[], &[], now_us)
    }

    /// Picks an invoker among `candidates` (empty: the whole set), avoiding `excluded` (ids a
    /// failover already tried). Counts the call as in flight until it is reported.
    #[inline]
    pub fn select_among(
        &self,
        method: u32,
        key: &[u8],
        candidates: &[u64],
        excluded: &[u64],
        now_us: i64,
    ) -> Result<u64, Status> {
        if candidates.is_empty() {
            if excluded.is_empty() {
                if let Some(result) = self.inner.select_short(method, key, now_us) {
                    return result;
                }
            } else if (self.inner.drawn_fast || self.inner.drawn_pair)
                && excluded.len() <= MAX_DRAWN_EXCLUSIONS
            {
                if let Some(result) = self.inner.select_drawn_excluding(method, excluded, now_us) {
                    return result;
                }
            }
        }
        self.select_general(method, key, candidates, excluded, now_us)
    }

    /// `select_among` past its short paths.
    #[inline]
    fn select_general(
        &self,
        method: u32,
        key: &[u8],
        candidates: &[u64],
        excluded: &[u64],
        now_us: i64,
    ) -> Result<u64, Status> {
        let inner = &*self.inner;
        let method_state = inner.methods.get(method).ok_or(Status::UnknownMethod)?;
        let clock = Clock::new(now_us);
        let pinned;
        let (snapshot, counter, rng, hint) = match inner.pin_cached() {
            Some(pin) => (
                pin.snapshot,
                pin.counter,
                inner.rng.on(Some(pin.rng)),
                Some(pin.hint),
            ),
            None => {
                pinned = inner.pin();
                (
                    pinned.get(),
                    pinned.counter,
                    inner.rng.on(pinned.rng_state()),
                    None,
                )
            }
        };
        let call = Call {
            snapshot,
            counter,
            method_state,
            method,
            key,
            clock: &clock,
            rng,
            hint,
            single: Cell::new(false),
        };
        inner.select_in(&call, candidates, excluded)
    }

    /// Ends a call. A report for an id no longer in the set is accepted and ignored.
    #[inline]
    pub fn report(
        &self,
        method: u32,
        id: u64,
        elapsed_us: i64,
        outcome: Outcome,
        now_us: i64,
    ) -> Result<(), Status> {
        let inner = &*self.inner;
        if !inner.methods.is_known(method) {
            return Err(Status::UnknownMethod);
        }
        if elapsed_us < 0 {
            return Err(Status::InvalidArgument);
        }
        let end = CallEnd {
            method,
            id,
            elapsed_us,
            outcome,
            now_us,
        };
        match inner.pin_cached() {
            Some(pin) => {
                let hinted = pin.hint.get() as usize;
                let pos = match pin.snapshot.members.get(hinted) {
                    Some(member) if member.id == id => Some(hinted),
                    _ => pin.snapshot.position(id),
                };
                inner.end_call_at(pin.snapshot, pos, pin.counter, &end);
            }
            None => inner.end_call_pinned(&end),
        }
        Ok(())
    }

    /// Feeds what a Dubbo provider returns in its `lb_adaptive` attachment (`curTime`, `load`)
    /// plus the call's response time; used by `adaptive`, ignored by others. Errors:
    /// `UnknownMethod`; `InvalidArgument` for a NaN, infinite or negative `cpu_load`, or a
    /// negative `rt_us` or `provider_time_ms`.
    pub fn report_provider_metrics(
        &self,
        method: u32,
        id: u64,
        provider_time_ms: i64,
        cpu_load: f64,
        rt_us: i64,
        now_us: i64,
    ) -> Result<(), Status> {
        let inner = &*self.inner;
        inner.methods.get(method).ok_or(Status::UnknownMethod)?;
        if !cpu_load.is_finite() || cpu_load < 0.0 || rt_us < 0 || provider_time_ms < 0 {
            return Err(Status::InvalidArgument);
        }
        if inner.strategy.kind() != StrategyKind::Adaptive {
            // Nothing else reads them (and the words they would go to are another strategy's).
            return Ok(());
        }
        let snapshot = inner.snapshot.load();
        let Some(pos) = snapshot.position(id) else {
            return Ok(());
        };
        let stats = snapshot.members[pos].state.methods.get_or_insert(method);
        let clock = Clock::new(now_us);
        crate::strategy::touch_pick_time(stats, clock.now_ms());
        let words = stats.adaptive();
        let mut model = words.model();
        // Out-of-order reports are discarded, as Dubbo's AdaptiveMetrics does.
        if model.provider_time_ms > provider_time_ms {
            return Ok(());
        }
        model.provider_time_ms = provider_time_ms;
        model.current_time_ms = provider_time_ms;
        model.cpu_load = cpu_load;
        model.last_latency_ms = rt_us / 1000;
        model.ewma = 0.5 * model.ewma + 0.5 * model.last_latency_ms as f64;
        words.has_provider_metrics.store(true, Release);
        Ok(())
    }

    /// A JSON snapshot of the set and its counters (summed over methods, plus a per-method
    /// breakdown); effective weights are evaluated at `now_us`.
    pub fn stats_json(&self, now_us: i64) -> String {
        let inner = &*self.inner;
        let snapshot = inner.snapshot.load();
        let names = inner.methods.names_by_id();
        let now_ms = Clock::new(now_us).now_ms();
        let mut out = String::with_capacity(256 + snapshot.members.len() * 256);
        out.push_str("{\"strategy\":");
        json_str(&mut out, inner.strategy.kind().name());
        out.push_str(",\"invokers\":[");
        for (i, m) in snapshot.members.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let mut sums = [0u64; 6];
            // A method's calls picked among a single candidate (`BYPASS`) are its calls too.
            let mut rows: Vec<(u32, [u64; 6])> = Vec::new();
            for (method, s) in m.state.methods.iter() {
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
                let method = method & !BYPASS;
                match rows.iter_mut().find(|(m, _)| *m == method) {
                    Some((_, r)) => {
                        for (a, v) in r.iter_mut().zip(row) {
                            *a = a.saturating_add(v);
                        }
                    }
                    None => rows.push((method, row)),
                }
            }
            let mut per_method = String::new();
            for (method, row) in rows {
                if !per_method.is_empty() {
                    per_method.push(',');
                }
                per_method.push_str("{\"method\":");
                json_str(
                    &mut per_method,
                    names.get(method as usize).map_or("", |n| n),
                );
                per_method.push_str(&format!(
                    ",\"active\":{},\"selected\":{},\"succeeded\":{},\"failures\":{},\"timeouts\":{}}}",
                    row[0], row[1], row[2], row[3], row[4]
                ));
            }
            out.push_str(&format!("{{\"id\":{},\"address\":", m.id));
            json_str(&mut out, &m.address);
            if let Some(zone) = &m.zone {
                out.push_str(",\"zone\":");
                json_str(&mut out, zone);
            }
            let mean_us = sums[5].checked_div(sums[2]).unwrap_or(0);
            out.push_str(&format!(
                ",\"weight\":{},\"effective_weight\":{},\"start_time_ms\":{},\"warmup_ms\":{},\"active\":{},\"selected\":{},\"succeeded\":{},\"failures\":{},\"timeouts\":{},\"mean_success_us\":{}",
                m.weight,
                effective_weight(m.weight, m.start_time_ms, m.warmup_ms, now_ms),
                m.start_time_ms,
                m.warmup_ms,
                sums[0],
                sums[1],
                sums[2],
                sums[3],
                sums[4],
                mean_us
            ));
            inner.strategy.stats_fields(m, now_ms, &mut out);
            if let Some(filter) = &inner.filter {
                filter.stats_fields(m, now_ms, &mut out);
            }
            out.push_str(",\"methods\":[");
            out.push_str(&per_method);
            out.push_str("]}");
        }
        out.push_str("]}");
        out
    }
}

fn validate(invokers: &[Invoker]) -> Result<(), Error> {
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

pub(crate) fn json_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Invokers 1–4 at 10.0.0.<id>:20880.
    fn four_invokers() -> Vec<Invoker> {
        (1..=4)
            .map(|id| Invoker::new(id, format!("10.0.0.{id}:20880")))
            .collect()
    }

    #[test]
    fn an_update_frees_the_replaced_set_cached_by_the_updating_thread() {
        let b = Balancer::new("loadbalance=leastactive").unwrap();
        b.update(&[
            Invoker::new(1, "10.0.0.1:20880"),
            Invoker::new(2, "10.0.0.2:20880"),
        ])
        .unwrap();
        // A select caches the snapshot on this thread.
        let id = b.select(0, b"", 0).unwrap();
        b.report(0, id, 10, Outcome::Success, 0).unwrap();
        let state = Arc::downgrade(&b.inner.snapshot.load().members[0].state);
        // An empty set is how the bindings' close() releases a balancer's state: no further call
        // on this thread would ever replace the cached copy.
        b.update(&[]).unwrap();
        assert!(
            state.upgrade().is_none(),
            "the replaced set is still alive after the update"
        );
    }

    /// Dropping a balancer frees the sets that other threads cached, the current one and older
    /// ones, though those threads make no further call: each keeps only an empty husk of its
    /// snapshot (bounded below) until its slot goes to another balancer or it exits.
    #[test]
    fn dropping_a_balancer_frees_the_sets_other_threads_cached() {
        use std::sync::mpsc;
        let b = Balancer::new("loadbalance=consistenthash").unwrap();
        let set = four_invokers();
        b.update(&set).unwrap();
        let states: Vec<_> = b.inner.snapshot.load().members[..]
            .iter()
            .map(|m| Arc::downgrade(&m.state))
            .collect();
        // A thread that selects once, caching the set, then waits without another call until
        // told to exit.
        let caller = |b: &Balancer| {
            let b = b.clone();
            let (cached, cached_rx) = mpsc::channel();
            let (exit, exit_rx) = mpsc::channel::<()>();
            let thread = std::thread::spawn(move || {
                b.select(0, b"key", 0).unwrap();
                drop(b);
                cached.send(()).unwrap();
                let _ = exit_rx.recv();
            });
            cached_rx.recv().unwrap();
            (thread, exit)
        };
        let first = caller(&b);
        let older = Arc::downgrade(&b.inner.snapshot.load_full());
        // Invoker 4's state is now only in the set the first thread cached.
        b.update(&set[..3]).unwrap();
        let second = caller(&b);
        let current = Arc::downgrade(&b.inner.snapshot.load_full());
        assert!(states.iter().all(|s| s.upgrade().is_some()));
        drop(b);
        let kept: Vec<usize> = (0..states.len())
            .filter(|&i| states[i].upgrade().is_some())
            .collect();
        assert!(
            kept.is_empty(),
            "invokers' state kept after the drop: {kept:?}"
        );
        for husk in [&older, &current] {
            let husk = husk.upgrade().expect("the threads' slots still hold it");
            assert!(husk.members.is_empty() && husk.all.is_empty());
            assert!(husk.prepared.is_none() && husk.local.is_none());
        }
        assert!(
            std::mem::size_of::<Snapshot>() + 2 * 8 + 32 <= 256,
            "the husk left per thread and dropped balancer is larger than documented"
        );
        for (thread, exit) in [first, second] {
            exit.send(()).unwrap();
            thread.join().unwrap();
        }
        assert!(older.upgrade().is_none() && current.upgrade().is_none());
    }

    /// A failure reported on a replaced set (its report began before the update) must not eject
    /// there: the filter counted its ejections from the new set, and an ejection counted from
    /// the old one kept every pick off the short paths until it expired.
    #[test]
    fn a_failure_reported_on_a_replaced_set_ejects_nothing() {
        let b = Balancer::new("loadbalance=random&outlier.consecutiveFailures=1").unwrap();
        let set = four_invokers();
        b.update(&set).unwrap();
        let method = b.method("m").unwrap();
        let old = b.inner.snapshot.load_full();
        b.update(&set[..3]).unwrap();
        let end = CallEnd {
            method,
            id: 4,
            elapsed_us: 1000,
            outcome: Outcome::Failure,
            now_us: 1_000_000_000,
        };
        b.inner.end_call(&old, 0, &end);
        let filter = b.inner.filter.as_ref().unwrap();
        assert!(
            !filter.restricts_now(),
            "an ejection counted from the replaced set"
        );
        // A staying invoker's failure on the replaced set ejects nothing either; its next
        // failure, on the current set, does.
        let end = CallEnd { id: 2, ..end };
        b.inner.end_call(&old, 0, &end);
        assert!(!filter.restricts_now());
        let current = b.inner.snapshot.load_full();
        b.inner.end_call(&current, 0, &end);
        assert!(filter.restricts_now());
    }

    /// boundedhash's total of calls in flight when an invoker leaves with calls to it in flight,
    /// and calls that pinned the replaced set before the update finish there after it: the
    /// update's reading of the leaving invoker's counters must account for each of them exactly
    /// once, whichever side of it they fall on. Driven by hand: `end_call` and `select_in` on
    /// the replaced set are what a thread preempted between its pin and its count runs.
    #[test]
    fn boundedhash_total_counts_calls_finishing_on_a_replaced_set_once() {
        let b = Balancer::new("loadbalance=boundedhash").unwrap();
        let set = four_invokers();
        b.update(&set).unwrap();
        let method = b.method("m").unwrap();
        let method_state = b.inner.methods.get(method).unwrap();
        let total = || crate::strategy::whole_set_in_flight(method_state).unwrap_or(0);
        for _ in 0..3 {
            assert_eq!(b.select_among(method, b"", &[4], &[], 0), Ok(4));
        }
        assert_eq!(b.select_among(method, b"", &[1], &[], 0), Ok(1));
        assert_eq!(total(), 4);
        let old = b.inner.snapshot.load_full();
        b.update(&set[..3]).unwrap();
        assert_eq!(total(), 1, "the leaving invoker's calls are taken out");
        // A report that pinned the replaced set before the update ends one of invoker 4's
        // calls there: the update already took it out.
        let end = CallEnd {
            method,
            id: 4,
            elapsed_us: 1000,
            outcome: Outcome::Success,
            now_us: 0,
        };
        b.inner.end_call(&old, NO_COUNTER, &end);
        assert_eq!(total(), 1, "a call on a departed invoker ended twice");
        // A select that pinned the replaced set before the update picks invoker 4 there; its
        // report comes on the current set, which ignores it.
        let clock = Clock::new(0);
        let call = test_call(&b, &old, method_state, method, &clock);
        assert_eq!(b.inner.select_in(&call, &[4], &[]), Ok(4));
        b.report(method, 4, 1000, Outcome::Success, 0).unwrap();
        assert_eq!(
            total(),
            1,
            "a call on a departed invoker is counted for good"
        );
        // The other stragglers' reports, on either set, change nothing; the staying invoker's
        // call still ends.
        b.inner.end_call(&old, NO_COUNTER, &end);
        b.report(method, 4, 1000, Outcome::Success, 0).unwrap();
        b.report(method, 1, 1000, Outcome::Success, 0).unwrap();
        assert_eq!(total(), 0);
        // Invoker 4 comes back with fresh counters, and a late report on the replaced set of
        // one of its old calls does not end a new one.
        b.update(&set).unwrap();
        assert_eq!(b.select_among(method, b"", &[4], &[], 0), Ok(4));
        assert_eq!(total(), 1);
        b.inner.end_call(&old, NO_COUNTER, &end);
        assert_eq!(total(), 1);
        b.report(method, 4, 1000, Outcome::Success, 0).unwrap();
        assert_eq!(total(), 0);
    }

    /// A call as a select on an uncached snapshot makes it: no counter of this thread, no key.
    fn test_call<'a>(
        b: &'a Balancer,
        snapshot: &'a Snapshot,
        method_state: &'a MethodState,
        method: u32,
        clock: &'a Clock,
    ) -> Call<'a> {
        Call {
            snapshot,
            counter: NO_COUNTER,
            method_state,
            method,
            key: b"",
            clock,
            rng: b.inner.rng.on(None),
            hint: None,
            single: Cell::new(false),
        }
    }

    /// boundedhash's total for a method whose first pick races an update that takes its invoker
    /// out: the total does not exist yet when the update runs, so nothing there accounts for
    /// the pick, yet it counts on the departed invoker and its report is ignored. Each of the
    /// pick's steps is placed on the other side of the update by hand, as a preempted thread
    /// would run them; with every call reported, each method's total must come back to 0.
    #[test]
    fn boundedhash_first_pick_of_a_method_racing_an_update_counts_once() {
        let b = Balancer::new("loadbalance=boundedhash").unwrap();
        let set = four_invokers();
        b.update(&set).unwrap();
        let clock = Clock::new(0);
        let call =
            |snapshot, method_state, method| test_call(&b, snapshot, method_state, method, &clock);
        let total = |method_state| crate::strategy::whole_set_in_flight(method_state).unwrap_or(0);

        // The whole pick on the replaced set, pinned before the update, after it.
        let m = b.method("m").unwrap();
        let m_state = b.inner.methods.get(m).unwrap();
        let old = b.inner.snapshot.load_full();
        b.update(&set[..3]).unwrap();
        assert_eq!(b.inner.select_in(&call(&old, m_state, m), &[4], &[]), Ok(4));
        b.report(m, 4, 1000, Outcome::Success, 0).unwrap();
        assert_eq!(
            total(m_state),
            0,
            "a first pick after the update stayed counted"
        );
        // Its twin reported on the replaced set: its end must not take out a call never counted.
        assert_eq!(b.inner.select_in(&call(&old, m_state, m), &[4], &[]), Ok(4));
        let end = CallEnd {
            method: m,
            id: 4,
            elapsed_us: 1000,
            outcome: Outcome::Success,
            now_us: 0,
        };
        b.inner.end_call(&old, NO_COUNTER, &end);
        assert_eq!(total(m_state), 0);

        // A first pick counted on the invoker before the update, and in the total after it (a
        // pick among candidates makes the total in `on_select`, after the count).
        b.update(&set).unwrap();
        let n = b.method("n").unwrap();
        let n_state = b.inner.methods.get(n).unwrap();
        let old = b.inner.snapshot.load_full();
        let (member, stats, selected_before) = b.inner.begin_call(&old, NO_COUNTER, None, 3, n);
        assert_eq!(member.id, 4);
        b.update(&set[..3]).unwrap();
        b.inner
            .strategy
            .on_select(n_state, n, stats, selected_before, &clock);
        b.report(n, 4, 1000, Outcome::Success, 0).unwrap();
        assert_eq!(
            total(n_state),
            0,
            "a first pick straddling the update stayed counted"
        );
    }

    /// boundedhash keeps the whole set's calls in flight per method and brings it up to date on
    /// every update. Calls selected and reported while a set is replaced must neither be lost
    /// from that total nor counted twice: with every call reported, it is 0 after each round.
    /// Every other update takes invoker 4 out, with calls to it in flight.
    #[test]
    fn boundedhash_in_flight_total_survives_updates_racing_calls() {
        use std::sync::atomic::AtomicUsize;
        const ROUNDS: usize = 3000;
        const WORKERS: usize = 2;
        let b = Balancer::new("loadbalance=boundedhash").unwrap();
        let set = four_invokers();
        b.update(&set).unwrap();
        let method = b.method("m").unwrap();
        // Odd phases: the workers call (and update races them); even ones: each worker, its
        // calls all reported, parks by storing the phase.
        let phase = AtomicUsize::new(0);
        let parked: [AtomicUsize; WORKERS] = Default::default();
        let stop = AtomicBool::new(false);
        std::thread::scope(|scope| {
            for (w, parked) in parked.iter().enumerate() {
                let (b, phase, stop) = (&b, &phase, &stop);
                scope.spawn(move || {
                    let mut held = Vec::new();
                    let mut i = 0u64;
                    loop {
                        let p = phase.load(Acquire);
                        if p % 2 == 0 {
                            parked.store(p, Release);
                            if stop.load(Acquire) {
                                return;
                            }
                            std::thread::yield_now();
                            continue;
                        }
                        // Three calls held at once, so that invokers are busy during updates.
                        for _ in 0..3 {
                            i += 1;
                            let key = (w as u64 * 1_000_003 + i).to_le_bytes();
                            held.push(b.select(method, &key, 0).unwrap());
                        }
                        for id in held.drain(..) {
                            b.report(method, id, 100, Outcome::Success, 0).unwrap();
                        }
                    }
                });
            }
            let mut drifted = Vec::new();
            for r in 1..=ROUNDS {
                phase.store(2 * r - 1, Release);
                // Let the workers start calling, then replace the set under them.
                std::thread::yield_now();
                b.update(if r % 2 == 0 { &set } else { &set[..3] }).unwrap();
                phase.store(2 * r, Release);
                while parked.iter().any(|p| p.load(Acquire) != 2 * r) {
                    std::thread::yield_now();
                }
                let m = b.inner.methods.get(method).unwrap();
                let total = crate::strategy::whole_set_in_flight(m).unwrap_or(0);
                if total != 0 {
                    drifted.push((r, total));
                }
            }
            stop.store(true, Release);
            assert!(
                drifted.is_empty(),
                "{} of {ROUNDS} rounds ended with a total in flight, the first: {:?}",
                drifted.len(),
                &drifted[..drifted.len().min(8)]
            );
        });
    }

    /// d choices draw distinct candidates in proportion to weight until none is left, at any
    /// position: below 256 (tracked as bits) and beyond (a search of the sorted draws), by the
    /// alias table, by skipping drawn weight when its tries collide, and uniformly.
    #[test]
    fn a_sampler_draws_each_candidate_at_most_once_at_any_position() {
        type WeightAt = fn(usize) -> i32;
        let cases: [(usize, WeightAt); 4] = [
            (20, |i| 100 + (i % 3) as i32 * 50),
            (20, |_| 100),
            // One heavy invoker: the alias table keeps landing on it once it is drawn.
            (40, |i| if i == 7 { 1_000_000 } else { 1 }),
            // Most weight on positions 250-299, on both sides of 256.
            (300, |i| if i >= 250 { 1_000 } else { 1 }),
        ];
        for (n, weight) in cases {
            let b = Balancer::new("loadbalance=p2c&seed=7").unwrap();
            let set: Vec<Invoker> = (0..n as u64)
                .map(|i| {
                    Invoker::new(i, format!("10.0.{}.{}:1", i / 200, i % 200))
                        .weight(weight(i as usize))
                })
                .collect();
            b.update(&set).unwrap();
            let snapshot = b.inner.snapshot.load_full();
            let weights = snapshot
                .prepared
                .as_ref()
                .unwrap()
                .downcast_ref::<Weights>()
                .unwrap();
            let clock = Clock::new(0);
            let (mut below, mut beyond) = (0, 0);
            // Fewer under Miri (scripts/miri.sh), where 50 rounds take minutes.
            for round in 0..if cfg!(miri) { 5 } else { 50 } {
                let ctx = Ctx::whole_set(
                    &snapshot,
                    b.inner.methods.get(0).unwrap(),
                    0,
                    &clock,
                    b.inner.rng.on(None),
                );
                let mut sampler = crate::strategy::Sampler::new(&ctx, weights, None);
                let mut drawn = Vec::new();
                while let Some(pos) = sampler.draw() {
                    assert!(sampler.was_drawn(pos));
                    drawn.push(pos);
                }
                let mut distinct = drawn.clone();
                distinct.sort_unstable();
                distinct.dedup();
                assert_eq!(
                    distinct.len(),
                    drawn.len(),
                    "n = {n}, round {round}: {drawn:?}"
                );
                assert_eq!(drawn.len(), n.min(crate::strategy::MAX_DRAWS), "n = {n}");
                below += drawn.iter().filter(|&&p| p < 256).count();
                beyond += drawn.iter().filter(|&&p| p >= 256).count();
                for pos in 0..n {
                    assert_eq!(
                        sampler.was_drawn(pos),
                        drawn.contains(&pos),
                        "n = {n}, {pos}"
                    );
                }
            }
            if n > 256 {
                assert!(
                    below > 0 && beyond > 0,
                    "{below} below 256, {beyond} beyond"
                );
            }
        }
    }
}
