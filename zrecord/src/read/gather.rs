//! Gathering a list of records into one output buffer: on the calling thread for small raw
//! batches, else split into byte-balanced pieces fanned out over the rayon pool; plus the
//! per-thread switch that keeps a caller's gathers on its own thread ([`sequential_gathers`]) and
//! the fan-out counter ([`gather_fan_outs`]).

use rayon::prelude::*;

use crate::error::Result;
use crate::format::Codec;
use crate::threads::{cores, process_pool};

use super::open::Inner;

/// Batches smaller than this are gathered on the calling thread; larger ones are split over rayon.
const PARALLEL_BYTES: usize = 1 << 20;

impl Inner {
    /// Fills `out` with the records `idx`, where record k goes to `out[offsets[k]..offsets[k+1]]`.
    pub(super) fn fill<F: Fn(usize) -> usize + Sync>(
        &self,
        idx: &[u64],
        out: &mut [u8],
        offsets: &F,
    ) -> Result<()> {
        let total = out.len();
        let compressed = self.m.codec != Codec::Raw;
        if idx.is_empty() {
            return Ok(());
        }
        self.before_gather(idx);
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
            return self.read_run(idx, out, 0, offsets, 0, &mut dec);
        }
        FAN_OUTS.set(FAN_OUTS.get().wrapping_add(1));
        // Split the output into contiguous pieces of roughly equal bytes, one task per piece. A pool
        // may have more threads than cores (a loader's workers are pool threads too); pieces beyond
        // four per core add splitting, not parallelism.
        let threads = pool_threads.min(cores());
        let pieces = (threads * 4).min(idx.len());
        let target = total.div_ceil(pieces).max(1);
        let mut bounds = vec![0usize];
        let mut next = target;
        for k in 1..idx.len() {
            if offsets(k) >= next {
                bounds.push(k);
                next = offsets(k) + target;
            }
        }
        bounds.push(idx.len());
        let mut slices: Vec<(usize, usize, &mut [u8])> = Vec::with_capacity(bounds.len());
        let mut rest = out;
        let mut consumed = 0;
        for w in bounds.windows(2) {
            let (a, b) = (w[0], w[1]);
            let end = offsets(b);
            let (head, tail) = rest.split_at_mut(end - consumed);
            slices.push((a, b, head));
            rest = tail;
            consumed = end;
        }
        let run = || {
            slices
                .into_par_iter()
                .try_for_each(|(a, b, buf)| -> Result<()> {
                    let mut dec = self.decoder()?;
                    self.read_run(&idx[a..b], buf, offsets(a), offsets, a, &mut dec)
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
