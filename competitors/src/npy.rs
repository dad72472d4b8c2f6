//! `npy-mmap-raw`: one plain C-order `.npy` file, written here and mapped read-only through the
//! workspace's `.npy` reader (`datasets::npy::NpyFile`); a gather copies each requested record out
//! of the mapping into one output buffer (parallel on rayon's global pool for batches >=
//! [`crate::PAR_MIN_BYTES`]).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use datasets::npy::{NpyFile, descr_of, header};
use zrecord::DType;

use crate::backend::Backend;
use crate::error::{Error, Result, bail};
use crate::interface::{Competitor, Reader, Stored};
use crate::output::Batch;
use crate::source::Geometry;
use crate::source::Source;
use crate::util::{check_indices, fill_dense, fresh_path};

/// Writes a C-order `.npy` file of `shape` from raw native-endian bytes: the `datasets` header,
/// then the payload through one buffered writer (no temporary file, no fsync: the row's timed
/// write is what a user's `np.save` does).
fn write_npy(path: &Path, dtype: DType, shape: &[u64], data: &[u8]) -> Result<()> {
    let expect = shape.iter().product::<u64>() as usize * dtype.itemsize();
    if expect != data.len() {
        bail!(
            "npy: shape {shape:?} of {dtype} needs {expect} bytes, got {}",
            data.len()
        );
    }
    let mut w = BufWriter::with_capacity(1 << 20, File::create(path)?);
    w.write_all(&header(&descr_of(dtype), shape, 0))?;
    w.write_all(data)?;
    w.into_inner()
        .map_err(|e| Error::msg(format!("npy: {e}")))?
        .flush()?;
    Ok(())
}

/// The `npy-mmap-raw` row (Dense only).
///
/// With `checksum_pass` it is `npy-crc-limit` instead, a limit rather than a peer: the same file
/// and gather, then a CRC32C pass over each record of the output with the kernel a verified
/// zrecord gather runs (`zrecord::internals::crc32c_records`): the least work a gather that checks every
/// record must add to npy's copy, the reference for zrecord-raw's verified gather of the same
/// records (docs/performance.md). A reference row of the Dense tables, not a peer.
#[derive(Debug, Default)]
pub struct NpyMmap {
    /// Checksum every gathered record (the `npy-crc-limit` row).
    pub checksum_pass: bool,
}

impl Competitor for NpyMmap {
    fn backend(&self) -> Backend {
        if self.checksum_pass {
            Backend::NpyCrcLimit
        } else {
            Backend::NpyMmapRaw
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
        let shape = [&[d.len()], &d.item_shape[..]].concat();
        write_npy(&path, d.dtype, &shape, d.data)?;
        Ok(Stored::new(self.backend(), dir, source))
    }

    fn open(&self, stored: &Stored) -> Result<Box<dyn Reader>> {
        let map = NpyFile::open(stored.dir.join("data.npy"))?;
        let Some((&n, item)) = map.shape().split_first() else {
            bail!("npy-mmap-raw: 0-d array")
        };
        let item_shape = item.to_vec();
        let elems: u64 = item_shape.iter().product();
        let stride = map.data().len().checked_div(n as usize).unwrap_or(0);
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
    map: NpyFile,
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
            std::hint::black_box(zrecord::internals::crc32c_records(&out.bytes, s));
        }
        Ok(Batch::Dense(Box::new(out)))
    }
}
