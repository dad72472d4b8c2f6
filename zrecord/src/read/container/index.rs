//! The index file of an open container: opening it and checking it before the first read
//! (length, header, every page checksum, then the structure of every entry: records tile each
//! shard exactly, sizes within limits, known flags), holding a small index in process memory,
//! and reading an entry or a shape out of it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crate::error::{Error, Location, Result};
use crate::format::{
    self, Codec, Entry, FLAG_STORED_RAW, HEADER_LEN, Kind, MAX_RECORD_BYTES, Manifest,
};
use crate::source::{Opener, ReadFile};

use super::files::{file_at, missing_or_io, open_whole};

/// Indexes up to this size (64 MiB: 4 Mi records of 16-byte entries) are copied into process
/// memory at open; larger ones stay memory-mapped (an unmapped store holds its whole index in
/// memory).
pub(super) const INDEX_IN_MEMORY_BYTES: usize = 64 << 20;

/// Containers of more records than this (4 Mi: a 64 MiB index) are checked page by page, each
/// page the first time a read needs it ([`Pages`]); smaller ones are checked whole at open.
pub(super) const EAGER_RECORDS: u64 = 4 << 20;

/// Opens the index of the container described by `m` at `index_path` (memory-mapped when
/// `mapped`, else read into memory) and checks its length, its header and, unless `lazy`, every
/// page checksum.
pub(super) fn open_index(
    opener: &dyn Opener,
    m: &Manifest,
    index_path: &Path,
    mapped: bool,
    lazy: bool,
) -> Result<Arc<dyn ReadFile>> {
    let index =
        open_whole(opener, index_path, mapped).map_err(|e| missing_or_io(index_path, None, e))?;
    let ib = index.bytes();
    check_length_and_header(m, index_path, ib.len() as u64, ib)?;
    if !lazy {
        for page in 0..m.records.div_ceil(format::PAGE_ENTRIES) {
            check_page_crc(m, ib, index_path, page)?;
        }
    }
    Ok(index)
}

/// Checks the index file at `index_path` against manifest `m`: its length `len`, and its header
/// in `head` (the file's first bytes, at least the header's).
pub(super) fn check_length_and_header(
    m: &Manifest,
    index_path: &Path,
    len: u64,
    head: &[u8],
) -> Result<()> {
    if len != m.index_len {
        return Err(Error::corrupt(
            file_at(index_path, None),
            "index file length",
            m.index_len,
            len,
        ));
    }
    format::check_header(
        head,
        &format::encode_index_header(&m.uuid, m.records, m.entry_size()),
        index_path,
        None,
        "index header",
    )
}

/// Index page `page`'s checksum.
pub(super) fn check_page_crc(m: &Manifest, ib: &[u8], index_path: &Path, page: u64) -> Result<()> {
    let entry = m.entry_size();
    let first = page * format::PAGE_ENTRIES;
    let k = (m.records - first).min(format::PAGE_ENTRIES) as usize;
    let pos = HEADER_LEN + (first as usize) * entry + 4 * page as usize;
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
    Ok(())
}

/// Which index pages of a lazily checked container have been checked: one bit per page (32 KiB
/// for a billion records) and a count of those left. Checking is idempotent, so two readers may
/// check one page at once; the bit is set after the check, with release ordering.
pub(super) struct Pages {
    checked: Box<[AtomicU64]>,
    left: AtomicU64,
}

impl Pages {
    pub(super) fn new(records: u64) -> Pages {
        let pages = records.div_ceil(format::PAGE_ENTRIES);
        Pages {
            checked: (0..pages.div_ceil(64)).map(|_| AtomicU64::new(0)).collect(),
            left: AtomicU64::new(pages),
        }
    }

    /// Whether every page has been checked.
    #[inline]
    pub(super) fn all(&self) -> bool {
        self.left.load(Ordering::Acquire) == 0
    }

    /// Whether page `p` has been checked.
    #[inline]
    pub(super) fn has(&self, p: u64) -> bool {
        self.checked[(p / 64) as usize].load(Ordering::Acquire) & (1 << (p % 64)) != 0
    }

    /// Marks page `p` checked.
    pub(super) fn mark(&self, p: u64) {
        let bit = 1 << (p % 64);
        if self.checked[(p / 64) as usize].fetch_or(bit, Ordering::AcqRel) & bit == 0 {
            self.left.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Checks index page `page` before its first use: its checksum, then each entry's structure
/// ([`check_entry`]) and that its record lies inside its shard (`shard_len`); a raw Dense store's
/// entry must also be where the fixed layout puts it (`fixed_at`). Records are not checked to
/// tile their shards here: a record whose entry points at other bytes fails its own checksum,
/// which is seeded with its index; `verify()` checks the tiling.
pub(super) fn check_page(
    m: &Manifest,
    ib: &[u8],
    index_path: &Path,
    page: u64,
    stride: u64,
    shard_len: impl Fn(u64) -> u64,
    fixed_at: impl Fn(u64) -> Option<u64>,
) -> Result<()> {
    check_page_crc(m, ib, index_path, page)?;
    let first = page * format::PAGE_ENTRIES;
    let end = (first + format::PAGE_ENTRIES).min(m.records);
    for i in first..end {
        let e = check_entry(m, ib, index_path, i, stride)?;
        let end = e.offset.checked_add(u64::from(e.stored_len));
        if e.offset < HEADER_LEN as u64 || end.is_none_or(|x| x > shard_len(i)) {
            return Err(entry_error(
                m,
                index_path,
                i,
                "record extent inside its shard",
                format!("{HEADER_LEN}..={}", shard_len(i)),
                format!("{}+{}", e.offset, e.stored_len),
            ));
        }
        if let Some(at) = fixed_at(i)
            && at != e.offset
        {
            return Err(entry_error(
                m,
                index_path,
                i,
                "record offset of a raw Dense store",
                at.to_string(),
                e.offset.to_string(),
            ));
        }
    }
    Ok(())
}

/// The error of a malformed entry of record `i`.
fn entry_error(
    m: &Manifest,
    index_path: &Path,
    i: u64,
    what: &str,
    expected: String,
    found: String,
) -> Error {
    Error::corrupt(
        Location {
            path: index_path.to_path_buf(),
            record: Some(i),
            offset: Some(format::entry_offset(i, m.entry_size()) as u64),
            ..Default::default()
        },
        what.to_string(),
        expected,
        found,
    )
}

/// Record `i`'s entry, checked on its own: known flags, a shape whose size neither overflows nor
/// is empty nor exceeds 2 GiB (Ragged), and a stored length that fits the codec (the record's
/// size when stored raw, shorter and non-zero when compressed).
fn check_entry(
    m: &Manifest,
    index: &[u8],
    index_path: &Path,
    i: u64,
    stride: u64,
) -> Result<Entry> {
    let entry = m.entry_size();
    let e = entry_at(index, entry, i);
    let bad = |what: &str, expected: String, found: String| {
        entry_error(m, index_path, i, what, expected, found)
    };
    if e.flags & !FLAG_STORED_RAW != 0 {
        return Err(bad("entry flags", "0 or 1".into(), e.flags.to_string()));
    }
    let raw_len = match m.kind {
        Kind::Dense => stride,
        Kind::Ragged => {
            let mut count: u64 = 1;
            for d in shape_at(index, entry, m.ndim, i) {
                count = count
                    .checked_mul(d)
                    .ok_or_else(|| bad("record shape", "no overflow".into(), "overflow".into()))?;
            }
            if count == 0 {
                return Err(bad("record element count", "> 0".into(), "0".into()));
            }
            count
                .checked_mul(m.dtype.itemsize() as u64)
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
    Ok(e)
}

/// The default bound on a process's index memory (512 MiB): half for index copies and checksum
/// tables ([`Charge`]), half for the pages of paged indexes (`paged`).
pub const INDEX_MEMORY_BYTES: usize = 512 << 20;

/// The bound, 0 until set or first read.
static LIMIT: AtomicUsize = AtomicUsize::new(0);

/// The bytes of index copies and checksum tables alive in this process.
static COPIED: AtomicUsize = AtomicUsize::new(0);

/// Sets the bound on this process's index memory, over every container and dataset part it has
/// open (default [`INDEX_MEMORY_BYTES`], or `ZRECORD_INDEX_MEMORY_MIB` from the environment):
/// half of it for indexes copied whole at open and raw Dense stores' checksum tables, half for the
/// pages of the other indexes, read in as reads need them. Copies made under an earlier bound stay
/// until their container closes; paged indexes follow the new bound from the next read. A larger
/// bound lets a random epoch over a large index read fewer pages twice.
pub fn set_index_memory(bytes: usize) {
    LIMIT.store(bytes.max(2), Ordering::Relaxed);
}

/// The bound in force.
pub(super) fn index_memory() -> usize {
    match LIMIT.load(Ordering::Relaxed) {
        0 => {
            let from_env = std::env::var("ZRECORD_INDEX_MEMORY_MIB")
                .ok()
                .and_then(|v| v.trim().parse::<usize>().ok())
                .map_or(INDEX_MEMORY_BYTES, |mib| mib.saturating_mul(1 << 20));
            // Another thread may have set it meanwhile: keep theirs.
            let _ =
                LIMIT.compare_exchange(0, from_env.max(2), Ordering::Relaxed, Ordering::Relaxed);
            LIMIT.load(Ordering::Relaxed)
        }
        l => l,
    }
}

/// Bytes taken from the copies' half of the process's index memory ([`set_index_memory`]), given
/// back when dropped: a dataset of many parts, each copying its index (and, a raw Dense part,
/// building its checksum table) when first opened, stays within it; past it, indexes are paged.
pub(super) struct Charge(usize);

impl Charge {
    /// Takes `bytes` from the copies' budget; `None` when they do not fit.
    pub(super) fn take(bytes: usize) -> Option<Charge> {
        let taken = COPIED.fetch_add(bytes, Ordering::AcqRel);
        if taken.saturating_add(bytes) > index_memory() / 2 {
            COPIED.fetch_sub(bytes, Ordering::AcqRel);
            return None;
        }
        Some(Charge(bytes))
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        COPIED.fetch_sub(self.0, Ordering::AcqRel);
    }
}

/// An index copied into process memory, its bytes charged against the process's index budget
/// ([`Charge`]) until it is dropped.
struct Copied {
    bytes: Vec<u8>,
    _charge: Charge,
}

impl ReadFile for Copied {
    fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

/// The index held in process memory when it is at most [`INDEX_IN_MEMORY_BYTES`] and the
/// process's copies stay within their budget ([`Charge`]), else as it is. A small index is held in
/// process memory: every gather reads one entry per record, so a page of it that the kernel
/// evicted (memory pressure, a store larger than memory) would cost a device read per record
/// before the record's own read. The open has just read every entry, so the copy is one pass over
/// bytes already cached.
/// Returns the index and whether it was copied.
pub(super) fn in_memory(index: Arc<dyn ReadFile>) -> (Arc<dyn ReadFile>, bool) {
    let len = index.bytes().len();
    if len > INDEX_IN_MEMORY_BYTES {
        return (index, false);
    }
    let Some(charge) = Charge::take(len) else {
        return (index, false);
    };
    let bytes = index.bytes().to_vec();
    (
        Arc::new(Copied {
            bytes,
            _charge: charge,
        }),
        true,
    )
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
    let nshards = m.shard_count();
    let mut cursor = vec![HEADER_LEN as u64; nshards as usize];
    for i in 0..m.records {
        let e = check_entry(m, index, index_path, i, stride)?;
        let s = format::shard_of(i, m.block_records, nshards);
        if e.offset != cursor[s as usize] {
            return Err(entry_error(
                m,
                index_path,
                i,
                "record offset in its shard",
                cursor[s as usize].to_string(),
                e.offset.to_string(),
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

#[cfg(test)]
mod tests {
    use super::{Charge, index_memory};

    #[test]
    fn charges_stay_within_the_budget_and_are_given_back() {
        let budget = index_memory() / 2;
        assert!(Charge::take(budget + 1).is_none());
        let half = Charge::take(budget / 2).expect("half the budget is free");
        assert!(
            Charge::take(budget / 4 * 3).is_none(),
            "past the budget while half is held"
        );
        drop(half);
        assert!(Charge::take(budget / 4 * 3).is_some(), "given back on drop");
    }
}
