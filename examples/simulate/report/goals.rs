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
    /// p99 ≤ bound × the better oracle's p99, at an error rate of at most `SHED_LOAD`.
    VsOracle(f64),
    /// p99 ≤ bound × random's p99, at an error rate of at most `SHED_LOAD`.
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

/// Above this error rate a p99 (of successful calls) is not comparable with the oracles' or
/// `random`'s: the failed calls were load the healthy providers did not carry (`random` fails
/// scenario 4's quarter and serves the rest at 64 % utilisation where the oracles run 85 %), so
/// a latency goal — against an oracle or against `random` — counts as not met. At 1 % the
/// lighter load hardly moves the tail.
const SHED_LOAD: f64 = 0.01;

/// The bound of the scenario's goal against the better oracle (`id` as in `Scenario::id`), if
/// it has one.
pub fn oracle_bound(id: &str) -> Option<f64> {
    GOALS.iter().find_map(|g| match g.kind {
        GoalKind::VsOracle(b) if g.scenario == id => Some(b),
        _ => None,
    })
}

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
                    r <= b && c.err <= SHED_LOAD
                }
                GoalKind::VsRandom(b) => {
                    let rnd = self.cell(sc, load, cons, "random")?;
                    c.p99 <= b * rnd.p99 && c.err <= SHED_LOAD
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{PolicySpec, RunResult};
    use crate::report::Settings;
    use crate::scenario::{build, Model};

    fn run(scenario: &str, policy: &str, p99_us: f64, failures: u64) -> RunResult {
        RunResult {
            scenario: scenario.into(),
            policy: policy.into(),
            load: 0.85,
            consumers: 1,
            seed: 1,
            duration_us: 1_000_000,
            calls: 10_000,
            ok: 10_000 - failures,
            failures,
            timeouts: 0,
            no_provider: 0,
            attempts: 10_000,
            p50_us: p99_us / 5.0,
            p99_us,
            p999_us: p99_us * 2.0,
            mean_us: p99_us / 4.0,
            cdf: Vec::new(),
            providers: Vec::new(),
            bucket_us: 1_000_000,
            hash: None,
            events: 0,
            wall_s: 0.0,
            in_flight_left: None,
        }
    }

    /// The report of one run per `(policy, p99 µs, failed calls)` on scenario `id`, and the goal
    /// named `goal`.
    fn report_of(id: &str, rows: &[(&str, f64, u64)], goal: &str) -> (Report, &'static Goal) {
        let sc = build(id, Some(1_000_000), &Model::default()).unwrap();
        let policies: Vec<PolicySpec> = rows.iter().map(|r| PolicySpec::parse(r.0)).collect();
        let runs = rows
            .iter()
            .map(|&(policy, p99, failures)| run(&sc.label(), policy, p99, failures))
            .collect();
        let report = Report::new(&[sc], &policies, runs, Settings::one_run_for_tests());
        (report, GOALS.iter().find(|g| g.name == goal).unwrap())
    }

    /// A p99 within 1.1× the oracle's counts only while the calls were carried: one that failed
    /// a quarter of them (a lighter load on the healthy providers) meets no latency goal.
    #[test]
    fn a_latency_goal_is_not_met_by_failing_calls() {
        let rows = [
            ("shedding", 4_800.0, 2_500),
            ("carrying", 5_800.0, 100),
            ("oracle-jsq", 5_400.0, 0),
            ("oracle-sed", 5_500.0, 0),
        ];
        let (report, s4) = report_of("4", &rows, "S4 p99<=1.1x");
        // 0.89× the oracle at 25 % errors: not met; 1.07× at 1 %: met.
        assert_eq!(report.goal_met(s4, "shedding"), Some((0, 1)));
        assert_eq!(report.goal_met(s4, "carrying"), Some((1, 1)));
    }

    /// "S1 ≤ 0.75× random" is a latency goal too: a p99 half random's, made of the calls left
    /// after failing half of them (`shortestresponse` with `--timeout 25` on scenario 1 at 85 %
    /// × 50 consumers: 0.73× random at 53 % errors), does not meet it.
    #[test]
    fn a_goal_against_random_is_not_met_by_failing_calls() {
        let rows = [
            ("shedding", 20_000.0, 5_000),
            ("carrying", 30_000.0, 0),
            ("random", 60_000.0, 0),
            ("oracle-jsq", 29_000.0, 0),
            ("oracle-sed", 29_500.0, 0),
        ];
        let (report, s1) = report_of("1", &rows, "S1 <=0.75x random");
        // 0.33× random at 50 % errors: not met; 0.5× without errors: met.
        assert_eq!(report.goal_met(s1, "shedding"), Some((0, 1)));
        assert_eq!(report.goal_met(s1, "carrying"), Some((1, 1)));
    }

    /// A ratio just above a goal's bound does not read as the bound: `shortestresponse` on
    /// scenario 2b at 70 % × 50 consumers, 10.841 / 8.646 ms = 1.2539×, printed "1.25x" beside
    /// "S2b p99<=1.25x: 3/4" in the default run.
    #[test]
    fn a_ratio_that_misses_the_goal_does_not_print_as_its_bound() {
        let rows = [
            ("near", 10_841.0, 0),
            ("met", 10_800.0, 0),
            ("oracle-jsq", 8_646.0, 0),
            ("oracle-sed", 10_220.0, 0),
        ];
        let (report, s2b) = report_of("2b", &rows, "S2b p99<=1.25x");
        assert_eq!(report.goal_met(s2b, "near"), Some((0, 1)));
        assert_eq!(report.goal_met(s2b, "met"), Some((1, 1)));
        let table = report.text_table();
        let row = |p: &str| {
            table
                .lines()
                .find(|l| l.starts_with(&format!("{p} ")))
                .unwrap()
                .to_string()
        };
        assert!(row("near").contains("1.254x"), "{}", row("near"));
        assert!(row("met").contains("1.25x"), "{}", row("met"));
        let md = report.markdown();
        assert!(md.contains("| near |") && md.contains("| 1.254x |"), "{md}");
    }
}
