//! Cold gathers of large raw records, read past the page cache.
//!
//! When the residency probe finds a batch cold (see [`super::cold`]) and its records are raw and
//! large (at least [`MIN_MEAN_BYTES`] each on average), the gather does not go through the memory
//! map: each record's extent is read with `O_DIRECT` into an aligned bounce buffer and copied from
//! there into its place in the output by the same fused copy + CRC32C kernel a warm gather runs,
//! so the caller receives exactly the bytes that were verified. Up to [`DEPTH`] reads are in
//! flight at once: the calling thread and `DEPTH - 1` scoped helper threads, each with one read
//! outstanding, take pieces of the batch (a record, or a part of at most [`PIECE`] bytes of a
//! larger one) from a shared queue, longest first; a record's checksum is assembled from its
//! pieces' checksums once all are read.
//!
//! Through the map, every 4 KiB of a cold record is a page allocated, read, inserted into the page
//! cache and mapped before the copy reads it; a direct read moves the bytes into a reused buffer in
//! one request per record (records over [`PIECE`] bytes in pieces of that size), which is what the
//! device-limit row of the cold tables does. Small records stay on the read-ahead path
//! (`MADV_WILLNEED`), which already keeps the device busy with them.
//!
//! Memory: one bounce buffer of [`CHUNK`] bytes (plus alignment) per reading thread while a gather
//! runs, at most `DEPTH` per gather; up to [`KEEP_BOUNCES`] of them are kept for later gathers.

use std::fs::File;
use std::io;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::crc::Stores;
use crate::error::{Error, Result};
use crate::format::{self, Codec};
use crate::vfs::DIRECT_ALIGN;

use super::open::Inner;
use super::record::Maps;

/// A cold batch reads its records directly when they average at least this many bytes; smaller
/// ones are requested with read-ahead and copied through the map.
pub(super) const MIN_MEAN_BYTES: usize = 32 << 10;
/// Reads in flight for one gather (one per reading thread, the caller included).
const DEPTH: usize = 16;
/// The size of a bounce buffer, the largest single read (a record longer than [`PIECE`] is read
/// in pieces).
const CHUNK: usize = 1 << 20;
/// Bounce buffers kept for later gathers, process-wide (so at most `KEEP_BOUNCES * CHUNK` bytes,
/// 16 MiB, stay allocated between gathers).
const KEEP_BOUNCES: usize = 16;

/// Bounce buffers of finished gathers. Only ever `try_lock`ed: a contended (or, in a forked child,
/// orphaned) lock means a fresh buffer, never a wait.
static BOUNCES: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

fn take_bounce() -> Vec<u8> {
    BOUNCES
        .try_lock()
        .ok()
        .and_then(|mut kept| kept.pop())
        .unwrap_or_else(|| vec![0u8; CHUNK + DIRECT_ALIGN])
}

fn keep_bounce(b: Vec<u8>) {
    if let Ok(mut kept) = BOUNCES.try_lock()
        && kept.len() < KEEP_BOUNCES
    {
        kept.push(b);
    }
}

/// The `CHUNK` bytes of a bounce buffer that start at a [`DIRECT_ALIGN`] boundary.
fn aligned(b: &mut [u8]) -> &mut [u8] {
    let pad = b.as_ptr().align_offset(DIRECT_ALIGN);
    &mut b[pad..pad + CHUNK]
}

/// Reads `buf.len()` bytes at `at`, or up to the end of the file; fails unless at least `need`
/// bytes were read.
fn read_at_least(file: &File, buf: &mut [u8], at: u64, need: usize) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    let mut got = 0;
    while got < need {
        match file.read_at(&mut buf[got..], at + got as u64) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("file ends {got} bytes into a read that needs {need}"),
                ));
            }
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Splits `out` (records `0..n`, record k at `offsets(k)..offsets(k + 1)`) into at most `pieces`
/// contiguous runs of records of about equal bytes: `(first, end, bytes)`.
pub(super) fn split_output<'o, F: Fn(usize) -> usize>(
    n: usize,
    out: &'o mut [u8],
    offsets: &F,
    pieces: usize,
) -> Vec<(usize, usize, &'o mut [u8])> {
    let pieces = pieces.clamp(1, n.max(1));
    let target = out.len().div_ceil(pieces).max(1);
    let mut bounds = vec![0usize];
    let mut next = target;
    for k in 1..n {
        if offsets(k) >= next {
            bounds.push(k);
            next = offsets(k) + target;
        }
    }
    bounds.push(n);
    let mut runs = Vec::with_capacity(bounds.len() - 1);
    let mut rest = out;
    let mut consumed = offsets(0);
    for w in bounds.windows(2) {
        let end = offsets(w[1]);
        let (head, tail) = rest.split_at_mut(end - consumed);
        runs.push((w[0], w[1], head));
        rest = tail;
        consumed = end;
    }
    runs
}

impl Inner {
    /// Whether a cold batch of `records` records and `total` output bytes is read directly:
    /// a raw container, records of at least [`MIN_MEAN_BYTES`] on average, and direct reads
    /// available on every shard.
    pub(super) fn direct_suits(&self, records: usize, total: usize) -> bool {
        self.m.codec == Codec::Raw
            && records > 0
            && total / records >= MIN_MEAN_BYTES
            && self.shards.iter().all(|f| f.direct().is_some())
    }

    /// Fills `out` with records `idx` (record k at `offsets(k)`) by direct reads, `DEPTH` in
    /// flight. The first failure stops the other readers and is returned.
    ///
    /// The batch is cut into [`pieces`] (a record, or a [`PIECE`]-byte part of a larger one),
    /// handed out longest first, so the batch does not end waiting for one reader that drew a
    /// large image while the others sit idle. Each piece is copied and checksummed on its own
    /// (CRC32C from zero); after the readers finish, each record's checksum is assembled from
    /// its pieces' in order ([`crate::crc::Shift`]) and compared with the index, so the caller
    /// still receives exactly the bytes that were verified.
    pub(super) fn direct_fill<F: Fn(usize) -> usize + Sync>(
        &self,
        idx: &[u64],
        out: &mut [u8],
        offsets: &F,
        stores: Stores,
    ) -> Result<()> {
        let mut work = pieces(idx.len(), out, offsets);
        let count = work.len();
        // Longest first (stable: equal pieces keep batch order).
        work.sort_by_key(|p| std::cmp::Reverse(p.dst.len()));
        let readers = DEPTH.min(count);
        let queue = Mutex::new(work.into_iter());
        let failed = AtomicBool::new(false);
        let error: Mutex<Option<Error>> = Mutex::new(None);
        // (record, offset in the record, length, CRC32C from zero) of every piece read.
        let sums: Mutex<Vec<(usize, usize, usize, u32)>> = Mutex::new(Vec::with_capacity(count));
        let read = || {
            let maps = self.maps();
            let mut bounce = take_bounce();
            let mut mine = Vec::new();
            while !failed.load(Ordering::Relaxed) {
                let next = queue.lock().unwrap_or_else(|p| p.into_inner()).next();
                let Some(piece) = next else { break };
                let (k, off, len) = (piece.k, piece.off, piece.dst.len());
                match self.direct_piece(&maps, idx[k], piece, stores, aligned(&mut bounce)) {
                    Ok(crc) => mine.push((k, off, len, crc)),
                    Err(e) => {
                        failed.store(true, Ordering::Relaxed);
                        error
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .get_or_insert(e);
                        break;
                    }
                }
            }
            keep_bounce(bounce);
            sums.lock().unwrap_or_else(|p| p.into_inner()).extend(mine);
        };
        std::thread::scope(|s| {
            for _ in 1..readers {
                // A helper that cannot be started leaves its share to the others.
                if std::thread::Builder::new()
                    .name("zrecord-cold".into())
                    .spawn_scoped(s, read)
                    .is_err()
                {
                    break;
                }
            }
            read();
        });
        if let Some(e) = error.into_inner().unwrap_or_else(|p| p.into_inner()) {
            return Err(e);
        }
        if !self.verify {
            return Ok(());
        }
        let mut sums = sums.into_inner().unwrap_or_else(|p| p.into_inner());
        if sums.len() != count {
            return Err(Error::invalid(format!(
                "internal: {} of {count} direct reads reported",
                sums.len()
            )));
        }
        sums.sort_unstable_by_key(|&(k, off, _, _)| (k, off));
        let maps = self.maps();
        let mut shift = crate::crc::Shift::default();
        let mut at = 0;
        for (k, &i) in idx.iter().enumerate() {
            let mut crc = format::record_seed_after(self.uuid_crc, i);
            while let Some(&(_, _, len, piece)) = sums.get(at).filter(|p| p.0 == k) {
                crc = shift.combine(crc, piece, len as u64);
                at += 1;
            }
            let e = self.entry_in(maps.index, i);
            if crc != e.crc {
                let s = self.shard_map.shard_of(i);
                return Err(self.crc_error(i, s, e.offset, e.crc, crc));
            }
        }
        Ok(())
    }

    /// Reads one piece of raw record `i` into `piece.dst` through `bounce` and returns the
    /// piece's CRC32C from zero (0 without verification). A file system that refuses the direct
    /// read (`EINVAL`: e.g. a device whose blocks are larger than [`DIRECT_ALIGN`]) gets the
    /// piece copied from the map instead.
    fn direct_piece(
        &self,
        maps: &Maps<'_>,
        i: u64,
        piece: Piece<'_>,
        stores: Stores,
        bounce: &mut [u8],
    ) -> Result<u32> {
        let s = self.shard_map.shard_of(i);
        let e = self.entry_in(maps.index, i);
        let want = piece.dst.len();
        let pos = e.offset + piece.off as u64;
        let copy = |to: &mut [u8], from: &[u8]| {
            if self.verify {
                crate::crc::copy_append_with(0, to, from, stores)
            } else {
                crate::crc::copy_with(to, from, stores);
                0
            }
        };
        let through_map = |to: &mut [u8]| -> Result<u32> {
            let shard = maps.shards[s as usize];
            let from = usize::try_from(pos)
                .ok()
                .and_then(|a| shard.get(a..a.checked_add(want)?))
                .ok_or_else(|| {
                    Error::corrupt(
                        self.loc(i, s, e.offset),
                        "record extent",
                        format!("inside the shard's {} bytes", shard.len()),
                        format!("bytes {pos}..{}", pos + want as u64),
                    )
                })?;
            Ok(copy(to, from))
        };
        let Some(file) = self.shards[s as usize].direct() else {
            return through_map(piece.dst);
        };
        let at = pos & !(DIRECT_ALIGN as u64 - 1);
        let head = (pos - at) as usize;
        let span = (head + want).next_multiple_of(DIRECT_ALIGN);
        match read_at_least(file, &mut bounce[..span], at, head + want) {
            Ok(()) => Ok(copy(piece.dst, &bounce[head..head + want])),
            Err(err) if err.raw_os_error() == Some(libc::EINVAL) => through_map(piece.dst),
            Err(err) => Err(Error::io(
                "read",
                &self.shard_paths[s as usize],
                io::Error::new(
                    err.kind(),
                    format!("direct read of record {i} at byte offset {pos}: {err}"),
                ),
            )),
        }
    }
}

/// The largest direct read of one piece: a bounce buffer less one alignment unit, so a piece that
/// starts anywhere inside a [`DIRECT_ALIGN`] block still fits its buffer.
const PIECE: usize = CHUNK - DIRECT_ALIGN;

/// Bytes `off..off + dst.len()` of record `k` of a gather, read by one direct read.
pub(super) struct Piece<'o> {
    k: usize,
    off: usize,
    dst: &'o mut [u8],
}

/// Cuts `out` (records `0..n`, record k at `offsets(k)..offsets(k + 1)`, relative to
/// `offsets(0)`) into pieces of at most [`PIECE`] bytes, each inside one record, in batch order.
pub(super) fn pieces<'o, F: Fn(usize) -> usize>(
    n: usize,
    out: &'o mut [u8],
    offsets: &F,
) -> Vec<Piece<'o>> {
    let mut v = Vec::with_capacity(n);
    let mut rest = out;
    for k in 0..n {
        let (mut record, tail) = rest.split_at_mut(offsets(k + 1) - offsets(k));
        rest = tail;
        let mut off = 0;
        while !record.is_empty() {
            let (dst, more) = record.split_at_mut(record.len().min(PIECE));
            v.push(Piece { k, off, dst });
            off += PIECE;
            record = more;
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_output_covers_every_record_once_in_balanced_runs() {
        let sizes = [5usize, 1, 1, 9, 2, 2, 2, 7, 3];
        let mut offs = vec![0];
        for s in sizes {
            offs.push(offs.last().unwrap() + s);
        }
        let mut out = vec![0u8; *offs.last().unwrap()];
        for pieces in [1, 2, 3, 4, 9, 20] {
            let runs = split_output(sizes.len(), &mut out, &|k| offs[k], pieces);
            assert!(
                runs.len() <= pieces.min(sizes.len()),
                "{pieces}: {}",
                runs.len()
            );
            let mut next = 0;
            for (a, b, bytes) in &runs {
                assert_eq!(*a, next);
                assert!(b > a);
                assert_eq!(bytes.len(), offs[*b] - offs[*a]);
                next = *b;
            }
            assert_eq!(next, sizes.len());
        }
    }

    #[test]
    fn pieces_cover_every_byte_once_within_one_record() {
        let sizes = [5usize, PIECE, PIECE + 1, 3 * PIECE - 7, 1];
        let mut offs = vec![0];
        for s in sizes {
            offs.push(offs.last().unwrap() + s);
        }
        let mut out = vec![0u8; *offs.last().unwrap()];
        let base = out.as_ptr() as usize;
        let got: Vec<(usize, usize, usize, usize)> = pieces(sizes.len(), &mut out, &|k| offs[k])
            .into_iter()
            .map(|p| (p.k, p.off, p.dst.len(), p.dst.as_ptr() as usize - base))
            .collect();
        let want = vec![
            (0, 0, 5, 0),
            (1, 0, PIECE, 5),
            (2, 0, PIECE, 5 + PIECE),
            (2, PIECE, 1, 5 + 2 * PIECE),
            (3, 0, PIECE, 6 + 2 * PIECE),
            (3, PIECE, PIECE, 6 + 3 * PIECE),
            (3, 2 * PIECE, PIECE - 7, 6 + 4 * PIECE),
            (4, 0, 1, offs[4]),
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn aligned_bounce_is_chunk_bytes_on_an_alignment_boundary() {
        let mut b = take_bounce();
        let a = aligned(&mut b);
        assert_eq!(a.len(), CHUNK);
        assert_eq!(a.as_ptr() as usize % DIRECT_ALIGN, 0);
        keep_bounce(b);
    }
}
