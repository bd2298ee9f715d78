//! The Balancer: an immutable snapshot of the set swapped on update, method interning, and the
//! select/report plumbing around the strategies.
//!
//! The parts: [`snapshot`] (the set a call reads), [`methods`] (method interning), [`select`]
//! (the general select path), [`short`] (the short paths of the common calls), [`excluding`]
//! (failover picks), [`call_end`] (reports), [`pin`] (the thread-local snapshot cache),
//! [`update`] (replacing the set) and [`stats_json`].

mod call_end;
mod excluding;
mod methods;
mod pin;
mod select;
mod short;
#[cfg(test)]
mod short_tests;
mod snapshot;
mod stats_json;
#[cfg(test)]
mod tests;
mod update;

pub(crate) use methods::MethodState;
pub use methods::MAX_METHODS;
#[cfg(unix)]
pub(crate) use pin::reseed_after_fork;
pub(crate) use snapshot::{IdHasher, Member, Snapshot};

use call_end::{CallEnd, END_PLAIN, END_SPREAD};
use excluding::MAX_DRAWN_EXCLUSIONS;
use methods::Methods;
use select::Call;

use crate::clock::Clock;
use crate::config::Config;
use crate::error::{Error, Status};
use crate::filter::Filter;
use crate::invoker::Outcome;
use crate::rng::RngSource;
use crate::strategy::{LoadReport, PeakEwma, Strategy, StrategyKind, WholeSetDraw};
use arc_swap::ArcSwap;
use parking_lot::Mutex;
use std::cell::Cell;
use std::sync::atomic::{
    AtomicU64, AtomicU8,
    Ordering::{Relaxed, Release},
};
use std::sync::{Arc, Weak};

// The fields every select and report read come first, in the allocation's first cache line
// (`repr(C)` keeps the order; the alignment puts the line boundary at the start): a call then
// touches one line of the balancer instead of three. They must fit in it: the assertion after
// the struct checks that `methods` (whose count every call reads) starts inside it.
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
    /// `select_by_key` over the ring applies: `consistenthash`, no filter narrowing the set.
    whole_ring: bool,
    /// `select_by_key` over the table applies: `maglev`, no filter narrowing the set.
    whole_table: bool,
    /// `select_by_key` over the scores applies: `rendezvous`, no filter narrowing the set.
    whole_scores: bool,
    /// `select_adaptive` applies: `adaptive`, no filter narrowing the set.
    adaptive_pair: bool,
    /// `select_stride` applies: `orca`, no filter narrowing the set.
    whole_stride: bool,
    /// `select_peak_pair` applies, at the start of the general path: `peakewma` that looks at
    /// pairs (its copy is `peak_ewma`).
    peak_pair: bool,
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
    /// Zone preference and outlier ejection; None when neither is configured. Boxed: a
    /// pointer, here in the first line, is what every select tests (the `Filter` inline sat
    /// 14 lines further).
    filter: Option<Box<Filter>>,
    /// Its `count` is read on every call too (`Methods` leads with it).
    methods: Methods,
    config: Config,
    strategy: Box<dyn Strategy>,
    /// `select_peak_scan` applies where `select_peak_pair` does not: `peakewma` that may look
    /// at every invoker (`PeakEwma::scans_whole_sets`). Beyond the first line: only the
    /// general path, which reads the lines below anyway, asks.
    peak_scan: bool,
    /// `peakewma`: a copy of the strategy (configuration only, so it picks as `strategy`
    /// does) for `select_peak_pair` and `select_peak_scan`, called without the virtual calls;
    /// None for the others.
    peak_ewma: Option<PeakEwma>,
    snapshot: ArcSwap<Snapshot>,
    /// Held by an update. Its sets that threads may still cache (pruned on each update), so
    /// that the balancer's drop can free what they hold.
    update_lock: Mutex<Vec<Weak<Snapshot>>>,
}

// What every call reads lies in the first cache line, `methods.count` included.
const _: () = assert!(std::mem::offset_of!(Inner, methods) + 4 <= 64);

/// A select's result in one register: the id (at most `i64::MAX`), or `-1 - status code`.
/// The general path returns it: a `Result<u64, Status>` (three fields) is returned through
/// memory, and then every short path stored its pick there too, to meet the general path's
/// result (about 10 instructions a select).
#[derive(Clone, Copy)]
struct Packed(i64);

impl Packed {
    #[inline(always)]
    fn new(result: Result<u64, Status>) -> Packed {
        Packed(match result {
            Ok(id) => id as i64,
            Err(status) => -1 - i64::from(status.code()),
        })
    }

    #[inline(always)]
    fn unpack(self) -> Result<u64, Status> {
        if self.0 >= 0 {
            Ok(self.0 as u64)
        } else {
            Err(Packed::status(self.0))
        }
    }

    #[cold]
    fn status(packed: i64) -> Status {
        Status::from_code((-1 - packed) as i32).expect("a status packed by Packed::new")
    }
}

/// A load balancer over one set of invokers. Thread-safe: share it by reference or clone it
/// (clones share everything). Unwind-safe too: a reference may cross
/// [`std::panic::catch_unwind`] as it is, and the balancer is sound to use after a panic
/// unwound through the code that held it (a [`Call`](crate::Call) dropped by the unwinding is
/// reported as failed).
#[derive(Clone)]
pub struct Balancer {
    inner: Arc<Inner>,
}

// A panic in polylb is a bug, and none is expected; should one unwind out of a call, the
// balancer is still sound to use: an update builds the next set before it publishes it (a
// panic leaves the previous one), the locks do not poison, and the rest is atomics each valid
// on its own. The C ABI relies on this already (it catches a panic and goes on with the same
// balancer). Declared so that `&Balancer` (or a struct holding one) may cross
// `std::panic::catch_unwind` without `AssertUnwindSafe`: parking_lot's locks, the strategy
// behind a `dyn`, and the per-thread counters in `UnsafeCell`s do not derive it.
impl std::panic::UnwindSafe for Balancer {}
impl std::panic::RefUnwindSafe for Balancer {}

static NEXT_UID: AtomicU64 = AtomicU64::new(1);

/// The strategy and the current set's size (`Balancer { strategy: "random", invokers: 3 }`), so
/// that a struct holding a balancer can derive `Debug`; [`Balancer::stats_json`] has the rest.
impl std::fmt::Debug for Balancer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Balancer")
            .field("strategy", &self.strategy_name())
            .field("invokers", &self.inner.snapshot.load().members.len())
            .finish()
    }
}

impl Balancer {
    /// A balancer for a config string of Dubbo URL parameters
    /// (`loadbalance=leastactive&warmup=600000`; empty = `random` with Dubbo's defaults), with
    /// an empty invoker set. A bad config is `Status::InvalidConfig` ([`Config::parse`]).
    pub fn new(config: &str) -> Result<Balancer, Error> {
        Ok(Self::build(Config::parse(config)?))
    }

    /// A balancer for a hand-built config (say [`Config::default`] with fields changed),
    /// checked as a config string is ([`Config::check`]): a field outside the range `parse`
    /// accepts, or an option that would do nothing or harm (a subset with a key-hashing
    /// strategy, `slowstart.*` with `random`, …), is `Status::InvalidConfig` naming the config
    /// key, as the same setting in a config string would be. The fields that differ from
    /// [`Config::default`] count as set.
    pub fn with_config(config: Config) -> Result<Balancer, Error> {
        config.check()?;
        Ok(Self::build(config.settled()))
    }

    fn build(config: Config) -> Balancer {
        crate::fork::install_handlers();
        let peak_ewma = (config.strategy == StrategyKind::PeakEwma).then(|| PeakEwma::new(&config));
        let strategy: Box<dyn Strategy> = match &peak_ewma {
            Some(peak_ewma) => Box::new(peak_ewma.clone()),
            None => config.strategy.build(&config),
        };
        let filter = Filter::new(&config).map(Box::new);
        // A short path of `select_short` may serve a call when no `on_select` follows the pick
        // (`peakewma`'s own, at the start of the general path, runs it).
        // Filters narrow the set only while an invoker is ejected (checked by `short_pin`) or
        // to the set's local zone (`Snapshot::local`), which every short path serves.
        let short = !strategy.tracks_selects();
        let spread_counters =
            !strategy.reads_in_flight() && !strategy.tracks_reports() && !strategy.tracks_selects();
        // `peakewma`'s short paths: not with a zone or subset preference, whose picks (from a
        // local zone) they leave to the general path (trying first cost those 10 instructions).
        let peak_short = peak_ewma
            .as_ref()
            .filter(|_| !filter.as_ref().is_some_and(|f| f.prefers()));
        let empty = Snapshot::empty();
        Balancer {
            inner: Arc::new(Inner {
                rng: RngSource::new(config.seed),
                uid: NEXT_UID.fetch_add(1, Relaxed),
                generation: AtomicU64::new(empty.generation),
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
                whole_table: short && strategy.kind() == StrategyKind::Maglev,
                whole_scores: short && strategy.kind() == StrategyKind::Rendezvous,
                adaptive_pair: short && strategy.kind() == StrategyKind::Adaptive,
                whole_stride: short && strategy.kind() == StrategyKind::Orca,
                peak_pair: peak_short.is_some_and(|p| !p.scans_whole_sets()),
                peak_scan: peak_short.is_some_and(PeakEwma::scans_whole_sets),
                counts_bypass: strategy.kind() == StrategyKind::Adaptive,
                end_path: AtomicU8::new(if spread_counters {
                    END_SPREAD
                } else {
                    END_PLAIN
                }),
                spread_counters,
                strategy,
                peak_ewma,
                config,
                snapshot: ArcSwap::from_pointee(empty),
                methods: Methods::new(),
                update_lock: Mutex::new(Vec::new()),
                filter,
            }),
        }
    }

    /// The configuration this balancer was built with.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// The strategy's config name (`random`, …, `boundedhash`), as in `loadbalance=`.
    pub fn strategy_name(&self) -> &'static str {
        self.inner.strategy.kind().name()
    }

    /// Interns a method name (the empty name is id 0, the service level).
    pub fn method(&self, name: &str) -> Result<u32, Error> {
        let _cold = crate::fork::cold_call();
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
        self.select_general(method, key, &[], &[], now_us).unpack()
    }

    /// A method's state (tests of strategies that keep state per method).
    #[cfg(test)]
    pub(crate) fn method_state_for_tests(&self, method: u32) -> Option<&MethodState> {
        self.inner.methods.get(method)
    }

    /// The current snapshot (tests of strategies that keep data in it).
    #[cfg(test)]
    pub(crate) fn snapshot_for_tests(&self) -> Arc<Snapshot> {
        self.inner.snapshot.load_full()
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
            .unpack()
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
    ) -> Packed {
        Packed::new(self.select_general_in(method, key, candidates, excluded, now_us))
    }

    #[inline]
    fn select_general_in(
        &self,
        method: u32,
        key: &[u8],
        candidates: &[u64],
        excluded: &[u64],
        now_us: i64,
    ) -> Result<u64, Status> {
        let inner = &*self.inner;
        // `peakewma`'s short path starts here, past `select_short`: there, beside the other
        // short paths and call-free, its pick (with calls of its own) made `random`'s and
        // `leastactive`'s select 4-12 instructions longer (register saves), 50 when inlined.
        if inner.peak_pair && candidates.is_empty() && excluded.is_empty() {
            if let Some(result) = inner.select_peak_pair(method, now_us) {
                return result;
            }
        } else if candidates.is_empty() && excluded.is_empty() && inner.peak_scan {
            if let Some(result) = inner.select_peak_scan(method, now_us) {
                return result;
            }
        }
        let method_state = inner.methods.get(method).ok_or(Status::UnknownMethod)?;
        let clock = Clock::new(now_us);
        let pinned;
        let (snapshot, counter, rng, hint) = match inner.pin_cached() {
            Some(pin) => (
                pin.snapshot,
                pin.counter(),
                inner.rng.on(Some(pin.rng())),
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
    // Always inline, as `select`, and the counting and learning it calls too: libpolylb.so's
    // plb_report called it, and it called `end_call_at`, each with a frame of its own.
    #[inline(always)]
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
                // The member the hint names, found once: its bounds check and address serve
                // the counters too (a position alone was checked and indexed again there).
                let hinted = pin.hint.get() as usize;
                let found = match pin.snapshot.members.get(hinted) {
                    Some(member) if member.id == id => Some((hinted, member)),
                    _ => pin.snapshot.find(id),
                };
                inner.end_call_at(pin.snapshot, found, pin.counter(), end);
            }
            None => inner.end_call_pinned(method, id, elapsed_us, outcome, now_us),
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
        // -0.0 as 0.0 (Dubbo reads a load with a minus sign as 0): a -0.0 compares equal to
        // 0.0 but is not the same bits, and the tie of two loads of 0 is a weighted coin, not
        // a win of the first candidate.
        let cpu_load = cpu_load + 0.0;
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
        words.store_report(&model);
        words.has_provider_metrics.store(true, Release);
        Ok(())
    }

    /// Feeds a provider's load report (ORCA's qps, eps and utilization, per call or out of
    /// band) for invoker `id`; used by `orca`, ignored by other strategies and for an id not in
    /// the set. The provider's load is the provider's: reports are kept per invoker, whatever
    /// method's call carried them. Errors: `InvalidArgument` for a NaN, infinite or negative
    /// number, or more errors than queries.
    pub fn report_load(&self, id: u64, report: LoadReport, now_us: i64) -> Result<(), Status> {
        let LoadReport {
            qps,
            eps,
            utilization,
        } = report;
        let valid = |x: f64| x.is_finite() && x >= 0.0;
        if !(valid(qps) && valid(eps) && valid(utilization)) || eps > qps {
            return Err(Status::InvalidArgument);
        }
        let inner = &*self.inner;
        if inner.strategy.kind() != StrategyKind::Orca {
            return Ok(());
        }
        let snapshot = inner.snapshot.load();
        let now_ms = Clock::new(now_us).now_ms();
        crate::strategy::record_load(&snapshot, id, &report, now_ms);
        Ok(())
    }

    /// Says that invoker `id`'s connection was established again (a gRPC subchannel READY
    /// after another state). Under `orca` it restarts the invoker's run of load reports, as
    /// gRFC A58 does: its weight stops counting at the next pick, and its next report starts a
    /// new blackout (`orca.blackoutMs`), for the server behind a reconnect may be a restarted,
    /// cold process. Other strategies, and an id not in the set, accept and ignore it. `now_us`
    /// (0 = the library's clock) is taken for the contract's sake: the restart does not depend
    /// on it.
    pub fn report_reconnect(&self, id: u64, now_us: i64) -> Result<(), Status> {
        let _ = now_us;
        let inner = &*self.inner;
        if inner.strategy.kind() != StrategyKind::Orca {
            return Ok(());
        }
        let snapshot = inner.snapshot.load();
        crate::strategy::restart_load(&snapshot, id);
        Ok(())
    }
}
