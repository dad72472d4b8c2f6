//! # zrecord
//!
//! A typed, immutable, random-access record container.
//!
//! * **Dense** stores hold one fixed-shape array per record (`dtype`, `item_shape`, 0-D allowed).
//! * **Ragged** stores hold variable-shape arrays of one dtype with `ndim >= 1`; every record is
//!   non-empty and carries its own `u64` shape.
//! * Codecs: `raw`, `zstd` (level 3, each record independently) and `zstd_dict` (a shared dictionary
//!   stored inside the container). A record that compression does not shrink is stored raw and
//!   flagged as such in its index entry.
//! * A writer spreads records over `1..=255` data shards written in parallel and publishes the
//!   container atomically on `close()` (private temp directory, fsync every file and the directory,
//!   `rename` without replace, fsync the parent).
//! * Every stored byte is covered by a CRC32C: each record is checksummed with a seed derived from
//!   the container id and its index, and the manifest, index pages and shard headers carry their
//!   own checksums. Reads verify by default.
//!
//! The byte-level format is specified in [`docs/format.md`](../../docs/format.md).
//!
//! The modules follow the data path. Writing: `write` (the two writers and the per-shard encode),
//! then `publish` (the publish protocol of the spec, step by step, and `gc`). Reading: `read`
//! (open and validate, the public store and view types, gather fan-out, record decoding,
//! batches, the read engines). Object storage: `remote` (feature `remote`: the client, the
//! publish to a URL). Between them: `source` (the read-side traits both use: a file read by
//! range or through its map, the opener of a store's files, the node-local cache of remote
//! blocks) and `backend` (the one module that names both sides: it hands a store path's opener,
//! local or remote, to the read path). Shared leaves: `format` (the on-disk structures), `crc`,
//! `dtype`, `alloc` (output memory), `vfs` (the file-system seam of writers, publish and local
//! reads), `cache` (the CPU's cache size) and `error`; `dict` trains `zstd_dict` dictionaries.
//! No module imports one that imports it back, and no folder does either (the workspace's
//! module-graph test checks both).
//!
//! An open store is not indexable: bind it to an [`Allocator`] to get a view, whose gathers return
//! batches in memory the allocator hands out (never memory the store owns).

mod alloc;
mod backend;
mod cache;
mod crc;
pub mod dataset;
mod dtype;
mod error;
#[cfg(feature = "internals")]
pub mod internals;
mod threads;
pub mod vfs;

pub use alloc::{
    AllocStats, Allocation, Allocator, Device, DeviceType, MAPPED_REGION_BYTES, RegionHome,
    SystemAllocator, alloc_host_region, free_host_region, host_region_is_lazy,
};
pub use dtype::{DType, dlpack_code};
pub use error::{Error, Location, Result};
pub use vfs::{ReadFs, StdFs, Vfs};
mod dict;
mod format;
mod objects;
mod publish;
mod read;
#[cfg(feature = "remote")]
pub mod remote;
mod sigbus;
mod source;
mod write;

#[cfg(feature = "testing")]
pub mod testing;

pub use dict::{DEFAULT_DICT_BYTES, DictSample, train_dict, train_dict_from};
pub use format::{Codec, Kind};

pub use publish::gc;
pub use read::{
    Batch, BlockBufferStats, CacheStats, ColdReads, Dense, DenseBatch, DenseStore, DenseView,
    INDEX_MEMORY_BYTES, Layout, OUTPUT_ALIGN, OpenOptions, Ragged, RaggedBatch, RaggedStore,
    RaggedView, RecordExtent, RemoteOptions, RequestStats, Store, View, ViewGather,
    container_files, gather_fan_outs, sequential_gathers, set_index_memory,
};
pub use write::{
    DEFAULT_DATA_SHARDS, DEFAULT_ZSTD_LEVEL, DenseWriter, RaggedWriter, WRITE_BUFFER, Writer,
    WriterOptions, check_ragged_batch,
};
