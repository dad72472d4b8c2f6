//! Tests of the CRC32C paths: every kernel against the `crc32c` crate, for every length class
//! and seed, and the copies byte for byte.

fn buf(n: usize) -> Vec<u8> {
    (0..n as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect()
}

#[test]
fn matches_the_reference_crc32c_for_every_length_and_seed() {
    let buf = buf(40_000);
    for len in (0..2100).chain([4095, 4096, 4097, 8191, 9000, 32_767, 32_768, 40_000]) {
        for seed in [0u32, 1, 0x1234_5678, 0xdead_beef, u32::MAX] {
            assert_eq!(
                super::append(seed, &buf[..len]),
                crc32c::crc32c_append(seed, &buf[..len]),
                "len {len} seed {seed:#x}"
            );
        }
    }
}

#[test]
fn append_u64_matches_the_bytewise_crc() {
    for seed in [0u32, 1, 0x1234_5678, u32::MAX] {
        for v in [0u64, 1, 0xff, 1 << 40, u64::MAX, 0x0123_4567_89ab_cdef] {
            assert_eq!(
                super::append_u64(seed, v),
                crc32c::crc32c_append(seed, &v.to_le_bytes()),
                "seed {seed:#x} value {v:#x}"
            );
        }
    }
}

#[test]
fn copy_append_copies_exactly_and_matches_the_reference() {
    let src = buf(20_100);
    for len in (0..1400).chain([2047, 2048, 2049, 4096, 8191, 16_384, 19_999]) {
        for offset in [0usize, 1, 7, 64] {
            let s = &src[offset..offset + len];
            for seed in [0u32, 0x1234_5678, u32::MAX] {
                let mut dst = vec![0xA5u8; len + 3];
                let got = super::copy_append(seed, &mut dst[1..len + 1], s);
                assert_eq!(
                    got,
                    crc32c::crc32c_append(seed, s),
                    "len {len} offset {offset} seed {seed:#x}"
                );
                assert_eq!(&dst[1..len + 1], s, "len {len} offset {offset}");
                assert_eq!((dst[0], dst[len + 1]), (0xA5, 0xA5), "wrote outside");
                // Streaming stores, and the plain copy with streaming stores.
                let mut dst = vec![0xA5u8; len + 3];
                let got = super::copy_append_with(
                    seed,
                    &mut dst[1..len + 1],
                    s,
                    super::Stores::Streaming,
                );
                assert_eq!(got, crc32c::crc32c_append(seed, s), "streaming len {len}");
                assert_eq!(&dst[1..len + 1], s, "streaming len {len} offset {offset}");
                assert_eq!((dst[0], dst[len + 1]), (0xA5, 0xA5), "wrote outside");
                let mut dst = vec![0xA5u8; len + 3];
                super::copy_with(&mut dst[1..len + 1], s, super::Stores::Streaming);
                assert_eq!(&dst[1..len + 1], s, "plain streaming len {len}");
                assert_eq!((dst[0], dst[len + 1]), (0xA5, 0xA5), "wrote outside");
                // The AVX2 kernels directly (a CPU with AVX-512 takes the wider one for
                // cached stores), at both destination alignments the gather produces.
                #[cfg(target_arch = "x86_64")]
                if len >= 64 && super::x86::kernel() != super::x86::Kernel::None {
                    for shift in [0usize, 5] {
                        let mut dst = vec![0u8; len + 64];
                        let at = (32 - (dst.as_ptr() as usize & 31)) % 32 + shift;
                        let d = &mut dst[at..at + len];
                        // SAFETY: the kernel's features were detected; equal lengths >= 64.
                        let got = unsafe { super::x86::copy_append_avx2::<true>(seed, d, s) };
                        assert_eq!(got, crc32c::crc32c_append(seed, s), "avx2 stream {len}");
                        assert_eq!(&*d, s, "avx2 stream len {len} shift {shift}");
                        // SAFETY: as above.
                        let got = unsafe { super::x86::copy_append_avx2::<false>(seed, d, s) };
                        assert_eq!(got, crc32c::crc32c_append(seed, s), "avx2 cached {len}");
                        // SAFETY: as above (the checksum-only kernel reads `s` alone).
                        let got = unsafe { super::x86::append_avx2(seed, s) };
                        assert_eq!(got, crc32c::crc32c_append(seed, s), "avx2 crc {len}");
                    }
                }
                // The word-at-a-time path (what CPUs without AVX-512 take) for every length.
                #[cfg(target_arch = "x86_64")]
                if std::arch::is_x86_feature_detected!("sse4.2") {
                    let mut dst = vec![0u8; len];
                    // SAFETY: SSE4.2 is present; equal lengths.
                    let got = unsafe { super::x86::copy_append_sse42(seed, &mut dst, s) };
                    assert_eq!(got, crc32c::crc32c_append(seed, s), "sse4.2 len {len}");
                    assert_eq!(dst, s);
                }
            }
        }
    }
}

#[test]
fn append_each_matches_one_append_per_buffer_for_every_length_mix() {
    let src = buf(40_000);
    let lens = [
        0usize, 1, 7, 8, 9, 15, 16, 63, 64, 540, 541, 2047, 4096, 32_767, 32_768,
    ];
    // Every ordered triple, then longer runs whose lanes refill at different times.
    let mut cases: Vec<Vec<usize>> = Vec::new();
    for &a in &lens {
        for &b in &lens {
            for &c in &lens {
                cases.push(vec![a, b, c]);
            }
        }
    }
    cases.extend([
        vec![],
        vec![5],
        vec![540, 9],
        (0..70).map(|i| (i * 37) % 700).collect(),
    ]);
    cases.push((0..64).map(|i| [3usize, 600, 64, 0, 1500][i % 5]).collect());
    for lengths in cases {
        let items: Vec<(u32, &[u8])> = lengths
            .iter()
            .enumerate()
            .map(|(k, &n)| ((k as u32).wrapping_mul(0x9E37_79B9), &src[k..k + n]))
            .collect();
        let want: Vec<u32> = items
            .iter()
            .map(|&(seed, d)| crc32c::crc32c_append(seed, d))
            .collect();
        let mut got = vec![0u32; items.len()];
        super::append_each(&items, &mut got);
        assert_eq!(got, want, "lengths {lengths:?}");
    }
}
