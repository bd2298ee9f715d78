//! `shortestresponse`: the lowest (window-average successful latency × (in flight + 1)),
//! weighted random among ties (Dubbo's ShortestResponseLoadBalance, 2.7.14+ with the window).

use super::{ties::least_by, Ctx, Report, StatsAt, Strategy, StrategyKind};
use crate::balancer::{MethodState, Snapshot};
use crate::clock::Clock;
use crate::config::Config;
use crate::error::Status;
use crate::invoker::Outcome;
use crate::stats::CallStats;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, Ordering::Relaxed};

pub(crate) struct ShortestResponse {
    slide_period_ms: i64,
}

/// When the method's current window started. Dubbo keeps one per balancer instance; polylb keeps
/// one per method, so a busy method's reset does not wipe a quiet one's only samples.
struct Window {
    started_ms: AtomicI64,
}

impl Window {
    /// The method's window, started by its first select of any kind: Dubbo's starts when its
    /// balancer is made, at the first call, also one to a single provider (a start at the first
    /// pick among two let a single provider's old samples count for another period).
    fn of<'m>(method: &'m MethodState, clock: &Clock) -> &'m Window {
        method.ext(|| Window {
            started_ms: AtomicI64::new(clock.now_ms()),
        })
    }
}

impl ShortestResponse {
    pub fn new(config: &Config) -> Self {
        ShortestResponse {
            slide_period_ms: config.slide_period_ms,
        }
    }
}

/// A window is one word, so that a success is counted whole in one window and a pick reads one
/// instant of it (two counters, read apart, mixed two windows: Dubbo's race): the successes in
/// the bits from `COUNT_SHIFT` up, the sum of their latencies (whole ms each) below.
const COUNT_SHIFT: u32 = 40;
const ELAPSED_MASK: u64 = (1 << COUNT_SHIFT) - 1;
/// A window past either bound is halved (both fields, so that their ratio, the average, stays):
/// 2^39 ms of latency or 2^23 successes, reached only by windows made very long. One call's
/// latency counts for at most `MAX_CALL_MS` (49 days), so that the 2^39 ms of headroom above
/// the bound take 128 such calls racing the halving to overflow.
const ELAPSED_BOUND: u64 = 1 << (COUNT_SHIFT - 1);
const COUNT_BOUND: u64 = 1 << (63 - COUNT_SHIFT);
const MAX_CALL_MS: u64 = 1 << 32;

/// Average successful latency in the window (whole ms, integer division as Dubbo) × (active + 1).
/// An invoker with no success in the window estimates 0 and so wins: Dubbo's documented quirk.
fn estimate(stats: Option<&CallStats>) -> i64 {
    let Some(s) = stats else { return 0 };
    let window = s.window().successes.load(Relaxed);
    let succeeded = window >> COUNT_SHIFT;
    if succeeded == 0 {
        return 0;
    }
    (((window & ELAPSED_MASK) / succeeded) as i64).saturating_mul(s.active() + 1)
}

impl Strategy for ShortestResponse {
    fn kind(&self) -> StrategyKind {
        StrategyKind::ShortestResponse
    }

    fn select(&self, ctx: &Ctx<'_>) -> Result<usize, Status> {
        let window = Window::of(ctx.method, ctx.clock);
        let pos = least_by(ctx, |pos| estimate(ctx.stats(pos)));
        // A tumbling window, reset lazily after the pick (the triggering select still saw the
        // old window, as in Dubbo). One thread wins the CAS and moves every window start.
        let now = ctx.clock.now_ms();
        let started = window.started_ms.load(Relaxed);
        if now.wrapping_sub(started) > self.slide_period_ms
            && window
                .started_ms
                .compare_exchange(started, now, Relaxed, Relaxed)
                .is_ok()
        {
            for m in ctx.snapshot.members.iter() {
                if let Some(s) = m.state.methods.get(ctx.method_id) {
                    start_window(s);
                }
            }
        }
        Ok(pos)
    }

    fn sees_single_picks(&self) -> bool {
        true
    }

    fn single_pick(&self, _snapshot: &Snapshot, method: &MethodState, clock: &Clock) {
        Window::of(method, clock);
    }

    fn on_report(&self, r: &Report<'_>) {
        if r.outcome == Outcome::Success {
            record_success(r.stats, r.elapsed_us);
        }
    }

    fn method_stats_fields(
        &self,
        stats: Option<&CallStats>,
        _weight: i32,
        _at: &StatsAt<'_>,
        out: &mut String,
    ) {
        // The window as the next pick reads it: a window past its period is reset after
        // that pick, not by the stats.
        let window = stats.map_or(0, |s| s.window().successes.load(Relaxed));
        let succeeded = window >> COUNT_SHIFT;
        let _ = write!(
            out,
            ",\"window_successes\":{},\"window_average_ms\":{},\"estimate_ms\":{}",
            succeeded,
            (window & ELAPSED_MASK).checked_div(succeeded).unwrap_or(0),
            estimate(stats)
        );
    }
}

/// Counts one success and its latency in the window, with one add.
#[inline]
fn record_success(s: &CallStats, elapsed_us: i64) {
    let ms = (elapsed_us as u64 / 1000).min(MAX_CALL_MS);
    let add = (1 << COUNT_SHIFT) | ms;
    let window = s
        .window()
        .successes
        .fetch_add(add, Relaxed)
        .wrapping_add(add);
    if window & ELAPSED_MASK >= ELAPSED_BOUND || window >> COUNT_SHIFT >= COUNT_BOUND {
        halve(s);
    }
}

#[cold]
fn halve(s: &CallStats) {
    let successes = &s.window().successes;
    let mut window = successes.load(Relaxed);
    // Another thread may have halved it (or a reset emptied it) meanwhile.
    while window & ELAPSED_MASK >= ELAPSED_BOUND || window >> COUNT_SHIFT >= COUNT_BOUND {
        let halved = (((window >> COUNT_SHIFT) / 2) << COUNT_SHIFT) | ((window & ELAPSED_MASK) / 2);
        match successes.compare_exchange_weak(window, halved, Relaxed, Relaxed) {
            Ok(_) => return,
            Err(now) => window = now,
        }
    }
}

/// Starts a new window: the successes counted so far leave it in the same instant.
fn start_window(s: &CallStats) {
    s.window().successes.store(0, Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    /// A success reported while the window is reset lands whole in one window or the other,
    /// and a pick reads one window: with every call taking 7 ms, each average read is 7 ms (or
    /// 0, a window without a success yet). With two counters, a reset or a pick reading them
    /// apart from each other mixed two windows: a count without its latency, or a latency
    /// without its count.
    #[test]
    fn a_reset_racing_reports_never_mixes_windows() {
        // Reads of windows with successes in them, made while reports go on.
        const READS: usize = 100_000;
        let s = CallStats::default();
        let stop = AtomicBool::new(false);
        let (mut read, mut mixed) = (0, Vec::new());
        std::thread::scope(|scope| {
            scope.spawn(|| {
                while !stop.load(Relaxed) {
                    record_success(&s, 7_999);
                }
            });
            while read < READS {
                start_window(&s);
                // A few reads per window, so that reports land in it between them.
                for _ in 0..32 {
                    match estimate(Some(&s)) {
                        0 => {}
                        7 => read += 1,
                        average => {
                            read += 1;
                            mixed.push(average);
                        }
                    }
                }
            }
            stop.store(true, Relaxed);
        });
        assert!(
            mixed.is_empty(),
            "{} of {READS} averages mixed windows, the first: {:?}",
            mixed.len(),
            &mixed[..mixed.len().min(8)]
        );
    }

    /// A window past its bounds is halved, its average kept; one call's latency counts for at
    /// most 49 days, so that the sum of latencies never carries into the count of successes.
    #[test]
    fn a_long_window_is_halved_and_keeps_its_average() {
        let s = CallStats::default();
        let successes = || s.window().successes.load(Relaxed) >> COUNT_SHIFT;
        for _ in 0..127 {
            record_success(&s, i64::MAX);
        }
        assert_eq!((successes(), estimate(Some(&s))), (127, MAX_CALL_MS as i64));
        // The 128th reaches 2^39 ms.
        record_success(&s, i64::MAX);
        assert_eq!((successes(), estimate(Some(&s))), (64, MAX_CALL_MS as i64));
        // One success short of the bound on successes, 5 ms each: the next one halves them.
        let n = COUNT_BOUND - 1;
        s.window()
            .successes
            .store((n << COUNT_SHIFT) | (n * 5), Relaxed);
        record_success(&s, 5_000);
        assert_eq!((successes(), estimate(Some(&s))), (COUNT_BOUND / 2, 5));
        start_window(&s);
        assert_eq!((successes(), estimate(Some(&s))), (0, 0));
    }
}
