//! Dubbo's own outputs (vectors/*.json): consistent hashing, round robin and warm-up weights.

mod common;
use common::*;
use polylb::{effective_weight, Balancer, Invoker};
use serde_json::Value;

fn load(path: &std::path::Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn by_address(list: &[Value]) -> Vec<Invoker> {
    list.iter()
        .enumerate()
        .map(|(i, a)| Invoker::new(i as u64 + 1, a.as_str().unwrap()))
        .collect()
}

/// ConsistentHashSelector's argument indexes: `hash.arguments` split by Java's
/// `"\\s*[,]+\\s*"` (a run of commas with the whitespace around it, `\s` being ASCII's six;
/// when there is a comma, every trailing empty part dropped: `","` gives no index and the empty
/// key), each part parsed as a Java int. None where Dubbo throws.
fn hash_argument_indexes(text: &str) -> Option<Vec<i32>> {
    let pieces: Vec<&str> = text.split(',').collect();
    let last = pieces.len() - 1;
    let mut parts: Vec<&str> = Vec::new();
    for (i, piece) in pieces.iter().enumerate() {
        if piece.is_empty() && i > 0 && i < last {
            continue; // between two adjacent commas: inside one separator
        }
        let java_space = |c: char| matches!(c, ' ' | '\t' | '\n' | '\x0B' | '\x0C' | '\r');
        let mut part = *piece;
        if i > 0 {
            part = part.trim_start_matches(java_space);
        }
        if i < last {
            part = part.trim_end_matches(java_space);
        }
        parts.push(part);
    }
    // Java drops trailing empty strings only from a split that matched (no comma: the input).
    while pieces.len() > 1 && parts.last() == Some(&"") {
        parts.pop();
    }
    parts.iter().map(|p| p.parse::<i32>().ok()).collect()
}

/// Dubbo's key: the arguments at the configured indexes, concatenated without separator;
/// indexes out of range (or negative) skipped.
fn dubbo_key(args: &[&str], indexes: &[i32]) -> String {
    indexes
        .iter()
        .filter_map(|&i| usize::try_from(i).ok().and_then(|i| args.get(i)))
        .copied()
        .collect()
}

/// A sequence's `weights` (Dubbo's ints).
fn weights_of(seq: &Value) -> Vec<i32> {
    seq["weights"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_i64().unwrap() as i32)
        .collect()
}

/// A roundrobin balancer over invokers 1..=n of these URL weights, and its method `sayHello`.
/// Dubbo's getWeight reads a negative weight as 0, as the adapters do (polylb rejects it).
fn round_robin_over(weights: &[i32]) -> (Balancer, u32) {
    let invokers: Vec<Invoker> = weights
        .iter()
        .enumerate()
        .map(|(i, &w)| provider(i as u64 + 1).weight(w.max(0)))
        .collect();
    let b = balancer("loadbalance=roundrobin", &invokers);
    let m = b.method("sayHello").unwrap();
    (b, m)
}

#[test]
fn dubbo_keys_follow_hash_arguments() {
    assert_eq!(hash_argument_indexes("0"), Some(vec![0]));
    assert_eq!(hash_argument_indexes("0 , 1,,2"), Some(vec![0, 1, 2]));
    assert_eq!(hash_argument_indexes("0,,"), Some(vec![0]));
    assert_eq!(hash_argument_indexes("-1,+1"), Some(vec![-1, 1]));
    assert_eq!(hash_argument_indexes("0,\x0B1"), Some(vec![0, 1]));
    for none in [",", ",,", " , "] {
        assert_eq!(hash_argument_indexes(none), Some(vec![]), "{none:?}");
    }
    for throws in [
        "x",
        " 0",
        "0 ",
        ",0",
        "0, ,1",
        "",
        "0,\u{a0}1",
        "2147483648",
    ] {
        assert_eq!(hash_argument_indexes(throws), None, "{throws:?}");
    }
    assert_eq!(dubbo_key(&["user-3", "9"], &[0, 1]), "user-39");
    assert_eq!(dubbo_key(&["k"], &[0, 0]), "kk");
    assert_eq!(dubbo_key(&["k"], &[1, -1]), "");
}

#[test]
fn consistent_hash_picks_equal_dubbo() {
    let mut checked = 0;
    for file in vector_files() {
        let v = load(&file);
        let Some(ch) = v.get("consistent_hash") else {
            continue;
        };
        // Shared keys, unless every case brings its own.
        let keys: Vec<&str> = ch["keys"]
            .as_array()
            .map(|k| k.iter().map(|k| k.as_str().unwrap()).collect())
            .unwrap_or_default();
        for case in ch["cases"].as_array().unwrap() {
            let name = case["name"].as_str().unwrap_or("?");
            let nodes = case["hash_nodes"].as_u64().unwrap_or(160);
            let b =
                Balancer::new(&format!("loadbalance=consistenthash&hash.nodes={nodes}")).unwrap();
            let case_keys: Vec<&str> = case
                .get("keys")
                .and_then(|k| k.as_array())
                .map(|k| k.iter().map(|k| k.as_str().unwrap()).collect())
                .unwrap_or_else(|| keys.clone());
            // Each key is the call's single argument: Dubbo hashes the arguments
            // `hash.arguments` names (the caller's part of the contract, done here as the
            // adapters do it).
            let arguments = case["hash_arguments"].as_str().unwrap_or("0");
            let indexes = hash_argument_indexes(arguments).unwrap_or_else(|| {
                panic!("{name}: hash.arguments {arguments:?} makes Dubbo throw")
            });
            // A case may describe a before/after pair (removal); check every list it gives.
            let phases: Vec<(&Value, &Value)> = if case.get("providers").is_some() {
                vec![(&case["providers"], &case["picks"])]
            } else {
                vec![
                    (&case["providers_before"], &case["picks_before"]),
                    (&case["providers_after"], &case["picks_after"]),
                ]
            };
            for (providers, picks) in phases {
                let invokers = by_address(providers.as_array().unwrap());
                b.update(&invokers).unwrap();
                let picks = picks.as_array().unwrap();
                assert_eq!(picks.len(), case_keys.len(), "{name}: picks per key");
                for (key, want) in case_keys.iter().zip(picks) {
                    let hashed = dubbo_key(&[key], &indexes);
                    let id = b.select(0, hashed.as_bytes(), 0).unwrap();
                    let got = &invokers.iter().find(|i| i.id == id).unwrap().address;
                    assert_eq!(
                        got,
                        want.as_str().unwrap(),
                        "{}: case {name}, key {key:?}",
                        file.display()
                    );
                    b.report(0, id, 1, polylb::Outcome::Success, 0).unwrap();
                    checked += 1;
                }
            }
        }
    }
    assert!(checked >= 120, "checked {checked}");
}

#[test]
fn round_robin_sequences_equal_dubbo() {
    let mut checked = 0;
    for file in vector_files() {
        let v = load(&file);
        let Some(rr) = v.get("round_robin") else {
            continue;
        };
        for seq in rr["sequences"].as_array().into_iter().flatten() {
            let weights = weights_of(seq);
            let (b, m) = round_robin_over(&weights);
            for (k, want) in seq["picks"].as_array().unwrap().iter().enumerate() {
                let id = b.select(m, b"", 1_700_000_000_000_000).unwrap();
                assert_eq!(
                    id as i64 - 1,
                    want.as_i64().unwrap(),
                    "{}: weights {weights:?}, pick {k}",
                    file.display()
                );
                checked += 1;
            }
        }
    }
    assert!(checked >= 120);
}

/// `round_robin.long_sequences` (none in the public file): per sequence its weights and only
/// the `[position, index]` pairs whose pick is not index 0; every other position up to the
/// sequence's length (or the last pair) picks index 0. Read tolerantly, as the public file
/// shows no example: the pairs are the one array of integer pairs, the length an integer field.
#[test]
fn round_robin_long_sequences_equal_dubbo() {
    for file in vector_files() {
        let v = load(&file);
        let Some(rr) = v.get("round_robin").and_then(|r| r.as_object()) else {
            continue;
        };
        for section in rr.keys() {
            if !["sequences", "long_sequences"].contains(&section.as_str()) {
                eprintln!(
                    "{}: round_robin.{section} is not checked by this harness",
                    file.display()
                );
            }
        }
        let Some(long) = rr.get("long_sequences").and_then(|l| l.as_array()) else {
            continue;
        };
        for seq in long {
            let weights = weights_of(seq);
            let obj = seq.as_object().unwrap();
            let pairs: Vec<(usize, i64)> = obj
                .values()
                .filter_map(|f| f.as_array())
                .find(|a| {
                    !a.is_empty() && a.iter().all(|p| p.as_array().is_some_and(|p| p.len() == 2))
                })
                .map(|a| {
                    a.iter()
                        .map(|p| (p[0].as_u64().unwrap() as usize, p[1].as_i64().unwrap()))
                        .collect()
                })
                .unwrap_or_default();
            let length = obj
                .iter()
                .find(|(k, f)| *k != "weights" && f.is_u64())
                .map(|(_, f)| f.as_u64().unwrap() as usize)
                .unwrap_or_else(|| pairs.iter().map(|p| p.0 + 1).max().unwrap_or(0));
            let mut want = vec![0i64; length];
            for &(pos, index) in &pairs {
                want[pos] = index;
            }
            let (b, m) = round_robin_over(&weights);
            for (k, &want) in want.iter().enumerate() {
                let id = b.select(m, b"", 1_700_000_000_000_000).unwrap();
                assert_eq!(
                    id as i64 - 1,
                    want,
                    "{}: long sequence, weights {weights:?}, pick {k}",
                    file.display()
                );
            }
        }
    }
}

/// Maps a vector's Dubbo URL parameters to polylb's invoker fields, as the Java adapter does:
/// absent weight → 100; negative weight → 0 (Dubbo clamps); absent timestamp → 0; absent warmup →
/// -1 (the balancer default, 600000); a non-positive warmup → 0 (Dubbo: no warm-up).
#[test]
fn warmup_weights_equal_dubbo() {
    let mut checked = 0;
    for file in vector_files() {
        let v = load(&file);
        let Some(w) = v.get("warmup") else { continue };
        let now_ms = w["now_ms"].as_i64().unwrap();
        for case in w["via_getWeight"].as_array().into_iter().flatten() {
            let weight = case["weight"].as_i64().map_or(100, |w| w.max(0) as i32);
            let start = case["timestamp_ms"].as_i64().unwrap_or(0);
            let warmup = case["warmup_ms"].as_i64().map_or(-1, |w| w.max(0) as i32);
            let expected = case["expected"].as_i64().unwrap();
            let b = balancer(
                "",
                &[provider(1)
                    .weight(weight)
                    .start_time_ms(start)
                    .warmup_ms(warmup)],
            );
            assert_eq!(
                stat(&b, now_ms * 1000, 1, "effective_weight"),
                expected,
                "{}: {case}",
                file.display()
            );
            if warmup != -1 {
                assert_eq!(
                    effective_weight(weight, start, warmup, now_ms) as i64,
                    expected
                );
            }
            checked += 1;
        }
        if let Some(direct) = w
            .get("calculateWarmupWeight_direct")
            .and_then(|d| d.as_array())
        {
            for case in direct {
                let got = polylb::warmup_weight(
                    case["uptime_ms"].as_i64().unwrap(),
                    case["warmup_ms"].as_i64().unwrap() as i32,
                    case["weight"].as_i64().unwrap() as i32,
                );
                assert_eq!(got as i64, case["expected"].as_i64().unwrap(), "{case}");
                checked += 1;
            }
        }
    }
    assert!(checked >= 40);
}
