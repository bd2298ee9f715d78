//! The stable 64-bit hashes that decide where keys and subsets land (`maglev`'s table,
//! `rendezvous`' scores, `subset.*`): part of the contract, the same in every version, on every
//! platform and from every language, so none of them may change.

/// A 64-bit hash of `bytes`, stable across versions and platforms (it decides which invoker a
/// key maps to): 8-byte little-endian words, the last one zero-padded, each folded in by a
/// multiply and rotate, the length in the seed, then murmur3's 64-bit finalizer for avalanche.
pub(crate) fn hash64(bytes: &[u8], seed: u64) -> u64 {
    const K1: u64 = 0x9e37_79b9_7f4a_7c15;
    const K2: u64 = 0xc2b2_ae3d_27d4_eb4f;
    let mut h = seed ^ (bytes.len() as u64).wrapping_mul(K1);
    let mut words = bytes.chunks_exact(8);
    let fold = |h: u64, word: u64| (h ^ word.wrapping_mul(K2)).rotate_left(27).wrapping_mul(K1);
    for word in &mut words {
        h = fold(h, u64::from_le_bytes(word.try_into().expect("8 bytes")));
    }
    let tail = words.remainder();
    if !tail.is_empty() {
        let mut last = [0u8; 8];
        last[..tail.len()].copy_from_slice(tail);
        h = fold(h, u64::from_le_bytes(last));
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// SplitMix64's finaliser, a full avalanche of one word: rendezvous scores mix a key's hash
/// into an address's, and two keys' rankings are independent only if every bit of both counts.
#[inline]
pub(crate) fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash64_depends_on_every_byte_and_the_length() {
        let base = hash64(b"user-1234567890", 0);
        assert_ne!(base, hash64(b"user-1234567891", 0));
        assert_ne!(base, hash64(b"user-123456789", 0));
        assert_ne!(hash64(b"a", 0), hash64(b"a\0", 0));
        assert_ne!(hash64(b"", 0), hash64(b"", 1));
        // Flipping one input bit flips about half the output bits.
        let mut flips = 0;
        for bit in 0..64 {
            let a = hash64(&(1u64 << 40).to_le_bytes(), 0);
            let b = hash64(&((1u64 << 40) ^ (1 << bit)).to_le_bytes(), 0);
            flips += (a ^ b).count_ones();
        }
        let mean = flips as f64 / 64.0;
        assert!((28.0..36.0).contains(&mean), "mean flipped bits {mean}");
    }

    #[test]
    fn mix64_is_splitmix64s_finaliser() {
        // splitmix64's first output from seed 0 is mix64(0x9e3779b97f4a7c15).
        assert_eq!(mix64(0x9e37_79b9_7f4a_7c15), 0xe220_a839_7b1d_cdaf);
        assert_eq!(mix64(0), 0);
    }
}
