//! The draw + gather step: one step draws this process's slice of a global index batch (from the
//! sampler, or from a mixture's plan), cuts it into per-shard slices and gathers every stream at
//! every shard position.
//!
//! `Source` is the state behind the shared lock in worker mode (called directly inline): the
//! views, what draws, the next step and the steps a resumed loader skips. Nothing here knows
//! about threads.

use std::collections::BTreeSet;
use std::ops::Range;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use super::stream::{Shard, StreamView};
use crate::error::{Error, Result};
use crate::mixture::MixturePlan;
use crate::sampler::Sampler;

/// What draws the indices.
pub(super) enum Draw {
    /// A sampler: one index stream over the views of source 0.
    Sampler(Box<dyn Sampler>),
    /// A mixture: each position's source and record, a pure function of the step.
    Mixture(MixturePlan),
}

/// Draw + gather state, behind the shared lock in worker mode.
pub(super) struct Source {
    /// `views[source][stream][shard]`: one source unless the loader mixes several.
    pub(super) views: Vec<Vec<Vec<StreamView>>>,
    pub(super) names: Arc<[Arc<str>]>,
    pub(super) shards: usize,
    /// The (global) batch size.
    pub(super) batch: usize,
    /// This process's positions of every global batch.
    pub(super) slice: Range<usize>,
    pub(super) draw: Draw,
    pub(super) next_step: u64,
    /// Steps a resumed loader must not draw again (delivered before the state was saved); at
    /// most `workers + prefetch` of the saving loader, all at or after `next_step`.
    pub(super) skip: BTreeSet<u64>,
    /// Steps were skipped since the last draw: the sampler must be sought to `next_step`.
    pub(super) resync: bool,
    /// A mixture draw's scratch: each position's source and record.
    pub(super) mixed: (Vec<u32>, Vec<u64>),
}

impl Source {
    /// A source at `start`.
    pub(super) fn new(
        views: Vec<Vec<Vec<StreamView>>>,
        names: Arc<[Arc<str>]>,
        batch: usize,
        slice: Range<usize>,
        draw: Draw,
        start: u64,
    ) -> Source {
        let shards = views.first().and_then(|s| s.first()).map_or(1, Vec::len);
        Source {
            views,
            names,
            shards,
            batch,
            slice,
            draw,
            next_step: start,
            skip: BTreeSet::new(),
            resync: false,
            mixed: (Vec::new(), Vec::new()),
        }
    }

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
        if let Draw::Sampler(s) = &mut self.draw {
            s.seek(step)?;
        }
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
            if let Draw::Sampler(s) = &mut self.draw
                && let Err(e) = s.seek(step)
            {
                self.next_step = self.next_step.wrapping_add(1);
                return (step, Err(e));
            }
        }
        self.next_step = self.next_step.wrapping_add(1);
        let res = catch_unwind(AssertUnwindSafe(|| match &self.draw {
            Draw::Sampler(_) => self.draw_and_gather(),
            Draw::Mixture(_) => self.draw_and_gather_mixed(step),
        }))
        .unwrap_or_else(|p| Err(Error::from_panic(p, "sampler or gather")));
        (step, res)
    }

    fn draw_and_gather(&mut self) -> Result<Vec<Shard>> {
        let Draw::Sampler(sampler) = &mut self.draw else {
            return Err(Error::Sampler("no sampler".into()));
        };
        let want = self.slice.len();
        let idx = if want == self.batch {
            sampler.next()?
        } else {
            sampler.next_range(self.slice.clone())?
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
            let mut batches = Vec::with_capacity(self.names.len());
            for stream in &self.views[0] {
                batches.push(stream[j].gather(slice)?);
            }
            out.push(Shard {
                names: self.names.clone(),
                batches,
                index: j,
                source: None,
            });
        }
        Ok(out)
    }

    /// A mixture's step: per shard position, one shard per source present there, each gathered
    /// from that source's views with the source's records in batch order.
    fn draw_and_gather_mixed(&mut self, step: u64) -> Result<Vec<Shard>> {
        let Draw::Mixture(plan) = &self.draw else {
            return Err(Error::Sampler("no mixture".into()));
        };
        let (srcs, idx) = &mut self.mixed;
        plan.draw_range(step, self.slice.clone(), srcs, idx)?;
        let per = self.slice.len() / self.shards;
        let mut out = Vec::with_capacity(self.shards);
        let mut picked: Vec<u64> = Vec::with_capacity(per);
        for j in 0..self.shards {
            let at = j * per..(j + 1) * per;
            for (k, source) in self.views.iter().enumerate() {
                picked.clear();
                picked.extend(
                    srcs[at.clone()]
                        .iter()
                        .zip(&idx[at.clone()])
                        .filter(|(s, _)| **s as usize == k)
                        .map(|(_, i)| *i),
                );
                if picked.is_empty() {
                    continue;
                }
                let mut batches = Vec::with_capacity(self.names.len());
                for stream in source {
                    batches.push(stream[j].gather(&picked)?);
                }
                out.push(Shard {
                    names: self.names.clone(),
                    batches,
                    index: j,
                    source: Some(k as u32),
                });
            }
        }
        Ok(out)
    }
}
