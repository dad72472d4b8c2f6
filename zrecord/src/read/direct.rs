//! Cold gathers of large raw records, read past the page cache.
//!
//! When the residency probe finds a batch cold (see [`super::cold`]) and its records are raw and
//! large (at least [`MIN_MEAN_BYTES`] each on average), the gather does not go through the memory
//! map: each record's extent is read with `O_DIRECT` into an aligned bounce buffer and copied from
//! there into its place in the output by the same fused copy + CRC32C kernel a warm gather runs,
//! so the caller receives exactly the bytes that were verified. Up to [`DEPTH`] reads are in
//! flight at once: the calling thread and `DEPTH - 1` scoped helper threads, each with one read
//! outstanding, take pieces of the batch from a shared queue.
//!
//! Through the map, every 4 KiB of a cold record is a page allocated, read, inserted into the page
//! cache and mapped before the copy reads it; a direct read moves the bytes into a reused buffer in
//! one request per record (records over [`CHUNK`] bytes in pieces of that size), which is what the
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
use crate::format::{self, Codec, FLAG_STORED_RAW};
use crate::vfs::DIRECT_ALIGN;

use super::open::Inner;
use super::record::{Decoder, Maps};

/// A cold batch reads its records directly when they average at least this many bytes; smaller
/// ones are requested with read-ahead and copied through the map.
pub(super) const MIN_MEAN_BYTES: usize = 32 << 10;
/// Reads in flight for one gather (one per reading thread, the caller included).
const DEPTH: usize = 16;
/// The largest single read, and the size of a bounce buffer: a longer record is read and
/// checksummed in pieces of this size.
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
    pub(super) fn direct_fill<F: Fn(usize) -> usize + Sync>(
        &self,
        idx: &[u64],
        out: &mut [u8],
        offsets: &F,
        stores: Stores,
    ) -> Result<()> {
        let readers = DEPTH.min(idx.len());
        // About four pieces per reader, so a reader whose reads are slow does not hold up the end.
        let queue = Mutex::new(split_output(idx.len(), out, offsets, readers * 4).into_iter());
        let failed = AtomicBool::new(false);
        let error: Mutex<Option<Error>> = Mutex::new(None);
        let read = || {
            let mut bounce = take_bounce();
            while !failed.load(Ordering::Relaxed) {
                let next = queue.lock().unwrap_or_else(|p| p.into_inner()).next();
                let Some((a, b, buf)) = next else { break };
                if let Err(e) = self.direct_run(&idx[a..b], buf, offsets, a, stores, &mut bounce) {
                    failed.store(true, Ordering::Relaxed);
                    error
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .get_or_insert(e);
                    break;
                }
            }
            keep_bounce(bounce);
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
        match error.into_inner().unwrap_or_else(|p| p.into_inner()) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Reads records `idx` (records `first..` of the gather; `out` starts at `offsets(first)`)
    /// one after another.
    fn direct_run<F: Fn(usize) -> usize>(
        &self,
        idx: &[u64],
        out: &mut [u8],
        offsets: &F,
        first: usize,
        stores: Stores,
        bounce: &mut [u8],
    ) -> Result<()> {
        let maps = self.maps();
        let base = offsets(first);
        let mut start = 0;
        for (j, &i) in idx.iter().enumerate() {
            let end = offsets(first + j + 1) - base;
            self.direct_record(&maps, i, &mut out[start..end], stores, aligned(bounce))?;
            start = end;
        }
        Ok(())
    }

    /// Reads raw record `i` into `dst` (exactly its size) through `bounce`, verifying as
    /// configured. A file system that refuses the direct read (`EINVAL`: e.g. a device whose
    /// blocks are larger than [`DIRECT_ALIGN`]) gets the record copied through the map instead.
    fn direct_record(
        &self,
        maps: &Maps<'_>,
        i: u64,
        dst: &mut [u8],
        stores: Stores,
        bounce: &mut [u8],
    ) -> Result<()> {
        let s = self.shard_map.shard_of(i);
        let e = self.entry_in(maps.index, i);
        let through_map = |dst: &mut [u8]| {
            self.read_record(maps, i, dst, &mut Decoder::None, self.verify, stores)
        };
        let file = match self.shards[s as usize].direct() {
            Some(f) if e.flags & FLAG_STORED_RAW != 0 => f,
            _ => return through_map(dst),
        };
        let mut crc = format::record_seed_after(self.uuid_crc, i);
        let mut done = 0;
        while done < dst.len() {
            let pos = e.offset + done as u64;
            let at = pos & !(DIRECT_ALIGN as u64 - 1);
            let head = (pos - at) as usize;
            let want = (dst.len() - done).min(CHUNK - head);
            let span = (head + want).next_multiple_of(DIRECT_ALIGN);
            match read_at_least(file, &mut bounce[..span], at, head + want) {
                Ok(()) => {}
                Err(err) if err.raw_os_error() == Some(libc::EINVAL) => return through_map(dst),
                Err(err) => {
                    return Err(Error::io(
                        "read",
                        &self.shard_paths[s as usize],
                        io::Error::new(
                            err.kind(),
                            format!("direct read of record {i} at byte offset {pos}: {err}"),
                        ),
                    ));
                }
            }
            let (src, to) = (&bounce[head..head + want], &mut dst[done..done + want]);
            if self.verify {
                crc = crate::crc::copy_append_with(crc, to, src, stores);
            } else {
                crate::crc::copy_with(to, src, stores);
            }
            done += want;
        }
        if self.verify && crc != e.crc {
            return Err(self.crc_error(i, s, e.offset, e.crc, crc));
        }
        Ok(())
    }
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
