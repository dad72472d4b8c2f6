//! `hdf5-raw` / `hdf5-gzip`: libhdf5 through `hdf5-metno` (plus `hdf5-metno-sys` for the
//! per-record hyperslab reads straight into the output buffer).
//!
//! Layout of `store.h5`:
//! * Dense: dataset `records`, shape `(n, *item_shape)`, **chunk = one record** `(1, *item_shape)`;
//!   `hdf5-gzip` adds `deflate(4)`.
//! * Ragged: flat `values` dataset `(total_elements,)` + `offsets` `(n + 1,)` int64 element offsets +
//!   `shapes` `(n, ndim)` uint64. `hdf5-raw` stores `values` contiguous (one hyperslab read per
//!   record is one `pread`); `hdf5-gzip` stores it chunked in 64 KiB chunks with `deflate(4)`.
//!   (vlen was rejected: HDF5 filters never apply to vlen heap data, so a "gzip" vlen store would
//!   not compress the payload, and each vlen element is a separate global-heap object.)
//! * Element types HDF5 has natively (int/uint 8..64, float32/64) are stored typed; every other
//!   dtype (bool, float16, bfloat16, complex, float8) as uint8 with a trailing `itemsize` dimension.
//!
//! File locking is disabled (file access property list): the stores are immutable after the write,
//! and libhdf5 opens files without `O_CLOEXEC`, so any child process spawned meanwhile (e.g. the
//! ArrayRecord helper) would inherit the `flock` and make later opens fail with EAGAIN.
//!
//! Reads: `offsets`/`shapes` are loaded at open; a gather issues one `H5Dread` per requested record
//! (hyperslab on dimension 0, memory type = file type, so no conversion) directly into its slot of
//! the output buffer. libhdf5 serializes every call behind one global lock, so a gather runs on one
//! thread. Raw chunk cache (file access property list): [`CACHE_BYTES_GZIP`] for gzip, 0 for raw.

use std::ffi::c_void;
use std::path::Path;

use hdf5::{Dataspace, Datatype};
use hdf5_sys::h5d::{H5Dread, H5Dwrite};
use hdf5_sys::h5p::H5P_DEFAULT;
use hdf5_sys::h5s::{H5S_ALL, H5S_seloper_t, H5Sselect_hyperslab, H5Sset_extent_simple};
use zrecord::DType;

use crate::backend::Backend;
use crate::error::{Error, Result, bail};
use crate::interface::{Competitor, Reader, Stored};
use crate::output::{Batch, DenseOut, RaggedOut};
use crate::source::Source;
use crate::util::{check_indices, cu_seqlens, fresh_path, gather_shapes};

/// Raw-data chunk cache for `hdf5-gzip` readers: 16 MiB, 65521 hash slots, w0 = 0.75 (libhdf5's
/// default policy). `hdf5-raw` disables the cache (0 bytes): whole-chunk reads then go straight into
/// the output buffer and there is nothing to decompress, so a cache only adds a copy.
pub const CACHE_BYTES_GZIP: usize = 16 << 20;
const CACHE_SLOTS: usize = 65521;
const GZIP_LEVEL: u8 = 4;
const RAGGED_GZIP_CHUNK_BYTES: usize = 64 << 10;

/// The HDF5 rows.
#[derive(Debug, Default)]
pub struct Hdf5 {
    /// `hdf5-gzip` when set, else `hdf5-raw`.
    pub gzip: bool,
}

/// The HDF5 datatype for a dtype, and whether it is native (else: uint8 + trailing itemsize dim).
fn h5_type(dtype: DType) -> Result<(Datatype, bool)> {
    let t = match dtype {
        DType::Int8 => Datatype::from_type::<i8>(),
        DType::Int16 => Datatype::from_type::<i16>(),
        DType::Int32 => Datatype::from_type::<i32>(),
        DType::Int64 => Datatype::from_type::<i64>(),
        DType::UInt8 => Datatype::from_type::<u8>(),
        DType::UInt16 => Datatype::from_type::<u16>(),
        DType::UInt32 => Datatype::from_type::<u32>(),
        DType::UInt64 => Datatype::from_type::<u64>(),
        DType::Float32 => Datatype::from_type::<f32>(),
        DType::Float64 => Datatype::from_type::<f64>(),
        _ => return Ok((Datatype::from_type::<u8>()?, false)),
    };
    Ok((t?, true))
}

/// Writes `bytes` (whole dataset, memory type = dataset type) into `ds`.
fn write_all(ds: &hdf5::Dataset, bytes: &[u8]) -> Result<()> {
    if bytes.is_empty() {
        return Ok(());
    }
    let dt = ds.dtype()?;
    let expect = ds.size() * dt.size();
    if expect != bytes.len() {
        bail!("hdf5: dataset needs {expect} bytes, got {}", bytes.len());
    }
    let rc = hdf5::sync::sync(|| {
        // SAFETY: `bytes` holds exactly the dataset's size in its own element type (checked above),
        // H5S_ALL selects the whole dataset in memory and file, and the ids are live handles.
        unsafe {
            H5Dwrite(
                ds.id(),
                dt.id(),
                H5S_ALL,
                H5S_ALL,
                H5P_DEFAULT,
                bytes.as_ptr().cast::<c_void>(),
            )
        }
    });
    if rc < 0 {
        bail!("hdf5: H5Dwrite failed");
    }
    Ok(())
}

impl Competitor for Hdf5 {
    fn backend(&self) -> Backend {
        Backend::Hdf5Raw.compressed_if(self.gzip)
    }

    fn write(&mut self, source: &Source<'_>, dir: &Path) -> Result<Stored> {
        source.validate()?;
        if source.is_empty() {
            bail!("{}: empty source", self.name());
        }
        let path = fresh_path(dir, "store.h5")?;
        let file = hdf5::File::with_options()
            .with_fapl(|p| p.file_locking(false))
            .create(&path)?;
        let (dt, native) = h5_type(source.dtype())?;
        let it = source.dtype().itemsize();
        match source {
            Source::Dense(d) => {
                let mut dims: Vec<usize> = vec![d.len() as usize];
                dims.extend(d.item_shape.iter().map(|&x| x as usize));
                if !native {
                    dims.push(it);
                }
                let mut chunk = dims.clone();
                chunk[0] = 1;
                let mut b = file
                    .new_dataset_builder()
                    .empty_as(&dt)
                    .shape(dims)
                    .chunk(chunk);
                if self.gzip {
                    b = b.deflate(GZIP_LEVEL);
                }
                let ds = b.create("records")?;
                write_all(&ds, d.data)?;
                // The item shape, so readers can tell a trailing itemsize dim from a real one.
                let shape: Vec<u64> = if d.item_shape.is_empty() {
                    vec![u64::MAX]
                } else {
                    d.item_shape.clone()
                };
                ds.new_attr::<u64>()
                    .shape(shape.len())
                    .create("item_shape")?
                    .write_raw(&shape)?;
            }
            Source::Ragged(r) => {
                let base = r.offsets[0];
                let total = (r.offsets[r.len() as usize] - base) as usize;
                let mut dims = vec![total];
                if !native {
                    dims.push(it);
                }
                let b = file.new_dataset_builder().empty_as(&dt).shape(dims);
                let ds = if self.gzip {
                    let rows = (RAGGED_GZIP_CHUNK_BYTES / it).clamp(1, total.max(1));
                    let chunk: Vec<usize> = if native { vec![rows] } else { vec![rows, it] };
                    b.chunk(chunk).deflate(GZIP_LEVEL).create("values")?
                } else {
                    b.create("values")?
                };
                write_all(&ds, r.payload())?;
                let offs: Vec<i64> = r.offsets.iter().map(|&o| o - base).collect();
                file.new_dataset::<i64>()
                    .shape(offs.len())
                    .create("offsets")?
                    .write_raw(&offs)?;
                let shapes =
                    ndarray::Array2::from_shape_vec((r.len() as usize, r.ndim), r.shapes.to_vec())
                        .map_err(|e| Error::msg(format!("hdf5 shapes: {e}")))?;
                file.new_dataset::<u64>()
                    .shape((r.len() as usize, r.ndim))
                    .create("shapes")?
                    .write(&shapes)?;
            }
        }
        file.close()?;
        Ok(Stored::new(self.backend(), dir, source))
    }

    fn open(&self, stored: &Stored) -> Result<Box<dyn Reader>> {
        let cache = if self.gzip { CACHE_BYTES_GZIP } else { 0 };
        let file = hdf5::File::with_options()
            .with_fapl(|p| p.chunk_cache(CACHE_SLOTS, cache, 0.75).file_locking(false))
            .open(stored.dir.join("store.h5"))?;
        let dense = file.link_exists("records");
        let ds = file.dataset(if dense { "records" } else { "values" })?;
        let dims: Vec<u64> = ds.shape().iter().map(|&x| x as u64).collect();
        let dtype = ds.dtype()?;
        // Bytes of one row of dimension 0: a Dense record, or one Ragged element.
        let row_bytes = dims[1..].iter().product::<u64>() as usize * dtype.size();
        let (n, mspace, kind) = if dense {
            let mut item_shape: Vec<u64> = ds.attr("item_shape")?.read_raw()?;
            if item_shape == [u64::MAX] {
                item_shape.clear();
            }
            let mspace = Dataspace::try_new(row_bytes / dtype.size())?;
            (dims[0], mspace, Kind::Dense { item_shape })
        } else {
            let offsets: Vec<i64> = file.dataset("offsets")?.read_raw()?;
            let sds = file.dataset("shapes")?;
            let (n, ndim, shapes) = (offsets.len() as u64 - 1, sds.shape()[1], sds.read_raw()?);
            let kind = Kind::Ragged {
                offsets,
                shapes,
                ndim,
            };
            (n, Dataspace::try_new(1)?, kind)
        };
        let fspace = ds.space()?;
        Ok(Box::new(Hdf5Reader {
            n,
            dims,
            row_bytes,
            dtype,
            ds,
            fspace,
            mspace,
            kind,
            _file: file,
        }))
    }
}

enum Kind {
    Dense {
        item_shape: Vec<u64>,
    },
    Ragged {
        offsets: Vec<i64>,
        shapes: Vec<u64>,
        ndim: usize,
    },
}

struct Hdf5Reader {
    n: u64,
    dims: Vec<u64>,
    row_bytes: usize,
    dtype: Datatype,
    ds: hdf5::Dataset,
    fspace: Dataspace,
    mspace: Dataspace,
    kind: Kind,
    _file: hdf5::File,
}

// SAFETY: every libhdf5 call made through these handles runs under hdf5-metno's global reentrant
// lock (`hdf5::sync::sync`), and the reader is used by one thread at a time (`&mut self`).
unsafe impl Send for Hdf5Reader {}

impl Hdf5Reader {
    /// Reads `rows` rows of dimension 0 starting at `start` into `dst` (exactly their bytes).
    /// Must run under `hdf5::sync::sync`. The memory dataspace gets the selection's own shape
    /// (same rank as the file selection): with a rank-1 memory dataspace libhdf5 1.10 took a slow
    /// path, ~13 ms per 147 KiB record instead of ~0.15 ms.
    fn read_rows(&self, start: u64, rows: u64, dst: &mut [u8]) -> Result<()> {
        let mut st = vec![0u64; self.dims.len()];
        st[0] = start;
        let mut count = self.dims.clone();
        count[0] = rows;
        // SAFETY: `st`/`count` have the dataset's rank and lie inside its extent (indices checked by
        // the caller); the reader's own memory dataspace is resized to exactly `count`, and `dst`
        // has exactly `rows * row_bytes` bytes in the dataset's own element type (memory type =
        // file type); all ids are live handles owned by `self`.
        let rc = unsafe {
            let rank = count.len() as i32;
            let m = H5Sset_extent_simple(self.mspace.id(), rank, count.as_ptr(), std::ptr::null());
            let s = H5Sselect_hyperslab(
                self.fspace.id(),
                H5S_seloper_t::H5S_SELECT_SET,
                st.as_ptr(),
                std::ptr::null(),
                count.as_ptr(),
                std::ptr::null(),
            );
            if m < 0 || s < 0 {
                -1
            } else {
                H5Dread(
                    self.ds.id(),
                    self.dtype.id(),
                    self.mspace.id(),
                    self.fspace.id(),
                    H5P_DEFAULT,
                    dst.as_mut_ptr().cast(),
                )
            }
        };
        if rc < 0 {
            bail!(
                "hdf5: hyperslab read of rows {start}..{} failed",
                start + rows
            );
        }
        Ok(())
    }
}

impl Reader for Hdf5Reader {
    fn len(&self) -> u64 {
        self.n
    }

    fn gather(&mut self, indices: &[u64]) -> Result<Batch> {
        check_indices(indices, self.n)?;
        let s = self.row_bytes;
        hdf5::sync::sync(|| match &self.kind {
            Kind::Dense { item_shape } => {
                let mut bytes = vec![0u8; indices.len() * s];
                for (k, &i) in indices.iter().enumerate() {
                    self.read_rows(i, 1, &mut bytes[k * s..(k + 1) * s])?;
                }
                let shape = crate::util::batch_shape(indices.len(), item_shape);
                Ok(Batch::Dense(Box::new(DenseOut { bytes, shape })))
            }
            Kind::Ragged {
                offsets,
                shapes,
                ndim,
            } => {
                let rows = |i: u64| (offsets[i as usize + 1] - offsets[i as usize]) as u64;
                let cu = cu_seqlens(indices.iter().map(|&i| rows(i) as usize * s), s)?;
                let mut values = vec![0u8; *cu.last().expect("n + 1") as usize * s];
                let mut at = 0usize;
                for &i in indices.iter().filter(|&&i| rows(i) > 0) {
                    let len = rows(i) as usize * s;
                    let start = offsets[i as usize] as u64;
                    self.read_rows(start, rows(i), &mut values[at..at + len])?;
                    at += len;
                }
                Ok(Batch::Ragged(Box::new(RaggedOut {
                    values,
                    cu_seqlens: cu,
                    shapes: gather_shapes(shapes, *ndim, indices),
                })))
            }
        })
    }
}
