//! The fuzz targets on stable Rust: replays every input of `fuzz/corpus/<target>/` through the
//! same target functions the libFuzzer binaries run (`fuzz/targets.rs`), then a bounded number
//! of inputs mutated from that corpus by a seeded generator (bit flips, byte changes, inserts,
//! deletions, splices, interesting values). Deterministic by default so CI is reproducible;
//! `POLYLB_FUZZ_ITERS=<n>` runs more mutations, `POLYLB_FUZZ_SEED=<n>` varies them. A failing
//! input is written to `target/fuzz-failures/` and its path printed; replay it with
//! `cargo test --release --test fuzz_corpus` after copying it into the corpus, or with the
//! libFuzzer binary (`fuzz/run.sh`).

#[path = "../fuzz/targets.rs"]
mod targets;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

/// xorshift64*: enough to drive mutations reproducibly.
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn corpus(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    assert!(
        files.len() >= 8,
        "seed corpus of {target} has {} files",
        files.len()
    );
    files
        .into_iter()
        .map(|p| {
            let data = std::fs::read(&p).unwrap();
            (p, data)
        })
        .collect()
}

/// Tokens a mutation may insert: these, plus `key=` and `&key=` for every key the parser knows
/// (`interesting()`), so options added after Dubbo's are reached without a hand-kept list.
const INTERESTING: &[&[u8]] = &[
    b"&",
    b"=",
    b"4",
    b"0",
    b"1.5",
    b"100",
    b"101",
    b"NaN",
    b"zone-a",
    b"-1",
    b"65537",
    b"18446744073709551616",
    b"2147483647",
    b"\xff\xfe",
    b"\x00",
    b" ",
    &[0xFF; 8],
    &[0; 8],
];

fn interesting() -> Vec<Vec<u8>> {
    let mut words: Vec<Vec<u8>> = INTERESTING.iter().map(|w| w.to_vec()).collect();
    for (key, _) in polylb::Config::keys() {
        words.push(format!("{key}=").into_bytes());
        words.push(format!("&{key}=").into_bytes());
    }
    for kind in polylb::StrategyKind::ALL {
        words.push(format!("loadbalance={}", kind.name()).into_bytes());
    }
    words
}

fn mutate(g: &mut Gen, input: &[u8], other: &[u8], words: &[Vec<u8>]) -> Vec<u8> {
    let mut v = input.to_vec();
    for _ in 0..1 + g.below(4) {
        match g.below(7) {
            0 if !v.is_empty() => {
                let i = g.below(v.len());
                v[i] ^= 1 << g.below(8);
            }
            1 if !v.is_empty() => {
                let i = g.below(v.len());
                v[i] = g.next() as u8;
            }
            2 => {
                let i = g.below(v.len() + 1);
                v.insert(i, g.next() as u8);
            }
            3 if !v.is_empty() => {
                let i = g.below(v.len());
                let n = 1 + g.below((v.len() - i).min(8));
                v.drain(i..i + n);
            }
            4 if !other.is_empty() => {
                // splice: our prefix, their suffix
                let cut = g.below(v.len() + 1);
                let from = g.below(other.len());
                v.truncate(cut);
                v.extend_from_slice(&other[from..]);
            }
            5 => {
                let word = &words[g.below(words.len())];
                let i = g.below(v.len() + 1);
                v.splice(i..i, word.iter().copied());
            }
            _ if !v.is_empty() => {
                // duplicate a run (repeats an operation of a sequence)
                let i = g.below(v.len());
                let n = 1 + g.below((v.len() - i).min(16));
                let run = v[i..i + n].to_vec();
                v.splice(i..i, run);
            }
            _ => v.push(g.next() as u8),
        }
    }
    v.truncate(4096);
    v
}

fn run_one(target: &str, f: fn(&[u8]), data: &[u8], origin: &str) {
    if catch_unwind(AssertUnwindSafe(|| f(data))).is_err() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/fuzz-failures");
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{target}-{:016x}", fnv(data)));
        std::fs::write(&path, data).unwrap();
        panic!(
            "{target}: input from {origin} failed; saved to {}",
            path.display()
        );
    }
}

fn fnv(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Replays the corpus, then `iters` mutated inputs; returns the number of executions.
fn fuzz(target: &str, f: fn(&[u8]), default_iters: u64) -> u64 {
    let seeds = corpus(target);
    let replayed = seeds.len() as u64;
    for (path, data) in &seeds {
        run_one(target, f, data, &path.display().to_string());
    }
    let iters = env_u64("POLYLB_FUZZ_ITERS", default_iters);
    let mut g = Gen(env_u64("POLYLB_FUZZ_SEED", 0x9E37_79B9_7F4A_7C15) | 1);
    // Keep inputs that parse as configs or run long as further seeds: a poor man's corpus growth.
    let mut pool: Vec<Vec<u8>> = seeds.into_iter().map(|(_, d)| d).collect();
    let words = interesting();
    for i in 0..iters {
        let a = g.below(pool.len());
        let b = g.below(pool.len());
        let input = mutate(&mut g, &pool[a], &pool[b], &words);
        run_one(target, f, &input, &format!("mutation #{i}"));
        if i % 16 == 0 && pool.len() < 512 {
            pool.push(input);
        }
    }
    eprintln!("{target}: {replayed} corpus inputs + {iters} mutations executed");
    replayed + iters
}

#[test]
fn config_corpus_and_mutations() {
    fuzz("config", targets::config, 100_000);
}

#[test]
fn abi_sequence_corpus_and_mutations() {
    // Unoptimised (the overflow-check run of scripts/test-all.sh) fewer mutations: the corpus
    // holds earlier fuzz runs' finds, whose mutations run longer sequences, and 40 000 of
    // them took minutes there; every corpus input still runs with overflow checks.
    let iters = if cfg!(debug_assertions) {
        20_000
    } else {
        40_000
    };
    fuzz("abi_sequence", targets::abi_sequence, iters);
}

#[test]
fn abi_pair_corpus_and_mutations() {
    // Two balancers per input: each execution runs about as long as one of abi_sequence's.
    let iters = if cfg!(debug_assertions) {
        5_000
    } else {
        10_000
    };
    fuzz("abi_pair", targets::abi_pair, iters);
}

/// The committed config corpus keeps up with the parser: every key the parser knows and every
/// strategy appear in some seed that parses, so the mutations start from each of them.
#[test]
fn config_corpus_covers_every_key_and_strategy() {
    let accepted: Vec<(String, polylb::Config)> = corpus("config")
        .into_iter()
        .filter_map(|(_, d)| String::from_utf8(d).ok())
        .filter_map(|t| polylb::Config::parse(&t).ok().map(|c| (t, c)))
        .collect();
    for (key, _) in polylb::Config::keys() {
        let sets = |t: &str| {
            t.split('&')
                .filter_map(|p| p.split_once('='))
                .any(|(k, v)| k.trim() == key && !v.trim().is_empty())
        };
        assert!(
            accepted.iter().any(|(t, _)| sets(t)),
            "no accepted config seed sets {key}"
        );
    }
    for kind in polylb::StrategyKind::ALL {
        assert!(
            accepted.iter().any(|(_, c)| c.strategy == *kind),
            "no accepted config seed uses loadbalance={}",
            kind.name()
        );
    }
}

/// The configs the abi_sequence corpus runs with give every key the parser knows a value, so
/// the sequences (and the mutations starting from them) meet every option, out-of-range
/// values included: the corpus holds inputs whose pairs set a key beyond its range (refused,
/// the run falls back) and at its edge (accepted, the run uses it).
#[test]
fn abi_sequence_corpus_sets_every_key() {
    let configs: Vec<String> = corpus("abi_sequence")
        .iter()
        .map(|(_, d)| targets::abi_sequence_config(d))
        .collect();
    for (key, _) in polylb::Config::keys() {
        let sets = |t: &String| {
            t.split('&')
                .filter_map(|p| p.split_once('='))
                .any(|(k, v)| k == key && !v.trim().is_empty())
        };
        assert!(
            configs.iter().any(sets),
            "no abi_sequence corpus input runs with {key} set"
        );
    }
}
