//! Consistent hashing.

use crate::api::*;
use crate::{seeded, BASE_US};
use polylb::{Balancer, Invoker};
use proptest::prelude::*;

fn ring_set(n: usize, salt: u16) -> Vec<Invoker> {
    (0..n as u64)
        .map(|i| Invoker::new(i + 1, format!("192.168.{}.{}:{}", salt % 200, i, 20880 + i)))
        .collect()
}

proptest! {
    #![proptest_config(seeded(300))]

    #[test]
    fn consistent_hash_removal_moves_only_the_removed_keys(
        n in 2usize..24,
        salt in any::<u16>(),
        nodes in prop_oneof![Just(160u32), 4u32..64],
        removed in any::<usize>(),
        keys in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..32), 1..64),
    ) {
        let config = format!("loadbalance=consistenthash&hash.nodes={nodes}");
        let set = ring_set(n, salt);
        let x = set[removed % n].id;
        let rest: Vec<Invoker> = set.iter().filter(|i| i.id != x).cloned().collect();
        let rest_ids: Vec<u64> = rest.iter().map(|i| i.id).collect();
        let full = Balancer::new(&config).unwrap();
        full.update(&set).unwrap();
        let again = Balancer::new(&config).unwrap();
        again.update(&set).unwrap();
        let abi = Abi::new(&config);
        Api::upd(&abi, &set).unwrap();
        let smaller = Balancer::new(&config).unwrap();
        smaller.update(&rest).unwrap();
        for key in &keys {
            let before = full.select(0, key, BASE_US).unwrap();
            prop_assert_eq!(full.select(0, key, BASE_US).unwrap(), before, "same key, same pick");
            prop_assert_eq!(again.select(0, key, BASE_US).unwrap(), before, "same set, same pick");
            prop_assert_eq!(abi.pick_among(0, key, &[], &[], BASE_US).unwrap(), before);
            let after = smaller.select(0, key, BASE_US).unwrap();
            prop_assert_ne!(after, x);
            if before != x {
                prop_assert_eq!(after, before, "a key of a remaining invoker moved");
            }
            // A subset answers as a ring built from the subset.
            prop_assert_eq!(full.select_among(0, key, &rest_ids, &[], BASE_US).unwrap(), after);
            prop_assert_eq!(full.select_among(0, key, &[], &[x], BASE_US).unwrap(), after);
        }
        // Removing x from the live balancer gives the same answers as the fresh smaller one.
        full.update(&rest).unwrap();
        for key in &keys {
            prop_assert_eq!(full.select(0, key, BASE_US).unwrap(), smaller.select(0, key, BASE_US).unwrap());
        }
    }
}
