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

use super::container::{OpenOptions, RecordExtent};
use super::getters::{container_getters, layout_getters};
use super::layout::{Dense, Layout, Ragged};
use super::opened::Opened;
use super::verify::verify_all;
use super::view::View;

/// An opened container, or dataset of parts ([`crate::dataset`]), of layout `L`. Bind it to an
/// allocator to read.
#[derive(Clone)]
pub struct Store<L: Layout> {
    c: Opened,
    layout: PhantomData<fn() -> L>,
}

/// An opened Dense container. Bind it to an allocator to read.
pub type DenseStore = Store<Dense>;

/// An opened Ragged container. Bind it to an allocator to read.
pub type RaggedStore = Store<Ragged>;

impl<L: Layout> Store<L> {
    /// Opens and validates a published container (structure, manifest, index and header
    /// checksums), or the newest version of a dataset of parts (its version manifest only: each
    /// part is opened and checked when first read). Record payloads are verified when read.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(path, OpenOptions::default())
    }

    /// Opens with explicit options ([`OpenOptions::version`] pins a dataset's version,
    /// [`OpenOptions::column`] picks one of its columns).
    pub fn open_with(path: impl AsRef<Path>, opts: OpenOptions) -> Result<Self> {
        Ok(Store {
            c: Opened::open(path.as_ref(), L::KIND, &opts)?,
            layout: PhantomData,
        })
    }

    container_getters!();

    /// Whether the store's files are memory-mapped ([`OpenOptions::mmap`]; `false`: read with
    /// positional reads). A dataset: whether every part opened so far is.
    pub fn is_mapped(&self) -> bool {
        match &self.c {
            Opened::One(c) => c.mapped(),
            Opened::Parts(p) => p.opened_parts().all(|c| c.mapped()),
        }
    }

    /// What the node-local cache (`RemoteOptions::cache_dir`) has done for this store's opening
    /// in this process: blocks hit, missed, filled, found damaged and evicted; `None` without a
    /// cache (and for a dataset of parts).
    pub fn cache_stats(&self) -> Option<crate::CacheStats> {
        match &self.c {
            Opened::One(c) => c.cache_stats(),
            Opened::Parts(_) => None,
        }
    }

    /// The requests this store on object storage has made in this process (its open included)
    /// and the bytes they received; a dataset: its open's (the version's listing and read) and
    /// those of the parts opened so far. `None` for a local store.
    pub fn request_stats(&self) -> Option<crate::RequestStats> {
        match &self.c {
            Opened::One(c) => c.request_stats(),
            Opened::Parts(p) => p.opened_parts().map(|c| c.request_stats()).fold(
                p.open_requests(),
                |sum: Option<crate::RequestStats>, r| match (sum, r) {
                    (s, None) => s,
                    (None, Some(r)) => Some(r),
                    (Some(s), Some(r)) => Some(crate::RequestStats {
                        requests: s.requests + r.requests,
                        bytes: s.bytes + r.bytes,
                    }),
                },
            ),
        }
    }

    /// The object names and byte ranges a gather of `idx` requests from this remote store
    /// without a cache (the benchmarks' GET limit fetches exactly these); empty for a local one.
    #[cfg(all(feature = "remote", feature = "internals"))]
    #[doc(hidden)]
    pub fn remote_requests(&self, idx: &[u64]) -> Result<Vec<(String, std::ops::Range<u64>)>> {
        match &self.c {
            Opened::One(c) => super::engine::remote_requests(c, idx),
            Opened::Parts(_) => Err(crate::Error::invalid("remote_requests of a dataset")),
        }
    }

    /// Number of data shards of a container; for a dataset of parts, the number of parts.
    pub fn data_shards(&self) -> u32 {
        match &self.c {
            Opened::One(c) => c.shard_count(),
            Opened::Parts(p) => p.part_count() as u32,
        }
    }

    /// Container directory, or the dataset's root.
    pub fn path(&self) -> &Path {
        self.c.path()
    }

    /// Where records `idx` are stored (shard file, offset, stored length): for tools that read
    /// the same extents past zrecord, e.g. a device-limit measurement.
    pub fn record_extents(&self, idx: &[u64]) -> Result<Vec<RecordExtent>> {
        match &self.c {
            Opened::One(c) => c.record_extents(idx),
            Opened::Parts(p) => {
                p.check_indices(idx)?;
                let mut out = Vec::with_capacity(idx.len());
                for &i in idx {
                    let (part, local) = p.locate(i);
                    out.extend(p.part(part)?.record_extents(&[local])?);
                }
                Ok(out)
            }
        }
    }

    /// Number of parts: a dataset's (in its version's order), 1 for a single container.
    pub fn parts(&self) -> usize {
        match &self.c {
            Opened::One(_) => 1,
            Opened::Parts(p) => p.part_count(),
        }
    }

    /// [`verify`](Self::verify) of part `p` alone (of a single container, `p` 0 is the whole
    /// container): for tools that report progress part by part. Errors name the part's files.
    pub fn verify_part(&self, p: usize) -> Result<()> {
        if p >= self.parts() {
            return Err(crate::Error::IndexOutOfRange {
                index: p as u64,
                len: self.parts() as u64,
            });
        }
        match &self.c {
            Opened::One(c) => {
                c.check_open()?;
                verify_all(c)
            }
            Opened::Parts(parts) => {
                parts.check_open()?;
                verify_all(parts.part(p)?)
            }
        }
    }

    /// Reads and checks every byte: whole-shard checksums, every record's checksum, every
    /// compressed record's decoded size; a dataset: every part, each opened and checked against
    /// its version first.
    pub fn verify(&self) -> Result<()> {
        (0..self.parts()).try_for_each(|p| self.verify_part(p))
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
