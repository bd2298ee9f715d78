//! Random operation sequences through the Rust API, each step checked against a model of the
//! library's promises (docs/rust-api.md, docs/strategies.md, docs/abi-contract.md, the
//! header's comments, and Dubbo's behaviour for Dubbo's six: ../shared/research/dubbo-spec.md).
//!
//! Every strategy runs under a few option combinations (zone, outlier ejection, slow start,
//! `p2c.choices`, `peakewma.choices=0`, a short warm-up, few ring points), some with the
//! library's clock (`now_us` 0) mixed with the caller's ([`Clocks`]: years apart, or the
//! caller's starting from it, warm-ups running on both). A sequence is made of updates (valid
//! and invalid; ids kept, removed and re-added; weights, start times, zones and addresses
//! changed, addresses shared between ids), selects (whole set, candidates, exclusions, every
//! candidate excluded, unknown candidates and methods, keys; bursts of them reported at once;
//! through `Call` guards, finished or dropped, where the library's clock is mixed in), reports
//! (every outcome, departed and unknown ids, calls ended twice, bad methods and elapsed times),
//! provider metrics, load reports (valid and refused), reconnects, time jumps (forward, past 60 s,
//! backward) and stats. After every step:
//!
//! * a select returns a member of the current set, among its candidates less its exclusions,
//!   and within what the filters leave; or exactly the documented error;
//! * the strategy's rule holds for that pick: `roundrobin` equals Dubbo's walk (a model per
//!   method, weights by Dubbo's warm-up formula written here); `consistenthash` equals Dubbo's
//!   ring built from the call's candidates; `boundedhash` equals its bounded walk on that ring
//!   (and so never exceeds ⌈factor × average⌉ while a candidate below it exists); `maglev`
//!   equals a plain build of its table from the whole set and its scan for a candidate;
//!   `rendezvous` the candidate of the best score, written from its doc; `leastactive` picks a
//!   least-active candidate, `shortestresponse` a lowest-estimate one (its windows,
//!   as the stats show them, equal a model of Dubbo's tumbling window), `p2c` with every
//!   candidate compared one no other candidate beats after taking the call; where ties allow
//!   it, none of those (nor `random`, nor `adaptive` between two candidates before any
//!   provider metrics) picks a zero weight over a positive one;
//! * the stats are JSON whose counters (summed and per method) equal the model's, whose
//!   effective weights follow Dubbo's formula and slow-start shares a model of the ramp (who
//!   is exempt, which pick stamps it, a clock stepping back), with ejections within the budget,
//!   and `orca`'s weights are the last accepted load report's (none for a newcomer), counting
//!   only after the blackout of their run and until they lapse or a reconnect ends the run;
//! * a rejected update changes nothing: a twin balancer that never got it answers every
//!   later call alike (also the determinism of a seeded balancer);
//! * per-method isolation: a twin that sees only one method's calls picks alike for it
//!   (`roundrobin`, `consistenthash`, `boundedhash`, `maglev`, `rendezvous`: the strategies
//!   whose picks are a function of the method's own state);
//! * after every outstanding call is reported, nothing is in flight.
//!
//! `POLYLB_MODEL_SEQUENCES=<n>` runs n sequences per configuration (default 3).

#[path = "../common/mod.rs"]
mod common;
mod reference;
mod run;

use run::{run_sequence, Clocks, Totals};

/// (strategy, options, the times calls pass)
fn scenarios() -> Vec<(&'static str, String, Clocks)> {
    let mut out = Vec::new();
    let common = [
        "",
        "zone=z0",
        "warmup=30000&hash.nodes=12",
        "outlier.consecutiveFailures=2&outlier.maxEjectionPercent=40&outlier.baseEjectionMs=5000",
        "zone=z0&outlier.consecutiveFailures=1&outlier.maxEjectionPercent=50\
         &zone.minHealthyPercent=1&outlier.baseEjectionMs=20000",
        "zone=z1&outlier.failureRate=50&outlier.minRequests=3&outlier.maxEjectionPercent=100\
         &zone.minHealthyPercent=100",
    ];
    for kind in polylb::StrategyKind::ALL {
        let s = kind.name();
        for opts in common {
            out.push((s, opts.to_string(), Clocks::Caller));
        }
        out.push((s, String::new(), Clocks::LibraryFar));
        out.push((s, "warmup=30000".to_string(), Clocks::LibraryNear));
        let own: &[&str] = match s {
            "p2c" => &[
                "p2c.choices=0",
                "p2c.choices=3&zone=z0",
                "slowstart.windowMs=20000",
            ],
            "peakewma" => &[
                "peakewma.choices=0",
                "peakewma.choices=0&peakewma.preferenceMs=1000&zone=z0",
                "slowstart.windowMs=20000",
            ],
            "boundedhash" => &[
                "boundedhash.factor=1",
                "boundedhash.factor=1.5&zone=z0&hash.nodes=8",
                "slowstart.windowMs=20000",
            ],
            // A table of 7 slots refuses sets of more (LimitExceeded), and leaves candidates
            // without a slot of their own (the fallback by hash).
            "maglev" => &["maglev.tableSize=101", "maglev.tableSize=7&zone=z0"],
            "shortestresponse" => &["shortestresponse.slidePeriod=5000"],
            "adaptive" => &["timeout=50"],
            // Weights that count at once, and soon, so that reconnects end counted runs.
            "orca" => &[
                "orca.blackoutMs=0",
                "orca.blackoutMs=0&zone=z0&outlier.consecutiveFailures=2",
                "orca.blackoutMs=1000&warmup=30000",
                "orca.blackoutMs=2000&orca.expirationMs=20000",
            ],
            _ => &[],
        };
        for opts in own {
            out.push((s, opts.to_string(), Clocks::Caller));
        }
        if kind.takes_subset() {
            // Subsets of 2 and 3 of the model's few invokers, within a zone, with spill-over
            // as they are ejected.
            out.push((s, "subset.size=2&subset.key=c1".to_string(), Clocks::Caller));
            out.push((
                s,
                "subset.size=3&subset.key=consumer-2&zone=z0&outlier.consecutiveFailures=1\
                 &outlier.maxEjectionPercent=50&subset.minHealthyPercent=100"
                    .to_string(),
                Clocks::Caller,
            ));
        }
        if !kind.hashes_keys() {
            // Subsets dealt by index (load-blind strategies take these too), within a zone.
            out.push((
                s,
                "subset.size=2&subset.index=3".to_string(),
                Clocks::Caller,
            ));
            out.push((
                s,
                "subset.size=3&subset.index=1&zone=z0&outlier.consecutiveFailures=1".to_string(),
                Clocks::Caller,
            ));
        }
        if s == "p2c" || s == "roundrobin" {
            let opts = "zone=z0&outlier.consecutiveFailures=1".to_string();
            out.push((s, opts.clone(), Clocks::LibraryFar));
            out.push((s, opts, Clocks::LibraryNear));
        }
    }
    out
}

#[test]
fn random_sequences_keep_the_documented_invariants() {
    let per = std::env::var("POLYLB_MODEL_SEQUENCES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3u64);
    let mut totals = Totals::default();
    for (k, (strategy, opts, clocks)) in scenarios().into_iter().enumerate() {
        for s in 0..per {
            let seed = (k as u64) << 32 | s;
            let config = match opts.as_str() {
                "" => format!("loadbalance={strategy}&seed={seed}"),
                o => format!("loadbalance={strategy}&seed={seed}&{o}"),
            };
            totals.add(&run_sequence(&config, seed, clocks, 160));
        }
    }
    eprintln!("{totals:?}");
    // The sequences reached what the invariants are about.
    assert!(totals.picks > 1000 && totals.select_errors > 100 && totals.rejected_updates > 100);
    assert!(totals.rule_checks > 1000 && totals.twin_checks > 1000 && totals.narrowed > 100);
    assert!(totals.orca_counted > 100 && totals.orca_not_counted > 100);
    assert!(totals.reconnects_uncounting > 5);
}
