//! The warm engine: records copied from the memory-mapped shards (the page cache), the path of
//! every gather whose records are resident, and of cold ones the read-ahead requests have
//! already asked the kernel for (`read::cold`). Small raw batches are gathered on the calling
//! thread; larger ones, and compressed ones, are split into byte-balanced runs fanned out over
//! the rayon pool. Each run walks its records in order, prefetching index entries and record
//! heads a few records ahead; a verified raw run copies a group of records, then checksums them
//! from the output while they are still in cache.

use rayon::prelude::*;

use crate::crc::Stores;
use crate::error::{Error, Result};
use crate::format::{self, Codec, Entry};
use crate::read::container::{Container, Maps};
use crate::read::decode::{Decoder, GROUP_BYTES, GROUP_RECORDS, read_record};
use crate::read::fan_out::{PARALLEL_BYTES, count_fan_out, sequential};
use crate::read::hint::{PREFETCH_AHEAD, PREFETCH_BYTES, prefetch};
use crate::read::plan::{AcrossParts, Offsets, Plan, ReadEngine, split_output};
use crate::threads::{cores, process_pool};

/// Copies records out of the memory-mapped shards.
#[derive(Debug, Clone, Copy)]
pub(super) struct Warm;

impl ReadEngine for Warm {
    fn gather_into<F: Offsets>(self, c: &Container, plan: &Plan<F>, out: &mut [u8]) -> Result<()> {
        let (idx, offsets, stores) = (plan.idx, plan.offsets, plan.stores);
        let total = out.len();
        let compressed = c.codec() != Codec::Raw;
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
            || sequential());
        let own_pool = if split && !in_pool {
            process_pool()
        } else {
            None
        };
        if !split || (!in_pool && own_pool.is_none()) {
            let mut dec = Decoder::new(c);
            return read_run(c, idx, out, offsets, 0, &mut dec, stores);
        }
        count_fan_out();
        // Split the output into contiguous pieces of roughly equal bytes, one task per piece. A
        // pool may have more threads than cores (a loader's workers are pool threads too);
        // pieces beyond four per core add splitting, not parallelism.
        let threads = pool_threads.min(cores());
        let slices = split_output(idx.len(), out, offsets, threads * 4);
        let run = || {
            slices
                .into_par_iter()
                .try_for_each(|(a, b, buf)| -> Result<()> {
                    let mut dec = Decoder::new(c);
                    read_run(c, &idx[a..b], buf, offsets, a, &mut dec, stores)
                })
        };
        match own_pool {
            Some(pool) => pool.install(run),
            None => run(),
        }
    }
}

/// Reads records `idx` one after another, where `idx[j]` is record `first + j` of a gather
/// whose output starts at `out[0]`'s offset `offsets(first)`: it goes to
/// `out[offsets(first + j) - offsets(first)..offsets(first + j + 1) - offsets(first)]`. Index
/// entries and record bytes are prefetched a few records ahead, so the memory latency of the
/// next records overlaps the copy and checksum of this one.
fn read_run<F: Fn(usize) -> usize>(
    c: &Container,
    idx: &[u64],
    out: &mut [u8],
    offsets: &F,
    first: usize,
    dec: &mut Decoder<'_>,
    stores: Stores,
) -> Result<()> {
    let maps = c.maps();
    let base = offsets(first);
    let at = |j: usize| offsets(first + j) - base;
    if c.verifies() && c.codec() == Codec::Raw && stores == Stores::Cached {
        let one = OneContainer {
            c,
            maps: &maps,
            idx,
        };
        return read_grouped(&one, out, at);
    }
    let mut start = 0;
    for (j, &i) in idx.iter().enumerate() {
        if let Some(&ahead) = idx.get(j + 2 * PREFETCH_AHEAD) {
            c.prefetch_entry(maps.index, ahead);
        }
        if let Some(&ahead) = idx.get(j + PREFETCH_AHEAD) {
            c.prefetch_record(&maps, ahead);
        }
        let end = at(j + 1);
        read_record(c, &maps, i, &mut out[start..end], dec, c.verifies(), stores)?;
        start = end;
    }
    Ok(())
}

/// The records of a grouped run ([`read_grouped`]): where record `j` lies. One container's run
/// ([`OneContainer`]) and a run across a dataset's parts ([`AcrossParts`]) are the two; the loop
/// is compiled for each.
pub(super) trait GroupedRecords<'m> {
    fn len(&self) -> usize;
    /// Record `j`'s container, that container's maps and the record's id in it.
    fn at(&self, j: usize) -> (&Container, &Maps<'m>, u64);
    /// The error a read of record `j` of container `c` reports: a dataset's explains it by its
    /// part (one container's gather does so once, after the run).
    fn explain(&self, _c: &Container, e: Error) -> Error {
        e
    }
}

/// Records `idx` of one container.
struct OneContainer<'a, 'm> {
    c: &'a Container,
    maps: &'a Maps<'m>,
    idx: &'a [u64],
}

impl<'m> GroupedRecords<'m> for OneContainer<'_, 'm> {
    fn len(&self) -> usize {
        self.idx.len()
    }

    #[inline(always)]
    fn at(&self, j: usize) -> (&Container, &Maps<'m>, u64) {
        (self.c, self.maps, self.idx[j])
    }
}

impl<'m> GroupedRecords<'m> for AcrossParts<'_, 'm> {
    fn len(&self) -> usize {
        self.recs.len()
    }

    #[inline(always)]
    fn at(&self, j: usize) -> (&Container, &Maps<'m>, u64) {
        self.recs[j]
    }

    fn explain(&self, c: &Container, e: Error) -> Error {
        c.explain(e)
    }
}

/// A verified gather of raw records with cached stores (record `j` at `out[at(j)..at(j + 1)]`),
/// a group of records at a time (at most [`GROUP_RECORDS`] records and [`GROUP_BYTES`] of
/// output): first each record of the group is located, then every record is copied, then each is
/// checksummed from the output, all of them together (so the caller gets exactly the bytes that
/// were verified). A record's first line is requested [`PREFETCH_AHEAD`] records before its copy,
/// as in the one-record loop: requesting the whole group's first lines while locating it ran
/// 7-10 % slower (2 KiB records, `harness gap-probe`, docs/performance.md), as up to 64
/// prefetches at once hold the line-fill buffers the copy's loads need. A record of
/// `GROUP_BYTES` or more is copied and checksummed in one pass, as the hardware prefetcher
/// streams it anyway.
pub(super) fn read_grouped<'m, R: GroupedRecords<'m>>(
    src: &R,
    out: &mut [u8],
    at: impl Fn(usize) -> usize,
) -> Result<()> {
    let n = src.len();
    let mut located: [(u32, Entry, &[u8]); GROUP_RECORDS] = [(0, Entry::ZERO, &[]); GROUP_RECORDS];
    // The first group's entries are requested together before any is read (the loop below
    // requests each later entry a group ahead): a short run, such as one part's share of a
    // random batch over a dataset of parts, would otherwise wait for each entry in turn.
    let prefetch_entry = |j: usize| {
        let (c, maps, i) = src.at(j);
        c.prefetch_entry(maps.index, i);
    };
    for j in 0..n.min(GROUP_RECORDS) {
        prefetch_entry(j);
    }
    let mut g = 0;
    while g < n {
        let start = at(g);
        let mut j = g;
        while j < n && j - g < GROUP_RECORDS && at(j + 1) - start <= GROUP_BYTES {
            if j + GROUP_RECORDS < n {
                prefetch_entry(j + GROUP_RECORDS);
            }
            let (c, maps, i) = src.at(j);
            let (s, e, stored) = c.locate(maps, i);
            if j - g < PREFETCH_AHEAD {
                prefetch(&stored[..stored.len().min(PREFETCH_BYTES)]);
            }
            located[j - g] = (s, e, stored);
            j += 1;
        }
        if j == g {
            // One record of GROUP_BYTES or more: one pass.
            let (c, maps, i) = src.at(g);
            let dst = &mut out[at(g)..at(g + 1)];
            read_record(c, maps, i, dst, &mut Decoder::None, true, Stores::Cached)
                .map_err(|e| src.explain(c, e))?;
            g += 1;
            continue;
        }
        for (k, &(_, _, stored)) in (g..j).zip(&located) {
            if k + PREFETCH_AHEAD < j {
                let ahead = located[k - g + PREFETCH_AHEAD].2;
                prefetch(&ahead[..ahead.len().min(PREFETCH_BYTES)]);
            }
            // A raw container's entries all have `stored_len` equal to the record's size
            // (checked when the container was opened), so the lengths match.
            copy_record(&mut out[at(k)..at(k + 1)], stored);
        }
        // The group's checksums together: independent chains (`crc::append_each`).
        let mut items = [(0u32, &[][..]); GROUP_RECORDS];
        for (k, item) in (g..j).zip(&mut items) {
            let (c, _, i) = src.at(k);
            *item = (
                format::record_seed_after(c.uuid_crc(), i),
                &out[at(k)..at(k + 1)],
            );
        }
        let mut got = [0u32; GROUP_RECORDS];
        crate::crc::append_each(&items[..j - g], &mut got[..j - g]);
        for (k, (&(s, e, _), &crc)) in (g..j).zip(located.iter().zip(&got)) {
            if crc != e.crc {
                let (c, _, i) = src.at(k);
                return Err(src.explain(c, c.crc_error(i, s, e.offset, e.crc, crc)));
            }
        }
        g = j;
    }
    Ok(())
}

/// Copies one record (`dst` and `src` of equal length). Records of 4 to 32 bytes (tiny Dense
/// records, short token runs) are copied with two overlapping fixed-size moves the compiler
/// inlines, where `copy_from_slice` would call `memmove`: with 8-byte records that call was a
/// quarter of a random gather's time.
#[inline(always)]
fn copy_record(dst: &mut [u8], src: &[u8]) {
    debug_assert_eq!(dst.len(), src.len());
    fn two<const W: usize>(dst: &mut [u8], src: &[u8]) {
        let n = src.len();
        dst[..W].copy_from_slice(&src[..W]);
        dst[n - W..].copy_from_slice(&src[n - W..]);
    }
    match src.len() {
        4..=7 => two::<4>(dst, src),
        8..=15 => two::<8>(dst, src),
        16..=32 => two::<16>(dst, src),
        _ => dst.copy_from_slice(src),
    }
}
