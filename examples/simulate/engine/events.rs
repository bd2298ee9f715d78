//! The event queue: events in virtual time, earliest first, and the loop that runs them.

use super::Engine;
use std::cmp::Ordering;

#[derive(Clone, Copy, Debug)]
pub(super) enum Ev {
    Arrival,
    EndOfArrivals,
    ServiceDone {
        provider: u32,
        req: u32,
        epoch: u32,
    },
    Response {
        req: u32,
        gen: u32,
        ok: bool,
        metrics: bool,
    },
    Action(u32),
    /// An answer of `provider` has crossed its extra latency (see `Provider::in_transit`).
    TransitEnd {
        provider: u32,
    },
    /// Probe every key's provider (hashing quality), before or after the removal.
    Probe {
        after: bool,
    },
}

pub(super) struct Entry {
    time: i64,
    seq: u64,
    ev: Ev,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.time == other.time && self.seq == other.seq
    }
}

impl Eq for Entry {}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Entry {
    // Reversed: BinaryHeap is a max-heap and we want the earliest (then the first scheduled).
    fn cmp(&self, other: &Self) -> Ordering {
        (other.time, other.seq).cmp(&(self.time, self.seq))
    }
}

impl Engine<'_> {
    pub(super) fn schedule(&mut self, time: i64, ev: Ev) {
        self.seq += 1;
        self.heap.push(Entry {
            time,
            seq: self.seq,
            ev,
        });
    }

    pub(super) fn run_loop(&mut self) {
        loop {
            let next_ev = self.heap.peek().map(|e| e.time);
            let next_to = self.timeouts.front().map(|t| t.0);
            match (next_ev, next_to) {
                (None, None) => break,
                (Some(te), Some(tt)) if tt < te => self.pop_timeout(),
                (None, Some(_)) => self.pop_timeout(),
                _ => {
                    let Entry { time, ev, .. } = self.heap.pop().expect("peeked");
                    self.now = time;
                    self.events += 1;
                    self.handle(ev);
                }
            }
        }
    }

    fn handle(&mut self, ev: Ev) {
        match ev {
            Ev::Arrival => self.arrival(),
            Ev::EndOfArrivals => {
                self.arrivals_open = false;
                for (i, p) in self.providers.iter_mut().enumerate() {
                    self.utilisation[i] = p.utilisation(self.now);
                }
            }
            Ev::ServiceDone {
                provider,
                req,
                epoch,
            } => self.service_done(provider as usize, req, epoch),
            Ev::Response {
                req,
                gen,
                ok,
                metrics,
            } => self.response(req, gen, ok, metrics),
            Ev::Action(i) => self.action(self.sc.timeline[i as usize].1),
            Ev::TransitEnd { provider } => self.providers[provider as usize].in_transit -= 1,
            Ev::Probe { after } => self.probe(after),
        }
    }
}
