//! The positional engine: an unmapped store's gathers (a store on a shared or network file system,
//! or opened with `OpenOptions::mmap = Some(false)`), read with positional reads (`pread`) and no
//! memory map, so a file another host shrinks or rewrites under the store gives a typed error,
//! never a signal. The gather's records are merged into ranges of their shards (`read::ranges`:
//! neighbours up to [`GAP`] apart share a read, a read spans at most [`MAX_SPAN`] unless one record
//! is longer), and up to [`READERS`] threads (the calling one and scoped helpers) each read one
//! range at a time into a buffer of their own and check and decode its records into their places
//! in the output. Bound: at most `READERS` range buffers of up to `MAX_SPAN` bytes (or one record)
//! at a time, freed when the gather ends.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::{Error, Result};

use crate::read::container::Container;
use crate::read::decode::Decoder;
use crate::read::plan::{Plan, ReadEngine};
use crate::read::ranges::{Range, coalesce, decode_range};

/// Records whose stored bytes lie at most this far apart are read together (64 KiB: on a network
/// file system a request costs a round trip; skipping 64 KiB costs less).
const GAP: u64 = 64 << 10;
/// The longest read that merges several records (4 MiB).
const MAX_SPAN: u64 = 4 << 20;
/// Reads in flight per gather: a network file system serves several at once.
const READERS: usize = 8;

/// Reads a gather's records with positional reads.
#[derive(Debug, Clone, Copy)]
pub(super) struct Positional;

impl ReadEngine for Positional {
    /// The first failure stops the other readers and is returned.
    fn gather_into<F: Fn(usize) -> usize + Sync>(
        self,
        c: &Container,
        plan: &Plan<'_, F>,
        out: &mut [u8],
    ) -> Result<()> {
        let ranges = coalesce(c, plan.idx, out, plan.offsets, GAP, MAX_SPAN);
        let readers = READERS.min(ranges.len());
        let queue = Mutex::new(ranges.into_iter());
        let failed = AtomicBool::new(false);
        let error: Mutex<Option<Error>> = Mutex::new(None);
        let read = || {
            let mut dec = Decoder::new(c);
            let mut buf = Vec::new();
            while !failed.load(Ordering::Relaxed) {
                let next: Option<Range<'_>> =
                    queue.lock().unwrap_or_else(|p| p.into_inner()).next();
                let Some(r) = next else { break };
                buf.resize(r.len(), 0);
                let done = c
                    .read_range(r.shard, r.start, &mut buf)
                    .and_then(|()| decode_range(c, r, &buf, &mut dec, plan.stores));
                if let Err(e) = done {
                    failed.store(true, Ordering::Relaxed);
                    error
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .get_or_insert(e);
                    break;
                }
            }
        };
        std::thread::scope(|s| {
            for _ in 1..readers {
                // A helper that cannot be started leaves its share to the others.
                if std::thread::Builder::new()
                    .name("zrecord-pread".into())
                    .spawn_scoped(s, read)
                    .is_err()
                {
                    break;
                }
            }
            read();
        });
        match error.into_inner().unwrap_or_else(|p| p.into_inner()) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}
