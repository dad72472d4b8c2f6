//! [`RaggedWriter`](super::writer::RaggedWriter): variable-shape records given as one packed
//! batch (`values`, `cu_seqlens`, `shapes`), checked whole before anything is written.

use std::path::Path;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::format::{Codec, MAX_RECORD_BYTES};
use crate::read::Ragged;

use super::container::{BLOCK_BYTES, Shape};
use super::options::WriterOptions;
use super::writer::Writer;

/// Records per placement block for Ragged stores until the first append sizes it, and its
/// least: about [`BLOCK_BYTES`] of the first append's mean record, at least this many
/// records and at most [`RAGGED_MAX_BLOCK`] (`WriterOptions::block_records` overrides it).
const RAGGED_BLOCK_RECORDS: u64 = 64;
/// The most records a Ragged placement block holds.
const RAGGED_MAX_BLOCK: u64 = 1 << 16;

/// A Ragged placement block for records of `bytes / n` bytes on average.
fn ragged_block(bytes: u64, n: u64) -> u64 {
    let mean = (bytes / n.max(1)).max(1);
    (BLOCK_BYTES / mean).clamp(RAGGED_BLOCK_RECORDS, RAGGED_MAX_BLOCK)
}

impl Writer<Ragged> {
    /// Starts a new Ragged container with records of rank `ndim >= 1`.
    pub fn create(
        path: impl AsRef<Path>,
        dtype: DType,
        ndim: u32,
        codec: Codec,
        opts: WriterOptions,
    ) -> Result<Self> {
        if ndim == 0 || ndim > 32 {
            return Err(Error::invalid(format!(
                "ragged records need 1 <= ndim <= 32, got {ndim} (0-D records belong in a Dense store with item_shape ())"
            )));
        }
        let shape = Shape {
            ndim,
            item_shape: Vec::new(),
        };
        Self::start(
            path.as_ref(),
            dtype,
            shape,
            RAGGED_BLOCK_RECORDS,
            codec,
            opts,
        )
    }

    /// Appends one packed batch: `values` (all records' elements back to back, store dtype),
    /// `cu_seqlens` (`n + 1` element offsets starting at 0, strictly increasing, ending at the
    /// number of values) and `shapes` (`n * ndim` dimensions; each record's element count must
    /// equal its offset span). Bad input changes nothing.
    pub fn append(&mut self, values: &[u8], cu_seqlens: &[i32], shapes: &[u64]) -> Result<()> {
        self.core.check_usable()?;
        let isz = self.core.dtype.itemsize();
        let ndim = self.core.shape.ndim as usize;
        check_packed(values, cu_seqlens, shapes, isz, ndim)?;
        let n = cu_seqlens.len() - 1;
        if n > 0 {
            self.core
                .size_block(ragged_block(values.len() as u64, n as u64));
        }
        let span = move |a: u64, b: u64| {
            &values[cu_seqlens[a as usize] as usize * isz..cu_seqlens[b as usize] as usize * isz]
        };
        self.core
            .write_records(n as u64, &|k| span(k, k + 1), &span, &|k, out| {
                for &d in &shapes[k as usize * ndim..(k as usize + 1) * ndim] {
                    out.extend_from_slice(&d.to_le_bytes());
                }
            })
    }
}

/// Checks a packed batch of records of `isz`-byte elements and rank `ndim` whole: the values
/// are whole elements, then the offsets and shapes ([`check_ragged_batch`]).
fn check_packed(
    values: &[u8],
    cu_seqlens: &[i32],
    shapes: &[u64],
    isz: usize,
    ndim: usize,
) -> Result<()> {
    if !values.len().is_multiple_of(isz) {
        return Err(Error::invalid(format!(
            "values hold {} bytes, not a multiple of itemsize {isz}",
            values.len()
        )));
    }
    check_ragged_batch(cu_seqlens, shapes, ndim, isz, values.len() / isz)
}

/// Checks the offsets and shapes of a packed batch of `nvalues` elements of `isz` bytes, records
/// of rank `ndim`, as [`Writer::append`](super::writer::RaggedWriter::append) does before it
/// writes: `cu_seqlens` starts at 0, increases strictly and ends at `nvalues`, and each record's
/// shape holds exactly its span (at most 2 GiB). A caller that appends one batch in several
/// calls (the Python binding, from device memory) checks the whole batch with this first, so
/// bad input writes nothing; the errors are `append`'s.
pub fn check_ragged_batch(
    cu_seqlens: &[i32],
    shapes: &[u64],
    ndim: usize,
    isz: usize,
    nvalues: usize,
) -> Result<()> {
    let Some((&first, _)) = cu_seqlens.split_first() else {
        return Err(Error::invalid("cu_seqlens must have n + 1 >= 1 entries"));
    };
    if first != 0 {
        return Err(Error::invalid(format!(
            "cu_seqlens[0] must be 0, found {first}"
        )));
    }
    let n = cu_seqlens.len() - 1;
    if shapes.len() != n * ndim {
        return Err(Error::invalid(format!(
            "shapes hold {} values, expected {n} records x ndim {ndim} = {}",
            shapes.len(),
            n * ndim
        )));
    }
    for k in 0..n {
        let (a, b) = (cu_seqlens[k], cu_seqlens[k + 1]);
        if b <= a {
            return Err(Error::invalid(format!(
                "cu_seqlens must strictly increase (records are non-empty): cu_seqlens[{k}] = {a}, cu_seqlens[{}] = {b}",
                k + 1
            )));
        }
        let shape = &shapes[k * ndim..(k + 1) * ndim];
        let mut count: u64 = 1;
        for &d in shape {
            count = count
                .checked_mul(d)
                .ok_or_else(|| Error::invalid(format!("record {k}: shape {shape:?} overflows")))?;
        }
        if count != (b - a) as u64 {
            return Err(Error::invalid(format!(
                "record {k}: shape {shape:?} has {count} elements but cu_seqlens span {}",
                b - a
            )));
        }
        let bytes = count.saturating_mul(isz as u64);
        if bytes > MAX_RECORD_BYTES {
            return Err(Error::LimitExceeded(format!(
                "record {k} holds {bytes} bytes; the limit is 2 GiB"
            )));
        }
    }
    let last = cu_seqlens[n];
    if last as usize != nvalues {
        return Err(Error::invalid(format!(
            "cu_seqlens ends at {last} but values hold {nvalues} elements"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_checks_name_each_rule() {
        let ok = check_ragged_batch(&[0, 2, 5], &[2, 3], 1, 4, 5);
        assert!(ok.is_ok(), "{ok:?}");
        assert!(check_ragged_batch(&[0], &[], 1, 4, 0).is_ok());
        let msg = |r: Result<()>| r.unwrap_err().to_string();
        assert!(msg(check_ragged_batch(&[], &[], 1, 4, 0)).contains("n + 1 >= 1"));
        assert!(
            msg(check_ragged_batch(&[1, 2], &[1], 1, 4, 2)).contains("cu_seqlens[0] must be 0")
        );
        assert!(
            msg(check_ragged_batch(&[0, 2], &[2, 1], 1, 4, 2)).contains("shapes hold 2 values")
        );
        assert!(
            msg(check_ragged_batch(&[0, 2, 2], &[2, 0], 1, 4, 2)).contains("strictly increase")
        );
        assert!(msg(check_ragged_batch(&[0, 2], &[3], 1, 4, 2)).contains("has 3 elements"));
        assert!(msg(check_ragged_batch(&[0, 2], &[u64::MAX, 2], 2, 4, 2)).contains("overflows"));
        assert!(msg(check_ragged_batch(&[0, 2], &[2], 1, 4, 3)).contains("ends at 2"));
        let big = check_ragged_batch(&[0, i32::MAX], &[i32::MAX as u64], 1, 8, i32::MAX as usize);
        assert!(matches!(big, Err(Error::LimitExceeded(_))), "{big:?}");
    }
}
