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
//! * [`Mode::Block`] reads the dataset in runs of `block` consecutive records. The flat stream of
//!   positions (`step * batch + i`) is cut into epochs of `len` positions, so batches run across
//!   epoch ends as Sequential's do and every record is drawn exactly once per epoch. An epoch
//!   permutes its `len / block` full blocks (a keyed permutation of the block ids, fresh per
//!   epoch) and puts the partial block of the last `len % block` records, if any, last; the
//!   permuted blocks are grouped in windows of `window`, and the records of each window are
//!   permuted among themselves (a permutation keyed by the epoch and the window). Position `q` of
//!   an epoch lies in window `q / (block * window)`; both permutations are the Feistel bijection
//!   Cyclic uses, so a position costs O(1), whatever the step.
//!
//! An index is a function of its position alone, so a slice of a batch ([`Sampler::next_range`],
//! [`IndexSampler::batch_range_at`]: one process's part, `docs/distributed.md`) costs O(slice).

use std::ops::Range;

use serde::{Deserialize, Serialize};

use self::feistel::RoundKeys;
use crate::error::{Error, Result};

mod block;
mod domain;
mod feistel;

use self::block::{BLOCK_SALT, Blocks, Keys, MAX_LISTED_BLOCKS, WINDOW_SALT, blocks};
use self::domain::Domain;

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

/// How [`IndexSampler`] orders indices. Serialized as `"SEQUENTIAL"`, `"IID"`, `"CYCLIC"` and
/// `{"BLOCK": {"block": b, "window": w}}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Mode {
    /// In order, wrapping at the end.
    Sequential,
    /// Uniform with replacement.
    Iid,
    /// A fresh permutation per cycle, without replacement, full batches only.
    Cyclic,
    /// A block shuffle: each epoch of `len` flat positions permutes the blocks of `block`
    /// consecutive records, then permutes the records within each window of `window` consecutive
    /// permuted blocks; every record once per epoch (see the module docs).
    Block {
        /// Consecutive records per block (>= 1).
        block: u64,
        /// Blocks per window (>= 1).
        window: u64,
    },
}

/// The block of [`Mode::block_default`]: the records of a block read at once.
pub const DEFAULT_BLOCK: u64 = 256;
/// The window of [`Mode::block_default`], in blocks.
pub const DEFAULT_WINDOW: u64 = 64;
/// The block bytes [`Mode::block_for_record_bytes`] aims for (at most [`DEFAULT_BLOCK`] records).
pub const BLOCK_TARGET_BYTES: u64 = 1 << 20;
/// The window bytes (`window x block x record size`) [`Mode::block_for_record_bytes`] stays within.
pub const WINDOW_TARGET_BYTES: u64 = 64 << 20;
/// The most blocks per window [`Mode::block_for_record_bytes`] chooses.
pub const MAX_DEFAULT_WINDOW: u64 = 1024;

impl Mode {
    /// `Block { block: 256, window: 64 }`: a window of 16,384 records (64 MiB of 4 KiB records),
    /// what [`Mode::block_for_record_bytes`] chooses for 4 KiB records, for a sampler that does not
    /// know the record size.
    pub const fn block_default() -> Mode {
        Mode::Block {
            block: DEFAULT_BLOCK,
            window: DEFAULT_WINDOW,
        }
    }

    /// A block shuffle sized for records of about `record_bytes` bytes: blocks of
    /// `clamp(1 MiB / record_bytes, 1, 256)` records (one read of about 1 MiB, or 256 records when
    /// they are smaller than 4 KiB), and windows of `clamp(64 MiB / block bytes, 1, 1024)` blocks,
    /// so the window buffer (`window x block x record_bytes`) stays within 64 MiB.
    pub fn block_for_record_bytes(record_bytes: u64) -> Mode {
        let bytes = record_bytes.max(1);
        let block = (BLOCK_TARGET_BYTES / bytes).clamp(1, DEFAULT_BLOCK);
        let window = (WINDOW_TARGET_BYTES / (block * bytes)).clamp(1, MAX_DEFAULT_WINDOW);
        Mode::Block { block, window }
    }
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

/// How a [`Plan`] maps positions to indices: the mode, with what Block needs precomputed.
#[derive(Clone, Copy, Debug)]
enum Order {
    Sequential,
    Iid,
    Cyclic,
    Block(Blocks),
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
    domain: Domain,
    order: Order,
}

/// The four round keys of one permutation, from one 64-bit key.
fn round_keys(ck: u64) -> RoundKeys {
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

impl Plan {
    fn cycle_keys(&self, cycle: u64) -> RoundKeys {
        round_keys(mix64(self.key ^ mix64(cycle.wrapping_add(CYCLE_SALT))))
    }

    /// The keys of the block permutation of `epoch`.
    fn block_keys(&self, epoch: u64) -> RoundKeys {
        round_keys(mix64(self.key ^ mix64(epoch.wrapping_add(BLOCK_SALT))))
    }

    /// The keys of the record permutation of window `w` of `epoch`.
    fn window_keys(&self, epoch: u64, w: u64) -> RoundKeys {
        let e = mix64(self.key ^ mix64(epoch.wrapping_add(WINDOW_SALT)));
        round_keys(mix64(e ^ mix64(w.wrapping_add(GAMMA))))
    }

    /// The block shuffle's indices from position `q` (< `len`) of `epoch` on ([`Blocks::fill`]).
    fn block(&self, b: &Blocks, epoch: u64, q: u64, out: &mut [u64]) {
        let keys = Keys {
            blocks: &|e| self.block_keys(e),
            window: &|e, w| self.window_keys(e, w),
        };
        b.fill(self.len, &keys, epoch, q, out);
    }

    /// The blocks of window `w` of `epoch` ([`Blocks::window_blocks`]).
    fn window_blocks(&self, b: &Blocks, epoch: u64, w: u64, out: &mut Vec<Range<u64>>) {
        let keys = Keys {
            blocks: &|e| self.block_keys(e),
            window: &|e, w| self.window_keys(e, w),
        };
        b.window_blocks(self.len, &keys, epoch, w, out);
    }

    /// Writes positions `first .. first + out.len()` of the batch at `step` into `out`
    /// (`first + out.len() <= batch`); each position costs the same whatever the others are.
    fn fill(&self, step: u64, first: usize, out: &mut [u64]) {
        debug_assert!(first + out.len() <= self.batch);
        match self.order {
            Order::Sequential => {
                let start =
                    ((step as u128 * self.batch as u128 + first as u128) % self.len as u128) as u64;
                self.sequential(start, out);
            }
            Order::Iid => self.iid(
                step.wrapping_mul(self.batch as u64)
                    .wrapping_add(first as u64),
                out,
            ),
            Order::Cyclic => {
                let cycle = step / self.steps_per_cycle;
                let within = step % self.steps_per_cycle;
                let keys = self.cycle_keys(cycle);
                self.cyclic(within * self.batch as u64 + first as u64, &keys, out);
            }
            Order::Block(b) => {
                // Flat position step * batch + first, in 128 bits: epoch and position within it.
                let p = step as u128 * self.batch as u128 + first as u128;
                let epoch = (p / self.len as u128) as u64;
                let q = (p % self.len as u128) as u64;
                self.block(&b, epoch, q, out);
            }
        }
    }

    /// Writes the indices at flat positions `first .. first + out.len()` of the endless stream
    /// (flat position `step * batch + j` is index `j` of the batch at `step`) into `out`, whatever
    /// batch boundaries the range crosses; a Cyclic range is cut only where a cycle ends.
    fn fill_flat(&self, first: u64, out: &mut [u64]) {
        match self.order {
            Order::Sequential => self.sequential(first % self.len, out),
            Order::Iid => self.iid(first, out),
            Order::Cyclic => {
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
            Order::Block(b) => self.block(&b, first / self.len, first % self.len, out),
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
        self.domain.permute(keys, Some(p0), out);
    }
}

/// The built-in stateless sampler: [`Mode::Sequential`], [`Mode::Iid`], [`Mode::Cyclic`] or
/// [`Mode::Block`] over
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
    /// Errors: `len == 0`, `batch == 0`, `Cyclic` with `len < batch` (a cycle must hold one full
    /// batch), or `Block` with `block == 0`, `window == 0` or `block x window >= 2^64`.
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
        let order = match mode {
            Mode::Sequential => Order::Sequential,
            Mode::Iid => Order::Iid,
            Mode::Cyclic => Order::Cyclic,
            Mode::Block { block, window } => Order::Block(blocks(len, block, window)?),
        };
        let steps_per_cycle = (len / batch as u64).max(1);
        let plan = Plan {
            len,
            batch,
            mode,
            seed,
            key: mix64(seed ^ 0x5851_f42d_4c95_7f2d),
            steps_per_cycle,
            domain: Domain::new(len),
            order,
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

    /// The reads a block shuffle's batch slice needs: the blocks holding the indices of
    /// [`IndexSampler::batch_range_at`]`(step, range)`, each once, as id ranges in ascending order
    /// (`b * block .. min((b + 1) * block, len)`). A reader that fetches each range as one read (a
    /// gather of its ids coalesces into one sequential read or one range request) and serves the
    /// slice's records from them reads every block the slice touches once. Costs O(`range.len()`
    /// log `range.len()`). Appends to `out`.
    ///
    /// Errors: a mode other than [`Mode::Block`], or `range` not within the batch.
    pub fn block_runs_at(
        &self,
        step: u64,
        range: Range<usize>,
        out: &mut Vec<Range<u64>>,
    ) -> Result<()> {
        let b = self.blocks()?;
        let mut ids = vec![0; range.len()];
        self.batch_range_at(step, range, &mut ids)?;
        for id in &mut ids {
            *id /= b.block;
        }
        ids.sort_unstable();
        ids.dedup();
        out.extend(
            ids.iter()
                .map(|&k| k * b.block..(k + 1).saturating_mul(b.block).min(self.plan.len)),
        );
        Ok(())
    }

    /// The reads a window buffer needs for a block shuffle's batch slice: every block of each
    /// window the slice's positions lie in, window by window in drawing order, each window's
    /// blocks in the order the epoch permuted them (the partial last block, if in the window,
    /// last). A reader that keeps the current window's blocks (`window x block` records) fetches
    /// each block once per epoch and serves every batch of the window from memory; a resumed run
    /// simply fetches the window it resumes in again. A window ending inside the slice is listed
    /// before the next one. Costs O(blocks listed): `window` per window. Appends to `out`.
    ///
    /// Errors: a mode other than [`Mode::Block`], `range` not within the batch, or windows of more
    /// than 2^24 blocks.
    pub fn window_runs_at(
        &self,
        step: u64,
        range: Range<usize>,
        out: &mut Vec<Range<u64>>,
    ) -> Result<()> {
        let b = self.blocks()?;
        check_range(&range, self.plan.batch)?;
        if range.is_empty() {
            return Ok(());
        }
        let slots = self.plan.len.div_ceil(b.block);
        if b.window.min(slots) > MAX_LISTED_BLOCKS {
            return Err(Error::invalid(format!(
                "a window of {} blocks is too many to list (at most {MAX_LISTED_BLOCKS})",
                b.window.min(slots)
            )));
        }
        let len = u128::from(self.plan.len);
        let first = u128::from(step) * self.plan.batch as u128 + range.start as u128;
        let last = first + (range.len() - 1) as u128;
        // Window starts, as flat positions: (epoch, window) pairs from first's to last's.
        let window_of = |p: u128| ((p / len) as u64, ((p % len) as u64) / b.span);
        let (mut epoch, mut w) = window_of(first);
        let end = window_of(last);
        let windows_per_epoch = self.plan.len.div_ceil(b.span);
        loop {
            self.plan.window_blocks(&b, epoch, w, out);
            if (epoch, w) == end {
                return Ok(());
            }
            w += 1;
            if w == windows_per_epoch {
                w = 0;
                epoch = epoch.wrapping_add(1);
            }
        }
    }

    /// The block shape, or an error for the other modes.
    fn blocks(&self) -> Result<Blocks> {
        match self.plan.order {
            Order::Block(b) => Ok(b),
            _ => Err(Error::invalid(format!(
                "block and window runs are a block shuffle's (Mode::Block); this sampler is {:?}",
                self.plan.mode
            ))),
        }
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
