//! The public store type: [`Store`], an open container, with its layout's faces [`DenseStore`]
//! and [`RaggedStore`]. A store is not indexable: bind it to an allocator to get a view
//! ([`super::view`]).
//!
//! The getters a store and its views share are written once, in [`super::getters`].

use std::fmt;
use std::marker::PhantomData;
use std::path::Path;
use std::sync::Arc;

use crate::alloc::Allocator;
use crate::error::Result;

use super::container::{Container, OpenOptions, RecordExtent};
use super::getters::{container_getters, layout_getters};
use super::layout::{Dense, Layout, Ragged};
use super::verify::verify_all;
use super::view::View;

/// An opened container of layout `L`. Bind it to an allocator to read.
#[derive(Clone)]
pub struct Store<L: Layout> {
    c: Arc<Container>,
    layout: PhantomData<fn() -> L>,
}

/// An opened Dense container. Bind it to an allocator to read.
pub type DenseStore = Store<Dense>;

/// An opened Ragged container. Bind it to an allocator to read.
pub type RaggedStore = Store<Ragged>;

impl<L: Layout> Store<L> {
    /// Opens and validates a published container (structure, manifest, index and header
    /// checksums). Record payloads are verified when read.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(path, OpenOptions::default())
    }

    /// Opens with explicit options.
    pub fn open_with(path: impl AsRef<Path>, opts: OpenOptions) -> Result<Self> {
        let c = Container::open(path.as_ref(), L::KIND, &opts)?;
        Ok(Store {
            c: Arc::new(c),
            layout: PhantomData,
        })
    }

    container_getters!();

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

    /// Number of data shards.
    pub fn data_shards(&self) -> u32 {
        self.c.shard_count()
    }

    /// Container directory.
    pub fn path(&self) -> &Path {
        self.c.path()
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
    pub fn bind(&self, allocator: Arc<dyn Allocator>) -> View<L> {
        View::new(self.c.clone(), allocator)
    }

    /// Releases the store: every view bound to it fails with [`crate::Error::Closed`]
    /// afterwards. Batches already gathered stay valid (they own their memory).
    pub fn close(&self) {
        self.c.close();
    }
}

impl Store<Dense> {
    layout_getters!(Dense);
}

impl Store<Ragged> {
    layout_getters!(Ragged);
}

/// The `Debug` of a store: its type name, path, record count, dtype and codec.
impl<L: Layout> fmt::Debug for Store<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct(&format!("{}Store", L::NAME))
            .field("path", &self.c.path())
            .field("records", &self.c.records())
            .field("dtype", &self.c.dtype())
            .field("codec", &self.c.codec())
            .finish()
    }
}
