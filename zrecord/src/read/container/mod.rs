//! The validated container: what every store and view of one container shares, opened and
//! checked before the first read, with the narrow API the rest of the read path uses.
//!
//! [`Container::open`] reads the manifest, checks the index (length, header, page checksums) and
//! every shard (length, header), loads the `zstd_dict` dictionary, checks that the index entries
//! tile every shard exactly ([`index`]), and builds a raw Dense store's checksum table
//! ([`fixed`]). From then on the read path asks it where a record is ([`Container::locate`]),
//! what the store holds (records, dtype, codec, shapes), how to name a place in an error
//! ([`Container::loc`]), and for the per-store state of the cold-read policy. Its fields are
//! private: nothing else reads the manifest or the index bytes directly.
//!
//! Children: [`opening`] (the files opened and checked), [`options`] ([`OpenOptions`],
//! [`ColdReads`]), [`files`] (manifest, shards, dictionary), [`index`], [`paged`] and [`fixed`].
//! They never import this module.

mod files;
mod fixed;
mod index;
mod maps;
mod opening;
mod options;
mod paged;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};

use crate::dtype::DType;
use crate::error::{Error, Location, Result};
use crate::format::{self, Codec, Entry, FLAG_STORED_RAW, Kind, MANIFEST_FILE, Manifest};
#[cfg(feature = "remote")]
use crate::source::RangeFetch;
use crate::source::{Opener, ReadFile};

use super::hint::{PREFETCH_BYTES, prefetch};
use super::window::Window;
pub(in crate::read) use files::outgrows_memory;
use fixed::Fixed;
pub(in crate::read) use maps::Maps;
use maps::{INLINE_SHARDS, ShardBytes};
pub(in crate::read) use paged::IndexGuard;

pub use crate::format::container_files;
pub use crate::source::{CacheStats, RemoteOptions, RequestStats};
pub use index::{INDEX_MEMORY_BYTES, set_index_memory};
pub use options::{ColdReads, OpenOptions};

/// Where one record's stored bytes lie on disk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordExtent {
    /// The shard file.
    pub path: PathBuf,
    /// Byte offset of the record in that file.
    pub offset: u64,
    /// Stored length in bytes (compressed length for a compressed record).
    pub len: u64,
}

/// An open, validated container.
pub(in crate::read) struct Container {
    path: PathBuf,
    m: Manifest,
    shard_paths: Vec<PathBuf>,
    shards: Vec<Arc<dyn ReadFile>>,
    index: Arc<dyn ReadFile>,
    index_path: PathBuf,
    /// Bytes per index entry.
    entry: usize,
    /// Bytes per record of a Dense store (0 for Ragged).
    stride: u64,
    ddict: Option<zstd::dict::DecoderDictionary<'static>>,
    verify: bool,
    /// The cold-read policy (`read::cold`).
    cold: ColdReads,
    /// The shards hold more than half of the machine's memory: a cold batch of raw records is
    /// read past the page cache under [`ColdReads::Auto`] (`read::cold`).
    outgrows_memory: bool,
    /// CRC32C of the container id, the common prefix of every record's checksum seed.
    uuid_crc: u32,
    /// Record → shard, precomputed from the manifest.
    shard_map: format::ShardMap,
    /// Consecutive gathers under [`ColdReads::Auto`] that found (or, probing only now and then,
    /// took) the batch resident (`read::cold`).
    warm_gathers: AtomicU32,
    /// A raw Dense store's layout and checksum table ([`fixed`]); `None` for other stores.
    fixed: Option<Fixed>,
    /// Whether the shards are memory-mapped ([`OpenOptions::mmap`]); an unmapped store is read
    /// with positional reads only (`read::engine::positional`) and never through [`Maps`].
    mapped: bool,
    /// The client of the object store a remote store is read from (`read::engine::remote`).
    #[cfg(feature = "remote")]
    remote: Option<Arc<dyn RangeFetch>>,
    /// The manifest file's CRC32C (its last four bytes): what a dataset's version lists.
    manifest_crc: u32,
    /// The index pages checked so far, for a container larger than [`index::EAGER_RECORDS`]
    /// (`None`: every page was checked at open).
    pages: Option<index::Pages>,
    /// Whether the index is held in process memory (copied at open, paged, or an unmapped
    /// store's).
    index_in_memory: bool,
    /// The index read by page within the process's bound (a local index not copied at open):
    /// `index` is its region.
    paged: Option<Arc<paged::Paged>>,
    /// The block buffer, once a reader asks for one (`read::window`).
    pub(in crate::read) window: OnceLock<Window>,
    closed: AtomicBool,
}

impl Container {
    /// Opens the container at `path`, which must hold a store of `kind`, and validates it.
    pub(in crate::read) fn open(path: &Path, kind: Kind, opts: &OpenOptions) -> Result<Container> {
        // A URL names a store on object storage: read through its client, never mapped.
        let backend = crate::backend::for_path(path, &opts.vfs, &opts.remote)?;
        let opener: &dyn Opener = &*backend.files;
        let mapped = !backend.remote() && opts.mmap.unwrap_or_else(|| !opener.shared_fs(path));
        let o = opening::open_files(opener, path, kind, mapped)?;
        let m = o.m;
        let pages = o.lazy.then(|| index::Pages::new(m.records));
        Ok(Container {
            path: path.to_path_buf(),
            uuid_crc: format::uuid_crc(&m.uuid),
            shard_map: format::ShardMap::new(m.block_records, m.shard_count()),
            m,
            shard_paths: o.shard_paths,
            shards: o.shards,
            // An unmapped store's index is already a copy in memory.
            index_in_memory: !o.mapped || o.copied || o.paged.is_some(),
            index: o.index,
            paged: o.paged,
            mapped: o.mapped,
            index_path: o.index_path,
            entry: o.entry,
            stride: o.stride,
            ddict: o.ddict,
            verify: opts.verify,
            cold: opts.cold_reads,
            outgrows_memory: o.outgrows_memory,
            warm_gathers: AtomicU32::new(0),
            fixed: o.fixed,
            #[cfg(feature = "remote")]
            remote: backend.fetch,
            manifest_crc: o.manifest_crc,
            pages,
            window: OnceLock::new(),
            closed: AtomicBool::new(false),
        })
    }

    /// Checks the index pages that hold records `idx` (all in range) that no read has checked
    /// yet: what a read must do before it looks at their entries (a paged index reads them in
    /// first). The caller keeps the guard while it reads the entries.
    #[inline]
    pub(in crate::read) fn check_pages(&self, idx: &[u64]) -> Result<IndexGuard<'_>> {
        let guard = IndexGuard::hold(self.paged.as_deref(), idx, self.entry)?;
        if let Some(pages) = self.pages.as_ref().filter(|p| !p.all()) {
            for &i in idx {
                let p = i / format::PAGE_ENTRIES;
                if !pages.has(p) {
                    self.check_page(pages, p)?;
                }
            }
        }
        Ok(guard)
    }

    /// Whether every entry may be read without [`Container::check_pages`]: the index is not
    /// paged and every page of it has been checked.
    #[inline]
    pub(in crate::read) fn index_ready(&self) -> bool {
        self.paged.is_none() && self.pages.as_ref().is_none_or(|p| p.all())
    }

    #[cold]
    fn check_page(&self, pages: &index::Pages, p: u64) -> Result<()> {
        if let Some(paged) = &self.paged {
            paged.read_whole(p)?;
        }
        let fixed = |i: u64| {
            (self.m.codec == Codec::Raw && self.m.kind == Kind::Dense).then(|| {
                let (_, local) = self.shard_map.place(i);
                format::HEADER_LEN as u64 + local * self.stride
            })
        };
        index::check_page(
            &self.m,
            self.index.bytes(),
            &self.index_path,
            p,
            self.stride,
            |i| self.m.shards[self.shard_map.shard_of(i) as usize].len,
            fixed,
        )?;
        pages.mark(p);
        Ok(())
    }

    /// Checks the whole index as an eager open does (every page checksum, and records tiling
    /// every shard exactly): `verify()` starts with it, and keeps the guard while it reads.
    pub(in crate::read) fn check_index(&self) -> Result<IndexGuard<'_>> {
        let guard = IndexGuard::hold_all(self.paged.as_deref())?;
        let Some(pages) = &self.pages else {
            return Ok(guard);
        };
        for p in 0..self.m.records.div_ceil(format::PAGE_ENTRIES) {
            if !pages.has(p) {
                self.check_page(pages, p)?;
            }
        }
        index::validate_entries(
            &self.m,
            self.index.bytes(),
            &self.index_path,
            self.stride,
            &self.shard_paths,
        )?;
        Ok(guard)
    }

    /// The manifest file's CRC32C.
    pub(in crate::read) fn manifest_crc(&self) -> u32 {
        self.manifest_crc
    }

    /// The container directory.
    pub(in crate::read) fn path(&self) -> &Path {
        &self.path
    }

    /// Number of records.
    #[inline]
    pub(in crate::read) fn records(&self) -> u64 {
        self.m.records
    }

    /// Element type.
    pub(in crate::read) fn dtype(&self) -> DType {
        self.m.dtype
    }

    /// The codec the records were written with.
    #[inline]
    pub(in crate::read) fn codec(&self) -> Codec {
        self.m.codec
    }

    /// Shape of one record of a Dense store (empty for Ragged).
    pub(in crate::read) fn item_shape(&self) -> &[u64] {
        &self.m.item_shape
    }

    /// Rank of every record.
    pub(in crate::read) fn ndim(&self) -> u32 {
        self.m.ndim
    }

    /// Bytes per record of a Dense store (0 for Ragged).
    #[inline]
    pub(in crate::read) fn record_bytes(&self) -> u64 {
        self.stride
    }

    /// Number of data shards.
    pub(in crate::read) fn shard_count(&self) -> u32 {
        self.m.shard_count()
    }

    /// The dictionary stored in a `zstd_dict` container.
    pub(in crate::read) fn dictionary(&self) -> Option<&[u8]> {
        (!self.m.dict.is_empty()).then_some(&self.m.dict[..])
    }

    /// The loaded dictionary of a `zstd_dict` container.
    pub(in crate::read) fn decoder_dict(&self) -> Option<&zstd::dict::DecoderDictionary<'static>> {
        self.ddict.as_ref()
    }

    /// Whether reads verify each record's checksum ([`OpenOptions::verify`]).
    #[inline]
    pub(in crate::read) fn verifies(&self) -> bool {
        self.verify
    }

    /// CRC32C of the container id, the common prefix of every record's checksum seed.
    #[inline]
    pub(in crate::read) fn uuid_crc(&self) -> u32 {
        self.uuid_crc
    }

    /// The store's cold-read policy.
    pub(in crate::read) fn cold_reads(&self) -> ColdReads {
        self.cold
    }

    /// Whether the shards hold more than half of the machine's memory.
    pub(in crate::read) fn outgrows_memory(&self) -> bool {
        self.outgrows_memory
    }

    /// The cold-read policy's count of consecutive resident gathers.
    pub(in crate::read) fn warm_gathers(&self) -> &AtomicU32 {
        &self.warm_gathers
    }

    /// Shard `s`'s file path.
    pub(in crate::read) fn shard_path(&self, s: u32) -> &Path {
        &self.shard_paths[s as usize]
    }

    /// Shard `s`'s length in bytes, as the manifest records it (and the open found it).
    pub(in crate::read) fn shard_len(&self, s: u32) -> u64 {
        self.m.shards[s as usize].len
    }

    /// Shard `s`'s whole-file checksum, as the manifest records it.
    pub(in crate::read) fn shard_crc(&self, s: u32) -> u32 {
        self.m.shards[s as usize].crc
    }

    /// Shard `s` opened for reads past the page cache, where the file system has them.
    #[inline]
    pub(in crate::read) fn shard_direct(&self, s: u32) -> Option<&File> {
        self.shards[s as usize].direct()
    }

    /// Whether every shard can be read past the page cache.
    pub(in crate::read) fn all_shards_direct(&self) -> bool {
        self.shards.iter().all(|f| f.direct().is_some())
    }

    /// The object-store client of a store opened from a URL.
    #[cfg(feature = "remote")]
    pub(in crate::read) fn remote(&self) -> Option<&dyn RangeFetch> {
        self.remote.as_deref()
    }

    /// The container's uuid (a remote store's cache key).
    #[cfg(feature = "remote")]
    pub(in crate::read) fn uuid(&self) -> [u8; 16] {
        self.m.uuid
    }

    /// What the node-local cache of a remote store has done in this process; `None` for a store
    /// without one.
    pub(in crate::read) fn cache_stats(&self) -> Option<super::CacheStats> {
        #[cfg(feature = "remote")]
        return self.remote.as_ref()?.cache().map(|c| c.stats());
        #[cfg(not(feature = "remote"))]
        None
    }

    /// The requests and bytes a remote store has fetched in this process; `None` for a local one.
    pub(in crate::read) fn request_stats(&self) -> Option<RequestStats> {
        #[cfg(feature = "remote")]
        return self.remote.as_ref().map(|r| r.request_stats());
        #[cfg(not(feature = "remote"))]
        None
    }

    /// The file name of shard `s` (its object name in a remote store).
    #[cfg(feature = "remote")]
    pub(in crate::read) fn shard_name(&self, s: u32) -> String {
        format::shard_file_name(s)
    }

    /// Whether the shards are memory-mapped. [`Container::maps`] and [`Container::locate`] are
    /// for mapped stores only: an unmapped one is read with [`Container::read_range`].
    #[inline]
    pub(in crate::read) fn mapped(&self) -> bool {
        self.mapped
    }

    /// Reads `buf.len()` stored bytes of shard `s` from byte `start` with a positional read. A
    /// shard that ends first (shortened under the open store) is a [`Error::Corrupt`] naming the
    /// shard, the byte range and the length the manifest gives it; another failure is an
    /// [`Error::Io`] naming the file and the range.
    pub(in crate::read) fn read_range(&self, s: u32, start: u64, buf: &mut [u8]) -> Result<()> {
        let end = start + buf.len() as u64;
        self.shards[s as usize]
            .read_exact_at(buf, start)
            .map_err(|e| self.range_error(s, start, end, e))
    }

    /// The error of a failed read of bytes `start..end` of shard `s`.
    pub(in crate::read) fn range_error(
        &self,
        s: u32,
        start: u64,
        end: u64,
        e: std::io::Error,
    ) -> Error {
        let path = &self.shard_paths[s as usize];
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            return Error::corrupt(
                Location {
                    offset: Some(start),
                    ..files::file_at(path, Some(s))
                },
                format!("shard file length (bytes {start}..{end} read after open: {e})"),
                self.m.shards[s as usize].len,
                "shorter (the file changed under the open store)",
            );
        }
        Error::io(
            "read",
            path,
            std::io::Error::new(e.kind(), format!("bytes {start}..{end}: {e}")),
        )
    }

    /// Fails when a read of the store's mapped files met a file shorter than its map since it was
    /// opened (a shard truncated in place, a file rewritten by another host on a shared file
    /// system): such a map's tail reads zeros, not records, so every read of the store fails from
    /// then on. Every gather and `verify()` ends with this check.
    pub(in crate::read) fn check_faults(&self) -> Result<()> {
        self.check_faults_then(false)
    }

    /// What a read that found a damaged record reports: [`Container::check_faults`], then whether
    /// a shard's file no longer has the length the manifest gives it (truncated or replaced since
    /// the open: a record that straddles a truncated file's new end reads zeros from the end of
    /// its last page without any fault), else `found` itself.
    pub(in crate::read) fn explain(&self, found: Error) -> Error {
        if !found.is_corruption() {
            return found;
        }
        match self.check_faults_then(true) {
            Err(e) => e,
            Ok(()) => found,
        }
    }

    /// [`Container::check_faults`], and with `lengths` each shard file's current length too.
    fn check_faults_then(&self, lengths: bool) -> Result<()> {
        let shrunk = |path: &Path, shard: Option<u32>, want: u64| {
            let now = std::fs::metadata(path)
                .map(|md| format!("{} bytes now", md.len()))
                .unwrap_or_else(|e| format!("unreadable now ({e})"));
            Error::corrupt(
                files::file_at(path, shard),
                "file length (the file shrank under the open store; its map read past the end)",
                want,
                now,
            )
        };
        for (s, f) in (0u32..).zip(&self.shards) {
            if f.faulted() {
                return Err(shrunk(
                    &self.shard_paths[s as usize],
                    Some(s),
                    self.m.shards[s as usize].len,
                ));
            }
        }
        if self.index.faulted() {
            return Err(shrunk(&self.index_path, None, self.m.index_len));
        }
        if lengths {
            for (s, p) in (0u32..).zip(&self.shard_paths) {
                let want = self.m.shards[s as usize].len;
                match std::fs::metadata(p) {
                    Ok(md) if md.len() == want => {}
                    Ok(md) => {
                        return Err(Error::corrupt(
                            files::file_at(p, Some(s)),
                            "shard file length (the file changed under the open store)",
                            want,
                            md.len(),
                        ));
                    }
                    Err(_) => {}
                }
            }
        }
        Ok(())
    }

    /// The mapped index and shard bytes, fetched once for a run of records.
    pub(in crate::read) fn maps(&self) -> Maps<'_> {
        let shards = match self.shards.len() {
            n if n <= INLINE_SHARDS => {
                let mut a: [&[u8]; INLINE_SHARDS] = [&[]; INLINE_SHARDS];
                for (slot, f) in a.iter_mut().zip(&self.shards) {
                    *slot = f.bytes();
                }
                ShardBytes::Inline(a, n)
            }
            _ => ShardBytes::Heap(self.shards.iter().map(|f| f.bytes()).collect()),
        };
        Maps {
            index: self.index.bytes(),
            shards,
        }
    }

    /// The index file's bytes.
    #[inline]
    pub(in crate::read) fn index_bytes(&self) -> &[u8] {
        self.index.bytes()
    }

    /// Whether the index is a copy in process memory (always resident), as every index of up to
    /// [`index::INDEX_IN_MEMORY_BYTES`] is made at open.
    pub(in crate::read) fn index_in_memory(&self) -> bool {
        self.index_in_memory
    }

    /// The bytes of record `i`'s entry in `index` (the index's bytes), shape words included: for
    /// residency probes and read-ahead requests.
    pub(in crate::read) fn entry_bytes<'a>(&self, index: &'a [u8], i: u64) -> &'a [u8] {
        &index[format::entry_offset(i, self.entry)..][..self.entry]
    }

    /// Record `i`'s shard and its entry as the index stores it.
    #[inline]
    pub(in crate::read) fn indexed_entry(&self, index: &[u8], i: u64) -> (u32, Entry) {
        (
            self.shard_map.shard_of(i),
            index::entry_at(index, self.entry, i),
        )
    }

    /// The shard that holds record `i`.
    pub(in crate::read) fn shard_of(&self, i: u64) -> u32 {
        self.shard_map.shard_of(i)
    }

    /// Record `i`'s shard, index entry and stored bytes. A raw Dense store with a checksum table
    /// ([`fixed`]) computes them without reading the index: the open checked that its records
    /// tile every shard in record order, so the computed entry is the stored one.
    #[inline]
    pub(in crate::read) fn locate<'a>(&self, maps: &Maps<'a>, i: u64) -> (u32, Entry, &'a [u8]) {
        if let Some(f) = &self.fixed {
            let (s, local) = self.shard_map.place(i);
            let offset = format::HEADER_LEN as u64 + local * f.stride;
            let e = Entry {
                offset,
                flags: FLAG_STORED_RAW,
                // `Fixed::build` checked that the stride fits.
                stored_len: f.stride as u32,
                crc: f.crc(i),
            };
            let start = offset as usize;
            return (
                s,
                e,
                &maps.shards[s as usize][start..start + f.stride as usize],
            );
        }
        let s = self.shard_map.shard_of(i);
        let e = index::entry_at(maps.index, self.entry, i);
        let shard = maps.shards[s as usize];
        (
            s,
            e,
            &shard[e.offset as usize..e.offset as usize + e.stored_len as usize],
        )
    }

    /// Starts loading the index entry of record `i` into cache (its checksum slot where the store
    /// has a checksum table: `locate` then reads nothing else of the index).
    #[inline]
    pub(in crate::read) fn prefetch_entry(&self, index: &[u8], i: u64) {
        if let Some(f) = &self.fixed {
            prefetch(f.crc_bytes(i));
            return;
        }
        let off = format::entry_offset(i, self.entry);
        if let Some(b) = index.get(off..off + 1) {
            prefetch(b);
        }
    }

    /// Starts loading the first [`PREFETCH_BYTES`] of record `i`'s stored bytes into cache.
    #[inline]
    pub(in crate::read) fn prefetch_record(&self, maps: &Maps<'_>, i: u64) {
        let (_, _, stored) = self.locate(maps, i);
        prefetch(&stored[..stored.len().min(PREFETCH_BYTES)]);
    }

    /// Record `i`'s shape, from the index.
    #[inline]
    pub(in crate::read) fn shape_words(&self, i: u64) -> impl Iterator<Item = u64> + '_ {
        index::shape_at(self.index.bytes(), self.entry, self.m.ndim, i)
    }

    /// Record `i`'s shape from an already fetched index slice.
    #[inline]
    pub(in crate::read) fn shape_words_in<'a>(
        &self,
        index: &'a [u8],
        i: u64,
    ) -> impl Iterator<Item = u64> + 'a {
        index::shape_at(index, self.entry, self.m.ndim, i)
    }

    /// Record `i`'s decoded size in bytes.
    pub(in crate::read) fn raw_len(&self, i: u64) -> u64 {
        match self.m.kind {
            Kind::Dense => self.stride,
            Kind::Ragged => self.shape_words(i).product::<u64>() * self.m.dtype.itemsize() as u64,
        }
    }

    /// Fails with [`Error::Closed`] once the store was closed.
    pub(in crate::read) fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::Closed(format!("store {}", self.path.display())));
        }
        Ok(())
    }

    /// Fails with [`Error::IndexOutOfRange`] for the first index past the last record.
    pub(in crate::read) fn check_indices(&self, idx: &[u64]) -> Result<()> {
        let len = self.m.records;
        if let Some(&bad) = idx.iter().find(|&&i| i >= len) {
            return Err(Error::IndexOutOfRange { index: bad, len });
        }
        Ok(())
    }

    /// Marks the store closed: every later read fails with [`Error::Closed`].
    pub(in crate::read) fn close(&self) {
        self.closed.store(true, Ordering::Release);
    }

    /// Whether [`close`](Self::close) was called.
    pub(in crate::read) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Where record `i` of shard `s`, stored at `offset`, is: for errors.
    pub(in crate::read) fn loc(&self, i: u64, s: u32, offset: u64) -> Location {
        Location {
            path: self.shard_paths[s as usize].clone(),
            shard: Some(s),
            record: Some(i),
            offset: Some(offset),
        }
    }

    /// A record checksum mismatch of record `i` (shard `s`, stored at `off`).
    pub(in crate::read) fn crc_error(
        &self,
        i: u64,
        s: u32,
        off: u64,
        expected: u32,
        found: u32,
    ) -> Error {
        Error::corrupt(
            self.loc(i, s, off),
            "record crc32c",
            format!("{expected:#010x}"),
            format!("{found:#010x}"),
        )
    }

    /// Where records `idx` lie: shard file, offset and stored length of each.
    pub(in crate::read) fn record_extents(&self, idx: &[u64]) -> Result<Vec<RecordExtent>> {
        self.check_indices(idx)?;
        let _index = self.check_pages(idx)?;
        // From the index, which every store (mapped or not) holds whole: for a raw Dense store
        // with a checksum table the open checked that it matches the computed layout.
        let index = self.index_bytes();
        Ok(idx
            .iter()
            .map(|&i| {
                let (s, e) = self.indexed_entry(index, i);
                RecordExtent {
                    path: self.shard_paths[s as usize].clone(),
                    offset: e.offset,
                    len: u64::from(e.stored_len),
                }
            })
            .collect())
    }

    /// Allocated bytes on disk (all files).
    pub(in crate::read) fn disk_bytes(&self) -> u64 {
        let manifest = self.path.join(MANIFEST_FILE);
        files::disk_bytes(
            self.shard_paths
                .iter()
                .chain([&self.index_path, &manifest])
                .map(PathBuf::as_path),
        )
    }
}
