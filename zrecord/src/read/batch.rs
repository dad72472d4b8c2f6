//! Gathered batches: [`Batch`], in memory from the view's allocator, with its layout's faces
//! [`DenseBatch`] (records back to back) and [`RaggedBatch`] (one allocation holding
//! `values | cu_seqlens | shapes`).

use std::fmt;

use crate::alloc::Allocation;
use crate::dtype::DType;

use super::layout::{Dense, Layout, Ragged};

pub use super::layout::OUTPUT_ALIGN;

/// A gathered batch of layout `L`, in memory from the view's allocator.
pub struct Batch<L: Layout> {
    pub(super) alloc: Allocation,
    pub(super) dtype: DType,
    /// The shape (Dense) or where the fields lie (Ragged).
    pub(super) form: L::Form,
}

/// A gathered Dense batch, in memory from the view's allocator.
pub type DenseBatch = Batch<Dense>;

/// A gathered Ragged batch: one allocation holding `values | cu_seqlens | shapes`, each field
/// aligned to 64 bytes.
pub type RaggedBatch = Batch<Ragged>;

impl<L: Layout> Batch<L> {
    /// Element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The memory backing the batch.
    pub fn allocation(&self) -> &Allocation {
        &self.alloc
    }

    /// Takes the allocation.
    pub fn into_allocation(self) -> Allocation {
        self.alloc
    }

    /// The whole allocation as host bytes (empty where it is not host-visible).
    fn host(&self) -> &[u8] {
        self.alloc.host_slice().unwrap_or(&[])
    }
}

impl Batch<Dense> {
    /// The records, back to back, C order.
    pub fn bytes(&self) -> &[u8] {
        self.host()
    }

    /// `(n, *item_shape)` for a gather, `item_shape` for a single `get`.
    pub fn shape(&self) -> &[u64] {
        &self.form
    }

    /// Splits into the allocation and the shape.
    pub fn into_parts(self) -> (Allocation, Vec<u64>, DType) {
        (self.alloc, self.form, self.dtype)
    }
}

impl Batch<Ragged> {
    /// Number of records.
    pub fn len(&self) -> usize {
        self.form.n
    }

    /// True for an empty gather.
    pub fn is_empty(&self) -> bool {
        self.form.n == 0
    }

    /// Rank of every record.
    pub fn ndim(&self) -> usize {
        self.form.ndim
    }

    /// Packed values (bytes).
    pub fn values(&self) -> &[u8] {
        &self.host()[..self.form.values_len]
    }

    /// Element offsets of each record, `n + 1` entries starting at 0.
    pub fn cu_seqlens(&self) -> &[i32] {
        let (off, n) = (self.form.cu_off, self.form.n + 1);
        let b = &self.host()[off..off + 4 * n];
        // SAFETY: the region is 64-byte aligned and cu_off is a multiple of 64, so the pointer is
        // aligned for i32; the length is exactly n + 1 i32 values written by gather; the slice
        // borrows `self`, which owns the allocation.
        unsafe { std::slice::from_raw_parts(b.as_ptr().cast::<i32>(), n) }
    }

    /// Shapes, `n * ndim` values in record order.
    pub fn shapes(&self) -> &[u64] {
        let (off, n) = (self.form.shapes_off, self.form.n * self.form.ndim);
        let b = &self.host()[off..off + 8 * n];
        // SAFETY: as for cu_seqlens: 64-byte aligned offset inside an aligned region, exact length.
        unsafe { std::slice::from_raw_parts(b.as_ptr().cast::<u64>(), n) }
    }

    /// Values of record `k` (bytes).
    pub fn record(&self, k: usize) -> &[u8] {
        let cu = self.cu_seqlens();
        let isz = self.dtype.itemsize();
        &self.values()[cu[k] as usize * isz..cu[k + 1] as usize * isz]
    }

    /// Byte offsets of `(values, cu_seqlens, shapes)` inside the allocation.
    pub fn field_offsets(&self) -> (usize, usize, usize) {
        (0, self.form.cu_off, self.form.shapes_off)
    }

    /// Byte length of the values field.
    pub fn values_bytes(&self) -> usize {
        self.form.values_len
    }
}

impl<L: Layout> fmt::Debug for Batch<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct(&format!("{}Batch", L::NAME));
        L::debug_form(&self.form, &mut d);
        d.field("dtype", &self.dtype).finish()
    }
}
