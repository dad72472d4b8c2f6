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
//! let mut c = competitors::Backend::Hdf5Gzip.competitor(); // or "hdf5-gzip".parse::<Backend>()?
//! c.prepare(&source)?;                      // untimed: dictionary training, helper start-up
//! let stored = c.write(&source, dir)?;      // timed by the caller (or stored.write_seconds)
//! let mut r = c.open(&stored)?;             // untimed
//! let batch = r.gather(&indices)?;          // timed by the caller (or r.last_gather_seconds())
//! competitors::verify(&batch, &source.gather_reference(&indices)?)?;
//! ```

mod arrayrecord;
mod arrow_ipc;
mod backend;
mod error;
mod hdf5_store;
mod interface;
mod lmdb_store;
mod memcpy;
mod npy;
mod output;
mod parquet_store;
mod source;
mod util;
mod zrecord_store;

pub use arrayrecord::ArrayRecord;
pub use arrow_ipc::ArrowIpc;
pub use backend::{Backend, UnknownBackend};
pub use error::{Error, Result};
pub use hdf5_store::Hdf5;
pub use interface::{Competitor, Reader, Stored};
pub use lmdb_store::Lmdb;
pub use memcpy::MemcpyLimit;
pub use npy::NpyMmap;
pub use output::{Batch, DenseOut, DenseOutput, RaggedOut, RaggedOutput, verify};
pub use parquet_store::Parquet;
pub use source::{DenseSource, Geometry, RaggedSource, Source};
pub use util::PAR_MIN_BYTES;
pub use zrecord_store::{ZrecordCodec, ZrecordStore};

impl Backend {
    /// A fresh adapter for this row.
    pub fn competitor(self) -> Box<dyn Competitor> {
        match self {
            Backend::ZrecordRaw => Box::new(ZrecordStore::new(ZrecordCodec::Raw)),
            Backend::ZrecordZstd => Box::new(ZrecordStore::new(ZrecordCodec::Zstd)),
            Backend::ZrecordZstdict => Box::new(ZrecordStore::new(ZrecordCodec::ZstdDict)),
            Backend::NpyMmapRaw => Box::new(NpyMmap::default()),
            Backend::NpyCrcLimit => Box::new(NpyMmap {
                checksum_pass: true,
            }),
            Backend::Hdf5Raw => Box::new(Hdf5::default()),
            Backend::Hdf5Gzip => Box::new(Hdf5 { gzip: true }),
            Backend::LmdbRaw => Box::new(Lmdb),
            Backend::ArrowIpcRaw => Box::new(ArrowIpc::default()),
            Backend::ArrowIpcZstd => Box::new(ArrowIpc { zstd: true }),
            Backend::ParquetRaw => Box::new(Parquet::default()),
            Backend::ParquetZstd => Box::new(Parquet { zstd: true }),
            Backend::ArrayRecordRaw => Box::new(ArrayRecord::new(false)),
            Backend::ArrayRecordZstd => Box::new(ArrayRecord::new(true)),
            Backend::MemcpyLimit => Box::new(MemcpyLimit::default()),
        }
    }
}
