//! Pieces of a direct read: a record, or a part of at most [`PIECE`] bytes of a larger one, the
//! aligned read that covers each, the copy + checksum of a piece once read, and
//! [`read_pieces`], which cuts a gather into pieces, has an engine read them and checks every
//! record from its pieces' checksums. Shared by both direct-read engines (`read::engine`'s
//! blocking readers and io_uring).

use std::fs::File;
use std::io;

use crate::crc::Stores;
use crate::error::{Error, Result};
use crate::format;
use crate::vfs::DIRECT_ALIGN;

use super::container::{Container, Maps};
use super::plan::Plan;

/// The size of a bounce buffer of the blocking readers, the largest single read (a record longer
/// than [`PIECE`] is read in pieces).
pub(super) const CHUNK: usize = 1 << 20;

/// Reads `buf.len()` bytes at `at`, or up to the end of the file; fails unless at least `need`
/// bytes were read.
pub(super) fn read_at_least(file: &File, buf: &mut [u8], at: u64, need: usize) -> io::Result<()> {
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

/// Where piece `piece` of record `i` lies and the aligned read that covers it.
pub(super) fn piece_extent(c: &Container, maps: &Maps<'_>, i: u64, piece: &Piece<'_>) -> Extent {
    let (shard, e) = c.indexed_entry(maps.index, i);
    let want = piece.dst.len();
    let pos = e.offset + piece.off as u64;
    let at = pos & !(DIRECT_ALIGN as u64 - 1);
    let head = (pos - at) as usize;
    Extent {
        shard,
        record_offset: e.offset,
        pos,
        at,
        head,
        want,
        span: (head + want).next_multiple_of(DIRECT_ALIGN),
    }
}

/// Copies (and, when verifying, checksums from zero) one piece.
pub(super) fn copy_piece(c: &Container, to: &mut [u8], from: &[u8], stores: Stores) -> u32 {
    if c.verifies() {
        crate::crc::copy_append_with(0, to, from, stores)
    } else {
        crate::crc::copy_with(to, from, stores);
        0
    }
}

/// The piece at `x` copied from the memory map (where a direct read is refused).
pub(super) fn piece_through_map(
    c: &Container,
    maps: &Maps<'_>,
    i: u64,
    x: &Extent,
    to: &mut [u8],
    stores: Stores,
) -> Result<u32> {
    let shard = maps.shards[x.shard as usize];
    let from = usize::try_from(x.pos)
        .ok()
        .and_then(|a| shard.get(a..a.checked_add(x.want)?))
        .ok_or_else(|| {
            Error::corrupt(
                c.loc(i, x.shard, x.record_offset),
                "record extent",
                format!("inside the shard's {} bytes", shard.len()),
                format!("bytes {}..{}", x.pos, x.pos + x.want as u64),
            )
        })?;
    Ok(copy_piece(c, to, from, stores))
}

/// A failed direct read of the piece at `x`, with the shard path, record and offset.
pub(super) fn piece_read_error(c: &Container, i: u64, x: &Extent, err: io::Error) -> Error {
    Error::io(
        "read",
        c.shard_path(x.shard),
        io::Error::new(
            err.kind(),
            format!("direct read of record {i} at byte offset {}: {err}", x.pos),
        ),
    )
}

/// `(record, offset in the record, length, CRC32C from zero)` of one piece read.
pub(super) type PieceSum = (usize, usize, usize, u32);

/// Where one piece lies and the [`DIRECT_ALIGN`]-aligned read that covers it.
pub(super) struct Extent {
    /// The shard holding the record.
    pub(super) shard: u32,
    /// The record's offset in its shard (for error locations).
    pub(super) record_offset: u64,
    /// The piece's first byte in the shard.
    pub(super) pos: u64,
    /// The aligned read's first byte (`pos` rounded down).
    pub(super) at: u64,
    /// Bytes from `at` to `pos`.
    pub(super) head: usize,
    /// The piece's length.
    pub(super) want: usize,
    /// The aligned read's length (`head + want` rounded up).
    pub(super) span: usize,
}

/// The largest direct read of one piece: a bounce buffer less one alignment unit, so a piece that
/// starts anywhere inside a [`DIRECT_ALIGN`] block still fits its buffer.
pub(super) const PIECE: usize = CHUNK - DIRECT_ALIGN;

/// Bytes `off..off + dst.len()` of record `k` of a gather, read by one direct read.
pub(super) struct Piece<'o> {
    pub(super) k: usize,
    pub(super) off: usize,
    pub(super) dst: &'o mut [u8],
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

/// A direct read of a gather: cuts `out` into [`pieces`], longest first (stable: equal pieces
/// keep batch order), so the batch does not end waiting for one reader that drew a large image
/// while the others sit idle; has `read` read them all (returning each piece's [`PieceSum`]);
/// then, when the store verifies, assembles each record's checksum from its pieces' in order
/// ([`crate::crc::Shift`]) and compares it with the index, so the caller still receives exactly
/// the bytes that were verified.
pub(super) fn read_pieces<'o, F: Fn(usize) -> usize>(
    c: &Container,
    plan: &Plan<'_, F>,
    out: &'o mut [u8],
    read: impl FnOnce(Vec<Piece<'o>>) -> Result<Vec<PieceSum>>,
) -> Result<()> {
    let idx = plan.idx;
    let mut work = pieces(idx.len(), out, plan.offsets);
    let count = work.len();
    work.sort_by_key(|p| std::cmp::Reverse(p.dst.len()));
    let mut sums = read(work)?;
    if !c.verifies() {
        return Ok(());
    }
    if sums.len() != count {
        return Err(Error::invalid(format!(
            "internal: {} of {count} direct reads reported",
            sums.len()
        )));
    }
    sums.sort_unstable_by_key(|&(k, off, _, _)| (k, off));
    let maps = c.maps();
    let mut shift = crate::crc::Shift::default();
    let mut at = 0;
    for (k, &i) in idx.iter().enumerate() {
        let mut crc = format::record_seed_after(c.uuid_crc(), i);
        while let Some(&(_, _, len, piece)) = sums.get(at).filter(|p| p.0 == k) {
            crc = shift.combine(crc, piece, len as u64);
            at += 1;
        }
        let (s, e) = c.indexed_entry(maps.index, i);
        if crc != e.crc {
            return Err(c.crc_error(i, s, e.offset, e.crc, crc));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
