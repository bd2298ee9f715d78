//! Consistent hashing by the request's key: a key stays on its endpoint, and an endpoint that
//! leaves takes only its own keys away.

mod common;

use common::*;
use polylb_tower::Balance;
use std::borrow::Cow;
use std::collections::HashMap;
use std::convert::Infallible;
use tower::discover::Change;
use tower::util::BoxService;
use tower::{service_fn, Service, ServiceExt};

type Endpoint = BoxService<String, String, Infallible>;

fn endpoint(address: String) -> Endpoint {
    BoxService::new(service_fn(move |_: String| {
        let address = address.clone();
        async move { Ok::<_, Infallible>(address) }
    }))
}

async fn owners(
    balance: &mut Balance<Changes<String, Endpoint>, String>,
    keys: &[String],
) -> HashMap<String, String> {
    let mut owners = HashMap::new();
    for key in keys {
        let owner = balance
            .ready()
            .await
            .unwrap()
            .call(key.clone())
            .await
            .unwrap();
        owners.insert(key.clone(), owner);
    }
    owners
}

#[tokio::test]
async fn a_key_keeps_its_endpoint_and_a_leaving_endpoint_moves_only_its_keys() {
    let (tx, discover) = changes();
    for i in 1..=5 {
        let address = format!("10.0.0.{i}:8080");
        tx.send(Change::Insert(address.clone(), endpoint(address)))
            .unwrap();
    }
    let mut balance = Balance::builder(discover)
        .config("loadbalance=consistenthash")
        .hash_key(|user: &String| Cow::Borrowed(user.as_bytes()))
        .build()
        .unwrap();
    let keys: Vec<String> = (0..500).map(|n| format!("user-{n}")).collect();
    let before = owners(&mut balance, &keys).await;
    assert_eq!(owners(&mut balance, &keys).await, before);
    let owned_by_3 = before.values().filter(|o| *o == "10.0.0.3:8080").count();
    assert!(owned_by_3 > 0, "10.0.0.3 owns no key of 500");

    tx.send(Change::Remove("10.0.0.3:8080".to_string()))
        .unwrap();
    let after = owners(&mut balance, &keys).await;
    for key in &keys {
        if before[key] == "10.0.0.3:8080" {
            assert_ne!(after[key], "10.0.0.3:8080", "{key}");
        } else {
            assert_eq!(after[key], before[key], "{key} moved");
        }
    }
}

#[test]
fn a_hashing_strategy_without_a_hash_key_is_refused() {
    for strategy in ["consistenthash", "boundedhash", "maglev", "rendezvous"] {
        let built = Balance::builder(tower::discover::ServiceList::new(Vec::<
            tower::util::BoxService<String, String, std::convert::Infallible>,
        >::new()))
        .config(format!("loadbalance={strategy}"))
        .build();
        match built {
            Err(polylb_tower::Error::NoHashKey(named)) => assert_eq!(named, strategy),
            other => panic!("{strategy} without a key: {other:?}"),
        }
    }
}
