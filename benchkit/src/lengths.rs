//! Corpus-shaped record lengths: a distribution given by a few quantiles of a real corpus and
//! drawn through its piecewise-linear inverse CDF ([`Quantiles`]). [`WIKITEXT_103_TOKENS`] is the
//! one the token benches and the synthetic token corpus draw (the Python handoff bench,
//! `scripts/ragged_handoff.py`, interpolates the same knots with `np.interp`).

use crate::rng::SplitMix64;

/// A length distribution as `(cumulative probability, length)` knots: probabilities from 0 to 1
/// and lengths, both ascending; between knots the inverse CDF is linear.
#[derive(Clone, Copy, Debug)]
pub struct Quantiles {
    knots: &'static [(f64, f64)],
}

/// Token counts of WikiText-103 records under the project's Ragged rule (GPT-2 tokens; p10 28,
/// median 127, p90 253, at most 512, as `datasets`' token tests measure on the real corpus); the
/// lower tail is stretched down to 1 token. Mean about 147.
pub const WIKITEXT_103_TOKENS: Quantiles = Quantiles {
    knots: &[
        (0.0, 1.0),
        (0.1, 28.0),
        (0.5, 127.0),
        (0.9, 253.0),
        (1.0, 512.0),
    ],
};

impl Quantiles {
    /// The length at cumulative probability `u` (clamped to `[0, 1]`).
    pub fn at(&self, u: f64) -> f64 {
        let u = u.clamp(0.0, 1.0);
        for w in self.knots.windows(2) {
            let ((u0, a), (u1, b)) = (w[0], w[1]);
            if u <= u1 {
                return a + (b - a) * (u - u0) / (u1 - u0);
            }
        }
        self.knots.last().map_or(0.0, |k| k.1)
    }

    /// One length drawn from the distribution, rounded, at least 1.
    pub fn draw(&self, rng: &mut SplitMix64) -> usize {
        self.at(rng.unit()).round().max(1.0) as usize
    }

    /// `n` lengths drawn with a generator seeded `seed`.
    pub fn sample(&self, n: usize, seed: u64) -> Vec<usize> {
        let mut rng = SplitMix64::new(seed);
        (0..n).map(|_| self.draw(&mut rng)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn knots_are_hit_and_draws_have_the_corpus_quantiles() {
        let q = WIKITEXT_103_TOKENS;
        assert_eq!(q.at(0.1), 28.0);
        assert_eq!(q.at(0.5), 127.0);
        assert_eq!(q.at(1.0), 512.0);
        assert_eq!(q.at(-3.0), 1.0);
        assert_eq!(q.at(0.3), 77.5);
        let mut v = q.sample(100_000, 11);
        v.sort_unstable();
        let near = |got: usize, want: usize| got.abs_diff(want) <= want / 20 + 1;
        assert!(near(v[10_000], 28), "p10 {}", v[10_000]);
        assert!(near(v[50_000], 127), "median {}", v[50_000]);
        assert!(near(v[90_000], 253), "p90 {}", v[90_000]);
        assert!(v[0] >= 1 && v[99_999] <= 512);
        let mean = v.iter().sum::<usize>() as f64 / v.len() as f64;
        assert!((mean - 146.7).abs() < 2.0, "mean {mean}");
        assert_eq!(q.sample(10, 3), q.sample(10, 3));
    }
}
