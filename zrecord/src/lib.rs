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
//! batches). Shared leaves: `format` (the on-disk structures), `crc`, `dtype`, `alloc` (output
//! memory), `vfs` (the file-system seam) and `error`; `dict` trains `zstd_dict` dictionaries.
//! No module imports one that imports it back.
//!
//! An open store is not indexable: bind it to an [`Allocator`] to get a view, whose gathers return
//! batches in memory the allocator hands out (never memory the store owns).

mod alloc;
mod cache;
mod crc;
mod dtype;
mod error;
mod threads;
pub mod vfs;

pub use alloc::{
    AllocStats, Allocation, Allocator, Device, DeviceType, MAPPED_REGION_BYTES, RegionHome,
    SystemAllocator, alloc_host_region, free_host_region, host_region_is_lazy,
};
pub use dtype::{DType, dlpack_code};
pub use error::{Error, Location, Result};
pub use vfs::{StdFs, Vfs};
mod dict;
mod format;
mod publish;
mod read;
mod write;

pub use dict::{DEFAULT_DICT_BYTES, DictSample, train_dict, train_dict_from};
pub use format::{Codec, Kind};
#[doc(hidden)]
pub use publish::Mutation;

/// Copies `src` into `dst` (equal lengths) and returns the CRC32C of the bytes extended from
/// `crc`: the kernel a verified raw read runs per record. Exposed for the benchmarks only.
#[doc(hidden)]
pub fn bench_copy_crc32c(crc: u32, dst: &mut [u8], src: &[u8]) -> u32 {
    crc::copy_append(crc, dst, src)
}
/// The CRC32C of each `stride`-byte record of `data` (the last may be shorter), XORed together,
/// by the kernel a verified gather of raw records runs over each record it has copied: the pass
/// of the benchmarks' verified-copy limit (a plain copy of the same records, then this pass over
/// the output). Exposed for the benchmarks only.
#[doc(hidden)]
pub fn bench_crc32c_records(data: &[u8], stride: usize) -> u32 {
    data.chunks(stride.max(1))
        .fold(0, |x, record| x ^ crc::append(0, record))
}
/// Copies `src` into `dst` (equal lengths) with the stores a raw gather of `output_bytes` in
/// all uses for each record (non-temporal ones from the last-level cache size up): the copy of the
/// benchmarks' limit row, which moves the same bytes the same way without a store around them.
#[doc(hidden)]
pub fn bench_copy_as_gather(dst: &mut [u8], src: &[u8], output_bytes: usize) {
    crc::copy_with(dst, src, read::stores_for(output_bytes));
}

/// Advises the kernel to back `buf` with transparent huge pages (its whole 2 MiB pages; a no-op
/// off Linux), as zrecord's own output regions of [`MAPPED_REGION_BYTES`] or more are: for the
/// benchmarks' limit row, so its output buffer pays the same page-table cost as a gather's.
#[doc(hidden)]
pub fn bench_advise_huge_pages(buf: &mut [std::mem::MaybeUninit<u8>]) {
    #[cfg(target_os = "linux")]
    {
        const HUGE: usize = 2 << 20;
        let start = (buf.as_ptr() as usize).next_multiple_of(HUGE);
        let end = (buf.as_ptr() as usize + buf.len()) / HUGE * HUGE;
        if end > start {
            // SAFETY: advice on whole pages inside `buf`, memory this caller owns exclusively;
            // MADV_HUGEPAGE changes how the pages are backed, never their contents.
            unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) };
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = buf;
}
pub use cache::{llc_bytes, parse_cache_size};
pub use publish::gc;
#[cfg(feature = "mutations")]
#[doc(hidden)]
pub use read::with_blocking_direct_reads;
pub use read::{
    ColdReads, DenseBatch, DenseStore, DenseView, OUTPUT_ALIGN, OpenOptions, RaggedBatch,
    RaggedStore, RaggedView, RecordExtent, ViewGather, container_files, gather_fan_outs,
    sequential_gathers,
};
pub use write::{
    DEFAULT_DATA_SHARDS, DEFAULT_ZSTD_LEVEL, DenseWriter, RaggedWriter, WRITE_BUFFER, WriterOptions,
};
