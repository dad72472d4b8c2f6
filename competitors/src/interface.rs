//! The interface every adapter implements: what a write leaves behind
//! ([`Stored`]), [`Competitor`] (prepare, write, open) and [`Reader`] (gather). A leaf module: the
//! adapters import it, it imports no adapter.

use std::path::{Path, PathBuf};

use crate::backend::Backend;
use crate::error::Result;
use crate::output::Batch;
use crate::source::{Geometry, Source};
use crate::util::disk_bytes;

/// What [`Competitor::write`] produced: everything [`Competitor::open`] needs.
#[derive(Clone, Debug)]
pub struct Stored {
    pub backend: Backend,
    /// Directory holding every file of the store (and nothing else).
    pub dir: PathBuf,
    /// Geometry of the stored source.
    pub geometry: Geometry,
    pub len: u64,
    /// Write time measured by the backend itself (set only by adapters whose work happens in
    /// another process, i.e. ArrayRecord); the harness uses it instead of its own timer.
    pub write_seconds: Option<f64>,
}

impl Stored {
    /// What a write of `source` by `backend` into `dir` left, timed by the caller.
    pub fn new(backend: Backend, dir: &Path, source: &Source<'_>) -> Stored {
        Stored {
            backend,
            dir: dir.to_path_buf(),
            geometry: source.geometry(),
            len: source.len(),
            write_seconds: None,
        }
    }

    /// Allocated bytes (`st_blocks * 512`) of every file of the store.
    pub fn disk_bytes(&self) -> Result<u64> {
        disk_bytes(&self.dir)
    }
}

/// One competitor row: writes a prepared source and opens it for random gather.
///
/// Call order: [`prepare`](Competitor::prepare) (untimed), [`write`](Competitor::write) (timed),
/// [`open`](Competitor::open) (untimed), then [`Reader::gather`] (timed) any number of times.
pub trait Competitor: Send {
    /// The row this adapter serves.
    fn backend(&self) -> Backend;

    /// The row's name, e.g. `"hdf5-gzip"`.
    fn name(&self) -> &'static str {
        self.backend().name()
    }

    /// Whether this row exists for `geometry` (`npy-mmap-raw` is Dense only). Default: every
    /// geometry.
    fn supports(&self, _geometry: Geometry) -> bool {
        true
    }

    /// Untimed setup before the timed write: dictionary training, helper process start-up,
    /// staging the source for another process. Default: nothing.
    fn prepare(&mut self, _source: &Source<'_>) -> Result<()> {
        Ok(())
    }

    /// [`prepare`](Competitor::prepare) when held-out records of the same kind exist: a row
    /// that trains a dictionary trains it on `held_out` (records never written to the store), so
    /// the dictionary has not seen the records it compresses. Default: `prepare(source)`.
    fn prepare_held_out(&mut self, source: &Source<'_>, _held_out: &Source<'_>) -> Result<()> {
        self.prepare(source)
    }

    /// Writes the whole source into a new store inside `dir` (created if missing; must not already
    /// hold a store). This is the timed write.
    fn write(&mut self, source: &Source<'_>, dir: &Path) -> Result<Stored>;

    /// Opens a store written by [`write`](Competitor::write) for random gather (untimed: footers,
    /// indexes and metadata are loaded here, the way a long-running reader would).
    fn open(&self, stored: &Stored) -> Result<Box<dyn Reader>>;

    /// [`open`](Competitor::open) for a store that stands for one larger than memory (the cold
    /// tables): a backend with a setting for that case uses it (zrecord: `ColdReads::Always`,
    /// which `ColdReads::Auto` picks by itself for a store over half of the machine's memory).
    fn open_larger_than_memory(&self, stored: &Stored) -> Result<Box<dyn Reader>> {
        self.open(stored)
    }
}

/// An open store.
pub trait Reader: Send {
    fn len(&self) -> u64;

    /// Whether the store holds no records.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Gathers `indices` (any order, duplicates allowed, possibly empty) into one packed batch in
    /// the requested order. Out-of-range indices are an error.
    fn gather(&mut self, indices: &[u64]) -> Result<Batch>;

    /// Seconds the last [`gather`](Reader::gather) spent doing the gather, as measured by the
    /// backend itself. `Some` only for adapters whose work happens in another process (ArrayRecord):
    /// the harness then uses it instead of its own timer, which would include the transfer back.
    fn last_gather_seconds(&self) -> Option<f64> {
        None
    }
}
