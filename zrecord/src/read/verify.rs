//! The full check behind `verify()`: every shard's whole-file checksum, then every record's
//! checksum and decoded size (a damaged shard is narrowed down to its first bad record).

use rayon::prelude::*;

use crate::crc::Stores;
use crate::threads::in_parallel;

use crate::error::{Error, Location, Result};

use super::container::Container;
use super::decode::{Decoder, check_frame_located, check_frame_size, decode_located, read_record};
use super::ranges::coalesce;

/// Checks every byte of `c`: each shard's whole-file checksum (a damaged shard is narrowed down
/// to its first bad record), then every record's checksum and decoded size. A map that met a file
/// shorter than itself meanwhile is the error reported, whatever the checks made of its zeros.
pub(super) fn verify_all(c: &Container) -> Result<()> {
    let _index = c.check_index()?;
    let done = if c.mapped() {
        verify_mapped(c)
    } else {
        verify_unmapped(c)
    };
    c.check_faults()?;
    done.map_err(|e| c.explain(e))
}

/// The bytes of one read of an unmapped shard while it is checked whole (8 MiB).
const CHUNK: usize = 8 << 20;

/// [`verify_all`] of an unmapped store (local, or remote): each shard read in [`CHUNK`]s for its
/// checksum, then the records, a run of up to 1,024 at a time read as coalesced ranges of at most
/// [`CHUNK`] bytes (so a remote store is checked with few requests) and each checked on its own.
fn verify_unmapped(c: &Container) -> Result<()> {
    let mut chunk = vec![0u8; CHUNK];
    for s in 0..c.shard_count() {
        let len = c.shard_len(s);
        let mut crc = 0;
        let mut at = 0u64;
        while at < len {
            let n = (len - at).min(CHUNK as u64) as usize;
            c.read_range(s, at, &mut chunk[..n])?;
            crc = crate::crc::append(crc, &chunk[..n]);
            at += n as u64;
        }
        if crc != c.shard_crc(s) {
            let ids: Vec<u64> = (0..c.records()).filter(|&i| c.shard_of(i) == s).collect();
            for run in ids.chunks(1024) {
                check_run(c, run)?;
            }
            return Err(shard_crc_error(c, s, crc));
        }
    }
    let ids: Vec<u64> = (0..c.records()).collect();
    in_parallel(|| ids.par_chunks(1024).try_for_each(|run| check_run(c, run)))
}

/// Checks records `run` of an unmapped store: each one's stored bytes fetched (as coalesced
/// ranges), its frame size checked against the index before anything is decoded, then its
/// checksum and decoded size.
fn check_run(c: &Container, run: &[u64]) -> Result<()> {
    let index = c.index_bytes();
    let mut offsets = Vec::with_capacity(run.len() + 1);
    let mut total = 0usize;
    offsets.push(0);
    for &i in run {
        let (_, e) = c.indexed_entry(index, i);
        total += e.stored_len as usize;
        offsets.push(total);
    }
    // The stored bytes of every record, in run order (no gap: ranges merge only adjacent records).
    let mut stored = vec![0u8; total];
    let mut buf = Vec::new();
    let mut dec = Decoder::new(c);
    for r in coalesce(c, run, &mut stored, &|k| offsets[k], 0, CHUNK as u64) {
        buf.resize(r.len(), 0);
        c.read_range(r.shard, r.start, &mut buf)?;
        for m in r.members {
            let at = (m.entry.offset - r.start) as usize;
            m.dst
                .copy_from_slice(&buf[at..at + m.entry.stored_len as usize]);
        }
    }
    let mut raw = Vec::new();
    for (k, &i) in run.iter().enumerate() {
        let (s, e) = c.indexed_entry(index, i);
        let bytes = &stored[offsets[k]..offsets[k + 1]];
        let raw_len = c.raw_len(i);
        check_frame_located(c, i, (s, e, bytes), raw_len)?;
        raw.resize(raw_len as usize, 0);
        decode_located(
            c,
            i,
            (s, e, bytes),
            &mut raw,
            &mut dec,
            true,
            Stores::Cached,
        )?;
    }
    Ok(())
}

/// The whole-file checksum error of shard `s`, which read as `crc`.
fn shard_crc_error(c: &Container, s: u32, crc: u32) -> Error {
    Error::corrupt(
        Location {
            path: c.shard_path(s).to_path_buf(),
            shard: Some(s),
            ..Default::default()
        },
        "shard file crc32c",
        format!("{:#010x}", c.shard_crc(s)),
        format!("{crc:#010x}"),
    )
}

/// [`verify_all`] of a mapped store.
fn verify_mapped(c: &Container) -> Result<()> {
    let maps = c.maps();
    for (s, bytes) in (0u32..).zip(maps.shards.iter()) {
        let crc = crate::crc::append(0, bytes);
        if crc != c.shard_crc(s) {
            // Locate the damaged record for a precise report, then fall back to the file.
            let mut dec = Decoder::new(c);
            let mut buf = Vec::new();
            for i in (0..c.records()).filter(|&i| c.shard_of(i) == s) {
                let raw_len = c.raw_len(i);
                check_frame_size(c, &maps, i, raw_len)?;
                buf.resize(raw_len as usize, 0);
                read_record(c, &maps, i, &mut buf, &mut dec, true, Stores::Cached)?;
            }
            return Err(shard_crc_error(c, s, crc));
        }
    }
    // Every record decodes to its declared size (catches compressed frames that lie).
    let ids: Vec<u64> = (0..c.records()).collect();
    // On this process's pool (see `threads`), so a forked child can verify too.
    in_parallel(|| {
        ids.par_chunks(1024).try_for_each(|chunk| -> Result<()> {
            let mut dec = Decoder::new(c);
            let mut buf = Vec::new();
            for &i in chunk {
                let raw_len = c.raw_len(i);
                check_frame_size(c, &maps, i, raw_len)?;
                buf.resize(raw_len as usize, 0);
                read_record(c, &maps, i, &mut buf, &mut dec, true, Stores::Cached)?;
            }
            Ok(())
        })
    })
}
