//! One record from its stored bytes to its place in the output, shared by every engine and by
//! `verify()`: copy-and-checksum a raw record, or check and decompress a zstd one (with a
//! reusable per-thread zstd context), and the frame-size check `verify()` makes before it
//! allocates for a compressed record; the group sizes of a copy-then-check gather of raw records.

use crate::crc::Stores;
use crate::error::{Error, Result};
use crate::format::{self, Codec, Entry, FLAG_STORED_RAW};

use super::container::{Container, Maps};

/// A verified gather of raw records copies them a group at a time, up to this many output bytes,
/// then checksums each record of the group from the output, where it is still in L1/L2. Copying
/// and checksumming in one pass (`crc::copy_append`) makes every fold wait for its load from
/// memory, and the folds waiting fill the reorder window before the next records' loads can
/// issue: on 2 KiB records from DRAM the one-pass gather ran at 0.62x `npy-mmap-raw`, the grouped
/// one at 1.0x (16 KiB to 1 MiB groups alike; docs/performance.md).
pub(super) const GROUP_BYTES: usize = 64 << 10;
/// The most records in one such group.
pub(super) const GROUP_RECORDS: usize = 64;

/// Whether a record with entry `e` is stored raw (its stored bytes are its bytes).
#[cfg(feature = "remote")]
pub(super) fn stored_raw(e: &Entry) -> bool {
    e.flags & FLAG_STORED_RAW != 0
}

/// Raw record `i` (at shard `s`, entry `e`), already copied into `dst`, checked against its
/// checksum there: the second half of a grouped copy-then-check (see [`GROUP_BYTES`]).
#[cfg(feature = "remote")]
pub(super) fn check_copied(c: &Container, i: u64, s: u32, e: Entry, dst: &[u8]) -> Result<()> {
    let got = crate::crc::append(format::record_seed_after(c.uuid_crc(), i), dst);
    if got != e.crc {
        return Err(c.crc_error(i, s, e.offset, e.crc, got));
    }
    Ok(())
}

/// Record `i` decoded from the mapped shard bytes into `dst` (exactly its raw size), verifying
/// as `verify` says; a raw record is copied with `stores` (a zstd frame is decoded by zstd's own
/// stores).
#[inline]
pub(super) fn read_record(
    c: &Container,
    maps: &Maps<'_>,
    i: u64,
    dst: &mut [u8],
    dec: &mut Decoder<'_>,
    verify: bool,
    stores: Stores,
) -> Result<()> {
    decode_located(c, i, c.locate(maps, i), dst, dec, verify, stores)
}

/// Record `i`, located at `(shard, entry, stored bytes)` and fetched by any engine, checked and
/// decoded into `dst` (exactly its raw size), as [`read_record`] does.
#[inline]
pub(super) fn decode_located(
    c: &Container,
    i: u64,
    (s, e, stored): (u32, Entry, &[u8]),
    dst: &mut [u8],
    dec: &mut Decoder<'_>,
    verify: bool,
    stores: Stores,
) -> Result<()> {
    if e.flags & FLAG_STORED_RAW != 0 {
        if verify {
            // The checksum is of what was stored to `dst` (see `crc::copy_append`), so the
            // caller gets exactly the bytes that were verified.
            let seed = format::record_seed_after(c.uuid_crc(), i);
            let got = crate::crc::copy_append_with(seed, dst, stored, stores);
            if got != e.crc {
                return Err(c.crc_error(i, s, e.offset, e.crc, got));
            }
        } else {
            crate::crc::copy_with(dst, stored, stores);
        }
        return Ok(());
    }
    if verify {
        let got = crate::crc::append(format::record_seed_after(c.uuid_crc(), i), stored);
        if got != e.crc {
            return Err(c.crc_error(i, s, e.offset, e.crc, got));
        }
    }
    let n = dec.decompress(stored, dst).map_err(|err| {
        Error::corrupt(
            c.loc(i, s, e.offset),
            "zstd frame",
            "a valid frame",
            err.to_string(),
        )
    })?;
    if n != dst.len() {
        return Err(Error::corrupt(
            c.loc(i, s, e.offset),
            "decompressed record size",
            dst.len(),
            n,
        ));
    }
    Ok(())
}

/// Record `i` stored raw in two pieces (`head`, then `tail`: the ends of two blocks of a cache),
/// checked and copied into `dst` (exactly its size) as [`decode_located`] does with `verify`, the
/// checksum carried from one piece to the next: `Ok(false)` when the record is not stored raw
/// (the caller decodes it from contiguous bytes).
#[cfg(feature = "remote")]
pub(super) fn decode_split(
    c: &Container,
    i: u64,
    (s, e, head, tail): (u32, Entry, &[u8], &[u8]),
    dst: &mut [u8],
    stores: Stores,
) -> Result<bool> {
    if e.flags & FLAG_STORED_RAW == 0 {
        return Ok(false);
    }
    let (d1, d2) = dst.split_at_mut(head.len().min(dst.len()));
    let seed = format::record_seed_after(c.uuid_crc(), i);
    let crc = crate::crc::copy_append_with(seed, d1, head, stores);
    let got = crate::crc::copy_append_with(crc, d2, tail, stores);
    if got != e.crc {
        return Err(c.crc_error(i, s, e.offset, e.crc, got));
    }
    Ok(true)
}

/// For a compressed record: the size its zstd frame header declares must be the size the
/// index declares, checked before anything is allocated or decoded for it (a hostile index
/// could otherwise make `verify()` allocate up to the 2 GiB record limit per record).
pub(super) fn check_frame_size(c: &Container, maps: &Maps<'_>, i: u64, raw_len: u64) -> Result<()> {
    check_frame_located(c, i, c.locate(maps, i), raw_len)
}

/// [`check_frame_size`] of record `i` located at `(shard, entry, stored bytes)` by any reader.
pub(super) fn check_frame_located(
    c: &Container,
    i: u64,
    (s, e, stored): (u32, Entry, &[u8]),
    raw_len: u64,
) -> Result<()> {
    if e.flags & FLAG_STORED_RAW != 0 {
        return Ok(());
    }
    match zstd::zstd_safe::get_frame_content_size(stored) {
        Ok(Some(n)) if n == raw_len => Ok(()),
        // A frame without a size (not written by zrecord) is checked by decoding.
        Ok(None) => Ok(()),
        Ok(Some(n)) => Err(Error::corrupt(
            c.loc(i, s, e.offset),
            "zstd frame content size",
            raw_len,
            n,
        )),
        Err(_) => Err(Error::corrupt(
            c.loc(i, s, e.offset),
            "zstd frame header",
            "a valid frame header",
            "unreadable",
        )),
    }
}

/// How a thread decodes the records of one container.
pub(super) enum Decoder<'a> {
    /// A raw container: a record flagged compressed is an error.
    None,
    /// zstd, with the container's dictionary for `zstd_dict`.
    Zstd(Option<&'a zstd::dict::DecoderDictionary<'static>>),
}

impl<'a> Decoder<'a> {
    /// The decoder for `c`'s codec.
    pub(super) fn new(c: &'a Container) -> Decoder<'a> {
        match c.codec() {
            Codec::Raw => Decoder::None,
            Codec::Zstd | Codec::ZstdDict => Decoder::Zstd(c.decoder_dict()),
        }
    }
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
