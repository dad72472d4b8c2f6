//! `index.zri` layout: the index file's length, where entry `i` sits (entries in pages of
//! [`PAGE_ENTRIES`], each page followed by its CRC), and an entry's encoding ([`Entry`]).

use super::layout::{HEADER_LEN, PAGE_ENTRIES, rd_u32, rd_u64};

/// Length of the index file of `records` entries; `None` when a (hostile) count overflows.
pub(crate) fn index_file_len(records: u64, entry: usize) -> Option<u64> {
    let pages = records.div_ceil(PAGE_ENTRIES);
    records
        .checked_mul(entry as u64)?
        .checked_add(4 * pages)?
        .checked_add(HEADER_LEN as u64)
}

/// Byte offset of entry `i` inside the index file.
#[inline]
pub(crate) fn entry_offset(i: u64, entry: usize) -> usize {
    let page = i / PAGE_ENTRIES;
    HEADER_LEN + (i * entry as u64 + page * 4) as usize
}

/// A decoded index entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    pub offset: u64,
    pub flags: u8,
    pub stored_len: u32,
    pub crc: u32,
}

impl Entry {
    /// An all-zero entry (a placeholder in fixed-size arrays).
    pub(crate) const ZERO: Entry = Entry {
        offset: 0,
        flags: 0,
        stored_len: 0,
        crc: 0,
    };
}

#[inline]
pub(crate) fn decode_entry(b: &[u8]) -> Entry {
    let word = rd_u64(b, 0);
    Entry {
        offset: word & ((1 << 56) - 1),
        flags: (word >> 56) as u8,
        stored_len: rd_u32(b, 8),
        crc: rd_u32(b, 12),
    }
}

pub(crate) fn encode_entry(e: &Entry, out: &mut Vec<u8>) {
    out.extend_from_slice(&(e.offset | (u64::from(e.flags) << 56)).to_le_bytes());
    out.extend_from_slice(&e.stored_len.to_le_bytes());
    out.extend_from_slice(&e.crc.to_le_bytes());
}
