//! Oracle policies: bounds, not strategies. They read the simulated world directly — the exact
//! number of requests at every provider (summed over all consumers), which providers can
//! succeed right now, and (SED) every provider's true speed — so no client-side strategy can be
//! expected to beat them by much.
//!
//! - `oracle-jsq`: join the shortest queue among providers that can succeed.
//! - `oracle-sed`: shortest expected delay: `stall left + wait + service + extra latency`,
//!   with the provider's true current service time (slowdown, cold start). JSQ is no bound
//!   when speeds differ; SED is.

use crate::policy::{Member, Policy, ProviderMetrics};
use crate::provider::{Health, Provider};
use crate::rng::SimRng;
use polylb::Outcome;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OracleKind {
    Jsq,
    Sed,
}

impl OracleKind {
    pub fn name(self) -> &'static str {
        match self {
            OracleKind::Jsq => "oracle-jsq",
            OracleKind::Sed => "oracle-sed",
        }
    }

    pub fn from_name(name: &str) -> Option<OracleKind> {
        match name {
            "oracle-jsq" | "jsq" => Some(OracleKind::Jsq),
            "oracle-sed" | "sed" => Some(OracleKind::Sed),
            _ => None,
        }
    }
}

pub struct Oracle {
    kind: OracleKind,
    members: Vec<usize>,
    mean_cost: f64,
    rng: SimRng,
    ties: Vec<usize>,
}

impl Oracle {
    pub fn new(kind: OracleKind, mean_cost: f64, seed: u64) -> Oracle {
        Oracle {
            kind,
            members: Vec::new(),
            mean_cost,
            rng: SimRng::new(seed),
            ties: Vec::new(),
        }
    }

    fn score(&self, p: &Provider, now_us: i64) -> f64 {
        match self.kind {
            // Every request sent and not yet answered: at least what a caller counting its own
            // calls in flight knows (a request past service but still in transit is one).
            OracleKind::Jsq => p.outstanding() as f64,
            OracleKind::Sed => p.expected_delay(now_us, self.mean_cost),
        }
    }
}

fn can_succeed(p: &Provider) -> bool {
    p.health == Health::Up && p.spec.fast_fail_us.is_none()
}

impl Policy for Oracle {
    fn set_members(&mut self, members: &[Member]) {
        self.members = members.iter().map(|m| m.index).collect();
    }

    fn select(
        &mut self,
        _consumer: usize,
        _key: &[u8],
        excluded: &[usize],
        providers: &[Provider],
        now_us: i64,
    ) -> Option<usize> {
        if self.members.is_empty() {
            return None;
        }
        // Prefer providers that can succeed and were not tried; then relax each condition.
        for pass in 0..3 {
            let mut best = f64::INFINITY;
            self.ties.clear();
            for &i in &self.members {
                let p = &providers[i];
                let ok = match pass {
                    0 => can_succeed(p) && !excluded.contains(&i),
                    1 => can_succeed(p),
                    _ => true,
                };
                if !ok {
                    continue;
                }
                let s = if pass == 2 {
                    0.0
                } else {
                    self.score(p, now_us)
                };
                if s < best {
                    best = s;
                    self.ties.clear();
                    self.ties.push(i);
                } else if s == best {
                    self.ties.push(i);
                }
            }
            if !self.ties.is_empty() {
                let k = self.rng.below(self.ties.len() as u64) as usize;
                return Some(self.ties[k]);
            }
        }
        None
    }

    fn on_end(
        &mut self,
        _consumer: usize,
        _provider: usize,
        _elapsed_us: i64,
        _outcome: Outcome,
        _metrics: Option<ProviderMetrics>,
        _now_us: i64,
    ) {
    }
}
