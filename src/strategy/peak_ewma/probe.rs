//! Probes: an idle invoker that looks slow gets one call (claimed by one thread) once its last
//! sample is old enough, so that its recovery can be seen; the wait doubles while probes find
//! it still slow.

use super::look::Look;
use super::{stamp_since_step, PeakEwma};
use crate::balancer::Member;
use crate::stats::EwmaCell;
use crate::strategy::Ctx;
use std::sync::atomic::Ordering::Relaxed;

impl PeakEwma {
    /// The first wait before probing an invoker that looks slow: twice the typical latency
    /// (a stall that just ended is retried at once), clamped to [decay / 1000, decay].
    fn first_gap(&self, typical: f64) -> i64 {
        ((2.0 * typical) as i64).clamp(self.probe_min_us, self.probe_max_us)
    }

    /// An idle invoker that looks slow is probed once its last sample (or probe) is older than
    /// the current gap: twice the method's typical latency for the first two probes, then
    /// doubling at each claim while probes find it still slow (up to decay), back to the start
    /// when a sample shows recovery.
    pub(super) fn probe_due(&self, cell: &EwmaCell, typical: f64, now_us: i64) -> Option<i64> {
        let probed = stamp_since_step(&cell.probed_us, now_us, now_us);
        let last = stamp_since_step(&cell.sampled_us, now_us, now_us).max(probed);
        let gap = match cell.probe_gap_us.load(Relaxed) {
            0 => self.first_gap(typical),
            g => g,
        };
        (now_us.saturating_sub(last) > gap).then_some(probed)
    }

    /// One thread wins the probe; the next one waits twice as long.
    #[inline]
    pub(super) fn claim_probe(
        &self,
        ctx: &Ctx<'_>,
        look: &Look,
        now_us: i64,
        typical: f64,
    ) -> bool {
        self.claim_probe_in(&ctx.snapshot.members, ctx.method_id, look, now_us, typical)
    }

    /// [`PeakEwma::claim_probe`] of a look at one of `members`, for method `method_id`.
    #[inline(always)]
    pub(super) fn claim_probe_in(
        &self,
        members: &[Member],
        method_id: u32,
        look: &Look,
        now_us: i64,
        typical: f64,
    ) -> bool {
        // Almost every look has no probe due: decide that without a call.
        match look.probe {
            None => false,
            Some(probed) => {
                self.claim_due_probe(members, method_id, look.pos, probed, now_us, typical)
            }
        }
    }

    #[inline(never)]
    fn claim_due_probe(
        &self,
        members: &[Member],
        method_id: u32,
        pos: usize,
        probed: i64,
        now_us: i64,
        typical: f64,
    ) -> bool {
        let Some(stats) = members[pos].state.methods.get(method_id) else {
            return false;
        };
        let cell = stats.ewma();
        if cell
            .probed_us
            .compare_exchange(probed, now_us, Relaxed, Relaxed)
            .is_err()
        {
            return false;
        }
        let gap = match cell.probe_gap_us.load(Relaxed) {
            0 => self.first_gap(typical),
            g => (g.saturating_mul(2)).min(self.probe_max_us),
        };
        cell.probe_gap_us.store(gap, Relaxed);
        true
    }
}
