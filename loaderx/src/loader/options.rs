//! The loader's options: [`LoaderOptions`] (workers, prefetch, process slice, delivery mode) and
//! [`MixtureSource`], one source of a weighted mixture.

use super::stream::StreamView;
use super::threads::cores;
use crate::sampler::Mode;

/// Execution policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoaderOptions {
    /// Background workers; 0 runs everything in the caller's thread.
    pub workers: usize,
    /// Output queue capacity (>= 1) when `workers > 0`; ignored when `workers == 0`.
    pub prefetch: usize,
    /// This process's rank in a data-parallel job (`< process_count`): it receives the contiguous
    /// slice `process_index` of every global batch. 0 for a single process.
    pub process_index: usize,
    /// Processes sharing each global batch (>= 1); the sampler's batch must divide by
    /// `process_count x shards`. 1 for a single process.
    pub process_count: usize,
    /// Deliver step `k` as the `k`-th batch whatever the worker count (a reorder buffer on the
    /// consumer's side). `false` (the default): completion order with several workers.
    pub ordered: bool,
}

impl Default for LoaderOptions {
    fn default() -> Self {
        LoaderOptions::new(4, 4)
    }
}

impl LoaderOptions {
    /// Options with the given workers and prefetch, for a single process, in completion order.
    pub fn new(workers: usize, prefetch: usize) -> Self {
        LoaderOptions {
            workers,
            prefetch,
            process_index: 0,
            process_count: 1,
            ordered: false,
        }
    }

    /// These options for process `index` of `count` in a data-parallel job.
    pub fn process(self, index: usize, count: usize) -> Self {
        LoaderOptions {
            process_index: index,
            process_count: count,
            ..self
        }
    }

    /// These options with ordered delivery on or off.
    pub fn ordered(self, ordered: bool) -> Self {
        LoaderOptions { ordered, ..self }
    }

    /// Background threads a loader with these options runs on this machine: `workers` worker
    /// threads, plus `cores - 1` gather helpers (sleeping while idle) when there are 2 cores or
    /// more (see the module docs). All of them exist when the loader's constructor returns and are
    /// joined by [`Loader::close`](super::Loader::close).
    pub fn threads(&self) -> usize {
        match (self.workers, cores()) {
            (0, _) => 0,
            (w, cores) if cores >= 2 => w + cores - 1,
            (w, _) => w,
        }
    }
}

/// One source of a mixture ([`Loader::mixture`](super::Loader::mixture)): its streams (as for
/// [`Loader::new`](super::Loader::new): names to one view per shard position; every source has the
/// same stream names, kinds and shard count, Dense streams the same dtype and item shape, Ragged
/// streams the same dtype and rank), its weight, and the mode and seed of its own index stream
/// over all its records.
#[derive(Clone, Debug)]
pub struct MixtureSource<S = String> {
    /// Stream names to views, one per shard position.
    pub streams: Vec<(S, Vec<StreamView>)>,
    /// The source's weight from step 0 (finite, positive).
    pub weight: f64,
    /// How the source's records are ordered.
    pub mode: Mode,
    /// The seed of its index stream.
    pub seed: u64,
}
