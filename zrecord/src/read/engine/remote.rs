//! The remote engine (feature `remote`): every gather of a store opened from a URL. The gather's
//! records are merged into ranges of their shard objects (`read::ranges`: neighbours up to
//! `RemoteOptions::gap` apart share a request, a request spans at most `RemoteOptions::max_span`
//! unless one record is longer), the ranges are fetched with at most
//! `RemoteOptions::concurrency` requests in flight (`crate::remote::Remote::fetch_ranges`), and
//! each range's records are checked (CRC32C, frame and size) and decoded into their places in the
//! output on the calling thread as the range lands. Bound: `concurrency` ranges' bytes in flight.
//!
//! With a node-local cache (`RemoteOptions::cache_dir`, `crate::remote::cache`), each range is
//! first looked up block by block: the parts of it that the cache holds are read from there (only
//! the pages they lie in), the blocks it lacks are fetched whole (neighbouring missing blocks by
//! one request, up to `max_span`), written into the cache and copied into the range; then the
//! range's records are checked and decoded as without a cache. Bound: the gather's ranges (its
//! stored bytes and the gaps merged into them) plus `concurrency` requests of missing blocks.

use std::collections::BTreeMap;

use crate::error::{Error, Result};
use crate::read::container::Container;
use crate::read::decode::Decoder;
use crate::read::plan::{Plan, ReadEngine};
use crate::read::ranges::{Range, coalesce, decode_range};
use crate::remote::{BlockCache, Remote};

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
        let ranges = coalesce(c, plan.idx, out, plan.offsets, o.gap, o.max_span);
        if let Some(cache) = remote.cache() {
            return through_cache(c, remote, cache, ranges, plan);
        }
        let requests = ranges
            .into_iter()
            .map(|r| (c.shard_name(r.shard), r.start..r.end, r))
            .collect();
        let mut dec = Decoder::new(c);
        remote.fetch_ranges(requests, |r, bytes| {
            decode_range(c, r, bytes, &mut dec, plan.stores)
        })
    }
}

/// The gather through the node-local cache (see the module's notes).
fn through_cache<F: Fn(usize) -> usize + Sync>(
    c: &Container,
    remote: &Remote,
    cache: &BlockCache,
    ranges: Vec<Range<'_>>,
    plan: &Plan<'_, F>,
) -> Result<()> {
    let bs = cache.block();
    let uuid = c.uuid();
    // Each range's stored bytes, assembled from cached pages and fetched blocks.
    let mut bufs: Vec<Vec<u8>> = ranges.iter().map(|r| vec![0u8; r.len()]).collect();
    // The blocks the cache lacks, each with the ranges that need bytes of it.
    let mut missing: BTreeMap<(u32, u64), Vec<usize>> = BTreeMap::new();
    for (k, r) in ranges.iter().enumerate() {
        let shard_len = c.shard_len(r.shard);
        for b in r.start / bs..r.end.div_ceil(bs) {
            let (b0, b1) = (b * bs, ((b + 1) * bs).min(shard_len));
            let (lo, hi) = (r.start.max(b0), r.end.min(b1));
            let dst = &mut bufs[k][(lo - r.start) as usize..(hi - r.start) as usize];
            let within = (lo - b0) as usize..(hi - b0) as usize;
            if !cache.read(&uuid, r.shard, b, (b1 - b0) as usize, within, dst) {
                missing.entry((r.shard, b)).or_default().push(k);
            }
        }
    }
    // Neighbouring missing blocks of a shard share a request, up to `max_span`.
    let max_blocks = (remote.options().max_span / bs).max(1);
    let mut runs: Vec<(u32, u64, u64)> = Vec::new();
    for &(s, b) in missing.keys() {
        match runs.last_mut() {
            Some((rs, first, n)) if *rs == s && *first + *n == b && *n < max_blocks => *n += 1,
            _ => runs.push((s, b, 1)),
        }
    }
    let requests = runs
        .iter()
        .map(|&(s, first, n)| {
            let end = ((first + n) * bs).min(c.shard_len(s));
            (c.shard_name(s), first * bs..end, (s, first))
        })
        .collect();
    remote.fetch_ranges(requests, |(s, first), bytes| {
        for (j, block) in bytes.chunks(bs as usize).enumerate() {
            let b = first + j as u64;
            cache.fill(&uuid, s, b, block);
            let b0 = b * bs;
            let b1 = b0 + block.len() as u64;
            for &k in missing.get(&(s, b)).map_or(&[][..], Vec::as_slice) {
                let r = &ranges[k];
                let (lo, hi) = (r.start.max(b0), r.end.min(b1));
                bufs[k][(lo - r.start) as usize..(hi - r.start) as usize]
                    .copy_from_slice(&block[(lo - b0) as usize..(hi - b0) as usize]);
            }
        }
        Ok(())
    })?;
    let mut dec = Decoder::new(c);
    for (r, bytes) in ranges.into_iter().zip(bufs) {
        decode_range(c, r, &bytes, &mut dec, plan.stores)?;
    }
    Ok(())
}

/// The object names and byte ranges a gather of `idx` requests from a remote store without a
/// cache (its coalesced ranges, in shard and offset order); empty for a local store.
#[cfg(feature = "internals")]
pub(in crate::read) fn requests(
    c: &Container,
    idx: &[u64],
) -> Result<Vec<(String, std::ops::Range<u64>)>> {
    c.check_indices(idx)?;
    let Some(remote) = c.remote() else {
        return Ok(Vec::new());
    };
    let o = remote.options();
    let mut out: [u8; 0] = [];
    Ok(coalesce(c, idx, &mut out, &|_| 0, o.gap, o.max_span)
        .into_iter()
        .map(|r| (c.shard_name(r.shard), r.start..r.end))
        .collect())
}
