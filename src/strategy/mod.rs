//! The Strategy trait, the per-call view strategies work on, and the name → constructor table.
//!
//! A strategy sees one immutable [`Snapshot`] of the invoker set, the candidate positions of
//! this call (always in set order), the method's state and a lazily read clock. It returns a
//! position; the balancer does the bookkeeping (in-flight counts) around it.

mod adaptive;
mod alias;
mod bounded_hash;
mod consistent_hash;
mod json_number;
mod key_digest;
mod least_active;
mod maglev;
mod orca;
mod p2c;
mod peak_ewma;
mod random;
mod rendezvous;
mod round_robin;
mod shortest_response;
mod slow_start;
pub(crate) mod stable_hash;
mod ties;
mod warming;
pub(crate) mod weighted;

pub(crate) use adaptive::{pick_among as adaptive_pick, touch_pick_time};
pub(crate) use alias::AliasScratch;
#[cfg(test)]
pub(crate) use bounded_hash::whole_set_in_flight;
pub(crate) use consistent_hash::{ring_pick, ring_pick_among};
pub(crate) use maglev::{table_pick, table_pick_among};
pub use orca::LoadReport;
pub(crate) use orca::{record_load, restart_load, stride_pick};
pub(crate) use p2c::{best_of_pair, best_of_pair_excluding, best_of_subset_pair};
pub(crate) use peak_ewma::PeakEwma;
pub(crate) use random::WholeSet;
pub(crate) use rendezvous::{score_pick, score_pick_among};
pub(crate) use round_robin::serve_live;
#[cfg(test)]
pub(crate) use weighted::{Sampler, MAX_DRAWS};
pub(crate) use weighted::{SubsetWeights, Weights};

use crate::balancer::{Member, MethodState, Snapshot};
use crate::clock::Clock;
use crate::config::Config;
use crate::error::Status;
use crate::rng::Rng;
use crate::stats::{CallStats, InvokerState};
use crate::weight::effective_weight;
use std::any::{Any, TypeId};
use std::sync::Arc;

/// How a strategy's pick over the whole set at static weights uses the [`WholeSet`] draw it
/// prepared, so that the balancer can make that draw itself, without a virtual call.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum WholeSetDraw {
    /// The strategy picks on its own.
    No,
    /// The pick is one draw (`random`).
    One,
    /// The pick is the first of `draws` draws that lands on an invoker with no call of the
    /// method in flight; when every draw lands on a busy one, the strategy decides, told so by
    /// [`Ctx::drawn`] (`leastactive`).
    FirstIdle { draws: u32 },
    /// The pick is the less loaded of a weighted pair drawn from the [`Weights`] the strategy
    /// prepared, by [`best_of_pair`] (`p2c` with two choices and no slow start). Only
    /// `select_drawn` makes it; elsewhere the strategy's `select` does.
    BestOfPair,
}

/// Data a strategy derives from a whole set (a ring, prefix sums), built on update only.
pub(crate) type Prepared = Option<PreparedData>;

/// A strategy's prepared data, type-erased. Its `TypeId` and data pointer are kept beside the
/// `Arc` so that reading it on every pick is a compare against a constant, not a virtual
/// `type_id` call plus an offset read from the vtable.
#[derive(Clone)]
pub(crate) struct PreparedData {
    type_id: TypeId,
    data: *const (),
    /// Keeps `data` alive (and hands it out as an `Arc`, `downcast_arc`).
    _owner: Arc<dyn Any + Send + Sync>,
}

// SAFETY: `data` points into `owner`, which is `Send + Sync`; it is only read as `&T` where
// `T` is the type that `owner` holds.
unsafe impl Send for PreparedData {}
// SAFETY: as for `Send`: shared access only ever reads `&T` through `data`.
unsafe impl Sync for PreparedData {}

impl PreparedData {
    pub fn new<T: Any + Send + Sync>(value: T) -> PreparedData {
        let owner = Arc::new(value);
        PreparedData {
            type_id: TypeId::of::<T>(),
            data: Arc::as_ptr(&owner) as *const (),
            _owner: owner,
        }
    }

    /// The data as an `Arc<T>`, if it is a `T` (a snapshot keeps the draw tables it reads on
    /// every pick so, found once per update: see `SnapshotBody::whole_set`).
    pub fn downcast_arc<T: Any + Send + Sync>(&self) -> Option<Arc<T>> {
        self._owner.clone().downcast::<T>().ok()
    }

    #[inline]
    pub fn downcast_ref<T: Any>(&self) -> Option<&T> {
        // SAFETY: the type matches the one `data` was created from, and `owner` keeps it alive
        // as long as `self`.
        (self.type_id == TypeId::of::<T>()).then(|| unsafe { &*(self.data as *const T) })
    }
}

pub(crate) trait Strategy: Send + Sync + 'static {
    fn kind(&self) -> StrategyKind;

    /// Builds derived data for a new set. `previous` lets it reuse what did not change.
    fn prepare(&self, _members: &[Member], _previous: &Snapshot) -> Prepared {
        None
    }

    fn select(&self, ctx: &Ctx<'_>) -> Result<usize, Status>;

    /// How the strategy's pick over the whole set at static weights uses the draw from the
    /// [`WholeSet`] it prepared (asked once, at construction).
    fn whole_set_draw(&self) -> WholeSetDraw {
        WholeSetDraw::No
    }

    /// True when the strategy wants [`Strategy::on_select`] after every pick (asked once, at
    /// construction, so that strategies without it pay nothing).
    fn tracks_selects(&self) -> bool {
        false
    }

    /// A pick was counted in flight (also single-candidate picks, which skip `select`) in
    /// `stats`, the method's counters on `invoker`; `selected_before` is what the count's
    /// `CallStats::begin` returned.
    fn on_select(
        &self,
        _method: &MethodState,
        _method_id: u32,
        _invoker: &InvokerState,
        _stats: &CallStats,
        _selected_before: u64,
        _clock: &Clock,
    ) {
    }

    /// True when the strategy wants [`Strategy::single_pick`] (asked once, at construction).
    fn sees_single_picks(&self) -> bool {
        false
    }

    /// A pick among a single candidate, answered without [`Strategy::select`] (Dubbo's rule):
    /// time-based state that the first pick after an update starts (slow start's ramp) must
    /// start here too, or an invoker reached only this way would never start it; so must what
    /// Dubbo starts at its balancer's first call of any kind (shortestresponse's window).
    fn single_pick(&self, _snapshot: &Snapshot, _method: &MethodState, _clock: &Clock) {}

    /// False when the strategy's picks never read calls in flight (nor other call counters):
    /// its counters are then statistics only, and may be spread over cache lines per thread
    /// (asked once, at construction).
    fn reads_in_flight(&self) -> bool {
        true
    }

    /// False when the strategy ignores [`Strategy::on_report`], so that reports skip the call
    /// (asked once, at construction).
    fn tracks_reports(&self) -> bool {
        true
    }

    /// A call ended, cancelled ones included (after the balancer has updated the common
    /// counters).
    fn on_report(&self, _report: &Report<'_>) {}

    /// A new set was swapped in for `previous`; per-method state may be brought up to date
    /// here (cold path).
    fn after_update(
        &self,
        _method: &MethodState,
        _method_id: u32,
        _snapshot: &Snapshot,
        _previous: &Snapshot,
        _clock: &Clock,
    ) {
    }

    /// Extra, strategy-specific JSON fields for one invoker in `stats` (`,"key":value` pairs).
    fn stats_fields(&self, _member: &Member, _at: &StatsAt<'_>, _out: &mut String) {}

    /// Extra JSON fields for one (invoker, method) row of `stats`: what this strategy's picks
    /// of the method compare, read without changing it. `stats` is the state its picks read
    /// (not the calls picked among a single candidate, which skip the strategy), absent before
    /// the first of them.
    fn method_stats_fields(
        &self,
        _stats: Option<&CallStats>,
        _weight: i32,
        _at: &StatsAt<'_>,
        _out: &mut String,
    ) {
    }
}

/// What [`StatsAt::each_method`] calls with each method's id and state.
pub(crate) type MethodVisitor<'v> = dyn FnMut(u32, &MethodState) + 'v;

/// The moment a stats snapshot describes, for [`Strategy::stats_fields`].
pub(crate) struct StatsAt<'a> {
    pub now_us: i64,
    pub now_ms: i64,
    /// The time is the library's clock (which advances a tick at a time), not the caller's.
    pub library_clock: bool,
    /// The balancer's state of a method id (`BYPASS` cleared), as picks of it read it.
    pub method: &'a dyn Fn(u32) -> Option<&'a MethodState>,
    /// Calls its argument with every method interned so far (its id and state).
    pub each_method: &'a dyn Fn(&mut MethodVisitor<'_>),
    /// The set the row's invoker belongs to (what the strategy prepared for it included).
    pub snapshot: &'a Snapshot,
    /// What a strategy derives once per stats call for every row (empty when the call starts;
    /// one strategy runs per balancer, so one type is ever put here).
    pub per_call: &'a std::cell::OnceCell<Box<dyn Any>>,
}

/// Every strategy name polylb knows. Dubbo's six keep Dubbo's meaning forever. New strategies
/// are added under new names: a `match` needs a `_` arm (`#[non_exhaustive]`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StrategyKind {
    /// `random`: weighted random, warm-up aware (Dubbo's default).
    Random,
    /// `roundrobin`: smooth weighted round robin, Dubbo's exact sequence, per method.
    RoundRobin,
    /// `leastactive`: fewest calls in flight, weighted random among ties.
    LeastActive,
    /// `shortestresponse`: window-average successful latency × (in flight + 1), over a
    /// tumbling window (`shortestresponse.slidePeriod`).
    ShortestResponse,
    /// `consistenthash`: Dubbo's MD5 ring (`hash.nodes` virtual nodes per invoker), keyed by
    /// the caller's key bytes.
    ConsistentHash,
    /// `adaptive`: power of two choices by Dubbo's provider-load formula (CPU load, EWMA
    /// latency, in flight, success ratio).
    Adaptive,
    /// Weighted power of d choices on calls in flight relative to weight.
    P2c,
    /// Power of d choices on peak-EWMA latency × (in flight + 1) / weight.
    PeakEwma,
    /// Consistent hashing with bounded loads (Mirrokni, Thorup, Zadimoghaddam) on Dubbo's ring.
    BoundedHash,
    /// Maglev hashing (Eisenbud et al.) with weights: a prime-sized lookup table
    /// (`maglev.tableSize` slots), one slot read per pick.
    Maglev,
    /// Weighted rendezvous (highest-random-weight) hashing: every candidate scored per pick,
    /// exact weight shares, a failover's next choice shared by every consumer.
    Rendezvous,
    /// Weighted round robin by the load providers report (gRPC's `weighted_round_robin`, ORCA):
    /// weight = qps / (utilization + eps / qps × penalty), after a blackout, until it lapses.
    Orca,
}

impl StrategyKind {
    /// Every strategy, in this order: Dubbo's six, then polylb's own.
    pub const ALL: &'static [StrategyKind] = &[
        StrategyKind::Random,
        StrategyKind::RoundRobin,
        StrategyKind::LeastActive,
        StrategyKind::ShortestResponse,
        StrategyKind::ConsistentHash,
        StrategyKind::Adaptive,
        StrategyKind::P2c,
        StrategyKind::PeakEwma,
        StrategyKind::BoundedHash,
        StrategyKind::Maglev,
        StrategyKind::Rendezvous,
        StrategyKind::Orca,
    ];

    /// The strategy's config name, as in `loadbalance=` (`random`, …, `rendezvous`).
    pub fn name(self) -> &'static str {
        match self {
            StrategyKind::Random => "random",
            StrategyKind::RoundRobin => "roundrobin",
            StrategyKind::LeastActive => "leastactive",
            StrategyKind::ShortestResponse => "shortestresponse",
            StrategyKind::ConsistentHash => "consistenthash",
            StrategyKind::Adaptive => "adaptive",
            StrategyKind::P2c => "p2c",
            StrategyKind::PeakEwma => "peakewma",
            StrategyKind::BoundedHash => "boundedhash",
            StrategyKind::Maglev => "maglev",
            StrategyKind::Rendezvous => "rendezvous",
            StrategyKind::Orca => "orca",
        }
    }

    /// True for the strategies polylb adds (not Dubbo's six).
    pub fn is_beyond_dubbo(self) -> bool {
        matches!(
            self,
            StrategyKind::P2c
                | StrategyKind::PeakEwma
                | StrategyKind::BoundedHash
                | StrategyKind::Maglev
                | StrategyKind::Rendezvous
                | StrategyKind::Orca
        )
    }

    /// True for the strategies that take `slowstart.*` (not `maglev` or `rendezvous`: a weight
    /// that changes over time would move keys while it ramps).
    pub fn has_slow_start(self) -> bool {
        matches!(
            self,
            StrategyKind::P2c | StrategyKind::PeakEwma | StrategyKind::BoundedHash
        )
    }

    /// True for the strategies that place keys on invokers: every consumer sends a key to the
    /// same invoker, which per-consumer subsets would break.
    pub fn hashes_keys(self) -> bool {
        matches!(
            self,
            StrategyKind::ConsistentHash
                | StrategyKind::BoundedHash
                | StrategyKind::Maglev
                | StrategyKind::Rendezvous
        )
    }

    /// True for the strategies that take subsets chosen by `subset.key`: those that pick by load
    /// or latency. Not the key-hashing ones (see [`StrategyKind::hashes_keys`]), nor `random`,
    /// `roundrobin` and `orca`: keyed subsets spread binomially, so some invokers are in more
    /// consumers' subsets than others, and a load-blind pick cannot move calls off them (`orca`'s
    /// weights measure capacity, which does not change with the calls a provider gets). Those
    /// three take subsets dealt by `subset.index` (balanced over the consumers); the key-hashing
    /// strategies take none.
    pub fn takes_subset(self) -> bool {
        !self.hashes_keys()
            && !matches!(
                self,
                StrategyKind::Random | StrategyKind::RoundRobin | StrategyKind::Orca
            )
    }

    /// The strategy of a config name (exact, lowercase); `None` for an unknown name.
    pub fn from_name(name: &str) -> Option<StrategyKind> {
        Self::ALL.iter().copied().find(|k| k.name() == name)
    }

    pub(crate) fn build(self, config: &Config) -> Box<dyn Strategy> {
        match self {
            StrategyKind::Random => Box::new(random::Random),
            StrategyKind::RoundRobin => Box::new(round_robin::RoundRobin),
            StrategyKind::LeastActive => Box::new(least_active::LeastActive),
            StrategyKind::ShortestResponse => {
                Box::new(shortest_response::ShortestResponse::new(config))
            }
            StrategyKind::ConsistentHash => Box::new(consistent_hash::ConsistentHash::new(config)),
            StrategyKind::Adaptive => Box::new(adaptive::Adaptive::new(config)),
            StrategyKind::P2c => Box::new(p2c::P2c::new(config)),
            StrategyKind::PeakEwma => Box::new(PeakEwma::new(config)),
            StrategyKind::BoundedHash => Box::new(bounded_hash::BoundedHash::new(config)),
            StrategyKind::Maglev => Box::new(maglev::Maglev::new(config)),
            StrategyKind::Rendezvous => Box::new(rendezvous::Rendezvous),
            StrategyKind::Orca => Box::new(orca::Orca::new(config)),
        }
    }
}

/// One ended call as a strategy sees it.
pub(crate) struct Report<'a> {
    pub method: &'a MethodState,
    pub stats: &'a CallStats,
    /// True when the call was counted in flight (its report undid one in-flight count).
    pub ended: bool,
    pub elapsed_us: i64,
    pub outcome: crate::Outcome,
    pub clock: &'a Clock,
}

/// One select call as a strategy sees it.
pub(crate) struct Ctx<'a> {
    pub snapshot: &'a Snapshot,
    pub method: &'a MethodState,
    pub method_id: u32,
    /// Candidate positions in set order; at least two (a single candidate never reaches a strategy).
    pub candidates: &'a [u32],
    /// True when the candidates are the whole set (fast paths over prepared data apply).
    pub is_all: bool,
    /// True when the balancer already made the strategy's [`WholeSetDraw::FirstIdle`] draws
    /// for this pick and each landed on a busy invoker.
    pub drawn: bool,
    /// Membership bitset over positions; meaningful only when `!is_all`.
    pub mask: &'a [u64],
    /// The candidates' configured weights as a draw table, when the filter prepared them (its
    /// local-zone and not-ejected views); None for other subsets and for the whole set.
    pub subset: Option<&'a weighted::SubsetWeights>,
    pub key: &'a [u8],
    pub clock: &'a Clock,
    pub rng: Rng<'a>,
}

impl<'a> Ctx<'a> {
    /// A pick over the whole set, without a key or a filter's view.
    #[inline(always)]
    pub fn whole_set(
        snapshot: &'a Snapshot,
        method: &'a MethodState,
        method_id: u32,
        clock: &'a Clock,
        rng: Rng<'a>,
    ) -> Ctx<'a> {
        Ctx {
            snapshot,
            method,
            method_id,
            candidates: &snapshot.all,
            is_all: true,
            drawn: false,
            mask: &[],
            subset: None,
            key: &[],
            clock,
            rng,
        }
    }

    /// The data the strategy prepared for this snapshot (None for the empty initial set).
    #[inline]
    pub fn prepared<T: Any>(&self) -> Option<&'a T> {
        self.snapshot.prepared.as_ref()?.downcast_ref::<T>()
    }

    pub fn member(&self, pos: usize) -> &'a Member {
        &self.snapshot.members[pos]
    }

    /// True when no invoker's weight depends on time at this call (no warm-up in progress), so
    /// configured weights and data prepared from them are exact. Reads the clock only while some
    /// invoker is still warming up.
    #[inline]
    pub fn weights_static(&self) -> bool {
        self.snapshot.weights_static(self.clock)
    }

    /// Effective weight of a position now (Dubbo's getWeight).
    #[inline]
    pub fn weight(&self, pos: usize) -> i32 {
        let m = self.member(pos);
        if self.snapshot.known_static(self.clock) {
            // No invoker warms up: the common case stays inline in the scans that call this
            // once per candidate; the warm-up formula is out of line.
            return m.weight;
        }
        self.warming_weight(m)
    }

    #[inline(never)]
    fn warming_weight(&self, m: &Member) -> i32 {
        effective_weight(m.weight, m.start_time_ms, m.warmup_ms, self.clock.now_ms())
    }

    pub fn stats(&self, pos: usize) -> Option<&'a CallStats> {
        self.member(pos).state.methods.get(self.method_id)
    }

    pub fn active(&self, pos: usize) -> i64 {
        self.stats(pos).map_or(0, |s| s.active())
    }

    pub fn contains(&self, pos: usize) -> bool {
        self.is_all || self.mask[pos / 64] & (1u64 << (pos % 64)) != 0
    }
}
