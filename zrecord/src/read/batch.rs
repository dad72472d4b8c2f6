//! Gathered batches: [`DenseBatch`] (records back to back) and [`RaggedBatch`] (one allocation
//! holding `values | cu_seqlens | shapes`), both in memory from the view's allocator.

use std::fmt;

use crate::alloc::Allocation;
use crate::dtype::DType;

/// Alignment of every output region and of each field inside a Ragged region.
pub const OUTPUT_ALIGN: usize = 64;

/// A gathered Dense batch, in memory from the view's allocator.
pub struct DenseBatch {
    pub(super) alloc: Allocation,
    pub(super) shape: Vec<u64>,
    pub(super) dtype: DType,
}

impl DenseBatch {
    /// The records, back to back, C order.
    pub fn bytes(&self) -> &[u8] {
        self.alloc.host_slice().unwrap_or(&[])
    }

    /// `(n, *item_shape)` for a gather, `item_shape` for a single `get`.
    pub fn shape(&self) -> &[u64] {
        &self.shape
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The memory backing the batch.
    pub fn allocation(&self) -> &Allocation {
        &self.alloc
    }

    /// Splits into the allocation and the shape.
    pub fn into_parts(self) -> (Allocation, Vec<u64>, DType) {
        (self.alloc, self.shape, self.dtype)
    }
}

impl fmt::Debug for DenseBatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DenseBatch")
            .field("shape", &self.shape)
            .field("dtype", &self.dtype)
            .finish()
    }
}

/// A gathered Ragged batch: one allocation holding `values | cu_seqlens | shapes`, each field
/// aligned to 64 bytes.
pub struct RaggedBatch {
    pub(super) alloc: Allocation,
    pub(super) n: usize,
    pub(super) ndim: usize,
    pub(super) dtype: DType,
    pub(super) values_len: usize,
    pub(super) cu_off: usize,
    pub(super) shapes_off: usize,
}

impl RaggedBatch {
    /// Number of records.
    pub fn len(&self) -> usize {
        self.n
    }

    /// True for an empty gather.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Rank of every record.
    pub fn ndim(&self) -> usize {
        self.ndim
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Packed values (bytes).
    pub fn values(&self) -> &[u8] {
        &self.alloc.host_slice().unwrap_or(&[])[..self.values_len]
    }

    /// Element offsets of each record, `n + 1` entries starting at 0.
    pub fn cu_seqlens(&self) -> &[i32] {
        let b =
            &self.alloc.host_slice().unwrap_or(&[])[self.cu_off..self.cu_off + 4 * (self.n + 1)];
        // SAFETY: the region is 64-byte aligned and cu_off is a multiple of 64, so the pointer is
        // aligned for i32; the length is exactly n + 1 i32 values written by gather; the slice
        // borrows `self`, which owns the allocation.
        unsafe { std::slice::from_raw_parts(b.as_ptr().cast::<i32>(), self.n + 1) }
    }

    /// Shapes, `n * ndim` values in record order.
    pub fn shapes(&self) -> &[u64] {
        let b = &self.alloc.host_slice().unwrap_or(&[])
            [self.shapes_off..self.shapes_off + 8 * self.n * self.ndim];
        // SAFETY: as for cu_seqlens: 64-byte aligned offset inside an aligned region, exact length.
        unsafe { std::slice::from_raw_parts(b.as_ptr().cast::<u64>(), self.n * self.ndim) }
    }

    /// Values of record `k` (bytes).
    pub fn record(&self, k: usize) -> &[u8] {
        let cu = self.cu_seqlens();
        let isz = self.dtype.itemsize();
        &self.values()[cu[k] as usize * isz..cu[k + 1] as usize * isz]
    }

    /// The memory backing the batch.
    pub fn allocation(&self) -> &Allocation {
        &self.alloc
    }

    /// Byte offsets of `(values, cu_seqlens, shapes)` inside the allocation.
    pub fn field_offsets(&self) -> (usize, usize, usize) {
        (0, self.cu_off, self.shapes_off)
    }

    /// Byte length of the values field.
    pub fn values_bytes(&self) -> usize {
        self.values_len
    }

    /// Takes the allocation.
    pub fn into_allocation(self) -> Allocation {
        self.alloc
    }
}

impl fmt::Debug for RaggedBatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RaggedBatch")
            .field("records", &self.n)
            .field("ndim", &self.ndim)
            .field("dtype", &self.dtype)
            .finish()
    }
}
