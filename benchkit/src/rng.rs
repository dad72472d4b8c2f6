//! Seeded generation: [`SplitMix64`], the generator of the synthetic corpora and the benches'
//! fixtures (the same seed gives the same bytes on every machine and build), and
//! [`uniform_batch`], the batch draw every table and probe times (with whichever `rand`
//! generator the caller seeded).

use rand::Rng;

/// SplitMix64 (Steele, Lea and Flood; the seeding generator of the xoshiro family): a 64-bit
/// counter stepped by the golden ratio and mixed, so any seed, zero included, starts a good
/// sequence.
#[derive(Clone, Debug)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// The generator whose sequence `seed` names.
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64 { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n > 0`; the modulo bias is below 2^-40 for every `n` used here).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// A uniform `f64` in `[0, 1)` (53 random bits).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Fills `out` with image-like bytes: a slow ramp (`k / 7`) with 4 bits of noise, which
    /// compresses a little, as decoded photos do.
    pub fn image_like(&mut self, out: &mut [u8]) {
        for (k, b) in out.iter_mut().enumerate() {
            *b = (k / 7) as u8 ^ (self.next_u64() & 15) as u8;
        }
    }
}

/// `count` record indices drawn uniformly from `0..n` (`n > 0`): one random batch.
pub fn uniform_batch<R: Rng>(rng: &mut R, n: u64, count: usize) -> Vec<u64> {
    (0..count).map(|_| rng.random_range(0..n)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::SmallRng;

    #[test]
    fn the_sequence_is_splitmix64() {
        // The reference sequence of seed 0 (Vigna's splitmix64.c).
        let mut r = SplitMix64::new(0);
        assert_eq!(r.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(r.next_u64(), 0x6E78_9E6A_A1B9_65F4);
        let mut r = SplitMix64::new(42);
        for _ in 0..1000 {
            assert!(r.below(7) < 7);
            let u = r.unit();
            assert!((0.0..1.0).contains(&u));
        }
    }

    #[test]
    fn image_like_bytes_follow_the_ramp() {
        let mut b = [0u8; 64];
        SplitMix64::new(5).image_like(&mut b);
        for (k, &x) in b.iter().enumerate() {
            assert_eq!(x & !15, (k / 7) as u8 & !15, "byte {k}");
        }
    }

    #[test]
    fn batches_are_in_range_and_reproducible() {
        let draw = |seed| uniform_batch(&mut SmallRng::seed_from_u64(seed), 10, 256);
        let a = draw(7);
        assert_eq!(a.len(), 256);
        assert!(a.iter().all(|&i| i < 10));
        assert_eq!(a, draw(7));
        assert_ne!(a, draw(8));
    }
}
