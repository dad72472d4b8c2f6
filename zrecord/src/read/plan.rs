//! What a gather asks of a read engine, shared by every engine: the [`Plan`] (which records go
//! where in the output, and how raw records are stored), the [`ReadEngine`] interface the
//! engines implement (`read::engine`), the store kind a raw output gets ([`stores_for`]), and the
//! byte-balanced split of an output into runs of records ([`split_output`]).

use crate::crc::Stores;
use crate::error::Result;

use super::container::{Container, Maps};

/// One gather, as an engine receives it: `idx[k]` goes to `out[offsets(k)..offsets(k + 1)]` of
/// the output the engine is handed, and raw records are copied with `stores`.
pub(super) struct Plan<'a, F> {
    /// The records, in output order (any order, duplicates allowed; all in range).
    pub(super) idx: &'a [u64],
    /// Output offset of record `k` of the gather (`offsets(idx.len())` is the output's length).
    pub(super) offsets: &'a F,
    /// How raw records are stored into the output ([`stores_for`] its length).
    pub(super) stores: Stores,
}

/// Where a gather's records go: `offsets(k)` is the first output byte of record `k` (every
/// engine's bound on a gather's offsets).
pub(super) trait Offsets: Fn(usize) -> usize + Sync {}

impl<T: Fn(usize) -> usize + Sync> Offsets for T {}

/// A read engine: one way of getting a gather's records from the container's files into the
/// output. An engine locates records through the [`Container`] (shard, offset, stored length,
/// checksum), fetches their stored bytes its own way, checks them (CRC32C when the store
/// verifies; size and frame for a compressed record) and writes each decoded record into its
/// place in `out`, so the caller receives exactly the bytes that were verified. The engine for a
/// gather is chosen once, before the gather (`read::engine`); it consumes itself, so state taken
/// for one gather (an io_uring ring) goes back where it came from when the gather ends.
pub(super) trait ReadEngine {
    /// Fills `out` (the whole output of `plan`) with its records, or returns the first error.
    fn gather_into<F: Offsets>(self, c: &Container, plan: &Plan<F>, out: &mut [u8]) -> Result<()>;
}

/// Appends one Ragged record's shape words `shape` to `dims` and its end to `cu` (whose last
/// entry is the running element count), for a gather of `n` records: the int32 `cu_seqlens`
/// bound is checked as the count grows.
#[inline]
pub(super) fn push_shape(
    cu: &mut Vec<i32>,
    dims: &mut Vec<u64>,
    shape: impl Iterator<Item = u64>,
    n: usize,
) -> crate::error::Result<()> {
    let mut count = 1u64;
    for d in shape {
        dims.push(d);
        count *= d;
    }
    let total = cu.last().map_or(0, |&t| t as u64) + count;
    if total > i32::MAX as u64 {
        return Err(crate::error::Error::LimitExceeded(format!(
            "a ragged batch holds at most {} values (int32 cu_seqlens); these {n} records hold more",
            i32::MAX
        )));
    }
    cu.push(total as i32);
    Ok(())
}

/// The last-level cache size assumed where sysfs does not tell (32 MiB).
const DEFAULT_LLC_BYTES: usize = 32 << 20;

/// `crate::cache::llc_bytes`, or [`DEFAULT_LLC_BYTES`]; read once.
fn llc_bytes() -> usize {
    static LLC: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *LLC.get_or_init(|| {
        crate::cache::llc_bytes()
            .and_then(|n| usize::try_from(n).ok())
            .filter(|&n| n > 0)
            .unwrap_or(DEFAULT_LLC_BYTES)
    })
}

/// How a gather of `total` output bytes stores raw records: an output at least as large as the
/// last-level cache cannot stay there, so its stores stream past the cache (no read-for-ownership
/// of every destination line: measured 1.4-1.6x the batches/s of cached stores on 256 random
/// 147 KiB records, 2-core EPYC); smaller outputs use ordinary stores and stay cached for their
/// consumer.
pub(crate) fn stores_for(total: usize) -> Stores {
    if total >= llc_bytes() {
        Stores::Streaming
    } else {
        Stores::Cached
    }
}

/// Splits `out` (records `0..n`, record k at `offsets(k)..offsets(k + 1)`) into at most `pieces`
/// contiguous runs of records of about equal bytes, `(first, end, bytes)`: how a gather that fans
/// out divides its output over the pool (exported by `internals` for the benchmarks).
pub fn split_output<'o, F: Fn(usize) -> usize>(
    n: usize,
    out: &'o mut [u8],
    offsets: &F,
    pieces: usize,
) -> Vec<(usize, usize, &'o mut [u8])> {
    let pieces = pieces.clamp(1, n.max(1));
    let target = out.len().div_ceil(pieces).max(1);
    let mut bounds = vec![0usize];
    let mut next = target;
    for k in 1..n {
        if offsets(k) >= next {
            bounds.push(k);
            next = offsets(k) + target;
        }
    }
    bounds.push(n);
    let mut runs = Vec::with_capacity(bounds.len() - 1);
    let mut rest = out;
    let mut consumed = offsets(0);
    for w in bounds.windows(2) {
        let end = offsets(w[1]);
        let (head, tail) = rest.split_at_mut(end - consumed);
        runs.push((w[0], w[1], head));
        rest = tail;
        consumed = end;
    }
    runs
}

/// Records across several containers (a dataset's parts): record `j` is record `recs[j].2` of
/// container `recs[j].0`, read through that container's maps `recs[j].1`.
pub(in crate::read) struct AcrossParts<'a, 'm> {
    pub(in crate::read) recs: &'a [(&'a Container, &'a Maps<'m>, u64)],
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_output_covers_every_record_once_in_balanced_runs() {
        let sizes = [5usize, 1, 1, 9, 2, 2, 2, 7, 3];
        let mut offs = vec![0];
        for s in sizes {
            offs.push(offs.last().unwrap() + s);
        }
        let mut out = vec![0u8; *offs.last().unwrap()];
        for pieces in [1, 2, 3, 4, 9, 20] {
            let runs = split_output(sizes.len(), &mut out, &|k| offs[k], pieces);
            assert!(
                runs.len() <= pieces.min(sizes.len()),
                "{pieces}: {}",
                runs.len()
            );
            let mut next = 0;
            for (a, b, bytes) in &runs {
                assert_eq!(*a, next);
                assert!(b > a);
                assert_eq!(bytes.len(), offs[*b] - offs[*a]);
                next = *b;
            }
            assert_eq!(next, sizes.len());
        }
    }

    #[test]
    fn outputs_as_large_as_the_llc_stream_and_gather_the_same_bytes() {
        use crate::{
            Codec, DType, DenseStore, DenseWriter, OpenOptions, SystemAllocator, sequential_gathers,
        };
        use std::sync::Arc;

        let llc = llc_bytes();
        assert!(llc >= 1 << 16, "cache size {llc}");
        assert_eq!(stores_for(llc - 1), Stores::Cached);
        assert_eq!(stores_for(llc), Stores::Streaming);
        if llc > 256 << 20 {
            return; // a gather that size is too much for a unit test
        }
        // Records of 65,538 bytes: every record after the first starts off a 32-byte boundary
        // of the output, so the streaming kernels' unaligned heads are exercised too.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        let stride = 65_538usize;
        let n = 40usize;
        let data: Vec<u8> = (0..stride * n)
            .map(|k| (k as u32).wrapping_mul(2_654_435_761).rotate_right(13) as u8)
            .collect();
        let mut w = DenseWriter::create(
            &path,
            DType::UInt8,
            &[stride as u64],
            Codec::Raw,
            crate::WriterOptions::default(),
        )
        .unwrap();
        w.append(&data).unwrap();
        w.close().unwrap();
        let idx: Vec<u64> = (0..(llc / stride + 1) as u64)
            .map(|k| (k * 7) % n as u64)
            .collect();
        assert!(idx.len() * stride >= llc);
        for verify in [true, false] {
            let opts = OpenOptions {
                verify,
                ..OpenOptions::default()
            };
            let view = DenseStore::open_with(&path, opts)
                .unwrap()
                .bind(Arc::new(SystemAllocator::new()));
            for batch in [
                view.gather(&idx).unwrap(),
                sequential_gathers(|| view.gather(&idx).unwrap()),
            ] {
                for (k, &i) in idx.iter().enumerate() {
                    let i = i as usize;
                    assert!(
                        batch.bytes()[k * stride..(k + 1) * stride]
                            == data[i * stride..(i + 1) * stride],
                        "verify {verify}: record {i} at position {k}"
                    );
                }
            }
        }
    }
}
