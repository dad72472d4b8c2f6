//! [`Mode::Block`](super::Mode::Block)'s shape ([`Blocks`], checked by [`blocks`]) and the [`Plan`] methods that turn
//! a block shuffle's positions into record ids.

use super::domain::{BLOCK, Domain};
use super::feistel::RoundKeys;
use crate::error::{Error, Result};

/// A block shuffle's shape (see [`Mode::Block`](super::Mode::Block)): `full` blocks of `block` records, then a tail of
/// `len - full x block` (< `block`) records that is the last block of every epoch; windows of
/// `window` permuted blocks, `span = window x block` records each but the last.
#[derive(Clone, Copy, Debug)]
pub(super) struct Blocks {
    pub(super) block: u64,
    pub(super) window: u64,
    pub(super) span: u64,
    pub(super) full: u64,
}

pub(super) const BLOCK_SALT: u64 = 0x2545_f491_4f6c_dd1d;
pub(super) const WINDOW_SALT: u64 = 0xd6e8_feb8_6659_fd93;

/// A block shuffle's permutation keys: the blocks' of an epoch, and a window's of an epoch.
pub(super) struct Keys<'a> {
    pub(super) blocks: &'a dyn Fn(u64) -> RoundKeys,
    pub(super) window: &'a dyn Fn(u64, u64) -> RoundKeys,
}

impl Blocks {
    /// The block shuffle's indices from position `q` (< `len`) of `epoch` on, across windows and
    /// epochs: one window's run at a time.
    pub(super) fn fill(&self, len: u64, k: &Keys, mut epoch: u64, mut q: u64, out: &mut [u64]) {
        let mut done = 0;
        while done < out.len() {
            let (w, r0) = (q / self.span, q % self.span);
            let size = self.span.min(len - w * self.span);
            let n = (out.len() - done).min(usize::try_from(size - r0).unwrap_or(usize::MAX));
            self.run(k, epoch, w, r0, size, &mut out[done..done + n]);
            done += n;
            q += n as u64;
            if q == len {
                q = 0;
                epoch = epoch.wrapping_add(1);
            }
        }
    }

    /// Positions `r0 ..` of window `w` (of `size` records) of `epoch`: each position permuted
    /// within the window, the result's block slot mapped through the epoch's block permutation.
    fn run(&self, k: &Keys, epoch: u64, w: u64, r0: u64, size: u64, out: &mut [u64]) {
        // Domains are a few words, made where they are needed: the sampler stays small.
        Domain::new(size).permute(&(k.window)(epoch, w), Some(r0), out);
        let blocks = (self.full > 0).then(|| Domain::new(self.full));
        let keys = (k.blocks)(epoch);
        let first_slot = w * self.window;
        let tail_start = self.full * self.block;
        for chunk in out.chunks_mut(BLOCK) {
            let mut offsets = [0u64; BLOCK];
            // Bit j: chunk[j] lies in the tail (the epoch's last, partial block).
            let mut tail = 0u64;
            for (j, v) in chunk.iter_mut().enumerate() {
                // A power-of-two block (the defaults') splits by shift and mask, not division.
                let (q, r) = if self.block.is_power_of_two() {
                    (*v >> self.block.trailing_zeros(), *v & (self.block - 1))
                } else {
                    (*v / self.block, *v % self.block)
                };
                let slot = first_slot + q;
                offsets[j] = r;
                if slot < self.full {
                    *v = slot;
                } else {
                    tail |= 1 << j;
                    *v = 0;
                }
            }
            if let Some(blocks) = &blocks {
                blocks.permute(&keys, None, chunk);
            }
            for (j, v) in chunk.iter_mut().enumerate() {
                *v = if (tail >> j) & 1 == 1 {
                    tail_start + offsets[j]
                } else {
                    *v * self.block + offsets[j]
                };
            }
        }
    }

    /// The blocks of window `w` of `epoch`, as id ranges in the order the window lists them.
    pub(super) fn window_blocks(
        &self,
        len: u64,
        k: &Keys,
        epoch: u64,
        w: u64,
        out: &mut Vec<std::ops::Range<u64>>,
    ) {
        let slots = self.full + u64::from(len > self.full * self.block);
        let (lo, hi) = (
            w * self.window,
            (w + 1).saturating_mul(self.window).min(slots),
        );
        let mut ids: Vec<u64> = (lo..hi.min(self.full)).collect();
        if self.full > 0 {
            Domain::new(self.full).permute(&(k.blocks)(epoch), None, &mut ids);
        }
        out.extend(ids.iter().map(|&id| id * self.block..(id + 1) * self.block));
        if hi > self.full {
            out.push(self.full * self.block..len);
        }
    }
}

/// The most blocks of one window [`IndexSampler::window_runs_at`] lists.
pub(super) const MAX_LISTED_BLOCKS: u64 = 1 << 24;

/// A block shuffle's shape over `[0, len)`, checked.
pub(super) fn blocks(len: u64, block: u64, window: u64) -> Result<Blocks> {
    if block == 0 {
        return Err(Error::invalid(
            "block sampler needs block >= 1 (records per block)",
        ));
    }
    if window == 0 {
        return Err(Error::invalid(
            "block sampler needs window >= 1 (blocks per window)",
        ));
    }
    let span = block.checked_mul(window).ok_or_else(|| {
        Error::invalid(format!(
            "block sampler window of {window} blocks of {block} records overflows 64 bits"
        ))
    })?;
    Ok(Blocks {
        block,
        window,
        span,
        full: len / block,
    })
}
