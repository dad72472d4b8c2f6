//! # competitors
//!
//! Real competitor stores for the zrecord benchmark tables, all behind one interface
//! ([`Competitor`] writes and opens, [`Reader`] gathers). Each adapter uses the actual library the
//! row names (libhdf5, LMDB through heed, arrow-rs IPC, the parquet crate, Google's `array_record`
//! Python package, a plain `.npy` mmap) the way a competent user would for random batch gather.
//! How every adapter stores and reads is documented in `competitors/README.md`.
//!
//! Two geometries share the interface:
//!
//! * **Dense**: one fixed `(dtype, item_shape)`; a gather returns one contiguous
//!   `(n, *item_shape)` buffer in the requested order ([`DenseOutput`]).
//! * **Ragged**: variable-shape records of one dtype and `ndim`; a gather returns the packed layout
//!   zrecord returns: `values` bytes, `cu_seqlens` (int32 element boundaries, `n + 1` entries) and
//!   `shapes` (`n * ndim` u64) ([`RaggedOutput`]). List-returning stores pack inside `gather`.
//!
//! The benchmark protocol, per backend:
//!
//! ```text
//! let mut c = competitors::backend("hdf5-gzip").unwrap();
//! c.prepare(&source)?;                      // untimed: dictionary training, helper start-up
//! let stored = c.write(&source, dir)?;      // timed by the caller (or stored.write_seconds)
//! let mut r = c.open(&stored)?;             // untimed
//! let batch = r.gather(&indices)?;          // timed by the caller (or r.last_gather_seconds())
//! competitors::verify(&batch, &source.gather_reference(&indices)?)?;
//! ```

mod arrayrecord;
mod arrow_ipc;
mod error;
mod hdf5_store;
mod lmdb_store;
mod memcpy;
pub mod npy;
mod output;
mod parquet_store;
mod source;
mod util;
mod zrecord_store;

use std::path::{Path, PathBuf};

pub use arrayrecord::{ArrayRecord, python_interpreter};
pub use arrow_ipc::ArrowIpc;
pub use error::{Error, Result};
pub use hdf5_store::Hdf5;
pub use lmdb_store::Lmdb;
pub use memcpy::MemcpyLimit;
pub use npy::NpyMmap;
pub use output::{Batch, DenseOut, DenseOutput, RaggedOut, RaggedOutput, verify};
pub use parquet_store::Parquet;
pub use source::{DenseSource, RaggedSource, Source};
pub use util::{PAR_MIN_BYTES, disk_bytes};
pub use zrecord_store::{ZrecordCodec, ZrecordStore};

/// The two record geometries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Geometry {
    /// Fixed `(dtype, item_shape)` per store.
    Dense,
    /// Variable shape per record, fixed dtype and `ndim`.
    Ragged,
}

impl Geometry {
    /// `"dense"` or `"ragged"`.
    pub const fn name(self) -> &'static str {
        match self {
            Geometry::Dense => "dense",
            Geometry::Ragged => "ragged",
        }
    }
}

/// What [`Competitor::write`] produced: everything [`Competitor::open`] needs.
#[derive(Clone, Debug)]
pub struct Stored {
    /// Backend row name.
    pub backend: &'static str,
    /// Directory holding every file of the store (and nothing else).
    pub dir: PathBuf,
    /// Geometry of the stored source.
    pub geometry: Geometry,
    /// Number of records.
    pub len: u64,
    /// Write time measured by the backend itself (set only by adapters whose work happens in
    /// another process, i.e. ArrayRecord); the harness uses it instead of its own timer.
    pub write_seconds: Option<f64>,
}

impl Stored {
    /// Allocated bytes (`st_blocks * 512`) of every file of the store.
    pub fn disk_bytes(&self) -> Result<u64> {
        disk_bytes(&self.dir)
    }
}

/// One competitor row: writes a prepared source and opens it for random gather.
///
/// Call order: [`prepare`](Competitor::prepare) (untimed), [`write`](Competitor::write) (timed),
/// [`open`](Competitor::open) (untimed), then [`Reader::gather`] (timed) any number of times.
pub trait Competitor: Send {
    /// Row name, e.g. `"hdf5-gzip"`.
    fn name(&self) -> &'static str;

    /// Whether this row exists for `geometry` (`npy-mmap-raw` is Dense only).
    fn supports(&self, geometry: Geometry) -> bool;

    /// Untimed setup before the timed write: dictionary training, helper process start-up,
    /// staging the source for another process. Default: nothing.
    fn prepare(&mut self, source: &Source<'_>) -> Result<()> {
        let _ = source;
        Ok(())
    }

    /// Writes the whole source into a new store inside `dir` (created if missing; must not already
    /// hold a store). This is the timed write.
    fn write(&mut self, source: &Source<'_>, dir: &Path) -> Result<Stored>;

    /// Opens a store written by [`write`](Competitor::write) for random gather (untimed: footers,
    /// indexes and metadata are loaded here, the way a long-running reader would).
    fn open(&self, stored: &Stored) -> Result<Box<dyn Reader>>;
}

/// An open store.
pub trait Reader: Send {
    /// Number of records.
    fn len(&self) -> u64;

    /// Whether the store holds no records.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Gathers `indices` (any order, duplicates allowed, possibly empty) into one packed batch in
    /// the requested order. Out-of-range indices are an error.
    fn gather(&mut self, indices: &[u64]) -> Result<Batch>;

    /// Seconds the last [`gather`](Reader::gather) spent doing the gather, as measured by the
    /// backend itself. `Some` only for adapters whose work happens in another process (ArrayRecord):
    /// the harness then uses it instead of its own timer, which would include the transfer back.
    fn last_gather_seconds(&self) -> Option<f64> {
        None
    }
}

/// Every row name, in table order.
pub const BACKENDS: &[&str] = &[
    "zrecord-raw",
    "npy-mmap-raw",
    "hdf5-raw",
    "lmdb-raw",
    "arrow-ipc-raw",
    "parquet-raw",
    "arrayrecord-raw",
    "zrecord-zstd",
    "zrecord-zstdict",
    "hdf5-gzip",
    "arrow-ipc-zstd",
    "parquet-zstd",
    "arrayrecord-zstd",
    "memcpy-limit",
];

/// Creates the adapter for a row name from [`BACKENDS`].
pub fn backend(name: &str) -> Option<Box<dyn Competitor>> {
    Some(match name {
        "zrecord-raw" => Box::new(ZrecordStore::new(ZrecordCodec::Raw)),
        "zrecord-zstd" => Box::new(ZrecordStore::new(ZrecordCodec::Zstd)),
        "zrecord-zstdict" => Box::new(ZrecordStore::new(ZrecordCodec::ZstdDict)),
        "npy-mmap-raw" => Box::new(NpyMmap),
        "hdf5-raw" => Box::new(Hdf5::new(false)),
        "hdf5-gzip" => Box::new(Hdf5::new(true)),
        "lmdb-raw" => Box::new(Lmdb),
        "arrow-ipc-raw" => Box::new(ArrowIpc::new(false)),
        "arrow-ipc-zstd" => Box::new(ArrowIpc::new(true)),
        "parquet-raw" => Box::new(Parquet::new(false)),
        "parquet-zstd" => Box::new(Parquet::new(true)),
        "arrayrecord-raw" => Box::new(ArrayRecord::new(false)),
        "arrayrecord-zstd" => Box::new(ArrayRecord::new(true)),
        "memcpy-limit" => Box::new(MemcpyLimit::default()),
        _ => return None,
    })
}
