//! [`Domain`]: a keyed bijection of `[0, len)` by cycle-walking a [`Feistel`] network, computed
//! `LANES` positions at a time (AVX2, SSE2 or portable kernels, all giving the same result).

use super::feistel::{Feistel, LANES, RoundKeys};

/// A lockstep kernel's input: the positions `p .. p + LANES` when `first` is `Some(p)`, else the
/// values already in `x` (see [`Domain::permute_with`]).
#[inline(always)]
pub(super) fn positions(first: Option<u64>, x: &mut [u64; LANES]) {
    if let Some(p) = first {
        *x = std::array::from_fn(|j| p.wrapping_add(j as u64));
    }
}

/// Positions per cycle-walking block: one bit each in a `u64` pending mask.
pub(super) const BLOCK: usize = 64;

/// A keyed bijection of `[0, len)`: the [`Feistel`] network on the smallest power-of-two domain
/// holding `len`, restricted to `[0, len)` by cycle-walking. Cyclic permutes the whole index space
/// with one; Block permutes the blocks with one and each window's records with another.
#[derive(Clone, Copy, Debug)]
pub(super) struct Domain {
    pub(super) len: u64,
    pub(super) feistel: Feistel,
}

impl Domain {
    /// The domain `[0, len)` (`len >= 1`).
    pub(super) fn new(len: u64) -> Self {
        Domain {
            len,
            feistel: Feistel::for_len(len),
        }
    }

    /// With `start = Some(p0)`, writes `π(p0 + j)` into `out[j]` (all positions `< len`); with
    /// `None`, replaces every `out[j]` (each `< len`) by `π(out[j])`.
    pub(super) fn permute(&self, keys: &RoundKeys, start: Option<u64>, out: &mut [u64]) {
        #[cfg(target_arch = "x86_64")]
        if std::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2, checked just above.
            unsafe { self.permute_avx2(keys, start, out) };
        } else {
            // SAFETY: SSE2 is part of the x86-64 baseline, so every x86-64 CPU has it.
            unsafe { self.permute_sse2(keys, start, out) };
        }
        #[cfg(not(target_arch = "x86_64"))]
        self.permute_with(start, out, |first, x| {
            positions(first, x);
            self.feistel.permute_lanes(x, keys);
            self.outside_mask(x)
        });
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "sse2")]
    pub(super) fn permute_sse2(&self, keys: &RoundKeys, start: Option<u64>, out: &mut [u64]) {
        self.permute_with(start, out, |first, x| {
            positions(first, x);
            self.feistel.permute_lanes_sse2(x, keys);
            self.outside_mask(x)
        });
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    pub(super) fn permute_avx2(&self, keys: &RoundKeys, start: Option<u64>, out: &mut [u64]) {
        self.permute_with(start, out, |first, x| {
            self.feistel.permute_lanes_avx2(first, x, keys, self.len)
        });
    }

    /// [`Domain::permute`] block by block. `kernel(first, x)` is the lockstep domain permutation:
    /// it permutes the positions `first .. first + LANES` (when `Some`) or the values in `x` (when
    /// `None`), writes the results to `x` and returns the mask of the lanes whose result is
    /// `>= len`.
    #[inline(always)]
    pub(super) fn permute_with(
        &self,
        start: Option<u64>,
        out: &mut [u64],
        kernel: impl Fn(Option<u64>, &mut [u64; LANES]) -> u64,
    ) {
        for (b, block) in out.chunks_mut(BLOCK).enumerate() {
            let first = start.map(|p0| p0 + (b * BLOCK) as u64);
            self.permute_block(first, block, &kernel);
        }
    }

    /// [`Domain::permute`] of a block of at most [`BLOCK`] slots.
    ///
    /// All inputs go through the domain permutation in lockstep groups of [`LANES`]; the results
    /// that land outside `[0, len)` are marked, branch-free, in a bit mask and walked again, also in
    /// lockstep groups, until every slot holds a value `< len`.
    #[inline(always)]
    fn permute_block(
        &self,
        start: Option<u64>,
        out: &mut [u64],
        kernel: &impl Fn(Option<u64>, &mut [u64; LANES]) -> u64,
    ) {
        debug_assert!(out.len() <= BLOCK);
        // Bit j: out[j] is still >= len.
        let mut pending = 0u64;
        for (g, chunk) in out.chunks_mut(LANES).enumerate() {
            let first = start.map(|p0| p0.wrapping_add((g * LANES) as u64));
            let outside = match <&mut [u64; LANES]>::try_from(&mut *chunk) {
                Ok(x) => kernel(first, x),
                Err(_) => {
                    // A short last chunk: lanes past its end are computed and dropped (given
                    // value 0, which is in range, when permuting values).
                    let mut x = [0u64; LANES];
                    if first.is_none() {
                        x[..chunk.len()].copy_from_slice(chunk);
                    }
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
    pub(super) fn outside_mask(&self, x: &[u64; LANES]) -> u64 {
        let mut outside = 0u64;
        for (j, &v) in x.iter().enumerate() {
            outside |= u64::from(v >= self.len) << j;
        }
        outside
    }
}
