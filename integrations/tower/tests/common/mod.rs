//! Endpoints and discovery for the tests: endpoints whose readiness the test controls, a
//! discovery fed by a channel, polylb's statistics read back.
#![allow(dead_code)] // each test file uses a part

use futures_core::Stream;
use polylb::Balancer;
use std::collections::HashMap;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Instant;
use tokio::sync::mpsc;
use tower::discover::Change;
use tower::Service;

/// Tokio's clock: in paused time, a `sleep` in an endpoint is the latency polylb learns.
pub fn tokio_clock() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// What a [`Gated`] endpoint's `poll_ready` returns next.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Gate {
    Open,
    Closed,
    Broken,
}

#[derive(Debug)]
struct GateState {
    gate: Gate,
    waiting: Option<Waker>,
    calls: usize,
    /// Whether `poll_ready` returned Ready since the last call: a call without it breaks
    /// tower's contract, which the test then fails on.
    readied: bool,
}

/// An endpoint whose readiness the test sets; it answers its name at once.
#[derive(Clone, Debug)]
pub struct Gated {
    name: &'static str,
    state: Arc<Mutex<GateState>>,
}

impl Gated {
    pub fn new(name: &'static str, gate: Gate) -> Gated {
        let state = GateState {
            gate,
            waiting: None,
            calls: 0,
            readied: false,
        };
        Gated {
            name,
            state: Arc::new(Mutex::new(state)),
        }
    }

    pub fn set(&self, gate: Gate) {
        let mut state = self.state.lock().unwrap();
        state.gate = gate;
        if let Some(waker) = state.waiting.take() {
            waker.wake();
        }
    }

    pub fn calls(&self) -> usize {
        self.state.lock().unwrap().calls
    }
}

impl Service<&'static str> for Gated {
    type Response = &'static str;
    type Error = &'static str;
    type Future = std::future::Ready<Result<&'static str, &'static str>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        let mut state = self.state.lock().unwrap();
        match state.gate {
            Gate::Open => {
                state.readied = true;
                Poll::Ready(Ok(()))
            }
            Gate::Closed => {
                state.waiting = Some(cx.waker().clone());
                Poll::Pending
            }
            Gate::Broken => Poll::Ready(Err("broken")),
        }
    }

    fn call(&mut self, _: &'static str) -> Self::Future {
        let mut state = self.state.lock().unwrap();
        assert!(state.readied, "{} called without poll_ready", self.name);
        state.readied = false;
        state.calls += 1;
        std::future::ready(Ok(self.name))
    }
}

/// A discovery fed through a channel; it ends when the sender is dropped.
pub struct Changes<K, S>(mpsc::UnboundedReceiver<Change<K, S>>);

pub fn changes<K, S>() -> (mpsc::UnboundedSender<Change<K, S>>, Changes<K, S>) {
    let (tx, rx) = mpsc::unbounded_channel();
    (tx, Changes(rx))
}

impl<K, S> Stream for Changes<K, S> {
    type Item = Result<Change<K, S>, Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.poll_recv(cx).map(|change| change.map(Ok))
    }
}

/// polylb's statistics of each endpoint, by address.
pub fn stats(balancer: &Balancer) -> HashMap<String, serde_json::Value> {
    let json: serde_json::Value = serde_json::from_str(&balancer.stats_json(0)).unwrap();
    json["invokers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|inv| (inv["address"].as_str().unwrap().to_string(), inv.clone()))
        .collect()
}

/// A count's expected value and the tolerance that a binomial count of `draws` with
/// probability `p` leaves with probability below 1e-6 (five standard deviations).
pub fn binomial_bounds(draws: usize, p: f64) -> (f64, f64) {
    let mean = draws as f64 * p;
    (mean, 5.0 * (mean * (1.0 - p)).sqrt())
}

/// A discovery that yields `items` and ends.
pub struct Listed<T>(std::vec::IntoIter<T>);

pub fn listed<T>(items: Vec<T>) -> Listed<T> {
    Listed(items.into_iter())
}

impl<T> Unpin for Listed<T> {}

impl<T> Stream for Listed<T> {
    type Item = T;

    fn poll_next(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<T>> {
        Poll::Ready(self.0.next())
    }
}
