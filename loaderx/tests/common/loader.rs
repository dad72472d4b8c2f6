//! Loader fixtures and waits shared by the loader test files: the stores, views, samplers (one
//! that injects faults), the ids of a delivered batch, a transform error, and waits that turn a
//! hang into a failure.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use loaderx::{IndexSampler, Loader, LoaderOptions, Mode, Sampler, Shard, StreamView};
use zrecord::{Allocator, DenseStore, RaggedStore, SystemAllocator};

/// Records in every fixture store.
pub const N: u64 = 1000;

/// A Dense store of index records (`dense`), a Ragged one (`ragged`) and a Dense one with one
/// record fewer (`small`), in a temporary directory.
pub struct Fixture {
    _dir: tempfile::TempDir,
    pub dense: PathBuf,
    pub ragged: PathBuf,
    pub small: PathBuf,
}

pub fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let dense = super::dense_index_store(dir.path(), "dense", N, 0);
    let ragged = super::ragged_index_store(dir.path(), "ragged", N);
    let small = super::dense_index_store(dir.path(), "small", N - 1, 0);
    Fixture {
        dense,
        ragged,
        small,
        _dir: dir,
    }
}

pub fn sys() -> Arc<dyn Allocator> {
    Arc::new(SystemAllocator::new())
}

pub fn dense_view(p: &Path, a: Arc<dyn Allocator>) -> StreamView {
    DenseStore::open(p).unwrap().bind(a).into()
}

pub fn ragged_view(p: &Path, a: Arc<dyn Allocator>) -> StreamView {
    RaggedStore::open(p).unwrap().bind(a).into()
}

/// A seeded sampler over the `N` fixture records.
pub fn sampler(mode: Mode, batch: usize) -> Box<dyn Sampler> {
    Box::new(IndexSampler::new(N, batch, mode, 42).unwrap())
}

/// The global indices of a delivered shard list (stream `x`, Dense, shards concatenated).
pub fn ids(shards: &[Shard]) -> Vec<u64> {
    shards
        .iter()
        .flat_map(|s| super::dense_ids(s.get("x").unwrap().as_dense().unwrap().bytes(), 8))
        .collect()
}

/// Polls `done` every millisecond until it holds; fails the test with `what` after `secs`.
pub fn wait_until(secs: u64, what: &str, mut done: impl FnMut() -> bool) {
    let t = Instant::now();
    while !done() {
        assert!(
            t.elapsed() < Duration::from_secs(secs),
            "timed out after {secs} s: {what}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Runs `f` on a thread and fails the test if it does not finish within `secs`.
pub fn watchdog<R: Send + 'static>(
    secs: u64,
    what: String,
    f: impl FnOnce() -> R + Send + 'static,
) -> R {
    let (tx, rx) = crossbeam_channel::bounded(1);
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(r) => r,
        Err(_) => panic!("{what}: hung for {secs} s"),
    }
}

/// A sequential sampler over the `N` fixture records (step `s` draws `b s .. b s + b`) whose draw
/// `hook(step, batch)` may change or fail: how the fault tests inject a fault at a step.
pub struct Hooked<F> {
    inner: IndexSampler,
    buf: Vec<u64>,
    hook: F,
}

impl<F: FnMut(u64, &mut [u64]) -> loaderx::Result<()> + Send> Hooked<F> {
    pub fn new(batch: usize, hook: F) -> Self {
        let inner = IndexSampler::new(N, batch, Mode::Sequential, 0).unwrap();
        Hooked {
            inner,
            buf: Vec::new(),
            hook,
        }
    }
}

impl<F: FnMut(u64, &mut [u64]) -> loaderx::Result<()> + Send> Sampler for Hooked<F> {
    fn next(&mut self) -> loaderx::Result<&[u64]> {
        let step = self.inner.step();
        self.buf.clear();
        self.buf.extend_from_slice(self.inner.next()?);
        (self.hook)(step, &mut self.buf)?;
        Ok(&self.buf)
    }
    fn batch_size(&self) -> usize {
        self.inner.batch_size()
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn step(&self) -> u64 {
        self.inner.step()
    }
    fn seek(&mut self, step: u64) -> loaderx::Result<()> {
        self.inner.seek(step)
    }
}

/// The error an injected transform fault returns: the step it failed at.
#[derive(Debug)]
pub struct Boom(pub u64);

impl std::fmt::Display for Boom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "boom at step {}", self.0)
    }
}

impl std::error::Error for Boom {}

/// A loader of stream `x` (a Dense view of `dense`, IID batches of 4) whose transform sleeps 1 ms
/// and counts the batches it produced: far longer than the gather, so every worker runs (no
/// pacing) and each one ends up blocked on a full queue holding a batch.
pub fn counting_loader(
    dense: &Path,
    workers: usize,
    prefetch: usize,
) -> (Loader<()>, Arc<AtomicUsize>) {
    let produced = Arc::new(AtomicUsize::new(0));
    let counter = produced.clone();
    let loader = Loader::with_transform(
        [("x", vec![dense_view(dense, sys())])],
        sampler(Mode::Iid, 4),
        LoaderOptions::new(workers, prefetch),
        move |_shards: Vec<Shard>| {
            std::thread::sleep(Duration::from_millis(1));
            counter.fetch_add(1, Ordering::SeqCst);
            Ok(())
        },
    )
    .unwrap();
    (loader, produced)
}
