//! Writers: append records, then publish one immutable container atomically.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rayon::prelude::*;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::format::{
    self, Codec, Entry, FLAG_STORED_RAW, HEADER_LEN, INDEX_FILE, Kind, MANIFEST_FILE,
    MAX_RECORD_BYTES, Manifest, PAGE_ENTRIES, ShardDesc,
};
use crate::vfs::{LockGuard, StdFs, Vfs, WriteFile};

/// Default number of data shards.
pub const DEFAULT_DATA_SHARDS: u32 = 4;
/// Default zstd level.
pub const DEFAULT_ZSTD_LEVEL: i32 = 3;
/// Per-shard encode buffer flushed to disk when it reaches this size (bounds writer scratch memory
/// to `data_shards * WRITE_BUFFER` plus one compressed record per shard).
pub const WRITE_BUFFER: usize = 4 << 20;
/// A syncing writer asks the OS to start writing a shard back after this many new bytes.
const WRITEBACK_EVERY: u64 = 8 << 20;
/// Target bytes per block of consecutive Dense records that land in the same shard.
const DENSE_BLOCK_BYTES: u64 = 256 << 10;
/// Records per block for Ragged stores.
const RAGGED_BLOCK_RECORDS: u64 = 64;

/// Options shared by both writers.
#[derive(Clone)]
pub struct WriterOptions {
    /// Number of data shard files, `1..=255` (default 4). Shards are encoded and written in parallel.
    pub data_shards: u32,
    /// Dictionary for `Codec::ZstdDict` (required there, refused otherwise).
    pub dict: Option<Vec<u8>>,
    /// zstd level for the zstd codecs (default 3).
    pub zstd_level: i32,
    /// fsync every file and directory on `close()` (default `true`). `false` still publishes
    /// atomically (readers and crashed processes never see a partial container) but the container
    /// may be lost or incomplete after a power failure; benchmarks use it to exclude stable-media
    /// sync from write timing, as the published methodology does.
    pub sync: bool,
    /// File system used for every operation (default: the real one).
    pub vfs: Arc<dyn Vfs>,
    /// Test-only protocol mutations for the crash-simulation suite.
    #[cfg(feature = "mutations")]
    pub mutation: Option<crate::Mutation>,
}

impl Default for WriterOptions {
    fn default() -> Self {
        WriterOptions {
            data_shards: DEFAULT_DATA_SHARDS,
            dict: None,
            zstd_level: DEFAULT_ZSTD_LEVEL,
            sync: true,
            vfs: Arc::new(StdFs),
            #[cfg(feature = "mutations")]
            mutation: None,
        }
    }
}

impl fmt::Debug for WriterOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WriterOptions")
            .field("data_shards", &self.data_shards)
            .field("dict_bytes", &self.dict.as_ref().map(Vec::len))
            .field("zstd_level", &self.zstd_level)
            .finish()
    }
}

struct ShardState {
    path: PathBuf,
    file: Box<dyn WriteFile>,
    cursor: u64,
    records: u64,
    crc: u32,
    compressor: Option<zstd::bulk::Compressor<'static>>,
    buf: Vec<u8>,
    scratch: Vec<u8>,
    /// Start writeback every [`WRITEBACK_EVERY`] bytes (only when the writer syncs on close).
    early_writeback: bool,
    /// Bytes written since writeback was last started.
    unkicked: u64,
}

struct IndexWriter {
    path: PathBuf,
    file: Box<dyn WriteFile>,
    page: Vec<u8>,
    page_no: u64,
    in_page: u64,
    pos: u64,
}

/// Shared machinery of both writers.
struct Core {
    vfs: Arc<dyn Vfs>,
    final_path: PathBuf,
    tmp_path: PathBuf,
    lock_path: PathBuf,
    lock: Option<Box<dyn LockGuard>>,
    created_dirs: Vec<PathBuf>,
    uuid: [u8; 16],
    kind: Kind,
    codec: Codec,
    dtype: DType,
    ndim: u32,
    item_shape: Vec<u64>,
    block: u64,
    level: i32,
    sync: bool,
    dict: Vec<u8>,
    shards: Vec<ShardState>,
    index: Option<IndexWriter>,
    records: u64,
    poisoned: bool,
    done: bool,
    #[cfg(feature = "mutations")]
    mutation: Option<crate::Mutation>,
}

/// Suffix of the private directory a writer fills before publishing.
pub(crate) const TMP_MARKER: &str = ".zr-tmp-";

fn new_uuid() -> [u8; 16] {
    let mut id = [0u8; 16];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        use std::io::Read;
        if f.read_exact(&mut id).is_ok() {
            return id;
        }
    }
    use std::hash::{BuildHasher, Hasher};
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    for (k, chunk) in id.chunks_mut(8).enumerate() {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(t);
        h.write_u32(std::process::id());
        h.write_usize(k);
        chunk.copy_from_slice(&h.finish().to_le_bytes());
    }
    id
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

impl Core {
    #[allow(clippy::too_many_arguments)]
    fn create(
        path: &Path,
        kind: Kind,
        dtype: DType,
        ndim: u32,
        item_shape: Vec<u64>,
        block: u64,
        codec: Codec,
        opts: WriterOptions,
    ) -> Result<Core> {
        if opts.data_shards == 0 || opts.data_shards > 255 {
            return Err(Error::invalid(format!(
                "data_shards must be in 1..=255, got {}",
                opts.data_shards
            )));
        }
        let dict = match (codec, opts.dict) {
            (Codec::ZstdDict, Some(d)) if !d.is_empty() => d,
            (Codec::ZstdDict, _) => {
                return Err(Error::invalid(
                    "codec zstd_dict needs a non-empty dictionary (dict_bytes); train one with train_dict",
                ));
            }
            (_, Some(d)) if !d.is_empty() => {
                return Err(Error::invalid(format!(
                    "a dictionary was given but codec is {}; use zstd_dict",
                    codec.name()
                )));
            }
            _ => Vec::new(),
        };
        if !(-7..=22).contains(&opts.zstd_level) {
            return Err(Error::invalid(format!(
                "zstd level must be in -7..=22, got {}",
                opts.zstd_level
            )));
        }
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| {
                Error::invalid(format!(
                    "destination {} has no usable file name",
                    path.display()
                ))
            })?
            .to_string();
        let vfs = opts.vfs;
        if vfs.exists(path).map_err(|e| Error::io("stat", path, e))? {
            return Err(Error::AlreadyExists(path.to_path_buf()));
        }
        let parent = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let created_dirs = vfs
            .create_dir_all(&parent)
            .map_err(|e| Error::io("create directory", &parent, e))?;
        // Clean temp directories that dead writers left behind (they hold no lock any more).
        let _ = gc_with(&*vfs, &parent);
        let uuid = new_uuid();
        let tmp_name = format!(".{name}{TMP_MARKER}{}", hex(&uuid));
        let tmp_path = parent.join(&tmp_name);
        let lock_path = parent.join(format!("{tmp_name}.lock"));
        let lock = vfs
            .try_lock(&lock_path)
            .map_err(|e| Error::io("lock", &lock_path, e))?
            .ok_or_else(|| {
                Error::invalid(format!(
                    "{} is locked by another writer",
                    lock_path.display()
                ))
            })?;
        let mut core = Core {
            vfs: vfs.clone(),
            final_path: path.to_path_buf(),
            tmp_path: tmp_path.clone(),
            lock_path,
            lock: Some(lock),
            created_dirs,
            uuid,
            kind,
            codec,
            dtype,
            ndim,
            item_shape,
            block,
            level: opts.zstd_level,
            sync: opts.sync,
            dict,
            shards: Vec::new(),
            index: None,
            records: 0,
            poisoned: true,
            done: false,
            #[cfg(feature = "mutations")]
            mutation: opts.mutation,
        };
        vfs.create_dir(&tmp_path)
            .map_err(|e| Error::io("create directory", &tmp_path, e))?;
        let nshards = opts.data_shards;
        for s in 0..nshards {
            let p = tmp_path.join(format::shard_file_name(s));
            let file = vfs
                .create_file(&p)
                .map_err(|e| Error::io("create", &p, e))?;
            let header = format::encode_shard_header(&uuid, s, nshards);
            file.write_at(0, &header)
                .map_err(|e| Error::io("write", &p, e))?;
            let compressor = match codec {
                Codec::Raw => None,
                Codec::Zstd => Some(
                    zstd::bulk::Compressor::new(core.level)
                        .map_err(|e| Error::io("zstd init", &p, e))?,
                ),
                Codec::ZstdDict => Some(
                    zstd::bulk::Compressor::with_dictionary(core.level, &core.dict)
                        .map_err(|e| Error::invalid(format!("dictionary rejected by zstd: {e}")))?,
                ),
            };
            core.shards.push(ShardState {
                path: p,
                file,
                cursor: HEADER_LEN as u64,
                records: 0,
                crc: crc32c::crc32c(&header),
                compressor,
                buf: Vec::new(),
                scratch: Vec::new(),
                early_writeback: core.sync,
                unkicked: 0,
            });
        }
        let ip = tmp_path.join(INDEX_FILE);
        let file = vfs
            .create_file(&ip)
            .map_err(|e| Error::io("create", &ip, e))?;
        core.index = Some(IndexWriter {
            path: ip,
            file,
            page: Vec::new(),
            page_no: 0,
            in_page: 0,
            pos: HEADER_LEN as u64,
        });
        core.poisoned = false;
        Ok(core)
    }

    fn check_usable(&self) -> Result<()> {
        if self.done {
            return Err(Error::Closed(format!(
                "writer for {}",
                self.final_path.display()
            )));
        }
        if self.poisoned {
            return Err(Error::Poisoned(self.final_path.clone()));
        }
        Ok(())
    }

    /// Encodes and writes `n` records; `record(k)` gives the raw bytes of the k-th new record and
    /// `extra(k)` the Ragged shape words of its index entry.
    fn write_records<'a>(
        &mut self,
        n: u64,
        record: &(dyn Fn(u64) -> &'a [u8] + Sync),
        span: &(dyn Fn(u64, u64) -> &'a [u8] + Sync),
        extra: &(dyn Fn(u64, &mut Vec<u8>) + Sync),
    ) -> Result<()> {
        let start = self.records;
        let block = self.block;
        let nshards = self.shards.len() as u32;
        let uuid = self.uuid;
        let codec = self.codec;
        let results: Vec<std::result::Result<Vec<Entry>, Error>> = self
            .shards
            .par_iter_mut()
            .enumerate()
            .map(|(s, shard)| {
                let mut entries = Vec::new();
                // First record of this append that lands in shard s, then walk blocks.
                let mut i = start;
                let end = start + n;
                while i < end {
                    let b = i / block;
                    let block_end = ((b + 1) * block).min(end);
                    if (b % nshards as u64) as u32 != s as u32 {
                        // Skip to the next block owned by this shard.
                        let ahead =
                            (s as u64 + nshards as u64 - b % nshards as u64) % nshards as u64;
                        i = (b + ahead.max(1)) * block;
                        continue;
                    }
                    if codec == Codec::Raw {
                        // The records of one block are adjacent in the input and in the shard:
                        // checksum each, then write the whole run at once, without staging.
                        let mut offset = shard.cursor;
                        for r in i..block_end {
                            let raw = record(r - start);
                            entries.push(shard.account(r, raw, offset, &uuid));
                            offset += raw.len() as u64;
                        }
                        shard.write_direct(span(i - start, block_end - start))?;
                    } else {
                        for r in i..block_end {
                            let raw = record(r - start);
                            entries.push(shard.push(r, raw, codec, &uuid)?);
                        }
                    }
                    i = block_end;
                }
                shard.flush()?;
                Ok(entries)
            })
            .collect();
        let mut per_shard = Vec::with_capacity(results.len());
        for r in results {
            match r {
                Ok(e) => per_shard.push(e.into_iter()),
                Err(e) => {
                    self.poisoned = true;
                    return Err(e);
                }
            }
        }
        let mut scratch = Vec::new();
        for k in 0..n {
            let i = start + k;
            let s = format::shard_of(i, block, nshards) as usize;
            let Some(e) = per_shard[s].next() else {
                self.poisoned = true;
                return Err(Error::invalid("internal: shard entry count mismatch"));
            };
            scratch.clear();
            format::encode_entry(&e, &mut scratch);
            extra(k, &mut scratch);
            if let Err(e) = self.push_index(&scratch) {
                self.poisoned = true;
                return Err(e);
            }
        }
        self.records += n;
        Ok(())
    }

    fn push_index(&mut self, entry: &[u8]) -> Result<()> {
        let uuid = self.uuid;
        let Some(ix) = self.index.as_mut() else {
            return Err(Error::Poisoned(self.final_path.clone()));
        };
        ix.page.extend_from_slice(entry);
        ix.in_page += 1;
        if ix.in_page == PAGE_ENTRIES {
            ix.finish_page(&uuid)?;
        }
        Ok(())
    }

    fn publish(&mut self) -> Result<()> {
        self.check_usable()?;
        // Any failure from here on leaves the writer poisoned; Drop removes the temp directory.
        self.poisoned = true;
        let uuid = self.uuid;
        let mut ix = self
            .index
            .take()
            .ok_or_else(|| Error::Poisoned(self.final_path.clone()))?;
        if ix.in_page > 0 {
            ix.finish_page(&uuid)?;
        }
        let entry = format::entry_size(self.kind, self.ndim);
        let header = format::encode_index_header(&uuid, self.records, entry);
        ix.file
            .write_at(0, &header)
            .map_err(|e| Error::io("write", &ix.path, e))?;
        let manifest = Manifest {
            uuid,
            kind: self.kind,
            codec: self.codec,
            dtype: self.dtype,
            ndim: self.ndim,
            item_shape: self.item_shape.clone(),
            records: self.records,
            block_records: self.block,
            zstd_level: self.level,
            dict: self.dict.clone(),
            dict_id: format::zstd_dict_id(&self.dict),
            index_len: ix.pos,
            shards: self
                .shards
                .iter()
                .map(|s| ShardDesc {
                    len: s.cursor,
                    records: s.records,
                    crc: s.crc,
                })
                .collect(),
        };
        debug_assert_eq!(Some(ix.pos), format::index_file_len(self.records, entry));
        let mp = self.tmp_path.join(MANIFEST_FILE);
        let mfile = self
            .vfs
            .create_file(&mp)
            .map_err(|e| Error::io("create", &mp, e))?;
        mfile
            .write_at(0, &manifest.encode())
            .map_err(|e| Error::io("write", &mp, e))?;

        #[cfg(feature = "mutations")]
        let mutation = self.mutation;
        #[cfg(not(feature = "mutations"))]
        let mutation: Option<crate::Mutation> = None;
        let sync = self.sync;
        let skip = |step: usize| {
            !sync || matches!(mutation, Some(crate::Mutation::SkipSync(k)) if k == step)
        };
        let rename_first = matches!(mutation, Some(crate::Mutation::RenameBeforeSync));
        if rename_first {
            self.rename()?;
        }
        // Step numbering for mutations: 0..S = shards, S = index, S+1 = manifest, S+2 = temp dir,
        // S+3 = parent directory.
        let ns = self.shards.len();
        if sync {
            // Start every file's writeback first so the fsyncs below wait for overlapping I/O
            // rather than one file after another. A hint: errors surface at the fsyncs.
            for s in &self.shards {
                let _ = s.file.start_writeback();
            }
            let _ = ix.file.start_writeback();
            let _ = mfile.start_writeback();
        }
        for (k, s) in self.shards.iter().enumerate() {
            if !skip(k) {
                s.file.sync().map_err(|e| Error::io("fsync", &s.path, e))?;
            }
        }
        if !skip(ns) {
            ix.file
                .sync()
                .map_err(|e| Error::io("fsync", &ix.path, e))?;
        }
        if !skip(ns + 1) {
            mfile.sync().map_err(|e| Error::io("fsync", &mp, e))?;
        }
        let dir = if rename_first {
            self.final_path.clone()
        } else {
            self.tmp_path.clone()
        };
        if !skip(ns + 2) {
            self.vfs
                .sync_dir(&dir)
                .map_err(|e| Error::io("fsync", &dir, e))?;
        }
        if !rename_first {
            self.rename()?;
        }
        let parent = match self.final_path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        // The container now exists under its final name.
        self.done = true;
        let mut durable = Ok(());
        if !skip(ns + 3) {
            durable = self
                .vfs
                .sync_dir(&parent)
                .map_err(|e| Error::io("fsync", &parent, e));
        }
        for d in self.created_dirs.iter().rev() {
            if durable.is_err() || !sync {
                break;
            }
            if let Some(p) = d.parent().filter(|p| !p.as_os_str().is_empty()) {
                durable = self.vfs.sync_dir(p).map_err(|e| Error::io("fsync", p, e));
            }
        }
        if let Err(e) = durable {
            // The rename is not durable and close() fails: take the container back out of sight
            // (atomically, under its temp name) so a failed close never leaves it published; Drop
            // then removes it. If even that is refused, it stays (complete) under its final name.
            if !rename_first
                && self
                    .vfs
                    .rename_noreplace(&self.final_path, &self.tmp_path)
                    .is_ok()
            {
                self.done = false;
            }
            return Err(e);
        }
        self.poisoned = false;
        self.release_lock();
        Ok(())
    }

    fn rename(&mut self) -> Result<()> {
        self.vfs
            .rename_noreplace(&self.tmp_path, &self.final_path)
            .map_err(|e| {
                if e.kind() == std::io::ErrorKind::AlreadyExists
                    || e.raw_os_error() == Some(libc::ENOTEMPTY)
                {
                    Error::AlreadyExists(self.final_path.clone())
                } else {
                    Error::io("rename", &self.tmp_path, e)
                }
            })
    }

    fn release_lock(&mut self) {
        if self.lock.take().is_some() {
            let _ = self.vfs.remove_file(&self.lock_path);
        }
    }
}

impl Drop for Core {
    fn drop(&mut self) {
        if !self.done {
            // Nothing is published: remove every trace of this writer.
            self.shards.clear();
            self.index = None;
            let _ = self.vfs.remove_dir_all(&self.tmp_path);
        }
        self.release_lock();
    }
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

    /// Checksums an uncompressed record that will be written at `offset` by `write_direct`.
    fn account(&mut self, i: u64, raw: &[u8], offset: u64, uuid: &[u8; 16]) -> Entry {
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

    /// Writes bytes at the cursor, bypassing the staging buffer (which must be empty).
    fn write_direct(&mut self, bytes: &[u8]) -> Result<()> {
        self.flush()?;
        self.file
            .write_at(self.cursor, bytes)
            .map_err(|e| Error::io("write", &self.path, e))?;
        self.cursor += bytes.len() as u64;
        self.written(bytes.len());
        Ok(())
    }

    fn push(&mut self, i: u64, raw: &[u8], codec: Codec, uuid: &[u8; 16]) -> Result<Entry> {
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

    fn flush(&mut self) -> Result<()> {
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
    fn finish_page(&mut self, uuid: &[u8; 16]) -> Result<()> {
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

/// Writes a new Dense container: one fixed-shape array per record.
pub struct DenseWriter {
    core: Core,
    stride: usize,
}

impl fmt::Debug for DenseWriter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DenseWriter")
            .field("path", &self.core.final_path)
            .field("dtype", &self.core.dtype)
            .field("item_shape", &self.core.item_shape)
            .field("codec", &self.core.codec)
            .field("records", &self.core.records)
            .finish()
    }
}

impl DenseWriter {
    /// Starts a new container at `path` (which must not exist). Nothing is visible at `path` until
    /// [`close`](Self::close) returns.
    pub fn create(
        path: impl AsRef<Path>,
        dtype: DType,
        item_shape: &[u64],
        codec: Codec,
        opts: WriterOptions,
    ) -> Result<Self> {
        if item_shape.len() > 32 {
            return Err(Error::invalid(format!(
                "item rank {} exceeds 32",
                item_shape.len()
            )));
        }
        if item_shape.contains(&0) {
            return Err(Error::invalid(format!(
                "item shape {item_shape:?} has a zero dimension (records must be non-empty)"
            )));
        }
        let stride = format::dense_stride(dtype, item_shape).ok_or_else(|| {
            Error::LimitExceeded(format!(
                "a record of shape {item_shape:?} {dtype} exceeds 2 GiB"
            ))
        })?;
        let block = (DENSE_BLOCK_BYTES / stride).max(1);
        let core = Core::create(
            path.as_ref(),
            Kind::Dense,
            dtype,
            item_shape.len() as u32,
            item_shape.to_vec(),
            block,
            codec,
            opts,
        )?;
        Ok(DenseWriter {
            core,
            stride: stride as usize,
        })
    }

    /// Appends `data.len() / stride` records laid out back to back (C order, native endian). When
    /// this returns, every record is encoded and written; `data` may be reused.
    pub fn append(&mut self, data: &[u8]) -> Result<()> {
        self.core.check_usable()?;
        if !data.len().is_multiple_of(self.stride) {
            return Err(Error::invalid(format!(
                "input of {} bytes is not a whole number of {}-byte records (dtype {}, item shape {:?})",
                data.len(),
                self.stride,
                self.core.dtype,
                self.core.item_shape
            )));
        }
        let n = (data.len() / self.stride) as u64;
        let stride = self.stride;
        self.core.write_records(
            n,
            &|k| &data[k as usize * stride..(k as usize + 1) * stride],
            &|a, b| &data[a as usize * stride..b as usize * stride],
            &|_, _| {},
        )
    }

    /// Records appended so far.
    pub fn len(&self) -> u64 {
        self.core.records
    }

    /// True before the first record.
    pub fn is_empty(&self) -> bool {
        self.core.records == 0
    }

    /// Publishes the container: fsync every file and the temp directory, rename it into place
    /// without replacing anything, fsync the parent. On error nothing is published.
    pub fn close(mut self) -> Result<()> {
        self.core.publish()
    }
}

/// Writes a new Ragged container: variable-shape arrays of one dtype and rank.
pub struct RaggedWriter {
    core: Core,
}

impl fmt::Debug for RaggedWriter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RaggedWriter")
            .field("path", &self.core.final_path)
            .field("dtype", &self.core.dtype)
            .field("ndim", &self.core.ndim)
            .field("codec", &self.core.codec)
            .field("records", &self.core.records)
            .finish()
    }
}

impl RaggedWriter {
    /// Starts a new Ragged container with records of rank `ndim >= 1`.
    pub fn create(
        path: impl AsRef<Path>,
        dtype: DType,
        ndim: u32,
        codec: Codec,
        opts: WriterOptions,
    ) -> Result<Self> {
        if ndim == 0 || ndim > 32 {
            return Err(Error::invalid(format!(
                "ragged records need 1 <= ndim <= 32, got {ndim} (0-D records belong in a Dense store with item_shape ())"
            )));
        }
        let core = Core::create(
            path.as_ref(),
            Kind::Ragged,
            dtype,
            ndim,
            Vec::new(),
            RAGGED_BLOCK_RECORDS,
            codec,
            opts,
        )?;
        Ok(RaggedWriter { core })
    }

    /// Appends one packed batch: `values` (all records' elements back to back, store dtype),
    /// `cu_seqlens` (`n + 1` element offsets starting at 0, strictly increasing, ending at the
    /// number of values) and `shapes` (`n * ndim` dimensions; each record's element count must
    /// equal its offset span). Bad input changes nothing.
    pub fn append(&mut self, values: &[u8], cu_seqlens: &[i32], shapes: &[u64]) -> Result<()> {
        self.core.check_usable()?;
        let isz = self.core.dtype.itemsize();
        let ndim = self.core.ndim as usize;
        if !values.len().is_multiple_of(isz) {
            return Err(Error::invalid(format!(
                "values hold {} bytes, not a multiple of itemsize {isz}",
                values.len()
            )));
        }
        let nvalues = values.len() / isz;
        let Some((&first, _)) = cu_seqlens.split_first() else {
            return Err(Error::invalid("cu_seqlens must have n + 1 >= 1 entries"));
        };
        if first != 0 {
            return Err(Error::invalid(format!(
                "cu_seqlens[0] must be 0, found {first}"
            )));
        }
        let n = cu_seqlens.len() - 1;
        if shapes.len() != n * ndim {
            return Err(Error::invalid(format!(
                "shapes hold {} values, expected {n} records x ndim {ndim} = {}",
                shapes.len(),
                n * ndim
            )));
        }
        for k in 0..n {
            let (a, b) = (cu_seqlens[k], cu_seqlens[k + 1]);
            if b <= a {
                return Err(Error::invalid(format!(
                    "cu_seqlens must strictly increase (records are non-empty): cu_seqlens[{k}] = {a}, cu_seqlens[{}] = {b}",
                    k + 1
                )));
            }
            let shape = &shapes[k * ndim..(k + 1) * ndim];
            let mut count: u64 = 1;
            for &d in shape {
                count = count.checked_mul(d).ok_or_else(|| {
                    Error::invalid(format!("record {k}: shape {shape:?} overflows"))
                })?;
            }
            if count != (b - a) as u64 {
                return Err(Error::invalid(format!(
                    "record {k}: shape {shape:?} has {count} elements but cu_seqlens span {}",
                    b - a
                )));
            }
            if count * isz as u64 > MAX_RECORD_BYTES {
                return Err(Error::LimitExceeded(format!(
                    "record {k} holds {} bytes; the limit is 2 GiB",
                    count * isz as u64
                )));
            }
        }
        let last = cu_seqlens[n];
        if last as usize != nvalues {
            return Err(Error::invalid(format!(
                "cu_seqlens ends at {last} but values hold {nvalues} elements"
            )));
        }
        self.core.write_records(
            n as u64,
            &|k| {
                &values[cu_seqlens[k as usize] as usize * isz
                    ..cu_seqlens[k as usize + 1] as usize * isz]
            },
            &|a, b| {
                &values
                    [cu_seqlens[a as usize] as usize * isz..cu_seqlens[b as usize] as usize * isz]
            },
            &|k, out| {
                for &d in &shapes[k as usize * ndim..(k as usize + 1) * ndim] {
                    out.extend_from_slice(&d.to_le_bytes());
                }
            },
        )
    }

    /// Records appended so far.
    pub fn len(&self) -> u64 {
        self.core.records
    }

    /// True before the first record.
    pub fn is_empty(&self) -> bool {
        self.core.records == 0
    }

    /// Publishes the container (see [`DenseWriter::close`]).
    pub fn close(mut self) -> Result<()> {
        self.core.publish()
    }
}

/// Removes temp directories under `parent` left by writers that died before publishing (a live
/// writer holds a lock on its temp directory's lock file, so it is never touched). Returns the
/// number of directories removed.
pub fn gc(parent: impl AsRef<Path>) -> Result<usize> {
    gc_with(&StdFs, parent.as_ref())
}

pub(crate) fn gc_with(vfs: &dyn Vfs, parent: &Path) -> Result<usize> {
    let names = vfs
        .list_dir(parent)
        .map_err(|e| Error::io("list", parent, e))?;
    let mut removed = 0;
    for name in names {
        let Some(s) = name.to_str() else { continue };
        if !s.starts_with('.') || !s.contains(TMP_MARKER) {
            continue;
        }
        if let Some(dir_name) = s.strip_suffix(".lock") {
            // A lock file whose writer died before creating (or after removing) its temp
            // directory: remove it once nobody holds it.
            let dir = parent.join(dir_name);
            if !vfs.exists(&dir).unwrap_or(true) {
                let lock_path = parent.join(s);
                if let Ok(Some(guard)) = vfs.try_lock(&lock_path) {
                    if !vfs.exists(&dir).unwrap_or(true) {
                        let _ = vfs.remove_file(&lock_path);
                    }
                    drop(guard);
                }
            }
            continue;
        }
        let dir = parent.join(s);
        let lock_path = parent.join(format!("{s}.lock"));
        if let Ok(Some(guard)) = vfs.try_lock(&lock_path) {
            if vfs.remove_dir_all(&dir).is_ok() {
                removed += 1;
            }
            let _ = vfs.remove_file(&lock_path);
            drop(guard);
        }
    }
    Ok(removed)
}
