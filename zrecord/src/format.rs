//! On-disk structures: manifest, shard header, index header and index pages.
//! Byte tables are in `docs/format.md`; every multi-byte integer is little-endian.

use std::path::Path;

use crate::dtype::DType;
use crate::error::{Error, Location, Result};

pub(crate) const MANIFEST_FILE: &str = "manifest.zrm";
pub(crate) const INDEX_FILE: &str = "index.zri";
pub(crate) const FORMAT_VERSION: u32 = 1;

pub(crate) const MANIFEST_MAGIC: [u8; 8] = *b"ZRECMAN\0";
pub(crate) const SHARD_MAGIC: [u8; 8] = *b"ZRECSHD\0";
pub(crate) const INDEX_MAGIC: [u8; 8] = *b"ZRECIDX\0";

/// Size of the fixed shard and index headers.
pub(crate) const HEADER_LEN: usize = 64;
/// Index entries per checksummed index page.
pub(crate) const PAGE_ENTRIES: u64 = 4096;
/// Fixed part of the manifest before the item shape.
pub(crate) const MANIFEST_FIXED: usize = 128;
/// Bytes per shard descriptor in the manifest.
pub(crate) const SHARD_DESC: usize = 24;
/// Largest record, in raw bytes.
pub(crate) const MAX_RECORD_BYTES: u64 = 1 << 31;
/// Largest dtype name.
pub(crate) const MAX_DTYPE_NAME: usize = 32;

/// Entry flag: the record is stored uncompressed.
pub(crate) const FLAG_STORED_RAW: u8 = 1;

pub(crate) fn shard_file_name(shard: u32) -> String {
    format!("shard-{shard:03}.zrd")
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

    pub(crate) fn code(self) -> u8 {
        match self {
            Codec::Raw => 0,
            Codec::Zstd => 1,
            Codec::ZstdDict => 2,
        }
    }

    fn from_code(c: u8) -> Option<Codec> {
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

/// Per-shard summary kept in the manifest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ShardDesc {
    pub len: u64,
    pub records: u64,
    pub crc: u32,
}

/// Everything the manifest holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Manifest {
    pub uuid: [u8; 16],
    pub kind: Kind,
    pub codec: Codec,
    pub dtype: DType,
    /// Dense: rank of the item shape. Ragged: rank of every record.
    pub ndim: u32,
    /// Dense only.
    pub item_shape: Vec<u64>,
    pub records: u64,
    pub block_records: u64,
    pub zstd_level: i32,
    pub dict: Vec<u8>,
    pub dict_id: u32,
    pub index_len: u64,
    pub shards: Vec<ShardDesc>,
}

impl Manifest {
    pub(crate) fn shard_count(&self) -> u32 {
        self.shards.len() as u32
    }

    pub(crate) fn entry_size(&self) -> usize {
        entry_size(self.kind, self.ndim)
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut b =
            Vec::with_capacity(MANIFEST_FIXED + 8 * self.item_shape.len() + 24 * self.shards.len());
        b.extend_from_slice(&MANIFEST_MAGIC);
        b.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        let total = self.encoded_len() as u32;
        b.extend_from_slice(&total.to_le_bytes());
        b.extend_from_slice(&self.uuid);
        b.push(match self.kind {
            Kind::Dense => 0,
            Kind::Ragged => 1,
        });
        b.push(self.codec.code());
        let name = self.dtype.name().as_bytes();
        b.push(name.len() as u8);
        b.push(0);
        b.extend_from_slice(&(self.dtype.itemsize() as u32).to_le_bytes());
        b.extend_from_slice(&self.ndim.to_le_bytes());
        b.extend_from_slice(&(self.shards.len() as u32).to_le_bytes());
        b.extend_from_slice(&self.records.to_le_bytes());
        b.extend_from_slice(&self.block_records.to_le_bytes());
        b.extend_from_slice(&self.zstd_level.to_le_bytes());
        b.extend_from_slice(&(self.dict.len() as u32).to_le_bytes());
        b.extend_from_slice(&self.dict_id.to_le_bytes());
        b.extend_from_slice(&(self.entry_size() as u32).to_le_bytes());
        b.extend_from_slice(&self.index_len.to_le_bytes());
        b.extend_from_slice(&[0u8; 8]);
        let mut padded = [0u8; MAX_DTYPE_NAME];
        padded[..name.len()].copy_from_slice(name);
        b.extend_from_slice(&padded);
        debug_assert_eq!(b.len(), MANIFEST_FIXED);
        for d in &self.item_shape {
            b.extend_from_slice(&d.to_le_bytes());
        }
        for s in &self.shards {
            b.extend_from_slice(&s.len.to_le_bytes());
            b.extend_from_slice(&s.records.to_le_bytes());
            b.extend_from_slice(&s.crc.to_le_bytes());
            b.extend_from_slice(&[0u8; 4]);
        }
        b.extend_from_slice(&self.dict);
        let crc = crc32c::crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        debug_assert_eq!(b.len(), total as usize);
        b
    }

    fn encoded_len(&self) -> usize {
        MANIFEST_FIXED
            + 8 * self.item_shape.len()
            + SHARD_DESC * self.shards.len()
            + self.dict.len()
            + 4
    }

    /// Decodes and validates a manifest. Every field is checked; nothing is trusted before the CRC.
    pub(crate) fn decode(bytes: &[u8], path: &Path) -> Result<Manifest> {
        let at = |offset: usize| Location {
            path: path.to_path_buf(),
            offset: Some(offset as u64),
            ..Default::default()
        };
        if bytes.len() < 8 || bytes[..8] != MANIFEST_MAGIC {
            return Err(Error::format(path, "missing zrecord manifest magic"));
        }
        if bytes.len() < MANIFEST_FIXED + 4 {
            return Err(Error::corrupt(
                at(0),
                "manifest length",
                format!(">= {}", MANIFEST_FIXED + 4),
                bytes.len(),
            ));
        }
        let total = rd_u32(bytes, 12) as usize;
        if total != bytes.len() {
            return Err(Error::corrupt(
                at(12),
                "manifest length",
                total,
                bytes.len(),
            ));
        }
        let body = &bytes[..total - 4];
        let stored = rd_u32(bytes, total - 4);
        let actual = crc32c::crc32c(body);
        if stored != actual {
            return Err(Error::corrupt(
                at(total - 4),
                "manifest crc32c",
                format!("{actual:#010x}"),
                format!("{stored:#010x}"),
            ));
        }
        let version = rd_u32(bytes, 8);
        if version != FORMAT_VERSION {
            return Err(Error::format(
                path,
                format!("format version {version}, this build reads {FORMAT_VERSION}"),
            ));
        }
        let mut uuid = [0u8; 16];
        uuid.copy_from_slice(&bytes[16..32]);
        let kind = match bytes[32] {
            0 => Kind::Dense,
            1 => Kind::Ragged,
            k => return Err(Error::corrupt(at(32), "container kind", "0 or 1", k)),
        };
        let codec = Codec::from_code(bytes[33])
            .ok_or_else(|| Error::corrupt(at(33), "codec", "0..=2", bytes[33]))?;
        let name_len = bytes[34] as usize;
        if name_len == 0 || name_len > MAX_DTYPE_NAME {
            return Err(Error::corrupt(
                at(34),
                "dtype name length",
                "1..=32",
                name_len,
            ));
        }
        if bytes[35] != 0 {
            return Err(Error::corrupt(at(35), "reserved byte", 0, bytes[35]));
        }
        let itemsize = rd_u32(bytes, 36);
        let ndim = rd_u32(bytes, 40);
        let nshards = rd_u32(bytes, 44);
        let records = rd_u64(bytes, 48);
        let block_records = rd_u64(bytes, 56);
        let zstd_level = rd_u32(bytes, 64) as i32;
        let dict_len = rd_u32(bytes, 68) as usize;
        let dict_id = rd_u32(bytes, 72);
        let entry = rd_u32(bytes, 76) as usize;
        let index_len = rd_u64(bytes, 80);
        if bytes[88..96].iter().any(|&b| b != 0) {
            return Err(Error::corrupt(at(88), "reserved bytes", "zero", "non-zero"));
        }
        let name_bytes = &bytes[96..96 + MAX_DTYPE_NAME];
        if name_bytes[name_len..].iter().any(|&b| b != 0) {
            return Err(Error::corrupt(
                at(96),
                "dtype name padding",
                "zero",
                "non-zero",
            ));
        }
        let name = std::str::from_utf8(&name_bytes[..name_len])
            .map_err(|_| Error::corrupt(at(96), "dtype name", "utf-8", "invalid bytes"))?;
        let dtype = DType::from_name(name)
            .ok_or_else(|| Error::format(path, format!("unknown dtype {name:?}")))?;
        if dtype.itemsize() as u32 != itemsize {
            return Err(Error::corrupt(
                at(36),
                format!("itemsize of {name}"),
                dtype.itemsize(),
                itemsize,
            ));
        }
        if nshards == 0 || nshards > 255 {
            return Err(Error::corrupt(at(44), "shard count", "1..=255", nshards));
        }
        if block_records == 0 {
            return Err(Error::corrupt(at(56), "block size", ">= 1", 0));
        }
        let dense_dims = match kind {
            Kind::Dense => {
                if ndim > 32 {
                    return Err(Error::corrupt(at(40), "item rank", "<= 32", ndim));
                }
                ndim as usize
            }
            Kind::Ragged => {
                if ndim == 0 || ndim > 32 {
                    return Err(Error::corrupt(at(40), "record rank", "1..=32", ndim));
                }
                0
            }
        };
        let expect_total =
            MANIFEST_FIXED + 8 * dense_dims + SHARD_DESC * nshards as usize + dict_len + 4;
        if expect_total != total {
            return Err(Error::corrupt(
                at(12),
                "manifest length from its fields",
                expect_total,
                total,
            ));
        }
        if entry != entry_size(kind, ndim) {
            return Err(Error::corrupt(
                at(76),
                "index entry size",
                entry_size(kind, ndim),
                entry,
            ));
        }
        let mut off = MANIFEST_FIXED;
        let mut item_shape = Vec::with_capacity(dense_dims);
        for _ in 0..dense_dims {
            item_shape.push(rd_u64(bytes, off));
            off += 8;
        }
        let mut shards = Vec::with_capacity(nshards as usize);
        for _ in 0..nshards {
            if bytes[off + 20..off + 24].iter().any(|&b| b != 0) {
                return Err(Error::corrupt(
                    at(off + 20),
                    "reserved bytes",
                    "zero",
                    "non-zero",
                ));
            }
            shards.push(ShardDesc {
                len: rd_u64(bytes, off),
                records: rd_u64(bytes, off + 8),
                crc: rd_u32(bytes, off + 16),
            });
            off += SHARD_DESC;
        }
        let dict = bytes[off..off + dict_len].to_vec();
        match codec {
            Codec::ZstdDict if dict.is_empty() => {
                return Err(Error::corrupt(
                    at(68),
                    "dictionary length for zstd_dict",
                    "> 0",
                    0,
                ));
            }
            Codec::Raw | Codec::Zstd if !dict.is_empty() => {
                return Err(Error::corrupt(
                    at(68),
                    format!("dictionary length for {}", codec.name()),
                    0,
                    dict.len(),
                ));
            }
            _ => {}
        }
        if dict_id != zstd_dict_id(&dict) {
            return Err(Error::corrupt(
                at(72),
                "dictionary id",
                zstd_dict_id(&dict),
                dict_id,
            ));
        }
        let per_shard = shards
            .iter()
            .try_fold(0u64, |a, s| a.checked_add(s.records));
        if per_shard != Some(records) {
            return Err(Error::corrupt(
                at(48),
                "record count (sum over shards)",
                records,
                per_shard.map_or_else(|| "overflow".to_string(), |n| n.to_string()),
            ));
        }
        for (s, d) in shards.iter().enumerate() {
            let want = records_in_shard(records, block_records, nshards, s as u32);
            if d.records != want {
                return Err(Error::corrupt(
                    at(MANIFEST_FIXED + 8 * dense_dims + SHARD_DESC * s + 8),
                    format!("records in shard {s}"),
                    want,
                    d.records,
                ));
            }
        }
        let m = Manifest {
            uuid,
            kind,
            codec,
            dtype,
            ndim,
            item_shape,
            records,
            block_records,
            zstd_level,
            dict,
            dict_id,
            index_len,
            shards,
        };
        let want = index_file_len(records, m.entry_size());
        if want != Some(m.index_len) {
            return Err(Error::corrupt(
                at(80),
                "index file length",
                want.map_or_else(|| "no overflow".to_string(), |n| n.to_string()),
                m.index_len,
            ));
        }
        if kind == Kind::Dense {
            m.dense_stride().ok_or_else(|| {
                Error::corrupt(at(MANIFEST_FIXED), "item shape size", "<= 2 GiB", "larger")
            })?;
        }
        Ok(m)
    }

    /// Bytes per Dense record (`None` when the shape overflows the record limit).
    pub(crate) fn dense_stride(&self) -> Option<u64> {
        dense_stride(self.dtype, &self.item_shape)
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

/// Length of the index file of `records` entries; `None` when a (hostile) count overflows.
pub(crate) fn index_file_len(records: u64, entry: usize) -> Option<u64> {
    let pages = records.div_ceil(PAGE_ENTRIES);
    records
        .checked_mul(entry as u64)?
        .checked_add(4 * pages)?
        .checked_add(HEADER_LEN as u64)
}

/// Shard that holds record `i`.
#[inline]
pub(crate) fn shard_of(i: u64, block: u64, shards: u32) -> u32 {
    ((i / block) % shards as u64) as u32
}

/// [`shard_of`] for one store, precomputed: shifts and masks where the block size and the shard
/// count are powers of two (the defaults), divisions otherwise. Same results for every `i`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ShardMap {
    block: u64,
    shards: u32,
    /// `log2(block)` when `block` is a power of two.
    block_shift: Option<u32>,
    /// `shards - 1` when `shards` is a power of two.
    shard_mask: Option<u32>,
}

impl ShardMap {
    pub(crate) fn new(block: u64, shards: u32) -> ShardMap {
        ShardMap {
            block,
            shards,
            block_shift: block.is_power_of_two().then(|| block.trailing_zeros()),
            shard_mask: shards.is_power_of_two().then(|| shards - 1),
        }
    }

    #[inline]
    pub(crate) fn shard_of(&self, i: u64) -> u32 {
        let b = match self.block_shift {
            Some(s) => i >> s,
            None => i / self.block,
        };
        match self.shard_mask {
            Some(m) => (b as u32) & m,
            None => (b % u64::from(self.shards)) as u32,
        }
    }
}

/// Position of record `i` among the records of its shard.
#[inline]
#[cfg(test)]
pub(crate) fn local_index(i: u64, block: u64, shards: u32) -> u64 {
    let b = i / block;
    (b / shards as u64) * block + i % block
}

/// Number of the first `records` records that land in shard `s`.
pub(crate) fn records_in_shard(records: u64, block: u64, shards: u32, s: u32) -> u64 {
    let full_blocks = records / block;
    let tail = records % block;
    let s = s as u64;
    let n = shards as u64;
    let mut count = (full_blocks / n) * block;
    if full_blocks % n > s {
        count += block;
    }
    if full_blocks % n == s {
        count += tail;
    }
    count
}

/// Byte offset of entry `i` inside the index file.
#[inline]
pub(crate) fn entry_offset(i: u64, entry: usize) -> usize {
    let page = i / PAGE_ENTRIES;
    HEADER_LEN + (i * entry as u64 + page * 4) as usize
}

/// The zstd dictionary id of a dictionary (0 for raw-content or empty dictionaries).
pub(crate) fn zstd_dict_id(dict: &[u8]) -> u32 {
    if dict.len() >= 8 && dict[..4] == [0x37, 0xA4, 0x30, 0xEC] {
        rd_u32(dict, 4)
    } else {
        0
    }
}

/// Seed of a record's CRC: CRC32C of the container id followed by the record index.
#[inline]
pub(crate) fn record_seed(uuid: &[u8; 16], i: u64) -> u32 {
    record_seed_after(uuid_crc(uuid), i)
}

/// CRC32C of the container id alone: the running value that [`record_seed_after`] extends.
#[inline]
pub(crate) fn uuid_crc(uuid: &[u8; 16]) -> u32 {
    crc32c::crc32c(uuid)
}

/// [`record_seed`] from a precomputed [`uuid_crc`]: CRC32C of `uuid ‖ i as u64 LE`.
#[inline]
pub(crate) fn record_seed_after(uuid_crc: u32, i: u64) -> u32 {
    crate::crc::append_u64(uuid_crc, i)
}

/// Seed of an index page's CRC.
pub(crate) fn page_seed(uuid: &[u8; 16], page: u64) -> u32 {
    let mut b = [0u8; 25];
    b[..16].copy_from_slice(uuid);
    b[16..24].copy_from_slice(&page.to_le_bytes());
    b[24] = 0xA5;
    crc32c::crc32c(&b)
}

/// A decoded index entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    pub offset: u64,
    pub flags: u8,
    pub stored_len: u32,
    pub crc: u32,
}

#[inline]
pub(crate) fn decode_entry(b: &[u8]) -> Entry {
    let word = rd_u64(b, 0);
    Entry {
        offset: word & ((1 << 56) - 1),
        flags: (word >> 56) as u8,
        stored_len: rd_u32(b, 8),
        crc: rd_u32(b, 12),
    }
}

pub(crate) fn encode_entry(e: &Entry, out: &mut Vec<u8>) {
    out.extend_from_slice(&(e.offset | (u64::from(e.flags) << 56)).to_le_bytes());
    out.extend_from_slice(&e.stored_len.to_le_bytes());
    out.extend_from_slice(&e.crc.to_le_bytes());
}

pub(crate) fn encode_shard_header(uuid: &[u8; 16], shard: u32, shards: u32) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[..8].copy_from_slice(&SHARD_MAGIC);
    h[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    h[12..16].copy_from_slice(&shard.to_le_bytes());
    h[16..32].copy_from_slice(uuid);
    h[32..36].copy_from_slice(&shards.to_le_bytes());
    let crc = crc32c::crc32c(&h[..60]);
    h[60..].copy_from_slice(&crc.to_le_bytes());
    h
}

pub(crate) fn encode_index_header(uuid: &[u8; 16], records: u64, entry: usize) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[..8].copy_from_slice(&INDEX_MAGIC);
    h[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    h[12..16].copy_from_slice(&(entry as u32).to_le_bytes());
    h[16..32].copy_from_slice(uuid);
    h[32..40].copy_from_slice(&records.to_le_bytes());
    h[40..44].copy_from_slice(&(PAGE_ENTRIES as u32).to_le_bytes());
    let crc = crc32c::crc32c(&h[..60]);
    h[60..].copy_from_slice(&crc.to_le_bytes());
    h
}

/// Checks a 64-byte header against the one we would have written.
pub(crate) fn check_header(
    found: &[u8],
    expected: &[u8; HEADER_LEN],
    path: &Path,
    shard: Option<u32>,
    what: &str,
) -> Result<()> {
    if found.len() < HEADER_LEN {
        return Err(Error::corrupt(
            Location {
                path: path.to_path_buf(),
                shard,
                offset: Some(0),
                ..Default::default()
            },
            format!("{what} length"),
            format!(">= {HEADER_LEN}"),
            found.len(),
        ));
    }
    let crc = crc32c::crc32c(&found[..60]);
    if crc != rd_u32(found, 60) {
        return Err(Error::corrupt(
            Location {
                path: path.to_path_buf(),
                shard,
                offset: Some(60),
                ..Default::default()
            },
            format!("{what} crc32c"),
            format!("{crc:#010x}"),
            format!("{:#010x}", rd_u32(found, 60)),
        ));
    }
    if let Some(pos) = found[..HEADER_LEN]
        .iter()
        .zip(expected.iter())
        .position(|(a, b)| a != b)
    {
        let field = match pos {
            0..=7 => "magic",
            8..=11 => "format version",
            12..=15 => "shard number / entry size",
            16..=31 => "container id",
            _ => "header field",
        };
        return Err(Error::corrupt(
            Location {
                path: path.to_path_buf(),
                shard,
                offset: Some(pos as u64),
                ..Default::default()
            },
            format!("{what} {field} (belongs to another container or position?)"),
            format!("byte {:#04x}", expected[pos]),
            format!("byte {:#04x}", found[pos]),
        ));
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_map_agrees_with_shard_of() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for block in [1u64, 2, 3, 6, 64, 100, 128, 1 << 20, u64::MAX] {
            for shards in [1u32, 2, 3, 4, 5, 8, 255] {
                let map = ShardMap::new(block, shards);
                for i in (0..300u64).chain([u64::MAX, u64::MAX - 1, 1 << 40]) {
                    assert_eq!(
                        map.shard_of(i),
                        shard_of(i, block, shards),
                        "{i} {block} {shards}"
                    );
                }
                for _ in 0..1000 {
                    let i = next();
                    assert_eq!(
                        map.shard_of(i),
                        shard_of(i, block, shards),
                        "{i} {block} {shards}"
                    );
                }
            }
        }
    }

    #[test]
    fn record_seed_is_the_crc_of_the_id_and_the_index() {
        let uuid: [u8; 16] = std::array::from_fn(|k| (k as u8).wrapping_mul(37) ^ 0x5c);
        for i in [0u64, 1, 255, 256, 1 << 32, u64::MAX] {
            let mut b = uuid.to_vec();
            b.extend_from_slice(&i.to_le_bytes());
            assert_eq!(record_seed(&uuid, i), crc32c::crc32c(&b), "record {i}");
        }
    }

    #[test]
    fn shard_mapping_is_a_bijection_onto_local_slots() {
        for &(n, block, shards) in &[
            (0u64, 1u64, 1u32),
            (17, 1, 4),
            (100, 7, 3),
            (1000, 32, 4),
            (33, 64, 5),
        ] {
            let mut seen = vec![Vec::new(); shards as usize];
            for i in 0..n {
                seen[shard_of(i, block, shards) as usize].push(local_index(i, block, shards));
            }
            for (s, v) in seen.iter().enumerate() {
                let expect: Vec<u64> = (0..v.len() as u64).collect();
                assert_eq!(
                    v, &expect,
                    "shard {s} local slots must be 0..k in record order"
                );
                assert_eq!(v.len() as u64, records_in_shard(n, block, shards, s as u32));
            }
        }
    }

    #[test]
    fn manifest_round_trips() {
        let m = Manifest {
            uuid: [7; 16],
            kind: Kind::Dense,
            codec: Codec::Zstd,
            dtype: DType::Float32,
            ndim: 2,
            item_shape: vec![3, 4],
            records: 10,
            block_records: 4,
            zstd_level: 3,
            dict: vec![],
            dict_id: 0,
            index_len: index_file_len(10, 16).unwrap(),
            shards: (0..2)
                .map(|s| ShardDesc {
                    len: 64,
                    records: records_in_shard(10, 4, 2, s),
                    crc: 1,
                })
                .collect(),
        };
        let b = m.encode();
        assert_eq!(Manifest::decode(&b, Path::new("m")).unwrap(), m);
    }
}
