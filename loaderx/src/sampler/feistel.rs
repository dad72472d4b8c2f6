//! The keyed Feistel bijection behind [`Mode::Cyclic`](super::Mode::Cyclic) and both permutations
//! of [`Mode::Block`](super::Mode::Block): a portable lockstep kernel and its SSE2 / AVX2 versions,
//! which compute the same function bit for bit.

/// 32-bit multipliers of the Feistel round (those of Wellons' `lowbias32` integer hash).
pub(super) const FEISTEL_C0: u64 = 0x7feb_352d;
pub(super) const FEISTEL_C1: u64 = 0x846c_a68b;

/// A keyed bijection on `[0, 2^(left_bits + right_bits))`, built from four alternating Feistel rounds;
/// each round xors one half with a keyed hash of the other, which is invertible whatever the hash.
///
/// Both halves are at most 32 bits wide (the domain is at most 2^64) and are kept *top-aligned* in
/// the low 32-bit word of a `u64` during the rounds: a half of `w` bits occupies bits `32 - w .. 32`.
/// A round's output then only needs a mask, never a shift by a variable amount, and every multiply
/// is an exact 32 x 32 -> 64 bit product (one `imul`, or one `pmuludq` lane when vectorized).
#[derive(Clone, Copy, Debug)]
pub(super) struct Feistel {
    pub(super) right_bits: u32,
    pub(super) right_mask: u64,
    /// `32 - left_bits` and `32 - right_bits`: the shifts that top-align each half.
    pub(super) left_align: u32,
    pub(super) right_align: u32,
    /// The top `left_bits` (`right_bits`) bits of a 32-bit word: where a round's output lands.
    pub(super) left_top: u64,
    pub(super) right_top: u64,
}

/// The per-cycle round keys: round `i` xors `pre[i]` into its input and `mid[i]` between its two
/// multiplies (both below 2^32).
#[derive(Clone, Copy, Debug)]
pub(super) struct RoundKeys {
    pub(super) pre: [u64; 4],
    pub(super) mid: [u64; 4],
}

/// A [`Feistel`]'s parameters and a cycle's [`RoundKeys`] as the operands of a SIMD kernel:
/// shift counts `C`, and registers `R` holding one word in every lane.
#[cfg(target_arch = "x86_64")]
struct Operands<R, C> {
    right_bits: C,
    left_align: C,
    right_align: C,
    right_mask: R,
    left_top: R,
    right_top: R,
    c0: R,
    c1: R,
    pre: [R; 4],
    mid: [R; 4],
}

impl Feistel {
    pub(super) fn for_len(len: u64) -> Self {
        // Smallest power-of-two domain holding [0, len), at least 4 so both halves are non-empty.
        let bits = (u64::BITS - (len - 1).leading_zeros()).max(2);
        let right_bits = bits / 2;
        let left_bits = bits - right_bits;
        let top = |w: u32| (u64::from(u32::MAX) >> (32 - w)) << (32 - w);
        Feistel {
            right_bits,
            right_mask: (1u64 << right_bits) - 1,
            left_align: 32 - left_bits,
            right_align: 32 - right_bits,
            left_top: top(left_bits),
            right_top: top(right_bits),
        }
    }

    /// Round function on a top-aligned half `v < 2^32`: `z = (v ^ k0) * C0` as an exact 64-bit
    /// product, fold its high word into the low one and key it, `y = (z ^ z >> 32 ^ k1) * C1` mod
    /// 2^32, and keep the top bits of `y` selected by `top`. Bit 31 of `y` depends on every bit of
    /// the folded word, which depends on every bit of `v`.
    #[inline(always)]
    fn round(v: u64, k0: u64, k1: u64, top: u64) -> u64 {
        let z = u64::from((v ^ k0) as u32) * FEISTEL_C0;
        let y = u64::from((z ^ (z >> 32) ^ k1) as u32) * FEISTEL_C1;
        y & top
    }

    /// The domain permutation of one value (the reference for [`Feistel::permute_lanes`]).
    #[cfg(test)]
    pub(super) fn permute(&self, x: u64, keys: &RoundKeys) -> u64 {
        let mut lanes = [x; LANES];
        self.permute_lanes(&mut lanes, keys);
        lanes[0]
    }

    /// The domain permutation applied to `LANES` independent values in lockstep: the rounds of
    /// different lanes do not depend on each other, so they overlap instead of waiting on one
    /// dependency chain. Portable `u64` arithmetic; the SIMD versions compute the same function.
    #[cfg_attr(target_arch = "x86_64", allow(dead_code))]
    #[inline(always)]
    pub(super) fn permute_lanes(&self, x: &mut [u64; LANES], keys: &RoundKeys) {
        let mut l = [0u64; LANES];
        let mut r = [0u64; LANES];
        for j in 0..LANES {
            l[j] = (x[j] >> self.right_bits) << self.left_align;
            r[j] = (x[j] & self.right_mask) << self.right_align;
        }
        for i in [0, 2] {
            for j in 0..LANES {
                l[j] ^= Self::round(r[j], keys.pre[i], keys.mid[i], self.left_top);
            }
            for j in 0..LANES {
                r[j] ^= Self::round(l[j], keys.pre[i + 1], keys.mid[i + 1], self.right_top);
            }
        }
        for j in 0..LANES {
            x[j] = ((l[j] >> self.left_align) << self.right_bits) | (r[j] >> self.right_align);
        }
    }

    /// The permutation's shift counts and words as SIMD operands (`count` makes a shift count,
    /// `splat` a register of one word in every lane): made once per call of a SIMD kernel.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    fn operands<R, C>(
        &self,
        keys: &RoundKeys,
        splat: impl Fn(u64) -> R,
        count: impl Fn(u32) -> C,
    ) -> Operands<R, C> {
        Operands {
            right_bits: count(self.right_bits),
            left_align: count(self.left_align),
            right_align: count(self.right_align),
            right_mask: splat(self.right_mask),
            left_top: splat(self.left_top),
            right_top: splat(self.right_top),
            c0: splat(FEISTEL_C0),
            c1: splat(FEISTEL_C1),
            pre: keys.pre.map(&splat),
            mid: keys.mid.map(&splat),
        }
    }

    /// [`Feistel::permute_lanes`] with SSE2 (part of the x86-64 baseline): two lanes per register,
    /// eight in flight, each multiply one `pmuludq`; the same function bit for bit.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "sse2")]
    #[inline]
    pub(super) fn permute_lanes_sse2(&self, x: &mut [u64; LANES], keys: &RoundKeys) {
        use std::arch::x86_64::{
            __m128i, _mm_and_si128, _mm_cvtsi32_si128, _mm_loadu_si128, _mm_mul_epu32,
            _mm_or_si128, _mm_set1_epi64x, _mm_sll_epi64, _mm_srl_epi64, _mm_srli_epi64,
            _mm_storeu_si128, _mm_xor_si128,
        };
        const V: usize = 4;
        let splat = |v: u64| _mm_set1_epi64x(v as i64);
        let o = self.operands(keys, splat, |n: u32| _mm_cvtsi32_si128(n as i32));
        let round = |v: __m128i, i: usize, top: __m128i| {
            // pmuludq multiplies the low 32 bits of each lane: the `as u32` of the scalar round.
            let z = _mm_mul_epu32(_mm_xor_si128(v, o.pre[i]), o.c0);
            let b = _mm_xor_si128(_mm_xor_si128(z, _mm_srli_epi64::<32>(z)), o.mid[i]);
            _mm_and_si128(_mm_mul_epu32(b, o.c1), top)
        };
        for half in x.chunks_exact_mut(2 * V) {
            let ptr = half.as_mut_ptr().cast::<__m128i>();
            let mut l = [splat(0); V];
            let mut r = [splat(0); V];
            for v in 0..V {
                // SAFETY: `half` holds 2 * V u64s, so register v (16 bytes at u64 offset 2v) is in
                // bounds; the unaligned load has no alignment requirement.
                let xv = unsafe { _mm_loadu_si128(ptr.add(v)) };
                l[v] = _mm_sll_epi64(_mm_srl_epi64(xv, o.right_bits), o.left_align);
                r[v] = _mm_sll_epi64(_mm_and_si128(xv, o.right_mask), o.right_align);
            }
            for i in [0, 2] {
                for v in 0..V {
                    l[v] = _mm_xor_si128(l[v], round(r[v], i, o.left_top));
                }
                for v in 0..V {
                    r[v] = _mm_xor_si128(r[v], round(l[v], i + 1, o.right_top));
                }
            }
            for v in 0..V {
                let xv = _mm_or_si128(
                    _mm_sll_epi64(_mm_srl_epi64(l[v], o.left_align), o.right_bits),
                    _mm_srl_epi64(r[v], o.right_align),
                );
                // SAFETY: as for the load above; `half` is borrowed mutably.
                unsafe { _mm_storeu_si128(ptr.add(v), xv) };
            }
        }
    }

    /// [`Feistel::permute_lanes`] with AVX2: four lanes per register, all sixteen in flight, each
    /// multiply one `vpmuludq`; the same function bit for bit. With `first = Some(p)` the inputs are
    /// the positions `p .. p + LANES` (made in registers), else the values in `x`; the results go to
    /// `x`, and the return value has bit `j` set when `x[j] >= self_len`.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    #[inline]
    pub(super) fn permute_lanes_avx2(
        &self,
        first: Option<u64>,
        x: &mut [u64; LANES],
        keys: &RoundKeys,
        self_len: u64,
    ) -> u64 {
        use std::arch::x86_64::{
            __m256i, _mm_cvtsi32_si128, _mm256_add_epi64, _mm256_and_si256, _mm256_castsi256_pd,
            _mm256_cmpgt_epi64, _mm256_loadu_si256, _mm256_movemask_pd, _mm256_mul_epu32,
            _mm256_or_si256, _mm256_set_epi64x, _mm256_set1_epi64x, _mm256_sll_epi64,
            _mm256_srl_epi64, _mm256_srli_epi64, _mm256_storeu_si256, _mm256_xor_si256,
        };
        const V: usize = LANES / 4;
        let splat = |v: u64| _mm256_set1_epi64x(v as i64);
        let o = self.operands(keys, splat, |n: u32| _mm_cvtsi32_si128(n as i32));
        let round = |v: __m256i, i: usize, top: __m256i| {
            let z = _mm256_mul_epu32(_mm256_xor_si256(v, o.pre[i]), o.c0);
            let b = _mm256_xor_si256(_mm256_xor_si256(z, _mm256_srli_epi64::<32>(z)), o.mid[i]);
            _mm256_and_si256(_mm256_mul_epu32(b, o.c1), top)
        };
        let permute = |x: __m256i| {
            let mut l = _mm256_sll_epi64(_mm256_srl_epi64(x, o.right_bits), o.left_align);
            let mut r = _mm256_sll_epi64(_mm256_and_si256(x, o.right_mask), o.right_align);
            l = _mm256_xor_si256(l, round(r, 0, o.left_top));
            r = _mm256_xor_si256(r, round(l, 1, o.right_top));
            l = _mm256_xor_si256(l, round(r, 2, o.left_top));
            r = _mm256_xor_si256(r, round(l, 3, o.right_top));
            _mm256_or_si256(
                _mm256_sll_epi64(_mm256_srl_epi64(l, o.left_align), o.right_bits),
                _mm256_srl_epi64(r, o.right_align),
            )
        };
        let ptr = x.as_mut_ptr().cast::<__m256i>();
        let mut v = [splat(0); V];
        for (k, v) in v.iter_mut().enumerate() {
            *v = match first {
                // Positions first + 4k .. first + 4k + 4, made in registers.
                Some(p) => _mm256_add_epi64(
                    splat(p.wrapping_add(4 * k as u64)),
                    _mm256_set_epi64x(3, 2, 1, 0),
                ),
                // SAFETY: `x` holds 4 * V u64s, so register k (32 bytes at u64 offset 4k) is in
                // bounds; the unaligned load has no alignment requirement.
                None => unsafe { _mm256_loadu_si256(ptr.add(k)) },
            };
        }
        // The four registers' rounds are independent and interleave.
        let v = v.map(permute);
        // Unsigned `x >= len` as a signed compare of sign-flipped values: not (len - 1 >= x).
        let flip = splat(1 << 63);
        let last = _mm256_xor_si256(splat(self_len.wrapping_sub(1)), flip);
        let mut outside = 0u64;
        for (k, &v) in v.iter().enumerate() {
            // SAFETY: as for the load above; `x` is borrowed mutably.
            unsafe { _mm256_storeu_si256(ptr.add(k), v) };
            let gt = _mm256_cmpgt_epi64(_mm256_xor_si256(v, flip), last);
            outside |= (_mm256_movemask_pd(_mm256_castsi256_pd(gt)) as u64) << (4 * k);
        }
        outside
    }
}

/// Positions permuted in lockstep by [`Feistel::permute_lanes`].
pub(super) const LANES: usize = 16;
