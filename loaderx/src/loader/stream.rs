//! The streams and the draw + gather step: what the loader reads and what its transform receives.
//!
//! * [`StreamView`]: one view of a stream (a Dense or Ragged store bound to a placement);
//! * [`Batch`] and [`Shard`]: one gathered stream value, and the streams gathered at one shard
//!   position, index-aligned;
//! * [`Transform`]: the collate step, and `run_transform`, which turns its panic into an error;
//! * `Source`: the draw + gather state. One step draws this process's slice of a global index
//!   batch from the sampler, cuts it into per-shard slices and gathers every stream at every shard position.
//!
//! Nothing here knows about threads: the inline path and the worker loop both call
//! `Source::produce` and `run_transform`.

use std::collections::BTreeSet;
use std::fmt;
use std::ops::Range;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use zrecord::{DenseBatch, DenseView, RaggedBatch, RaggedView};

use crate::error::{Error, Result};
use crate::sampler::Sampler;

/// One view of a stream: a Dense or Ragged store bound to a placement.
#[derive(Clone, Debug)]
pub enum StreamView {
    /// A fixed-shape stream.
    Dense(DenseView),
    /// A variable-shape stream.
    Ragged(RaggedView),
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
    names: Arc<[Arc<str>]>,
    batches: Vec<Batch>,
}

impl Shard {
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

/// Draw + gather state, behind the shared lock in worker mode.
pub(super) struct Source {
    /// `views[stream][shard]`.
    pub(super) views: Vec<Vec<StreamView>>,
    pub(super) names: Arc<[Arc<str>]>,
    pub(super) shards: usize,
    /// The sampler's (global) batch size.
    pub(super) batch: usize,
    /// This process's positions of every global batch.
    pub(super) slice: Range<usize>,
    pub(super) sampler: Box<dyn Sampler>,
    pub(super) next_step: u64,
    /// Steps a resumed loader must not draw again (delivered before the state was saved); at
    /// most `workers + prefetch` of the saving loader, all at or after `next_step`.
    pub(super) skip: BTreeSet<u64>,
    /// Steps were skipped since the last draw: the sampler must be sought to `next_step`.
    pub(super) resync: bool,
}

impl Source {
    /// The step the next [`Source::produce`] draws, past any step to skip.
    pub(super) fn next_draw_step(&mut self) -> u64 {
        while self.skip.remove(&self.next_step) {
            self.next_step = self.next_step.wrapping_add(1);
            self.resync = true;
        }
        self.next_step
    }

    /// Moves the draw position to `step`, skipping the steps in `skip` when it reaches them.
    pub(super) fn reposition(&mut self, step: u64, skip: BTreeSet<u64>) -> Result<()> {
        self.sampler.seek(step)?;
        self.next_step = step;
        self.skip = skip;
        self.resync = false;
        Ok(())
    }

    /// The step drawn, and its shards.
    pub(super) fn produce(&mut self) -> (u64, Result<Vec<Shard>>) {
        let step = self.next_draw_step();
        if std::mem::take(&mut self.resync) {
            // Steps were skipped: the sampler is still at the first of them.
            if let Err(e) = self.sampler.seek(step) {
                self.next_step = self.next_step.wrapping_add(1);
                return (step, Err(e));
            }
        }
        self.next_step = self.next_step.wrapping_add(1);
        let res = catch_unwind(AssertUnwindSafe(|| self.draw_and_gather()))
            .unwrap_or_else(|p| Err(Error::from_panic(p, "sampler or gather")));
        (step, res)
    }

    fn draw_and_gather(&mut self) -> Result<Vec<Shard>> {
        let want = self.slice.len();
        let idx = if want == self.batch {
            self.sampler.next()?
        } else {
            self.sampler.next_range(self.slice.clone())?
        };
        if idx.len() != want {
            let expected = if want == self.batch {
                format!("its batch size {want}")
            } else {
                format!(
                    "this process's slice of {want} (of its batch size {})",
                    self.batch
                )
            };
            return Err(Error::Sampler(format!(
                "sampler drew {} indices, expected {expected}",
                idx.len()
            )));
        }
        let per = want / self.shards;
        let mut out = Vec::with_capacity(self.shards);
        for (j, slice) in idx.chunks_exact(per).enumerate() {
            let mut batches = Vec::with_capacity(self.views.len());
            for stream in &self.views {
                batches.push(stream[j].gather(slice)?);
            }
            out.push(Shard {
                names: self.names.clone(),
                batches,
            });
        }
        Ok(out)
    }
}

/// Runs the transform on one step's shards; a panic becomes an error.
pub(super) fn run_transform<T>(transform: &Transform<T>, shards: Vec<Shard>) -> Result<T> {
    catch_unwind(AssertUnwindSafe(|| transform(shards)))
        .unwrap_or_else(|p| Err(Error::from_panic(p, "transform")))
}
