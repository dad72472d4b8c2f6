//! The container being written, shared by both writers ([`Core`]): option checks and file
//! creation, the parallel per-shard encode of each append and its index entries, and `close()`'s
//! final index page and manifest before the publish steps ([`crate::publish`]).

use std::path::Path;
use std::sync::Arc;

use rayon::prelude::*;

use crate::threads::in_parallel;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::format::{
    self, Codec, Entry, HEADER_LEN, INDEX_FILE, Kind, MANIFEST_FILE, Manifest, PAGE_ENTRIES,
    ShardDesc,
};
use crate::publish::Staging;
use crate::vfs::{Vfs, WriteFile};

use super::options::WriterOptions;
use super::shard::{IndexWriter, ShardState, WRITE_BUFFER};

/// The shape a writer's records share: the item shape of a Dense store (`ndim` its length), the
/// rank of a Ragged one (`item_shape` empty).
pub(super) struct Shape {
    pub(super) ndim: u32,
    pub(super) item_shape: Vec<u64>,
}

/// Target bytes of a placement block (consecutive records that land in the same shard), for both
/// writers: Dense sizes its blocks by the record size, Ragged by its first append's mean record.
pub(super) const BLOCK_BYTES: u64 = 256 << 10;

/// Shared machinery of both writers.
pub(super) struct Core {
    vfs: Arc<dyn Vfs>,
    /// The temp directory and its lock. Declared before `shards` and `index`, so it is dropped
    /// first: the directory (of an unpublished writer, whose files `Drop` already closed) goes
    /// and the lock is released before any remaining file handle closes.
    stage: Staging,
    uuid: [u8; 16],
    kind: Kind,
    pub(super) codec: Codec,
    pub(super) dtype: DType,
    pub(super) shape: Shape,
    block: u64,
    /// The block is the writer's default, to be sized by the first append (Ragged).
    adapt_block: bool,
    level: i32,
    sync: bool,
    dict: Vec<u8>,
    shards: Vec<ShardState>,
    index: Option<IndexWriter>,
    pub(super) records: u64,
    poisoned: bool,
    /// Where a container created at a URL goes once published locally (feature `remote`).
    #[cfg(feature = "remote")]
    upload: Option<Upload>,
}

/// A container created at a URL: written to a local staging directory, then published to the URL
/// by `close()`. Dropping it removes the staging directory.
#[cfg(feature = "remote")]
struct Upload {
    url: String,
    opts: crate::read::RemoteOptions,
    dir: std::path::PathBuf,
}

#[cfg(feature = "remote")]
impl Drop for Upload {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The local path a container created at `path` is written to, and the upload that follows when
/// `path` is a URL.
#[cfg(feature = "remote")]
fn destination(path: &Path, opts: &WriterOptions) -> Result<(std::path::PathBuf, Option<Upload>)> {
    let Some(url) = crate::vfs::url_of(path) else {
        return Ok((path.to_path_buf(), None));
    };
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let dir = std::env::temp_dir().join(format!("zrecord-upload-{}-{t}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| Error::io("create", &dir, e))?;
    let local = dir.join("container");
    Ok((
        local,
        Some(Upload {
            url: url.to_string(),
            opts: opts.remote.clone(),
            dir,
        }),
    ))
}

#[cfg(not(feature = "remote"))]
fn destination(path: &Path, _: &WriterOptions) -> Result<(std::path::PathBuf, Option<()>)> {
    match crate::vfs::url_of(path) {
        Some(url) => Err(Error::invalid(format!(
            "{url}: this build of zrecord writes local containers only (object storage needs the \
             `remote` feature, which the Python wheel has)"
        ))),
        None => Ok((path.to_path_buf(), None)),
    }
}

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

impl Core {
    /// Checks `opts` and starts the container at `path` (publish steps 1 and 2), with records
    /// of `shape` grouped `block` consecutive records to a shard.
    pub(super) fn create(
        path: &Path,
        kind: Kind,
        dtype: DType,
        shape: Shape,
        block: u64,
        codec: Codec,
        opts: WriterOptions,
    ) -> Result<Core> {
        #[cfg_attr(not(feature = "remote"), allow(unused_variables))]
        let (local, upload) = destination(path, &opts)?;
        let path = local.as_path();
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
        if opts.block_records == Some(0) {
            return Err(Error::invalid("block_records must be at least 1"));
        }
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
        let uuid = new_uuid();
        // Publish steps 1 and 2: lock, then the empty temp directory.
        let stage = Staging::begin(vfs.clone(), path, &name, &uuid, opts.sync)?;
        #[cfg(feature = "mutations")]
        let stage = stage.with_mutation(opts.mutation);
        let tmp_path = stage.tmp_path().to_path_buf();
        let mut core = Core {
            vfs: vfs.clone(),
            stage,
            uuid,
            kind,
            codec,
            dtype,
            shape,
            block: opts.block_records.unwrap_or(block),
            adapt_block: opts.block_records.is_none(),
            level: opts.zstd_level,
            sync: opts.sync,
            dict,
            shards: Vec::new(),
            index: None,
            records: 0,
            poisoned: true,
            #[cfg(feature = "remote")]
            upload,
        };
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
                shift: crate::crc::Shift::default(),
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

    /// Sizes the placement block once, before any record is written (a Ragged writer's first
    /// append); later calls and explicit `block_records` leave it.
    pub(super) fn size_block(&mut self, block: u64) {
        if self.adapt_block && self.records == 0 {
            self.block = block.max(1);
            self.adapt_block = false;
        }
    }

    pub(super) fn check_usable(&self) -> Result<()> {
        if self.stage.published() {
            return Err(Error::Closed(format!(
                "writer for {}",
                self.stage.final_path().display()
            )));
        }
        if self.poisoned {
            return Err(Error::Poisoned(self.stage.final_path().to_path_buf()));
        }
        Ok(())
    }

    /// Encodes and writes `n` records; `record(k)` gives the raw bytes of the k-th new record and
    /// `extra(k)` the Ragged shape words of its index entry.
    pub(super) fn write_records<'a>(
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
        let shards = &mut self.shards;
        // On this process's pool (see `threads`), so an append in a forked child works too.
        let results: Vec<std::result::Result<Vec<Entry>, Error>> = in_parallel(|| {
            shards
                .par_iter_mut()
                .enumerate()
                .map(|(s, shard)| {
                    let mut entries = Vec::new();
                    // Raw blocks of this shard not yet written: each is contiguous in the input
                    // but the next one of the shard is not, so they go out together as one
                    // gathered write per `WRITE_BUFFER` bytes (a 64-record block of WikiText
                    // tokens is ~35 KB: one write each was ~1,200 system calls per 40 MB).
                    let mut pending: Vec<&[u8]> = Vec::new();
                    let mut pending_bytes = 0usize;
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
                            let mut offset = shard.end() + pending_bytes as u64;
                            for r in i..block_end {
                                let raw = record(r - start);
                                entries.push(shard.account(r, raw, offset, &uuid));
                                offset += raw.len() as u64;
                            }
                            let run = span(i - start, block_end - start);
                            pending_bytes += run.len();
                            pending.push(run);
                            if pending_bytes >= WRITE_BUFFER {
                                // Up to the last 2 MiB boundary; the rest waits for the next run.
                                shard.write_aligned(&mut pending)?;
                                pending_bytes = pending.iter().map(|p| p.len()).sum();
                            }
                        } else {
                            for r in i..block_end {
                                let raw = record(r - start);
                                entries.push(shard.push(r, raw, codec, &uuid)?);
                            }
                        }
                        i = block_end;
                    }
                    shard.write_aligned(&mut pending)?;
                    // What did not reach a boundary is copied, as the input is the caller's.
                    shard.stage(&pending);
                    shard.flush()?;
                    Ok(entries)
                })
                .collect()
        });
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
            return Err(Error::Poisoned(self.stage.final_path().to_path_buf()));
        };
        ix.page.extend_from_slice(entry);
        ix.in_page += 1;
        if ix.in_page == PAGE_ENTRIES {
            ix.finish_page(&uuid)?;
        }
        Ok(())
    }

    /// Finishes the index and writes the manifest (the last file of publish step 2), then runs
    /// steps 3 to 5 ([`Staging::publish`]).
    pub(super) fn publish(&mut self) -> Result<()> {
        self.check_usable()?;
        // Any failure from here on leaves the writer poisoned; Drop removes the temp directory.
        self.poisoned = true;
        let uuid = self.uuid;
        let mut ix = self
            .index
            .take()
            .ok_or_else(|| Error::Poisoned(self.stage.final_path().to_path_buf()))?;
        if ix.in_page > 0 {
            ix.finish_page(&uuid)?;
        }
        for s in &mut self.shards {
            s.finish()?;
        }
        let entry = format::entry_size(self.kind, self.shape.ndim);
        let header = format::encode_index_header(&uuid, self.records, entry);
        ix.file
            .write_at(0, &header)
            .map_err(|e| Error::io("write", &ix.path, e))?;
        let manifest = Manifest {
            uuid,
            kind: self.kind,
            codec: self.codec,
            dtype: self.dtype,
            ndim: self.shape.ndim,
            item_shape: self.shape.item_shape.clone(),
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
        let mp = self.stage.tmp_path().join(MANIFEST_FILE);
        let mfile = self
            .vfs
            .create_file(&mp)
            .map_err(|e| Error::io("create", &mp, e))?;
        mfile
            .write_at(0, &manifest.encode())
            .map_err(|e| Error::io("write", &mp, e))?;
        let shards: Vec<(&Path, &dyn WriteFile)> = self
            .shards
            .iter()
            .map(|s| (s.path.as_path(), &*s.file))
            .collect();
        self.stage
            .publish(&shards, (&ix.path, &*ix.file), (&mp, &*mfile))?;
        #[cfg(feature = "remote")]
        if let Some(u) = &self.upload {
            crate::remote::publish_dir(self.stage.final_path(), &u.url, &u.opts)?;
        }
        self.poisoned = false;
        Ok(())
    }

    /// Where the container is published.
    pub(super) fn final_path(&self) -> &Path {
        self.stage.final_path()
    }
}

impl Drop for Core {
    fn drop(&mut self) {
        if !self.stage.published() {
            // Nothing is published: close every file; dropping `stage` then removes the temp
            // directory and releases the lock.
            self.shards.clear();
            self.index = None;
        }
    }
}
