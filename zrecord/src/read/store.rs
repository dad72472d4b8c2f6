//! The public store and view types: [`DenseStore`] / [`RaggedStore`] (an open container) and
//! [`DenseView`] / [`RaggedView`] (a store bound to an allocator), their shared accessors (the
//! `store_common!` macro), and the two gathers that size one output allocation and fill it.

use std::fmt;
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use crate::alloc::Allocator;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::format::{Codec, Kind};

use super::batch::{DenseBatch, OUTPUT_ALIGN, RaggedBatch};
use super::container::{Container, OpenOptions, RecordExtent};
use super::hint::PREFETCH_AHEAD;

macro_rules! store_common {
    ($store:ident, $view:ident, $kind:expr, $kname:literal) => {
        impl $store {
            /// Opens and validates a published container (structure, manifest, index and header
            /// checksums). Record payloads are verified when read.
            pub fn open(path: impl AsRef<Path>) -> Result<Self> {
                Self::open_with(path, OpenOptions::default())
            }

            /// Opens with explicit options.
            pub fn open_with(path: impl AsRef<Path>, opts: OpenOptions) -> Result<Self> {
                Ok($store {
                    inner: Arc::new(Container::open(path.as_ref(), $kind, &opts)?),
                })
            }

            /// Number of records.
            pub fn len(&self) -> u64 {
                self.inner.records()
            }

            /// True when the store holds no records.
            pub fn is_empty(&self) -> bool {
                self.inner.records() == 0
            }

            /// Element type.
            pub fn dtype(&self) -> DType {
                self.inner.dtype()
            }

            /// Codec the records were written with.
            pub fn codec(&self) -> Codec {
                self.inner.codec()
            }

            /// Number of data shards.
            pub fn data_shards(&self) -> u32 {
                self.inner.shard_count()
            }

            /// Container directory.
            pub fn path(&self) -> &Path {
                self.inner.path()
            }

            /// The dictionary stored in a `zstd_dict` container.
            pub fn dictionary(&self) -> Option<&[u8]> {
                self.inner.dictionary()
            }

            /// Where records `idx` are stored (shard file, offset, stored length): for tools that
            /// read the same extents past zrecord, e.g. a device-limit measurement.
            pub fn record_extents(&self, idx: &[u64]) -> Result<Vec<RecordExtent>> {
                self.inner.record_extents(idx)
            }

            /// Allocated bytes on disk (all files).
            pub fn disk_bytes(&self) -> u64 {
                self.inner.disk_bytes()
            }

            /// Reads and checks every byte: whole-shard checksums, every record's checksum, every
            /// compressed record's decoded size.
            pub fn verify(&self) -> Result<()> {
                self.inner.check_open()?;
                self.inner.verify_all()
            }

            /// Binds the store to a placement. The view gathers into memory from `allocator`.
            pub fn bind(&self, allocator: Arc<dyn Allocator>) -> $view {
                let alloc = allocator.bind_view().unwrap_or(allocator);
                $view {
                    inner: self.inner.clone(),
                    alloc,
                }
            }

            /// Releases the store: every view bound to it fails with [`Error::Closed`] afterwards.
            /// Batches already gathered stay valid (they own their memory).
            pub fn close(&self) {
                self.inner.close();
            }

            /// Whether [`close`](Self::close) was called.
            pub fn is_closed(&self) -> bool {
                self.inner.is_closed()
            }
        }

        impl fmt::Debug for $store {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct(stringify!($store))
                    .field("path", &self.inner.path())
                    .field("records", &self.inner.records())
                    .field("dtype", &self.inner.dtype())
                    .field("codec", &self.inner.codec())
                    .finish()
            }
        }

        impl $view {
            /// Number of records.
            pub fn len(&self) -> u64 {
                self.inner.records()
            }

            /// True when the store holds no records.
            pub fn is_empty(&self) -> bool {
                self.inner.records() == 0
            }

            /// Element type.
            pub fn dtype(&self) -> DType {
                self.inner.dtype()
            }

            /// Codec.
            pub fn codec(&self) -> Codec {
                self.inner.codec()
            }

            /// The allocator (view handle) batches come from.
            pub fn allocator(&self) -> &Arc<dyn Allocator> {
                &self.alloc
            }

            /// The dictionary of a `zstd_dict` store.
            pub fn dictionary(&self) -> Option<&[u8]> {
                self.inner.dictionary()
            }

            /// Whether the underlying store has been closed.
            pub fn is_closed(&self) -> bool {
                self.inner.is_closed()
            }

            /// Gathers the records `range.start..range.end` in order.
            pub fn range(&self, range: Range<u64>) -> Result<<Self as ViewGather>::Batch> {
                if range.start > range.end || range.end > self.len() {
                    return Err(Error::IndexOutOfRange {
                        index: range.end.max(range.start),
                        len: self.len(),
                    });
                }
                let idx: Vec<u64> = range.collect();
                self.gather(&idx)
            }
        }

        impl fmt::Debug for $view {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct(stringify!($view))
                    .field("path", &self.inner.path())
                    .field("records", &self.inner.records())
                    .field("device", &self.alloc.device())
                    .finish()
            }
        }
    };
}

/// Batch type of a view (used by generic code such as the loader).
pub trait ViewGather {
    /// What a gather returns.
    type Batch;
    /// Gathers `idx` in order.
    fn gather(&self, idx: &[u64]) -> Result<Self::Batch>;
}

/// An opened Dense container. Bind it to an allocator to read.
#[derive(Clone)]
pub struct DenseStore {
    inner: Arc<Container>,
}

/// A Dense store bound to a placement.
#[derive(Clone)]
pub struct DenseView {
    inner: Arc<Container>,
    alloc: Arc<dyn Allocator>,
}

store_common!(DenseStore, DenseView, Kind::Dense, "Dense");

impl DenseStore {
    /// Shape of one record.
    pub fn item_shape(&self) -> &[u64] {
        self.inner.item_shape()
    }

    /// Bytes per record.
    pub fn record_bytes(&self) -> u64 {
        self.inner.record_bytes()
    }
}

impl DenseView {
    /// Shape of one record.
    pub fn item_shape(&self) -> &[u64] {
        self.inner.item_shape()
    }

    /// Bytes per record.
    pub fn record_bytes(&self) -> u64 {
        self.inner.record_bytes()
    }

    /// One record, without a batch axis.
    pub fn get(&self, i: u64) -> Result<DenseBatch> {
        let mut b = self.gather(&[i])?;
        b.shape.remove(0);
        Ok(b)
    }

    /// One record per step, in order.
    pub fn iter(&self) -> impl Iterator<Item = Result<DenseBatch>> + '_ {
        (0..self.len()).map(move |i| self.get(i))
    }

    /// Gathers `idx` (any order, duplicates allowed) into one contiguous `(n, *item_shape)` batch.
    pub fn gather(&self, idx: &[u64]) -> Result<DenseBatch> {
        <Self as ViewGather>::gather(self, idx)
    }
}

impl ViewGather for DenseView {
    type Batch = DenseBatch;

    fn gather(&self, idx: &[u64]) -> Result<DenseBatch> {
        let inner = &*self.inner;
        inner.check_open()?;
        inner.check_indices(idx)?;
        let stride = inner.record_bytes() as usize;
        let bytes = idx.len().checked_mul(stride).ok_or_else(|| {
            Error::LimitExceeded(format!("{} records of {stride} bytes", idx.len()))
        })?;
        let mut alloc = self.alloc.acquire(bytes, OUTPUT_ALIGN)?;
        let out = alloc.host_slice_mut_or_err()?;
        inner.fill(idx, out, &|k| k * stride)?;
        let mut shape = Vec::with_capacity(1 + inner.item_shape().len());
        shape.push(idx.len() as u64);
        shape.extend_from_slice(inner.item_shape());
        Ok(DenseBatch {
            alloc,
            shape,
            dtype: inner.dtype(),
        })
    }
}

/// An opened Ragged container. Bind it to an allocator to read.
#[derive(Clone)]
pub struct RaggedStore {
    inner: Arc<Container>,
}

/// A Ragged store bound to a placement.
#[derive(Clone)]
pub struct RaggedView {
    inner: Arc<Container>,
    alloc: Arc<dyn Allocator>,
}

store_common!(RaggedStore, RaggedView, Kind::Ragged, "Ragged");

impl RaggedStore {
    /// Rank of every record.
    pub fn ndim(&self) -> u32 {
        self.inner.ndim()
    }

    /// Shape of record `i`.
    pub fn shape_of(&self, i: u64) -> Result<Vec<u64>> {
        self.inner.check_indices(&[i])?;
        Ok(self.inner.shape_words(i).collect())
    }
}

impl RaggedView {
    /// Rank of every record.
    pub fn ndim(&self) -> u32 {
        self.inner.ndim()
    }

    /// Shape of record `i` (from the index, no payload read).
    pub fn shape_of(&self, i: u64) -> Result<Vec<u64>> {
        self.inner.check_indices(&[i])?;
        Ok(self.inner.shape_words(i).collect())
    }

    /// One record as a one-record batch.
    pub fn get(&self, i: u64) -> Result<RaggedBatch> {
        self.gather(&[i])
    }

    /// One record per step, in order.
    pub fn iter(&self) -> impl Iterator<Item = Result<RaggedBatch>> + '_ {
        (0..self.len()).map(move |i| self.get(i))
    }

    /// Gathers `idx` into one packed batch: values, `cu_seqlens` (int32, n+1) and shapes
    /// (u64, n x ndim), all in one allocation sized exactly before any copy.
    pub fn gather(&self, idx: &[u64]) -> Result<RaggedBatch> {
        <Self as ViewGather>::gather(self, idx)
    }
}

impl ViewGather for RaggedView {
    type Batch = RaggedBatch;

    fn gather(&self, idx: &[u64]) -> Result<RaggedBatch> {
        let inner = &*self.inner;
        inner.check_open()?;
        inner.check_indices(idx)?;
        let n = idx.len();
        let ndim = inner.ndim() as usize;
        let isz = inner.dtype().itemsize();
        // Pass 1: element counts, offsets and shapes from the index (no payload touched).
        let index = inner.index_bytes();
        let mut cu: Vec<i32> = Vec::with_capacity(n + 1);
        let mut dims: Vec<u64> = Vec::with_capacity(n * ndim);
        cu.push(0);
        let mut total: u64 = 0;
        for (k, &i) in idx.iter().enumerate() {
            if let Some(&ahead) = idx.get(k + 2 * PREFETCH_AHEAD) {
                inner.prefetch_entry(index, ahead);
            }
            let mut count = 1u64;
            for d in inner.shape_words_in(index, i) {
                dims.push(d);
                count *= d;
            }
            total += count;
            if total > i32::MAX as u64 {
                return Err(Error::LimitExceeded(format!(
                    "a ragged batch holds at most {} values (int32 cu_seqlens); these {n} records hold more",
                    i32::MAX
                )));
            }
            cu.push(total as i32);
        }
        let values_len = total as usize * isz;
        let cu_off = values_len.next_multiple_of(OUTPUT_ALIGN);
        let shapes_off = (cu_off + 4 * (n + 1)).next_multiple_of(OUTPUT_ALIGN);
        let bytes = shapes_off + 8 * n * ndim;
        let mut alloc = self.alloc.acquire(bytes, OUTPUT_ALIGN)?;
        let out = alloc.host_slice_mut_or_err()?;
        {
            let (values, meta) = out.split_at_mut(cu_off);
            for (dst, c) in meta[..4 * (n + 1)].chunks_exact_mut(4).zip(&cu) {
                dst.copy_from_slice(&c.to_ne_bytes());
            }
            let shapes = &mut meta[shapes_off - cu_off..];
            for (dst, d) in shapes.chunks_exact_mut(8).zip(&dims) {
                dst.copy_from_slice(&d.to_ne_bytes());
            }
            inner.fill(idx, &mut values[..values_len], &|k| cu[k] as usize * isz)?;
        }
        Ok(RaggedBatch {
            alloc,
            n,
            ndim,
            dtype: inner.dtype(),
            values_len,
            cu_off,
            shapes_off,
        })
    }
}
