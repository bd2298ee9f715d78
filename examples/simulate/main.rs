//! polylb's simulator: every strategy on real failure scenarios, in virtual time, through the
//! library's public Rust API (one `Balancer` per consumer). See docs/simulator.md.
//!
//! ```text
//! cargo run --release --example simulate                      # the default set (~1 min, 2 cores)
//! cargo run --release --example simulate -- --help
//! ```

mod engine;
mod oracle;
mod policy;
mod provider;
mod report;
mod rng;
mod scenario;

use engine::{PolicySpec, RunResult, RunSpec};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// Every strategy the simulator tries by default: Dubbo's six and the newer ones (skipped with a
/// notice while the library does not know them yet), then polylb's recommended configuration
/// for latency-sensitive services (`recommended`: [`engine::RECOMMENDED`]).
pub const DEFAULT_STRATEGIES: &[&str] = &[
    "random",
    "roundrobin",
    "leastactive",
    "shortestresponse",
    "consistenthash",
    "adaptive",
    "p2c",
    "peakewma",
    "boundedhash",
    "maglev",
    "rendezvous",
    "orca",
    "recommended",
];

const HELP: &str = "\
polylb simulator: compares load-balancing strategies on failure scenarios in virtual time.

USAGE: cargo run --release --example simulate -- [OPTIONS]

OPTIONS (lists are comma-separated):
  --scenarios LIST    scenario ids or names (default: all)
                        1 incident   8 providers, 5% heavy requests (20x)
                        2a slow1     one provider of 4 is +5 ms
                        2b slow2     two providers of 4 are +5 ms
                        3 gcpause    one provider of 8 stalls 500 ms every 10 s
                        4 fastfail   one provider of 4 answers errors in 1 ms
                        5 scaleout   4 warm providers, 4 cold ones join
                        6 churn      a crash and a freeze, each provider back later
                        7 hotkeys    Zipf keys, a provider removed half-way
                        8 herding    50+ consumers, providers of unequal speed
                        x1..x10      stress scenarios, run only when named
                                     (docs/simulator.md#stress-scenarios-run-only-when-named)
  --strategies LIST   strategy names, optionally with options: 'p2c&p2c.choices=4' (default:
                      random,roundrobin,leastactive,shortestresponse,consistenthash,adaptive,
                      p2c,peakewma,boundedhash,maglev,rendezvous,orca,recommended; unknown names are
                      skipped with a notice; recommended is polylb's configuration for
                      latency-sensitive services:
                      peakewma&peakewma.choices=0&peakewma.preferenceMs=1000)
  --no-oracles        do not run the oracle bounds (oracle-jsq, oracle-sed)
  --loads LIST        offered load: up to 2 a fraction of capacity, above 2 a percentage
                      (default: 0.7,0.85; 85 is 0.85)
  --consumers LIST    consumers, each with its own balancer (default: 1,50)
  --seed N            first seed (default: 1)
  --seeds K           seeds per run, seed..seed+K-1; tables show the median (default: 1)
  --duration SECS     virtual seconds per run, up to 86400 (default: per scenario, 15-30 s)
  --workers N         concurrency limit of every provider, 1 to 10000 (default: 4)
  --fleet K           K copies of each scenario's providers, faults and timeline, load
                      scaled with them (default: 1; scenario 7 is skipped)
  --service KIND      service-time distribution: lognormal (default, cv 1), lognormal:CV
                      (CV in (0, 100]), exp
  --timeout MS        client timeout per attempt, 1 to 2147483647 (default: 1000)
  --retries N         failover retries after a failure or timeout, 0-3 (default: 0)
  --jobs N            worker threads (default: available cores)
  --out DIR           report directory (default: target/simulate)
  --quiet             no progress lines
  -h, --help          this text
";

struct Args {
    scenarios: Vec<String>,
    strategies: Vec<String>,
    oracles: bool,
    loads: Vec<f64>,
    consumers: Vec<usize>,
    seed: u64,
    seeds: u64,
    duration_us: Option<i64>,
    model: scenario::Model,
    fleet: usize,
    timeout_us: i64,
    retries: u32,
    jobs: usize,
    out: PathBuf,
    quiet: bool,
}

/// The largest lognormal coefficient of variation `--service` takes.
const MAX_CV: f64 = 100.0;

/// `arg` as a POSIX shell reads it back: report.md's command can be pasted
/// (`--strategies 'p2c&p2c.choices=4'`, not a background job and a command `p2c.choices=4`).
fn shell_word(arg: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_.,:/=+@%".contains(c);
    if !arg.is_empty() && arg.chars().all(plain) {
        return arg.to_string();
    }
    format!("'{}'", arg.replace('\'', "'\\''"))
}

fn list(v: &str) -> Vec<String> {
    v.split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

/// A whole number in `range`, digits only: counts and seeds (through f64 a seed above 2^53
/// lost its low bits, and `-1` or `2.5` were cast to something else without a word).
fn whole(v: &str, what: &str, range: std::ops::RangeInclusive<u64>) -> Result<u64, String> {
    v.parse::<u64>()
        .ok()
        .filter(|n| range.contains(n))
        .ok_or_else(|| {
            format!(
                "{what}: '{v}' is not a whole number in {}..={}",
                range.start(),
                range.end()
            )
        })
}

/// A number of `unit`s in `[min, max]` (never NaN or infinite): durations and timeouts.
fn amount(v: &str, what: &str, unit: &str, min: f64, max: f64) -> Result<f64, String> {
    v.parse::<f64>()
        .ok()
        .filter(|x| (min..=max).contains(x))
        .ok_or_else(|| format!("{what}: '{v}' is not a number of {unit} in [{min}, {max}]"))
}

fn parse_args() -> Result<Args, String> {
    parse(std::env::args().skip(1))
}

/// `list` with each `all` replaced by the default names.
fn expand_all(list: Vec<String>, defaults: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    for s in list {
        if s == "all" {
            out.extend(defaults.iter().map(|d| d.to_string()));
        } else {
            out.push(s);
        }
    }
    out
}

/// An on/off flag takes no value: `--no-oracles=false` ran without oracles.
fn switch(flag: &str, inline: Option<&str>) -> Result<(), String> {
    match inline {
        None => Ok(()),
        Some(v) => Err(format!("{flag} takes no value (got '{v}')")),
    }
}

fn parse(args: impl IntoIterator<Item = String>) -> Result<Args, String> {
    let mut a = Args {
        scenarios: scenario::ALL_IDS.iter().map(|s| s.to_string()).collect(),
        strategies: DEFAULT_STRATEGIES.iter().map(|s| s.to_string()).collect(),
        oracles: true,
        loads: vec![0.7, 0.85],
        consumers: vec![1, 50],
        seed: 1,
        seeds: 1,
        duration_us: None,
        model: scenario::Model::default(),
        fleet: 1,
        timeout_us: 1_000_000,
        retries: 0,
        jobs: std::thread::available_parallelism().map_or(2, |n| n.get()),
        out: PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/simulate"),
        quiet: false,
    };
    let mut it = args.into_iter();
    while let Some(flag) = it.next() {
        let (flag, inline) = match flag.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (flag, None),
        };
        // A flag where its value should be is a value forgotten: `--out --quiet` wrote the
        // report to a directory named `--quiet` and stayed verbose, `--strategies
        // --no-oracles` ran the oracles alone. (`--out=--x` still names such a directory.)
        let mut value = || -> Result<String, String> {
            if let Some(v) = &inline {
                return Ok(v.clone());
            }
            match it.next() {
                Some(v) if v.starts_with("--") => Err(format!(
                    "{flag} needs a value, not the flag '{v}' (write {flag}={v} for a value \
                     that starts with --)"
                )),
                Some(v) => Ok(v),
                None => Err(format!("{flag} needs a value")),
            }
        };
        let num = |v: String, what: &str| -> Result<f64, String> {
            v.parse::<f64>()
                .map_err(|_| format!("{what}: '{v}' is not a number"))
        };
        match flag.as_str() {
            "-h" | "--help" => {
                print!("{HELP}");
                std::process::exit(0);
            }
            "--scenarios" | "--scenario" => {
                // `all` stands for the default set in its place: `all,x10` adds x10 to it
                // (the whole list was the default set, x10 dropped without a word).
                let v = expand_all(list(&value()?), scenario::ALL_IDS);
                // Each once, by id (`2a,slow1` ran scenario 2a twice); an unknown name is
                // kept for main's error.
                let mut ids: Vec<String> = Vec::new();
                for s in v {
                    let id = scenario::canonical_id(&s).map_or(s, str::to_string);
                    if !ids.contains(&id) {
                        ids.push(id);
                    }
                }
                a.scenarios = ids;
            }
            "--strategies" | "--strategy" => {
                let mut names: Vec<String> = Vec::new();
                for s in expand_all(list(&value()?), DEFAULT_STRATEGIES) {
                    if !names.contains(&s) {
                        names.push(s);
                    }
                }
                a.strategies = names;
            }
            "--no-oracles" => {
                switch(&flag, inline.as_deref())?;
                a.oracles = false;
            }
            "--loads" | "--load" => {
                a.loads = list(&value()?)
                    .into_iter()
                    .map(|s| {
                        // Up to 2 a fraction (0.85), above it a percentage (85).
                        let x = num(s, "--loads")?;
                        Ok(if x > 2.0 { x / 100.0 } else { x })
                    })
                    .collect::<Result<_, String>>()?;
            }
            "--consumers" => {
                a.consumers = list(&value()?)
                    .into_iter()
                    .map(|s| {
                        s.parse::<usize>().map_err(|_| {
                            format!("--consumers: '{s}' is not a whole number in 1..=100000")
                        })
                    })
                    .collect::<Result<_, String>>()?;
            }
            "--seed" => a.seed = whole(&value()?, "--seed", 0..=u64::MAX)?,
            "--seeds" => a.seeds = whole(&value()?, "--seeds", 1..=u64::MAX)?,
            // A microsecond at least (below, the run had no time at all), a virtual day at
            // most (the runs keep every call's latency: memory grows with the duration).
            "--duration" => {
                let secs = amount(&value()?, "--duration", "seconds", 1e-6, 86_400.0)?;
                a.duration_us = Some((secs * 1e6) as i64);
            }
            // A provider's thread pool: Dubbo's default is 200. (Every call of a run is made:
            // 2^32 workers made a millisecond's run billions of calls.)
            "--workers" => a.model.workers = whole(&value()?, "--workers", 1..=10_000)? as u32,
            "--fleet" => {
                let k = num(value()?, "--fleet")?;
                if !(k.fract() == 0.0 && (1.0..=1000.0).contains(&k)) {
                    return Err(format!("--fleet: {k} is not a whole number in 1..=1000"));
                }
                a.fleet = k as usize;
            }
            "--service" => {
                let v = value()?;
                match v.split_once(':') {
                    _ if v == "exp" => a.model.exponential = true,
                    _ if v == "lognormal" => a.model.exponential = false,
                    Some(("lognormal", cv)) => {
                        a.model.exponential = false;
                        a.model.cv = num(cv.to_string(), "--service lognormal:CV")?;
                        // Beyond, the lognormal's sigma overflows (an infinite cv made every
                        // service time 1 us); a cv of 100 already puts p99 below the mean.
                        if !(a.model.cv > 0.0 && a.model.cv <= MAX_CV) {
                            return Err(format!("--service: the cv must be in (0, {MAX_CV}]"));
                        }
                    }
                    _ => return Err(format!("--service: '{v}' (exp, lognormal, lognormal:CV)")),
                }
            }
            // adaptive's `timeout` is whole ms in an int32, at least 1.
            "--timeout" => {
                let ms = amount(&value()?, "--timeout", "ms", 1.0, i32::MAX.into())?;
                a.timeout_us = (ms * 1e3) as i64;
            }
            "--retries" => {
                let n = num(value()?, "--retries")?;
                if !(n.fract() == 0.0 && (0.0..=3.0).contains(&n)) {
                    return Err(format!("--retries: {n} is not a whole number in 0..=3"));
                }
                a.retries = n as u32;
            }
            "--jobs" | "-j" => a.jobs = whole(&value()?, "--jobs", 1..=65_536)? as usize,
            "--out" => a.out = PathBuf::from(value()?),
            "--quiet" | "-q" => {
                switch(&flag, inline.as_deref())?;
                a.quiet = true;
            }
            other => return Err(format!("unknown option '{other}' (see --help)")),
        }
    }
    for (list, flag) in [
        (a.loads.is_empty(), "--loads"),
        (a.consumers.is_empty(), "--consumers"),
        (a.scenarios.is_empty(), "--scenarios"),
        (a.strategies.is_empty(), "--strategies"),
    ] {
        if list {
            return Err(format!("{flag}: the list is empty"));
        }
    }
    if a.loads.iter().any(|&l| l.is_nan() || l <= 0.0 || l >= 2.0) {
        return Err(
            "--loads: each load must be in (0, 2) as a fraction, or in (2, 200) as a percentage"
                .into(),
        );
    }
    // Each load labels its columns, sections and plot files: two that read the same would
    // share them (the second plot overwriting the first).
    let mut labels = std::collections::HashSet::new();
    for &l in &a.loads {
        let label = report::load_pct(l);
        if !labels.insert(label.clone()) {
            return Err(format!(
                "--loads: {l} reads as {label} %, as another of the list does \
                 (give loads at least 0.01 % apart)"
            ));
        }
    }
    if a.consumers.iter().any(|&c| c == 0 || c > 100_000) {
        return Err("--consumers: each count must be in 1..=100000".into());
    }
    if a.seed.checked_add(a.seeds - 1).is_none() {
        return Err(format!(
            "--seeds: seeds {} to {} pass 2^64 - 1",
            a.seed,
            a.seed as u128 + a.seeds as u128 - 1
        ));
    }
    Ok(a)
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("simulate: {e}");
            std::process::exit(2);
        }
    };
    let mut scenarios = Vec::new();
    for id in &args.scenarios {
        match scenario::build(id, args.duration_us, &args.model) {
            // A scenario that cannot be copied is skipped, so `--fleet` works with the default
            // list; asked for alone, it leaves nothing to run (an error below).
            Some(s) => match s.copied(args.fleet) {
                Ok(s) => scenarios.push(s),
                Err(e) => eprintln!("notice: skipping: {e}"),
            },
            None => {
                eprintln!("simulate: unknown scenario '{id}' (see --help)");
                std::process::exit(2);
            }
        }
    }
    if scenarios.is_empty() {
        eprintln!("simulate: no scenario left to run");
        std::process::exit(2);
    }
    // Strategies the library does not know (yet) are skipped, with the library's own message.
    let mut policies: Vec<PolicySpec> = Vec::new();
    for s in &args.strategies {
        let p = PolicySpec::parse(s);
        if let PolicySpec::Library(name) = &p {
            let config = engine::library_config(name);
            let config = policy::consumer_spec(config, 0);
            if let Err(e) = polylb::Balancer::new(&format!("loadbalance={config}")) {
                eprintln!("notice: skipping strategy '{name}': {e}");
                continue;
            }
        }
        if !policies.contains(&p) {
            policies.push(p);
        }
    }
    if args.oracles {
        for k in [oracle::OracleKind::Jsq, oracle::OracleKind::Sed] {
            let p = PolicySpec::Oracle(k);
            if !policies.contains(&p) {
                policies.push(p);
            }
        }
    }
    if policies.is_empty() {
        eprintln!("simulate: no strategy to run");
        std::process::exit(2);
    }

    let mut specs: Vec<RunSpec> = Vec::new();
    for sc in &scenarios {
        for &load in &args.loads {
            let mut counts: Vec<usize> = args
                .consumers
                .iter()
                .map(|&c| c.max(sc.min_consumers))
                .collect();
            counts.sort_unstable();
            counts.dedup();
            for &consumers in &counts {
                for p in &policies {
                    for k in 0..args.seeds {
                        specs.push(RunSpec {
                            scenario: sc.clone(),
                            policy: p.clone(),
                            load,
                            consumers,
                            seed: args.seed + k,
                            timeout_us: args.timeout_us,
                            retries: args.retries,
                            buckets: 120,
                        });
                    }
                }
            }
        }
    }

    let total = specs.len();
    let cost: Vec<f64> = specs
        .iter()
        .map(|s| s.load * s.scenario.capacity_rps * s.scenario.duration_us as f64 / 1e6)
        .collect();
    let virtual_calls: f64 = cost.iter().sum();
    if !args.quiet {
        eprintln!(
            "simulate: {} runs ({} scenarios x {} policies x {} loads x consumers {:?} x {} seeds), \
             ~{:.1} M simulated calls, {} threads",
            total,
            scenarios.len(),
            policies.len(),
            args.loads.len(),
            args.consumers,
            args.seeds,
            virtual_calls / 1e6,
            args.jobs
        );
    }
    // Longest runs first: better packing on few cores.
    let mut order: Vec<usize> = (0..total).collect();
    order.sort_by(|&a, &b| cost[b].total_cmp(&cost[a]));

    let started = Instant::now();
    let specs = Arc::new(specs);
    let order = Arc::new(order);
    let next = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = mpsc::channel::<(usize, Result<RunResult, String>)>();
    let mut handles = Vec::new();
    for _ in 0..args.jobs.min(total.max(1)) {
        let (specs, order, next, tx) = (specs.clone(), order.clone(), next.clone(), tx.clone());
        handles.push(std::thread::spawn(move || loop {
            let k = next.fetch_add(1, Ordering::Relaxed);
            if k >= order.len() {
                break;
            }
            let i = order[k];
            let r = engine::run(&specs[i]);
            if tx.send((i, r)).is_err() {
                break;
            }
        }));
    }
    drop(tx);
    let mut results: Vec<Option<RunResult>> = (0..total).map(|_| None).collect();
    let mut done = 0usize;
    let mut done_cost = 0.0;
    let mut last_print = Instant::now();
    let mut rejected: Vec<String> = Vec::new();
    loop {
        match rx.recv_timeout(Duration::from_millis(500)) {
            Ok((i, r)) => {
                done += 1;
                done_cost += cost[i];
                match r {
                    Ok(r) => results[i] = Some(r),
                    Err(e) => {
                        let msg = format!("{}: {e}", specs[i].policy.label());
                        if !rejected.contains(&msg) {
                            eprintln!("notice: skipping {msg}");
                            rejected.push(msg);
                        }
                    }
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
        if !args.quiet && (last_print.elapsed() >= Duration::from_secs(3) || done == total) {
            last_print = Instant::now();
            let el = started.elapsed().as_secs_f64();
            let frac = done_cost / virtual_calls.max(1.0);
            let eta = if frac > 0.02 {
                format!("~{:.0} s left", el / frac - el)
            } else {
                "estimating".into()
            };
            eprintln!(
                "progress: {done}/{total} runs, {:.0} % of simulated calls, {el:.0} s elapsed, {eta}",
                frac * 100.0
            );
        }
        if done == total {
            break;
        }
    }
    for h in handles {
        let _ = h.join();
    }
    let results: Vec<RunResult> = results.into_iter().flatten().collect();
    // Every call has ended, so the library should count nothing in flight.
    for r in &results {
        if let Some(n) = r.in_flight_left.filter(|&n| n != 0) {
            eprintln!(
                "warning: {} on {} (load {}, {} consumers, seed {}): the library still counts {n} \
                 calls in flight after every call was reported",
                r.policy, r.scenario, r.load, r.consumers, r.seed
            );
        }
    }
    let wall = started.elapsed().as_secs_f64();
    let settings = report::Settings {
        loads: args.loads.clone(),
        consumers: args.consumers.clone(),
        seeds: args.seeds,
        seed: args.seed,
        timeout_us: args.timeout_us,
        retries: args.retries,
        wall_s: wall,
        jobs: args.jobs,
        command: std::env::args()
            .skip(1)
            .map(|arg| shell_word(&arg))
            .collect::<Vec<_>>()
            .join(" "),
    };
    let rep = report::Report::new(&scenarios, &policies, results, settings);
    print!("{}", rep.text_table());
    match rep.write_files(&args.out) {
        Ok(files) => {
            if !args.quiet {
                eprintln!(
                    "simulate: {} runs in {:.1} s; report: {}",
                    total,
                    wall,
                    files.display()
                );
            }
        }
        Err(e) => {
            eprintln!(
                "simulate: cannot write the report to {}: {e}",
                args.out.display()
            );
            std::process::exit(1);
        }
    }
}

#[cfg(test)]
mod tests {
    fn parse(args: &str) -> Result<super::Args, String> {
        super::parse(args.split_whitespace().map(String::from))
    }

    /// Numbers at and past their limits: a clear error naming the flag, never a run that
    /// silently does something else (a duration of 0 or NaN ran nothing, one of `inf` aborted
    /// on a 4e17-byte allocation, a seed went through f64 and lost its low bits).
    #[test]
    fn numbers_past_their_limits_are_errors() {
        let a = parse("--duration 0.5 --timeout 1 --seed 18446744073709551615 --seeds 1").unwrap();
        assert_eq!((a.duration_us, a.timeout_us), (Some(500_000), 1000));
        assert_eq!(a.seed, u64::MAX);
        let a = parse("--duration 86400 --timeout 2147483647 --seed 9007199254740993").unwrap();
        assert_eq!(a.duration_us, Some(86_400_000_000));
        assert_eq!(a.timeout_us, 2_147_483_647_000);
        assert_eq!(
            a.seed, 9_007_199_254_740_993,
            "2^53 + 1, not rounded through f64"
        );
        let a = parse("--workers 4 --jobs 2 --seeds 3").unwrap();
        assert_eq!((a.model.workers, a.jobs, a.seeds), (4, 2, 3));
        for (args, error) in [
            (
                "--duration 0",
                "--duration: '0' is not a number of seconds in [0.000001, 86400]",
            ),
            (
                "--duration -1",
                "--duration: '-1' is not a number of seconds in [0.000001, 86400]",
            ),
            (
                "--duration nan",
                "--duration: 'nan' is not a number of seconds in [0.000001, 86400]",
            ),
            (
                "--duration inf",
                "--duration: 'inf' is not a number of seconds in [0.000001, 86400]",
            ),
            (
                "--duration 1e300",
                "--duration: '1e300' is not a number of seconds in [0.000001, 86400]",
            ),
            (
                "--duration 1e-7",
                "--duration: '1e-7' is not a number of seconds in [0.000001, 86400]",
            ),
            (
                "--timeout 0.5",
                "--timeout: '0.5' is not a number of ms in [1, 2147483647]",
            ),
            (
                "--timeout -1",
                "--timeout: '-1' is not a number of ms in [1, 2147483647]",
            ),
            (
                "--timeout nan",
                "--timeout: 'nan' is not a number of ms in [1, 2147483647]",
            ),
            (
                "--timeout 2147483648",
                "--timeout: '2147483648' is not a number of ms in [1, 2147483647]",
            ),
            (
                "--seed -1",
                "--seed: '-1' is not a whole number in 0..=18446744073709551615",
            ),
            (
                "--seed 1.5",
                "--seed: '1.5' is not a whole number in 0..=18446744073709551615",
            ),
            (
                "--seed 1e3",
                "--seed: '1e3' is not a whole number in 0..=18446744073709551615",
            ),
            (
                "--seeds 0",
                "--seeds: '0' is not a whole number in 1..=18446744073709551615",
            ),
            (
                "--workers 0",
                "--workers: '0' is not a whole number in 1..=10000",
            ),
            (
                "--workers 2.5",
                "--workers: '2.5' is not a whole number in 1..=10000",
            ),
            (
                "--workers 4294967295",
                "--workers: '4294967295' is not a whole number in 1..=10000",
            ),
            (
                "--service lognormal:inf",
                "--service: the cv must be in (0, 100]",
            ),
            (
                "--service lognormal:1e200",
                "--service: the cv must be in (0, 100]",
            ),
            (
                "--service lognormal:0",
                "--service: the cv must be in (0, 100]",
            ),
            ("--loads ,", "--loads: the list is empty"),
            ("--consumers ,", "--consumers: the list is empty"),
            ("--scenarios ,", "--scenarios: the list is empty"),
            ("--strategies ,", "--strategies: the list is empty"),
            (
                "--consumers abc",
                "--consumers: 'abc' is not a whole number in 1..=100000",
            ),
            (
                "--loads 200",
                "--loads: each load must be in (0, 2) as a fraction, or in (2, 200) as a \
                 percentage",
            ),
            (
                "--jobs -1",
                "--jobs: '-1' is not a whole number in 1..=65536",
            ),
            (
                "--seed 18446744073709551615 --seeds 2",
                "--seeds: seeds 18446744073709551615 to 18446744073709551616 pass 2^64 - 1",
            ),
        ] {
            assert_eq!(parse(args).err().as_deref(), Some(error), "{args}");
        }
    }
    #[test]
    fn a_scenario_named_twice_runs_once() {
        let a = parse("--scenarios 2a,slow1,incident,1,x1,hetero").unwrap();
        assert_eq!(a.scenarios, ["2a", "1", "x1"]);
        let a = parse("--scenarios 3,nosuch").unwrap();
        assert_eq!(
            a.scenarios,
            ["3", "nosuch"],
            "an unknown one is main's error"
        );
    }

    /// `all` is the default set in its place, beside the names around it: `all,x10` ran the
    /// default scenarios without x10, `all,p2c&p2c.choices=4` the defaults without the variant.
    #[test]
    fn all_in_a_list_keeps_the_names_beside_it() {
        let a = parse("--scenarios all,x10,3").unwrap();
        let mut want: Vec<&str> = super::scenario::ALL_IDS.to_vec();
        want.push("x10");
        assert_eq!(a.scenarios, want);
        let a = parse("--strategies p2c&p2c.choices=4,all,random").unwrap();
        let mut want = vec!["p2c&p2c.choices=4"];
        want.extend(super::DEFAULT_STRATEGIES);
        assert_eq!(a.strategies, want);
    }

    /// The on/off flags refuse a value: `--no-oracles=false` ran without oracles.
    #[test]
    fn switches_take_no_value() {
        assert!(!parse("--no-oracles").unwrap().oracles);
        assert!(parse("--quiet").unwrap().quiet);
        for (args, error) in [
            (
                "--no-oracles=false",
                "--no-oracles takes no value (got 'false')",
            ),
            ("--quiet=no", "--quiet takes no value (got 'no')"),
        ] {
            assert_eq!(parse(args).err().as_deref(), Some(error), "{args}");
        }
    }

    /// A value left out takes no flag for it: `--out --quiet` wrote the report to
    /// `./--quiet` and printed progress, exit 0.
    #[test]
    fn a_flag_is_not_the_value_of_the_one_before() {
        for (args, error) in [
            (
                "--out --quiet",
                "--out needs a value, not the flag '--quiet' (write --out=--quiet for a value \
                 that starts with --)",
            ),
            (
                "--strategies --no-oracles",
                "--strategies needs a value, not the flag '--no-oracles' (write \
                 --strategies=--no-oracles for a value that starts with --)",
            ),
            ("--seed", "--seed needs a value"),
        ] {
            assert_eq!(parse(args).err().as_deref(), Some(error), "{args}");
        }
        assert_eq!(
            parse("--out=--x").unwrap().out,
            std::path::PathBuf::from("--x")
        );
        assert_eq!(parse("--seed 7 --loads -0.5").err().as_deref(), Some(
            "--loads: each load must be in (0, 2) as a fraction, or in (2, 200) as a percentage"
        ));
    }

    /// report.md's command reads back as the arguments it was given, in a POSIX shell.
    #[test]
    fn the_recorded_command_can_be_pasted() {
        use super::shell_word;
        assert_eq!(shell_word("--loads"), "--loads");
        assert_eq!(shell_word("0.7,85"), "0.7,85");
        assert_eq!(shell_word("p2c&p2c.choices=4"), "'p2c&p2c.choices=4'");
        assert_eq!(shell_word("it's"), "'it'\\''s'");
        assert_eq!(shell_word(""), "''");
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!(
                "printf '%s\\n' {}",
                ["a&b", "it's", "", "$HOME", "x y"]
                    .map(shell_word)
                    .join(" ")
            ))
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "a&b\nit's\n\n$HOME\nx y\n"
        );
    }

    /// Loads label their columns, report sections and plot files to 0.01 %: two that read the
    /// same are an error (0.70 and 0.704 once shared a label, and the second plot overwrote the
    /// first); others read as given.
    #[test]
    fn loads_that_would_share_a_label_are_an_error() {
        let a = parse("--loads 0.7,0.704,85,0.8501").unwrap();
        let labels: Vec<String> = a
            .loads
            .iter()
            .map(|&l| crate::report::load_pct(l))
            .collect();
        assert_eq!(labels, ["70", "70.4", "85", "85.01"]);
        for (args, error) in [
            (
                "--loads 0.7,0.70001",
                "--loads: 0.70001 reads as 70 %, as another of the list does (give loads at least 0.01 % apart)",
            ),
            (
                "--loads 85,0.85",
                "--loads: 0.85 reads as 85 %, as another of the list does (give loads at least 0.01 % apart)",
            ),
        ] {
            assert_eq!(parse(args).err().as_deref(), Some(error), "{args}");
        }
    }

    /// The flags of a text: every `--name` in it.
    fn flags(text: &str) -> std::collections::BTreeSet<&str> {
        text.match_indices("--")
            .map(|(at, _)| {
                let rest = &text[at..];
                let end = 2 + rest[2..]
                    .find(|c: char| !c.is_ascii_lowercase() && c != '-')
                    .unwrap_or(rest.len() - 2);
                &rest[..end]
            })
            .filter(|f| f.len() > 2 && !f[2..].starts_with('-'))
            .collect()
    }

    /// `recommended` runs the configuration docs/simulator.md recommends (its code block under
    /// "Recommended default"), the library accepts it, and the default run includes it.
    #[test]
    fn recommended_is_the_documented_configuration() {
        let doc =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/simulator.md"))
                .unwrap();
        let section = &doc[doc
            .find("\n## Recommended default for latency-sensitive services\n")
            .expect("the recommendation's section")..];
        let block = section
            .split("```text\n")
            .nth(1)
            .and_then(|b| b.split("\n```").next())
            .expect("a text block in the recommendation's section");
        assert_eq!(
            block.trim(),
            format!("loadbalance={}", crate::engine::RECOMMENDED)
        );
        assert_eq!(
            crate::engine::library_config("recommended"),
            crate::engine::RECOMMENDED
        );
        assert_eq!(crate::engine::library_config("p2c"), "p2c");
        polylb::Balancer::new(&format!("loadbalance={}", crate::engine::RECOMMENDED))
            .expect("the library accepts the recommended configuration");
        assert!(super::DEFAULT_STRATEGIES.contains(&"recommended"));
    }

    /// docs/simulator.md's flag table lists exactly the flags of `--help`.
    #[test]
    fn the_docs_flag_table_is_the_help() {
        let doc =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/simulator.md"))
                .unwrap();
        let table: String = doc[doc.find("\n## Flags\n").expect("a Flags section")..]
            .lines()
            .skip_while(|l| !l.starts_with('|'))
            .take_while(|l| l.starts_with('|'))
            .filter_map(|l| l.split('|').nth(1))
            .collect();
        let help: String = super::HELP
            .lines()
            .filter(|l| l.trim_start().starts_with('-'))
            .filter_map(|l| l.split("  ").find(|s| !s.is_empty()))
            .collect::<Vec<_>>()
            .join(" ");
        let mut help = flags(&help);
        help.remove("--help"); // the doc shows it in the command above the table
        assert_eq!(
            flags(&table),
            help,
            "docs/simulator.md's Flags table against --help"
        );
    }
}
