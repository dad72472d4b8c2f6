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
//!   does the omitted remainder.

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
#[derive(Clone, Copy, Debug)]
struct Feistel {
    right_bits: u32,
    right_mask: u64,
    /// `64 - left_bits` and `64 - right_bits`: a round output's top bits fit the half exactly.
    left_shift: u32,
    right_shift: u32,
}

impl Feistel {
    fn for_len(len: u64) -> Self {
        // Smallest power-of-two domain holding [0, len), at least 4 so both halves are non-empty.
        let bits = (u64::BITS - (len - 1).leading_zeros()).max(2);
        let right_bits = bits / 2;
        let left_bits = bits - right_bits;
        Feistel {
            right_bits,
            right_mask: (1u64 << right_bits) - 1,
            left_shift: 64 - left_bits,
            right_shift: 64 - right_bits,
        }
    }

    /// Round function: two multiply-xorshift steps on 64-bit words; the top bits of the last product
    /// depend on every input bit. `shift` keeps the top `64 - shift` bits (the half's width).
    #[inline(always)]
    fn round(v: u64, k: u64, shift: u32) -> u64 {
        let z = (v ^ k).wrapping_mul(M1);
        let z = (z ^ (z >> 32)).wrapping_mul(M2);
        z >> shift
    }

    #[inline(always)]
    fn permute(&self, x: u64, keys: &[u64; 4]) -> u64 {
        let mut l = x >> self.right_bits;
        let mut r = x & self.right_mask;
        l ^= Self::round(r, keys[0], self.left_shift);
        r ^= Self::round(l, keys[1], self.right_shift);
        l ^= Self::round(r, keys[2], self.left_shift);
        r ^= Self::round(l, keys[3], self.right_shift);
        (l << self.right_bits) | r
    }
}

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
    fn cycle_keys(&self, cycle: u64) -> [u64; 4] {
        let ck = mix64(self.key ^ mix64(cycle.wrapping_add(CYCLE_SALT)));
        [
            mix64(ck.wrapping_add(GAMMA)),
            mix64(ck.wrapping_add(GAMMA.wrapping_mul(2))),
            mix64(ck.wrapping_add(GAMMA.wrapping_mul(3))),
            mix64(ck.wrapping_add(GAMMA.wrapping_mul(4))),
        ]
    }

    /// The bijection of cycle `cycle` applied to one position `p < len`.
    #[inline(always)]
    fn cyclic_at(&self, p: u64, keys: &[u64; 4]) -> u64 {
        // Cycle-walking: the orbit of p under a bijection of the larger domain returns to p, so it
        // reaches a value < len; restricted this way the map stays a bijection on [0, len).
        let mut x = self.feistel.permute(p, keys);
        while x >= self.len {
            x = self.feistel.permute(x, keys);
        }
        x
    }

    fn fill(&self, step: u64, out: &mut [u64]) {
        debug_assert_eq!(out.len(), self.batch);
        match self.mode {
            Mode::Sequential => {
                let start = ((step as u128 * self.batch as u128) % self.len as u128) as u64;
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
                let base = step.wrapping_mul(self.batch as u64);
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
                let p0 = within * self.batch as u64;
                for (o, p) in out.iter_mut().zip(p0..) {
                    *o = self.cyclic_at(p, &keys);
                }
            }
        }
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
        self.plan.fill(step, out);
        Ok(())
    }
}

impl Sampler for IndexSampler {
    fn next(&mut self) -> Result<&[u64]> {
        self.plan.fill(self.step, &mut self.buf);
        self.step = self.step.wrapping_add(1);
        Ok(&self.buf)
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
mod tests {
    use super::*;

    #[test]
    fn feistel_is_a_bijection_on_its_domain() {
        for len in [1u64, 2, 3, 5, 16, 17, 100, 1000, 4097] {
            let f = Feistel::for_len(len);
            let domain = 1u64 << (64 - f.left_shift + f.right_bits);
            assert!(
                domain >= len && domain < 4 * len.max(2),
                "len {len} domain {domain}"
            );
            let keys = [1, 2, 3, 4];
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
    fn reduce_stays_in_range() {
        for len in [1u64, 2, 3, 7, 1 << 40, u64::MAX] {
            for h in [0u64, 1, u64::MAX, 0x8000_0000_0000_0000, 12345] {
                assert!(reduce(h, len) < len);
            }
        }
    }
}
