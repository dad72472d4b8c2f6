//! First-fit's open rows ([`Row`]: tokens and segment lengths, to and from their saved form) and
//! the writing of a batch's three arrays into allocations from the packer's allocator (`Out`).

use std::sync::Arc;

use zrecord::{Allocation, Allocator};

use super::types::{PackedBatch, RowState};
use crate::error::{Error, Result};

/// Alignment of each output array.
const ALIGN: usize = 64;

/// One open first-fit row: its tokens' bytes and each segment's length.
#[derive(Debug, Default)]
pub(super) struct Row {
    tokens: Vec<u8>,
    segments: Vec<u32>,
}

impl Row {
    pub(super) fn with_capacity(bytes: usize) -> Row {
        Row {
            tokens: Vec::with_capacity(bytes),
            segments: Vec::new(),
        }
    }

    /// The row emptied, its buffers kept.
    pub(super) fn cleared(mut self) -> Row {
        self.tokens.clear();
        self.segments.clear();
        self
    }

    /// Tokens in the row.
    pub(super) fn used(&self, itemsize: usize) -> usize {
        self.tokens.len() / itemsize
    }

    /// Appends one segment's bytes.
    pub(super) fn push(&mut self, bytes: &[u8], itemsize: usize) {
        self.tokens.extend_from_slice(bytes);
        self.segments.push((bytes.len() / itemsize) as u32);
    }

    pub(super) fn state(&self) -> RowState {
        let mut hex = String::with_capacity(self.tokens.len() * 2);
        for b in &self.tokens {
            hex.push(char::from(HEX[usize::from(b >> 4)]));
            hex.push(char::from(HEX[usize::from(b & 15)]));
        }
        RowState {
            tokens: hex,
            segments: self.segments.clone(),
        }
    }

    /// Row `i` of a saved state, checked: whole tokens, at most `seq_len`, tiled exactly by
    /// non-empty segments.
    pub(super) fn from_state(
        s: &RowState,
        itemsize: usize,
        seq_len: usize,
        i: usize,
    ) -> Result<Row> {
        let bad = |why: &str| {
            Error::invalid(format!(
                "the pack state cannot be loaded: open row {i} {why}"
            ))
        };
        let digit = |c: u8| match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        };
        let hex = s.tokens.as_bytes();
        if !hex.len().is_multiple_of(2 * itemsize) {
            return Err(bad("does not hold whole tokens"));
        }
        let mut tokens = Vec::with_capacity(seq_len * itemsize);
        for pair in hex.chunks_exact(2) {
            match (digit(pair[0]), digit(pair[1])) {
                (Some(h), Some(l)) => tokens.push(h << 4 | l),
                _ => return Err(bad("is not lowercase hex")),
            }
        }
        let used = tokens.len() / itemsize;
        let sum: u64 = s.segments.iter().map(|&n| u64::from(n)).sum();
        if used > seq_len || used == 0 {
            return Err(bad(&format!("holds {used} tokens (seq_len {seq_len})")));
        }
        if sum != used as u64 || s.segments.contains(&0) {
            return Err(bad(&format!(
                "has segments {:?} that do not tile its {used} tokens",
                s.segments
            )));
        }
        Ok(Row {
            tokens,
            segments: s.segments.clone(),
        })
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Fills `dst` (whole int32s) with `v`: 64-byte stores of a pattern, then the tail. (Doubling
/// `copy_within`s cost a `memmove` call per doubling: 8 for a 135-token document.)
fn fill_i32(dst: &mut [u8], v: i32) {
    let mut pattern = [0u8; 64];
    for c in pattern.chunks_exact_mut(4) {
        c.copy_from_slice(&v.to_ne_bytes());
    }
    let mut blocks = dst.chunks_exact_mut(64);
    for b in &mut blocks {
        b.copy_from_slice(&pattern);
    }
    let tail = blocks.into_remainder();
    let n = tail.len();
    tail.copy_from_slice(&pattern[..n]);
}

/// The int32 bytes of 0, 1, ..., `n - 1`: every segment's positions are a prefix.
pub(super) fn iota(n: usize) -> Arc<[u8]> {
    (0..n as i32).flat_map(i32::to_ne_bytes).collect()
}

/// One batch's three arrays being written.
pub(super) struct Out {
    tokens: Allocation,
    seg: Allocation,
    pos: Allocation,
    seq_len: usize,
    itemsize: usize,
    written: usize,
}

/// A fresh host allocation of `bytes`.
fn acquire(alloc: &dyn Allocator, bytes: usize) -> Result<Allocation> {
    let mut a = alloc.acquire(bytes.max(1), ALIGN)?;
    if a.host_slice_mut().is_none() {
        return Err(Error::invalid(
            "packing writes its batches on the host: bind the stream to a \"cpu\" or \
             \"cuda_host\" allocator",
        ));
    }
    Ok(a)
}

impl Out {
    pub(super) fn new(
        alloc: &dyn Allocator,
        rows: usize,
        seq_len: usize,
        itemsize: usize,
    ) -> Result<Out> {
        let cells = rows * seq_len;
        Ok(Out {
            tokens: acquire(alloc, cells * itemsize)?,
            seg: acquire(alloc, cells * 4)?,
            pos: acquire(alloc, cells * 4)?,
            seq_len,
            itemsize,
            written: 0,
        })
    }

    /// Writes one segment's tokens at `(row, col)` with id `seg`, positions from 0 (copied
    /// from `iota`, the int32 bytes of 0, 1, ..., seq_len - 1).
    pub(super) fn put(&mut self, row: usize, col: usize, seg: i32, bytes: &[u8], iota: &[u8]) {
        let n = bytes.len() / self.itemsize;
        let at = row * self.seq_len + col;
        let isz = self.itemsize;
        if let Some(t) = self.tokens.host_slice_mut() {
            t[at * isz..(at + n) * isz].copy_from_slice(bytes);
        }
        if let Some(s) = self.seg.host_slice_mut() {
            fill_i32(&mut s[at * 4..(at + n) * 4], seg);
        }
        if let Some(p) = self.pos.host_slice_mut() {
            p[at * 4..(at + n) * 4].copy_from_slice(&iota[..n * 4]);
        }
        self.written += n;
    }

    /// Zeroes `row` from `col` to its end in all three arrays.
    pub(super) fn pad(&mut self, row: usize, col: usize) {
        let (a, z) = (row * self.seq_len + col, (row + 1) * self.seq_len);
        let isz = self.itemsize;
        if let Some(t) = self.tokens.host_slice_mut() {
            t[a * isz..z * isz].fill(0);
        }
        for arr in [&mut self.seg, &mut self.pos] {
            if let Some(s) = arr.host_slice_mut() {
                s[a * 4..z * 4].fill(0);
            }
        }
    }

    /// Writes an open row as output row `r`, padded.
    pub(super) fn row(&mut self, r: usize, row: &Row, iota: &[u8]) {
        let (mut col, mut at) = (0, 0);
        for (k, &n) in row.segments.iter().enumerate() {
            let bytes = n as usize * self.itemsize;
            self.put(r, col, k as i32 + 1, &row.tokens[at..at + bytes], iota);
            col += n as usize;
            at += bytes;
        }
        self.pad(r, col);
    }

    pub(super) fn finish(self, dtype: zrecord::DType, rows: usize, seq_len: usize) -> PackedBatch {
        PackedBatch {
            tokens: self.tokens,
            segment_ids: self.seg,
            positions: self.pos,
            dtype,
            rows,
            seq_len,
            padding: rows * seq_len - self.written,
        }
    }
}

/// The index of the open row with the fewest free tokens (the first of equals).
pub(super) fn fullest(open: &[Row], itemsize: usize) -> usize {
    let mut best = 0;
    for (i, r) in open.iter().enumerate() {
        if r.used(itemsize) > open[best].used(itemsize) {
            best = i;
        }
    }
    best
}
