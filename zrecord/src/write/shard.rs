//! Encoding into one data shard ([`ShardState`]: compress or not, checksum, stage and write at
//! the shard's cursor, hint early writeback) and into the index file ([`IndexWriter`]: entries
//! in pages of `PAGE_ENTRIES`, each page checksummed).

use std::path::PathBuf;

use crate::error::{Error, Result};
use crate::format::{self, Codec, Entry, FLAG_STORED_RAW};
use crate::vfs::WriteFile;

/// Per-shard encode buffer flushed to disk when it reaches this size (bounds writer scratch memory
/// to `data_shards * WRITE_BUFFER` plus one compressed record per shard).
pub const WRITE_BUFFER: usize = 4 << 20;
/// A syncing writer asks the OS to start writing a shard back after this many new bytes.
const WRITEBACK_EVERY: u64 = 8 << 20;

/// One data shard being written.
pub(super) struct ShardState {
    pub(super) path: PathBuf,
    pub(super) file: Box<dyn WriteFile>,
    pub(super) cursor: u64,
    pub(super) records: u64,
    pub(super) crc: u32,
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
/// records are simply checksummed twice (hardware CRC32C runs at ~20 GB/s, while a CRC combine
/// costs about a microsecond); large ones are checksummed once and combined.
fn record_and_shard_crc(shard_crc: &mut u32, i: u64, bytes: &[u8], uuid: &[u8; 16]) -> u32 {
    const COMBINE_ABOVE: usize = 64 << 10;
    if bytes.len() < COMBINE_ABOVE {
        *shard_crc = crate::crc::append(*shard_crc, bytes);
        crate::crc::append(format::record_seed(uuid, i), bytes)
    } else {
        let plain = crate::crc::append(0, bytes);
        *shard_crc = crc32c::crc32c_combine(*shard_crc, plain, bytes.len());
        crc32c::crc32c_combine(format::record_seed(uuid, i), plain, bytes.len())
    }
}

impl ShardState {
    fn checksum(&mut self, i: u64, bytes: &[u8], uuid: &[u8; 16]) -> u32 {
        record_and_shard_crc(&mut self.crc, i, bytes, uuid)
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

    /// Writes `parts` back to back at the cursor (one gathered write where the file system can),
    /// bypassing the staging buffer (which must be empty).
    pub(super) fn write_parts_direct(&mut self, parts: &[&[u8]]) -> Result<()> {
        self.flush()?;
        let n: usize = parts.iter().map(|p| p.len()).sum();
        self.file
            .write_parts_at(self.cursor, parts)
            .map_err(|e| Error::io("write", &self.path, e))?;
        self.cursor += n as u64;
        self.written(n);
        Ok(())
    }

    pub(super) fn push(
        &mut self,
        i: u64,
        raw: &[u8],
        codec: Codec,
        uuid: &[u8; 16],
    ) -> Result<Entry> {
        let offset = self.cursor + self.buf.len() as u64;
        let (stored, flags): (&[u8], u8) = match (&mut self.compressor, codec) {
            (Some(c), Codec::Zstd | Codec::ZstdDict) => {
                self.scratch.clear();
                self.scratch
                    .reserve(zstd::zstd_safe::compress_bound(raw.len()));
                c.compress_to_buffer(raw, &mut self.scratch)
                    .map_err(|e| Error::io("zstd compress", &self.path, e))?;
                if self.scratch.len() < raw.len() {
                    (&self.scratch, 0)
                } else {
                    (raw, FLAG_STORED_RAW)
                }
            }
            _ => (raw, FLAG_STORED_RAW),
        };
        let crc = record_and_shard_crc(&mut self.crc, i, stored, uuid);
        let stored_len = stored.len() as u32;
        if self.buf.is_empty() && stored.len() >= WRITE_BUFFER {
            // Large record: write straight from the source, no staging copy.
            self.file
                .write_at(self.cursor, stored)
                .map_err(|e| Error::io("write", &self.path, e))?;
            self.cursor += stored.len() as u64;
            self.written(stored.len());
        } else {
            self.buf.extend_from_slice(stored);
            if self.buf.len() >= WRITE_BUFFER {
                self.flush()?;
            }
        }
        self.records += 1;
        Ok(Entry {
            offset,
            flags,
            stored_len,
            crc,
        })
    }

    pub(super) fn flush(&mut self) -> Result<()> {
        if !self.buf.is_empty() {
            self.file
                .write_at(self.cursor, &self.buf)
                .map_err(|e| Error::io("write", &self.path, e))?;
            self.cursor += self.buf.len() as u64;
            self.written(self.buf.len());
            self.buf.clear();
        }
        if self.buf.capacity() > 2 * WRITE_BUFFER {
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
