//! What the loaderx benches share: settings read from the environment and the ratio column of
//! the tables they print after their interleaved rounds.

use benchkit::stats::median;

/// The number in environment variable `var`, else `default`.
pub fn env_or<T: std::str::FromStr>(var: &str, default: T) -> T {
    std::env::var(var)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// The median over rounds of `num[r] / den[r]`: a row's ratio to the reference row, taken round
/// by round so that a drift of the machine hits both sides alike.
pub fn median_ratio(num: &[f64], den: &[f64]) -> f64 {
    let ratios: Vec<f64> = num.iter().zip(den).map(|(a, b)| a / b).collect();
    median(&ratios)
}
