//! The simulator's own deterministic random numbers: splitmix64 plus the few distributions the
//! models need. Independent of the library's generator, so the world is the same for every
//! policy under one seed (each stream is derived from the seed and a purpose tag).

#[derive(Clone, Debug)]
pub struct SimRng {
    state: u64,
    spare_normal: Option<f64>,
}

/// Mixes a seed and a tag into an independent stream seed.
pub fn derive(seed: u64, tag: u64) -> u64 {
    let mut r = SimRng::new(seed ^ tag.wrapping_mul(0xD1B5_4A32_D192_ED03));
    r.next_u64()
}

impl SimRng {
    pub fn new(seed: u64) -> SimRng {
        SimRng {
            state: seed ^ 0x5851_F42D_4C95_7F2D,
            spare_normal: None,
        }
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1) with 53 random bits.
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in (0, 1]: safe under a logarithm.
    fn open_uniform(&mut self) -> f64 {
        1.0 - self.uniform()
    }

    /// Uniform integer in [0, n).
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }

    pub fn chance(&mut self, p: f64) -> bool {
        self.uniform() < p
    }

    pub fn exponential(&mut self, mean: f64) -> f64 {
        -mean * self.open_uniform().ln()
    }

    pub fn standard_normal(&mut self) -> f64 {
        if let Some(z) = self.spare_normal.take() {
            return z;
        }
        // Box-Muller: two independent normals per pair of uniforms.
        let r = (-2.0 * self.open_uniform().ln()).sqrt();
        let theta = std::f64::consts::TAU * self.uniform();
        self.spare_normal = Some(r * theta.sin());
        r * theta.cos()
    }
}

/// A finite Zipf distribution over ranks 0..n (rank 0 the hottest): P(k) ∝ 1/(k+1)^s.
#[derive(Clone, Debug)]
pub struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    pub fn new(n: usize, s: f64) -> Zipf {
        let mut cdf = Vec::with_capacity(n);
        let mut total = 0.0;
        for k in 0..n {
            total += 1.0 / ((k + 1) as f64).powf(s);
            cdf.push(total);
        }
        for c in cdf.iter_mut() {
            *c /= total;
        }
        Zipf { cdf }
    }

    pub fn sample(&self, rng: &mut SimRng) -> usize {
        let u = rng.uniform();
        self.cdf
            .partition_point(|&c| c <= u)
            .min(self.cdf.len() - 1)
    }

    /// Number of ranks.
    pub fn support(&self) -> usize {
        self.cdf.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn means_are_right() {
        let mut r = SimRng::new(7);
        let n = 200_000;
        let e: f64 = (0..n).map(|_| r.exponential(3.0)).sum::<f64>() / n as f64;
        assert!((e - 3.0).abs() < 0.05, "{e}");
        let z = Zipf::new(1000, 1.0);
        let hot = (0..n).filter(|_| z.sample(&mut r) == 0).count() as f64 / n as f64;
        assert!((hot - 0.1336).abs() < 0.005, "{hot}");
    }
}
