//! roundrobin against an independent model of Dubbo's RoundRobinLoadBalance, over long random
//! operation sequences through the Rust API: several methods (one past the live-period slots),
//! updates that remove invokers and bring them back exactly 60,000 / 60,001 ms after the last
//! select that stamped them (and much later), updates with no select between them, weight
//! changes, a router's candidates (repeated and varying), failover exclusions, the empty set,
//! warm-up, caller times in µs stepping back by more than a second, the library clock mixed in,
//! and a zone with local and remote invokers. Every pick is compared.
//!
//! The model is `tests/common`'s `DubboRoundRobin` (research/dubbo-spec.md §3), one per
//! method: a map of id → (weight, current, lastUpdate ms); a select walks the list in order, a
//! changed weight resets current, current += weight, lastUpdate = now, the first maximum wins;
//! when the map holds more entries than the list, entries with now − lastUpdate > 60000 go; the
//! winner's current −= total; a list of one is returned untouched.
//!
//! The library clock (`now_us` 0) is read by polylb at an instant the test cannot know to the
//! millisecond: such a select keeps every model state that a time between the readings before
//! and after it would give and that picks as polylb did.
//!
//! `POLYLB_RR_DIFF_SEEDS=<n>` runs n seeds per configuration (default 4),
//! `POLYLB_RR_DIFF_STEPS=<n>` steps per sequence (default 3000).

mod common;

use common::{recycle_edges, DubboRoundRobin, SplitMix as Rng};
use polylb::{wall_clock_us, Balancer, Invoker, Status};
use std::collections::BTreeMap;

#[derive(Clone, Debug, PartialEq)]
struct Inv {
    id: u64,
    weight: i32,
    start_ms: i64,
    warmup_ms: i32,
    /// Some(true): the consumer's zone; Some(false): another; None: no zone.
    local: Option<bool>,
}

impl Inv {
    fn invoker(&self) -> Invoker {
        let mut i = Invoker::new(self.id, format!("10.1.0.{}:20880", self.id))
            .weight(self.weight)
            .start_time_ms(self.start_ms)
            .warmup_ms(self.warmup_ms);
        if let Some(l) = self.local {
            i = i.zone(if l { "near" } else { "far" });
        }
        i
    }

    /// Dubbo's getWeight (spec §1), written here.
    fn dubbo_weight(&self, default_warmup: i32, now_ms: i64) -> i32 {
        let w = self.weight;
        if w > 0 && self.start_ms > 0 {
            let uptime = now_ms - self.start_ms;
            if uptime < 0 {
                return 1;
            }
            let warmup = if self.warmup_ms < 0 {
                default_warmup
            } else {
                self.warmup_ms
            };
            if uptime > 0 && uptime < warmup as i64 {
                let ww = (uptime as f32 / (warmup as f32 / w as f32)) as i32;
                return if ww < 1 { 1 } else { ww.min(w) };
            }
        }
        w.max(0)
    }
}

/// Dubbo's RoundRobinLoadBalance, one per method.
#[derive(Clone, Debug, PartialEq, Default)]
struct Dubbo {
    methods: BTreeMap<u32, DubboRoundRobin>,
}

impl Dubbo {
    fn select(&mut self, method: u32, list: &[(u64, i32)], now_ms: i64) -> u64 {
        self.methods
            .entry(method)
            .or_default()
            .select(list, now_ms, false)
    }
}

#[derive(Clone, Debug)]
enum Op {
    Update(Vec<Inv>),
    /// `t_us` 0: the library's clock.
    Select {
        method: usize,
        cands: Vec<u64>,
        excl: Vec<u64>,
        t_us: i64,
    },
}

#[derive(Clone, Copy, Debug)]
struct Cfg {
    zoned: bool,
    warmup: bool,
    /// 0: small weights (short periods), 1: large with gcd 1 (tournament), 2: few classes.
    weights: u8,
    library: bool,
}

impl Cfg {
    fn config(&self) -> String {
        let mut s = "loadbalance=roundrobin".to_string();
        if self.zoned {
            s.push_str("&zone=near");
        }
        if self.warmup {
            s.push_str("&warmup=20000");
        }
        s
    }
    fn default_warmup(&self) -> i32 {
        if self.warmup {
            20_000
        } else {
            600_000
        }
    }
}

const IDS: u64 = 9;

/// Makes (or keeps, mostly) the invoker of an id for a new set.
type NewInv<'a> = dyn FnMut(&mut Rng, u64, i64, &mut BTreeMap<u64, Inv>) -> Inv + 'a;

fn gen_weight(cfg: &Cfg, rng: &mut Rng) -> i32 {
    if rng.chance(60) {
        return 0;
    }
    match cfg.weights {
        0 => 1 + rng.below(6) as i32,
        1 => 100_000 + rng.below(100_000) as i32,
        _ => [100, 200, 300, 50][rng.below(4) as usize],
    }
}

/// A random sequence of operations. Times: the caller's, from `base_us`.
fn generate(cfg: &Cfg, seed: u64, steps: usize, base_us: i64) -> Vec<Op> {
    let mut rng = Rng(seed);
    let mut ops = Vec::new();
    let mut now_us = base_us;
    // The last caller time (ms) at which each method selected.
    let mut last_sel: [Option<i64>; 4] = [None; 4];
    let mut set: Vec<Inv> = Vec::new();
    let mut known: BTreeMap<u64, Inv> = BTreeMap::new();
    let mut router: Vec<u64> = Vec::new();
    let mut new_inv = |rng: &mut Rng, id: u64, now_us: i64, known: &mut BTreeMap<u64, Inv>| {
        let keep = known.get(&id).cloned().filter(|_| rng.chance(700));
        let inv = match keep {
            Some(i) => i,
            None => {
                let now_ms = now_us / 1000;
                let start_ms = if cfg.warmup && rng.chance(500) {
                    match rng.below(4) {
                        0 => now_ms + rng.below(3_000) as i64, // skew: weight 1
                        _ => now_ms - rng.below(25_000) as i64,
                    }
                } else {
                    0
                };
                let warmup_ms = if rng.chance(200) { 5_000 } else { -1 };
                let local = if cfg.zoned {
                    match rng.below(5) {
                        0 => None,
                        1 | 2 => Some(false),
                        _ => Some(true),
                    }
                } else {
                    None
                };
                Inv {
                    id,
                    weight: gen_weight(cfg, rng),
                    start_ms,
                    warmup_ms,
                    local,
                }
            }
        };
        known.insert(id, inv.clone());
        inv
    };
    let random_set = |rng: &mut Rng,
                      now_us: i64,
                      set: &[Inv],
                      known: &mut BTreeMap<u64, Inv>,
                      new_inv: &mut NewInv|
     -> Vec<Inv> {
        let mut out = Vec::new();
        for id in 1..=IDS {
            let present = set.iter().any(|i| i.id == id);
            let stays = if present {
                rng.chance(800)
            } else {
                rng.chance(350)
            };
            if stays {
                out.push(new_inv(rng, id, now_us, known));
            }
        }
        if rng.chance(300) {
            // A different order of the list (the registry's).
            let k = rng.below(out.len().max(1) as u64) as usize;
            out.rotate_left(k);
        }
        out
    };
    set = random_set(&mut rng, now_us, &set, &mut known, &mut new_inv);
    ops.push(Op::Update(set.clone()));
    let select = |rng: &mut Rng,
                  ops: &mut Vec<Op>,
                  method: usize,
                  cands: Vec<u64>,
                  excl: Vec<u64>,
                  now_us: i64,
                  last_sel: &mut [Option<i64>; 4]| {
        let library = cfg.library && rng.chance(80);
        if !library {
            last_sel[method] = Some(now_us.div_euclid(1000));
        }
        ops.push(Op::Select {
            method,
            cands,
            excl,
            t_us: if library { 0 } else { now_us },
        });
    };
    let ids_of = |set: &[Inv]| set.iter().map(|i| i.id).collect::<Vec<u64>>();
    for _ in 0..steps {
        let method = match rng.below(10) {
            0..=4 => 0,
            5..=7 => 1,
            8 => 2,
            _ => 3,
        };
        match rng.below(100) {
            0..=39 => {
                for _ in 0..1 + rng.below(12) {
                    select(
                        &mut rng,
                        &mut ops,
                        method,
                        vec![],
                        vec![],
                        now_us,
                        &mut last_sel,
                    );
                    now_us += rng.below(1_500) as i64;
                }
            }
            40..=51 => {
                // A router's candidates: often the same as last time.
                if router.is_empty() || rng.chance(250) {
                    let ids = ids_of(&set);
                    router = ids.into_iter().filter(|_| rng.chance(600)).collect();
                }
                let present: Vec<u64> = router
                    .iter()
                    .copied()
                    .filter(|id| set.iter().any(|i| i.id == *id))
                    .collect();
                if !present.is_empty() {
                    for _ in 0..1 + rng.below(6) {
                        select(
                            &mut rng,
                            &mut ops,
                            method,
                            present.clone(),
                            vec![],
                            now_us,
                            &mut last_sel,
                        );
                        now_us += rng.below(800) as i64;
                    }
                }
            }
            52..=59 => {
                // A failover: exclusions of earlier tries, over the set or a router's list.
                let ids = ids_of(&set);
                if !ids.is_empty() {
                    let mut excl = Vec::new();
                    for _ in 0..1 + rng.below(3) {
                        excl.push(ids[rng.below(ids.len() as u64) as usize]);
                    }
                    if rng.chance(150) {
                        excl.push(IDS + 5); // not in the set
                    }
                    let cands = if rng.chance(300) {
                        router
                            .iter()
                            .copied()
                            .filter(|id| set.iter().any(|i| i.id == *id))
                            .collect()
                    } else {
                        vec![]
                    };
                    select(
                        &mut rng,
                        &mut ops,
                        method,
                        cands,
                        excl,
                        now_us,
                        &mut last_sel,
                    );
                }
            }
            60..=69 => {
                // Membership and weight churn; sometimes a second update with no select.
                for _ in 0..1 + u64::from(rng.chance(300)) + u64::from(rng.chance(100)) {
                    set = random_set(&mut rng, now_us, &set, &mut known, &mut new_inv);
                    ops.push(Op::Update(set.clone()));
                }
            }
            70..=72 => {
                // A weight changed and changed back before any select.
                if !set.is_empty() {
                    let mut changed = set.clone();
                    let k = rng.below(changed.len() as u64) as usize;
                    changed[k].weight = gen_weight(cfg, &mut rng);
                    ops.push(Op::Update(changed));
                    ops.push(Op::Update(set.clone()));
                }
            }
            73..=74 => {
                // The same set pushed again.
                ops.push(Op::Update(set.clone()));
            }
            75..=76 => {
                // Empty, then the set again (or another).
                ops.push(Op::Update(vec![]));
                if rng.chance(300) {
                    select(
                        &mut rng,
                        &mut ops,
                        method,
                        vec![],
                        vec![],
                        now_us,
                        &mut last_sel,
                    );
                }
                if rng.chance(300) {
                    now_us += 60_000_000 + rng.below(2_000_000) as i64;
                }
                if rng.chance(500) {
                    set = random_set(&mut rng, now_us, &set, &mut known, &mut new_inv);
                }
                ops.push(Op::Update(set.clone()));
            }
            77..=84 => {
                // Some invokers leave; a select lands exactly around 60 s after the last one
                // that stamped them; they may come back before or after it.
                if let Some(t) = last_sel[method] {
                    let leaving: Vec<u64> = ids_of(&set)
                        .into_iter()
                        .filter(|_| rng.chance(400))
                        .collect();
                    let before = set.clone();
                    set.retain(|i| !leaving.contains(&i.id));
                    ops.push(Op::Update(set.clone()));
                    let delta_ms =
                        [59_999, 60_000, 60_000, 60_001, 60_001, 60_002][rng.below(6) as usize];
                    let target_us = (t + delta_ms) * 1000 + rng.below(1000) as i64;
                    let back_first = rng.chance(300);
                    if back_first {
                        set = before.clone();
                        ops.push(Op::Update(set.clone()));
                    }
                    if target_us > now_us || rng.chance(200) {
                        now_us = target_us;
                    }
                    let other = if rng.chance(300) {
                        rng.below(4) as usize
                    } else {
                        method
                    };
                    for _ in 0..1 + rng.below(3) {
                        select(
                            &mut rng,
                            &mut ops,
                            other,
                            vec![],
                            vec![],
                            now_us,
                            &mut last_sel,
                        );
                    }
                    if !back_first && rng.chance(600) {
                        set = before;
                        ops.push(Op::Update(set.clone()));
                        for _ in 0..1 + rng.below(3) {
                            select(
                                &mut rng,
                                &mut ops,
                                method,
                                vec![],
                                vec![],
                                now_us,
                                &mut last_sel,
                            );
                        }
                    }
                }
            }
            85..=89 => now_us += rng.below(5_000) as i64,
            90..=92 => now_us += 61_000_000 + rng.below(600_000_000) as i64,
            93..=95 => now_us -= 1_000_001 + rng.below(70_000_000) as i64,
            96 => now_us += 60_000_000,
            _ => now_us += rng.below(30_000_000) as i64,
        }
    }
    ops
}

struct Outcome {
    picks: u64,
    /// Picks where an invoker of the list weighed less than configured (warm-up), where the
    /// zone narrowed the list, and among candidates or with exclusions.
    warming: u64,
    zoned: u64,
    among: u64,
    /// Whole-list picks narrowed to the zone while an invoker there warms up (served by the
    /// zone's warm-up tournament, not by a walk).
    zoned_warming: u64,
    library_picks: u64,
    max_models: usize,
}

/// Runs `ops` against a fresh balancer and the model; Err(index, message) at the first pick
/// that no model state allows.
fn execute(cfg: &Cfg, ops: &[Op]) -> Result<Outcome, (usize, String)> {
    let b = Balancer::new(&cfg.config()).unwrap();
    let mut methods = vec![
        b.method("").unwrap(),
        b.method("sayHello").unwrap(),
        b.method("other").unwrap(),
    ];
    let mut high = 0;
    for k in 0..140 {
        high = b.method(&format!("filler{k}")).unwrap();
    }
    assert!(high >= 128);
    methods.push(high);
    let mut models = vec![Dubbo::default()];
    let mut set: Vec<Inv> = Vec::new();
    let mut out = Outcome {
        picks: 0,
        warming: 0,
        zoned: 0,
        among: 0,
        zoned_warming: 0,
        library_picks: 0,
        max_models: 1,
    };
    for (k, op) in ops.iter().enumerate() {
        match op {
            Op::Update(s) => {
                let invokers: Vec<Invoker> = s.iter().map(Inv::invoker).collect();
                b.update(&invokers).unwrap();
                set = s.clone();
            }
            Op::Select {
                method,
                cands,
                excl,
                t_us,
            } => {
                let cands: Vec<u64> = cands
                    .iter()
                    .copied()
                    .filter(|id| set.iter().any(|i| i.id == *id))
                    .collect();
                if let Op::Select { cands: c, .. } = op {
                    if !c.is_empty() && cands.is_empty() {
                        continue;
                    }
                }
                let m = methods[*method];
                let before_us = if *t_us == 0 { wall_clock_us() } else { *t_us };
                let got = b.select_among(m, b"", &cands, excl, *t_us);
                let after_us = if *t_us == 0 { wall_clock_us() } else { *t_us };
                // Dubbo's list: the set in order, among the candidates, less the exclusions,
                // narrowed to the local zone.
                let allowed: Vec<&Inv> = set
                    .iter()
                    .filter(|i| cands.is_empty() || cands.contains(&i.id))
                    .filter(|i| !excl.contains(&i.id))
                    .collect();
                let allowed_len = allowed.len();
                let narrowed: Vec<&Inv> = if cfg.zoned {
                    let local: Vec<&Inv> = allowed
                        .iter()
                        .copied()
                        .filter(|i| i.local == Some(true))
                        .collect();
                    let drained = !local.is_empty()
                        && local.iter().all(|i| i.weight <= 0)
                        && allowed
                            .iter()
                            .any(|i| i.local != Some(true) && i.weight > 0);
                    if local.is_empty() || drained {
                        allowed
                    } else {
                        local
                    }
                } else {
                    allowed
                };
                if narrowed.is_empty() {
                    let want = if set.is_empty() {
                        Status::NoProvider
                    } else {
                        Status::NoCandidate
                    };
                    if got != Err(want) {
                        return Err((k, format!("expected {want:?}, got {got:?}")));
                    }
                    continue;
                }
                let got = match got {
                    Ok(id) => id,
                    Err(e) => return Err((k, format!("error {e:?}"))),
                };
                out.picks += 1;
                out.zoned += u64::from(narrowed.len() != allowed_len);
                out.among += u64::from(!cands.is_empty() || !excl.is_empty());
                let now_ms = before_us.div_euclid(1000);
                let warming = narrowed.len() > 1
                    && narrowed
                        .iter()
                        .any(|i| i.dubbo_weight(cfg.default_warmup(), now_ms) < i.weight);
                out.warming += u64::from(warming);
                out.zoned_warming += u64::from(
                    warming && narrowed.len() != allowed_len && cands.is_empty() && excl.is_empty(),
                );
                out.library_picks += u64::from(*t_us == 0);
                let (from_ms, to_ms) = (before_us.div_euclid(1000), after_us.div_euclid(1000));
                let mut next: Vec<Dubbo> = Vec::new();
                let mut wanted = Vec::new();
                for model in &models {
                    for ms in from_ms..=to_ms.max(from_ms) {
                        let list: Vec<(u64, i32)> = narrowed
                            .iter()
                            .map(|i| (i.id, i.dubbo_weight(cfg.default_warmup(), ms)))
                            .collect();
                        let mut m2 = model.clone();
                        let want = m2.select(m, &list, ms);
                        if want == got {
                            if !next.contains(&m2) {
                                next.push(m2);
                            }
                        } else {
                            wanted.push((ms, want, list));
                        }
                    }
                }
                if next.is_empty() {
                    return Err((
                        k,
                        format!("picked {got}; Dubbo picks {wanted:?} (method {m}, t_us {t_us})"),
                    ));
                }
                next.truncate(64);
                out.max_models = out.max_models.max(next.len());
                models = next;
            }
        }
    }
    Ok(out)
}

/// Shortest failing subsequence by removing chunks, then single ops (caller-time runs only).
fn minimise(cfg: &Cfg, mut ops: Vec<Op>) -> Vec<Op> {
    let fails = |ops: &[Op]| execute(cfg, ops).is_err();
    if let Err((k, _)) = execute(cfg, &ops) {
        ops.truncate(k + 1);
    }
    let mut chunk = ops.len() / 2;
    while chunk >= 1 {
        let mut i = 0;
        while i < ops.len() {
            let mut trial = ops.clone();
            let end = (i + chunk).min(trial.len());
            trial.drain(i..end);
            if !trial.is_empty() && fails(&trial) {
                ops = trial;
                if let Err((k, _)) = execute(cfg, &ops) {
                    ops.truncate(k + 1);
                }
            } else {
                i += chunk;
            }
        }
        chunk /= 2;
    }
    ops
}

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn configs() -> Vec<Cfg> {
    let mut out = Vec::new();
    for weights in 0..3 {
        for zoned in [false, true] {
            for warmup in [false, true] {
                for library in [false, true] {
                    out.push(Cfg {
                        zoned,
                        warmup,
                        weights,
                        library,
                    });
                }
            }
        }
    }
    out
}

#[test]
fn roundrobin_equals_an_independent_dubbo_model() {
    let seeds = env("POLYLB_RR_DIFF_SEEDS", 4);
    let steps = env("POLYLB_RR_DIFF_STEPS", 3000) as usize;
    let first = env("POLYLB_RR_DIFF_FIRST_SEED", 0);
    let (mut picks, mut library_picks, mut max_models) = (0, 0, 0);
    let (mut warming, mut zoned, mut among, mut zoned_warming) = (0, 0, 0, 0);
    let mut failures = Vec::new();
    for (c, cfg) in configs().into_iter().enumerate() {
        for s in first..first + seeds {
            let seed = (c as u64) << 32 | s;
            // Near the wall clock, so that the library's clock is a time among the caller's.
            let base_us = if cfg.library {
                wall_clock_us()
            } else {
                1_700_000_000_000_000
            };
            let ops = generate(&cfg, seed, steps, base_us);
            match execute(&cfg, &ops) {
                Ok(o) => {
                    picks += o.picks;
                    library_picks += o.library_picks;
                    max_models = max_models.max(o.max_models);
                    (warming, zoned, among) =
                        (warming + o.warming, zoned + o.zoned, among + o.among);
                    zoned_warming += o.zoned_warming;
                }
                Err((k, msg)) => {
                    eprintln!("{cfg:?} seed {seed}: op {k}: {msg}");
                    if !cfg.library && failures.is_empty() {
                        let min = minimise(&cfg, ops.clone());
                        eprintln!("minimised ({} ops):", min.len());
                        for op in &min {
                            eprintln!("  {op:?}");
                        }
                        eprintln!("  -> {:?}", execute(&cfg, &min).err());
                    }
                    failures.push((cfg, seed, k, msg));
                }
            }
        }
    }
    let (kept, recycled) = recycle_edges();
    eprintln!(
        "picks {picks}, at the library clock {library_picks}, model states kept at most \
         {max_models}; in warm-up {warming}, narrowed to the zone {zoned} (in warm-up there, \
         all of it {zoned_warming}), among candidates or with exclusions {among}; counters of departed invokers at exactly 60,000 ms {kept}, 60,001 ms \
         {recycled} (model states counted per branch)"
    );
    assert!(
        kept > 0 && recycled > 0,
        "the sequences reach the recycling edge"
    );
    assert!(warming > 0 && zoned > 0 && among > 0 && zoned_warming > 0);
    assert!(
        failures.is_empty(),
        "{} failing sequences: {failures:?}",
        failures.len()
    );
}
