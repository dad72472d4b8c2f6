//! The positional engine: an unmapped store's gathers (a store on a shared or network file system,
//! or opened with `OpenOptions::mmap = Some(false)`), read with positional reads (`pread`) and no
//! memory map, so a file another host shrinks or rewrites under the store gives a typed error,
//! never a signal. The gather's records are merged into ranges of their shards (`read::ranges`:
//! neighbours up to [`GAP`] apart share a read, a read spans at most [`MAX_SPAN`] unless one record
//! is longer), and up to [`READERS`] threads (the calling one and scoped helpers) each read one
//! range at a time into a buffer of their own and check and decode its records into their places
//! in the output. Bound: at most `READERS` range buffers of up to `MAX_SPAN` bytes (or one record)
//! at a time, freed when the gather ends.

use crate::error::Result;

use crate::read::container::Container;
use crate::read::decode::Decoder;
use crate::read::plan::{Offsets, Plan, ReadEngine};
use crate::read::ranges::{Range, coalesce, decode_range};
use crate::read::readers::drain;

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
    fn gather_into<F: Offsets>(self, c: &Container, plan: &Plan<F>, out: &mut [u8]) -> Result<()> {
        let ranges = coalesce(c, plan.idx, out, plan.offsets, GAP, MAX_SPAN);
        drain(
            READERS,
            "zrecord-pread",
            ranges,
            || (Decoder::new(c), Vec::new()),
            |(dec, buf), mut r: Range<'_>| {
                buf.resize(r.len(), 0);
                c.read_range(r.shard, r.start, buf)?;
                decode_range(c, &mut r, buf, dec, plan.stores)
            },
            drop,
        )
    }
}
