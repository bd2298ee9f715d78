//! Many tasks share one balancer through tower's `Buffer`, on a multi-threaded runtime.

mod common;

use common::*;
use polylb_tower::Balance;
use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tower::buffer::Buffer;
use tower::discover::ServiceList;
use tower::{service_fn, Service, ServiceExt};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_share_a_buffered_balance() {
    let served: Arc<Vec<AtomicUsize>> = Arc::new((0..5).map(|_| AtomicUsize::new(0)).collect());
    let endpoints: Vec<_> = (0..5)
        .map(|index| {
            let served = served.clone();
            service_fn(move |request: u64| {
                served[index].fetch_add(1, Ordering::Relaxed);
                async move {
                    tokio::task::yield_now().await;
                    Ok::<_, Infallible>(request * 2)
                }
            })
        })
        .collect();
    let balance = Balance::builder(ServiceList::new(endpoints))
        .config("loadbalance=p2c")
        .build()
        .unwrap();
    let balancer = balance.balancer().clone();
    let buffer = Buffer::new(balance, 64);

    let (tasks, per_task) = (16, 250);
    let mut handles = Vec::new();
    for task in 0..tasks {
        let mut buffer = buffer.clone();
        handles.push(tokio::spawn(async move {
            for i in 0..per_task {
                let request = task * 1000 + i;
                let answer = buffer.ready().await.unwrap().call(request).await.unwrap();
                assert_eq!(answer, request * 2);
            }
        }));
    }
    for handle in handles {
        handle.await.unwrap();
    }
    let total = (tasks * per_task) as usize;
    let counts: Vec<usize> = served.iter().map(|c| c.load(Ordering::Relaxed)).collect();
    assert_eq!(counts.iter().sum::<usize>(), total, "{counts:?}");
    assert!(counts.iter().all(|&c| c > 0), "{counts:?}");
    let endpoints = stats(&balancer);
    let sum = |field: &str| -> i64 { endpoints.values().map(|e| e[field].as_i64().unwrap()).sum() };
    assert_eq!((sum("active"), sum("succeeded")), (0, total as i64));
}
