//! The remote engine (feature `remote`): every gather of a store opened from a URL. The gather's
//! records are merged into ranges of their shard objects where a cost model finds the gap worth a
//! request (`read::ranges::cost_gap`: a request costs `RemoteOptions::gap` bytes, requests go in
//! waves of `RemoteOptions::concurrency`), a request spanning at most `RemoteOptions::max_span`
//! unless one record is longer; the ranges are fetched with at most
//! `RemoteOptions::concurrency` requests in flight (the store's client through
//! `crate::source::RangeFetch`), and each range's records are checked (CRC32C, frame and size)
//! and decoded into their places in the output on the calling thread as the range lands. Bound: `concurrency` ranges' bytes in flight.
//!
//! With a node-local cache (`RemoteOptions::cache_dir`, `crate::source::cache`), each record
//! the cache holds mapped is decoded at once, straight from the map, in the gather's order
//! (`hits`), its own CRC32C standing in for the cache's page checks, which run only when a record
//! fails, or always when the store does not check records. The other records are merged into
//! ranges only where their bytes touch (no gap: a gap would be read from the cache for nothing)
//! and read block by block through one reused buffer per task (`from_cache`). A gather as large
//! as the warm engine splits spreads both over the pool as the warm engine does. The blocks the
//! remaining ranges lack are fetched whole (neighbouring missing blocks by one request, up to
//! `max_span`), written into the cache and copied into their ranges, which are then checked and
//! decoded as without a cache. Bound: one range per task, plus the ranges with a missing block
//! (their stored bytes and merged gaps) and `concurrency` requests of missing blocks.

use std::collections::BTreeMap;

use rayon::prelude::*;

use crate::crc::Stores;
use crate::error::{Error, Result};
use crate::format::Codec;
use crate::read::container::Container;
use crate::read::decode::Decoder;
use crate::read::decode::{
    GROUP_BYTES, GROUP_RECORDS, check_copied, decode_located, decode_split, stored_raw,
};
use crate::read::fan_out::{PARALLEL_BYTES, count_fan_out, sequential};
use crate::read::hint::{PREFETCH_AHEAD, PREFETCH_BYTES, prefetch};
use crate::read::plan::{Offsets, Plan, ReadEngine};
use crate::read::ranges::{Member, Range, cost_gap, decode_range, locate, merge};
use crate::source::cache::{BlockCache, Held, Snapshot, now_secs};
use crate::source::{RangeFetch, fetch_tagged};
use crate::threads::{cores, process_pool};

/// The records `idx` (record k into `out[offsets(k)..offsets(k + 1)]`) as the ranges a gather
/// requests: merged across the gaps that [`cost_gap`] finds worth a request.
fn cost_ranges<'o, F: Fn(usize) -> usize>(
    c: &Container,
    idx: &[u64],
    out: &'o mut [u8],
    offsets: &F,
    o: &crate::source::RemoteOptions,
) -> Vec<Range<'o>> {
    let located = locate(c, idx, out, offsets);
    let gap = cost_gap(&located, o.gap, o.concurrency);
    merge(located, gap, o.max_span)
}

/// Reads a gather's records from the store's object store.
#[derive(Debug, Clone, Copy)]
pub(super) struct RemoteEngine;

impl ReadEngine for RemoteEngine {
    fn gather_into<F: Offsets>(self, c: &Container, plan: &Plan<F>, out: &mut [u8]) -> Result<()> {
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
            return through_cache(c, remote, cache, plan, out);
        }
        let ranges = cost_ranges(c, plan.idx, out, plan.offsets, o);
        let requests = ranges
            .into_iter()
            .map(|r| (c.shard_name(r.shard), r.start..r.end, r))
            .collect();
        let mut dec = Decoder::new(c);
        fetch_tagged(remote, requests, |mut r, bytes| {
            decode_range(c, &mut r, bytes, &mut dec, plan.stores)
        })
    }
}

/// A range the cache did not hold whole: the bytes it had, and the blocks it lacks.
struct Pending<'o> {
    r: Range<'o>,
    bytes: Vec<u8>,
    missing: Vec<u64>,
}

/// Records decoded by [`hits`] per task of a split gather.
const RUN: usize = 64;

/// The records of `run` whose blocks the cache holds mapped, checked and decoded straight from
/// the maps as the warm engine reads a store's map: first bytes prefetched [`PREFETCH_AHEAD`]
/// records ahead, small raw records copied a group at a time and then checked from the output
/// ([`GROUP_BYTES`]), a raw record over a block boundary copied from both blocks with its checksum
/// carried over; the records' own CRC32C stand in for the cache's page checks (for a store that
/// checks records: the caller's condition). Returns the records it did not decode: longer than a
/// block, compressed over a boundary, in a block not in the cache or not mapped, or failing (then
/// [`from_cache`] reads them with the pages checked, which tells a damaged block from a record
/// stored damaged).
fn hits<'o>(
    c: &Container,
    cache: &BlockCache,
    mut run: Vec<(u32, Member<'o>)>,
    dec: &mut Decoder<'_>,
    stores: Stores,
) -> Vec<(u32, Member<'o>)> {
    let bs = cache.block();
    let uuid = c.uuid();
    let len_of = |s: u32, b: u64| (((b + 1) * bs).min(c.shard_len(s)) - b * bs) as usize;
    // The blocks each record lies in: its first, and whether it runs into the next (a record over
    // a block boundary, no longer than a block); none for a longer one.
    let spans: Vec<Option<(u64, bool)>> = run
        .iter()
        .map(|(_, m)| {
            let b = m.entry.offset / bs;
            let end = m.entry.offset + u64::from(m.entry.stored_len);
            match end.div_ceil(bs).saturating_sub(b) {
                1 => Some((b, false)),
                2 => Some((b, true)),
                _ => None,
            }
        })
        .collect();
    // The store's mapped blocks, taken once for the run, and each record's blocks in them. When
    // some record's blocks are not there, those the cache holds are mapped and the run looks its
    // records up once more, in the snapshot that holds them (declared first: it outlives `at`).
    let snap = cache.held();
    let remapped: Snapshot;
    let mut at = held_blocks(&snap, &uuid, &run, &spans);
    let absent: Vec<(u32, u64, usize)> = run
        .iter()
        .zip(&spans)
        .zip(&at)
        .filter(|(_, a)| a.is_none())
        .filter_map(|(((s, _), span), _)| span.map(|(b, two)| (*s, b, two)))
        .flat_map(|(s, b, two)| (b..=b + u64::from(two)).map(move |b| (s, b)))
        .map(|(s, b)| (s, b, len_of(s, b)))
        .collect();
    if !absent.is_empty() {
        remapped = cache.map_blocks(&uuid, &absent);
        at = held_blocks(&remapped, &uuid, &run, &spans);
    }
    // Each record's stored bytes in its blocks: one piece, or two.
    let stored: Vec<Option<(&[u8], &[u8])>> = run
        .iter()
        .zip(&at)
        .map(|((_, m), a)| {
            let (h, next) = (*a)?;
            let place = (m.entry.offset % bs) as usize;
            let n = m.entry.stored_len as usize;
            let first = &h.bytes()[place..];
            Some(match next {
                None => (&first[..n], &[][..]),
                Some(k) => (first, &k.bytes()[..n - first.len()]),
            })
        })
        .collect();
    let lead = |k: usize| {
        if let Some(Some((bytes, _))) = stored.get(k) {
            prefetch(&bytes[..bytes.len().min(PREFETCH_BYTES)]);
        }
    };
    (0..PREFETCH_AHEAD).for_each(lead);
    // Raw records in one piece are copied a group at a time and then checked from their places
    // in the output, as the warm engine gathers (`GROUP_BYTES`); the others are decoded one by
    // one.
    let grouped: Vec<bool> = run
        .iter()
        .zip(&stored)
        .map(|((_, m), st)| {
            stores == Stores::Cached
                && stored_raw(&m.entry)
                && st.is_some_and(|(_, tail)| tail.is_empty())
        })
        .collect();
    let mut ok = vec![false; run.len()];
    let faults = crate::sigbus::caught();
    let mut g = 0;
    while g < run.len() {
        let (mut j, mut bytes) = (g, 0);
        while j < run.len() && j - g < GROUP_RECORDS && bytes + run[j].1.dst.len() <= GROUP_BYTES {
            bytes += run[j].1.dst.len();
            j += 1;
        }
        // A record of GROUP_BYTES or more: one pass.
        let one = j <= g + 1;
        let j = j.max(g + 1);
        for k in g..j {
            lead(k + PREFETCH_AHEAD);
            let (s, m) = &mut run[k];
            let (Some((head, tail)), Some((_, next))) = (stored[k], at[k]) else {
                continue;
            };
            ok[k] = if grouped[k] && !one {
                m.dst.copy_from_slice(head);
                true
            } else if next.is_none() {
                decode_located(c, m.i, (*s, m.entry, head), m.dst, dec, true, stores).is_ok()
            } else {
                matches!(
                    decode_split(c, m.i, (*s, m.entry, head, tail), m.dst, stores),
                    Ok(true)
                )
            };
        }
        for k in g..j {
            let (s, m) = &run[k];
            if ok[k] && grouped[k] && !one {
                ok[k] = check_copied(c, m.i, *s, m.entry, m.dst).is_ok();
            }
        }
        g = j;
    }
    // A fault caught while the run copied: the records read from a map that faulted (its tail
    // now reads zeros) are not taken. A map that faulted before the run began was dropped from
    // the store by the run that saw it fault (its records fail this check and go through
    // `from_cache`), and until then its zeros pass only a record whose own CRC32C says its bytes
    // are those zeros.
    if crate::sigbus::caught() != faults {
        for (ok, a) in ok.iter_mut().zip(&at) {
            if let Some((h, next)) = a {
                *ok = *ok && h.intact() && next.is_none_or(|n| n.intact());
            }
        }
    }
    let (mut taken, mut rest) = (0, Vec::new());
    for (record, ok) in run.into_iter().zip(ok) {
        if ok {
            taken += 1;
        } else {
            rest.push(record);
        }
    }
    cache.hits(taken);
    let now = now_secs();
    for (h, next) in at.iter().flatten() {
        BlockCache::touch(*h, now);
        if let Some(n) = next {
            BlockCache::touch(*n, now);
        }
    }
    rest
}

/// Each record's blocks in `snap`: its first, and the next one for a record over a block boundary
/// (`spans`, as [`hits`] works them out); none when it has no span or a block is not in `snap`.
fn held_blocks<'s>(
    snap: &'s Snapshot,
    uuid: &[u8; 16],
    run: &[(u32, Member<'_>)],
    spans: &[Option<(u64, bool)>],
) -> Vec<Option<(Held<'s>, Option<Held<'s>>)>> {
    run.iter()
        .zip(spans)
        .map(|((s, _), span)| {
            let (b, two) = (*span)?;
            let first = snap.get(uuid, *s, b)?;
            let next = if two {
                Some(snap.get(uuid, *s, b + 1)?)
            } else {
                None
            };
            Some((first, next))
        })
        .collect()
}

/// Reads range `r` from the cache into `buf` (grown to the range's length, never shrunk, so one
/// buffer serves a task's ranges), the pages it lies in checked when `check`, and decodes its
/// records from there: `None` when all were, else the range pending, with what the cache held and
/// the blocks it lacks. A record that fails from unchecked pages is read again checked: a damaged
/// block is removed (then fetched again), and a record that fails from checked pages failed as
/// stored (its error stands).
fn from_cache<'o>(
    c: &Container,
    cache: &BlockCache,
    mut r: Range<'o>,
    buf: &mut Vec<u8>,
    dec: &mut Decoder<'_>,
    stores: Stores,
    mut check: bool,
) -> Result<Option<Pending<'o>>> {
    let (bs, n) = (cache.block(), r.len());
    if buf.len() < n {
        buf.resize(n, 0);
    }
    let uuid = c.uuid();
    let shard_len = c.shard_len(r.shard);
    loop {
        let mut missing = Vec::new();
        for b in r.start / bs..r.end.div_ceil(bs) {
            let (b0, b1) = (b * bs, ((b + 1) * bs).min(shard_len));
            let (lo, hi) = (r.start.max(b0), r.end.min(b1));
            let dst = &mut buf[(lo - r.start) as usize..(hi - r.start) as usize];
            let within = (lo - b0) as usize..(hi - b0) as usize;
            if !cache.read(&uuid, r.shard, b, (b1 - b0) as usize, within, dst, check) {
                missing.push(b);
            }
        }
        if !missing.is_empty() {
            return Ok(Some(Pending {
                bytes: buf[..n].to_vec(),
                r,
                missing,
            }));
        }
        match decode_range(c, &mut r, &buf[..n], dec, stores) {
            Ok(()) => return Ok(None),
            Err(e) if check => return Err(e),
            Err(_) => check = true,
        }
    }
}

/// The gather through the node-local cache (see the module's notes).
fn through_cache<F: Fn(usize) -> usize + Sync>(
    c: &Container,
    remote: &dyn RangeFetch,
    cache: &BlockCache,
    plan: &Plan<'_, F>,
    out: &mut [u8],
) -> Result<()> {
    let bs = cache.block();
    let uuid = c.uuid();
    let stores = plan.stores;
    let trusted = c.verifies();
    // A gather as large as the warm engine splits (`PARALLEL_BYTES`, or compressed records)
    // spreads over the pool the way the warm engine does (a loader's pool, else this process's
    // own).
    let total = out.len();
    let in_pool = rayon::current_thread_index().is_some();
    let pool_threads = if in_pool {
        rayon::current_num_threads()
    } else {
        cores()
    };
    let split = total >= PARALLEL_BYTES || c.codec() != Codec::Raw;
    let split = split && plan.idx.len() > 1 && pool_threads > 1 && !sequential();
    let own_pool = if split && !in_pool {
        process_pool()
    } else {
        None
    };
    let split = split && (in_pool || own_pool.is_some());
    let located = locate(c, plan.idx, out, plan.offsets);
    // Hits in one block, straight from the maps, in the gather's order (a checked store only).
    let rest = if !trusted {
        located
    } else if split {
        count_fan_out();
        let run = || {
            located
                .into_par_iter()
                .chunks(RUN)
                .map_init(
                    || Decoder::new(c),
                    |dec, run| hits(c, cache, run, dec, stores),
                )
                .flatten()
                .collect::<Vec<_>>()
        };
        match &own_pool {
            Some(pool) => pool.install(run),
            None => run(),
        }
    } else {
        hits(c, cache, located, &mut Decoder::new(c), stores)
    };
    if rest.is_empty() {
        return Ok(());
    }
    // The rest, merged where their bytes touch (no gap: a gap would be read from the cache for
    // nothing; the blocks the cache lacks are fetched whole, and neighbouring ones share a
    // request, so the network side merges anyway): read from the cache through a buffer, one
    // reused per task.
    let ranges = merge(rest, 0, remote.options().max_span);
    let check = !trusted;
    let mut pending: Vec<Pending<'_>> = if split && ranges.len() > 1 {
        let run = || {
            ranges
                .into_par_iter()
                .map_init(
                    || (Vec::new(), Decoder::new(c)),
                    |(buf, dec), r| from_cache(c, cache, r, buf, dec, stores, check),
                )
                .filter_map(Result::transpose)
                .collect::<Result<Vec<_>>>()
        };
        match &own_pool {
            Some(pool) => pool.install(run)?,
            None => run()?,
        }
    } else {
        let (mut buf, mut dec) = (Vec::new(), Decoder::new(c));
        let mut pending = Vec::new();
        for r in ranges {
            if let Some(p) = from_cache(c, cache, r, &mut buf, &mut dec, stores, check)? {
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
    fetch_tagged(remote, requests, |(s, first), bytes| {
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
    for mut p in pending {
        decode_range(c, &mut p.r, &p.bytes, &mut dec, stores)?;
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
    let _index = c.check_pages(idx)?;
    let Some(remote) = c.remote() else {
        return Ok(Vec::new());
    };
    let o = remote.options();
    let mut out: [u8; 0] = [];
    Ok(cost_ranges(c, idx, &mut out, &|_| 0, o)
        .into_iter()
        .map(|r| (c.shard_name(r.shard), r.start..r.end))
        .collect())
}
