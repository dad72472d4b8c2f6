//! Decoding one record: locating it in the mapped index and shard, prefetching the records
//! ahead, copying-and-checksumming a raw record or checking and decompressing a zstd one (with a
//! reusable per-thread zstd context), and the run loop that reads a list of records in order.

use crate::crc::Stores;
use crate::error::{Error, Result};
use crate::format::{self, Codec, Entry, FLAG_STORED_RAW};

use super::container::{Container, Maps};
use super::hint::{PREFETCH_AHEAD, PREFETCH_BYTES, prefetch};

/// A verified gather of raw records copies them a group at a time, up to this many output bytes,
/// then checksums each record of the group from the output, where it is still in L1/L2. Copying
/// and checksumming in one pass (`crc::copy_append`) makes every fold wait for its load from
/// memory, and the folds waiting fill the reorder window before the next records' loads can
/// issue: on 2 KiB records from DRAM the one-pass gather ran at 0.62x `npy-mmap-raw`, the grouped
/// one at 1.0x (16 KiB to 1 MiB groups alike; docs/performance.md).
const GROUP_BYTES: usize = 64 << 10;
/// The most records in one such group.
const GROUP_RECORDS: usize = 64;

impl Container {
    /// Reads records `idx` one after another, where `idx[j]` is record `first + j` of a gather
    /// whose output starts at `out[0]`'s offset `offsets(first)`: it goes to
    /// `out[offsets(first + j) - offsets(first)..offsets(first + j + 1) - offsets(first)]`. Index
    /// entries and record bytes are prefetched a few records ahead, so the memory latency of the
    /// next records overlaps the copy and checksum of this one.
    pub(super) fn read_run<F: Fn(usize) -> usize>(
        &self,
        idx: &[u64],
        out: &mut [u8],
        offsets: &F,
        first: usize,
        dec: &mut Decoder<'_>,
        stores: Stores,
    ) -> Result<()> {
        let maps = self.maps();
        if self.verifies() && self.codec() == Codec::Raw && stores == Stores::Cached {
            return self.read_run_grouped(idx, out, offsets, first, &maps);
        }
        let base = offsets(first);
        let mut start = 0;
        for (j, &i) in idx.iter().enumerate() {
            if let Some(&ahead) = idx.get(j + 2 * PREFETCH_AHEAD) {
                self.prefetch_entry(maps.index, ahead);
            }
            if let Some(&ahead) = idx.get(j + PREFETCH_AHEAD) {
                self.prefetch_record(&maps, ahead);
            }
            let end = offsets(first + j + 1) - base;
            self.read_record(&maps, i, &mut out[start..end], dec, self.verifies(), stores)?;
            start = end;
        }
        Ok(())
    }

    /// [`read_run`](Self::read_run) for a verified gather of a raw container with cached stores,
    /// a group of records at a time (at most [`GROUP_RECORDS`] records and [`GROUP_BYTES`] of
    /// output): first each record of the group is located, then every record is copied, then
    /// each is checksummed from the output (so the caller gets exactly the bytes that were
    /// verified). A record's first line is requested [`PREFETCH_AHEAD`] records before its copy,
    /// as in the one-record loop: requesting the whole group's first lines while locating it ran
    /// 7-10 % slower (2 KiB records, `harness gap-probe`, docs/performance.md), as up to 64
    /// prefetches at once hold the line-fill buffers the copy's loads need. A record of
    /// `GROUP_BYTES` or more is copied and checksummed in one pass, as the hardware prefetcher
    /// streams it anyway.
    fn read_run_grouped<F: Fn(usize) -> usize>(
        &self,
        idx: &[u64],
        out: &mut [u8],
        offsets: &F,
        first: usize,
        maps: &Maps<'_>,
    ) -> Result<()> {
        let base = offsets(first);
        let at = |j: usize| offsets(first + j) - base;
        let mut located: [(u32, Entry, &[u8]); GROUP_RECORDS] =
            [(0, Entry::ZERO, &[]); GROUP_RECORDS];
        let mut g = 0;
        while g < idx.len() {
            let start = at(g);
            let mut j = g;
            while j < idx.len() && j - g < GROUP_RECORDS && at(j + 1) - start <= GROUP_BYTES {
                if let Some(&ahead) = idx.get(j + GROUP_RECORDS) {
                    self.prefetch_entry(maps.index, ahead);
                }
                let (s, e, stored) = self.locate(maps, idx[j]);
                if j - g < PREFETCH_AHEAD {
                    prefetch(&stored[..stored.len().min(PREFETCH_BYTES)]);
                }
                located[j - g] = (s, e, stored);
                j += 1;
            }
            if j == g {
                // One record of GROUP_BYTES or more: one pass.
                let dst = &mut out[at(g)..at(g + 1)];
                self.read_record(maps, idx[g], dst, &mut Decoder::None, true, Stores::Cached)?;
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
                out[at(k)..at(k + 1)].copy_from_slice(stored);
            }
            for (k, &(s, e, _)) in (g..j).zip(&located) {
                let i = idx[k];
                let seed = format::record_seed_after(self.uuid_crc(), i);
                let got = crate::crc::append(seed, &out[at(k)..at(k + 1)]);
                if got != e.crc {
                    return Err(self.crc_error(i, s, e.offset, e.crc, got));
                }
            }
            g = j;
        }
        Ok(())
    }

    /// Decodes record `i` into `dst` (exactly its raw size), verifying as configured; a raw record
    /// is copied with `stores` (a zstd frame is decoded by zstd's own stores).
    pub(super) fn read_record(
        &self,
        maps: &Maps<'_>,
        i: u64,
        dst: &mut [u8],
        dec: &mut Decoder<'_>,
        verify: bool,
        stores: Stores,
    ) -> Result<()> {
        let (s, e, stored) = self.locate(maps, i);
        if e.flags & FLAG_STORED_RAW != 0 {
            if verify {
                // The checksum is of what was stored to `dst` (see `crc::copy_append`), so the
                // caller gets exactly the bytes that were verified.
                let seed = format::record_seed_after(self.uuid_crc(), i);
                let got = crate::crc::copy_append_with(seed, dst, stored, stores);
                if got != e.crc {
                    return Err(self.crc_error(i, s, e.offset, e.crc, got));
                }
            } else {
                crate::crc::copy_with(dst, stored, stores);
            }
            return Ok(());
        }
        if verify {
            let got = crate::crc::append(format::record_seed_after(self.uuid_crc(), i), stored);
            if got != e.crc {
                return Err(self.crc_error(i, s, e.offset, e.crc, got));
            }
        }
        let n = dec.decompress(stored, dst).map_err(|err| {
            Error::corrupt(
                self.loc(i, s, e.offset),
                "zstd frame",
                "a valid frame",
                err.to_string(),
            )
        })?;
        if n != dst.len() {
            return Err(Error::corrupt(
                self.loc(i, s, e.offset),
                "decompressed record size",
                dst.len(),
                n,
            ));
        }
        Ok(())
    }

    /// For a compressed record: the size its zstd frame header declares must be the size the
    /// index declares, checked before anything is allocated or decoded for it (a hostile index
    /// could otherwise make `verify()` allocate up to the 2 GiB record limit per record).
    pub(super) fn check_frame_size(&self, maps: &Maps<'_>, i: u64, raw_len: u64) -> Result<()> {
        let (s, e, stored) = self.locate(maps, i);
        if e.flags & FLAG_STORED_RAW != 0 {
            return Ok(());
        }
        match zstd::zstd_safe::get_frame_content_size(stored) {
            Ok(Some(n)) if n == raw_len => Ok(()),
            // A frame without a size (not written by zrecord) is checked by decoding.
            Ok(None) => Ok(()),
            Ok(Some(n)) => Err(Error::corrupt(
                self.loc(i, s, e.offset),
                "zstd frame content size",
                raw_len,
                n,
            )),
            Err(_) => Err(Error::corrupt(
                self.loc(i, s, e.offset),
                "zstd frame header",
                "a valid frame header",
                "unreadable",
            )),
        }
    }

    pub(super) fn decoder(&self) -> Result<Decoder<'_>> {
        Ok(match self.codec() {
            Codec::Raw => Decoder::None,
            Codec::Zstd | Codec::ZstdDict => Decoder::Zstd(self.decoder_dict()),
        })
    }
}

pub(super) enum Decoder<'a> {
    None,
    Zstd(Option<&'a zstd::dict::DecoderDictionary<'static>>),
}

thread_local! {
    /// One reusable zstd decompression context per thread. Creating a context costs ~17 us and its
    /// first frame another ~20 us of table set-up: ten times the decode of a 2 KiB record.
    static DCTX: std::cell::RefCell<Option<zstd::zstd_safe::DCtx<'static>>> =
        const { std::cell::RefCell::new(None) };
}

fn zstd_decode(
    ctx: &mut zstd::zstd_safe::DCtx<'static>,
    dict: Option<&zstd::dict::DecoderDictionary<'static>>,
    src: &[u8],
    dst: &mut [u8],
) -> std::io::Result<usize> {
    let r = match dict {
        Some(d) => ctx.decompress_using_ddict(dst, src, d.as_ddict()),
        None => ctx.decompress(dst, src),
    };
    r.map_err(|code| std::io::Error::other(zstd::zstd_safe::get_error_name(code)))
}

impl Decoder<'_> {
    fn decompress(&mut self, src: &[u8], dst: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Decoder::None => Err(std::io::Error::other(
                "record flagged compressed in a raw container",
            )),
            Decoder::Zstd(dict) => DCTX.with(|cell| match cell.try_borrow_mut() {
                Ok(mut slot) => {
                    if slot.is_none() {
                        *slot = zstd::zstd_safe::DCtx::try_create();
                    }
                    match slot.as_mut() {
                        Some(ctx) => zstd_decode(ctx, *dict, src, dst),
                        None => Err(std::io::Error::other("cannot allocate a zstd context")),
                    }
                }
                // Re-entered on this thread (cannot happen today): use a private context.
                Err(_) => match zstd::zstd_safe::DCtx::try_create() {
                    Some(mut ctx) => zstd_decode(&mut ctx, *dict, src, dst),
                    None => Err(std::io::Error::other("cannot allocate a zstd context")),
                },
            }),
        }
    }
}
