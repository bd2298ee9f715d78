//! Inner's short paths: the common select over the whole set (or its local zone) of the thread's
//! cached snapshot, made without building the strategy's context.

use super::pin::CachedPin;
use super::select::{active_in, Call};
use super::{Inner, Packed, Snapshot};
use crate::clock::Clock;
use crate::error::Status;
use crate::filter::LocalZone;
use crate::rng::Rng;
use crate::stats::{InvokerState, NO_COUNTER};
use crate::strategy::{
    self, best_of_pair, best_of_subset_pair, Strategy, Weights, WholeSet, WholeSetDraw,
};
use std::cell::Cell;

/// A key's invoker over a whole snapshot (`select_by_key`).
type KeyPick = fn(&Snapshot, &[u8]) -> Option<usize>;
/// A key's invoker among positions (in set order, and as a bitset).
type KeyPickAmong = fn(&Snapshot, &[u8], &[u32], &[u64]) -> Option<usize>;

/// Sets from this size on have the short paths draw the thread's next pick ahead
/// (`prefetch_next_draw`): the lines a draw touches, the member's and its counters', are two per
/// invoker, and from here on they outgrow a 32 KB L1 even in a loop that does nothing else
/// (below it the extra draw cost such a loop 0.3-1 ns and saved nothing).
const DRAW_AHEAD_FROM: usize = 256;

/// The thread's generator state when `rng` is the thread's, for drawing ahead: a seeded
/// sequence is shared by every thread, so its next draw is nobody's in particular.
#[inline(always)]
fn thread_state(rng: &Rng<'_>) -> Option<u64> {
    match *rng {
        Rng::Thread(state) => Some(state.get()),
        Rng::Shared(_) => None,
    }
}

/// Makes the thread's next draw of `random` (or `leastactive`'s first) now, from a copy of its
/// generator's `state` (the generator stays as it is: the next select draws the same number),
/// and asks for the counters that draw will count on: over 1000 invokers the two dependent
/// misses of a pick (the member, then its counters) were most of what a select+report cost
/// beyond 10 invokers.
#[inline(always)]
fn prefetch_next_draw(snapshot: &Snapshot, whole: &WholeSet, state: u64) {
    let ahead = Cell::new(state);
    let next = whole.draw(snapshot.members.len(), &Rng::Thread(&ahead));
    prefetch_counters(snapshot, next);
}

/// `prefetch_next_draw` for `p2c`'s next pair.
#[inline(always)]
fn prefetch_next_pair(snapshot: &Snapshot, weights: &Weights, state: u64) {
    let ahead = Cell::new(state);
    let (first, second) = weights.pair(&Rng::Thread(&ahead));
    prefetch_counters(snapshot, first);
    if let Some(second) = second {
        prefetch_counters(snapshot, second);
    }
}

/// Asks for the line of the member's first method's counters (most services call one; the
/// member's own line came in with the load of its state).
#[inline(always)]
fn prefetch_counters(snapshot: &Snapshot, pos: usize) {
    let state: &InvokerState = &snapshot.members[pos].state;
    crate::hint::prefetch(state);
}

impl Inner {
    /// The short paths of a select over the whole set (`select_drawn`), or None for the
    /// general path.
    // Two separate tests rather than one branch: sharing one test made random's and
    // leastactive's select through the shared library about 10 instructions longer (register
    // pressure).
    #[inline(always)]
    pub(super) fn select_short(
        &self,
        method: u32,
        key: &[u8],
        now_us: i64,
    ) -> Option<Result<u64, Status>> {
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
            let (whole, among) = (strategy::ring_pick, strategy::ring_pick_among);
            if let Some(result) = self.select_by_key(method, key, whole, among) {
                return Some(result);
            }
        }
        if self.whole_table {
            let (whole, among) = (strategy::table_pick, strategy::table_pick_among);
            if let Some(result) = self.select_by_key(method, key, whole, among) {
                return Some(result);
            }
        }
        if self.whole_scores {
            let (whole, among) = (strategy::score_pick, strategy::score_pick_among);
            if let Some(result) = self.select_by_key(method, key, whole, among) {
                return Some(result);
            }
        }
        if self.adaptive_pair {
            if let Some(result) = self.select_adaptive(method, now_us) {
                return Some(result);
            }
        }
        if self.whole_stride {
            if let Some(result) = self.select_stride(method, now_us) {
                return Some(result);
            }
        }
        None
    }

    /// The common call of `peakewma`: its pick of a weighted pair over the whole set of the
    /// thread's cached snapshot (two looks, static weights, nothing ejected, no local zone),
    /// then the count and `on_select`, as the general path makes them but without its context
    /// or virtual calls. None when any of that does not hold (before anything is drawn), or
    /// with fewer than two invokers. Tried at the start of the general path, not by
    /// `select_short` (see `select_general_in`).
    #[inline(always)]
    pub(super) fn select_peak_pair(&self, method: u32, now_us: i64) -> Option<Result<u64, Status>> {
        self.select_peak::<false>(method, now_us)
    }

    /// [`Inner::select_peak_pair`] for `peakewma` configurations that look at every invoker
    /// (`peakewma.choices=0`): the full scan's pick, or the pair's over two invokers. Out of
    /// line: inlined beside the pair's, it made that one longer.
    #[inline(never)]
    pub(super) fn select_peak_scan(&self, method: u32, now_us: i64) -> Option<Result<u64, Status>> {
        self.select_peak::<true>(method, now_us)
    }

    /// `peakewma`'s short path around its pick over the whole set: the full scan's
    /// (`SCAN`) or the pair's. (A pick passed as a function was not inlined in libpolylb.so.)
    #[inline(always)]
    fn select_peak<const SCAN: bool>(
        &self,
        method: u32,
        now_us: i64,
    ) -> Option<Result<u64, Status>> {
        let pin = self.short_pin(method)?;
        let snapshot = pin.snapshot;
        if snapshot.members.len() < 2 || snapshot.local.is_some() {
            return None;
        }
        if !snapshot.weights_settled(now_us) {
            return None;
        }
        let strategy = self.peak_ewma.as_ref()?;
        let method_state = self.methods.get(method)?;
        let clock = Clock::new(now_us);
        let rng = self.rng.on(Some(pin.rng()));
        let pos = strategy.whole_set_pick::<SCAN>(snapshot, method_state, method, &clock, rng)?;
        let (member, stats, selected_before) =
            self.begin_call(snapshot, pin.counter(), Some(pin.hint), pos, method);
        strategy.on_select(
            method_state,
            method,
            &member.state,
            stats,
            selected_before,
            &clock,
        );
        Some(Ok(member.id))
    }

    /// The common call of `orca`: the next turn of the stride schedule over the thread's
    /// cached snapshot, nothing ejected, without building the strategy's context. None with a
    /// local zone or subset (whose picks are draws among it) or fewer than two invokers.
    #[inline(always)]
    fn select_stride(&self, method: u32, now_us: i64) -> Option<Result<u64, Status>> {
        let pin = self.short_pin(method)?;
        let snapshot = pin.snapshot;
        if snapshot.members.len() < 2 || snapshot.local.is_some() {
            return None;
        }
        let pos = strategy::stride_pick(snapshot, &Clock::new(now_us))?;
        Some(Ok(self.count_select(&pin, pos, method)))
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
        let positions = match &snapshot.local {
            None => &snapshot.all,
            // As the general path: a single candidate is the pick, without the strategy.
            Some(local) if local.positions.len() == 1 => {
                let pos = local.positions[0] as usize;
                let id = self.begin_bypass(snapshot, Some(pin.hint), pos, method);
                return Some(Ok(id));
            }
            Some(local) => &local.positions,
        };
        // One call site, inlined (as a closure called for either set, its prologue and
        // epilogue cost about 25 instructions a pick).
        let pos = crate::strategy::adaptive_pick(
            self.config.timeout_ms,
            snapshot,
            positions,
            method,
            &self.rng.on(Some(pin.rng())),
            Clock::new(now_us).now_ms(),
        );
        Some(Ok(self.count_select(&pin, pos, method)))
    }

    /// The common call of the key-placing strategies (`consistenthash`'s ring, `maglev`'s
    /// table, `rendezvous`' scores, which ignore load): `whole` places the key over the thread's
    /// cached snapshot, `among` over its local zone (nothing ejected), without building the
    /// strategy's context.
    /// None when any of that does not hold, or with fewer than two invokers (the general path
    /// answers those, for `consistenthash` as Dubbo does).
    #[inline(always)]
    fn select_by_key(
        &self,
        method: u32,
        key: &[u8],
        whole: KeyPick,
        among: KeyPickAmong,
    ) -> Option<Result<u64, Status>> {
        let pin = self.short_pin(method)?;
        let snapshot = pin.snapshot;
        if snapshot.members.len() < 2 {
            return None;
        }
        let pos = match &snapshot.local {
            None => whole(snapshot, key)?,
            Some(local) => among(snapshot, key, &local.positions, &local.mask)?,
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

    #[inline(always)]
    fn count_select(&self, pin: &CachedPin<'_>, pos: usize, method: u32) -> u64 {
        let (member, ..) =
            self.begin_call(pin.snapshot, pin.counter(), Some(pin.hint), pos, method);
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
        if self.rng.is_seeded() {
            let packed = self.drawn_pick_seeded::<PAIR>(&pin, method, key, now_us);
            return packed.map(Packed::unpack);
        }
        // The thread's generator, built where the compiler sees its variant, so that the draws
        // test none (`RngSource::on` chose it with a conditional move, and the draws tested it
        // again: about 6 instructions a pick).
        self.drawn_pick::<PAIR>(&pin, method, key, now_us, Rng::Thread(pin.rng()))
    }

    /// `select_drawn` for a balancer with a seeded sequence: the same pick, from it. Its
    /// result `Packed`, in registers (see `Balancer::select_general`).
    #[inline(never)]
    fn drawn_pick_seeded<const PAIR: bool>(
        &self,
        pin: &CachedPin<'_>,
        method: u32,
        key: &[u8],
        now_us: i64,
    ) -> Option<Packed> {
        let pick = self.drawn_pick::<PAIR>(pin, method, key, now_us, self.rng.on(None));
        pick.map(Packed::new)
    }

    /// `select_drawn` once it holds: the draws, from `rng`.
    #[inline(always)]
    fn drawn_pick<const PAIR: bool>(
        &self,
        pin: &CachedPin<'_>,
        method: u32,
        key: &[u8],
        now_us: i64,
        rng: Rng<'_>,
    ) -> Option<Result<u64, Status>> {
        let snapshot = pin.snapshot;
        let n = snapshot.members.len();
        if let Some(local) = &snapshot.local {
            // Without prepared data (as without the whole set's tables below), the general path.
            snapshot.prepared.as_ref()?;
            let pos = self.pick_in_zone::<PAIR>(local, snapshot, method, key, now_us, rng);
            return Some(pos.map(|pos| self.count_select(pin, pos, method)));
        }
        // The draws of `draw_from_whole_set` (or p2c's pair), written out: calling it (and
        // matching its `Drawn`) here costs about 30 more instructions per select+report
        // (random: 216 → 245 in process, 349 → 385 through the shared library).
        let pos = if PAIR {
            let weights = snapshot.pair_weights.as_deref()?;
            // The closure always inline: libpolylb.so called it, twice a pick (about 5
            // instructions a call more than its body).
            let pos = best_of_pair(
                weights,
                &snapshot.members,
                &rng,
                #[inline(always)]
                |p| active_in(snapshot, p, method),
            );
            if n >= DRAW_AHEAD_FROM {
                if let Some(state) = thread_state(&rng) {
                    prefetch_next_pair(snapshot, weights, state);
                }
            }
            pos
        } else {
            let whole = snapshot.whole_set.as_deref()?;
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
                    if n >= DRAW_AHEAD_FROM {
                        if let Some(state) = thread_state(&rng) {
                            prefetch_next_draw(snapshot, whole, state);
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
                _ => {
                    let pos = whole.draw(n, &rng);
                    if n >= DRAW_AHEAD_FROM {
                        if let Some(state) = thread_state(&rng) {
                            prefetch_next_draw(snapshot, whole, state);
                        }
                    }
                    pos
                }
            }
        };
        Some(Ok(self.count_select(pin, pos, method)))
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    /// The state a draw ahead starts from is the thread's, read and left as it was: were the
    /// generator advanced, each select of a large set would skip a number. A seeded sequence,
    /// shared by threads, gives none (its next draw is nobody's in particular).
    #[test]
    fn a_draw_ahead_starts_from_the_thread_state_and_leaves_it() {
        let state = Cell::new(0x1234_5678_9abc_def0);
        let rng = Rng::Thread(&state);
        let ahead = Cell::new(thread_state(&rng).unwrap());
        let told = Rng::Thread(&ahead).next_u64();
        assert_eq!(state.get(), 0x1234_5678_9abc_def0);
        assert_eq!(told, rng.next_u64());

        let shared = AtomicU64::new(7);
        assert_eq!(thread_state(&Rng::Shared(&shared)), None);
        assert_eq!(shared.into_inner(), 7);
    }
}
