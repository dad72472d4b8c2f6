//! Shared helpers: index checks, disk accounting and the packing/copy routines every adapter uses
//! to turn per-record byte slices into the common output layouts.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use rayon::prelude::*;

use crate::error::{Error, Result, bail};
use crate::output::{Batch, DenseOut, RaggedOut};

/// Batches with at least this many payload bytes are copied in parallel on rayon's global pool
/// (the pool zrecord uses, and zrecord's own 1 MiB threshold); smaller ones are copied on the
/// calling thread.
pub const PAR_MIN_BYTES: usize = 1 << 20;

/// Fails if any index is `>= len`.
pub(crate) fn check_indices(indices: &[u64], len: u64) -> Result<()> {
    if let Some(&bad) = indices.iter().find(|&&i| i >= len) {
        bail!("index {bad} out of range for {len} records");
    }
    Ok(())
}

/// Allocated bytes (`st_blocks * 512`) of every file under `path` (recursively).
pub(crate) fn disk_bytes(path: &Path) -> Result<u64> {
    let meta = std::fs::symlink_metadata(path)?;
    if meta.is_dir() {
        let mut total = 0;
        for entry in std::fs::read_dir(path)? {
            total += disk_bytes(&entry?.path())?;
        }
        Ok(total)
    } else {
        Ok(meta.blocks() * 512)
    }
}

/// Creates `dir` if needed and returns `dir/name`, failing if that file already exists.
pub(crate) fn fresh_path(dir: &Path, name: &str) -> Result<std::path::PathBuf> {
    std::fs::create_dir_all(dir)?;
    let p = dir.join(name);
    if p.exists() {
        bail!("{} already exists", p.display());
    }
    Ok(p)
}

/// Copies `n` records of `stride` bytes, `record(k)` giving the k-th requested record, into one
/// new buffer; in parallel when the batch is large.
pub(crate) fn fill_dense<'a, F>(n: usize, stride: usize, item_shape: &[u64], record: F) -> DenseOut
where
    F: Fn(usize) -> &'a [u8] + Sync,
{
    let mut bytes = vec![0u8; n * stride];
    if stride > 0 {
        if n * stride >= PAR_MIN_BYTES && n > 1 {
            let min_len = (64 * 1024 / stride).max(1);
            bytes
                .par_chunks_mut(stride)
                .with_min_len(min_len)
                .enumerate()
                .for_each(|(k, dst)| dst.copy_from_slice(record(k)));
        } else {
            for (k, dst) in bytes.chunks_mut(stride).enumerate() {
                dst.copy_from_slice(record(k));
            }
        }
    }
    DenseOut {
        bytes,
        shape: batch_shape(n, item_shape),
    }
}

/// `[n, *item_shape]`: the shape of a Dense batch of `n` records.
pub(crate) fn batch_shape(n: usize, item_shape: &[u64]) -> Vec<u64> {
    [&[n as u64], item_shape].concat()
}

/// The dims of records `indices` (in that order) out of `ndim` dims per record in `shapes`.
pub(crate) fn gather_shapes(shapes: &[u64], ndim: usize, indices: &[u64]) -> Vec<u64> {
    let dims = |&i: &u64| &shapes[i as usize * ndim..(i as usize + 1) * ndim];
    indices.iter().flat_map(dims).copied().collect()
}

/// Element boundaries (`n + 1` int32 entries) from per-record byte lengths.
pub(crate) fn cu_seqlens(lens: impl Iterator<Item = usize>, itemsize: usize) -> Result<Vec<i32>> {
    let mut cu = Vec::with_capacity(lens.size_hint().0 + 1);
    cu.push(0i32);
    let mut total = 0usize;
    for l in lens {
        total += l / itemsize;
        cu.push(
            i32::try_from(total)
                .map_err(|_| Error::msg("ragged batch exceeds i32::MAX elements"))?,
        );
    }
    Ok(cu)
}

/// Packs per-record byte slices (already in requested order) and their `shapes` into a Ragged
/// batch: one values buffer, copied in parallel when the batch is large, and int32 element
/// boundaries.
pub(crate) fn ragged_out(records: &[&[u8]], itemsize: usize, shapes: Vec<u64>) -> Result<Batch> {
    let cu_seqlens = cu_seqlens(records.iter().map(|r| r.len()), itemsize)?;
    let total: usize = records.iter().map(|r| r.len()).sum();
    let mut values = vec![0u8; total];
    if total >= PAR_MIN_BYTES && records.len() > 1 {
        let mut pieces: Vec<&mut [u8]> = Vec::with_capacity(records.len());
        let mut rest: &mut [u8] = &mut values;
        for r in records {
            let (head, tail) = rest.split_at_mut(r.len());
            pieces.push(head);
            rest = tail;
        }
        pieces
            .into_par_iter()
            .zip(records.par_iter())
            .for_each(|(dst, src)| dst.copy_from_slice(src));
    } else {
        let mut at = 0;
        for r in records {
            values[at..at + r.len()].copy_from_slice(r);
            at += r.len();
        }
    }
    Ok(Batch::Ragged(Box::new(RaggedOut {
        values,
        cu_seqlens,
        shapes,
    })))
}

/// Reinterprets little-endian bytes as u64s (copying; `bytes.len()` must be a multiple of 8).
pub(crate) fn le_u64s(bytes: &[u8]) -> impl Iterator<Item = u64> + '_ {
    bytes
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
}

/// u64s as little-endian bytes.
pub(crate) fn u64s_le(v: &[u64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// `f` over `items`, on rayon's global pool when there are several, else on the calling thread.
pub(crate) fn map_par<T: Sync, R: Send>(
    items: &[T],
    f: impl Fn(&T) -> Result<R> + Sync + Send,
) -> Result<Vec<R>> {
    if items.len() > 1 {
        items.par_iter().map(f).collect()
    } else {
        items.iter().map(f).collect()
    }
}

/// Sorted, de-duplicated copy of `indices`, plus for each requested position its index in it.
pub(crate) fn unique_sorted(indices: &[u64]) -> (Vec<u64>, Vec<usize>) {
    let mut uniq = indices.to_vec();
    uniq.sort_unstable();
    uniq.dedup();
    let pos = indices
        .iter()
        .map(|i| uniq.binary_search(i).expect("present"))
        .collect();
    (uniq, pos)
}
