//! Filling rows: [`PackMode::Concat`](super::PackMode::Concat) straight into the batch,
//! [`PackMode::FirstFit`](super::PackMode::FirstFit) through the pool of open rows, and the
//! batch's three arrays written from the packer's allocator.

use std::sync::Arc;

use zrecord::{Allocation, Allocator};

use super::{PackedBatch, Packer, Pull, RowState};
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
    fn with_capacity(bytes: usize) -> Row {
        Row {
            tokens: Vec::with_capacity(bytes),
            segments: Vec::new(),
        }
    }

    /// The row emptied, its buffers kept.
    fn cleared(mut self) -> Row {
        self.tokens.clear();
        self.segments.clear();
        self
    }

    /// Tokens in the row.
    fn used(&self, itemsize: usize) -> usize {
        self.tokens.len() / itemsize
    }

    /// Appends one segment's bytes.
    fn push(&mut self, bytes: &[u8], itemsize: usize) {
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

/// Fills `dst` (whole int32s) with `v`: one store, then doubling copies.
fn fill_i32(dst: &mut [u8], v: i32) {
    if dst.len() < 4 {
        return;
    }
    dst[..4].copy_from_slice(&v.to_ne_bytes());
    let mut done = 4;
    while done < dst.len() {
        let n = done.min(dst.len() - done);
        dst.copy_within(..n, done);
        done += n;
    }
}

/// The int32 bytes of 0, 1, ..., `n - 1`: every segment's positions are a prefix.
pub(super) fn iota(n: usize) -> Arc<[u8]> {
    (0..n as i32).flat_map(i32::to_ne_bytes).collect()
}

/// One batch's three arrays being written.
struct Out {
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
    fn new(alloc: &dyn Allocator, rows: usize, seq_len: usize, itemsize: usize) -> Result<Out> {
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
    fn put(&mut self, row: usize, col: usize, seg: i32, bytes: &[u8], iota: &[u8]) {
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
    fn pad(&mut self, row: usize, col: usize) {
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
    fn row(&mut self, r: usize, row: &Row, iota: &[u8]) {
        let (mut col, mut at) = (0, 0);
        for (k, &n) in row.segments.iter().enumerate() {
            let bytes = n as usize * self.itemsize;
            self.put(r, col, k as i32 + 1, &row.tokens[at..at + bytes], iota);
            col += n as usize;
            at += bytes;
        }
        self.pad(r, col);
    }

    fn finish(self, p: &Packer) -> PackedBatch {
        let (rows, seq_len) = (p.opts.rows, p.opts.seq_len);
        PackedBatch {
            tokens: self.tokens,
            segment_ids: self.seg,
            positions: self.pos,
            dtype: p.dtype,
            rows,
            seq_len,
            padding: rows * seq_len - self.written,
        }
    }
}

impl Packer {
    /// Concat: each row takes the stream's next `seq_len` tokens; `None` at the end of the
    /// stream (the last batch's rows past it are padding).
    pub(super) fn concat_batch(&mut self, pull: &mut Pull<'_>) -> Result<Option<PackedBatch>> {
        if !self.ensure_input(pull)? {
            return Ok(None);
        }
        let (rows, l) = (self.opts.rows, self.opts.seq_len);
        let iota = self.iota.clone();
        let mut out = Out::new(&*self.alloc, rows, l, self.dtype.itemsize())?;
        let mut more = true;
        for r in 0..rows {
            let (mut col, mut seg) = (0, 0);
            while more && col < l {
                more = self.ensure_input(pull)?;
                if !more {
                    break;
                }
                seg += 1;
                let at = col;
                col += self.take_chunk(l - at, &mut |b| out.put(r, at, seg, b, &iota));
            }
            out.pad(r, col);
        }
        Ok(Some(out.finish(self)))
    }

    /// First-fit: each document (or `seq_len` piece of a longer one) goes into the first open
    /// row with room; with none and the pool full, the fullest open row (the first of equals) is
    /// emitted first. A row that fills up is emitted at once. At the end of the stream the open
    /// rows are emitted oldest first.
    pub(super) fn first_fit_batch(&mut self, pull: &mut Pull<'_>) -> Result<Option<PackedBatch>> {
        if !self.ensure_input(pull)? && self.open.is_empty() {
            return Ok(None);
        }
        let (rows, l, isz) = (self.opts.rows, self.opts.seq_len, self.dtype.itemsize());
        let iota = self.iota.clone();
        let mut out = Out::new(&*self.alloc, rows, l, isz)?;
        let mut emitted = 0;
        // The last emitted row's buffers, reused by the next row opened.
        let mut spare: Option<Row> = None;
        while emitted < rows {
            if let Some(j) = self.open.iter().position(|r| r.used(isz) == l) {
                let row = self.open.remove(j);
                out.row(emitted, &row, &iota);
                spare = Some(row);
                emitted += 1;
                continue;
            }
            if !self.ensure_input(pull)? {
                if self.open.is_empty() {
                    break;
                }
                let row = self.open.remove(0);
                out.row(emitted, &row, &iota);
                spare = Some(row);
                emitted += 1;
                continue;
            }
            let n = self.peek().min(l);
            let slot = match self.open.iter().position(|r| l - r.used(isz) >= n) {
                Some(i) => i,
                None => {
                    if self.open.len() >= self.opts.pool {
                        let j = fullest(&self.open, isz);
                        let row = self.open.remove(j);
                        out.row(emitted, &row, &iota);
                        spare = Some(row);
                        emitted += 1;
                    }
                    self.open.push(
                        spare
                            .take()
                            .map_or_else(|| Row::with_capacity(l * isz), Row::cleared),
                    );
                    self.open.len() - 1
                }
            };
            let mut row = std::mem::take(&mut self.open[slot]);
            self.take_chunk(n, &mut |b| row.push(b, isz));
            if row.used(isz) == l && emitted < rows {
                self.open.remove(slot);
                out.row(emitted, &row, &iota);
                spare = Some(row);
                emitted += 1;
            } else {
                self.open[slot] = row;
            }
        }
        for r in emitted..rows {
            out.pad(r, 0);
        }
        Ok(Some(out.finish(self)))
    }
}

/// The index of the open row with the fewest free tokens (the first of equals).
fn fullest(open: &[Row], itemsize: usize) -> usize {
    let mut best = 0;
    for (i, r) in open.iter().enumerate() {
        if r.used(itemsize) > open[best].used(itemsize) {
            best = i;
        }
    }
    best
}
