//! `consistenthash`: Dubbo's MD5 ring (ConsistentHashLoadBalance), built on update only.

use super::{Ctx, Prepared, Strategy, StrategyKind};
use crate::balancer::{Member, Snapshot};
use crate::config::Config;
use crate::error::Status;
use md5::{Digest, Md5};
use std::sync::Arc;

pub(crate) struct ConsistentHash {
    /// MD5 digests per invoker: each gives four points, so hash.nodes is rounded down to 4k.
    digests_per_invoker: u32,
}

/// The ring as two sorted parallel arrays (struct of arrays: the fastest lookup measured here).
pub(crate) struct Ring {
    addresses: Box<[Arc<str>]>,
    points: Box<[u32]>,
    owners: Box<[u32]>,
}

impl ConsistentHash {
    pub fn new(config: &Config) -> Self {
        ConsistentHash {
            digests_per_invoker: config.hash_nodes / 4,
        }
    }

    pub(crate) fn build(&self, members: &[Member]) -> Ring {
        let per = self.digests_per_invoker as usize * 4;
        let mut placed: Vec<(u32, u32)> = Vec::with_capacity(members.len() * per);
        let mut number = itoa_buffer();
        for (pos, m) in members.iter().enumerate() {
            for i in 0..self.digests_per_invoker {
                let digest = Md5::new()
                    .chain_update(m.address.as_bytes())
                    .chain_update(format_u32(&mut number, i))
                    .finalize();
                for h in 0..4 {
                    placed.push((le_word(&digest, h), pos as u32));
                }
            }
        }
        // Stable sort keeps insertion order among equal points; the last one wins, as a later
        // put() overwrites an earlier one in Dubbo's TreeMap.
        placed.sort_by_key(|&(point, _)| point);
        let mut points = Vec::with_capacity(placed.len());
        let mut owners = Vec::with_capacity(placed.len());
        for (i, &(point, owner)) in placed.iter().enumerate() {
            if placed.get(i + 1).is_some_and(|next| next.0 == point) {
                continue;
            }
            points.push(point);
            owners.push(owner);
        }
        Ring {
            addresses: members.iter().map(|m| m.address.clone()).collect(),
            points: points.into(),
            owners: owners.into(),
        }
    }
}

fn le_word(digest: &[u8], h: usize) -> u32 {
    u32::from_le_bytes([
        digest[4 * h],
        digest[4 * h + 1],
        digest[4 * h + 2],
        digest[4 * h + 3],
    ])
}

fn itoa_buffer() -> [u8; 10] {
    [0; 10]
}

fn format_u32(buf: &mut [u8; 10], mut v: u32) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    &buf[i..]
}

/// The point of a key: the first four digest bytes, little-endian.
pub(crate) fn key_point(key: &[u8]) -> u32 {
    le_word(&Md5::digest(key), 0)
}

impl Ring {
    /// True when the ring was built from these addresses, in this order (only addresses place
    /// points, so it can be kept).
    pub(crate) fn placed_like(&self, members: &[Member]) -> bool {
        self.addresses.len() == members.len()
            && self
                .addresses
                .iter()
                .zip(members)
                .all(|(a, m)| **a == *m.address)
    }

    /// Index of the first point at or after `h`, wrapping past the end.
    pub(crate) fn ceiling(&self, h: u32) -> usize {
        let i = self.points.partition_point(|&p| p < h);
        if i == self.points.len() {
            0
        } else {
            i
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.points.len()
    }

    pub(crate) fn owner_at(&self, index: usize) -> usize {
        self.owners[index % self.owners.len()] as usize
    }
}

pub(crate) fn ring_of(snapshot: &Snapshot) -> Option<&Ring> {
    snapshot.prepared.as_ref()?.downcast_ref::<Ring>()
}

impl Strategy for ConsistentHash {
    fn kind(&self) -> StrategyKind {
        StrategyKind::ConsistentHash
    }

    fn tracks_reports(&self) -> bool {
        false
    }

    fn prepare(&self, members: &[Member], previous: &Snapshot) -> Prepared {
        // Only addresses (in order) place points: keep the ring when they did not change, so
        // weight or id churn never pays for 40 MD5 digests per invoker.
        if let Some(old) = previous.prepared.as_ref() {
            if let Some(ring) = old.downcast_ref::<Ring>() {
                if ring.placed_like(members) {
                    return Some(old.clone());
                }
            }
        }
        Some(Arc::new(self.build(members)))
    }

    fn select(&self, ctx: &Ctx<'_>) -> Result<usize, Status> {
        let ring = ring_of(ctx.snapshot).ok_or(Status::NoProvider)?;
        let start = ring.ceiling(key_point(ctx.key));
        if ctx.is_all {
            return Ok(ring.owner_at(start));
        }
        // A subset answers as a ring built from the subset would: walk clockwise to the first
        // point owned by a candidate. Bounded by the ring's size: no endless loop.
        (0..ring.len())
            .map(|k| ring.owner_at(start + k))
            .find(|&pos| ctx.contains(pos))
            .or_else(|| ctx.candidates.first().map(|&p| p as usize))
            .ok_or(Status::NoCandidate)
    }
}
