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

use serde::{Deserialize, Serialize};

use self::feistel::{Feistel, LANES, RoundKeys};
use crate::error::{Error, Result};

mod feistel;

/// A lockstep kernel's input: the positions `p .. p + LANES` when `first` is `Some(p)`, else the
/// values already in `x` (see [`Plan::cyclic_fill`]).
#[inline(always)]
fn positions(first: Option<u64>, x: &mut [u64; LANES]) {
    if let Some(p) = first {
        *x = std::array::from_fn(|j| p.wrapping_add(j as u64));
    }
}

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

    /// What the sampler draws, for a loader's resume state: `Some` for a stateless sampler whose
    /// batch at any step follows from the spec (and its batch size) alone, as [`IndexSampler`]'s
    /// does; `None` (the default) for any other, whose position a loader can only `seek`.
    fn spec(&self) -> Option<IndexSpec> {
        None
    }

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
    fn spec(&self) -> Option<IndexSpec> {
        (**self).spec()
    }
}

/// What an [`IndexSampler`] draws, besides its batch size: the index space, the mode and the seed.
/// The batch at any step is a pure function of this and the batch size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IndexSpec {
    /// Size of the index space `[0, len)`.
    pub len: u64,
    /// The ordering mode.
    pub mode: Mode,
    /// The seed.
    pub seed: u64,
}

/// How [`IndexSampler`] orders indices. Serialized as `"SEQUENTIAL"`, `"IID"`, `"CYCLIC"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
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
                self.sequential(start, out);
            }
            Mode::Iid => self.iid(
                step.wrapping_mul(self.batch as u64)
                    .wrapping_add(first as u64),
                out,
            ),
            Mode::Cyclic => {
                let cycle = step / self.steps_per_cycle;
                let within = step % self.steps_per_cycle;
                let keys = self.cycle_keys(cycle);
                self.cyclic(within * self.batch as u64 + first as u64, &keys, out);
            }
        }
    }

    /// Writes the indices at flat positions `first .. first + out.len()` of the endless stream
    /// (flat position `step * batch + j` is index `j` of the batch at `step`) into `out`, whatever
    /// batch boundaries the range crosses; a Cyclic range is cut only where a cycle ends.
    fn fill_flat(&self, first: u64, out: &mut [u64]) {
        match self.mode {
            Mode::Sequential => self.sequential(first % self.len, out),
            Mode::Iid => self.iid(first, out),
            Mode::Cyclic => {
                let per_cycle = self.steps_per_cycle * self.batch as u64;
                let (mut p, mut done) = (first, 0);
                while done < out.len() {
                    let (cycle, p0) = (p / per_cycle, p % per_cycle);
                    let n = (out.len() - done)
                        .min(usize::try_from(per_cycle - p0).unwrap_or(usize::MAX));
                    let keys = self.cycle_keys(cycle);
                    self.cyclic(p0, &keys, &mut out[done..done + n]);
                    p += n as u64;
                    done += n;
                }
            }
        }
    }

    /// Sequential indices from `start` (< `len`), wrapping at `len`.
    fn sequential(&self, start: u64, out: &mut [u64]) {
        let mut v = start;
        for o in out.iter_mut() {
            *o = v;
            v += 1;
            if v == self.len {
                v = 0;
            }
        }
    }

    /// IID indices at the global positions `base ..`.
    fn iid(&self, base: u64, out: &mut [u64]) {
        let len = self.len;
        let mut ctr = self.key.wrapping_add(base.wrapping_mul(WY_GAMMA));
        for o in out.iter_mut() {
            ctr = ctr.wrapping_add(WY_GAMMA);
            *o = reduce(wymix(ctr), len);
        }
    }

    /// The cycle's permutation of the positions `p0 ..` (all within one cycle).
    fn cyclic(&self, p0: u64, keys: &RoundKeys, out: &mut [u64]) {
        #[cfg(target_arch = "x86_64")]
        if std::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2, checked just above.
            unsafe { self.cyclic_fill_avx2(p0, keys, out) };
        } else {
            // SAFETY: SSE2 is part of the x86-64 baseline, so every x86-64 CPU has it.
            unsafe { self.cyclic_fill_sse2(p0, keys, out) };
        }
        #[cfg(not(target_arch = "x86_64"))]
        self.cyclic_fill(p0, out, |first, x| {
            positions(first, x);
            self.feistel.permute_lanes(x, keys);
            self.outside_mask(x)
        });
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "sse2")]
    fn cyclic_fill_sse2(&self, p0: u64, keys: &RoundKeys, out: &mut [u64]) {
        self.cyclic_fill(p0, out, |first, x| {
            positions(first, x);
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

    /// The index space, mode and seed.
    pub fn spec(&self) -> IndexSpec {
        IndexSpec {
            len: self.plan.len,
            mode: self.plan.mode,
            seed: self.plan.seed,
        }
    }

    /// Writes the indices at flat positions `first .. first + out.len()` of the endless index
    /// stream into `out`, without touching the sampler's position. Flat position `step * batch + j`
    /// is index `j` of the batch at `step`, so this is [`IndexSampler::batch_at`] over any run of
    /// positions, batch boundaries included, at O(`out.len()`) cost. With batch size 1, a Cyclic
    /// sampler's cycle is one permutation of the whole `[0, len)` and nothing is omitted.
    pub fn positions_at(&self, first: u64, out: &mut [u64]) {
        self.plan.fill_flat(first, out);
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

    fn spec(&self) -> Option<IndexSpec> {
        Some(IndexSampler::spec(self))
    }
}

#[cfg(test)]
mod tests;
