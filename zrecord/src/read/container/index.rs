//! The index file of an open container: opening it and checking it before the first read
//! (length, header, every page checksum, then the structure of every entry: records tile each
//! shard exactly, sizes within limits, known flags), holding a small index in process memory,
//! and reading an entry or a shape out of it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Error, Location, Result};
use crate::format::{
    self, Codec, Entry, FLAG_STORED_RAW, HEADER_LEN, Kind, MAX_RECORD_BYTES, Manifest,
};
use crate::source::{Opener, ReadFile};

use super::files::{InMemory, file_at, missing_or_io, open_whole};

/// Indexes up to this size (64 MiB: 4 Mi records of 16-byte entries) are copied into process
/// memory at open; larger ones stay memory-mapped (an unmapped store holds its whole index in
/// memory).
pub(super) const INDEX_IN_MEMORY_BYTES: usize = 64 << 20;

/// Opens the index of the container described by `m` at `index_path` (memory-mapped when
/// `mapped`, else read into memory) and checks its length, its header and every page checksum.
pub(super) fn open_index(
    opener: &dyn Opener,
    m: &Manifest,
    index_path: &Path,
    mapped: bool,
) -> Result<Arc<dyn ReadFile>> {
    let index =
        open_whole(opener, index_path, mapped).map_err(|e| missing_or_io(index_path, None, e))?;
    let ib = index.bytes();
    if ib.len() as u64 != m.index_len {
        return Err(Error::corrupt(
            file_at(index_path, None),
            "index file length",
            m.index_len,
            ib.len(),
        ));
    }
    let entry = m.entry_size();
    format::check_header(
        ib,
        &format::encode_index_header(&m.uuid, m.records, entry),
        index_path,
        None,
        "index header",
    )?;
    // Verify every index page checksum.
    let page_bytes = format::PAGE_ENTRIES as usize * entry;
    let mut pos = HEADER_LEN;
    let mut page = 0u64;
    let mut left = m.records;
    while left > 0 {
        let k = left.min(format::PAGE_ENTRIES) as usize;
        let body = &ib[pos..pos + k * entry];
        let stored = format::rd_u32(ib, pos + k * entry);
        let actual = crate::crc::append(format::page_seed(&m.uuid, page), body);
        if stored != actual {
            return Err(Error::corrupt(
                Location {
                    path: index_path.to_path_buf(),
                    offset: Some((pos + k * entry) as u64),
                    ..Default::default()
                },
                format!("index page {page} crc32c"),
                format!("{actual:#010x}"),
                format!("{stored:#010x}"),
            ));
        }
        debug_assert!(k * entry <= page_bytes);
        pos += k * entry + 4;
        left -= k as u64;
        page += 1;
    }
    Ok(index)
}

/// The index held in process memory when it is at most [`INDEX_IN_MEMORY_BYTES`], else as it
/// is. A small index is held in process memory: every gather reads one entry per record, so a
/// page of it that the kernel evicted (memory pressure, a store larger than memory) would cost
/// a device read per record before the record's own read. The open has just read every entry,
/// so the copy is one pass over bytes already cached.
pub(super) fn in_memory(index: Arc<dyn ReadFile>) -> Arc<dyn ReadFile> {
    if index.bytes().len() <= INDEX_IN_MEMORY_BYTES {
        Arc::new(InMemory(index.bytes().to_vec()))
    } else {
        index
    }
}

/// Entry `i` of an index of `entry`-byte entries.
#[inline]
pub(super) fn entry_at(index: &[u8], entry: usize, i: u64) -> Entry {
    let off = format::entry_offset(i, entry);
    format::decode_entry(&index[off..off + 16])
}

/// Record `i`'s shape (`ndim` words) in an index of `entry`-byte entries.
#[inline]
pub(super) fn shape_at(
    index: &[u8],
    entry: usize,
    ndim: u32,
    i: u64,
) -> impl Iterator<Item = u64> + '_ {
    let off = format::entry_offset(i, entry) + 16;
    let b = &index[off..off + 8 * ndim as usize];
    b.chunks_exact(8).map(|c| format::rd_u64(c, 0))
}

/// Structural check of every index entry: records tile each shard exactly (so every shard byte
/// is covered by some record checksum), sizes are within limits, flags are known. `stride` is a
/// Dense store's record size; `shard_paths` name the shards in errors.
pub(super) fn validate_entries(
    m: &Manifest,
    index: &[u8],
    index_path: &Path,
    stride: u64,
    shard_paths: &[PathBuf],
) -> Result<()> {
    let entry = m.entry_size();
    let nshards = m.shard_count();
    let mut cursor = vec![HEADER_LEN as u64; nshards as usize];
    let isz = m.dtype.itemsize() as u64;
    for i in 0..m.records {
        let e = entry_at(index, entry, i);
        let s = format::shard_of(i, m.block_records, nshards);
        let bad = |what: &str, expected: String, found: String| {
            Error::corrupt(
                Location {
                    path: index_path.to_path_buf(),
                    record: Some(i),
                    offset: Some(format::entry_offset(i, entry) as u64),
                    ..Default::default()
                },
                what.to_string(),
                expected,
                found,
            )
        };
        if e.offset != cursor[s as usize] {
            return Err(bad(
                "record offset in its shard",
                cursor[s as usize].to_string(),
                e.offset.to_string(),
            ));
        }
        if e.flags & !FLAG_STORED_RAW != 0 {
            return Err(bad("entry flags", "0 or 1".into(), e.flags.to_string()));
        }
        let raw_len = match m.kind {
            Kind::Dense => stride,
            Kind::Ragged => {
                let mut count: u64 = 1;
                for d in shape_at(index, entry, m.ndim, i) {
                    count = count.checked_mul(d).ok_or_else(|| {
                        bad("record shape", "no overflow".into(), "overflow".into())
                    })?;
                }
                if count == 0 {
                    return Err(bad("record element count", "> 0".into(), "0".into()));
                }
                count
                    .checked_mul(isz)
                    .filter(|&b| b <= MAX_RECORD_BYTES)
                    .ok_or_else(|| bad("record size", "<= 2 GiB".into(), "larger".into()))?
            }
        };
        let raw_flag = e.flags & FLAG_STORED_RAW != 0;
        if m.codec == Codec::Raw && !raw_flag {
            return Err(bad(
                "entry flags for a raw container",
                "1".into(),
                e.flags.to_string(),
            ));
        }
        if raw_flag && u64::from(e.stored_len) != raw_len {
            return Err(bad(
                "stored length of an uncompressed record",
                raw_len.to_string(),
                e.stored_len.to_string(),
            ));
        }
        if !raw_flag && (e.stored_len == 0 || u64::from(e.stored_len) >= raw_len) {
            return Err(bad(
                "compressed length",
                format!("1..{raw_len}"),
                e.stored_len.to_string(),
            ));
        }
        cursor[s as usize] += u64::from(e.stored_len);
    }
    for (s, c) in cursor.iter().enumerate() {
        if *c != m.shards[s].len {
            return Err(Error::corrupt(
                file_at(&shard_paths[s], Some(s as u32)),
                "shard length covered by its records",
                c,
                m.shards[s].len,
            ));
        }
    }
    Ok(())
}
