//! The first word of the MD5 digest of a short hash key, the only part of it consistent hashing
//! uses (Dubbo's `hash(digest, 0)`): MD5 per RFC 1321 on a single block, without a general
//! hasher's buffering, and stopping after the 61st of the 64 steps, the last one that changes
//! that word. Each step adds the parts that do not depend on the previous step's result first,
//! so that the chain between steps is as short as MD5 allows (four or five operations).
//! Keys longer than one block (over 55 bytes) go to the `md-5` crate.

use md5::{Digest, Md5};

/// Longest key that fits in one block with MD5's padding (0x80 and the 8-byte bit length).
const ONE_BLOCK: usize = 55;

/// Bytes 0..4 of `MD5(key)` as a little-endian u32.
#[inline]
pub(crate) fn md5_first_word(key: &[u8]) -> u32 {
    if key.len() > ONE_BLOCK {
        let digest = Md5::digest(key);
        return u32::from_le_bytes([digest[0], digest[1], digest[2], digest[3]]);
    }
    let mut block = [0u8; 64];
    block[..key.len()].copy_from_slice(key);
    block[key.len()] = 0x80;
    block[56..].copy_from_slice(&((key.len() as u64) * 8).to_le_bytes());
    let mut m = [0u32; 16];
    for (word, bytes) in m.iter_mut().zip(block.chunks_exact(4)) {
        *word = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    }
    first_word(&m)
}

/// `x`, opaque to the optimiser: left alone, LLVM reassociates the step's sum and adds the
/// constant after `F(b, c, d)`, one more operation on the chain between steps (about 12 %
/// slower here). An empty `asm!` costs nothing at run time. Miri cannot run inline assembly:
/// under it `x` passes through (the barrier changes speed, never the value).
#[inline(always)]
#[allow(unused_mut)]
fn early(mut x: u32) -> u32 {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: an empty template that reads and writes one register, nothing else.
    unsafe {
        std::arch::asm!("/* {0:e} */", inout(reg) x, options(pure, nomem, nostack, preserves_flags));
    }
    #[cfg(all(target_arch = "aarch64", not(miri)))]
    // SAFETY: as above.
    unsafe {
        std::arch::asm!("/* {0:w} */", inout(reg) x, options(pure, nomem, nostack, preserves_flags));
    }
    x
}

// One step: `a = b + rotl(a + k + m + F(b, c, d), s)`, with `a + k + m` and every term that
// does not involve `b` (the previous step's result) added before the term that does.

#[inline(always)]
fn f(a: u32, b: u32, c: u32, d: u32, m: u32, k: u32, s: u32) -> u32 {
    // (b & c) | (!b & d), as ((c ^ d) & b) ^ d: two operations after b.
    let early = early(a.wrapping_add(k).wrapping_add(m));
    b.wrapping_add(early.wrapping_add(((c ^ d) & b) ^ d).rotate_left(s))
}

#[inline(always)]
fn g(a: u32, b: u32, c: u32, d: u32, m: u32, k: u32, s: u32) -> u32 {
    // (b & d) | (c & !d): the two terms share no bit, so `|` is `+`, and c & !d goes in early.
    let early = early(a.wrapping_add(k).wrapping_add(m).wrapping_add(c & !d));
    b.wrapping_add(early.wrapping_add(b & d).rotate_left(s))
}

#[inline(always)]
fn h(a: u32, b: u32, c: u32, d: u32, m: u32, k: u32, s: u32) -> u32 {
    let early = early(a.wrapping_add(k).wrapping_add(m));
    b.wrapping_add(early.wrapping_add(b ^ (c ^ d)).rotate_left(s))
}

#[inline(always)]
fn i(a: u32, b: u32, c: u32, d: u32, m: u32, k: u32, s: u32) -> u32 {
    let early = early(a.wrapping_add(k).wrapping_add(m));
    b.wrapping_add(early.wrapping_add(c ^ (b | !d)).rotate_left(s))
}

#[rustfmt::skip]
fn first_word(m: &[u32; 16]) -> u32 {
    let (mut a, mut b, mut c, mut d) = (0x6745_2301u32, 0xefcd_ab89u32, 0x98ba_dcfeu32, 0x1032_5476u32);
    a = f(a, b, c, d, m[0], 0xd76aa478, 7);
    d = f(d, a, b, c, m[1], 0xe8c7b756, 12);
    c = f(c, d, a, b, m[2], 0x242070db, 17);
    b = f(b, c, d, a, m[3], 0xc1bdceee, 22);
    a = f(a, b, c, d, m[4], 0xf57c0faf, 7);
    d = f(d, a, b, c, m[5], 0x4787c62a, 12);
    c = f(c, d, a, b, m[6], 0xa8304613, 17);
    b = f(b, c, d, a, m[7], 0xfd469501, 22);
    a = f(a, b, c, d, m[8], 0x698098d8, 7);
    d = f(d, a, b, c, m[9], 0x8b44f7af, 12);
    c = f(c, d, a, b, m[10], 0xffff5bb1, 17);
    b = f(b, c, d, a, m[11], 0x895cd7be, 22);
    a = f(a, b, c, d, m[12], 0x6b901122, 7);
    d = f(d, a, b, c, m[13], 0xfd987193, 12);
    c = f(c, d, a, b, m[14], 0xa679438e, 17);
    b = f(b, c, d, a, m[15], 0x49b40821, 22);
    a = g(a, b, c, d, m[1], 0xf61e2562, 5);
    d = g(d, a, b, c, m[6], 0xc040b340, 9);
    c = g(c, d, a, b, m[11], 0x265e5a51, 14);
    b = g(b, c, d, a, m[0], 0xe9b6c7aa, 20);
    a = g(a, b, c, d, m[5], 0xd62f105d, 5);
    d = g(d, a, b, c, m[10], 0x02441453, 9);
    c = g(c, d, a, b, m[15], 0xd8a1e681, 14);
    b = g(b, c, d, a, m[4], 0xe7d3fbc8, 20);
    a = g(a, b, c, d, m[9], 0x21e1cde6, 5);
    d = g(d, a, b, c, m[14], 0xc33707d6, 9);
    c = g(c, d, a, b, m[3], 0xf4d50d87, 14);
    b = g(b, c, d, a, m[8], 0x455a14ed, 20);
    a = g(a, b, c, d, m[13], 0xa9e3e905, 5);
    d = g(d, a, b, c, m[2], 0xfcefa3f8, 9);
    c = g(c, d, a, b, m[7], 0x676f02d9, 14);
    b = g(b, c, d, a, m[12], 0x8d2a4c8a, 20);
    a = h(a, b, c, d, m[5], 0xfffa3942, 4);
    d = h(d, a, b, c, m[8], 0x8771f681, 11);
    c = h(c, d, a, b, m[11], 0x6d9d6122, 16);
    b = h(b, c, d, a, m[14], 0xfde5380c, 23);
    a = h(a, b, c, d, m[1], 0xa4beea44, 4);
    d = h(d, a, b, c, m[4], 0x4bdecfa9, 11);
    c = h(c, d, a, b, m[7], 0xf6bb4b60, 16);
    b = h(b, c, d, a, m[10], 0xbebfbc70, 23);
    a = h(a, b, c, d, m[13], 0x289b7ec6, 4);
    d = h(d, a, b, c, m[0], 0xeaa127fa, 11);
    c = h(c, d, a, b, m[3], 0xd4ef3085, 16);
    b = h(b, c, d, a, m[6], 0x04881d05, 23);
    a = h(a, b, c, d, m[9], 0xd9d4d039, 4);
    d = h(d, a, b, c, m[12], 0xe6db99e5, 11);
    c = h(c, d, a, b, m[15], 0x1fa27cf8, 16);
    b = h(b, c, d, a, m[2], 0xc4ac5665, 23);
    a = i(a, b, c, d, m[0], 0xf4292244, 6);
    d = i(d, a, b, c, m[7], 0x432aff97, 10);
    c = i(c, d, a, b, m[14], 0xab9423a7, 15);
    b = i(b, c, d, a, m[5], 0xfc93a039, 21);
    a = i(a, b, c, d, m[12], 0x655b59c3, 6);
    d = i(d, a, b, c, m[3], 0x8f0ccc92, 10);
    c = i(c, d, a, b, m[10], 0xffeff47d, 15);
    b = i(b, c, d, a, m[1], 0x85845dd1, 21);
    a = i(a, b, c, d, m[8], 0x6fa87e4f, 6);
    d = i(d, a, b, c, m[15], 0xfe2ce6e0, 10);
    c = i(c, d, a, b, m[6], 0xa3014314, 15);
    b = i(b, c, d, a, m[13], 0x4e0811a1, 21);
    a = i(a, b, c, d, m[4], 0xf7537e82, 6);
    a.wrapping_add(0x6745_2301)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(key: &[u8]) -> u32 {
        let d = Md5::digest(key);
        u32::from_le_bytes([d[0], d[1], d[2], d[3]])
    }

    #[test]
    fn equals_md5_for_every_length_and_random_contents() {
        // RFC 1321's own test suite: MD5("") = d41d8cd9..., MD5("abc") = 90015098...
        assert_eq!(
            md5_first_word(b""),
            u32::from_le_bytes([0xd4, 0x1d, 0x8c, 0xd9])
        );
        assert_eq!(
            md5_first_word(b"abc"),
            u32::from_le_bytes([0x90, 0x01, 0x50, 0x98])
        );
        let rng = crate::rng::seeded_for_test(7);
        for len in 0..=130 {
            for _ in 0..50 {
                let key: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
                assert_eq!(md5_first_word(&key), reference(&key), "length {len}");
            }
        }
    }
}
