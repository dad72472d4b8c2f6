//! The gate's test on one path's paired ratios (candidate / baseline throughput, one per pair).
//! **Decision**: the one-sided [`CONFIDENCE`] upper bound of the median ratio is the order
//! statistic `r_(k)` with the smallest `k` such that `P(Bin(n, 1/2) <= k - 1) >= CONFIDENCE`
//! (distribution-free); the path fails when it is below [`THRESHOLD`] (the data show, at that
//! confidence, a candidate more than 10 % slower) or when fewer than [`MIN_PAIRS`] pairs cannot
//! bound it. **Reported**: the sign test, how many pairs were slower and `P(Bin(n, 1/2) >= slower)`.

use benchkit::stats::median;
use serde::Serialize;

pub const CONFIDENCE: f64 = 0.95;
pub const THRESHOLD: f64 = 0.90;
/// The fewest pairs whose largest ratio is an upper bound at [`CONFIDENCE`] (`1 - 2^-5`).
pub const MIN_PAIRS: usize = 5;

/// `P(Bin(n, 1/2) <= k)`.
fn binom_cdf_half(n: usize, k: usize) -> f64 {
    let mut c = 1.0f64; // C(n, 0)
    let mut sum = 0.0;
    for i in 0..=k.min(n) {
        if i > 0 {
            c = c * (n + 1 - i) as f64 / i as f64;
        }
        sum += c;
    }
    sum / 2f64.powi(n as i32)
}

/// The 1-based rank of the order statistic that bounds the median from above at `conf`, or
/// `None` when even the largest of `n` does not.
pub fn upper_rank(n: usize, conf: f64) -> Option<usize> {
    (1..=n).find(|&k| binom_cdf_half(n, k - 1) >= conf)
}

/// One path's verdict on the ratios of one figure (`metric`: `wall`, timed batches per second,
/// or `cpu`, per CPU second): the bound and its 1-based rank among the sorted ratios (`None`: too
/// few pairs), the sign test's one-sided p-value of "the candidate is slower", and whether this
/// verdict decides the gate or is reported beside it.
#[derive(Clone, Debug, Serialize)]
pub struct Verdict {
    pub path: String,
    pub metric: String,
    pub pairs: usize,
    pub median_ratio: f64,
    pub upper_bound: Option<f64>,
    pub upper_rank: Option<usize>,
    pub slower_pairs: usize,
    pub sign_p: f64,
    pub pass: bool,
    pub deciding: bool,
}

impl Verdict {
    /// The verdict on `ratios` (candidate / baseline) of `path`'s `metric`, deciding the gate or
    /// reported beside it.
    pub fn of(path: &str, metric: &str, deciding: bool, ratios: &[f64]) -> Verdict {
        let mut r: Vec<f64> = ratios.to_vec();
        r.sort_by(f64::total_cmp);
        let n = r.len();
        let rank = upper_rank(n, CONFIDENCE);
        let upper_bound = rank.map(|k| r[k - 1]);
        let slower = r.iter().filter(|&&x| x < 1.0).count();
        // P(Bin(n, 1/2) >= slower) = 1 - P(<= slower - 1).
        let sign_p = 1.0 - slower.checked_sub(1).map_or(0.0, |k| binom_cdf_half(n, k));
        Verdict {
            path: path.to_string(),
            metric: metric.to_string(),
            pairs: n,
            median_ratio: median(&r),
            upper_bound,
            upper_rank: rank,
            slower_pairs: slower,
            sign_p,
            pass: upper_bound.is_some_and(|u| u >= THRESHOLD),
            deciding,
        }
    }

    /// One line for the log.
    pub fn line(&self) -> String {
        let bound = match (self.upper_bound, self.upper_rank) {
            (Some(u), Some(k)) => format!("{u:.3} (ratio {k} of {})", self.pairs),
            _ => format!("none ({} pairs; at least {MIN_PAIRS} needed)", self.pairs),
        };
        format!(
            "{} ({}): {} — median ratio {:.3}, {:.0} % upper bound {bound} vs {THRESHOLD}; sign test: {} of {} pairs slower, p = {:.4}",
            self.path,
            self.metric,
            match (self.pass, self.deciding) {
                (true, _) => "pass",
                (false, true) => "FAIL",
                (false, false) => "below (reported, not deciding)",
            },
            self.median_ratio,
            CONFIDENCE * 100.0,
            self.slower_pairs,
            self.pairs,
            self.sign_p,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    /// Seeded multiplicative noise of relative SD `sd` (a sum of 4 uniforms, roughly normal).
    fn noisy(center: f64, sd: f64, n: usize, seed: u64) -> Vec<f64> {
        let mut rng = SmallRng::seed_from_u64(seed);
        let z =
            |r: &mut SmallRng| (0..4).map(|_| r.random::<f64>() - 0.5).sum::<f64>() * 3f64.sqrt();
        (0..n).map(|_| center * (1.0 + sd * z(&mut rng))).collect()
    }

    #[test]
    fn the_bound_is_the_exact_binomial_order_statistic() {
        assert_eq!(upper_rank(4, CONFIDENCE), None);
        assert_eq!(upper_rank(MIN_PAIRS, CONFIDENCE), Some(5));
        // P(Bin(12, 1/2) <= 8) = 0.927, <= 9 = 0.981.
        assert_eq!(upper_rank(12, CONFIDENCE), Some(10));
        assert_eq!(upper_rank(16, CONFIDENCE), Some(12));
        assert!((binom_cdf_half(12, 8) - 0.92700195).abs() < 1e-6);
        assert!((binom_cdf_half(3, 3) - 1.0).abs() < 1e-12);
    }

    #[test]
    fn an_unchanged_candidate_passes_and_a_25_percent_slower_one_fails() {
        for seed in 0..50 {
            for sd in [0.03, 0.06] {
                let same = Verdict::of("p", "wall", true, &noisy(1.0, sd, 12, seed));
                assert!(same.pass, "sd {sd} seed {seed}: {}", same.line());
                // 25 % more work: throughput / 1.25.
                let slow = Verdict::of("p", "wall", true, &noisy(1.0 / 1.25, sd, 12, seed));
                assert!(!slow.pass, "sd {sd} seed {seed}: {}", slow.line());
                assert!(slow.sign_p < 0.05, "{}", slow.line());
            }
        }
    }

    #[test]
    fn a_few_slow_pairs_do_not_fail_a_path() {
        // Three of twelve pairs hit by a neighbour's burst (0.5x): the median bound ignores them.
        let mut r = vec![1.0, 1.02, 0.98, 1.01, 0.99, 1.03, 0.97, 1.0, 1.0];
        r.extend([0.5, 0.5, 0.5]);
        let v = Verdict::of("p", "wall", true, &r);
        assert!(v.pass, "{}", v.line());
        assert_eq!(v.slower_pairs, 6);
    }

    #[test]
    fn too_few_pairs_fail() {
        let v = Verdict::of("p", "wall", true, &[1.0, 1.0, 1.0, 1.0]);
        assert!(!v.pass && v.upper_bound.is_none(), "{}", v.line());
        assert!(v.line().contains("at least 5 needed"));
        assert!(!Verdict::of("p", "wall", true, &[]).pass);
    }

    #[test]
    fn the_sign_test_counts_slower_pairs() {
        let v = Verdict::of("p", "wall", true, &[0.8; 6]);
        assert_eq!(v.slower_pairs, 6);
        assert!((v.sign_p - 1.0 / 64.0).abs() < 1e-12);
        assert!(!v.pass);
        let v = Verdict::of("p", "wall", true, &[1.1; 6]);
        assert_eq!((v.slower_pairs, v.sign_p), (0, 1.0));
        assert!(v.pass);
    }
}
