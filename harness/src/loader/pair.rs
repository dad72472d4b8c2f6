//! The bare gather timed inside an inline loader row's own cell, block by block beside the row's
//! blocks (`loaderx-w0`: no workers, nothing made ahead, so a block of bare gathers between two of
//! its blocks changes nothing the row does). The row's speed over the bare gather then compares
//! two loops that ran seconds apart in one process, with the same placement of the cores and the
//! same neighbours, instead of two cells minutes apart: over the four EPYC baseline runs of
//! `d13ebc7` the dense-vision `loaderx-w0` row over the `bare-gather` row moved 0.93-1.19 while
//! both did the same gather (a 38 MB image batch is bound by the host's memory bandwidth, which
//! the host's other tenants share).

use std::time::{Duration, Instant};

use loaderx::{IndexSampler, Mode, Sampler, StreamView};

use crate::error::Result;
use crate::loader::arms::BATCH;
use crate::loader::matching::Delivered;
use competitors::Source;

/// The rows timed beside the bare gather: the inline loader (no worker refills a window while
/// the bare gathers run, so they cannot hand its next block batches made off its timer).
fn pairs_with_bare(arm: &str) -> bool {
    arm == "loaderx-w0"
}

/// The bare gathers' draws: IID over the same records as the row's (seed 7), from another seed,
/// so a bare block never re-reads the records the row's block just brought into the caches.
const SEED: u64 = 8;

/// The bare gather of one inline row's cell: `view.gather` of its own IID draws, timed in blocks,
/// each batch compared with the source after the block's timer stops.
pub struct BarePair {
    sampler: IndexSampler,
    view: StreamView,
    spent: Duration,
    batches: usize,
}

impl BarePair {
    /// The pair of `arm`'s cell over `view` (`n` records), or `None` for a row that is not paired.
    pub fn of(arm: &str, view: &StreamView, n: u64) -> Result<Option<BarePair>> {
        if !pairs_with_bare(arm) {
            return Ok(None);
        }
        Ok(Some(BarePair {
            sampler: IndexSampler::new(n, BATCH, Mode::Iid, SEED)?,
            view: view.clone(),
            spent: Duration::ZERO,
            batches: 0,
        }))
    }

    /// Times `m` bare gathers (held until the timer stops, as the row's block holds its batches),
    /// then compares each with the source: `Ok(false)` when one differs.
    pub fn block(&mut self, m: usize, source: &Source<'_>) -> Result<bool> {
        // The draw inside the timer, as the `bare-gather` row's loop and the loader both draw.
        let t = Instant::now();
        let held = (0..m)
            .map(|_| {
                let idx = self.sampler.next()?.to_vec();
                let b = self.view.gather(&idx)?;
                Ok((idx, Delivered::Loader(vec![b])))
            })
            .collect::<Result<Vec<_>>>()?;
        self.spent += t.elapsed();
        for (idx, b) in &held {
            if !b.same_as_source(idx, source) {
                return Ok(false);
            }
            self.batches += 1;
        }
        Ok(true)
    }

    /// Seconds per bare batch over the blocks timed so far.
    pub fn per_batch_s(&self) -> Option<f64> {
        (self.batches > 0).then(|| self.spent.as_secs_f64() / self.batches as f64)
    }
}
