//! The public store types: [`DenseStore`] and [`RaggedStore`], an open container. A store is not
//! indexable: bind it to an allocator to get a view ([`super::view`]).

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use crate::alloc::Allocator;
use crate::dtype::DType;
use crate::error::Result;
use crate::format::{Codec, Kind};

use super::container::{Container, OpenOptions, RecordExtent};
use super::verify::verify_all;
use super::view::{DenseView, RaggedView};

/// An opened Dense container. Bind it to an allocator to read.
#[derive(Clone)]
pub struct DenseStore {
    c: Arc<Container>,
}

/// An opened Ragged container. Bind it to an allocator to read.
#[derive(Clone)]
pub struct RaggedStore {
    c: Arc<Container>,
}

impl DenseStore {
    /// Opens and validates a published container (structure, manifest, index and header
    /// checksums). Record payloads are verified when read.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(path, OpenOptions::default())
    }

    /// Opens with explicit options.
    pub fn open_with(path: impl AsRef<Path>, opts: OpenOptions) -> Result<Self> {
        let c = Container::open(path.as_ref(), Kind::Dense, &opts)?;
        Ok(DenseStore { c: Arc::new(c) })
    }

    /// Number of records.
    pub fn len(&self) -> u64 {
        self.c.records()
    }

    /// Whether the store's files are memory-mapped ([`OpenOptions::mmap`]; `false`: read with
    /// positional reads).
    pub fn is_mapped(&self) -> bool {
        self.c.mapped()
    }

    /// What the node-local cache (`RemoteOptions::cache_dir`) has done for this store's opening
    /// in this process: blocks hit, missed, filled, found damaged and evicted; `None` without a
    /// cache.
    pub fn cache_stats(&self) -> Option<crate::CacheStats> {
        self.c.cache_stats()
    }

    /// The object names and byte ranges a gather of `idx` requests from this remote store
    /// without a cache (the benchmarks' GET limit fetches exactly these); empty for a local one.
    #[cfg(all(feature = "remote", feature = "internals"))]
    #[doc(hidden)]
    pub fn remote_requests(&self, idx: &[u64]) -> Result<Vec<(String, std::ops::Range<u64>)>> {
        super::engine::remote_requests(&self.c, idx)
    }

    /// True when the store holds no records.
    pub fn is_empty(&self) -> bool {
        self.c.records() == 0
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.c.dtype()
    }

    /// Codec the records were written with.
    pub fn codec(&self) -> Codec {
        self.c.codec()
    }

    /// Number of data shards.
    pub fn data_shards(&self) -> u32 {
        self.c.shard_count()
    }

    /// Container directory.
    pub fn path(&self) -> &Path {
        self.c.path()
    }

    /// The dictionary stored in a `zstd_dict` container.
    pub fn dictionary(&self) -> Option<&[u8]> {
        self.c.dictionary()
    }

    /// Shape of one record.
    pub fn item_shape(&self) -> &[u64] {
        self.c.item_shape()
    }

    /// Bytes per record.
    pub fn record_bytes(&self) -> u64 {
        self.c.record_bytes()
    }

    /// Where records `idx` are stored (shard file, offset, stored length): for tools that read
    /// the same extents past zrecord, e.g. a device-limit measurement.
    pub fn record_extents(&self, idx: &[u64]) -> Result<Vec<RecordExtent>> {
        self.c.record_extents(idx)
    }

    /// Allocated bytes on disk (all files).
    pub fn disk_bytes(&self) -> u64 {
        self.c.disk_bytes()
    }

    /// Reads and checks every byte: whole-shard checksums, every record's checksum, every
    /// compressed record's decoded size.
    pub fn verify(&self) -> Result<()> {
        self.c.check_open()?;
        verify_all(&self.c)
    }

    /// Binds the store to a placement. The view gathers into memory from `allocator`.
    pub fn bind(&self, allocator: Arc<dyn Allocator>) -> DenseView {
        DenseView::new(self.c.clone(), allocator)
    }

    /// Releases the store: every view bound to it fails with [`crate::Error::Closed`]
    /// afterwards. Batches already gathered stay valid (they own their memory).
    pub fn close(&self) {
        self.c.close();
    }

    /// Whether [`close`](Self::close) was called.
    pub fn is_closed(&self) -> bool {
        self.c.is_closed()
    }
}

impl RaggedStore {
    /// Opens and validates a published container (structure, manifest, index and header
    /// checksums). Record payloads are verified when read.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(path, OpenOptions::default())
    }

    /// Opens with explicit options.
    pub fn open_with(path: impl AsRef<Path>, opts: OpenOptions) -> Result<Self> {
        let c = Container::open(path.as_ref(), Kind::Ragged, &opts)?;
        Ok(RaggedStore { c: Arc::new(c) })
    }

    /// Number of records.
    pub fn len(&self) -> u64 {
        self.c.records()
    }

    /// Whether the store's files are memory-mapped ([`OpenOptions::mmap`]; `false`: read with
    /// positional reads).
    pub fn is_mapped(&self) -> bool {
        self.c.mapped()
    }

    /// What the node-local cache (`RemoteOptions::cache_dir`) has done for this store's opening
    /// in this process: blocks hit, missed, filled, found damaged and evicted; `None` without a
    /// cache.
    pub fn cache_stats(&self) -> Option<crate::CacheStats> {
        self.c.cache_stats()
    }

    /// The object names and byte ranges a gather of `idx` requests from this remote store
    /// without a cache (the benchmarks' GET limit fetches exactly these); empty for a local one.
    #[cfg(all(feature = "remote", feature = "internals"))]
    #[doc(hidden)]
    pub fn remote_requests(&self, idx: &[u64]) -> Result<Vec<(String, std::ops::Range<u64>)>> {
        super::engine::remote_requests(&self.c, idx)
    }

    /// True when the store holds no records.
    pub fn is_empty(&self) -> bool {
        self.c.records() == 0
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.c.dtype()
    }

    /// Codec the records were written with.
    pub fn codec(&self) -> Codec {
        self.c.codec()
    }

    /// Number of data shards.
    pub fn data_shards(&self) -> u32 {
        self.c.shard_count()
    }

    /// Container directory.
    pub fn path(&self) -> &Path {
        self.c.path()
    }

    /// The dictionary stored in a `zstd_dict` container.
    pub fn dictionary(&self) -> Option<&[u8]> {
        self.c.dictionary()
    }

    /// Rank of every record.
    pub fn ndim(&self) -> u32 {
        self.c.ndim()
    }

    /// Shape of record `i`.
    pub fn shape_of(&self, i: u64) -> Result<Vec<u64>> {
        self.c.check_indices(&[i])?;
        Ok(self.c.shape_words(i).collect())
    }

    /// Where records `idx` are stored (shard file, offset, stored length): for tools that read
    /// the same extents past zrecord, e.g. a device-limit measurement.
    pub fn record_extents(&self, idx: &[u64]) -> Result<Vec<RecordExtent>> {
        self.c.record_extents(idx)
    }

    /// Allocated bytes on disk (all files).
    pub fn disk_bytes(&self) -> u64 {
        self.c.disk_bytes()
    }

    /// Reads and checks every byte: whole-shard checksums, every record's checksum, every
    /// compressed record's decoded size.
    pub fn verify(&self) -> Result<()> {
        self.c.check_open()?;
        verify_all(&self.c)
    }

    /// Binds the store to a placement. The view gathers into memory from `allocator`.
    pub fn bind(&self, allocator: Arc<dyn Allocator>) -> RaggedView {
        RaggedView::new(self.c.clone(), allocator)
    }

    /// Releases the store: every view bound to it fails with [`crate::Error::Closed`]
    /// afterwards. Batches already gathered stay valid (they own their memory).
    pub fn close(&self) {
        self.c.close();
    }

    /// Whether [`close`](Self::close) was called.
    pub fn is_closed(&self) -> bool {
        self.c.is_closed()
    }
}

/// The `Debug` of a store: its type name, path, record count, dtype and codec.
fn debug_store(name: &str, c: &Container, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    f.debug_struct(name)
        .field("path", &c.path())
        .field("records", &c.records())
        .field("dtype", &c.dtype())
        .field("codec", &c.codec())
        .finish()
}

impl fmt::Debug for DenseStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug_store("DenseStore", &self.c, f)
    }
}

impl fmt::Debug for RaggedStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug_store("RaggedStore", &self.c, f)
    }
}
