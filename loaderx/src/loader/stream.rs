//! What the loader reads and what its transform receives.
//!
//! * [`StreamView`]: one view of a stream (a Dense or Ragged store bound to a placement);
//! * [`Batch`] and [`Shard`]: one gathered stream value, and the streams gathered at one shard
//!   position, index-aligned (from one mixture source, for a mixture);
//! * [`Transform`]: the collate step, and `run_transform`, which turns its panic into an error.
//!
//! The draw + gather step that makes shards is `source.rs`.

use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use zrecord::{DenseBatch, DenseView, RaggedBatch, RaggedView};

use crate::error::{Error, Result};

/// One view of a stream: a Dense or Ragged store bound to a placement.
#[derive(Clone, Debug)]
pub enum StreamView {
    /// A fixed-shape stream.
    Dense(DenseView),
    /// A variable-shape stream.
    Ragged(RaggedView),
}

/// The most a loader lets a stream's block buffer hold ([`StreamView::buffer_for_blocks`]):
/// a block shuffle whose window needs more is read without one.
pub const BLOCK_BUFFER_BYTES: u64 = 256 << 20;

/// The blocks a loader's block buffer holds for a block shuffle of `block`-record blocks in
/// windows of `window` blocks, `batch` records a step, of `record_bytes` each: the window and the
/// blocks one batch spans, plus one; `None` when they would hold more than
/// [`BLOCK_BUFFER_BYTES`] (the loader then reads without a buffer). The rule
/// [`StreamView::buffer_for_blocks`] applies, for readers that buffer a store themselves.
pub fn block_buffer_blocks(
    block: u64,
    window: u64,
    batch: usize,
    record_bytes: u64,
) -> Option<usize> {
    let held = window
        .saturating_add((batch as u64).div_ceil(block.max(1)))
        .saturating_add(1);
    let bytes = held
        .saturating_mul(block)
        .saturating_mul(record_bytes.max(1));
    if bytes > BLOCK_BUFFER_BYTES {
        return None;
    }
    usize::try_from(held).ok()
}

impl StreamView {
    /// Number of records.
    pub fn len(&self) -> u64 {
        match self {
            StreamView::Dense(v) => v.len(),
            StreamView::Ragged(v) => v.len(),
        }
    }

    /// True when the view holds no records.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Reads through a block buffer ([`zrecord::Store::buffer_blocks`]) sized for a block
    /// shuffle of `block`-record blocks in windows of `window` blocks, `batch` records a step, as
    /// [`block_buffer_blocks`] sizes it (records sized as a Dense view's record bytes, a Ragged
    /// view's stored bytes per record); returns whether it buffers. A view whose store buffers
    /// blocks already keeps its buffer.
    pub fn buffer_for_blocks(
        &self,
        block: u64,
        window: u64,
        batch: usize,
    ) -> zrecord::Result<bool> {
        let held_now = match self {
            StreamView::Dense(v) => v.block_buffer_stats(),
            StreamView::Ragged(v) => v.block_buffer_stats(),
        };
        if held_now.is_some() {
            return Ok(true);
        }
        let per_record = match self {
            StreamView::Dense(v) => v.record_bytes(),
            StreamView::Ragged(v) => v.disk_bytes() / v.len().max(1),
        };
        let Some(held) = block_buffer_blocks(block, window, batch, per_record) else {
            return Ok(false);
        };
        match self {
            StreamView::Dense(v) => v.buffer_blocks(block, held)?,
            StreamView::Ragged(v) => v.buffer_blocks(block, held)?,
        }
        Ok(true)
    }

    /// Gathers `idx` into one batch from the view's allocator.
    pub fn gather(&self, idx: &[u64]) -> zrecord::Result<Batch> {
        Ok(match self {
            StreamView::Dense(v) => Batch::Dense(v.gather(idx)?),
            StreamView::Ragged(v) => Batch::Ragged(v.gather(idx)?),
        })
    }
}

impl From<DenseView> for StreamView {
    fn from(v: DenseView) -> Self {
        StreamView::Dense(v)
    }
}

impl From<RaggedView> for StreamView {
    fn from(v: RaggedView) -> Self {
        StreamView::Ragged(v)
    }
}

/// One gathered stream value of a shard.
#[derive(Debug)]
pub enum Batch {
    /// From a Dense view: shape `(n, *item_shape)`.
    Dense(DenseBatch),
    /// From a Ragged view: packed `values`, `cu_seqlens`, `shapes`.
    Ragged(RaggedBatch),
}

impl Batch {
    /// The Dense batch, if this is one.
    pub fn as_dense(&self) -> Option<&DenseBatch> {
        match self {
            Batch::Dense(b) => Some(b),
            Batch::Ragged(_) => None,
        }
    }

    /// The Ragged batch, if this is one.
    pub fn as_ragged(&self) -> Option<&RaggedBatch> {
        match self {
            Batch::Ragged(b) => Some(b),
            Batch::Dense(_) => None,
        }
    }

    /// The allocation holding the batch.
    pub fn allocation(&self) -> &zrecord::Allocation {
        match self {
            Batch::Dense(b) => b.allocation(),
            Batch::Ragged(b) => b.allocation(),
        }
    }
}

/// The streams gathered at one shard position: one [`Batch`] per stream name, index-aligned (record
/// `r` of every batch comes from the same global index).
pub struct Shard {
    pub(super) names: Arc<[Arc<str>]>,
    pub(super) batches: Vec<Batch>,
    /// The shard position (the view index in every stream's list).
    pub(super) index: usize,
    /// The mixture source every record came from; `None` without a mixture.
    pub(super) source: Option<u32>,
}

impl Shard {
    /// The shard position: the views of every stream at this index gathered it.
    pub fn index(&self) -> usize {
        self.index
    }

    /// For a mixture loader, the source every record of this shard came from (a step yields one
    /// shard per shard position and source present in it); `None` for a loader without a
    /// mixture.
    pub fn source(&self) -> Option<u32> {
        self.source
    }

    /// The batch of stream `name`.
    pub fn get(&self, name: &str) -> Option<&Batch> {
        self.names
            .iter()
            .position(|n| &**n == name)
            .map(|i| &self.batches[i])
    }

    /// `(name, batch)` pairs in stream order (the order the streams were given to the loader).
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Batch)> {
        self.names.iter().map(|n| &**n).zip(&self.batches)
    }

    /// Number of streams.
    pub fn len(&self) -> usize {
        self.batches.len()
    }

    /// True when the shard has no streams (never, for a shard a loader produced).
    pub fn is_empty(&self) -> bool {
        self.batches.is_empty()
    }

    /// The owned `(name, batch)` pairs in stream order.
    pub fn into_pairs(self) -> Vec<(Arc<str>, Batch)> {
        self.names.iter().cloned().zip(self.batches).collect()
    }
}

impl fmt::Debug for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

/// The collate step: the complete shard list in, any result out. Must be thread-safe when
/// `workers > 1`.
pub type Transform<T> = Arc<dyn Fn(Vec<Shard>) -> Result<T> + Send + Sync>;

/// Runs the transform on one step's shards; a panic becomes an error.
pub(super) fn run_transform<T>(transform: &Transform<T>, shards: Vec<Shard>) -> Result<T> {
    catch_unwind(AssertUnwindSafe(|| transform(shards)))
        .unwrap_or_else(|p| Err(Error::from_panic(p, "transform")))
}
