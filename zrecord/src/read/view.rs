//! The public view type: [`View`], a store bound to an allocator, with its layout's faces
//! [`DenseView`] and [`RaggedView`]. A gather sizes one output allocation exactly, takes it from
//! the allocator and has the read path fill it (the sizing and filling are the layout's:
//! [`super::layout`]). [`ViewGather`] names the gather for generic callers (the loader).

use std::fmt;
use std::marker::PhantomData;
use std::ops::Range;
use std::sync::Arc;

use crate::alloc::Allocator;
use crate::error::{Error, Result};

use super::batch::Batch;
use super::getters::{container_getters, layout_getters};
use super::layout::{Dense, Layout, Ragged};
use super::opened::Opened;

/// Batch type of a view (used by generic code such as the loader).
pub trait ViewGather {
    /// What a gather returns.
    type Batch;
    /// Gathers `idx` in order.
    fn gather(&self, idx: &[u64]) -> Result<Self::Batch>;
}

/// A store of layout `L` bound to a placement.
#[derive(Clone)]
pub struct View<L: Layout> {
    pub(super) c: Opened,
    pub(super) alloc: Arc<dyn Allocator>,
    layout: PhantomData<fn() -> L>,
}

/// A Dense store bound to a placement.
pub type DenseView = View<Dense>;

/// A Ragged store bound to a placement.
pub type RaggedView = View<Ragged>;

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

impl<L: Layout> View<L> {
    /// `c` bound to `allocator` (see [`crate::Store::bind`]): to its per-view handle where it
    /// keeps one ([`Allocator::bind_view`]), else to itself.
    pub(super) fn new(c: Opened, allocator: Arc<dyn Allocator>) -> View<L> {
        View {
            c,
            alloc: allocator.bind_view().unwrap_or(allocator),
            layout: PhantomData,
        }
    }

    container_getters!();

    /// The allocator (view handle) batches come from.
    pub fn allocator(&self) -> &Arc<dyn Allocator> {
        &self.alloc
    }

    /// One record: for Dense without a batch axis (shape `item_shape`), for Ragged as a
    /// one-record batch.
    pub fn get(&self, i: u64) -> Result<Batch<L>> {
        let mut batch = self.gather(&[i])?;
        L::single(&mut batch.form);
        Ok(batch)
    }

    /// One record per step, in order.
    pub fn iter(&self) -> impl Iterator<Item = Result<Batch<L>>> + '_ {
        (0..self.len()).map(move |i| self.get(i))
    }

    /// Gathers the records `range.start..range.end` in order.
    pub fn range(&self, range: Range<u64>) -> Result<Batch<L>> {
        self.gather(&range_indices(range, self.len())?)
    }

    /// Gathers `idx` (any order, duplicates allowed) into one allocation sized exactly before
    /// any copy: Dense, one contiguous `(n, *item_shape)` batch; Ragged, one packed batch of
    /// values, `cu_seqlens` (int32, n+1) and shapes (u64, n x ndim).
    pub fn gather(&self, idx: &[u64]) -> Result<Batch<L>> {
        let (alloc, form) = L::gather(&self.c, &*self.alloc, idx)?;
        Ok(Batch {
            alloc,
            dtype: self.c.dtype(),
            form,
        })
    }
}

impl View<Dense> {
    layout_getters!(Dense);
}

impl View<Ragged> {
    layout_getters!(Ragged);
}

impl<L: Layout> ViewGather for View<L> {
    type Batch = Batch<L>;

    fn gather(&self, idx: &[u64]) -> Result<Batch<L>> {
        View::gather(self, idx)
    }
}

/// The `Debug` of a view: its type name, path, record count and placement.
impl<L: Layout> fmt::Debug for View<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct(&format!("{}View", L::NAME))
            .field("path", &self.c.path())
            .field("records", &self.c.records())
            .field("device", &self.alloc.device())
            .finish()
    }
}
