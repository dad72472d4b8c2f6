//! Gathering a list of records into one output buffer: on the calling thread for small raw
//! batches, else split into byte-balanced pieces fanned out over the rayon pool, with
//! non-temporal stores for raw outputs too large to stay in the last-level cache; plus the
//! per-thread switch that keeps a caller's gathers on its own thread ([`sequential_gathers`]) and
//! the fan-out counter ([`gather_fan_outs`]).

use rayon::prelude::*;

use crate::crc::Stores;
use crate::error::Result;
use crate::format::Codec;
use crate::threads::{cores, process_pool};

use super::container::Container;
use super::direct::split_output;

/// Batches smaller than this are gathered on the calling thread; larger ones are split over rayon.
const PARALLEL_BYTES: usize = 1 << 20;

/// The last-level cache size assumed where sysfs does not tell (32 MiB).
const DEFAULT_LLC_BYTES: usize = 32 << 20;

/// [`crate::llc_bytes`], or [`DEFAULT_LLC_BYTES`]; read once.
fn llc_bytes() -> usize {
    static LLC: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *LLC.get_or_init(|| {
        crate::llc_bytes()
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

impl Container {
    /// Fills `out` with the records `idx`, where record k goes to `out[offsets[k]..offsets[k+1]]`.
    pub(super) fn fill<F: Fn(usize) -> usize + Sync>(
        &self,
        idx: &[u64],
        out: &mut [u8],
        offsets: &F,
    ) -> Result<()> {
        let total = out.len();
        let compressed = self.codec() != Codec::Raw;
        if idx.is_empty() {
            return Ok(());
        }
        let stores = stores_for(total);
        if self.before_gather(idx, total) {
            return self.direct_fill(idx, out, offsets, stores);
        }
        // Inside a pool (a loader's gather threads) a gather splits over that pool; from any other
        // thread over this process's own pool (see `threads`), never rayon's global one, whose
        // threads a forked child does not have. The pool is only looked up for a gather that
        // splits, so small gathers pay nothing for it.
        let in_pool = rayon::current_thread_index().is_some();
        let pool_threads = if in_pool {
            rayon::current_num_threads()
        } else {
            cores()
        };
        let split = !((total < PARALLEL_BYTES && !compressed)
            || idx.len() == 1
            || pool_threads == 1
            || SEQUENTIAL.get());
        let own_pool = if split && !in_pool {
            process_pool()
        } else {
            None
        };
        if !split || (!in_pool && own_pool.is_none()) {
            let mut dec = self.decoder()?;
            return self.read_run(idx, out, offsets, 0, &mut dec, stores);
        }
        FAN_OUTS.set(FAN_OUTS.get().wrapping_add(1));
        // Split the output into contiguous pieces of roughly equal bytes, one task per piece. A pool
        // may have more threads than cores (a loader's workers are pool threads too); pieces beyond
        // four per core add splitting, not parallelism.
        let threads = pool_threads.min(cores());
        let slices = split_output(idx.len(), out, offsets, threads * 4);
        let run = || {
            slices
                .into_par_iter()
                .try_for_each(|(a, b, buf)| -> Result<()> {
                    let mut dec = self.decoder()?;
                    self.read_run(&idx[a..b], buf, offsets, a, &mut dec, stores)
                })
        };
        match own_pool {
            Some(pool) => pool.install(run),
            None => run(),
        }
    }
}

thread_local! {
    static SEQUENTIAL: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    static FAN_OUTS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How many gathers made on the calling thread so far were split across the rayon pool (a
/// wrapping count; compare two readings). A loader uses it to tell whether its gathers keep every
/// core busy.
pub fn gather_fan_outs() -> u64 {
    FAN_OUTS.get()
}

/// Runs `f` with every gather it makes on the calling thread done on that thread alone, instead of
/// being split across the rayon pool (what a gather of 1 MiB or more, or of compressed records,
/// otherwise does). For callers that already run one gather per thread, e.g. loader workers: there
/// the parallelism is across batches, and fanning each batch out again only adds contention.
pub fn sequential_gathers<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            SEQUENTIAL.set(self.0);
        }
    }
    let _restore = Restore(SEQUENTIAL.replace(true));
    f()
}

#[cfg(test)]
mod tests {
    use super::{SEQUENTIAL, sequential_gathers};

    #[test]
    fn outputs_as_large_as_the_llc_stream_and_gather_the_same_bytes() {
        use crate::crc::Stores;
        use crate::{Codec, DType, DenseStore, DenseWriter, OpenOptions, SystemAllocator};
        use std::sync::Arc;

        let llc = super::llc_bytes();
        assert!(llc >= 1 << 16, "cache size {llc}");
        assert_eq!(super::stores_for(llc - 1), Stores::Cached);
        assert_eq!(super::stores_for(llc), Stores::Streaming);
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

    #[test]
    fn sequential_gathers_is_scoped_nests_and_survives_unwinding() {
        assert!(!SEQUENTIAL.get());
        let inner = sequential_gathers(|| {
            let nested = sequential_gathers(|| SEQUENTIAL.get());
            (nested, SEQUENTIAL.get())
        });
        assert_eq!(
            inner,
            (true, true),
            "on inside, still on after a nested scope"
        );
        assert!(!SEQUENTIAL.get(), "off again after the scope");
        let unwound = std::panic::catch_unwind(|| sequential_gathers(|| panic!("inside")));
        assert!(unwound.is_err());
        assert!(!SEQUENTIAL.get(), "restored when the closure unwinds");
        // Another thread is not affected.
        sequential_gathers(|| {
            let other = std::thread::spawn(|| SEQUENTIAL.get()).join().unwrap();
            assert!(!other);
        });
    }
}
