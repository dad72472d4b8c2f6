//! Decoding one record: locating it in the mapped index and shard, prefetching the records
//! ahead, copying-and-checksumming a raw record or checking and decompressing a zstd one (with a
//! reusable per-thread zstd context), and the run loop that reads a list of records in order.

use crate::crc::Stores;
use crate::error::{Error, Result};
use crate::format::{self, Codec, Entry, FLAG_STORED_RAW};

use super::open::Inner;

/// How many records ahead a gather prefetches record bytes (index entries: twice as far).
pub(super) const PREFETCH_AHEAD: usize = 4;
/// Prefetch at most this many leading bytes of a record (the hardware prefetcher streams the rest
/// of a longer one). A whole 2 KiB token block 4 records ahead gathered 1.1-1.2x the batches/s of
/// its first 512 bytes 8 ahead (256 random records of a 40 MiB store, Zen 4; docs/performance.md).
const PREFETCH_BYTES: usize = 2048;

/// A store's mapped bytes for one run of records.
pub(super) struct Maps<'a> {
    pub(super) index: &'a [u8],
    pub(super) shards: Vec<&'a [u8]>,
}

impl Inner {
    /// The mapped index and shard bytes, fetched once for a run of records so that the per-record
    /// path makes no virtual calls.
    pub(super) fn maps(&self) -> Maps<'_> {
        Maps {
            index: self.index.bytes(),
            shards: self.shards.iter().map(|f| f.bytes()).collect(),
        }
    }

    /// Record `i`'s shard, index entry and stored bytes.
    #[inline]
    fn locate<'a>(&self, maps: &Maps<'a>, i: u64) -> (u32, Entry, &'a [u8]) {
        let s = self.shard_map.shard_of(i);
        let e = self.entry_in(maps.index, i);
        let shard = maps.shards[s as usize];
        (
            s,
            e,
            &shard[e.offset as usize..e.offset as usize + e.stored_len as usize],
        )
    }

    /// Starts loading the index entry of record `i` into cache.
    #[inline]
    pub(super) fn prefetch_entry(&self, index: &[u8], i: u64) {
        let off = format::entry_offset(i, self.entry);
        if let Some(b) = index.get(off..off + 1) {
            prefetch(b);
        }
    }

    /// Starts loading the first [`PREFETCH_BYTES`] of record `i`'s stored bytes into cache.
    #[inline]
    fn prefetch_record(&self, maps: &Maps<'_>, i: u64) {
        let s = self.shard_map.shard_of(i);
        let e = self.entry_in(maps.index, i);
        let start = e.offset as usize;
        let end = start.saturating_add((e.stored_len as usize).min(PREFETCH_BYTES));
        if let Some(b) = maps.shards[s as usize].get(start..end) {
            prefetch(b);
        }
    }

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
            self.read_record(&maps, i, &mut out[start..end], dec, self.verify, stores)?;
            start = end;
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
                let seed = format::record_seed_after(self.uuid_crc, i);
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
            let got = crate::crc::append(format::record_seed_after(self.uuid_crc, i), stored);
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

    pub(super) fn crc_error(&self, i: u64, s: u32, off: u64, expected: u32, found: u32) -> Error {
        Error::corrupt(
            self.loc(i, s, off),
            "record crc32c",
            format!("{expected:#010x}"),
            format!("{found:#010x}"),
        )
    }

    pub(super) fn decoder(&self) -> Result<Decoder<'_>> {
        Ok(match self.m.codec {
            Codec::Raw => Decoder::None,
            Codec::Zstd | Codec::ZstdDict => Decoder::Zstd(self.ddict.as_ref()),
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

/// Hints the CPU to load `bytes` into cache; no architectural effect.
#[inline(always)]
fn prefetch(bytes: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    for off in (0..bytes.len()).step_by(64) {
        // SAFETY: a prefetch never faults or changes memory; the address is inside `bytes`.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                bytes.as_ptr().add(off).cast::<i8>(),
            )
        };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = bytes;
}
