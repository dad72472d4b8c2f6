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
mod interface;
mod lmdb_store;
mod memcpy;
pub mod npy;
mod output;
mod parquet_store;
mod source;
mod util;
mod zrecord_store;

pub use arrayrecord::{ArrayRecord, python_interpreter};
pub use arrow_ipc::ArrowIpc;
pub use error::{Error, Result};
pub use hdf5_store::Hdf5;
pub use interface::{Competitor, Reader, Stored};
pub use lmdb_store::Lmdb;
pub use memcpy::MemcpyLimit;
pub use npy::NpyMmap;
pub use output::{Batch, DenseOut, DenseOutput, RaggedOut, RaggedOutput, verify};
pub use parquet_store::Parquet;
pub use source::{DenseSource, Geometry, RaggedSource, Source};
pub use util::{PAR_MIN_BYTES, disk_bytes};
pub use zrecord_store::{ZrecordCodec, ZrecordStore, zrecord_dense_batch, zrecord_ragged_batch};

/// Every row name, in table order. The last two are references, not peers
/// ([`is_reference`]).
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
    "npy-crc-limit",
    "memcpy-limit",
];

/// Whether a row of [`BACKENDS`] is a reference rather than a peer: `npy-crc-limit` (Dense tables:
/// npy-mmap-raw's gather plus a CRC32C pass over every record, the verified-copy limit) and
/// `memcpy-limit` (the same records copied from memory). Tables show them, but never as the best
/// row, and no rule compares zrecord with them as with a peer.
pub fn is_reference(name: &str) -> bool {
    matches!(name, "npy-crc-limit" | "memcpy-limit")
}

/// Creates the adapter for a row name from [`BACKENDS`].
pub fn backend(name: &str) -> Option<Box<dyn Competitor>> {
    Some(match name {
        "zrecord-raw" => Box::new(ZrecordStore::new(ZrecordCodec::Raw)),
        "zrecord-zstd" => Box::new(ZrecordStore::new(ZrecordCodec::Zstd)),
        "zrecord-zstdict" => Box::new(ZrecordStore::new(ZrecordCodec::ZstdDict)),
        "npy-mmap-raw" => Box::new(NpyMmap::default()),
        "npy-crc-limit" => Box::new(NpyMmap {
            checksum_pass: true,
        }),
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
