//! Seeded generators: every byte a test writes comes from here (or from a test's own formulas,
//! as the golden containers of `compat.rs` do), reproducible from its seed.
//!
//! Two low-entropy textures exist because the suites' fixtures were tuned on them (dictionary
//! training, compressed and raw records): [`bytes`] (values 0-3 on a ramp that steps every 64
//! bytes) for the API, round-trip and layout suites, [`fine_bytes`] (values 0-2, a step every 48
//! bytes) for the reliability suites. With `low_entropy == false` both give the same noise.

use rand::SeedableRng;
use rand::rngs::SmallRng;

/// Reads a count from the environment (for the long tier), with a default for CI.
pub fn env_count(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A seed: `ZR_SEED` when set (to replay a failure), else fixed per call site.
pub fn seed(default: u64) -> u64 {
    env_count("ZR_SEED", default)
}

/// A small, fast random generator seeded with `seed`.
pub fn rng(seed: u64) -> SmallRng {
    SmallRng::seed_from_u64(seed)
}

/// `n` bytes of an xorshift64 stream seeded with `seed`: noise, or, with a `(values, step)`
/// texture, `x % values` plus a ramp that rises by one every `step` bytes (compressible).
fn xorshift_bytes(n: usize, seed: u64, texture: Option<(u64, usize)>) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|k| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            match texture {
                Some((values, step)) => ((x % values) as u8).wrapping_add((k / step) as u8),
                None => x as u8,
            }
        })
        .collect()
}

/// Deterministic pseudo-random bytes (xorshift), compressible when `low_entropy`.
pub fn bytes(n: usize, seed: u64, low_entropy: bool) -> Vec<u8> {
    xorshift_bytes(n, seed, low_entropy.then_some((4, 64)))
}

/// [`bytes`] with the reliability suites' finer low-entropy texture.
pub fn fine_bytes(n: usize, seed: u64, low_entropy: bool) -> Vec<u8> {
    xorshift_bytes(n, seed, low_entropy.then_some((3, 48)))
}

/// A small dictionary (2 KiB) trained on synthetic samples of [`bytes`].
pub fn small_dict() -> Vec<u8> {
    let samples: Vec<Vec<u8>> = (0..200).map(|k| bytes(300, k, true)).collect();
    zrecord::train_dict_from(&samples, 2048).expect("train")
}

/// A tiny zstd dictionary (1 KiB, so fixtures stay a few KB) trained on [`fine_bytes`].
pub fn tiny_dict() -> Vec<u8> {
    let samples: Vec<Vec<u8>> = (0..120).map(|k| fine_bytes(200, k, true)).collect();
    zrecord::train_dict_from(&samples, 1024).expect("train dict")
}
