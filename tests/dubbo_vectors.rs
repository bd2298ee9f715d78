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

#[test]
fn consistent_hash_picks_equal_dubbo() {
    let mut checked = 0;
    for file in vector_files() {
        let v = load(&file);
        let Some(ch) = v.get("consistent_hash") else {
            continue;
        };
        let keys: Vec<&str> = ch["keys"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k.as_str().unwrap())
            .collect();
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
                for (key, want) in case_keys.iter().zip(picks.as_array().unwrap()) {
                    let id = b.select(0, key.as_bytes(), 0).unwrap();
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
        for seq in rr["sequences"].as_array().unwrap() {
            let weights: Vec<i32> = seq["weights"]
                .as_array()
                .unwrap()
                .iter()
                .map(|w| w.as_i64().unwrap() as i32)
                .collect();
            let invokers: Vec<Invoker> = weights
                .iter()
                .enumerate()
                .map(|(i, &w)| provider(i as u64 + 1).weight(w))
                .collect();
            let b = balancer("loadbalance=roundrobin", &invokers);
            let m = b.method("sayHello").unwrap();
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
        for case in w["via_getWeight"].as_array().unwrap() {
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
