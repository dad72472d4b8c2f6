//! The fixed vocabulary of the format: file names, the format version, magic numbers, fixed sizes
//! and limits, the entry flag, the codec and kind codes, record and entry sizes, and the
//! little-endian field readers every decoder uses.

use crate::dtype::DType;

pub(crate) const MANIFEST_FILE: &str = "manifest.zrm";
pub(crate) const INDEX_FILE: &str = "index.zri";
pub(super) const FORMAT_VERSION: u32 = 1;

pub(super) const MANIFEST_MAGIC: [u8; 8] = *b"ZRECMAN\0";
pub(super) const SHARD_MAGIC: [u8; 8] = *b"ZRECSHD\0";
pub(super) const INDEX_MAGIC: [u8; 8] = *b"ZRECIDX\0";

/// Size of the fixed shard and index headers.
pub(crate) const HEADER_LEN: usize = 64;
/// Index entries per checksummed index page.
pub(crate) const PAGE_ENTRIES: u64 = 4096;
/// Fixed part of the manifest before the item shape.
pub(super) const MANIFEST_FIXED: usize = 128;
/// Bytes per shard descriptor in the manifest.
pub(super) const SHARD_DESC: usize = 24;
/// Largest record, in raw bytes.
pub(crate) const MAX_RECORD_BYTES: u64 = 1 << 31;
/// Largest dtype name.
pub(super) const MAX_DTYPE_NAME: usize = 32;

/// Entry flag: the record is stored uncompressed.
pub(crate) const FLAG_STORED_RAW: u8 = 1;

pub(crate) fn shard_file_name(shard: u32) -> String {
    format!("shard-{shard:03}.zrd")
}

/// Whether `name` is the name of one of a container's files (manifest, index or a shard).
#[cfg(feature = "remote")]
pub(crate) fn is_container_file(name: &str) -> bool {
    name == MANIFEST_FILE
        || name == INDEX_FILE
        || name
            .strip_prefix("shard-")
            .and_then(|n| n.strip_suffix(".zrd"))
            .is_some_and(|n| n.len() >= 3 && n.bytes().all(|b| b.is_ascii_digit()))
}

/// The record codec.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Codec {
    /// Stored as is.
    Raw,
    /// Each record compressed independently with zstd.
    Zstd,
    /// Each record compressed with zstd and a dictionary stored in the container.
    ZstdDict,
}

impl Codec {
    /// Parses `"raw"`, `"zstd"` or `"zstd_dict"`.
    pub fn from_name(name: &str) -> Option<Codec> {
        match name {
            "raw" => Some(Codec::Raw),
            "zstd" => Some(Codec::Zstd),
            "zstd_dict" => Some(Codec::ZstdDict),
            _ => None,
        }
    }

    /// The canonical name.
    pub fn name(self) -> &'static str {
        match self {
            Codec::Raw => "raw",
            Codec::Zstd => "zstd",
            Codec::ZstdDict => "zstd_dict",
        }
    }

    pub(super) fn code(self) -> u8 {
        match self {
            Codec::Raw => 0,
            Codec::Zstd => 1,
            Codec::ZstdDict => 2,
        }
    }

    pub(super) fn from_code(c: u8) -> Option<Codec> {
        match c {
            0 => Some(Codec::Raw),
            1 => Some(Codec::Zstd),
            2 => Some(Codec::ZstdDict),
            _ => None,
        }
    }
}

/// Dense or Ragged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// One fixed-shape array per record.
    Dense,
    /// Variable-shape arrays, one shape per record.
    Ragged,
}

impl Kind {
    /// `"Dense"` or `"Ragged"`.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Dense => "Dense",
            Kind::Ragged => "Ragged",
        }
    }
}

pub(crate) fn dense_stride(dtype: DType, item_shape: &[u64]) -> Option<u64> {
    let mut n: u64 = dtype.itemsize() as u64;
    for &d in item_shape {
        n = n.checked_mul(d)?;
    }
    (n <= MAX_RECORD_BYTES).then_some(n)
}

pub(crate) fn entry_size(kind: Kind, ndim: u32) -> usize {
    match kind {
        Kind::Dense => 16,
        Kind::Ragged => 16 + 8 * ndim as usize,
    }
}

#[inline]
pub(crate) fn rd_u32(b: &[u8], off: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[off..off + 4]);
    u32::from_le_bytes(a)
}

#[inline]
pub(crate) fn rd_u64(b: &[u8], off: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(a)
}
