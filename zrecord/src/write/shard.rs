//! Encoding into one data shard ([`ShardState`]: compress or not, checksum, stage and write at
//! the shard's cursor, hint early writeback) and into the index file ([`IndexWriter`]: entries
//! in pages of `PAGE_ENTRIES`, each page checksummed).

use std::path::PathBuf;

use crate::error::{Error, Result};
use crate::format::{self, Codec, Entry, FLAG_STORED_RAW};
use crate::vfs::WriteFile;

/// Per-shard encode buffer flushed to disk when it reaches this size. A flush writes up to the last
/// [`WRITE_ALIGN`] boundary and keeps the rest, so writer scratch memory is bounded by
/// `data_shards * (WRITE_BUFFER + WRITE_ALIGN)` plus one record per shard.
pub const WRITE_BUFFER: usize = 4 << 20;
/// Every data write of a shard but its last ends on a multiple of this file offset (2 MiB), so
/// that each aligned 2 MiB of the shard is written by one call. The page cache then holds it as one
/// 2 MiB folio, which a mapping maps with one page-table entry: a random gather over a large store
/// takes far fewer TLB misses (a write ending elsewhere leaves the range around its end in small
/// folios; docs/performance.md).
pub const WRITE_ALIGN: u64 = 2 << 20;
/// A syncing writer asks the OS to start writing a shard back after this many new bytes.
const WRITEBACK_EVERY: u64 = 8 << 20;

/// One data shard being written.
pub(super) struct ShardState {
    pub(super) path: PathBuf,
    pub(super) file: Box<dyn WriteFile>,
    pub(super) cursor: u64,
    pub(super) records: u64,
    pub(super) crc: u32,
    /// The CRC shift factor of the last combined record's size.
    pub(super) shift: crate::crc::Shift,
    pub(super) compressor: Option<zstd::bulk::Compressor<'static>>,
    pub(super) buf: Vec<u8>,
    pub(super) scratch: Vec<u8>,
    /// Start writeback every [`WRITEBACK_EVERY`] bytes (only when the writer syncs on close).
    pub(super) early_writeback: bool,
    /// Bytes written since writeback was last started.
    pub(super) unkicked: u64,
}

/// The index file being written.
pub(super) struct IndexWriter {
    pub(super) path: PathBuf,
    pub(super) file: Box<dyn WriteFile>,
    pub(super) page: Vec<u8>,
    pub(super) page_no: u64,
    pub(super) in_page: u64,
    pub(super) pos: u64,
}

/// The record's seeded CRC, and the running whole-shard CRC extended by the same bytes. Small
/// records are simply checksummed twice (hardware CRC32C runs at ~20 GB/s); large ones are
/// checksummed once and combined ([`crate::crc::Shift`]: one GF(2) product while the record size
/// repeats, about a microsecond when it changes).
fn record_and_shard_crc(
    shard_crc: &mut u32,
    shift: &mut crate::crc::Shift,
    i: u64,
    bytes: &[u8],
    uuid: &[u8; 16],
) -> u32 {
    const COMBINE_ABOVE: usize = 64 << 10;
    if bytes.len() < COMBINE_ABOVE {
        *shard_crc = crate::crc::append(*shard_crc, bytes);
        crate::crc::append(format::record_seed(uuid, i), bytes)
    } else {
        let plain = crate::crc::append(0, bytes);
        let len = bytes.len() as u64;
        *shard_crc = shift.combine(*shard_crc, plain, len);
        shift.combine(format::record_seed(uuid, i), plain, len)
    }
}

impl ShardState {
    fn checksum(&mut self, i: u64, bytes: &[u8], uuid: &[u8; 16]) -> u32 {
        record_and_shard_crc(&mut self.crc, &mut self.shift, i, bytes, uuid)
    }

    /// Checksums an uncompressed record that will be written at `offset` by `write_parts_direct`.
    pub(super) fn account(&mut self, i: u64, raw: &[u8], offset: u64, uuid: &[u8; 16]) -> Entry {
        let crc = self.checksum(i, raw, uuid);
        self.records += 1;
        Entry {
            offset,
            flags: FLAG_STORED_RAW,
            stored_len: raw.len() as u32,
            crc,
        }
    }

    /// Counts `n` bytes written; past [`WRITEBACK_EVERY`], asks the OS to start writing them back
    /// so that the fsync in `close()` finds most of the shard on disk already.
    fn written(&mut self, n: usize) {
        self.unkicked += n as u64;
        if self.early_writeback && self.unkicked >= WRITEBACK_EVERY {
            // A hint only: a real I/O error surfaces at the fsync in close().
            let _ = self.file.start_writeback();
            self.unkicked = 0;
        }
    }

    /// The shard's logical end: the bytes written plus those staged.
    pub(super) fn end(&self) -> u64 {
        self.cursor + self.buf.len() as u64
    }

    /// Writes the staged bytes, then `parts`, back to back from the cursor, up to the last
    /// [`WRITE_ALIGN`] boundary they reach, as one gathered write (where the file system can),
    /// and removes what it wrote from the staging buffer and from `parts` (a part the boundary
    /// cuts keeps its tail). Writes nothing when they do not reach a boundary.
    pub(super) fn write_aligned(&mut self, parts: &mut Vec<&[u8]>) -> Result<()> {
        let total = self.buf.len() + parts.iter().map(|p| p.len()).sum::<usize>();
        let cut = (self.cursor + total as u64) / WRITE_ALIGN * WRITE_ALIGN;
        if cut <= self.cursor {
            return Ok(());
        }
        let n = (cut - self.cursor) as usize;
        let from_buf = n.min(self.buf.len());
        let (mut whole, mut split) = (0usize, 0usize);
        {
            let mut list: Vec<&[u8]> = Vec::with_capacity(parts.len() + 1);
            list.push(&self.buf[..from_buf]);
            let mut left = n - from_buf;
            while left > 0 {
                let p = parts[whole];
                if p.len() <= left {
                    list.push(p);
                    left -= p.len();
                    whole += 1;
                } else {
                    list.push(&p[..left]);
                    split = left;
                    left = 0;
                }
            }
            self.file
                .write_parts_at(self.cursor, &list)
                .map_err(|e| Error::io("write", &self.path, e))?;
        }
        self.cursor = cut;
        self.buf.drain(..from_buf);
        parts.drain(..whole);
        if split > 0 {
            parts[0] = &parts[0][split..];
        }
        if self.buf.is_empty() && self.buf.capacity() > 2 * WRITE_BUFFER {
            self.buf = Vec::new();
        }
        self.written(n);
        Ok(())
    }

    /// Copies `parts` to the end of the staging buffer (what an append could not write on a
    /// boundary; its source is the caller's, so it cannot wait for the next append).
    pub(super) fn stage(&mut self, parts: &[&[u8]]) {
        for p in parts {
            self.buf.extend_from_slice(p);
        }
    }

    pub(super) fn push(
        &mut self,
        i: u64,
        raw: &[u8],
        codec: Codec,
        uuid: &[u8; 16],
    ) -> Result<Entry> {
        let offset = self.end();
        // The compressed frame is built in `scratch`, taken out of `self` for the call so that
        // the writes below may borrow `self` mutably.
        let mut scratch = std::mem::take(&mut self.scratch);
        let (stored, flags): (&[u8], u8) = match (&mut self.compressor, codec) {
            (Some(c), Codec::Zstd | Codec::ZstdDict) => {
                scratch.clear();
                scratch.reserve(zstd::zstd_safe::compress_bound(raw.len()));
                c.compress_to_buffer(raw, &mut scratch)
                    .map_err(|e| Error::io("zstd compress", &self.path, e))?;
                if scratch.len() < raw.len() {
                    (&scratch, 0)
                } else {
                    (raw, FLAG_STORED_RAW)
                }
            }
            _ => (raw, FLAG_STORED_RAW),
        };
        let crc = record_and_shard_crc(&mut self.crc, &mut self.shift, i, stored, uuid);
        let stored_len = stored.len() as u32;
        let written = if stored.len() >= WRITE_BUFFER {
            // Large record: written straight from the source up to the boundary (after what is
            // staged), only its tail is staged.
            let mut parts = vec![stored];
            self.write_aligned(&mut parts).map(|()| self.stage(&parts))
        } else {
            self.buf.extend_from_slice(stored);
            if self.buf.len() >= WRITE_BUFFER {
                self.flush()
            } else {
                Ok(())
            }
        };
        self.scratch = scratch;
        written?;
        self.records += 1;
        Ok(Entry {
            offset,
            flags,
            stored_len,
            crc,
        })
    }

    /// Writes what is staged up to the last [`WRITE_ALIGN`] boundary it reaches.
    pub(super) fn flush(&mut self) -> Result<()> {
        self.write_aligned(&mut Vec::new())
    }

    /// Writes everything staged: the shard's last data write, which may end anywhere.
    pub(super) fn finish(&mut self) -> Result<()> {
        if !self.buf.is_empty() {
            self.file
                .write_at(self.cursor, &self.buf)
                .map_err(|e| Error::io("write", &self.path, e))?;
            self.cursor += self.buf.len() as u64;
            self.written(self.buf.len());
            self.buf = Vec::new();
        }
        Ok(())
    }
}

impl IndexWriter {
    pub(super) fn finish_page(&mut self, uuid: &[u8; 16]) -> Result<()> {
        let crc = crc32c::crc32c_append(format::page_seed(uuid, self.page_no), &self.page);
        self.page.extend_from_slice(&crc.to_le_bytes());
        self.file
            .write_at(self.pos, &self.page)
            .map_err(|e| Error::io("write", &self.path, e))?;
        self.pos += self.page.len() as u64;
        self.page.clear();
        self.page_no += 1;
        self.in_page = 0;
        Ok(())
    }
}
