//! A small `.npy` (NumPy array file) writer and memory-mapped reader: the workspace's one
//! `.npy` reader (the competitors' `npy-mmap-raw` row maps its store through [`NpyFile`] too).
//!
//! Format (NumPy NEP 1): the magic `\x93NUMPY`, a major/minor version byte pair, a header
//! length (`u16` LE for version 1.0, `u32` LE for 2.0 and 3.0), then a Python-literal dict
//! `{'descr': '<i4', 'fortran_order': False, 'shape': (N, 512), }` padded with spaces and
//! ending in `\n` so that the payload starts at a multiple of 64 bytes. The payload is the
//! array in C order.
//!
//! The writer emits version 1.0 whenever the header fits in 65,535 bytes (always, for the
//! arrays this crate writes) and 2.0 otherwise; the reader accepts 1.0, 2.0 and 3.0.
//! Writers stream: bytes are appended with [`NpyWriter::write`] and the payload size is
//! checked against the shape in [`NpyWriter::finish`]. When the leading dimension is not
//! known in advance ([`NpyWriter::create_growable`]) a fixed-width header is reserved and
//! patched at `finish`. Files are written to `<path>.tmp` and renamed into place only
//! after a successful `finish`, so a crash never leaves a plausible-looking partial file.

use std::fs::{self, File};
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use memmap2::Mmap;
use zrecord::DType;

use crate::error::{Error, Result};

const MAGIC: &[u8; 6] = b"\x93NUMPY";
const ALIGN: usize = 64;

/// Element size in bytes for a supported `descr` (`[<>|=][biuf]N`, plus `c` complex and `|VN`,
/// the opaque void NumPy writes for ml_dtypes arrays such as bfloat16).
pub fn itemsize(descr: &str) -> Option<usize> {
    let bytes = descr.as_bytes();
    if bytes.len() < 3 || !matches!(bytes[0], b'<' | b'>' | b'|' | b'=') {
        return None;
    }
    if !matches!(bytes[1], b'b' | b'i' | b'u' | b'f' | b'c' | b'V') {
        return None;
    }
    let size: usize = descr[2..].parse().ok()?;
    let valid = match bytes[1] {
        b'b' => size == 1,
        b'f' => matches!(size, 2 | 4 | 8 | 16),
        b'c' => matches!(size, 8 | 16 | 32),
        b'V' => bytes[0] == b'|' && size >= 1,
        _ => matches!(size, 1 | 2 | 4 | 8),
    };
    valid.then_some(size)
}

/// The little-endian `descr` of `dtype`. Types NumPy lacks natively (bfloat16, the float8
/// family) are opaque void of the same size (`|V2`, `|V1`), which is what `np.save` writes for
/// ml_dtypes arrays.
pub fn descr_of(dtype: DType) -> String {
    match dtype {
        DType::Bool => "|b1".into(),
        DType::Int8 => "|i1".into(),
        DType::UInt8 => "|u1".into(),
        DType::Int16 => "<i2".into(),
        DType::Int32 => "<i4".into(),
        DType::Int64 => "<i8".into(),
        DType::UInt16 => "<u2".into(),
        DType::UInt32 => "<u4".into(),
        DType::UInt64 => "<u8".into(),
        DType::Float16 => "<f2".into(),
        DType::Float32 => "<f4".into(),
        DType::Float64 => "<f8".into(),
        DType::Complex64 => "<c8".into(),
        DType::Complex128 => "<c16".into(),
        other => format!("|V{}", other.itemsize()),
    }
}

/// The dtype a little-endian (or byte-order-free) `descr` names: the inverse of [`descr_of`],
/// where a one-byte type may carry any byte-order mark. `None` for opaque void (several dtypes
/// share it), big-endian data and what zrecord has no dtype for.
pub fn dtype_of(descr: &str) -> Option<DType> {
    let (order, body) = (descr.get(..1)?, descr.get(1..)?);
    DType::ALL.iter().copied().find(|&d| {
        let want = descr_of(d);
        !body.starts_with('V')
            && (want == descr
                || (d.itemsize() == 1 && matches!(order, "<" | "=") && want[1..] == *body))
    })
}

fn shape_literal(shape: &[u64]) -> String {
    match shape {
        [] => "()".to_string(),
        [one] => format!("({one},)"),
        many => {
            let parts: Vec<String> = many.iter().map(|d| d.to_string()).collect();
            format!("({})", parts.join(", "))
        }
    }
}

/// The complete preamble (magic, version, length, then the header dict padded with spaces and a
/// newline) of a C-order array of `shape` and element type `descr`, at least `min_len` bytes long
/// and a multiple of 64: what [`NpyWriter`] writes before the payload, for writers that stream
/// the payload themselves (`min_len` 0 for the shortest; a larger one pads the dict, as a file
/// whose payload should start at a page boundary wants).
pub fn header(descr: &str, shape: &[u64], min_len: usize) -> Vec<u8> {
    build_header(descr, shape, min_len.saturating_sub(11))
}

/// Build the complete preamble (magic + version + length + padded dict). `min_dict_len`
/// forces the dict to at least that many bytes (used to reserve room for patching).
fn build_header(descr: &str, shape: &[u64], min_dict_len: usize) -> Vec<u8> {
    let dict = format!(
        "{{'descr': '{descr}', 'fortran_order': False, 'shape': {}, }}",
        shape_literal(shape)
    );
    let wanted = dict.len().max(min_dict_len) + 1; // + '\n'
    // Version 1.0 stores the dict length in a u16; fall back to 2.0 (u32) beyond that.
    let v1_dict_len = (10 + wanted).div_ceil(ALIGN) * ALIGN - 10;
    let (prefix_len, version) = if v1_dict_len <= usize::from(u16::MAX) {
        (10usize, 1u8)
    } else {
        (12usize, 2u8)
    };
    let total = (prefix_len + wanted).div_ceil(ALIGN) * ALIGN;
    let dict_len = total - prefix_len;
    let mut out = Vec::with_capacity(total);
    out.extend_from_slice(MAGIC);
    out.push(version);
    out.push(0);
    if version == 1 {
        out.extend_from_slice(&(dict_len as u16).to_le_bytes());
    } else {
        out.extend_from_slice(&(dict_len as u32).to_le_bytes());
    }
    out.extend_from_slice(dict.as_bytes());
    out.resize(total - 1, b' ');
    out.push(b'\n');
    out
}

/// Streaming `.npy` writer.
#[derive(Debug)]
pub struct NpyWriter {
    path: PathBuf,
    tmp: PathBuf,
    out: BufWriter<File>,
    descr: String,
    shape: Vec<u64>,
    itemsize: u64,
    growable: bool,
    header_len: usize,
    written: u64,
}

impl NpyWriter {
    /// Create `path` for an array of known `shape` with element type `descr` (e.g. `"|u1"`).
    pub fn create(path: impl AsRef<Path>, descr: &str, shape: &[u64]) -> Result<Self> {
        Self::open(path.as_ref(), descr, shape.to_vec(), false)
    }

    /// Create `path` for an array whose leading dimension is unknown until [`finish`]
    /// (it is derived from the bytes written); `rest` are the trailing dimensions.
    ///
    /// [`finish`]: NpyWriter::finish
    pub fn create_growable(path: impl AsRef<Path>, descr: &str, rest: &[u64]) -> Result<Self> {
        let mut shape = vec![0u64];
        shape.extend_from_slice(rest);
        Self::open(path.as_ref(), descr, shape, true)
    }

    fn open(path: &Path, descr: &str, shape: Vec<u64>, growable: bool) -> Result<Self> {
        let item = itemsize(descr).ok_or_else(|| {
            Error::header(
                path,
                "a plain numeric descr such as '|u1', '<i4', '<i8', '<u8', '<f4'",
                format!("'{descr}'"),
            )
        })? as u64;
        let mut header = build_header(descr, &shape, 0);
        if growable {
            // Reserve room for the largest possible leading dimension.
            let mut widest = shape.clone();
            widest[0] = u64::MAX;
            let reserve = build_header(descr, &widest, 0).len();
            header = build_header(descr, &shape, reserve.saturating_sub(11));
        }
        let tmp = crate::staging_path(path, ".tmp");
        let file = File::create(&tmp).map_err(|e| Error::io(&tmp, "create", e))?;
        let mut out = BufWriter::with_capacity(1 << 20, file);
        out.write_all(&header)
            .map_err(|e| Error::io(&tmp, "write", e))?;
        Ok(NpyWriter {
            path: path.to_path_buf(),
            tmp,
            out,
            descr: descr.to_string(),
            shape,
            itemsize: item,
            growable,
            header_len: header.len(),
            written: 0,
        })
    }

    /// Append raw payload bytes (C order, the element type's byte order).
    pub fn write(&mut self, bytes: &[u8]) -> Result<()> {
        self.out
            .write_all(bytes)
            .map_err(|e| Error::io(&self.tmp, "write", e))?;
        self.written += bytes.len() as u64;
        Ok(())
    }

    /// Payload bytes written so far.
    pub fn bytes_written(&self) -> u64 {
        self.written
    }

    /// Check the payload size, patch the header of a growable array, flush, and rename the
    /// file into place. Returns the final shape.
    pub fn finish(mut self) -> Result<Vec<u64>> {
        if self.growable {
            let row: u64 = self.shape[1..].iter().product::<u64>() * self.itemsize;
            if row == 0 || !self.written.is_multiple_of(row) {
                return Err(self.fail_size(self.written.next_multiple_of(row.max(1))));
            }
            self.shape[0] = self.written / row;
            let header = build_header(&self.descr, &self.shape, self.header_len - 11);
            if header.len() != self.header_len {
                return Err(Error::header(
                    &self.tmp,
                    format!("a patched header of {} bytes", self.header_len),
                    format!("{} bytes", header.len()),
                ));
            }
            self.out
                .seek(SeekFrom::Start(0))
                .and_then(|_| self.out.write_all(&header))
                .map_err(|e| Error::io(&self.tmp, "write", e))?;
        } else {
            let expected = self.shape.iter().product::<u64>() * self.itemsize;
            if expected != self.written {
                return Err(self.fail_size(expected));
            }
        }
        let file = self
            .out
            .into_inner()
            .map_err(|e| Error::io(&self.tmp, "flush", e.into_error()))?;
        file.sync_all()
            .map_err(|e| Error::io(&self.tmp, "sync", e))?;
        drop(file);
        fs::rename(&self.tmp, &self.path).map_err(|e| Error::io(&self.path, "rename", e))?;
        Ok(self.shape)
    }

    fn fail_size(&self, expected: u64) -> Error {
        let _ = fs::remove_file(&self.tmp);
        Error::NpySize {
            path: self.path.clone(),
            expected,
            found: self.written,
        }
    }
}

/// Write a complete array in one call.
pub fn write_npy(path: impl AsRef<Path>, descr: &str, shape: &[u64], bytes: &[u8]) -> Result<()> {
    let mut w = NpyWriter::create(path, descr, shape)?;
    w.write(bytes)?;
    w.finish().map(|_| ())
}

/// A memory-mapped `.npy` file.
#[derive(Debug)]
pub struct NpyFile {
    path: PathBuf,
    map: Mmap,
    header: Header,
}

impl NpyFile {
    /// Map `path` and parse its header.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let file = File::open(path).map_err(|e| Error::io(path, "open", e))?;
        // SAFETY: the map is read-only and private to this value; the prepared files are
        // written once (renamed into place) and not modified while mapped. Concurrent
        // truncation by another process would be a misuse this crate cannot prevent (same
        // contract as numpy.load(mmap_mode='r')).
        let map = unsafe { Mmap::map(&file) }.map_err(|e| Error::io(path, "mmap", e))?;
        let header = parse_header(path, &map)?;
        Ok(NpyFile {
            path: path.to_path_buf(),
            map,
            header,
        })
    }

    /// The element type, e.g. `"|u1"`, `"<i4"`, `"<i8"`, `"<u8"`.
    pub fn descr(&self) -> &str {
        &self.header.descr
    }

    /// The array shape.
    pub fn shape(&self) -> &[u64] {
        &self.header.shape
    }

    /// Whether the payload is in Fortran (column-major) order. This crate always writes C order.
    pub fn fortran_order(&self) -> bool {
        self.header.fortran_order
    }

    /// Format version `(major, minor)`.
    pub fn version(&self) -> (u8, u8) {
        self.header.version
    }

    /// Element size in bytes.
    pub fn itemsize(&self) -> usize {
        itemsize(&self.header.descr).unwrap_or(1)
    }

    /// Number of elements (product of the shape).
    pub fn len(&self) -> u64 {
        self.header.shape.iter().product()
    }

    /// Whether the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Byte offset of the payload within the file.
    pub fn data_offset(&self) -> usize {
        self.header.data_offset
    }

    /// The payload (memory-mapped).
    pub fn data(&self) -> &[u8] {
        &self.map[self.header.data_offset..self.header.data_offset + self.header.data_len]
    }

    /// The file path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Decode an 8-byte little-endian integer array (`<i8` or `<u8`) into `u64`s.
    /// Negative `<i8` values are rejected.
    pub fn to_u64_vec(&self) -> Result<Vec<u64>> {
        if self.header.descr != "<i8" && self.header.descr != "<u8" {
            return Err(Error::header(
                &self.path,
                "descr '<i8' or '<u8'",
                &self.header.descr,
            ));
        }
        let signed = self.header.descr == "<i8";
        self.data()
            .chunks_exact(8)
            .map(|c| {
                let mut b = [0u8; 8];
                b.copy_from_slice(c);
                let v = u64::from_le_bytes(b);
                if signed && (v as i64) < 0 {
                    Err(Error::header(
                        &self.path,
                        "non-negative values",
                        format!("{}", v as i64),
                    ))
                } else {
                    Ok(v)
                }
            })
            .collect()
    }
}

/// What a header says: the element type, shape and order, the format version, and where the
/// payload lies.
#[derive(Debug)]
struct Header {
    descr: String,
    shape: Vec<u64>,
    fortran_order: bool,
    version: (u8, u8),
    data_offset: usize,
    data_len: usize,
}

fn parse_header(path: &Path, buf: &[u8]) -> Result<Header> {
    if buf.len() < 10 || &buf[..6] != MAGIC {
        let shown = &buf[..buf.len().min(6)];
        return Err(Error::header(
            path,
            "magic \\x93NUMPY",
            format!("{shown:?}"),
        ));
    }
    let version = (buf[6], buf[7]);
    let (dict_len, prefix) = match version {
        (1, 0) => (u16::from_le_bytes([buf[8], buf[9]]) as usize, 10usize),
        (2, 0) | (3, 0) => {
            if buf.len() < 12 {
                return Err(Error::header(path, "a 12-byte preamble", "end of file"));
            }
            (
                u32::from_le_bytes([buf[8], buf[9], buf[10], buf[11]]) as usize,
                12usize,
            )
        }
        (a, b) => {
            return Err(Error::header(
                path,
                "version 1.0, 2.0 or 3.0",
                format!("{a}.{b}"),
            ));
        }
    };
    let data_offset = prefix
        .checked_add(dict_len)
        .filter(|&end| end <= buf.len())
        .ok_or_else(|| {
            Error::header(
                path,
                format!("a header of {dict_len} bytes"),
                format!("a file of {} bytes", buf.len()),
            )
        })?;
    let raw = &buf[prefix..data_offset];
    let text = std::str::from_utf8(raw)
        .map_err(|_| Error::header(path, "a UTF-8/ASCII header dict", "invalid bytes"))?;
    if version.0 < 3 && !text.is_ascii() {
        return Err(Error::header(
            path,
            "an ASCII header dict",
            "non-ASCII bytes",
        ));
    }
    let dict = parse_dict(text).map_err(|(exp, found)| Error::header(path, exp, found))?;
    let item = itemsize(&dict.descr).ok_or_else(|| {
        Error::header(
            path,
            "a plain numeric descr such as '|u1' or '<i4'",
            format!("'{}'", dict.descr),
        )
    })?;
    let count = dict
        .shape
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .and_then(|c| c.checked_mul(item as u64))
        .ok_or_else(|| Error::header(path, "a shape whose size fits in 64 bits", "overflow"))?;
    let available = (buf.len() - data_offset) as u64;
    if available < count {
        return Err(Error::NpySize {
            path: path.to_path_buf(),
            expected: count,
            found: available,
        });
    }
    Ok(Header {
        descr: dict.descr,
        shape: dict.shape,
        fortran_order: dict.fortran_order,
        version,
        data_offset,
        data_len: count as usize,
    })
}

struct Dict {
    descr: String,
    shape: Vec<u64>,
    fortran_order: bool,
}

type ParseErr = (String, String);

/// Parse the restricted Python dict literal NumPy writes.
fn parse_dict(text: &str) -> std::result::Result<Dict, ParseErr> {
    let err =
        |exp: &str, found: &str| (exp.to_string(), found.chars().take(40).collect::<String>());
    let t = text.trim_end_matches(['\n', ' ', '\0']).trim();
    let inner = t
        .strip_prefix('{')
        .and_then(|s| s.strip_suffix('}'))
        .ok_or_else(|| err("a dict literal '{...}'", t))?;
    let mut descr = None;
    let mut shape = None;
    let mut fortran = None;
    let mut rest = inner.trim_start();
    while !rest.is_empty() {
        let (key, after) = parse_str(rest).ok_or_else(|| err("a quoted key", rest))?;
        let after = after
            .trim_start()
            .strip_prefix(':')
            .ok_or_else(|| err("':' after a key", after))?
            .trim_start();
        let after = match key.as_str() {
            "descr" => {
                let (v, a) = parse_str(after).ok_or_else(|| err("a quoted descr", after))?;
                descr = Some(v);
                a
            }
            "fortran_order" => {
                if let Some(a) = after.strip_prefix("False") {
                    fortran = Some(false);
                    a
                } else if let Some(a) = after.strip_prefix("True") {
                    fortran = Some(true);
                    a
                } else {
                    return Err(err("True or False", after));
                }
            }
            "shape" => {
                let a = after
                    .strip_prefix('(')
                    .ok_or_else(|| err("a shape tuple", after))?;
                let end = a.find(')').ok_or_else(|| err("')'", a))?;
                let mut dims = Vec::new();
                for part in a[..end].split(',') {
                    let p = part.trim().trim_end_matches('L');
                    if p.is_empty() {
                        continue;
                    }
                    dims.push(p.parse::<u64>().map_err(|_| err("a dimension", p))?);
                }
                shape = Some(dims);
                &a[end + 1..]
            }
            other => return Err(err("keys descr, fortran_order, shape", other)),
        };
        let after = after.trim_start();
        rest = match after.strip_prefix(',') {
            Some(r) => r.trim_start(),
            None if after.is_empty() => after,
            None => return Err(err("',' or '}'", after)),
        };
    }
    Ok(Dict {
        descr: descr.ok_or_else(|| err("key 'descr'", inner))?,
        shape: shape.ok_or_else(|| err("key 'shape'", inner))?,
        fortran_order: fortran.ok_or_else(|| err("key 'fortran_order'", inner))?,
    })
}

fn parse_str(s: &str) -> Option<(String, &str)> {
    let q = s.chars().next()?;
    if q != '\'' && q != '"' {
        return None;
    }
    let body = &s[1..];
    let end = body.find(q)?;
    Some((body[..end].to_string(), &body[end + 1..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_is_aligned_and_parsable() {
        for shape in [vec![], vec![5], vec![2, 3, 224, 224]] {
            let h = build_header("<i4", &shape, 0);
            assert_eq!(h.len() % ALIGN, 0);
            assert_eq!(*h.last().unwrap(), b'\n');
            let dict = parse_dict(std::str::from_utf8(&h[10..]).unwrap()).unwrap();
            assert_eq!(dict.shape, shape);
            assert_eq!(dict.descr, "<i4");
        }
    }

    #[test]
    fn numpy_written_headers_parse() {
        let d = parse_dict("{'descr': '<f8', 'fortran_order': True, 'shape': (3L, 4L), }   \n")
            .unwrap();
        assert_eq!(d.shape, vec![3, 4]);
        assert!(d.fortran_order);
        let d =
            parse_dict("{\"shape\": (), \"descr\": \"|u1\", \"fortran_order\": False}").unwrap();
        assert!(d.shape.is_empty());
    }

    #[test]
    fn itemsizes() {
        assert_eq!(itemsize("|u1"), Some(1));
        assert_eq!(itemsize("<i8"), Some(8));
        assert_eq!(itemsize("<f4"), Some(4));
        assert_eq!(itemsize("|O"), None);
        assert_eq!(itemsize("<i3"), None);
        assert_eq!(itemsize("i4"), None);
        assert_eq!(itemsize("|V2"), Some(2));
        assert_eq!(itemsize("<V2"), None);
        assert_eq!(itemsize("|V0"), None);
    }

    #[test]
    fn dtypes_and_descrs_map_both_ways() {
        for &d in DType::ALL {
            let descr = descr_of(d);
            assert_eq!(itemsize(&descr), Some(d.itemsize()), "{d:?}");
            if !descr.starts_with("|V") {
                assert_eq!(dtype_of(&descr), Some(d), "{descr}");
            }
        }
        assert_eq!(dtype_of("<u1"), Some(DType::UInt8));
        assert_eq!(dtype_of("|V2"), None);
        assert_eq!(dtype_of(">i4"), None);
        assert_eq!(dtype_of(""), None);
    }

    #[test]
    fn a_padded_header_ends_where_asked() {
        let h = header("<i4", &[7, 512], 4096);
        assert_eq!(h.len(), 4096);
        assert_eq!(&h[..8], b"\x93NUMPY\x01\x00");
        let dict = parse_dict(std::str::from_utf8(&h[10..]).unwrap()).unwrap();
        assert_eq!((dict.descr.as_str(), dict.shape), ("<i4", vec![7, 512]));
        assert_eq!(
            header("<i4", &[7, 512], 0),
            build_header("<i4", &[7, 512], 0)
        );
    }
}
