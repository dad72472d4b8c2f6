//! The cold loader rows of the cold tables (`loaderx-w1-p1`, `loaderx-w4-p8`): a loaderx
//! [`Loader`] over the zrecord raw store, started on a dropped page cache, with one or several
//! batches in flight, so that the I/O latency of one batch hides behind the gathers of the
//! others. Each batch the loader hands out is checked as it arrives (a CRC32C of its values and,
//! for a ragged batch, its `cu_seqlens` and shapes, for a dense one its shape, against the same
//! CRC of the source's batch, computed before the page cache is dropped) and dropped.

use std::sync::Arc;
use std::time::Instant;

use competitors::Batch;
use loaderx::{IndexSampler, Loader, LoaderOptions, Mode, PooledAllocator, Sampler};
use zrecord::{Allocator, ColdReads, OpenOptions};

use super::limit::{self, DiskStat};
use crate::corrupt;
use crate::error::{HarnessError, Result};
use crate::loader::store::open_view;
use crate::store::BATCH;

/// The loader rows: name, workers, prefetch.
pub const ARMS: [(&str, usize, usize); 2] = [("loaderx-w1-p1", 1, 1), ("loaderx-w4-p8", 4, 8)];

/// Workers and prefetch of a loader row name.
pub fn arm(name: &str) -> Option<(usize, usize)> {
    ARMS.iter()
        .find(|(n, _, _)| *n == name)
        .map(|&(_, w, p)| (w, p))
}

/// What a loader row measured: records/s, MiB/s, the device counters over the run.
pub struct LoaderRun {
    pub seconds: f64,
    pub batches: u64,
    pub bytes: u64,
    pub dev: DiskStat,
}

/// Opens the zrecord container at `path`, drops the page cache, then times `batches` batches
/// of an IID loader with `workers` / `prefetch`, checking each as it arrives against a CRC32C of
/// `source`'s records computed before the drop.
pub fn run(
    path: &std::path::Path,
    source: &competitors::Source<'_>,
    workers: usize,
    prefetch: usize,
    batches: u64,
    stat_file: &std::path::Path,
) -> Result<LoaderRun> {
    let alloc: Arc<dyn Allocator> = Arc::new(PooledAllocator::new(loaderx::DEFAULT_POOL_SIZE));
    // The store stands for one larger than memory (see the table rows).
    let opts = OpenOptions {
        cold_reads: ColdReads::Always,
        ..Default::default()
    };
    let dense = matches!(source, competitors::Source::Dense(_));
    let (view, n) = open_view(path, dense, opts, alloc)?;
    let sampler = || {
        IndexSampler::new(n, BATCH, Mode::Iid, 11)
            .map(|s| Box::new(s) as Box<dyn Sampler>)
            .map_err(HarnessError::from)
    };
    // What each batch must hold, as a CRC32C of its bytes, computed before the drop: checking a
    // batch then costs the consumer one checksum pass (inside the timer, as a training step's use
    // of the batch would be) and reads nothing from the device. Each batch is dropped once checked,
    // so the loader recycles its memory as a consumer's would.
    let mut reference = sampler()?;
    let mut want = Vec::with_capacity(batches as usize);
    for _ in 0..batches {
        let idx = reference.next()?.to_vec();
        want.push(match source.gather_reference(&idx)? {
            Batch::Dense(d) => (contract_crc(d.bytes(), &[], d.shape()), d.bytes().len()),
            Batch::Ragged(r) => (
                contract_crc(r.values(), r.cu_seqlens(), r.shapes()),
                r.values().len(),
            ),
        });
    }
    // The test-only switch (`corrupt::ENV`): one received batch gets a flipped byte.
    let mut counter = corrupt::Counter::from_env();
    limit::drop_caches()?;
    let before = DiskStat::read(stat_file)?;
    let t = Instant::now();
    let mut loader = Loader::new(
        vec![("data", vec![view])],
        sampler()?,
        LoaderOptions::new(workers, prefetch),
    )?;
    let mut bytes = 0u64;
    for (k, &(crc, len)) in want.iter().enumerate() {
        let shards = loader
            .next()
            .ok_or(HarnessError::LoaderEnded { delivered: Some(k) })??;
        let [shard] = shards.as_slice() else {
            return Err(HarnessError::Count {
                what: "shards in a batch",
                expected: "1".into(),
                found: shards.len() as u64,
            });
        };
        let (_, b) = shard.iter().next().ok_or_else(|| HarnessError::Count {
            what: "streams in a shard",
            expected: "1".into(),
            found: 0,
        })?;
        let (values, cu, shapes): (&[u8], &[i32], &[u64]) = match b {
            loaderx::Batch::Dense(d) => (d.bytes(), &[], d.shape()),
            loaderx::Batch::Ragged(r) => (r.values(), r.cu_seqlens(), r.shapes()),
        };
        let flipped;
        let values = if counter.hit() {
            flipped = {
                let mut v = values.to_vec();
                corrupt::flip(&mut v);
                v
            };
            &flipped[..]
        } else {
            values
        };
        if values.len() != len || contract_crc(values, cu, shapes) != crc {
            return Err(HarnessError::LoaderBatch {
                batch: k,
                expected_bytes: len,
                found_bytes: values.len(),
            });
        }
        bytes += len as u64;
    }
    let seconds = t.elapsed().as_secs_f64();
    let dev = DiskStat::read(stat_file)?.since(before);
    loader.close();
    Ok(LoaderRun {
        seconds,
        batches,
        bytes,
        dev,
    })
}

/// A CRC32C of a batch in the contract: its values (Dense bytes), then for a Ragged batch its
/// int32 `cu_seqlens` and its shapes, for a Dense one its shape (little-endian words), so a batch
/// with the right bytes under wrong offsets or shapes does not match.
fn contract_crc(values: &[u8], cu_seqlens: &[i32], shapes: &[u64]) -> u32 {
    let mut crc = crc32c::crc32c(values);
    for c in cu_seqlens {
        crc = crc32c::crc32c_append(crc, &c.to_le_bytes());
    }
    for d in shapes {
        crc = crc32c::crc32c_append(crc, &d.to_le_bytes());
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_batch_check_sees_offsets_and_shapes_as_well_as_values() {
        let values = [1u8, 2, 3, 4, 5, 6, 7, 8];
        let base = contract_crc(&values, &[0, 1, 2], &[1, 1]);
        assert_eq!(base, contract_crc(&values, &[0, 1, 2], &[1, 1]));
        // The same bytes split into other records, or with other shapes, do not match.
        assert_ne!(base, contract_crc(&values, &[0, 0, 2], &[1, 1]));
        assert_ne!(base, contract_crc(&values, &[0, 1, 2], &[2, 1]));
        let mut flipped = values;
        assert!(corrupt::flip(&mut flipped));
        assert_ne!(base, contract_crc(&flipped, &[0, 1, 2], &[1, 1]));
    }
}
