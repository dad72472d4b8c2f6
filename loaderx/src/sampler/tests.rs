//! Unit tests of the sampler's private kernels: the Feistel bijection, the SIMD kernels against the
//! portable permutation, and the range reduction.

use super::domain::{Domain, positions};
use super::feistel::Feistel;
use super::*;

#[test]
fn feistel_is_a_bijection_on_its_domain() {
    for len in [1u64, 2, 3, 5, 16, 17, 100, 1000, 4097] {
        let f = Feistel::for_len(len);
        let domain = 1u64 << (32 - f.left_align + f.right_bits);
        assert!(
            domain >= len && domain < 4 * len.max(2),
            "len {len} domain {domain}"
        );
        let keys = RoundKeys {
            pre: [1, 2, 3, 4],
            mid: [5, 6, 7, 8],
        };
        let mut seen = vec![false; domain as usize];
        for x in 0..domain {
            let y = f.permute(x, &keys);
            assert!(y < domain);
            assert!(!seen[y as usize], "len {len}: collision at {y}");
            seen[y as usize] = true;
        }
    }
}

#[test]
fn simd_kernels_match_the_portable_permutation() {
    for len in [
        16u64,
        17,
        100,
        1000,
        4097,
        (1 << 20) + 1,
        1 << 40,
        (1 << 63) + 5,
        u64::MAX,
    ] {
        let sampler = IndexSampler::new(len, 1, Mode::Cyclic, 7).unwrap();
        let plan = sampler.plan;
        for cycle in [0u64, 1, 1 << 50] {
            let keys = plan.cycle_keys(cycle);
            for (p0, n) in [(0u64, 16usize), (0, 64), (len / 3, 100), (len - 16, 16)] {
                let n = n.min((len - p0) as usize);
                let mut want = vec![0; n];
                let d = plan.domain;
                d.permute_with(Some(p0), &mut want, |first, x| {
                    positions(first, x);
                    d.feistel.permute_lanes(x, &keys);
                    d.outside_mask(x)
                });
                assert!(want.iter().all(|&i| i < len), "len {len}");
                let distinct: std::collections::HashSet<_> = want.iter().collect();
                assert_eq!(distinct.len(), n, "len {len}");
                #[cfg(target_arch = "x86_64")]
                {
                    let mut got = vec![0; n];
                    // SAFETY: SSE2 is part of the x86-64 baseline.
                    unsafe { d.permute_sse2(&keys, Some(p0), &mut got) };
                    assert_eq!(got, want, "sse2, len {len} p0 {p0}");
                    if std::is_x86_feature_detected!("avx2") {
                        // SAFETY: AVX2 support was just checked.
                        unsafe { d.permute_avx2(&keys, Some(p0), &mut got) };
                        assert_eq!(got, want, "avx2, len {len} p0 {p0}");
                    }
                }
            }
        }
    }
}

#[test]
fn reduce_stays_in_range() {
    for len in [1u64, 2, 3, 7, 1 << 40, u64::MAX] {
        for h in [0u64, 1, u64::MAX, 0x8000_0000_0000_0000, 12345] {
            assert!(reduce(h, len) < len);
        }
    }
}

#[test]
fn permuting_values_is_permuting_their_positions() {
    // `permute(keys, None, v)` (Block's block ids) is π of each value, whatever kernel runs.
    for len in [1u64, 3, 17, 1000, (1 << 20) + 1] {
        let d = Domain::new(len);
        let keys = round_keys(0x1234_5678);
        let values: Vec<u64> = (0..70u64).map(|i| (i * 7919 + 3) % len).collect();
        let mut got = values.clone();
        d.permute(&keys, None, &mut got);
        for (&v, &g) in values.iter().zip(&got) {
            let mut one = [0u64];
            d.permute(&keys, Some(v), &mut one);
            assert_eq!(g, one[0], "len {len} value {v}");
        }
        let mut portable = values.clone();
        d.permute_with(None, &mut portable, |first, x| {
            positions(first, x);
            d.feistel.permute_lanes(x, &keys);
            d.outside_mask(x)
        });
        assert_eq!(portable, got, "len {len}");
    }
}
