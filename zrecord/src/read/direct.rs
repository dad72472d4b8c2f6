//! Cold gathers of raw records read past the page cache.
//!
//! When the residency probe finds a batch cold (see [`super::cold`]) and the store is raw and
//! larger than memory (`ColdReads::Always`, or its size under `Auto`), the gather does not go
//! through the memory map: each record's extent is read with `O_DIRECT` into an aligned bounce
//! buffer and copied from there into its place in the output by the same fused copy + CRC32C
//! kernel a warm gather runs, so the caller receives exactly the bytes that were verified. The
//! batch is cut into pieces (a record, or a part of at most [`super::piece::PIECE`] bytes of a
//! larger one), handed out longest first; a record's checksum is assembled from its pieces' once
//! all are read.
//!
//! Two engines keep many reads in flight. Where the kernel gives a ring, the calling thread
//! queues them on io_uring ([`super::uring`]: up to 256 small reads, 16 large ones) and copies
//! each piece as it completes; records of every size go this way. Elsewhere `DEPTH`
//! blocking readers (the caller and `DEPTH - 1` scoped helper threads, one read outstanding each)
//! take pieces from a shared queue; only records of at least [`MIN_MEAN_BYTES`] on average go
//! this way, smaller ones stay on the read-ahead path (`MADV_WILLNEED`), which keeps more of them
//! in flight than 16 threads do.
//!
//! Through the map, every 4 KiB of a cold record is a page allocated, read, inserted into the page
//! cache and mapped before the copy reads it; a direct read moves the bytes into a reused buffer in
//! one request per piece, which is what the device-limit row of the cold tables does.
//!
//! Memory (blocking readers): one bounce buffer of [`CHUNK`] bytes (plus alignment) per reading
//! thread while a gather runs, at most `DEPTH` per gather; up to [`KEEP_BOUNCES`] of them are kept
//! for later gathers.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::crc::Stores;
use crate::error::{Error, Result};
use crate::format::{self, Codec};
use crate::vfs::DIRECT_ALIGN;

use super::container::Maps;
use super::container::{ColdReads, Container};
use super::piece::{CHUNK, Piece, PieceSum, pieces, read_at_least};

/// A cold batch reads its records directly when they average at least this many bytes; smaller
/// ones are requested with read-ahead and copied through the map.
pub(super) const MIN_MEAN_BYTES: usize = 32 << 10;
/// Reads in flight for one gather (one per reading thread, the caller included).
const DEPTH: usize = 16;
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

impl Container {
    /// Whether a cold batch of `records` records and `total` output bytes is read directly:
    /// a raw container that is larger than memory (by [`ColdReads::Always`], or by its size
    /// under `Auto`), records of at least [`MIN_MEAN_BYTES`] on average or reads queued on
    /// io_uring, and direct reads available on every shard.
    pub(super) fn direct_suits(&self, records: usize, total: usize) -> bool {
        self.codec() == Codec::Raw
            && (self.cold_reads() == ColdReads::Always || self.outgrows_memory())
            && records > 0
            && (total / records >= MIN_MEAN_BYTES || ring_reads())
            && self.all_shards_direct()
    }

    /// Fills `out` with records `idx` (record k at `offsets(k)`) by direct reads, `DEPTH` in
    /// flight. The first failure stops the other readers and is returned.
    ///
    /// The batch is cut into [`pieces`] (a record, or a [`super::piece::PIECE`]-byte part of a
    /// larger one), handed out longest first, so the batch does not end waiting for one reader that drew a
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
        #[cfg(target_os = "linux")]
        let ring = if blocking_readers_forced() {
            None
        } else {
            super::uring::Ring::take()
        };
        #[cfg(target_os = "linux")]
        let mut sums = match ring {
            Some(mut ring) => {
                let sums = self.ring_pieces(&mut ring, idx, work, stores);
                ring.keep();
                sums?
            }
            None => self.threaded_pieces(idx, work, stores)?,
        };
        #[cfg(not(target_os = "linux"))]
        let mut sums = self.threaded_pieces(idx, work, stores)?;
        if !self.verifies() {
            return Ok(());
        }
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
            let mut crc = format::record_seed_after(self.uuid_crc(), i);
            while let Some(&(_, _, len, piece)) = sums.get(at).filter(|p| p.0 == k) {
                crc = shift.combine(crc, piece, len as u64);
                at += 1;
            }
            let (s, e) = self.indexed_entry(maps.index, i);
            if crc != e.crc {
                return Err(self.crc_error(i, s, e.offset, e.crc, crc));
            }
        }
        Ok(())
    }

    /// Reads `work` with `DEPTH` blocking readers (the calling thread and `DEPTH - 1` scoped
    /// helpers, one read outstanding each) taking pieces from a shared queue, for a system where
    /// io_uring is not available. Returns `(record, offset in the record, length, CRC32C from
    /// zero)` of every piece; the first failure stops the other readers and is returned.
    fn threaded_pieces(
        &self,
        idx: &[u64],
        work: Vec<Piece<'_>>,
        stores: Stores,
    ) -> Result<Vec<PieceSum>> {
        let count = work.len();
        let readers = DEPTH.min(count);
        let queue = Mutex::new(work.into_iter());
        let failed = AtomicBool::new(false);
        let error: Mutex<Option<Error>> = Mutex::new(None);
        let sums: Mutex<Vec<PieceSum>> = Mutex::new(Vec::with_capacity(count));
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
        Ok(sums.into_inner().unwrap_or_else(|p| p.into_inner()))
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
        let x = self.piece_extent(maps, i, &piece);
        let Some(file) = self.shard_direct(x.shard) else {
            return self.piece_through_map(maps, i, &x, piece.dst, stores);
        };
        match read_at_least(file, &mut bounce[..x.span], x.at, x.head + x.want) {
            Ok(()) => Ok(self.copy_piece(piece.dst, &bounce[x.head..x.head + x.want], stores)),
            Err(err) if err.raw_os_error() == Some(libc::EINVAL) => {
                self.piece_through_map(maps, i, &x, piece.dst, stores)
            }
            Err(err) => Err(self.piece_read_error(i, &x, err)),
        }
    }
}

#[cfg(feature = "mutations")]
thread_local! {
    static BLOCKING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` with the direct reads of its gathers (on the calling thread) made by blocking readers
/// even where io_uring is available, so tests reach both engines. Test builds only (the
/// `mutations` feature).
#[cfg(feature = "mutations")]
#[doc(hidden)]
pub fn with_blocking_direct_reads<R>(f: impl FnOnce() -> R) -> R {
    let was = BLOCKING.replace(true);
    let r = f();
    BLOCKING.set(was);
    r
}

fn blocking_readers_forced() -> bool {
    #[cfg(feature = "mutations")]
    return BLOCKING.get();
    #[cfg(not(feature = "mutations"))]
    false
}

/// Whether direct reads are queued on an io_uring in this process (so small records, too, are
/// read directly: one thread keeps a whole batch of them in flight).
fn ring_reads() -> bool {
    #[cfg(target_os = "linux")]
    return super::uring::available();
    #[cfg(not(target_os = "linux"))]
    false
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
    fn aligned_bounce_is_chunk_bytes_on_an_alignment_boundary() {
        let mut b = take_bounce();
        let a = aligned(&mut b);
        assert_eq!(a.len(), CHUNK);
        assert_eq!(a.as_ptr() as usize % DIRECT_ALIGN, 0);
        keep_bounce(b);
    }
}
