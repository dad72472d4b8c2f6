//! The remote engine (feature `remote`): every gather of a store opened from a URL. The gather's
//! records are merged into ranges of their shard objects (`read::ranges`: neighbours up to
//! `RemoteOptions::gap` apart share a request, a request spans at most `RemoteOptions::max_span`
//! unless one record is longer), the ranges are fetched with at most
//! `RemoteOptions::concurrency` requests in flight (`crate::remote::Remote::fetch_ranges`), and
//! each range's records are checked (CRC32C, frame and size) and decoded into their places in the
//! output on the calling thread as the range lands. Bound: `concurrency` ranges' bytes in flight.
//!
//! With a node-local cache (`RemoteOptions::cache_dir`, `crate::remote::cache`), records are
//! merged into ranges only where their bytes touch (no gap: a gap would be read from the cache for
//! nothing), and each range is first looked up block by block (only the pages it lies in are read and checked); a range the
//! cache holds whole is checked and decoded at once from one reused buffer per task, and a gather
//! as large as the warm engine splits spreads these over the pool as the warm engine does. The
//! blocks the other ranges lack are fetched whole (neighbouring missing blocks by one request, up
//! to `max_span`), written into the cache and copied into their ranges, which are then checked
//! and decoded as without a cache. Bound: one range per task, plus the ranges with a missing
//! block (their stored bytes and merged gaps) and `concurrency` requests of missing blocks.

use std::collections::BTreeMap;

use rayon::prelude::*;

use super::warm::PARALLEL_BYTES;
use crate::crc::Stores;
use crate::error::{Error, Result};
use crate::format::Codec;
use crate::read::container::Container;
use crate::read::decode::Decoder;
use crate::read::fan_out::{count_fan_out, sequential};
use crate::read::plan::{Plan, ReadEngine};
use crate::read::ranges::{Range, coalesce, decode_range};
use crate::remote::{BlockCache, Remote};
use crate::threads::{cores, process_pool};

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
        if let Some(cache) = remote.cache() {
            // No gap merging in front of the cache: a gap there would be read and checked from
            // the cache for nothing (the blocks it lacks are fetched whole, and neighbouring
            // ones share a request, so the network side merges anyway).
            let ranges = coalesce(c, plan.idx, out, plan.offsets, 0, o.max_span);
            return through_cache(c, remote, cache, ranges, plan);
        }
        let ranges = coalesce(c, plan.idx, out, plan.offsets, o.gap, o.max_span);
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

/// A range the cache did not hold whole: the bytes it had, and the blocks it lacks.
struct Pending<'o> {
    r: Range<'o>,
    bytes: Vec<u8>,
    missing: Vec<u64>,
}

/// Reads range `r` from the cache into `buf` (grown to the range's length, never shrunk, so one
/// buffer serves a task's ranges): when every block of it hits, its records are checked and decoded
/// from there at once, while its bytes are still in the core's cache; otherwise it comes back
/// pending, with what the cache held and the blocks it lacks.
fn from_cache<'o>(
    c: &Container,
    cache: &BlockCache,
    r: Range<'o>,
    buf: &mut Vec<u8>,
    dec: &mut Decoder<'_>,
    stores: Stores,
) -> Result<Option<Pending<'o>>> {
    let (bs, n) = (cache.block(), r.len());
    if buf.len() < n {
        buf.resize(n, 0);
    }
    let uuid = c.uuid();
    let shard_len = c.shard_len(r.shard);
    let mut missing = Vec::new();
    for b in r.start / bs..r.end.div_ceil(bs) {
        let (b0, b1) = (b * bs, ((b + 1) * bs).min(shard_len));
        let (lo, hi) = (r.start.max(b0), r.end.min(b1));
        let dst = &mut buf[(lo - r.start) as usize..(hi - r.start) as usize];
        let within = (lo - b0) as usize..(hi - b0) as usize;
        if !cache.read(&uuid, r.shard, b, (b1 - b0) as usize, within, dst) {
            missing.push(b);
        }
    }
    if missing.is_empty() {
        decode_range(c, r, &buf[..n], dec, stores)?;
        return Ok(None);
    }
    Ok(Some(Pending {
        r,
        bytes: buf[..n].to_vec(),
        missing,
    }))
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
    let stores = plan.stores;
    // Hits: every range is read from the cache and, when it is there whole, decoded at once. A
    // gather as large as the warm engine splits (`PARALLEL_BYTES`, or compressed records) spreads
    // its ranges over the pool the way the warm engine does (a loader's pool, else this process's
    // own), one reused buffer per task.
    let total: usize = ranges.iter().map(Range::len).sum();
    let in_pool = rayon::current_thread_index().is_some();
    let pool_threads = if in_pool {
        rayon::current_num_threads()
    } else {
        cores()
    };
    let split = total >= PARALLEL_BYTES || c.codec() != Codec::Raw;
    let split = split && ranges.len() > 1 && pool_threads > 1 && !sequential();
    let own_pool = if split && !in_pool {
        process_pool()
    } else {
        None
    };
    let mut pending: Vec<Pending<'_>> = if split && (in_pool || own_pool.is_some()) {
        count_fan_out();
        let run = || {
            ranges
                .into_par_iter()
                .map_init(
                    || (Vec::new(), Decoder::new(c)),
                    |(buf, dec), r| from_cache(c, cache, r, buf, dec, stores),
                )
                .filter_map(Result::transpose)
                .collect::<Result<Vec<_>>>()
        };
        match own_pool {
            Some(pool) => pool.install(run)?,
            None => run()?,
        }
    } else {
        let (mut buf, mut dec) = (Vec::new(), Decoder::new(c));
        let mut pending = Vec::new();
        for r in ranges {
            if let Some(p) = from_cache(c, cache, r, &mut buf, &mut dec, stores)? {
                pending.push(p);
            }
        }
        pending
    };
    if pending.is_empty() {
        return Ok(());
    }
    // Misses: the blocks the cache lacks, each with the pending ranges that need bytes of it;
    // neighbouring missing blocks of a shard share a request, up to `max_span`.
    let mut missing: BTreeMap<(u32, u64), Vec<usize>> = BTreeMap::new();
    for (k, p) in pending.iter().enumerate() {
        for &b in &p.missing {
            missing.entry((p.r.shard, b)).or_default().push(k);
        }
    }
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
                let p = &mut pending[k];
                let (lo, hi) = (p.r.start.max(b0), p.r.end.min(b1));
                p.bytes[(lo - p.r.start) as usize..(hi - p.r.start) as usize]
                    .copy_from_slice(&block[(lo - b0) as usize..(hi - b0) as usize]);
            }
        }
        Ok(())
    })?;
    let mut dec = Decoder::new(c);
    for p in pending {
        decode_range(c, p.r, &p.bytes, &mut dec, stores)?;
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
