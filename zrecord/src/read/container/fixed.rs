//! A raw Dense store's fixed layout, resolved without its index: record `i` lies at
//! `HEADER_LEN + local(i) * stride` in shard `shard_of(i)` (the open checked that records tile
//! every shard in record order, each exactly `stride` bytes), and its checksum comes from a table
//! of the records' CRC32C values, 4 bytes each, built at open, instead of from its 16-byte index
//! entry.
//!
//! Why: a gather of random records otherwise reads one random index line per record besides the
//! record itself. On 2 KiB token blocks from memory (600 MiB store, Xeon VM, `harness gap-probe`
//! with the variants in one process) that line cost 12-19 % of the gather: skipping it (no
//! checksum) ran 1.19x the indexed gather. The table, four times denser than the index, cut
//! `npy-mmap-raw`'s lead in that probe from 8-12 % to 6 % (docs/performance.md).
//!
//! Memory: the table is built for stores of up to [`MAX_TABLE_RECORDS`] records (16 MiB of
//! table) while the process's index budget ([`Charge`], shared with index copies) has room for
//! it; other stores read checksums from the index. A table of 1 MiB or more is its own
//! anonymous mapping advised for transparent huge pages (see [`crate::host_region_is_lazy`]),
//! whose resident size is the table rounded up to whole 2 MiB pages: the same table in a `Vec`
//! (4 KiB pages) gathered 1-5 % slower (harness cells, 3 rounds alternating: 6,063-6,396 against
//! 6,347-6,469 MiB/s).

use std::ptr::NonNull;

use crate::alloc::{MAPPED_REGION_BYTES, alloc_host_region, free_host_region};
use crate::error::Result;
use crate::format::{Codec, Kind, Manifest};

use super::index::Charge;

/// Stores with more records than this (4 Mi, a 16 MiB table) get no table.
pub(super) const MAX_TABLE_RECORDS: u64 = 4 << 20;

/// Tables of at least this many bytes are placed in a mapping of their own, in huge pages.
const HUGE_TABLE_BYTES: usize = 1 << 20;

/// Alignment of the table (one cache line).
const TABLE_ALIGN: usize = 64;

/// The layout of a raw Dense store: record size and each record's checksum.
pub(super) struct Fixed {
    /// Bytes per record.
    pub(super) stride: u64,
    crcs: CrcTable,
    /// The table's bytes, taken from the process's index budget.
    _charge: Charge,
}

impl Fixed {
    /// The layout of a store with manifest `m` and `stride`-byte records, whose record `i` has
    /// checksum `crc_of(i)`; `None` where it does not apply: not a raw Dense store, no records,
    /// more than [`MAX_TABLE_RECORDS`], or no room left in the process's index budget. The
    /// store's entries must have been validated (they tile each shard in record order).
    pub(super) fn build(
        m: &Manifest,
        stride: u64,
        crc_of: impl Fn(u64) -> u32,
    ) -> Result<Option<Fixed>> {
        if m.kind != Kind::Dense
            || m.codec != Codec::Raw
            || m.records == 0
            || m.records > MAX_TABLE_RECORDS
            || u32::try_from(stride).is_err()
        {
            return Ok(None);
        }
        let Some(charge) = Charge::take(m.records as usize * 4) else {
            return Ok(None);
        };
        let crcs = CrcTable::new(m.records as usize, |i| crc_of(i as u64))?;
        Ok(Some(Fixed {
            stride,
            crcs,
            _charge: charge,
        }))
    }

    /// Record `i`'s stored checksum (`i` < the store's record count).
    #[inline]
    pub(super) fn crc(&self, i: u64) -> u32 {
        self.crcs.as_slice()[i as usize]
    }

    /// The table bytes that hold record `i`'s checksum, for a prefetch; empty past the end.
    #[inline]
    pub(super) fn crc_bytes(&self, i: u64) -> &[u8] {
        let t = self.crcs.as_slice();
        match t.get(i as usize..i as usize + 1) {
            // SAFETY: the one `u32` of `t` at `i`, viewed as its 4 bytes (u8 has no alignment).
            Some(one) => unsafe { std::slice::from_raw_parts(one.as_ptr().cast::<u8>(), 4) },
            None => &[],
        }
    }
}

/// `records` checksums in a region from [`alloc_host_region`].
struct CrcTable {
    ptr: NonNull<u8>,
    records: usize,
    capacity: usize,
}

// SAFETY: the table owns its region alone; it is written only in `new`, before it is shared, and
// read-only afterwards.
unsafe impl Send for CrcTable {}
// SAFETY: as above: shared access only reads.
unsafe impl Sync for CrcTable {}

impl CrcTable {
    fn new(records: usize, crc_of: impl Fn(usize) -> u32) -> Result<CrcTable> {
        let bytes = records * 4;
        let capacity = if bytes >= HUGE_TABLE_BYTES {
            bytes.max(MAPPED_REGION_BYTES)
        } else {
            bytes
        };
        let ptr = alloc_host_region(capacity, TABLE_ALIGN)?;
        let table = CrcTable {
            ptr,
            records,
            capacity,
        };
        // SAFETY: the region is `capacity >= records * 4` bytes, aligned to 64 (so to u32), zeroed
        // (a valid u32 for every slot), and owned by `table` alone until it is returned.
        let slots =
            unsafe { std::slice::from_raw_parts_mut(table.ptr.as_ptr().cast::<u32>(), records) };
        for (i, slot) in slots.iter_mut().enumerate() {
            *slot = crc_of(i);
        }
        Ok(table)
    }

    #[inline]
    fn as_slice(&self) -> &[u32] {
        // SAFETY: `ptr` holds `records` initialized, aligned u32 values (written in `new`) and
        // lives as long as `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().cast::<u32>(), self.records) }
    }
}

impl Drop for CrcTable {
    fn drop(&mut self) {
        // SAFETY: the region came from `alloc_host_region(capacity, TABLE_ALIGN)` and nothing
        // uses it after this.
        unsafe { free_host_region(self.ptr, self.capacity, TABLE_ALIGN) };
    }
}
