//! Summary statistics, each defined once. A location of no values (median, mean, percentile) is
//! NaN: there is none, and 0 would read as a measurement (the reports print NaN as a dash). A
//! spread of fewer than two values is 0: none was measured.

/// The median (the mean of the two middle values for an even count); NaN for no values.
pub fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let s = sorted(v);
    let m = s.len() / 2;
    if s.len() % 2 == 1 {
        s[m]
    } else {
        (s[m - 1] + s[m]) / 2.0
    }
}

/// The arithmetic mean; NaN for no values.
pub fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.iter().sum::<f64>() / v.len() as f64
}

/// The sample standard deviation (n - 1 in the denominator); 0 for fewer than two values.
pub fn sample_sd(v: &[f64]) -> f64 {
    if v.len() < 2 {
        return 0.0;
    }
    let m = mean(v);
    (v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (v.len() - 1) as f64).sqrt()
}

/// The `p` quantile (`p` in `[0, 1]`) as the value of rank `round((n - 1) * p)` among the `n`
/// values in ascending order (no interpolation: always a measured value); NaN for no values.
pub fn percentile(v: &[f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let s = sorted(v);
    let k = ((s.len() - 1) as f64 * p.clamp(0.0, 1.0)).round() as usize;
    s[k.min(s.len() - 1)]
}

fn sorted(v: &[f64]) -> Vec<f64> {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_mean_and_sd() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(mean(&[1.0, 2.0, 6.0]), 3.0);
        assert!((sample_sd(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]) - 2.138).abs() < 1e-3);
        assert_eq!(sample_sd(&[1.0]), 0.0);
        assert_eq!(sample_sd(&[]), 0.0);
    }

    #[test]
    fn percentiles_are_measured_values_by_rank() {
        let v: Vec<f64> = (1..=21).rev().map(f64::from).collect();
        assert_eq!(percentile(&v, 0.5), 11.0);
        assert_eq!(percentile(&v, 0.95), 20.0);
        assert_eq!(percentile(&v, 0.0), 1.0);
        assert_eq!(percentile(&v, 1.0), 21.0);
        assert_eq!(percentile(&[4.0], 0.95), 4.0);
        // Rank round(3 * 0.5) = 2 of [1, 2, 3, 4].
        assert_eq!(percentile(&[4.0, 1.0, 3.0, 2.0], 0.5), 3.0);
    }

    #[test]
    fn no_values_have_no_location() {
        assert!(median(&[]).is_nan());
        assert!(mean(&[]).is_nan());
        assert!(percentile(&[], 0.5).is_nan());
    }
}
