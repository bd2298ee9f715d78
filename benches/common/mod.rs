//! Pieces shared by the benchmark files: the floors' random generator and the invoker sets.
#![allow(dead_code)]

use polylb::Invoker;

pub mod adaptive_floor;

/// wyrand with a multiply-shift bound: the same generator the library uses, so floors and
/// strategies pay the same for randomness.
pub struct Wy(pub u64);

impl Wy {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0xa076_1d64_78bd_642f);
        let t = (self.0 as u128).wrapping_mul((self.0 ^ 0xe703_7ed1_a0b4_28db) as u128);
        ((t >> 64) as u64) ^ (t as u64)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next() as u128 * n as u128) >> 64) as u64
    }
}

/// n invokers with weights 100/150/200 in turn, on distinct addresses, in zones a and b.
pub fn invokers(n: usize) -> Vec<Invoker> {
    (0..n)
        .map(|i| {
            Invoker::new(i as u64, format!("10.0.{}.{}:20880", i / 250, i % 250))
                .weight(100 + (i % 3) as i32 * 50)
                .zone(if i % 2 == 0 { "a" } else { "b" })
        })
        .collect()
}

/// 4096 distinct 16-byte hash keys, used in rotation.
pub fn keys() -> Vec<[u8; 16]> {
    let mut wy = Wy(7);
    (0..4096)
        .map(|_| (wy.next() as u128 | ((wy.next() as u128) << 64)).to_le_bytes())
        .collect()
}

/// The consistent-hash floor: MD5 of a key plus a binary search over 160·n sorted points, and
/// the found point's invoker.
pub fn bench_md5_ring(
    g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    n: usize,
    keys: &[[u8; 16]],
    wy: &mut Wy,
) {
    use md5::{Digest, Md5};
    let mut points: Vec<u32> = (0..n * 160).map(|_| wy.next() as u32).collect();
    points.sort_unstable();
    // Each point's invoker, beside the points: the lookup ends at it (floors.md).
    let nodes: Vec<u32> = (0..n * 160)
        .map(|_| (wy.next() % n as u64) as u32)
        .collect();
    let mut k = 0;
    g.bench_with_input(criterion::BenchmarkId::new("md5_ring", n), &n, |b, _| {
        b.iter(|| {
            k = (k + 1) & 4095;
            let d = Md5::digest(keys[k]);
            let h = u32::from_le_bytes([d[0], d[1], d[2], d[3]]);
            let i = points.partition_point(|&p| p < h);
            criterion::black_box(nodes[if i == points.len() { 0 } else { i }])
        })
    });
}

/// A simple 64-bit multiply-xorshift hash of a key's two 8-byte words (the hashing floors').
/// Written here, not taken from polylb.
fn key_hash(key: &[u8; 16]) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let lo = u64::from_le_bytes(key[..8].try_into().unwrap());
    let hi = u64::from_le_bytes(key[8..].try_into().unwrap());
    let mut h = (lo ^ 16).wrapping_mul(K);
    h ^= h >> 32;
    h = (h ^ hi).wrapping_mul(K);
    h ^ (h >> 29)
}

/// The table-pick floor (maglev's): the key's hash (`key_hash`), scaled to a 65537-entry table
/// by a multiply-high, one u32 read. Written here, not taken from polylb.
pub fn bench_hash_table(
    g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    n: usize,
    keys: &[[u8; 16]],
    wy: &mut Wy,
) {
    const SIZE: usize = 65537;
    let table: Vec<u32> = (0..SIZE).map(|_| wy.below(n as u64) as u32).collect();
    let mut k = 0;
    g.bench_with_input(criterion::BenchmarkId::new("hash_table", n), &n, |b, _| {
        b.iter(|| {
            k = (k + 1) & 4095;
            let h = key_hash(&keys[k]);
            let slot = ((h as u128 * SIZE as u128) >> 64) as usize;
            criterion::black_box(table[slot])
        })
    });
}

/// The rendezvous floor: the same key hash as `hash_table`'s, then for each of n fixed 64-bit
/// address hashes a xor and a 64-bit finaliser (two multiply-xorshift rounds), keeping the
/// highest: unweighted highest-random-weight hashing with nothing else (a weighted pick can only
/// cost more). Written here, not taken from polylb.
pub fn bench_hrw_scan(
    g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    n: usize,
    keys: &[[u8; 16]],
    wy: &mut Wy,
) {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let addresses: Vec<u64> = (0..n).map(|_| wy.next()).collect();
    let mut k = 0;
    g.bench_with_input(criterion::BenchmarkId::new("hrw_scan", n), &n, |b, _| {
        b.iter(|| {
            k = (k + 1) & 4095;
            let h = key_hash(&keys[k]);
            let mut best = (0u64, 0usize);
            for (i, &a) in addresses.iter().enumerate() {
                let mut z = a ^ h;
                z = (z ^ (z >> 31)).wrapping_mul(K);
                z = (z ^ (z >> 29)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                z ^= z >> 32;
                if z > best.0 {
                    best = (z, i);
                }
            }
            criterion::black_box(best.1)
        })
    });
}

/// The P2C floor of research/floors.md: two distinct random indices, two relaxed loads,
/// `fetch_add` and `fetch_sub` on the winner — a pick with in-flight accounting and nothing else.
pub fn bench_p2c(
    g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    n: usize,
    wy: &mut Wy,
) {
    use std::sync::atomic::{AtomicI64, Ordering};
    let active: Vec<AtomicI64> = (0..n).map(|_| AtomicI64::new(0)).collect();
    g.bench_with_input(criterion::BenchmarkId::new("p2c", n), &n, |b, &n| {
        b.iter(|| {
            let i = wy.below(n as u64) as usize;
            let mut j = wy.below(n as u64 - 1) as usize;
            if j >= i {
                j += 1;
            }
            let (ai, aj) = (
                active[i].load(Ordering::Relaxed),
                active[j].load(Ordering::Relaxed),
            );
            let pick = if aj < ai { j } else { i };
            active[pick].fetch_add(1, Ordering::AcqRel);
            active[pick].fetch_sub(1, Ordering::AcqRel);
            criterion::black_box(pick)
        })
    });
}

/// The orca floor: a bare stride round robin over the weights of [`invokers`] (100/150/200 in
/// turn) scaled so that the heaviest has the full stride — one shared `fetch_add` per turn, a
/// turn taken when the position's accumulator crosses the stride — with no in-flight
/// accounting.
pub fn bench_stride(
    g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    n: usize,
) {
    use std::sync::atomic::{AtomicU64, Ordering};
    const STRIDE: u64 = 1 << 16;
    let shares: Vec<u64> = (0..n)
        .map(|i| ((100 + (i % 3) as u64 * 50) * STRIDE).div_ceil(if n > 2 { 200 } else { 150 }))
        .collect();
    let turn = AtomicU64::new(0);
    g.bench_with_input(criterion::BenchmarkId::new("stride", n), &n, |b, &n| {
        b.iter(|| loop {
            let t = turn.fetch_add(1, Ordering::Relaxed);
            let pos = t % n as u64;
            let share = shares[pos as usize];
            if ((t / n as u64).wrapping_mul(share) & (STRIDE - 1)) + share >= STRIDE {
                break criterion::black_box(pos);
            }
        })
    });
}
