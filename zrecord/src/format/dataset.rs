//! A dataset's version manifest, `versions/<n>.zrv`: which parts (each a complete container per
//! column) version `n` of a dataset lists, in global record order, with what opening the dataset
//! needs of each (record count, the CRC32C of each column's manifest file, its bytes on disk), and
//! the schema every part shares. About 50 bytes per part of one column.
//!
//! Layout (little-endian): magic `ZRDSVER\0`, total length `u32`, format `u32`, version `u64`,
//! records `u64`, part count `u32`, column count `u32`; per column: name (`u8` length, bytes),
//! kind `u8`, codec `u8`, dtype name (`u8` length, bytes), rank `u32`, a Dense column's item
//! shape (`rank` × `u64`); per part: name (`u8` length, bytes), records `u64`, per column the
//! manifest's CRC32C `u32` and its bytes on disk `u64`; CRC32C of everything before it. Decoding
//! checks every length against the bytes that remain before it sizes anything.

use std::collections::HashSet;
use std::path::Path;

use crate::dtype::DType;
use crate::error::{Error, Location, Result};

use super::layout::{Codec, Kind, rd_u32, rd_u64};

const MAGIC: [u8; 8] = *b"ZRDSVER\0";
const FORMAT: u32 = 1;
/// Fixed head before the columns.
const HEAD: usize = 40;
/// Most columns a dataset holds.
pub(crate) const MAX_COLUMNS: usize = 64;
/// Most dimensions of a column's records.
const MAX_NDIM: u32 = 32;
/// Longest part or column name.
pub(crate) const MAX_NAME: usize = 128;

/// One column of a dataset: its name (empty for a dataset of one unnamed column, whose parts are
/// containers themselves) and the schema every part's container of it has.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ColumnSchema {
    /// The column's name; `""` for the one column of a single-column dataset.
    pub name: String,
    /// Dense or Ragged.
    pub kind: Kind,
    /// The codec every part's container was written with.
    pub codec: Codec,
    /// Element type.
    pub dtype: DType,
    /// Rank of the item shape (Dense) or of every record (Ragged).
    pub ndim: u32,
    /// A Dense column's item shape (empty for Ragged).
    pub item_shape: Vec<u64>,
}

/// What a version says of one column of one part.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartColumn {
    /// CRC32C of the column's `manifest.zrm` (the part is the one committed when it matches).
    pub manifest_crc: u32,
    /// The container's files' bytes, as committed.
    pub bytes: u64,
}

/// One part as a version lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartEntry {
    /// The part's name under `parts/`.
    pub name: String,
    /// Records in the part (every column holds as many).
    pub records: u64,
    /// One per column, in the version's column order.
    pub columns: Vec<PartColumn>,
}

/// A decoded version manifest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VersionManifest {
    /// The version number (its file is `versions/<version>.zrv`).
    pub version: u64,
    /// The columns, in a fixed order.
    pub columns: Vec<ColumnSchema>,
    /// The parts, in global record order.
    pub parts: Vec<PartEntry>,
}

/// The file name of version `n`: zero-padded so that names sort as numbers.
pub(crate) fn version_file_name(n: u64) -> String {
    format!("{n:020}.zrv")
}

/// The version a file name under `versions/` names, if it is one.
pub(crate) fn version_of_file(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".zrv")?;
    (digits.len() == 20 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

/// Whether `name` may name a part or a column: 1-128 bytes of `[A-Za-z0-9._-]`, not starting
/// with `.` (temporary and hidden names).
pub(crate) fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
}

fn put_name(b: &mut Vec<u8>, name: &str) {
    b.push(name.len() as u8);
    b.extend_from_slice(name.as_bytes());
}

impl VersionManifest {
    /// Records over all parts.
    pub fn records(&self) -> u64 {
        self.parts.iter().map(|p| p.records).sum()
    }

    /// Encodes the manifest. The caller built it from checked parts (names valid, one column
    /// entry per column).
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(HEAD + 64 * self.columns.len() + 64 * self.parts.len());
        b.extend_from_slice(&MAGIC);
        b.extend_from_slice(&[0u8; 4]);
        b.extend_from_slice(&FORMAT.to_le_bytes());
        b.extend_from_slice(&self.version.to_le_bytes());
        b.extend_from_slice(&self.records().to_le_bytes());
        b.extend_from_slice(&(self.parts.len() as u32).to_le_bytes());
        b.extend_from_slice(&(self.columns.len() as u32).to_le_bytes());
        for c in &self.columns {
            put_name(&mut b, &c.name);
            b.push(match c.kind {
                Kind::Dense => 0,
                Kind::Ragged => 1,
            });
            b.push(c.codec.code());
            put_name(&mut b, c.dtype.name());
            b.extend_from_slice(&c.ndim.to_le_bytes());
            for d in &c.item_shape {
                b.extend_from_slice(&d.to_le_bytes());
            }
        }
        for p in &self.parts {
            put_name(&mut b, &p.name);
            b.extend_from_slice(&p.records.to_le_bytes());
            for c in &p.columns {
                b.extend_from_slice(&c.manifest_crc.to_le_bytes());
                b.extend_from_slice(&c.bytes.to_le_bytes());
            }
        }
        let total = (b.len() + 4) as u32;
        b[8..12].copy_from_slice(&total.to_le_bytes());
        let crc = crc32c::crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes and checks a version manifest read from `path`. Nothing is sized from the bytes
    /// before it is checked against what they can hold.
    pub fn decode(bytes: &[u8], path: &Path) -> Result<VersionManifest> {
        let mut r = Reader {
            b: bytes,
            at: 0,
            path,
        };
        if bytes.len() < HEAD + 4 || bytes[..8] != MAGIC {
            return Err(Error::format(
                path,
                "not a zrecord dataset version manifest",
            ));
        }
        let total = rd_u32(bytes, 8) as usize;
        if total != bytes.len() {
            return Err(r.bad(8, "version manifest length", total, bytes.len()));
        }
        let stored = rd_u32(bytes, total - 4);
        let actual = crc32c::crc32c(&bytes[..total - 4]);
        if stored != actual {
            return Err(r.bad(
                total - 4,
                "version manifest crc32c",
                format!("{actual:#010x}"),
                format!("{stored:#010x}"),
            ));
        }
        r.b = &bytes[..total - 4];
        let format = rd_u32(bytes, 12);
        if format != FORMAT {
            return Err(Error::format(
                path,
                format!("dataset format {format}, this build reads {FORMAT}"),
            ));
        }
        let version = rd_u64(bytes, 16);
        let records = rd_u64(bytes, 24);
        let nparts = rd_u32(bytes, 32) as usize;
        let ncols = rd_u32(bytes, 36) as usize;
        r.at = HEAD;
        if ncols == 0 || ncols > MAX_COLUMNS {
            return Err(r.bad(36, "column count", format!("1..={MAX_COLUMNS}"), ncols));
        }
        let mut columns = Vec::with_capacity(ncols);
        for _ in 0..ncols {
            columns.push(r.column(ncols)?);
        }
        let mut seen = HashSet::new();
        if !columns.iter().all(|c| seen.insert(c.name.as_str())) {
            return Err(r.bad(HEAD, "column names", "unique", "a repeated name"));
        }
        // Every part takes at least a 1-byte name, its records and 12 bytes per column.
        let min_part = 2 + 8 + 12 * ncols;
        if nparts > r.left() / min_part {
            return Err(r.bad(
                32,
                "part count",
                format!(
                    "<= {} (what the file's bytes can hold)",
                    r.left() / min_part
                ),
                nparts,
            ));
        }
        let mut parts = Vec::with_capacity(nparts);
        let mut sum = 0u64;
        let mut names = HashSet::with_capacity(nparts);
        for _ in 0..nparts {
            let at = r.at;
            let name = r.name()?;
            if !valid_name(&name) {
                return Err(r.bad(at, "part name", "1-128 bytes of [A-Za-z0-9._-]", &name));
            }
            if !names.insert(name.clone()) {
                return Err(r.bad(at, "part name", "listed once", format!("{name} again")));
            }
            let n = r.u64()?;
            sum = sum
                .checked_add(n)
                .ok_or_else(|| r.bad(at, "record count", "< 2^64 in all", "an overflow"))?;
            let mut cols = Vec::with_capacity(ncols);
            for _ in 0..ncols {
                cols.push(PartColumn {
                    manifest_crc: r.u32()?,
                    bytes: r.u64()?,
                });
            }
            parts.push(PartEntry {
                name,
                records: n,
                columns: cols,
            });
        }
        if r.left() != 0 {
            return Err(r.bad(r.at, "version manifest end", "the crc32c", "trailing bytes"));
        }
        if sum != records {
            return Err(r.bad(24, "record count (sum of the parts')", sum, records));
        }
        Ok(VersionManifest {
            version,
            columns,
            parts,
        })
    }
}

/// A bounds-checked cursor over a version manifest's body.
struct Reader<'a> {
    b: &'a [u8],
    at: usize,
    path: &'a Path,
}

impl Reader<'_> {
    fn bad(
        &self,
        offset: usize,
        what: &str,
        expected: impl std::fmt::Display,
        found: impl std::fmt::Display,
    ) -> Error {
        Error::corrupt(
            Location {
                path: self.path.to_path_buf(),
                offset: Some(offset as u64),
                ..Default::default()
            },
            what,
            expected,
            found,
        )
    }

    fn left(&self) -> usize {
        self.b.len() - self.at
    }

    fn take(&mut self, n: usize) -> Result<&[u8]> {
        if self.left() < n {
            return Err(self.bad(self.at, "version manifest length", "more bytes", "its end"));
        }
        let s = &self.b[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }

    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }

    fn u32(&mut self) -> Result<u32> {
        Ok(rd_u32(self.take(4)?, 0))
    }

    fn u64(&mut self) -> Result<u64> {
        Ok(rd_u64(self.take(8)?, 0))
    }

    fn name(&mut self) -> Result<String> {
        let at = self.at;
        let n = self.u8()? as usize;
        let bytes = self.take(n)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| self.bad(at, "name", "utf-8", "other bytes"))
    }

    fn column(&mut self, ncols: usize) -> Result<ColumnSchema> {
        let at = self.at;
        let name = self.name()?;
        if !(valid_name(&name) || (name.is_empty() && ncols == 1)) {
            return Err(self.bad(at, "column name", "[A-Za-z0-9._-]", &name));
        }
        let kind = match self.u8()? {
            0 => Kind::Dense,
            1 => Kind::Ragged,
            k => return Err(self.bad(self.at - 1, "column kind", "0 or 1", k)),
        };
        let code = self.u8()?;
        let codec =
            Codec::from_code(code).ok_or_else(|| self.bad(self.at - 1, "codec", "0..=2", code))?;
        let dt_at = self.at;
        let dt = self.name()?;
        let dtype = DType::from_name(&dt)
            .ok_or_else(|| self.bad(dt_at, "dtype", "a zrecord dtype name", &dt))?;
        let ndim = self.u32()?;
        let shaped = match kind {
            Kind::Dense => ndim,
            Kind::Ragged => 0,
        };
        if ndim > MAX_NDIM || (kind == Kind::Ragged && ndim == 0) {
            return Err(self.bad(self.at - 4, "rank", format!("<= {MAX_NDIM}"), ndim));
        }
        let mut item_shape = Vec::with_capacity(shaped as usize);
        for _ in 0..shaped {
            item_shape.push(self.u64()?);
        }
        Ok(ColumnSchema {
            name,
            kind,
            codec,
            dtype,
            ndim,
            item_shape,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(parts: usize) -> VersionManifest {
        VersionManifest {
            version: 7,
            columns: vec![
                ColumnSchema {
                    name: "image".into(),
                    kind: Kind::Dense,
                    codec: Codec::Raw,
                    dtype: DType::UInt8,
                    ndim: 3,
                    item_shape: vec![8, 8, 3],
                },
                ColumnSchema {
                    name: "tokens".into(),
                    kind: Kind::Ragged,
                    codec: Codec::Zstd,
                    dtype: DType::Int32,
                    ndim: 1,
                    item_shape: vec![],
                },
            ],
            parts: (0..parts)
                .map(|k| PartEntry {
                    name: format!("part-{k:05}"),
                    records: 10 + k as u64,
                    columns: vec![
                        PartColumn {
                            manifest_crc: k as u32,
                            bytes: 100,
                        },
                        PartColumn {
                            manifest_crc: !(k as u32),
                            bytes: 200,
                        },
                    ],
                })
                .collect(),
        }
    }

    #[test]
    fn round_trips_and_rejects_every_single_byte_change() {
        let m = sample(3);
        let b = m.encode();
        let p = Path::new("v");
        assert_eq!(VersionManifest::decode(&b, p).unwrap(), m);
        for i in 0..b.len() {
            let mut bad = b.clone();
            bad[i] ^= 0x20;
            assert!(VersionManifest::decode(&bad, p).is_err(), "byte {i}");
        }
        for cut in 0..b.len() {
            assert!(VersionManifest::decode(&b[..cut], p).is_err(), "cut {cut}");
        }
    }

    #[test]
    fn a_part_count_beyond_the_bytes_is_refused_before_anything_is_sized() {
        let mut b = sample(1).encode();
        b[32..36].copy_from_slice(&u32::MAX.to_le_bytes());
        let n = b.len() - 4;
        let crc = crc32c::crc32c(&b[..n]);
        b[n..].copy_from_slice(&crc.to_le_bytes());
        let e = VersionManifest::decode(&b, Path::new("v")).unwrap_err();
        assert!(e.to_string().contains("part count"), "{e}");
    }

    #[test]
    fn one_column_parts_take_under_a_hundred_bytes() {
        let one_column = |n| {
            let mut m = sample(n);
            m.columns.truncate(1);
            for p in &mut m.parts {
                p.columns.truncate(1);
                p.name = format!("w{:03}-{:032x}", 7, u128::MAX);
            }
            m.encode().len()
        };
        let per_part = (one_column(1000) - one_column(0)) / 1000;
        assert!(per_part <= 100, "{per_part} bytes per part");
    }

    #[test]
    fn version_names_sort_as_numbers() {
        assert_eq!(version_of_file(&version_file_name(42)), Some(42));
        assert!(version_file_name(9) < version_file_name(10));
        assert_eq!(version_of_file("42.zrv"), None);
        assert!(valid_name("part-01.a_b") && !valid_name(".tmp") && !valid_name("a/b"));
    }
}
