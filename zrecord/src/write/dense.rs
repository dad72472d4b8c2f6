//! [`DenseWriter`](super::writer::DenseWriter): fixed-shape records, checked and appended in blocks of consecutive records.

use std::path::Path;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::format::{self, Codec};
use crate::read::Dense;

use super::container::{BLOCK_BYTES, Shape};
use super::options::WriterOptions;
use super::writer::Writer;

impl Writer<Dense> {
    /// Starts a new container at `path` (which must not exist). Nothing is visible at `path` until
    /// [`close`](Self::close) returns.
    pub fn create(
        path: impl AsRef<Path>,
        dtype: DType,
        item_shape: &[u64],
        codec: Codec,
        opts: WriterOptions,
    ) -> Result<Self> {
        if item_shape.len() > 32 {
            return Err(Error::invalid(format!(
                "item rank {} exceeds 32",
                item_shape.len()
            )));
        }
        if item_shape.contains(&0) {
            return Err(Error::invalid(format!(
                "item shape {item_shape:?} has a zero dimension (records must be non-empty)"
            )));
        }
        let stride = format::dense_stride(dtype, item_shape).ok_or_else(|| {
            Error::LimitExceeded(format!(
                "a record of shape {item_shape:?} {dtype} exceeds 2 GiB"
            ))
        })?;
        let shape = Shape {
            ndim: item_shape.len() as u32,
            item_shape: item_shape.to_vec(),
        };
        let block = (BLOCK_BYTES / stride).max(1);
        Self::start(path.as_ref(), dtype, shape, block, codec, opts)
    }

    /// Bytes per record (checked against the 2 GiB limit by `create`).
    fn stride(&self) -> usize {
        let elements: u64 = self.core.shape.item_shape.iter().product();
        elements as usize * self.core.dtype.itemsize()
    }

    /// Appends `data.len() / stride` records laid out back to back (C order, native endian). When
    /// this returns, every record is encoded and written; `data` may be reused.
    pub fn append(&mut self, data: &[u8]) -> Result<()> {
        self.core.check_usable()?;
        let stride = self.stride();
        if !data.len().is_multiple_of(stride) {
            return Err(Error::invalid(format!(
                "input of {} bytes is not a whole number of {stride}-byte records (dtype {}, item shape {:?})",
                data.len(),
                self.core.dtype,
                self.core.shape.item_shape
            )));
        }
        let n = (data.len() / stride) as u64;
        self.core.write_records(
            n,
            &|k| &data[k as usize * stride..(k as usize + 1) * stride],
            &|a, b| &data[a as usize * stride..b as usize * stride],
            &|_, _| {},
        )
    }
}
