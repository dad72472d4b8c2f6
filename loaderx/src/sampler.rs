//! Stateless, counter-based batch samplers.
//!
//! The batch drawn at step `s` is a pure function of `(len, batch, mode, seed, s)`: nothing is carried
//! from one draw to the next except the step counter, so [`Sampler::seek`] is O(1) and a resumed run
//! reproduces an uninterrupted one exactly.
//!
//! * [`Mode::Sequential`] walks `0, 1, 2, ...` and wraps at `len`.
//! * [`Mode::Iid`] draws each index uniformly with replacement: a hash of the global
//!   position `step * batch + i` keyed by the seed (wyrand's multiply-fold), reduced to `[0, len)` with Lemire's
//!   nearly-divisionless multiply-shift method (rejection keeps it exactly unbiased).
//! * [`Mode::Cyclic`] walks a fresh pseudo-random permutation of `[0, len)` each cycle of
//!   `len / batch` full batches. The permutation is a keyed 4-round (unbalanced) Feistel network on
//!   the smallest power-of-two domain `>= len`, restricted to `[0, len)` by cycle-walking, so nothing of
//!   size `len` is ever allocated. A cycle covers positions `0..(len / batch) * batch`; the ids at the
//!   remaining `len % batch` positions are omitted, and since the permutation changes every cycle, so
//!   does the omitted remainder. A batch is computed 16 positions at a time in lockstep (AVX2 when
//!   the CPU has it, SSE2 otherwise on x86-64, portable code elsewhere; all give the same result),
//!   and the few positions that need another cycle-walking step are gathered and walked together.
//!
//! An index is a function of its position alone, so a slice of a batch ([`Sampler::next_range`],
//! [`IndexSampler::batch_range_at`]: one process's part, `docs/distributed.md`) costs O(slice).

use std::ops::Range;

use crate::error::{Error, Result};

/// The contract the loader draws global index batches from.
///
/// Any type implementing it can replace [`IndexSampler`]. [`Sampler::next`] returns a borrowed buffer
/// that stays valid until the next draw; iteration is endless.
pub trait Sampler: Send {
    /// Draws the batch at the current step, advances the step by one, and returns the indices. Every
    /// index must be `< self.len()` and the slice must hold exactly `self.batch_size()` indices.
    fn next(&mut self) -> Result<&[u64]>;

    /// Indices per draw.
    fn batch_size(&self) -> usize;

    /// Size of the index space `[0, len)`.
    fn len(&self) -> u64;

    /// True when the index space is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The step the next call to [`Sampler::next`] draws.
    fn step(&self) -> u64;

    /// Moves to `step`; the next draw is the batch at `step`.
    fn seek(&mut self, step: u64) -> Result<()>;

    /// `&next()?[range]` (`range` within `0..batch_size()`): advances by one step. The default
    /// draws the whole batch and slices it; [`IndexSampler`] computes only the slice.
    fn next_range(&mut self, range: Range<usize>) -> Result<&[u64]> {
        check_range(&range, self.batch_size())?;
        let idx = self.next()?;
        idx.get(range)
            .ok_or_else(|| Error::Sampler(format!("sampler drew {} indices", idx.len())))
    }
}

/// `Ok` when `range` is a (possibly empty) range within `0..batch`.
fn check_range(range: &Range<usize>, batch: usize) -> Result<()> {
    if range.start > range.end || range.end > batch {
        return Err(Error::invalid(format!(
            "index range {}..{} is not within the batch 0..{batch}",
            range.start, range.end
        )));
    }
    Ok(())
}

impl<S: Sampler + ?Sized> Sampler for Box<S> {
    fn next(&mut self) -> Result<&[u64]> {
        (**self).next()
    }
    fn batch_size(&self) -> usize {
        (**self).batch_size()
    }
    fn len(&self) -> u64 {
        (**self).len()
    }
    fn step(&self) -> u64 {
        (**self).step()
    }
    fn seek(&mut self, step: u64) -> Result<()> {
        (**self).seek(step)
    }
    fn next_range(&mut self, range: Range<usize>) -> Result<&[u64]> {
        (**self).next_range(range)
    }
}

/// How [`IndexSampler`] orders indices.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// In order, wrapping at the end.
    Sequential,
    /// Uniform with replacement.
    Iid,
    /// A fresh permutation per cycle, without replacement, full batches only.
    Cyclic,
}

const GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;
const M1: u64 = 0xbf58_476d_1ce4_e5b9;
const M2: u64 = 0x94d0_49bb_1331_11eb;
const CYCLE_SALT: u64 = 0x632b_e59b_d9b4_e019;
const WY_GAMMA: u64 = 0xa076_1d64_78bd_642f;
const WY_XOR: u64 = 0xe703_7ed1_a0b4_28db;
/// 32-bit multipliers of the Feistel round (those of Wellons' `lowbias32` integer hash).
const FEISTEL_C0: u64 = 0x7feb_352d;
const FEISTEL_C1: u64 = 0x846c_a68b;

/// SplitMix64's output function: a bijective 64-bit finalizer with full avalanche.
#[inline(always)]
fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(M1);
    z = (z ^ (z >> 27)).wrapping_mul(M2);
    z ^ (z >> 31)
}

/// The wyrand output function of a counter state: one 64x64->128 multiply, folded. Passes BigCrush
/// as a generator over `state = seed + n * WY_GAMMA`, so it is usable counter-based.
#[inline(always)]
fn wymix(state: u64) -> u64 {
    let t = (state as u128) * ((state ^ WY_XOR) as u128);
    ((t >> 64) as u64) ^ (t as u64)
}

/// Lemire's multiply-shift reduction of `h` to `[0, len)`, exactly unbiased: a product whose low word
/// falls in the biased sliver is rejected and the hash is re-drawn deterministically from itself.
#[inline(always)]
fn reduce(h: u64, len: u64) -> u64 {
    let mut m = (h as u128) * (len as u128);
    let mut lo = m as u64;
    if lo < len {
        let threshold = len.wrapping_neg() % len;
        let mut h = h;
        while lo < threshold {
            h = mix64(h.wrapping_add(GAMMA));
            m = (h as u128) * (len as u128);
            lo = m as u64;
        }
    }
    (m >> 64) as u64
}

/// A keyed bijection on `[0, 2^(left_bits + right_bits))`, built from four alternating Feistel rounds;
/// each round xors one half with a keyed hash of the other, which is invertible whatever the hash.
///
/// Both halves are at most 32 bits wide (the domain is at most 2^64) and are kept *top-aligned* in
/// the low 32-bit word of a `u64` during the rounds: a half of `w` bits occupies bits `32 - w .. 32`.
/// A round's output then only needs a mask, never a shift by a variable amount, and every multiply
/// is an exact 32 x 32 -> 64 bit product (one `imul`, or one `pmuludq` lane when vectorized).
#[derive(Clone, Copy, Debug)]
struct Feistel {
    right_bits: u32,
    right_mask: u64,
    /// `32 - left_bits` and `32 - right_bits`: the shifts that top-align each half.
    left_align: u32,
    right_align: u32,
    /// The top `left_bits` (`right_bits`) bits of a 32-bit word: where a round's output lands.
    left_top: u64,
    right_top: u64,
}

/// The per-cycle round keys: round `i` xors `pre[i]` into its input and `mid[i]` between its two
/// multiplies (both below 2^32).
#[derive(Clone, Copy, Debug)]
struct RoundKeys {
    pre: [u64; 4],
    mid: [u64; 4],
}

impl Feistel {
    fn for_len(len: u64) -> Self {
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
    fn permute(&self, x: u64, keys: &RoundKeys) -> u64 {
        let mut lanes = [x; LANES];
        self.permute_lanes(&mut lanes, keys);
        lanes[0]
    }

    /// The domain permutation applied to `LANES` independent values in lockstep: the rounds of
    /// different lanes do not depend on each other, so they overlap instead of waiting on one
    /// dependency chain. Portable `u64` arithmetic; the SIMD versions compute the same function.
    #[cfg_attr(target_arch = "x86_64", allow(dead_code))]
    #[inline(always)]
    fn permute_lanes(&self, x: &mut [u64; LANES], keys: &RoundKeys) {
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

    /// [`Feistel::permute_lanes`] with SSE2 (part of the x86-64 baseline): two lanes per register,
    /// eight in flight, each multiply one `pmuludq`; the same function bit for bit.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "sse2")]
    #[inline]
    fn permute_lanes_sse2(&self, x: &mut [u64; LANES], keys: &RoundKeys) {
        use std::arch::x86_64::{
            __m128i, _mm_and_si128, _mm_cvtsi32_si128, _mm_loadu_si128, _mm_mul_epu32,
            _mm_or_si128, _mm_set1_epi64x, _mm_sll_epi64, _mm_srl_epi64, _mm_srli_epi64,
            _mm_storeu_si128, _mm_xor_si128,
        };
        const V: usize = 4;
        let splat = |v: u64| _mm_set1_epi64x(v as i64);
        let count = |n: u32| _mm_cvtsi32_si128(n as i32);
        let (right_bits, left_align, right_align) = (
            count(self.right_bits),
            count(self.left_align),
            count(self.right_align),
        );
        let (right_mask, left_top, right_top) = (
            splat(self.right_mask),
            splat(self.left_top),
            splat(self.right_top),
        );
        let (c0, c1) = (splat(FEISTEL_C0), splat(FEISTEL_C1));
        let pre = keys.pre.map(splat);
        let mid = keys.mid.map(splat);
        let round = |v: __m128i, i: usize, top: __m128i| {
            // pmuludq multiplies the low 32 bits of each lane: the `as u32` of the scalar round.
            let z = _mm_mul_epu32(_mm_xor_si128(v, pre[i]), c0);
            let b = _mm_xor_si128(_mm_xor_si128(z, _mm_srli_epi64::<32>(z)), mid[i]);
            _mm_and_si128(_mm_mul_epu32(b, c1), top)
        };
        for half in x.chunks_exact_mut(2 * V) {
            let ptr = half.as_mut_ptr().cast::<__m128i>();
            let mut l = [splat(0); V];
            let mut r = [splat(0); V];
            for v in 0..V {
                // SAFETY: `half` holds 2 * V u64s, so register v (16 bytes at u64 offset 2v) is in
                // bounds; the unaligned load has no alignment requirement.
                let xv = unsafe { _mm_loadu_si128(ptr.add(v)) };
                l[v] = _mm_sll_epi64(_mm_srl_epi64(xv, right_bits), left_align);
                r[v] = _mm_sll_epi64(_mm_and_si128(xv, right_mask), right_align);
            }
            for i in [0, 2] {
                for v in 0..V {
                    l[v] = _mm_xor_si128(l[v], round(r[v], i, left_top));
                }
                for v in 0..V {
                    r[v] = _mm_xor_si128(r[v], round(l[v], i + 1, right_top));
                }
            }
            for v in 0..V {
                let xv = _mm_or_si128(
                    _mm_sll_epi64(_mm_srl_epi64(l[v], left_align), right_bits),
                    _mm_srl_epi64(r[v], right_align),
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
    fn permute_lanes_avx2(
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
        let count = |n: u32| _mm_cvtsi32_si128(n as i32);
        let (right_bits, left_align, right_align) = (
            count(self.right_bits),
            count(self.left_align),
            count(self.right_align),
        );
        let (right_mask, left_top, right_top) = (
            splat(self.right_mask),
            splat(self.left_top),
            splat(self.right_top),
        );
        let (c0, c1) = (splat(FEISTEL_C0), splat(FEISTEL_C1));
        let pre = keys.pre.map(splat);
        let mid = keys.mid.map(splat);
        let round = |v: __m256i, i: usize, top: __m256i| {
            let z = _mm256_mul_epu32(_mm256_xor_si256(v, pre[i]), c0);
            let b = _mm256_xor_si256(_mm256_xor_si256(z, _mm256_srli_epi64::<32>(z)), mid[i]);
            _mm256_and_si256(_mm256_mul_epu32(b, c1), top)
        };
        let permute = |x: __m256i| {
            let mut l = _mm256_sll_epi64(_mm256_srl_epi64(x, right_bits), left_align);
            let mut r = _mm256_sll_epi64(_mm256_and_si256(x, right_mask), right_align);
            l = _mm256_xor_si256(l, round(r, 0, left_top));
            r = _mm256_xor_si256(r, round(l, 1, right_top));
            l = _mm256_xor_si256(l, round(r, 2, left_top));
            r = _mm256_xor_si256(r, round(l, 3, right_top));
            _mm256_or_si256(
                _mm256_sll_epi64(_mm256_srl_epi64(l, left_align), right_bits),
                _mm256_srl_epi64(r, right_align),
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
const LANES: usize = 16;
/// Positions per cycle-walking block: one bit each in a `u64` pending mask.
const BLOCK: usize = 64;

/// The pure batch function behind [`IndexSampler`]: everything except the step and the buffer.
#[derive(Clone, Copy, Debug)]
struct Plan {
    len: u64,
    batch: usize,
    mode: Mode,
    seed: u64,
    key: u64,
    steps_per_cycle: u64,
    feistel: Feistel,
}

impl Plan {
    fn cycle_keys(&self, cycle: u64) -> RoundKeys {
        let ck = mix64(self.key ^ mix64(cycle.wrapping_add(CYCLE_SALT)));
        let mut keys = RoundKeys {
            pre: [0; 4],
            mid: [0; 4],
        };
        for i in 0..4 {
            let k = mix64(ck.wrapping_add(GAMMA.wrapping_mul(i as u64 + 1)));
            keys.pre[i] = k & 0xffff_ffff;
            keys.mid[i] = k >> 32;
        }
        keys
    }

    /// Writes positions `first .. first + out.len()` of the batch at `step` into `out`
    /// (`first + out.len() <= batch`); each position costs the same whatever the others are.
    fn fill(&self, step: u64, first: usize, out: &mut [u64]) {
        debug_assert!(first + out.len() <= self.batch);
        match self.mode {
            Mode::Sequential => {
                let start =
                    ((step as u128 * self.batch as u128 + first as u128) % self.len as u128) as u64;
                let mut v = start;
                for o in out.iter_mut() {
                    *o = v;
                    v += 1;
                    if v == self.len {
                        v = 0;
                    }
                }
            }
            Mode::Iid => {
                let len = self.len;
                let base = step
                    .wrapping_mul(self.batch as u64)
                    .wrapping_add(first as u64);
                let mut ctr = self.key.wrapping_add(base.wrapping_mul(WY_GAMMA));
                for o in out.iter_mut() {
                    ctr = ctr.wrapping_add(WY_GAMMA);
                    *o = reduce(wymix(ctr), len);
                }
            }
            Mode::Cyclic => {
                let cycle = step / self.steps_per_cycle;
                let within = step % self.steps_per_cycle;
                let keys = self.cycle_keys(cycle);
                let p0 = within * self.batch as u64 + first as u64;
                #[cfg(target_arch = "x86_64")]
                if std::is_x86_feature_detected!("avx2") {
                    // SAFETY: the CPU supports AVX2, checked just above.
                    unsafe { self.cyclic_fill_avx2(p0, &keys, out) };
                } else {
                    // SAFETY: SSE2 is part of the x86-64 baseline, so every x86-64 CPU has it.
                    unsafe { self.cyclic_fill_sse2(p0, &keys, out) };
                }
                #[cfg(not(target_arch = "x86_64"))]
                self.cyclic_fill(p0, out, |first, x| {
                    if let Some(p) = first {
                        *x = std::array::from_fn(|j| p.wrapping_add(j as u64));
                    }
                    self.feistel.permute_lanes(x, &keys);
                    self.outside_mask(x)
                });
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "sse2")]
    fn cyclic_fill_sse2(&self, p0: u64, keys: &RoundKeys, out: &mut [u64]) {
        self.cyclic_fill(p0, out, |first, x| {
            if let Some(p) = first {
                *x = std::array::from_fn(|j| p.wrapping_add(j as u64));
            }
            self.feistel.permute_lanes_sse2(x, keys);
            self.outside_mask(x)
        });
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    fn cyclic_fill_avx2(&self, p0: u64, keys: &RoundKeys, out: &mut [u64]) {
        self.cyclic_fill(p0, out, |first, x| {
            self.feistel.permute_lanes_avx2(first, x, keys, self.len)
        });
    }

    /// Writes `π_c(p0 + j)` into `out[j]`, block by block. `kernel(first, x)` is the lockstep
    /// domain permutation of the cycle: it permutes the positions `first .. first + LANES` (when
    /// `Some`) or the values in `x` (when `None`), writes the results to `x` and returns the mask of
    /// the lanes whose result is `>= len`.
    #[inline(always)]
    fn cyclic_fill(
        &self,
        p0: u64,
        out: &mut [u64],
        kernel: impl Fn(Option<u64>, &mut [u64; LANES]) -> u64,
    ) {
        for (b, block) in out.chunks_mut(BLOCK).enumerate() {
            self.cyclic_block(p0 + (b * BLOCK) as u64, block, &kernel);
        }
    }

    /// Writes `π_c(p0 + j)` into `out[j]` for a block of at most [`BLOCK`] positions.
    ///
    /// All positions go through the domain permutation in lockstep groups of [`LANES`]; the results
    /// that land outside `[0, len)` are marked, branch-free, in a bit mask and walked again, also in
    /// lockstep groups, until every slot holds a value `< len`.
    #[inline(always)]
    fn cyclic_block(
        &self,
        p0: u64,
        out: &mut [u64],
        kernel: &impl Fn(Option<u64>, &mut [u64; LANES]) -> u64,
    ) {
        debug_assert!(out.len() <= BLOCK);
        // Bit j: out[j] is still >= len.
        let mut pending = 0u64;
        for (g, chunk) in out.chunks_mut(LANES).enumerate() {
            let first = Some(p0.wrapping_add((g * LANES) as u64));
            let outside = match <&mut [u64; LANES]>::try_from(&mut *chunk) {
                Ok(x) => kernel(first, x),
                Err(_) => {
                    // A short last chunk: lanes past its end are computed and dropped.
                    let mut x = [0u64; LANES];
                    let outside = kernel(first, &mut x);
                    chunk.copy_from_slice(&x[..chunk.len()]);
                    outside & (u64::MAX >> (64 - chunk.len()))
                }
            };
            pending |= outside << (g * LANES);
        }
        // Cycle-walking: the orbit of p under a bijection of the larger domain returns to p, so it
        // reaches a value < len; restricted this way the map stays a bijection on [0, len). The
        // pending slots of the block are walked together, LANES at a time.
        while pending != 0 {
            let mut rest = pending;
            pending = 0;
            while rest != 0 {
                let mut slots = [0usize; LANES];
                let mut x = [0u64; LANES];
                let mut k = 0;
                while rest != 0 && k < LANES {
                    slots[k] = rest.trailing_zeros() as usize;
                    rest &= rest - 1;
                    x[k] = out[slots[k]];
                    k += 1;
                }
                let outside = kernel(None, &mut x);
                for (j, (&s, &v)) in slots[..k].iter().zip(&x).enumerate() {
                    out[s] = v;
                    pending |= ((outside >> j) & 1) << s;
                }
            }
        }
    }

    /// The out-of-range mask of a kernel's results, for kernels that do not make it themselves.
    #[inline(always)]
    fn outside_mask(&self, x: &[u64; LANES]) -> u64 {
        let mut outside = 0u64;
        for (j, &v) in x.iter().enumerate() {
            outside |= u64::from(v >= self.len) << j;
        }
        outside
    }
}

/// The built-in stateless sampler: [`Mode::Sequential`], [`Mode::Iid`] or [`Mode::Cyclic`] over
/// `[0, len)`, `batch` indices per draw, keyed by `seed`.
#[derive(Clone, Debug)]
pub struct IndexSampler {
    plan: Plan,
    step: u64,
    buf: Vec<u64>,
}

impl IndexSampler {
    /// A sampler at step 0.
    ///
    /// Errors: `len == 0`, `batch == 0`, or `Cyclic` with `len < batch` (a cycle must hold one full
    /// batch).
    pub fn new(len: u64, batch: usize, mode: Mode, seed: u64) -> Result<Self> {
        if len == 0 {
            return Err(Error::invalid("sampler length must be positive"));
        }
        if batch == 0 {
            return Err(Error::invalid("sampler batch size must be positive"));
        }
        if mode == Mode::Cyclic && len < batch as u64 {
            return Err(Error::invalid(format!(
                "cyclic sampler needs len >= batch (one full batch per cycle); got len {len} < batch {batch}"
            )));
        }
        let steps_per_cycle = (len / batch as u64).max(1);
        let plan = Plan {
            len,
            batch,
            mode,
            seed,
            key: mix64(seed ^ 0x5851_f42d_4c95_7f2d),
            steps_per_cycle,
            feistel: Feistel::for_len(len),
        };
        Ok(IndexSampler {
            plan,
            step: 0,
            buf: vec![0; batch],
        })
    }

    /// The ordering mode.
    pub fn mode(&self) -> Mode {
        self.plan.mode
    }

    /// The seed.
    pub fn seed(&self) -> u64 {
        self.plan.seed
    }

    /// Steps per cycle for [`Mode::Cyclic`] (`len / batch`); for the other modes, `ceil(len / batch)`
    /// is not meaningful and this still returns `len / batch` (at least 1).
    pub fn steps_per_cycle(&self) -> u64 {
        self.plan.steps_per_cycle
    }

    /// Writes the batch at `step` into `out` without touching the sampler's position: the pure
    /// function every draw is made of. `out.len()` must equal the batch size.
    pub fn batch_at(&self, step: u64, out: &mut [u64]) -> Result<()> {
        if out.len() != self.plan.batch {
            return Err(Error::invalid(format!(
                "batch_at needs a buffer of {} indices, got {}",
                self.plan.batch,
                out.len()
            )));
        }
        self.plan.fill(step, 0, out);
        Ok(())
    }

    /// [`IndexSampler::batch_at`] sliced to `range` (within `0..batch`; `out.len() == range.len()`),
    /// at O(`range.len()`) cost: the other positions are never computed.
    pub fn batch_range_at(&self, step: u64, range: Range<usize>, out: &mut [u64]) -> Result<()> {
        check_range(&range, self.plan.batch)?;
        if out.len() != range.len() {
            return Err(Error::invalid(format!(
                "batch_range_at needs a buffer of {} indices for range {}..{}, got {}",
                range.len(),
                range.start,
                range.end,
                out.len()
            )));
        }
        self.plan.fill(step, range.start, out);
        Ok(())
    }
}

impl Sampler for IndexSampler {
    fn next(&mut self) -> Result<&[u64]> {
        self.plan.fill(self.step, 0, &mut self.buf);
        self.step = self.step.wrapping_add(1);
        Ok(&self.buf)
    }

    fn next_range(&mut self, range: Range<usize>) -> Result<&[u64]> {
        check_range(&range, self.plan.batch)?;
        let out = &mut self.buf[..range.len()];
        self.plan.fill(self.step, range.start, out);
        self.step = self.step.wrapping_add(1);
        Ok(out)
    }

    fn batch_size(&self) -> usize {
        self.plan.batch
    }

    fn len(&self) -> u64 {
        self.plan.len
    }

    fn step(&self) -> u64 {
        self.step
    }

    fn seek(&mut self, step: u64) -> Result<()> {
        self.step = step;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
