//! On-disk structures, one child per part of `docs/format.md`: [`layout`] (file names, magic
//! numbers, sizes, codec and kind codes), [`manifest`], [`placement`] (record to shard),
//! [`index`] (entries and pages), [`header`] (the 64-byte shard and index headers) and [`seed`]
//! (checksum seeds). Every multi-byte integer is little-endian.
//!
//! This module only declares its children and re-exports what the rest of the crate uses; the
//! children never import it (the module graph stays acyclic).

mod dataset;
mod header;
mod index;
mod layout;
mod manifest;
mod placement;
mod seed;

pub use dataset::{ColumnSchema, PartColumn, PartEntry, VersionManifest};
pub(crate) use dataset::{MAX_NAME, valid_name, version_file_name, version_of_file};
pub(crate) use header::{check_header, encode_index_header, encode_shard_header};
pub(crate) use index::{Entry, decode_entry, encode_entry, entry_offset, index_file_len};
#[cfg(feature = "remote")]
pub(crate) use layout::is_container_file;
pub use layout::{Codec, Kind};
pub(crate) use layout::{
    FLAG_STORED_RAW, HEADER_LEN, INDEX_FILE, MANIFEST_FILE, MAX_RECORD_BYTES, PAGE_ENTRIES,
    dense_stride, entry_size, rd_u32, rd_u64, shard_file_name,
};
pub use manifest::container_files;
pub(crate) use manifest::{Manifest, ShardDesc, zstd_dict_id};
pub(crate) use placement::{ShardMap, shard_of};
pub(crate) use seed::{page_seed, record_seed, record_seed_after, uuid_crc};
