//! The remote engine (feature `remote`): every gather of a store opened from a URL. The gather's
//! records are merged into ranges of their shard objects (`read::ranges`: neighbours up to
//! `RemoteOptions::gap` apart share a request, a request spans at most `RemoteOptions::max_span`
//! unless one record is longer), the ranges are fetched with at most
//! `RemoteOptions::concurrency` requests in flight (`crate::remote::Remote::fetch_ranges`), and
//! each range's records are checked (CRC32C, frame and size) and decoded into their places in the
//! output on the calling thread as the range lands. Bound: `concurrency` ranges' bytes in flight.

use crate::error::{Error, Result};
use crate::read::container::Container;
use crate::read::decode::Decoder;
use crate::read::plan::{Plan, ReadEngine};
use crate::read::ranges::{coalesce, decode_range};

/// Reads a gather's records from the store's object store.
#[derive(Debug, Clone, Copy)]
pub(super) struct RemoteEngine;

impl ReadEngine for RemoteEngine {
    fn gather_into<F: Fn(usize) -> usize + Sync>(
        self,
        c: &Container,
        plan: &Plan<'_, F>,
        out: &mut [u8],
    ) -> Result<()> {
        let Some(remote) = c.remote() else {
            return Err(Error::invalid(
                "internal: the remote engine chosen for a local store",
            ));
        };
        let o = remote.options();
        let requests = coalesce(c, plan.idx, out, plan.offsets, o.gap, o.max_span)
            .into_iter()
            .map(|r| (c.shard_name(r.shard), r.start..r.end, r))
            .collect();
        let mut dec = Decoder::new(c);
        remote.fetch_ranges(requests, |r, bytes| {
            decode_range(c, r, bytes, &mut dec, plan.stores)
        })
    }
}
