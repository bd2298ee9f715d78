//! The goals of the issue and, per strategy, how many (load, consumers) combinations meet
//! each.

use super::Report;

/// A goal of the issue: which scenario, what is compared, and the bound.
pub struct Goal {
    pub name: &'static str,
    pub scenario: &'static str,
    pub kind: GoalKind,
}

pub enum GoalKind {
    /// p99 ≤ bound × the better oracle's p99.
    VsOracle(f64),
    /// p99 ≤ bound × random's p99.
    VsRandom(f64),
    /// error rate ≤ bound.
    ErrorRate(f64),
}

pub const GOALS: &[Goal] = &[
    Goal {
        name: "S1 p99<=1.1x oracle",
        scenario: "1",
        kind: GoalKind::VsOracle(1.1),
    },
    Goal {
        name: "S2a p99<=1.25x",
        scenario: "2a",
        kind: GoalKind::VsOracle(1.25),
    },
    Goal {
        name: "S2b p99<=1.25x",
        scenario: "2b",
        kind: GoalKind::VsOracle(1.25),
    },
    Goal {
        name: "S3 p99<=1.1x",
        scenario: "3",
        kind: GoalKind::VsOracle(1.1),
    },
    Goal {
        name: "S4 p99<=1.1x",
        scenario: "4",
        kind: GoalKind::VsOracle(1.1),
    },
    Goal {
        name: "S4 err<=0.01%",
        scenario: "4",
        kind: GoalKind::ErrorRate(0.0001),
    },
    Goal {
        name: "S1 <=0.75x random",
        scenario: "1",
        kind: GoalKind::VsRandom(0.75),
    },
    Goal {
        name: "S3 <=0.05x random",
        scenario: "3",
        kind: GoalKind::VsRandom(0.05),
    },
];

impl Report {
    /// For one goal and policy: (combos met, combos evaluated), or None when not evaluable.
    pub fn goal_met(&self, goal: &Goal, policy: &str) -> Option<(usize, usize)> {
        let sc = self.scenario(goal.scenario)?;
        let (mut met, mut total) = (0, 0);
        for (load, cons) in self.combos(sc) {
            let c = self.cell(sc, load, cons, policy)?;
            let ok = match goal.kind {
                GoalKind::VsOracle(b) => {
                    let r = self.ratio(sc, load, cons, c.p99);
                    if r.is_nan() {
                        return None;
                    }
                    r <= b
                }
                GoalKind::VsRandom(b) => {
                    let rnd = self.cell(sc, load, cons, "random")?;
                    c.p99 <= b * rnd.p99
                }
                GoalKind::ErrorRate(b) => c.err <= b,
            };
            total += 1;
            if ok {
                met += 1;
            }
        }
        (total > 0).then_some((met, total))
    }
}
