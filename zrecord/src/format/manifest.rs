//! `manifest.zrm`: the [`Manifest`] (schema, counts, per-shard descriptors, dictionary), its
//! encoding, and its decoding, which checks every field before anything trusts it.

use std::path::{Path, PathBuf};

use crate::dtype::DType;
use crate::error::{Error, Location, Result};

use super::index::index_file_len;
use super::layout::{
    Codec, FORMAT_VERSION, INDEX_FILE, Kind, MANIFEST_FILE, MANIFEST_FIXED, MANIFEST_MAGIC,
    MAX_DTYPE_NAME, SHARD_DESC, dense_stride, entry_size, rd_u32, rd_u64, shard_file_name,
};
use super::placement::records_in_shard;

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

/// Paths of the files inside the local container at `path`, manifest first, then the index and
/// the shards in shard order (for tools, tests and a publish to object storage).
pub fn container_files(path: impl AsRef<Path>) -> Result<Vec<PathBuf>> {
    let p = path.as_ref();
    let mp = p.join(MANIFEST_FILE);
    let bytes = std::fs::read(&mp).map_err(|e| Error::io("read", &mp, e))?;
    let m = Manifest::decode(&bytes, &mp)?;
    let mut v = vec![mp, p.join(INDEX_FILE)];
    v.extend((0..m.shard_count()).map(|s| p.join(shard_file_name(s))));
    Ok(v)
}

/// The zstd dictionary id of a dictionary (0 for raw-content or empty dictionaries).
pub(crate) fn zstd_dict_id(dict: &[u8]) -> u32 {
    if dict.len() >= 8 && dict[..4] == [0x37, 0xA4, 0x30, 0xEC] {
        rd_u32(dict, 4)
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
