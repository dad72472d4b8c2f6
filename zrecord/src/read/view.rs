//! The public view types: [`DenseView`] and [`RaggedView`], a store bound to an allocator, and
//! their gathers, which size one output allocation exactly, take it from the allocator and have
//! the read path fill it. [`ViewGather`] names the gather for generic callers (the loader).

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use crate::alloc::Allocator;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::format::Codec;

use super::batch::{DenseBatch, OUTPUT_ALIGN, RaggedBatch};
use super::container::Container;
use super::engine::gather_into;
use super::hint::PREFETCH_AHEAD;

/// Batch type of a view (used by generic code such as the loader).
pub trait ViewGather {
    /// What a gather returns.
    type Batch;
    /// Gathers `idx` in order.
    fn gather(&self, idx: &[u64]) -> Result<Self::Batch>;
}

/// A Dense store bound to a placement.
#[derive(Clone)]
pub struct DenseView {
    c: Arc<Container>,
    alloc: Arc<dyn Allocator>,
}

/// A Ragged store bound to a placement.
#[derive(Clone)]
pub struct RaggedView {
    c: Arc<Container>,
    alloc: Arc<dyn Allocator>,
}

/// The allocator handle a view of `allocator` gathers from: its per-view handle where it keeps
/// one ([`Allocator::bind_view`]), else itself.
fn view_allocator(allocator: Arc<dyn Allocator>) -> Arc<dyn Allocator> {
    allocator.bind_view().unwrap_or(allocator)
}

/// The records `range` of a store of `len` records as a list of indices, or the error a gather
/// of an out-of-range index returns.
fn range_indices(range: Range<u64>, len: u64) -> Result<Vec<u64>> {
    if range.start > range.end || range.end > len {
        return Err(Error::IndexOutOfRange {
            index: range.end.max(range.start),
            len,
        });
    }
    Ok(range.collect())
}

impl DenseView {
    /// `c` bound to `allocator` (see [`crate::DenseStore::bind`]).
    pub(super) fn new(c: Arc<Container>, allocator: Arc<dyn Allocator>) -> DenseView {
        DenseView {
            c,
            alloc: view_allocator(allocator),
        }
    }

    /// Number of records.
    pub fn len(&self) -> u64 {
        self.c.records()
    }

    /// True when the store holds no records.
    pub fn is_empty(&self) -> bool {
        self.c.records() == 0
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.c.dtype()
    }

    /// Codec.
    pub fn codec(&self) -> Codec {
        self.c.codec()
    }

    /// The allocator (view handle) batches come from.
    pub fn allocator(&self) -> &Arc<dyn Allocator> {
        &self.alloc
    }

    /// The dictionary of a `zstd_dict` store.
    pub fn dictionary(&self) -> Option<&[u8]> {
        self.c.dictionary()
    }

    /// Whether the underlying store has been closed.
    pub fn is_closed(&self) -> bool {
        self.c.is_closed()
    }

    /// Shape of one record.
    pub fn item_shape(&self) -> &[u64] {
        self.c.item_shape()
    }

    /// Bytes per record.
    pub fn record_bytes(&self) -> u64 {
        self.c.record_bytes()
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

    /// Gathers the records `range.start..range.end` in order.
    pub fn range(&self, range: Range<u64>) -> Result<DenseBatch> {
        self.gather(&range_indices(range, self.len())?)
    }

    /// Gathers `idx` (any order, duplicates allowed) into one contiguous `(n, *item_shape)` batch.
    pub fn gather(&self, idx: &[u64]) -> Result<DenseBatch> {
        let c = &*self.c;
        c.check_open()?;
        c.check_indices(idx)?;
        let stride = c.record_bytes() as usize;
        let bytes = idx.len().checked_mul(stride).ok_or_else(|| {
            Error::LimitExceeded(format!("{} records of {stride} bytes", idx.len()))
        })?;
        let mut alloc = self.alloc.acquire(bytes, OUTPUT_ALIGN)?;
        let out = alloc.host_slice_mut_or_err()?;
        gather_into(c, idx, out, &|k| k * stride)?;
        let mut shape = Vec::with_capacity(1 + c.item_shape().len());
        shape.push(idx.len() as u64);
        shape.extend_from_slice(c.item_shape());
        Ok(DenseBatch {
            alloc,
            shape,
            dtype: c.dtype(),
        })
    }
}

impl ViewGather for DenseView {
    type Batch = DenseBatch;

    fn gather(&self, idx: &[u64]) -> Result<DenseBatch> {
        DenseView::gather(self, idx)
    }
}

impl RaggedView {
    /// `c` bound to `allocator` (see [`crate::RaggedStore::bind`]).
    pub(super) fn new(c: Arc<Container>, allocator: Arc<dyn Allocator>) -> RaggedView {
        RaggedView {
            c,
            alloc: view_allocator(allocator),
        }
    }

    /// Number of records.
    pub fn len(&self) -> u64 {
        self.c.records()
    }

    /// True when the store holds no records.
    pub fn is_empty(&self) -> bool {
        self.c.records() == 0
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.c.dtype()
    }

    /// Codec.
    pub fn codec(&self) -> Codec {
        self.c.codec()
    }

    /// The allocator (view handle) batches come from.
    pub fn allocator(&self) -> &Arc<dyn Allocator> {
        &self.alloc
    }

    /// The dictionary of a `zstd_dict` store.
    pub fn dictionary(&self) -> Option<&[u8]> {
        self.c.dictionary()
    }

    /// Whether the underlying store has been closed.
    pub fn is_closed(&self) -> bool {
        self.c.is_closed()
    }

    /// Rank of every record.
    pub fn ndim(&self) -> u32 {
        self.c.ndim()
    }

    /// Shape of record `i` (from the index, no payload read).
    pub fn shape_of(&self, i: u64) -> Result<Vec<u64>> {
        self.c.check_indices(&[i])?;
        Ok(self.c.shape_words(i).collect())
    }

    /// One record as a one-record batch.
    pub fn get(&self, i: u64) -> Result<RaggedBatch> {
        self.gather(&[i])
    }

    /// One record per step, in order.
    pub fn iter(&self) -> impl Iterator<Item = Result<RaggedBatch>> + '_ {
        (0..self.len()).map(move |i| self.get(i))
    }

    /// Gathers the records `range.start..range.end` in order.
    pub fn range(&self, range: Range<u64>) -> Result<RaggedBatch> {
        self.gather(&range_indices(range, self.len())?)
    }

    /// Gathers `idx` into one packed batch: values, `cu_seqlens` (int32, n+1) and shapes
    /// (u64, n x ndim), all in one allocation sized exactly before any copy.
    pub fn gather(&self, idx: &[u64]) -> Result<RaggedBatch> {
        let c = &*self.c;
        c.check_open()?;
        c.check_indices(idx)?;
        let n = idx.len();
        let ndim = c.ndim() as usize;
        let isz = c.dtype().itemsize();
        // Pass 1: element counts, offsets and shapes from the index (no payload touched).
        let index = c.index_bytes();
        let mut cu: Vec<i32> = Vec::with_capacity(n + 1);
        let mut dims: Vec<u64> = Vec::with_capacity(n * ndim);
        cu.push(0);
        let mut total: u64 = 0;
        for (k, &i) in idx.iter().enumerate() {
            if let Some(&ahead) = idx.get(k + 2 * PREFETCH_AHEAD) {
                c.prefetch_entry(index, ahead);
            }
            let mut count = 1u64;
            for d in c.shape_words_in(index, i) {
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
            for (dst, v) in meta[..4 * (n + 1)].chunks_exact_mut(4).zip(&cu) {
                dst.copy_from_slice(&v.to_ne_bytes());
            }
            let shapes = &mut meta[shapes_off - cu_off..];
            for (dst, d) in shapes.chunks_exact_mut(8).zip(&dims) {
                dst.copy_from_slice(&d.to_ne_bytes());
            }
            gather_into(c, idx, &mut values[..values_len], &|k| cu[k] as usize * isz)?;
        }
        Ok(RaggedBatch {
            alloc,
            n,
            ndim,
            dtype: c.dtype(),
            values_len,
            cu_off,
            shapes_off,
        })
    }
}

impl ViewGather for RaggedView {
    type Batch = RaggedBatch;

    fn gather(&self, idx: &[u64]) -> Result<RaggedBatch> {
        RaggedView::gather(self, idx)
    }
}

/// The `Debug` of a view: its type name, path, record count and placement.
fn debug_view(
    name: &str,
    c: &Container,
    alloc: &dyn Allocator,
    f: &mut fmt::Formatter<'_>,
) -> fmt::Result {
    f.debug_struct(name)
        .field("path", &c.path())
        .field("records", &c.records())
        .field("device", &alloc.device())
        .finish()
}

impl fmt::Debug for DenseView {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug_view("DenseView", &self.c, &*self.alloc, f)
    }
}

impl fmt::Debug for RaggedView {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug_view("RaggedView", &self.c, &*self.alloc, f)
    }
}
