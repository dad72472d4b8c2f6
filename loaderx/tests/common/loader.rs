//! Loader fixtures and waits shared by the loader test files: the stores, views, samplers, the
//! ids of a delivered batch, and waits that turn a hang into a failure.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use loaderx::{IndexSampler, Mode, Sampler, Shard, StreamView};
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
