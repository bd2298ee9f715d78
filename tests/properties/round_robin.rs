//! Round robin.

use crate::api::*;
use crate::{seeded, BASE_US};
use polylb::{Balancer, Invoker};
use proptest::prelude::*;

proptest! {
    #![proptest_config(seeded(600))]

    #[test]
    fn round_robin_cycle_counts_equal_weights(
        weights in proptest::collection::vec(prop_oneof![1 => Just(0i32), 6 => 1i32..60], 1..9),
        prefix in 0usize..300,
        other_every in 0usize..5,
        via_abi in any::<bool>(),
    ) {
        prop_assume!(weights.iter().any(|&w| w > 0));
        let set: Vec<Invoker> = weights
            .iter()
            .enumerate()
            .map(|(i, &w)| Invoker::new(i as u64 + 10, format!("10.2.0.{i}:20880")).weight(w))
            .collect();
        let config = "loadbalance=roundrobin";
        let (rust, abi);
        let api: &dyn Api = if via_abi {
            abi = Abi::new(config);
            &abi
        } else {
            rust = Balancer::new(config).unwrap();
            &rust
        };
        api.upd(&set).unwrap();
        let m = api.meth("m");
        let other = api.meth("other");
        let mut now = BASE_US;
        let pick = |method: u32, now: i64| {
            let id = api.pick_among(method, b"", &[], &[], now).unwrap();
            api.rep(method, id, 1000, 0, now).unwrap();
            id
        };
        for k in 0..prefix {
            now += 1000;
            pick(m, now);
            if other_every > 0 && k % other_every == 0 {
                pick(other, now);
            }
        }
        let total: i32 = weights.iter().sum();
        let mut counts = vec![0i32; weights.len()];
        for k in 0..total as usize {
            now += 1000;
            counts[(pick(m, now) - 10) as usize] += 1;
            if other_every > 0 && k % other_every == 0 {
                pick(other, now);
            }
        }
        prop_assert_eq!(counts, weights);
    }
}
