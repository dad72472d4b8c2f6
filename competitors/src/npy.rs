//! `npy-mmap-raw` plus a minimal `.npy` (format 1.0/2.0) writer and mmap reader.
//!
//! The datasets crate owns the project's real `.npy` support; this module keeps only what the
//! `npy-mmap-raw` row needs so that the competitors crate does not depend on it. The store is one
//! plain C-order `.npy` file; a gather copies each requested record out of the read-only mapping
//! into one output buffer (parallel on rayon's global pool for batches >= [`crate::PAR_MIN_BYTES`]).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use memmap2::Mmap;
use zrecord::DType;

use crate::error::{Error, Result, bail};
use crate::interface::{Competitor, Reader, Stored};
use crate::output::Batch;
use crate::source::Geometry;
use crate::source::Source;
use crate::util::{check_indices, fill_dense, fresh_path};

const MAGIC: &[u8] = b"\x93NUMPY";

/// NumPy `descr` for a dtype (little-endian; types NumPy lacks natively, like bfloat16 and the
/// float8 family, are written as opaque void of the same size, which is what `np.save` does for
/// ml_dtypes arrays).
pub fn descr(dtype: DType) -> String {
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

/// Writes a C-order `.npy` file of `shape` from raw native-endian bytes.
pub fn write_npy(path: &Path, dtype: DType, shape: &[u64], data: &[u8]) -> Result<()> {
    let expect = shape.iter().product::<u64>() as usize * dtype.itemsize();
    if expect != data.len() {
        bail!(
            "npy: shape {shape:?} of {dtype} needs {expect} bytes, got {}",
            data.len()
        );
    }
    let dims: Vec<String> = shape.iter().map(u64::to_string).collect();
    let shape_txt = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let mut header = format!(
        "{{'descr': '{}', 'fortran_order': False, 'shape': {shape_txt}, }}",
        descr(dtype)
    );
    // Pad so that magic + version + length + header + '\n' is a multiple of 64.
    let fixed = MAGIC.len() + 2 + 2;
    let total = (fixed + header.len() + 1).div_ceil(64) * 64;
    header.extend(std::iter::repeat_n(' ', total - fixed - header.len() - 1));
    header.push('\n');
    let mut w = BufWriter::with_capacity(1 << 20, File::create(path)?);
    w.write_all(MAGIC)?;
    w.write_all(&[1, 0])?;
    w.write_all(&(header.len() as u16).to_le_bytes())?;
    w.write_all(header.as_bytes())?;
    w.write_all(data)?;
    w.into_inner()
        .map_err(|e| Error::msg(format!("npy: {e}")))?
        .flush()?;
    Ok(())
}

/// A memory-mapped `.npy` file.
#[derive(Debug)]
pub struct NpyMap {
    map: Mmap,
    offset: usize,
    descr: String,
    shape: Vec<u64>,
}

impl NpyMap {
    /// Maps `path` read-only and parses its header (C order only).
    pub fn open(path: &Path) -> Result<NpyMap> {
        let file = File::open(path)?;
        // SAFETY: the file is a benchmark store nobody modifies while it is mapped; the mapping is
        // read-only and only ever read through `&[u8]`.
        let map = unsafe { Mmap::map(&file)? };
        if map.len() < 10 || &map[..6] != MAGIC {
            bail!("{}: not a .npy file", path.display());
        }
        let (hlen, start) = match map[6] {
            1 => (u16::from_le_bytes([map[8], map[9]]) as usize, 10),
            2 | 3 => (
                u32::from_le_bytes(map[8..12].try_into().expect("4 bytes")) as usize,
                12,
            ),
            v => bail!("{}: unsupported .npy version {v}", path.display()),
        };
        let header = std::str::from_utf8(&map[start..start + hlen])
            .map_err(|e| Error::msg(format!("npy header: {e}")))?;
        let field = |key: &str| -> Result<&str> {
            let at = header
                .find(key)
                .ok_or_else(|| Error::msg(format!("npy header lacks {key}")))?;
            Ok(header[at + key.len()..].trim_start_matches([':', ' ']))
        };
        let descr_txt = field("'descr'")?;
        let descr = descr_txt
            .trim_start_matches('\'')
            .split('\'')
            .next()
            .unwrap_or_default()
            .to_string();
        if field("'fortran_order'")?.starts_with("True") {
            bail!(
                "{}: fortran_order .npy files are not supported",
                path.display()
            );
        }
        let shape_txt = field("'shape'")?;
        let inner = shape_txt
            .trim_start_matches('(')
            .split(')')
            .next()
            .unwrap_or_default();
        let shape = inner
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| {
                s.trim_end_matches('L')
                    .parse::<u64>()
                    .map_err(|e| Error::msg(format!("npy shape: {e}")))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(NpyMap {
            map,
            offset: start + hlen,
            descr,
            shape,
        })
    }

    /// The NumPy `descr` string.
    pub fn descr(&self) -> &str {
        &self.descr
    }

    /// The array shape.
    pub fn shape(&self) -> &[u64] {
        &self.shape
    }

    /// The payload (everything after the header).
    pub fn data(&self) -> &[u8] {
        &self.map[self.offset..]
    }
}

/// The `npy-mmap-raw` row (Dense only).
///
/// With `checksum_pass` it is `npy-crc-limit` instead, a limit rather than a peer: the same file
/// and gather, then a CRC32C pass over each record of the output with the kernel a verified
/// zrecord gather runs (`zrecord::bench_crc32c_records`): the least work a gather that checks every
/// record must add to npy's copy, the reference for zrecord-raw's verified gather of the same
/// records (docs/performance.md). A reference row of the Dense tables, not a peer.
#[derive(Debug, Default)]
pub struct NpyMmap {
    /// Checksum every gathered record (the `npy-crc-limit` row).
    pub checksum_pass: bool,
}

impl Competitor for NpyMmap {
    fn name(&self) -> &'static str {
        if self.checksum_pass {
            "npy-crc-limit"
        } else {
            "npy-mmap-raw"
        }
    }

    fn supports(&self, geometry: Geometry) -> bool {
        geometry == Geometry::Dense
    }

    fn write(&mut self, source: &Source<'_>, dir: &Path) -> Result<Stored> {
        let Source::Dense(d) = source else {
            bail!("npy-mmap-raw: Dense only")
        };
        d.validate()?;
        let path = fresh_path(dir, "data.npy")?;
        let mut shape = vec![d.len()];
        shape.extend_from_slice(&d.item_shape);
        write_npy(&path, d.dtype, &shape, d.data)?;
        Ok(Stored {
            backend: self.name(),
            dir: dir.to_path_buf(),
            geometry: Geometry::Dense,
            len: d.len(),
            write_seconds: None,
        })
    }

    fn open(&self, stored: &Stored) -> Result<Box<dyn Reader>> {
        let map = NpyMap::open(&stored.dir.join("data.npy"))?;
        let Some((&n, item)) = map.shape().split_first() else {
            bail!("npy-mmap-raw: 0-d array")
        };
        let item_shape = item.to_vec();
        let elems: u64 = item_shape.iter().product();
        let stride = if n == 0 {
            0
        } else {
            map.data().len() / n as usize
        };
        if elems == 0 || !stride.is_multiple_of(elems as usize) {
            bail!("npy-mmap-raw: inconsistent payload");
        }
        Ok(Box::new(NpyReader {
            map,
            n,
            stride,
            item_shape,
            checksum_pass: self.checksum_pass,
        }))
    }
}

struct NpyReader {
    map: NpyMap,
    n: u64,
    stride: usize,
    item_shape: Vec<u64>,
    /// `npy-crc-limit`: a CRC32C pass over each gathered record.
    checksum_pass: bool,
}

impl Reader for NpyReader {
    fn len(&self) -> u64 {
        self.n
    }

    fn gather(&mut self, indices: &[u64]) -> Result<Batch> {
        check_indices(indices, self.n)?;
        let (data, s) = (self.map.data(), self.stride);
        let out = fill_dense(indices.len(), s, &self.item_shape, |k| {
            let i = indices[k] as usize;
            &data[i * s..(i + 1) * s]
        });
        if self.checksum_pass {
            std::hint::black_box(zrecord::bench_crc32c_records(&out.bytes, s));
        }
        Ok(Batch::Dense(Box::new(out)))
    }
}
