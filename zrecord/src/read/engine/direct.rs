//! The blocking direct-read engine: a cold batch of raw records read past the page cache
//! (`O_DIRECT`) by `DEPTH` blocking readers, the caller and `DEPTH - 1` scoped helper threads,
//! one read outstanding each, taking pieces ([`crate::read::piece`]) from a shared queue. Each
//! piece is read into an aligned bounce buffer and copied from there into its place in the
//! output by the same fused copy + CRC32C kernel a warm gather runs; the record checksums are
//! assembled from the pieces' ([`read_pieces`]). The engine of cold batches where the kernel
//! gives no io_uring (`read::engine` chooses).
//!
//! Through the map, every 4 KiB of a cold record is a page allocated, read, inserted into the page
//! cache and mapped before the copy reads it; a direct read moves the bytes into a reused buffer in
//! one request per piece, which is what the device-limit row of the cold tables does.
//!
//! Memory: one bounce buffer of [`CHUNK`] bytes (plus alignment) per reading thread while a
//! gather runs, at most `DEPTH` per gather; up to [`KEEP_BOUNCES`] of them are kept for later
//! gathers.

use std::sync::Mutex;

use crate::crc::Stores;
use crate::error::Result;
use crate::read::container::{Container, Maps};
use crate::read::piece::{
    CHUNK, Piece, PieceSum, copy_piece, piece_extent, piece_read_error, piece_through_map,
    read_at_least, read_pieces,
};
use crate::read::plan::{Offsets, Plan, ReadEngine};
use crate::read::readers::drain;
use crate::vfs::DIRECT_ALIGN;

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

/// Reads a gather's raw records directly with blocking readers.
#[derive(Debug, Clone, Copy)]
pub(super) struct Direct;

impl ReadEngine for Direct {
    /// The first failure stops the other readers and is returned.
    fn gather_into<F: Offsets>(self, c: &Container, plan: &Plan<F>, out: &mut [u8]) -> Result<()> {
        read_pieces(c, plan, out, |work| {
            threaded_pieces(c, plan.idx, work, plan.stores)
        })
    }
}

/// Reads `work` with `DEPTH` blocking readers (the calling thread and `DEPTH - 1` scoped
/// helpers, one read outstanding each) taking pieces from a shared queue. Returns
/// `(record, offset in the record, length, CRC32C from zero)` of every piece; the first failure
/// stops the other readers and is returned.
fn threaded_pieces(
    c: &Container,
    idx: &[u64],
    work: Vec<Piece<'_>>,
    stores: Stores,
) -> Result<Vec<PieceSum>> {
    let sums: Mutex<Vec<PieceSum>> = Mutex::new(Vec::with_capacity(work.len()));
    drain(
        DEPTH,
        "zrecord-cold",
        work,
        || (c.maps(), take_bounce(), Vec::new()),
        |(maps, bounce, mine), piece| {
            let (k, off, len) = (piece.k, piece.off, piece.dst.len());
            let crc = direct_piece(c, maps, idx[k], piece, stores, aligned(bounce))?;
            mine.push((k, off, len, crc));
            Ok(())
        },
        |(_, bounce, mine)| {
            keep_bounce(bounce);
            sums.lock().unwrap_or_else(|p| p.into_inner()).extend(mine);
        },
    )?;
    Ok(sums.into_inner().unwrap_or_else(|p| p.into_inner()))
}

/// Reads one piece of raw record `i` into `piece.dst` through `bounce` and returns the piece's
/// CRC32C from zero (0 without verification). A file system that refuses the direct read
/// (`EINVAL`: e.g. a device whose blocks are larger than [`DIRECT_ALIGN`]) gets the piece copied
/// from the map instead.
fn direct_piece(
    c: &Container,
    maps: &Maps<'_>,
    i: u64,
    piece: Piece<'_>,
    stores: Stores,
    bounce: &mut [u8],
) -> Result<u32> {
    let x = piece_extent(c, maps, i, &piece);
    let Some(file) = c.shard_direct(x.shard) else {
        return piece_through_map(c, maps, i, &x, piece.dst, stores);
    };
    match read_at_least(file, &mut bounce[..x.span], x.at, x.head + x.want) {
        Ok(()) => Ok(copy_piece(
            c,
            piece.dst,
            &bounce[x.head..x.head + x.want],
            stores,
        )),
        Err(err) if err.raw_os_error() == Some(libc::EINVAL) => {
            piece_through_map(c, maps, i, &x, piece.dst, stores)
        }
        Err(err) => Err(piece_read_error(c, i, &x, err)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_bounce_is_chunk_bytes_on_an_alignment_boundary() {
        let mut b = take_bounce();
        let a = aligned(&mut b);
        assert_eq!(a.len(), CHUNK);
        assert_eq!(a.as_ptr() as usize % DIRECT_ALIGN, 0);
        keep_bounce(b);
    }
}
