//! CRC32C (Castagnoli) with an explicit running value, as `crc32c::crc32c_append` computes it.
//!
//! [`append`] folds buffers of 64 bytes to 32 KiB with the same carry-less-multiply kernel as
//! [`copy_append`], without the stores (AVX-512 or AVX2 with VPCLMULQDQ; in L1 on a Xeon:
//! 12 ns for 540 bytes and 20 ns for 2 KiB, against 28 and 35 ns through `crc-fast`, whose set-up
//! costs more on short buffers). Longer buffers go through `crc-fast` (117 GB/s against the
//! kernel's 92 on 147 KB), shorter ones through `crc32c` (SSE4.2 `crc32` instructions) below 512
//! bytes and `crc-fast` above. On an x86-64 CPU without VPCLMULQDQ (the project's 2-core EPYC),
//! `crc32c` takes every buffer below 32 KiB: there `crc-fast`'s set-up dominates (in cache: 102,
//! 88, 180 and 311 ns for 540 bytes, 1, 2 and 4 KiB against 141, 138, 220 and 413 ns). Every path
//! computes the same function (tested below), so stored checksums do not depend on which one ran.
//!
//! [`append_each`] checksums many buffers together (a verified gather's records): where `append`
//! would take `crc32c`, it keeps three independent `crc32` chains going, each taking the next
//! buffer as its last one ends; the one-chain loop leaves two thirds of the unit idle (each
//! instruction waits for the last).
//!
//! [`copy_append`] copies and checksums in one pass: each vector is loaded once, stored to the
//! destination and folded into the checksum from the same register (carry-less multiplies on
//! 512-bit vectors with AVX-512 + VPCLMULQDQ, on 256-bit ones with AVX2 + VPCLMULQDQ), so a
//! verified read touches the bytes once and what is checksummed is exactly what was stored.
//! Without VPCLMULQDQ it copies eight bytes per `crc32` instruction (short buffers) or copies
//! 32 KiB pieces and checksums each while it is still in L1/L2.
//!
//! [`Stores::Streaming`] asks for non-temporal stores: for a gather whose output is too large
//! to stay in the cache anyway, they skip the read-for-ownership of every destination line
//! (a third of a cached copy's memory traffic). Measured here (2-core EPYC, 256 random 147 KiB
//! records): 1.4-1.6x the batches/s of `memcpy` at one and two threads. Each streaming kernel
//! ends with an `sfence`, which orders the weakly ordered stores before anything the thread does
//! next.

use crc_fast::{CrcAlgorithm, Digest};

#[cfg(target_arch = "x86_64")]
mod chains;
mod combine;
pub(crate) use combine::Shift;

const FOLD_FROM: usize = 512;
/// Buffers this long and longer go through `crc-fast` even where the folding kernel runs.
#[cfg(target_arch = "x86_64")]
const KERNEL_BELOW: usize = 32 << 10;
/// Shortest buffer [`copy_append`] sends through the folding kernel (one 64-byte vector); shorter
/// ones take eight bytes per `crc32` instruction.
#[cfg(target_arch = "x86_64")]
const FUSED_FROM: usize = 64;

/// Extends the CRC32C `crc` (0 for a fresh checksum) with `data`.
#[inline]
pub(crate) fn append(crc: u32, data: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if (FUSED_FROM..KERNEL_BELOW).contains(&data.len()) {
        match x86::kernel() {
            // SAFETY: `kernel()` detected every feature this kernel is compiled for; the buffer
            // holds at least 64 bytes.
            x86::Kernel::Avx512 => return unsafe { x86::append_avx512(crc, data) },
            // SAFETY: as above.
            x86::Kernel::Avx2 => return unsafe { x86::append_avx2(crc, data) },
            x86::Kernel::None => {}
        }
    }
    if data.len() < crc32c_below() {
        return crc32c::crc32c_append(crc, data);
    }
    let mut d = Digest::new_with_init_state(CrcAlgorithm::Crc32Iscsi, u64::from(!crc));
    d.update(data);
    d.finalize() as u32
}

/// `out[k] = append(items[k].0, items[k].1)` for every item, for checksumming a gather's records
/// together. On an x86-64 CPU with SSE4.2 and no folding kernel (the project's 2-core EPYC),
/// buffers below 32 KiB go through three independent `crc32` chains: each chain takes the next
/// buffer as soon as its last one ends, so all three stay busy until the last two buffers. One
/// chain waits out each instruction's latency; three keep the unit busy. On that CPU, three
/// 544-byte buffers in L1: 24.5 GB/s against 8.8 GB/s through `crc32c` one buffer at a time.
/// Elsewhere each buffer goes through [`append`].
pub(crate) fn append_each(items: &[(u32, &[u8])], out: &mut [u32]) {
    assert_eq!(items.len(), out.len(), "append_each: lengths differ");
    #[cfg(target_arch = "x86_64")]
    if crc32c_below() == KERNEL_BELOW && items.iter().all(|(_, d)| d.len() < KERNEL_BELOW) {
        // SAFETY: `crc32c_below()` returns `KERNEL_BELOW` only where SSE4.2 was detected.
        unsafe { chains::append_each_sse42(items, out) };
        return;
    }
    for (o, &(crc, d)) in out.iter_mut().zip(items) {
        *o = append(crc, d);
    }
}

/// Buffers shorter than this go through `crc32c` in [`append`] (see the module docs): below
/// `KERNEL_BELOW` on an x86-64 CPU with SSE4.2 and no fused kernel, else below `FOLD_FROM`.
#[inline]
fn crc32c_below() -> usize {
    #[cfg(target_arch = "x86_64")]
    if x86::kernel() == x86::Kernel::None && std::arch::is_x86_feature_detected!("sse4.2") {
        return KERNEL_BELOW;
    }
    FOLD_FROM
}

/// `append(crc, &v.to_le_bytes())`, with one `crc32` instruction where the CPU has SSE4.2.
#[inline]
pub(crate) fn append_u64(crc: u32, v: u64) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("sse4.2") {
        // SAFETY: SSE4.2 is present (checked just above).
        return unsafe { x86::append_u64_sse42(crc, v) };
    }
    crc32c::crc32c_append(crc, &v.to_le_bytes())
}

/// How a copy writes its destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stores {
    /// Ordinary (write-allocate) stores: the copied bytes end up in the cache.
    Cached,
    /// Non-temporal stores where the CPU has the fused AVX2 kernel, else ordinary ones. Each
    /// kernel ends its streaming stores with an `sfence`, so whatever the thread does next (e.g.
    /// publish the buffer to another thread) is ordered after them.
    Streaming,
}

/// Piece size of the copy-then-checksum fallback: each piece is checksummed while it is still
/// in L1/L2.
const FALLBACK_CHUNK: usize = 32 << 10;

/// Copies `src` into `dst` (equal lengths) and returns `append(crc, dst)`.
#[cfg(any(test, feature = "internals"))]
#[inline]
pub(crate) fn copy_append(crc: u32, dst: &mut [u8], src: &[u8]) -> u32 {
    copy_append_with(crc, dst, src, Stores::Cached)
}

/// [`copy_append`] with the given kind of stores.
#[inline]
pub(crate) fn copy_append_with(crc: u32, dst: &mut [u8], src: &[u8], stores: Stores) -> u32 {
    assert_eq!(dst.len(), src.len(), "copy_append: lengths differ");
    #[cfg(target_arch = "x86_64")]
    {
        let kernel = x86::kernel();
        if kernel != x86::Kernel::None {
            if src.len() < FUSED_FROM {
                // SAFETY: SSE4.2 is part of every fused kernel's features; the lengths are equal.
                return unsafe { x86::copy_append_sse42(crc, dst, src) };
            }
            // The CPU has every feature each kernel is compiled for (`kernel()` detected them),
            // the lengths are equal (asserted above) and at least 64.
            return match (kernel, stores) {
                // SAFETY: see above; AVX-512F/VL are present for this kernel.
                (x86::Kernel::Avx512, Stores::Cached) => unsafe {
                    x86::copy_append_avx512(crc, dst, src)
                },
                // SAFETY: see above; AVX2 is part of both kernels' features.
                (_, Stores::Streaming) => unsafe { x86::copy_append_avx2::<true>(crc, dst, src) },
                // SAFETY: as above.
                _ => unsafe { x86::copy_append_avx2::<false>(crc, dst, src) },
            };
        }
        if src.len() < FOLD_FROM && std::arch::is_x86_feature_detected!("sse4.2") {
            // SAFETY: SSE4.2 is present (checked just above); the lengths are equal.
            return unsafe { x86::copy_append_sse42(crc, dst, src) };
        }
    }
    let mut crc = crc;
    for (d, s) in dst
        .chunks_mut(FALLBACK_CHUNK)
        .zip(src.chunks(FALLBACK_CHUNK))
    {
        d.copy_from_slice(s);
        crc = append(crc, d);
    }
    crc
}

/// Copies `src` into `dst` (equal lengths) without checksumming, with the given kind of stores.
#[inline]
pub(crate) fn copy_with(dst: &mut [u8], src: &[u8], stores: Stores) {
    assert_eq!(dst.len(), src.len(), "copy_with: lengths differ");
    #[cfg(target_arch = "x86_64")]
    if stores == Stores::Streaming && src.len() >= FUSED_FROM && x86::kernel() != x86::Kernel::None
    {
        // SAFETY: AVX2 is part of every fused kernel's features (detected); equal lengths.
        unsafe { x86::copy_streaming_avx2(dst, src) };
        return;
    }
    dst.copy_from_slice(src);
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::chains::copy_crc_words;

    /// The CRC32C generator polynomial, normal bit order, with its x^32 term.
    const POLY: u64 = 0x1_1EDC_6F41;

    /// `x^e mod POLY`, normal bit order.
    const fn xpow_mod(e: u32) -> u64 {
        let mut r: u64 = 1;
        let mut k = 0;
        while k < e {
            r <<= 1;
            if r & (1 << 32) != 0 {
                r ^= POLY;
            }
            k += 1;
        }
        r
    }

    /// Folding constant for the bit-reflected domain: `reflect32(x^e mod P) << 1`.
    const fn k(e: u32) -> u64 {
        ((xpow_mod(e) as u32).reverse_bits() as u64) << 1
    }

    /// (constant for the low 64 bits, constant for the high 64 bits) of a 128-bit lane folded
    /// forward by `bits`: the low half is earlier in the stream, so it moves 64 bits further.
    const fn pair(bits: u32) -> (u64, u64) {
        (k(bits + 32), k(bits - 32))
    }

    const K2048: (u64, u64) = pair(2048);
    const K1536: (u64, u64) = pair(1536);
    const K1024: (u64, u64) = pair(1024);
    const K512: (u64, u64) = pair(512);
    const K384: (u64, u64) = pair(384);
    const K256: (u64, u64) = pair(256);
    const K128: (u64, u64) = pair(128);

    /// The fused copy + checksum kernels, best first.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub(super) enum Kernel {
        /// AVX-512F/VL + VPCLMULQDQ: [`copy_append_avx512`] (and the AVX2 one for streaming).
        Avx512,
        /// AVX2 + VPCLMULQDQ: [`copy_append_avx2`].
        Avx2,
        /// Neither.
        None,
    }

    /// Which fused kernel this CPU runs; detected once.
    #[inline]
    pub(super) fn kernel() -> Kernel {
        static KERNEL: std::sync::OnceLock<Kernel> = std::sync::OnceLock::new();
        *KERNEL.get_or_init(|| {
            let base = is_x86_feature_detected!("vpclmulqdq")
                && is_x86_feature_detected!("pclmulqdq")
                && is_x86_feature_detected!("sse4.2")
                && is_x86_feature_detected!("avx2");
            if base && is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512vl") {
                Kernel::Avx512
            } else if base {
                Kernel::Avx2
            } else {
                Kernel::None
            }
        })
    }

    #[inline]
    #[target_feature(enable = "sse2")]
    fn set128(c: (u64, u64)) -> __m128i {
        _mm_set_epi64x(c.1 as i64, c.0 as i64)
    }

    /// `acc` folded forward onto `next`: each 128-bit lane of `acc` times the constants, XOR `next`.
    #[inline]
    #[target_feature(enable = "avx512f,avx512vl,vpclmulqdq,pclmulqdq,sse4.2")]
    fn fold512(acc: __m512i, k: __m512i, next: __m512i) -> __m512i {
        let lo = _mm512_clmulepi64_epi128::<0x00>(acc, k);
        let hi = _mm512_clmulepi64_epi128::<0x11>(acc, k);
        _mm512_ternarylogic_epi64::<0x96>(lo, hi, next)
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx512vl,vpclmulqdq,pclmulqdq,sse4.2")]
    fn fold128(acc: __m128i, k: __m128i, next: __m128i) -> __m128i {
        let lo = _mm_clmulepi64_si128::<0x00>(acc, k);
        let hi = _mm_clmulepi64_si128::<0x11>(acc, k);
        _mm_ternarylogic_epi64::<0x96>(lo, hi, next)
    }

    /// # Safety
    /// The CPU supports SSE4.2.
    #[target_feature(enable = "sse4.2")]
    pub(super) unsafe fn append_u64_sse42(crc: u32, v: u64) -> u32 {
        !(_mm_crc32_u64(u64::from(!crc), v) as u32)
    }

    /// # Safety
    /// The CPU supports SSE4.2; `dst.len() == src.len()`.
    #[target_feature(enable = "sse4.2")]
    pub(super) unsafe fn copy_append_sse42(crc: u32, dst: &mut [u8], src: &[u8]) -> u32 {
        debug_assert_eq!(dst.len(), src.len());
        // SAFETY: SSE4.2 is present (caller); both slices hold `src.len()` bytes.
        !unsafe { copy_crc_words::<true>(!crc, src.as_ptr(), dst.as_mut_ptr(), src.len()) }
    }

    /// # Safety
    /// The CPU supports AVX-512F/VL, VPCLMULQDQ, PCLMULQDQ and SSE4.2; `dst.len() == src.len()`
    /// and `src.len() >= 64`.
    #[target_feature(enable = "avx512f,avx512vl,vpclmulqdq,pclmulqdq,sse4.2")]
    pub(super) unsafe fn copy_append_avx512(crc: u32, dst: &mut [u8], src: &[u8]) -> u32 {
        debug_assert!(src.len() >= 64 && dst.len() == src.len());
        // SAFETY: the caller's contract; `dst` is writable for `src.len()` bytes.
        unsafe { fold_avx512::<true>(crc, src.as_ptr(), dst.as_mut_ptr(), src.len()) }
    }

    /// The CRC of `src` by the kernel of [`copy_append_avx512`], without the copy.
    ///
    /// # Safety
    /// The CPU supports AVX-512F/VL, VPCLMULQDQ, PCLMULQDQ and SSE4.2; `src.len() >= 64`.
    #[target_feature(enable = "avx512f,avx512vl,vpclmulqdq,pclmulqdq,sse4.2")]
    pub(super) unsafe fn append_avx512(crc: u32, src: &[u8]) -> u32 {
        debug_assert!(src.len() >= 64);
        // SAFETY: the caller's contract; without `COPY` the destination is never touched.
        unsafe { fold_avx512::<false>(crc, src.as_ptr(), std::ptr::null_mut(), src.len()) }
    }

    /// The body of both: folds `n` bytes from `s` into the CRC, storing each vector to `d` too
    /// when `COPY`.
    ///
    /// # Safety
    /// The CPU supports AVX-512F/VL, VPCLMULQDQ, PCLMULQDQ and SSE4.2; `n >= 64`; `s` is readable
    /// for `n` bytes, and with `COPY` `d` is writable for `n` bytes.
    #[inline]
    #[target_feature(enable = "avx512f,avx512vl,vpclmulqdq,pclmulqdq,sse4.2")]
    unsafe fn fold_avx512<const COPY: bool>(crc: u32, s: *const u8, d: *mut u8, n: usize) -> u32 {
        // SAFETY: for the whole body, every load reads `s[i..i + w]` and every store (only with
        // `COPY`) writes `d[i..i + w]` with `i + w <= n` (loop bounds below); unaligned forms.
        unsafe {
            let ld = |i: usize| _mm512_loadu_si512(s.add(i).cast());
            let st = |i: usize, v: __m512i| {
                if COPY {
                    _mm512_storeu_si512(d.add(i).cast(), v)
                }
            };
            // Processing from state `!crc` equals processing from 0 with the state XORed into the
            // first four bytes.
            let seed = _mm512_zextsi128_si512(_mm_cvtsi32_si128(!crc as i32));
            let k512 = _mm512_broadcast_i32x4(set128(K512));
            let mut i;
            let acc = if n >= 256 {
                // Four independent 64-byte accumulators, 256 bytes per step.
                let mut a = [ld(0), ld(64), ld(128), ld(192)];
                for (j, v) in a.iter().enumerate() {
                    st(64 * j, *v);
                }
                a[0] = _mm512_xor_si512(a[0], seed);
                let k2048 = _mm512_broadcast_i32x4(set128(K2048));
                i = 256;
                while i + 256 <= n {
                    let b = [ld(i), ld(i + 64), ld(i + 128), ld(i + 192)];
                    for j in 0..4 {
                        st(i + 64 * j, b[j]);
                        a[j] = fold512(a[j], k2048, b[j]);
                    }
                    i += 256;
                }
                // Into the last accumulator, as a tree: the folds are independent, so their
                // latencies overlap.
                let k1536 = _mm512_broadcast_i32x4(set128(K1536));
                let k1024 = _mm512_broadcast_i32x4(set128(K1024));
                _mm512_ternarylogic_epi64::<0x96>(
                    fold512(a[0], k1536, a[3]),
                    fold512(a[1], k1024, _mm512_setzero_si512()),
                    fold512(a[2], k512, _mm512_setzero_si512()),
                )
            } else {
                let a = ld(0);
                st(0, a);
                i = 64;
                _mm512_xor_si512(a, seed)
            };
            let mut acc = acc;
            while i + 64 <= n {
                let b = ld(i);
                st(i, b);
                acc = fold512(acc, k512, b);
                i += 64;
            }
            // The four 128-bit lanes into the last one, again as a tree.
            let l0 = _mm512_extracti32x4_epi32::<0>(acc);
            let l1 = _mm512_extracti32x4_epi32::<1>(acc);
            let l2 = _mm512_extracti32x4_epi32::<2>(acc);
            let l3 = _mm512_extracti32x4_epi32::<3>(acc);
            let x = _mm_ternarylogic_epi64::<0x96>(
                fold128(l0, set128(K384), l3),
                fold128(l1, set128(K256), _mm_setzero_si128()),
                fold128(l2, set128(K128), _mm_setzero_si128()),
            );
            finish_lane::<COPY>(x, s, d, i, n)
        }
    }

    /// The end both fused kernels share, once their vectors are folded into the one 128-bit
    /// lane `x` that covers `src[..i]`: copies and folds the whole 16-byte blocks left, turns the
    /// lane into the CRC with two `crc32` instructions, and copies and checksums the last bytes
    /// word by word. Returns the final (inverted) CRC.
    ///
    /// # Safety
    /// The CPU supports PCLMULQDQ and SSE4.2; `s` is readable for `n` bytes, with `COPY` `d` is
    /// writable for `n` bytes; `i <= n`.
    #[inline]
    #[target_feature(enable = "pclmulqdq,sse4.2")]
    unsafe fn finish_lane<const COPY: bool>(
        mut x: __m128i,
        s: *const u8,
        d: *mut u8,
        mut i: usize,
        n: usize,
    ) -> u32 {
        let k128 = set128(K128);
        // SAFETY: loads read `s[i..i + 16]`, stores (only with `COPY`) write `d[i..i + 16]` with
        // `i + 16 <= n` (loop bound), unaligned; the rest is `n - i` bytes from `i` (the caller's
        // bounds).
        unsafe {
            while i + 16 <= n {
                let y = _mm_loadu_si128(s.add(i).cast());
                if COPY {
                    _mm_storeu_si128(d.add(i).cast(), y);
                }
                x = fold128_sse(x, k128, y);
                i += 16;
            }
            // The 128-bit remainder has the message's CRC (from state 0): finish with `crc32`.
            let lo = _mm_cvtsi128_si64(x) as u64;
            let hi = _mm_extract_epi64::<1>(x) as u64;
            let state = _mm_crc32_u64(_mm_crc32_u64(0, lo), hi) as u32;
            !copy_crc_words::<COPY>(state, s.add(i), d.wrapping_add(i), n - i)
        }
    }

    const K768: (u64, u64) = pair(768);

    #[inline]
    #[target_feature(enable = "avx2,vpclmulqdq,pclmulqdq,sse4.2")]
    fn fold256(acc: __m256i, k: __m256i, next: __m256i) -> __m256i {
        let lo = _mm256_clmulepi64_epi128::<0x00>(acc, k);
        let hi = _mm256_clmulepi64_epi128::<0x11>(acc, k);
        _mm256_xor_si256(_mm256_xor_si256(lo, hi), next)
    }

    /// [`fold128`] without AVX-512's three-way XOR, for the AVX2 kernel and the shared tail.
    #[inline]
    #[target_feature(enable = "pclmulqdq")]
    fn fold128_sse(acc: __m128i, k: __m128i, next: __m128i) -> __m128i {
        let lo = _mm_clmulepi64_si128::<0x00>(acc, k);
        let hi = _mm_clmulepi64_si128::<0x11>(acc, k);
        _mm_xor_si128(_mm_xor_si128(lo, hi), next)
    }

    #[inline]
    #[target_feature(enable = "avx2,vpclmulqdq,pclmulqdq,sse4.2")]
    fn broadcast256(c: (u64, u64)) -> __m256i {
        _mm256_set_epi64x(c.1 as i64, c.0 as i64, c.1 as i64, c.0 as i64)
    }

    /// Bytes from `d` to the next 32-byte boundary (0 when aligned), at most `n`.
    #[inline]
    fn head_to_align32(d: *const u8, n: usize) -> usize {
        ((32 - (d as usize & 31)) & 31).min(n)
    }

    /// [`copy_append_avx512`] on 256-bit vectors, for CPUs with AVX2 and VPCLMULQDQ but no
    /// AVX-512 (e.g. AMD Zen 3). With `STREAM` the destination is written with non-temporal
    /// stores (after an ordinary head up to its first 32-byte boundary), followed by an `sfence`.
    ///
    /// # Safety
    /// The CPU supports AVX2, VPCLMULQDQ, PCLMULQDQ and SSE4.2; `dst.len() == src.len()` and
    /// `src.len() >= 64`.
    #[target_feature(enable = "avx2,vpclmulqdq,pclmulqdq,sse4.2")]
    pub(super) unsafe fn copy_append_avx2<const STREAM: bool>(
        crc: u32,
        dst: &mut [u8],
        src: &[u8],
    ) -> u32 {
        debug_assert!(src.len() >= 64 && dst.len() == src.len());
        // SAFETY: the caller's contract; `dst` is writable for `src.len()` bytes.
        unsafe { fold_avx2::<STREAM, true>(crc, src.as_ptr(), dst.as_mut_ptr(), src.len()) }
    }

    /// The CRC of `src` by the kernel of [`copy_append_avx2`], without the copy.
    ///
    /// # Safety
    /// The CPU supports AVX2, VPCLMULQDQ, PCLMULQDQ and SSE4.2; `src.len() >= 64`.
    #[target_feature(enable = "avx2,vpclmulqdq,pclmulqdq,sse4.2")]
    pub(super) unsafe fn append_avx2(crc: u32, src: &[u8]) -> u32 {
        debug_assert!(src.len() >= 64);
        // SAFETY: the caller's contract; without `COPY` the destination is never touched.
        unsafe { fold_avx2::<false, false>(crc, src.as_ptr(), std::ptr::null_mut(), src.len()) }
    }

    /// The body of both (`STREAM` only with `COPY`).
    ///
    /// # Safety
    /// As [`copy_append_avx2`], for `s` readable for `n` bytes and, with `COPY`, `d` writable for
    /// `n` bytes.
    #[inline]
    #[target_feature(enable = "avx2,vpclmulqdq,pclmulqdq,sse4.2")]
    unsafe fn fold_avx2<const STREAM: bool, const COPY: bool>(
        crc: u32,
        s: *const u8,
        d: *mut u8,
        n: usize,
    ) -> u32 {
        debug_assert!(n >= 64 && (COPY || !STREAM));
        let (mut s, mut d) = (s, d);
        let mut n = n;
        let mut state = !crc;
        // SAFETY: for the whole body, every load reads `s[i..i + w]` and every store (only with
        // `COPY`) writes `d[i..i + w]` with `i + w <= n`, where `s`/`d` advance together by the `head` bytes
        // already copied and `n` shrinks by as many (loop bounds below); stores of the streaming
        // loop go to 32-byte-aligned addresses (`d` is aligned after the head, `i` is a multiple
        // of 32 there); all other accesses use unaligned forms.
        unsafe {
            if STREAM {
                let head = head_to_align32(d, n);
                state = copy_crc_words::<COPY>(state, s, d, head);
                s = s.add(head);
                d = d.add(head);
                n -= head;
                if n < 32 {
                    return !copy_crc_words::<COPY>(state, s, d, n);
                }
            }
            let ld = |i: usize| _mm256_loadu_si256(s.add(i).cast());
            let st = |i: usize, v: __m256i| {
                if !COPY {
                } else if STREAM {
                    _mm256_stream_si256(d.add(i).cast(), v)
                } else {
                    _mm256_storeu_si256(d.add(i).cast(), v)
                }
            };
            // Processing from `state` equals processing from 0 with the state XORed into the
            // first four bytes.
            let seed = _mm256_zextsi128_si256(_mm_cvtsi32_si128(state as i32));
            let k256 = broadcast256(K256);
            let mut i;
            let acc = if n >= 128 {
                // Four independent 32-byte accumulators, 128 bytes per step.
                let mut a = [ld(0), ld(32), ld(64), ld(96)];
                for (j, v) in a.iter().enumerate() {
                    st(32 * j, *v);
                }
                a[0] = _mm256_xor_si256(a[0], seed);
                let k1024 = broadcast256(K1024);
                i = 128;
                while i + 128 <= n {
                    let b = [ld(i), ld(i + 32), ld(i + 64), ld(i + 96)];
                    for j in 0..4 {
                        st(i + 32 * j, b[j]);
                        a[j] = fold256(a[j], k1024, b[j]);
                    }
                    i += 128;
                }
                let zero = _mm256_setzero_si256();
                _mm256_xor_si256(
                    _mm256_xor_si256(
                        fold256(a[0], broadcast256(K768), a[3]),
                        fold256(a[1], broadcast256(K512), zero),
                    ),
                    fold256(a[2], k256, zero),
                )
            } else {
                let a = ld(0);
                st(0, a);
                i = 32;
                _mm256_xor_si256(a, seed)
            };
            let mut acc = acc;
            while i + 32 <= n {
                let b = ld(i);
                st(i, b);
                acc = fold256(acc, k256, b);
                i += 32;
            }
            if STREAM {
                _mm_sfence();
            }
            // The two 128-bit lanes into the second one.
            let x = fold128_sse(
                _mm256_castsi256_si128(acc),
                set128(K128),
                _mm256_extracti128_si256::<1>(acc),
            );
            finish_lane::<COPY>(x, s, d, i, n)
        }
    }

    /// Copies `src` to `dst` (equal lengths) with non-temporal stores after an ordinary head up
    /// to the first 32-byte boundary of `dst`, then an `sfence`.
    ///
    /// # Safety
    /// The CPU supports AVX2; `dst.len() == src.len()`.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn copy_streaming_avx2(dst: &mut [u8], src: &[u8]) {
        let n = src.len();
        debug_assert_eq!(dst.len(), n);
        let head = head_to_align32(dst.as_ptr(), n);
        dst[..head].copy_from_slice(&src[..head]);
        let (s, d) = (src.as_ptr(), dst.as_mut_ptr());
        let mut i = head;
        // SAFETY: loads read `src[i..i + 128]`, stores write `dst[i..i + 128]` with
        // `i + 128 <= n`; `d + i` is 32-byte aligned (`i - head` is a multiple of 128 and
        // `d + head` is aligned), as the streaming store requires.
        unsafe {
            while i + 128 <= n {
                let v = [
                    _mm256_loadu_si256(s.add(i).cast()),
                    _mm256_loadu_si256(s.add(i + 32).cast()),
                    _mm256_loadu_si256(s.add(i + 64).cast()),
                    _mm256_loadu_si256(s.add(i + 96).cast()),
                ];
                for (j, v) in v.into_iter().enumerate() {
                    _mm256_stream_si256(d.add(i + 32 * j).cast(), v);
                }
                i += 128;
            }
            _mm_sfence();
        }
        dst[i..].copy_from_slice(&src[i..]);
    }
}

#[cfg(test)]
mod tests;
