//! [`DenseWriter`]: fixed-shape records, checked and appended in blocks of consecutive records.

use std::fmt;
use std::path::Path;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::format::{self, Codec, Kind};

use super::container::Core;
use super::options::WriterOptions;

/// Target bytes per block of consecutive Dense records that land in the same shard.
const DENSE_BLOCK_BYTES: u64 = 256 << 10;

/// Writes a new Dense container: one fixed-shape array per record.
pub struct DenseWriter {
    core: Core,
    stride: usize,
}

impl fmt::Debug for DenseWriter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DenseWriter")
            .field("path", &self.core.final_path())
            .field("dtype", &self.core.dtype)
            .field("item_shape", &self.core.item_shape)
            .field("codec", &self.core.codec)
            .field("records", &self.core.records)
            .finish()
    }
}

impl DenseWriter {
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
        let block = (DENSE_BLOCK_BYTES / stride).max(1);
        let core = Core::create(
            path.as_ref(),
            Kind::Dense,
            dtype,
            item_shape.len() as u32,
            item_shape.to_vec(),
            block,
            codec,
            opts,
        )?;
        Ok(DenseWriter {
            core,
            stride: stride as usize,
        })
    }

    /// Appends `data.len() / stride` records laid out back to back (C order, native endian). When
    /// this returns, every record is encoded and written; `data` may be reused.
    pub fn append(&mut self, data: &[u8]) -> Result<()> {
        self.core.check_usable()?;
        if !data.len().is_multiple_of(self.stride) {
            return Err(Error::invalid(format!(
                "input of {} bytes is not a whole number of {}-byte records (dtype {}, item shape {:?})",
                data.len(),
                self.stride,
                self.core.dtype,
                self.core.item_shape
            )));
        }
        let n = (data.len() / self.stride) as u64;
        let stride = self.stride;
        self.core.write_records(
            n,
            &|k| &data[k as usize * stride..(k as usize + 1) * stride],
            &|a, b| &data[a as usize * stride..b as usize * stride],
            &|_, _| {},
        )
    }

    /// Records appended so far.
    pub fn len(&self) -> u64 {
        self.core.records
    }

    /// True before the first record.
    pub fn is_empty(&self) -> bool {
        self.core.records == 0
    }

    /// Publishes the container: fsync every file and the temp directory, rename it into place
    /// without replacing anything, fsync the parent. On error nothing is published.
    pub fn close(mut self) -> Result<()> {
        self.core.publish()
    }
}
