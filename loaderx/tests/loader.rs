//! Loader behavior: construction errors, stream/shard alignment, order, the fault matrix, the memory
//! bound, close while blocked, resume.
//!
//! Tests wait on conditions (counters polled against a deadline, watchdogs that turn a hang into a
//! failure), never on a sleep. The one wall-clock bound, close within a second, is in the timing
//! tier: `cargo test -p loaderx --test loader -- --ignored`.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use loaderx::{
    Batch, Error, IndexSampler, Loader, LoaderOptions, Mode, PooledAllocator, Sampler, Shard,
    StreamView,
};
use zrecord::{Allocator, DenseStore, RaggedStore, SystemAllocator};

const N: u64 = 1000;

struct Fixture {
    _dir: tempfile::TempDir,
    dense: PathBuf,
    ragged: PathBuf,
    small: PathBuf,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let dense = common::dense_index_store(dir.path(), "dense", N, 0);
    let ragged = common::ragged_index_store(dir.path(), "ragged", N);
    let small = common::dense_index_store(dir.path(), "small", N - 1, 0);
    Fixture {
        dense,
        ragged,
        small,
        _dir: dir,
    }
}

fn sys() -> Arc<dyn Allocator> {
    Arc::new(SystemAllocator::new())
}

fn dense_view(p: &Path, a: Arc<dyn Allocator>) -> StreamView {
    DenseStore::open(p).unwrap().bind(a).into()
}

fn ragged_view(p: &Path, a: Arc<dyn Allocator>) -> StreamView {
    RaggedStore::open(p).unwrap().bind(a).into()
}

fn sampler(mode: Mode, batch: usize) -> Box<dyn Sampler> {
    Box::new(IndexSampler::new(N, batch, mode, 42).unwrap())
}

/// The global indices of a delivered shard list (first stream, Dense, shards concatenated).
fn ids(shards: &[Shard]) -> Vec<u64> {
    shards
        .iter()
        .flat_map(|s| common::dense_ids(s.get("x").unwrap().as_dense().unwrap().bytes(), 8))
        .collect()
}

/// Polls `done` every millisecond until it holds; fails the test with `what` after `secs`.
fn wait_until(secs: u64, what: &str, mut done: impl FnMut() -> bool) {
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
fn watchdog<R: Send + 'static>(
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

#[test]
fn construction_errors_are_clear() {
    let fx = fixture();
    let d = || dense_view(&fx.dense, sys());
    let opts = LoaderOptions::default();
    let err = |r: loaderx::Result<Loader<Vec<Shard>>>| match r {
        Err(Error::InvalidArgument(m)) => m,
        Err(e) => panic!("wrong error kind {e}"),
        Ok(_) => panic!("accepted"),
    };
    let none: Vec<(&str, Vec<StreamView>)> = vec![];
    assert!(err(Loader::new(none, sampler(Mode::Iid, 4), opts)).contains("at least one stream"));
    assert!(
        err(Loader::new([("x", vec![])], sampler(Mode::Iid, 4), opts)).contains("empty view list")
    );
    let m = err(Loader::new(
        [("x", vec![d(), d()]), ("y", vec![d()])],
        sampler(Mode::Iid, 4),
        opts,
    ));
    assert!(m.contains("one view per shard"), "{m}");
    let m = err(Loader::new(
        [("x", vec![d()]), ("y", vec![dense_view(&fx.small, sys())])],
        sampler(Mode::Iid, 4),
        opts,
    ));
    assert!(m.contains("same records"), "{m}");
    let m = err(Loader::new(
        [("x", vec![d(), d(), d()])],
        sampler(Mode::Iid, 4),
        opts,
    ));
    assert!(m.contains("divide evenly"), "{m}");
    let m = err(Loader::new(
        [("x", vec![d()])],
        sampler(Mode::Iid, 4),
        LoaderOptions::new(2, 0),
    ));
    assert!(m.contains("prefetch"), "{m}");
    let m = err(Loader::new(
        [("x", vec![d()]), ("x", vec![d()])],
        sampler(Mode::Iid, 4),
        opts,
    ));
    assert!(m.contains("twice"), "{m}");
    let big = Box::new(IndexSampler::new(N + 1, 4, Mode::Iid, 0).unwrap());
    let m = err(Loader::new([("x", vec![d()])], big, opts));
    assert!(m.contains("1001 indices"), "{m}");
}

#[test]
fn shards_split_the_global_batch_and_streams_stay_aligned() {
    let fx = fixture();
    let (a0, a1): (Arc<dyn Allocator>, Arc<dyn Allocator>) = (sys(), sys());
    let streams = vec![
        (
            "x",
            vec![
                dense_view(&fx.dense, a0.clone()),
                dense_view(&fx.dense, a1.clone()),
            ],
        ),
        (
            "tok",
            vec![ragged_view(&fx.ragged, a0), ragged_view(&fx.ragged, a1)],
        ),
    ];
    let mut reference = IndexSampler::new(N, 16, Mode::Cyclic, 42).unwrap();
    for workers in [0, 1] {
        reference.seek(0).unwrap();
        let loader = Loader::new(
            streams.clone(),
            sampler(Mode::Cyclic, 16),
            LoaderOptions::new(workers, 2),
        )
        .unwrap();
        assert_eq!(loader.shard_count(), 2);
        assert_eq!(loader.stream_names(), ["x", "tok"]);
        for shards in loader.take(70) {
            let shards = shards.unwrap();
            let want = reference.next().unwrap().to_vec();
            assert_eq!(shards.len(), 2);
            for (j, shard) in shards.iter().enumerate() {
                let slice = &want[j * 8..(j + 1) * 8];
                let names: Vec<&str> = shard.iter().map(|(n, _)| n).collect();
                assert_eq!(names, ["x", "tok"]);
                let dense = shard.get("x").unwrap().as_dense().unwrap();
                assert_eq!(dense.shape(), &[8]);
                assert_eq!(common::dense_ids(dense.bytes(), 8), slice);
                let tok = shard.get("tok").unwrap().as_ragged().unwrap();
                assert_eq!(tok.len(), 8);
                assert_eq!(
                    tok.shapes(),
                    slice.iter().map(|i| i % 4 + 1).collect::<Vec<_>>()
                );
                let cu = tok.cu_seqlens();
                for (r, &i) in slice.iter().enumerate() {
                    let vals: Vec<i32> = tok.values()[cu[r] as usize * 4..cu[r + 1] as usize * 4]
                        .chunks_exact(4)
                        .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
                        .collect();
                    assert_eq!(vals, vec![i as i32; (i % 4 + 1) as usize]);
                }
                assert!(matches!(shard.get("tok"), Some(Batch::Ragged(_))));
                assert!(shard.get("nope").is_none());
            }
        }
    }
}

#[test]
fn one_worker_preserves_sampling_order_and_several_deliver_every_batch() {
    let fx = fixture();
    let mut reference = IndexSampler::new(N, 8, Mode::Iid, 42).unwrap();
    let want: Vec<Vec<u64>> = (0..200)
        .map(|_| reference.next().unwrap().to_vec())
        .collect();
    for (workers, prefetch) in [(0, 1), (1, 1), (1, 3), (2, 2), (4, 4)] {
        let transform = |shards: Vec<Shard>| {
            // Uneven transform cost so several workers really complete out of order.
            if ids(&shards)[0].is_multiple_of(3) {
                std::thread::sleep(Duration::from_micros(300));
            }
            Ok(ids(&shards))
        };
        let mut loader = Loader::with_transform(
            [("x", vec![dense_view(&fx.dense, sys())])],
            sampler(Mode::Iid, 8),
            LoaderOptions::new(workers, prefetch),
            transform,
        )
        .unwrap();
        if workers <= 1 {
            let got: Vec<Vec<u64>> = loader.by_ref().take(200).map(Result::unwrap).collect();
            assert_eq!(got, want, "workers {workers} prefetch {prefetch}");
        } else {
            // Completion order: every batch is one of the draws, none arrives twice, and none is
            // skipped: consuming on, every one of the first 200 draws arrives. (A preempted worker
            // may deliver its batch arbitrarily late, so no position bound is asserted.)
            let mut r = IndexSampler::new(N, 8, Mode::Iid, 42).unwrap();
            let all: Vec<Vec<u64>> = (0..2000).map(|_| r.next().unwrap().to_vec()).collect();
            let mut seen = BTreeSet::new();
            while !(0..200).all(|k| seen.contains(&k)) {
                assert!(seen.len() < 1800, "workers {workers}: a batch went missing");
                let got = loader.next().unwrap().unwrap();
                let k = all
                    .iter()
                    .position(|b| *b == got)
                    .expect("a delivered batch is one of the draws");
                assert!(seen.insert(k), "workers {workers}: draw {k} arrived twice");
            }
        }
    }
}

#[derive(Debug)]
struct Boom(u64);

impl std::fmt::Display for Boom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "boom at step {}", self.0)
    }
}

impl std::error::Error for Boom {}

const B: usize = 4;

/// Consumes a loader until `None`; returns the steps delivered (in order), the error and its position.
fn drain(loader: Loader<u64>) -> (Vec<u64>, Option<(usize, Error)>) {
    let mut steps = Vec::new();
    let mut error = None;
    let mut loader = loader;
    loop {
        match loader.next() {
            Some(Ok(s)) => {
                assert!(error.is_none(), "a batch arrived after the error");
                steps.push(s);
            }
            Some(Err(e)) => {
                assert!(error.is_none(), "two errors");
                error = Some((steps.len(), e));
            }
            None => break,
        }
        if error.is_some() {
            // After the error the loader has stopped.
            assert!(loader.next().is_none());
            assert!(loader.is_done());
            break;
        }
    }
    (steps, error)
}

fn check_fault_outcome(
    k: u64,
    workers: usize,
    prefetch: usize,
    steps: &[u64],
    error: Option<(usize, Error)>,
    what: &str,
) {
    let case = format!("{what}: k {k} workers {workers} prefetch {prefetch}");
    let (at, err) = error.unwrap_or_else(|| panic!("{case}: no error"));
    assert_eq!(at, steps.len(), "{case}");
    assert!(
        !steps.contains(&k),
        "{case}: the failing batch was delivered"
    );
    if workers <= 1 {
        assert_eq!(steps, (0..k).collect::<Vec<_>>(), "{case}");
    } else {
        // Several workers deliver in completion order, and batches drawn after step `k` may
        // arrive before its error (a slow failure, e.g. a panic hook printing a backtrace, lets the
        // other workers run on). The sequential sampler wraps every `N / B` steps and the value is
        // the position in the cycle, so a value may repeat once per wrap, never more.
        let period = N / B as u64;
        let max_repeats = steps.len() as u64 / period + 1;
        let mut counts = std::collections::BTreeMap::<u64, u64>::new();
        for &s in steps {
            assert!(s < period, "{case}: value {s} out of the cycle");
            *counts.entry(s).or_default() += 1;
        }
        for (&s, &c) in &counts {
            assert!(c <= max_repeats, "{case}: step {s} delivered {c} times");
        }
        assert!(
            (0..k).all(|s| counts.contains_key(&s)),
            "{case}: a batch before the failure is missing: {steps:?}"
        );
    }
    match (what, err) {
        ("transform", Error::Transform(e)) => {
            assert_eq!(e.to_string(), format!("boom at step {k}"), "{case}")
        }
        ("gather", Error::Store(zrecord::Error::IndexOutOfRange { index, .. })) => {
            assert_eq!(index, N + k, "{case}")
        }
        ("panic", Error::Panicked(m)) => {
            assert!(m.contains("transform panicked: kaboom"), "{case}: {m}")
        }
        (_, e) => panic!("{case}: unexpected error {e}"),
    }
}

#[test]
fn fault_matrix_transform_errors() {
    let fx = Arc::new(fixture());
    for workers in [0usize, 1, 2, 4] {
        for prefetch in [1usize, 2, 8] {
            for k in 0..20u64 {
                let fx = fx.clone();
                let (steps, error) = watchdog(
                    10,
                    format!("k {k} workers {workers} prefetch {prefetch}"),
                    move || {
                        let transform = move |shards: Vec<Shard>| {
                            let step = ids(&shards)[0] / B as u64;
                            if step == k {
                                Err(Error::transform(Boom(k)))
                            } else {
                                Ok(step)
                            }
                        };
                        let loader = Loader::with_transform(
                            [("x", vec![dense_view(&fx.dense, sys())])],
                            sampler(Mode::Sequential, B),
                            LoaderOptions::new(workers, prefetch),
                            transform,
                        )
                        .unwrap();
                        drain(loader)
                    },
                );
                check_fault_outcome(k, workers, prefetch, &steps, error, "transform");
            }
        }
    }
}

#[test]
fn a_slow_failure_lets_other_workers_run_on_and_its_error_still_arrives() {
    // The worker holding step k fails only after 300 ms; meanwhile the other worker keeps
    // delivering (the sampler wraps several times). The error must still arrive, exactly once.
    let fx = Arc::new(fixture());
    let k = 3u64;
    let fx2 = fx.clone();
    let (steps, error) = watchdog(10, "slow failure".into(), move || {
        let first = Arc::new(AtomicBool::new(true));
        let transform = move |shards: Vec<Shard>| {
            let step = ids(&shards)[0] / B as u64;
            if step == k {
                if first.swap(false, Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(300));
                }
                return Err(Error::transform(Boom(k)));
            }
            Ok(step)
        };
        let loader = Loader::with_transform(
            [("x", vec![dense_view(&fx2.dense, sys())])],
            sampler(Mode::Sequential, B),
            LoaderOptions::new(2, 2),
            transform,
        )
        .unwrap();
        drain(loader)
    });
    check_fault_outcome(k, 2, 2, &steps, error, "transform");
}

/// An allocator whose `acquire` takes 30 ms and records how many ran at once.
#[derive(Debug, Default)]
struct SlowAcquire {
    inner: SystemAllocator,
    running: AtomicUsize,
    peak: AtomicUsize,
}

impl Allocator for SlowAcquire {
    fn device(&self) -> zrecord::Device {
        self.inner.device()
    }
    fn acquire(&self, bytes: usize, align: usize) -> zrecord::Result<zrecord::Allocation> {
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(30));
        self.running.fetch_sub(1, Ordering::SeqCst);
        self.inner.acquire(bytes, align)
    }
}

#[test]
fn gathers_are_serialized_under_the_shared_lock() {
    // Draw + gather run under one lock: whatever the worker count, two gathers (here: their slow
    // allocations) are never in flight together, while transforms do overlap.
    let fx = fixture();
    for workers in [1usize, 2, 4] {
        let alloc = Arc::new(SlowAcquire::default());
        let as_dyn: Arc<dyn Allocator> = alloc.clone();
        let running = Arc::new(AtomicUsize::new(0));
        let peak_transforms = Arc::new(AtomicUsize::new(0));
        let (r, p) = (running.clone(), peak_transforms.clone());
        let mut loader = Loader::with_transform(
            [("x", vec![dense_view(&fx.dense, as_dyn)])],
            sampler(Mode::Sequential, B),
            LoaderOptions::new(workers, 2),
            move |_shards: Vec<Shard>| {
                let now = r.fetch_add(1, Ordering::SeqCst) + 1;
                p.fetch_max(now, Ordering::SeqCst);
                // With several workers, a transform waits until another one runs beside it (which
                // needs the next gather to run meanwhile), so overlap is awaited, not timed; once it
                // happened no transform waits. Up to 10 s, then the assertion below fails.
                if workers > 1 {
                    let t = Instant::now();
                    while p.load(Ordering::SeqCst) < 2 && t.elapsed() < Duration::from_secs(10) {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
                r.fetch_sub(1, Ordering::SeqCst);
                Ok(())
            },
        )
        .unwrap();
        for _ in 0..12 {
            loader.next().unwrap().unwrap();
        }
        loader.close();
        assert_eq!(alloc.peak.load(Ordering::SeqCst), 1, "{workers} workers");
        if workers > 1 {
            assert!(
                peak_transforms.load(Ordering::SeqCst) > 1,
                "{workers} workers: transforms never overlapped"
            );
        }
    }
}

#[test]
fn with_instant_transforms_one_worker_runs_and_the_others_rest() {
    // Gathers are serialized, so with a transform far shorter than a gather (30 ms here) extra
    // workers add nothing but hand-offs: once both are measured, every batch comes from the
    // same worker. The consumer keeps up, so no worker ever finds the queue full.
    let fx = fixture();
    let alloc: Arc<dyn Allocator> = Arc::new(SlowAcquire::default());
    let mut loader = Loader::with_transform(
        [("x", vec![dense_view(&fx.dense, alloc)])],
        sampler(Mode::Sequential, B),
        // A deep queue: the consumer would have to stall for 16 gathers (0.5 s) to fill it.
        LoaderOptions::new(4, 16),
        |_shards: Vec<Shard>| Ok(std::thread::current().id()),
    )
    .unwrap();
    // Warm-up: the first batches run before transforms are measured; workers already past their
    // pacing check finish one more batch each.
    for _ in 0..6 {
        loader.next().unwrap().unwrap();
    }
    let threads: Vec<_> = (0..10).map(|_| loader.next().unwrap().unwrap()).collect();
    loader.close();
    assert!(
        threads.iter().all(|t| *t == threads[0]),
        "transforms ran on several workers: {threads:?}"
    );
}

/// A sequential sampler that draws an out-of-range index at step `fail`.
struct Poisoned {
    inner: IndexSampler,
    fail: u64,
    buf: Vec<u64>,
}

impl Sampler for Poisoned {
    fn next(&mut self) -> loaderx::Result<&[u64]> {
        let step = self.inner.step();
        self.buf.clear();
        self.buf.extend_from_slice(self.inner.next()?);
        if step == self.fail {
            self.buf[B - 1] = N + self.fail;
        }
        Ok(&self.buf)
    }
    fn batch_size(&self) -> usize {
        B
    }
    fn len(&self) -> u64 {
        N
    }
    fn step(&self) -> u64 {
        self.inner.step()
    }
    fn seek(&mut self, step: u64) -> loaderx::Result<()> {
        self.inner.seek(step)
    }
}

#[test]
fn fault_matrix_gather_errors_and_panics() {
    let fx = Arc::new(fixture());
    for workers in [0usize, 1, 2, 4] {
        for prefetch in [1usize, 2, 8] {
            for k in [0u64, 1, 5, 13, 19] {
                let fx2 = fx.clone();
                let (steps, error) =
                    watchdog(10, format!("gather k {k} workers {workers}"), move || {
                        let s = Box::new(Poisoned {
                            inner: IndexSampler::new(N, B, Mode::Sequential, 0).unwrap(),
                            fail: k,
                            buf: Vec::new(),
                        });
                        let loader = Loader::with_transform(
                            [("x", vec![dense_view(&fx2.dense, sys())])],
                            s,
                            LoaderOptions::new(workers, prefetch),
                            |shards: Vec<Shard>| Ok(ids(&shards)[0] / B as u64),
                        )
                        .unwrap();
                        drain(loader)
                    });
                check_fault_outcome(k, workers, prefetch, &steps, error, "gather");
                let fx3 = fx.clone();
                let (steps, error) =
                    watchdog(10, format!("panic k {k} workers {workers}"), move || {
                        let loader = Loader::with_transform(
                            [("x", vec![dense_view(&fx3.dense, sys())])],
                            sampler(Mode::Sequential, B),
                            LoaderOptions::new(workers, prefetch),
                            move |shards: Vec<Shard>| {
                                let step = ids(&shards)[0] / B as u64;
                                if step == k {
                                    panic!("kaboom");
                                }
                                Ok(step)
                            },
                        )
                        .unwrap();
                        drain(loader)
                    });
                check_fault_outcome(k, workers, prefetch, &steps, error, "panic");
            }
        }
    }
}

/// A pooled allocator whose `acquire` first sleeps 2 ms: a gather far longer than any transform of
/// these tests, so the pacing regime does not depend on the machine's load.
#[derive(Debug)]
struct SlowPool(PooledAllocator);

impl Allocator for SlowPool {
    fn device(&self) -> zrecord::Device {
        self.0.device()
    }
    fn acquire(&self, bytes: usize, align: usize) -> zrecord::Result<zrecord::Allocation> {
        std::thread::sleep(Duration::from_millis(2));
        self.0.acquire(bytes, align)
    }
}

/// A slow consumer takes 40 batches, each only once the pipeline holds `steady` batches beside
/// the one it holds; returns the pool's statistics before close. Asserts the documented hard bound
/// (`workers + prefetch` plus the consumer's) throughout, and, once `settle` batches were taken,
/// that the pipeline holds exactly `steady` when it stops growing.
fn slow_consumer(
    path: &Path,
    workers: usize,
    prefetch: usize,
    transform: Option<fn()>,
    steady: u64,
    settle: usize,
) -> zrecord::AllocStats {
    let pool = PooledAllocator::new(64 << 20);
    let alloc: Arc<dyn Allocator> = match transform {
        Some(_) => Arc::new(pool.clone()),
        None => Arc::new(SlowPool(pool.clone())),
    };
    let view = dense_view(path, alloc);
    let opts = LoaderOptions::new(workers, prefetch);
    let mut loader = match transform {
        Some(work) => Loader::with_transform([("x", vec![view])], sampler(Mode::Iid, 64), opts, {
            move |shards: Vec<Shard>| {
                work();
                Ok(shards)
            }
        })
        .unwrap(),
        None => Loader::new([("x", vec![view])], sampler(Mode::Iid, 64), opts).unwrap(),
    };
    let bound = (workers + prefetch + 1) as u64; // + the one the consumer holds
    for k in 0..40 {
        let shards = loader.next().unwrap().unwrap();
        wait_until(
            10,
            &format!("w {workers} p {prefetch}: the pipeline fills up to {steady} batches"),
            || pool.pool_stats().live_allocations >= steady,
        );
        if k >= settle {
            // Steady: the queue is full and the one worker allowed to hold a batch holds it, so
            // nothing else can be gathered until this batch is taken.
            assert_eq!(
                pool.pool_stats().live_allocations,
                steady,
                "w {workers} p {prefetch}: batch {k}"
            );
        }
        drop(shards);
    }
    let s = pool.pool_stats();
    assert!(
        s.peak_live_allocations <= bound,
        "w {workers} p {prefetch}: peak {} > {bound}",
        s.peak_live_allocations
    );
    assert!(s.hits > 0, "dropped batches return to the pool");
    loader.close();
    assert_eq!(
        pool.pool_stats().live_allocations,
        0,
        "close drops queued and in-flight batches"
    );
    s
}

#[test]
fn with_long_transforms_a_slow_consumer_finds_workers_plus_prefetch_batches() {
    let dir = tempfile::tempdir().unwrap();
    let path = common::dense_index_store(dir.path(), "d", N, 127);
    // A transform far longer than the gather of 64 small records: every worker runs, and each
    // one that finds the queue full waits there with its batch.
    fn work() {
        std::thread::sleep(Duration::from_millis(2));
    }
    for (workers, prefetch) in [(1, 1), (2, 3), (4, 1), (3, 8)] {
        let bound = (workers + prefetch + 1) as u64;
        let s = slow_consumer(&path, workers, prefetch, Some(work), bound, 0);
        assert_eq!(s.peak_live_allocations, bound);
    }
}

#[test]
fn with_short_transforms_at_most_prefetch_plus_one_batches_wait() {
    let dir = tempfile::tempdir().unwrap();
    let path = common::dense_index_store(dir.path(), "d", N, 127);
    // No transform, and slow gathers (`SlowPool`): paced, one worker runs and the others rest,
    // also while it waits on the full queue. Batches drawn before the first measurement (at most
    // one per worker) are taken first.
    for (workers, prefetch) in [(1, 1), (2, 3), (4, 1), (3, 8)] {
        let steady = (prefetch + 2) as u64;
        let s = slow_consumer(&path, workers, prefetch, None, steady, workers + prefetch);
        assert!(s.peak_live_allocations >= steady);
    }
}

/// A loader whose transform counts the batches it produced.
fn counting_loader(
    fx: &Fixture,
    workers: usize,
    prefetch: usize,
) -> (Loader<()>, Arc<AtomicUsize>) {
    let produced = Arc::new(AtomicUsize::new(0));
    let counter = produced.clone();
    let loader = Loader::with_transform(
        [("x", vec![dense_view(&fx.dense, sys())])],
        sampler(Mode::Iid, 4),
        LoaderOptions::new(workers, prefetch),
        move |_shards: Vec<Shard>| {
            // Work far longer than the gather of 4 records: every worker runs (no pacing), so each
            // one ends up blocked on the full queue holding a batch.
            std::thread::sleep(Duration::from_millis(1));
            counter.fetch_add(1, Ordering::SeqCst);
            Ok(())
        },
    )
    .unwrap();
    (loader, produced)
}

/// Takes one batch, waits until the queue is full and every worker blocks holding one, then closes
/// the loader; then the same with a second loader that is dropped. Returns how long the close and
/// the drop took.
fn close_blocked_workers(fx: &Fixture, workers: usize, prefetch: usize) -> (Duration, Duration) {
    let at_bound = 1 + prefetch + workers;
    let (mut loader, produced) = counting_loader(fx, workers, prefetch);
    loader.next().unwrap().unwrap();
    wait_until(5, "the queue fills and every worker blocks", || {
        produced.load(Ordering::SeqCst) >= at_bound
    });
    assert_eq!(
        produced.load(Ordering::SeqCst),
        at_bound,
        "workers blocked at the bound"
    );
    let t = Instant::now();
    loader.close();
    let close_took = t.elapsed();
    // Close joined every worker, so the count is final: none went past the bound while blocked.
    assert_eq!(
        produced.load(Ordering::SeqCst),
        at_bound,
        "workers stayed blocked at the bound until close"
    );
    assert!(loader.next().is_none());
    // Dropping a loader in the same state.
    let (mut l2, produced) = counting_loader(fx, workers, prefetch);
    l2.next().unwrap().unwrap();
    wait_until(5, "the second loader fills up", || {
        produced.load(Ordering::SeqCst) >= at_bound
    });
    let t = Instant::now();
    drop(l2);
    (close_took, t.elapsed())
}

#[test]
fn close_joins_workers_blocked_on_a_full_queue() {
    let fx = Arc::new(fixture());
    for (workers, prefetch) in [(1, 1), (4, 1), (4, 8)] {
        let fx = fx.clone();
        // A close or drop that hangs fails here; how prompt they are is the timing tier's check.
        watchdog(10, format!("close w {workers} p {prefetch}"), move || {
            close_blocked_workers(&fx, workers, prefetch)
        });
    }
}

#[test]
#[ignore = "timing tier: run with --ignored"]
fn close_joins_workers_blocked_on_a_full_queue_within_a_second() {
    let fx = Arc::new(fixture());
    for (workers, prefetch) in [(1, 1), (4, 1), (4, 8)] {
        let fx = fx.clone();
        let (close_took, drop_took) =
            watchdog(10, format!("close w {workers} p {prefetch}"), move || {
                close_blocked_workers(&fx, workers, prefetch)
            });
        assert!(
            close_took < Duration::from_secs(1),
            "w {workers} p {prefetch}: close took {close_took:?}"
        );
        // Dropping a loader in the same state is just as prompt.
        assert!(
            drop_took < Duration::from_secs(1),
            "w {workers} p {prefetch}: drop took {drop_took:?}"
        );
    }
}

#[test]
fn resume_from_step_reproduces_the_uninterrupted_run() {
    let fx = fixture();
    let streams = || {
        vec![
            ("x", vec![dense_view(&fx.dense, sys())]),
            ("t", vec![ragged_view(&fx.ragged, sys())]),
        ]
    };
    let digest = |shards: Vec<Shard>| {
        let mut v = ids(&shards);
        let t = shards[0].get("t").unwrap().as_ragged().unwrap();
        v.extend(t.shapes());
        Ok(v)
    };
    for mode in [Mode::Cyclic, Mode::Iid] {
        let full: Vec<Vec<u64>> = Loader::with_transform(
            streams(),
            sampler(mode, 48),
            LoaderOptions::new(0, 1),
            digest,
        )
        .unwrap()
        .take(60)
        .map(Result::unwrap)
        .collect();
        for workers in [0usize, 1] {
            for prefetch in [1usize, 2, 8] {
                let mut first = Loader::with_transform(
                    streams(),
                    sampler(mode, 48),
                    LoaderOptions::new(workers, prefetch),
                    digest,
                )
                .unwrap();
                let head: Vec<Vec<u64>> = first.by_ref().take(23).map(Result::unwrap).collect();
                assert_eq!(head, full[..23]);
                let at = first.step();
                assert_eq!(
                    at, 23,
                    "the loader position counts delivered batches, not prefetched ones"
                );
                let mut s = first.into_sampler();
                assert!(s.step() >= 23, "the workers drew ahead");
                s.seek(at).unwrap();
                let tail: Vec<Vec<u64>> = Loader::with_transform(
                    streams(),
                    s,
                    LoaderOptions::new(workers, prefetch),
                    digest,
                )
                .unwrap()
                .take(37)
                .map(Result::unwrap)
                .collect();
                assert_eq!(
                    tail,
                    full[23..],
                    "{mode:?} workers {workers} prefetch {prefetch}"
                );
            }
        }
    }
}

#[test]
fn the_loader_never_closes_what_it_borrows() {
    let fx = fixture();
    let pool = PooledAllocator::new(1 << 20);
    let alloc: Arc<dyn Allocator> = Arc::new(pool.clone());
    let store = DenseStore::open(&fx.dense).unwrap();
    let view = store.bind(alloc.clone());
    let mut loader = Loader::new(
        [("x", vec![StreamView::Dense(view.clone())])],
        sampler(Mode::Iid, 4),
        LoaderOptions::new(2, 2),
    )
    .unwrap();
    loader.next().unwrap().unwrap();
    drop(loader);
    assert!(!store.is_closed());
    assert_eq!(view.gather(&[7]).unwrap().bytes(), 7u64.to_le_bytes());
    let held = alloc.acquire(16, 8).unwrap();
    assert_eq!(held.len(), 16);
    assert_eq!(pool.pool_stats().live_allocations, 1);
}

#[test]
fn a_sampler_drawing_the_wrong_batch_size_is_an_error_not_a_panic() {
    struct Short(Vec<u64>);
    impl Sampler for Short {
        fn next(&mut self) -> loaderx::Result<&[u64]> {
            Ok(&self.0[..1])
        }
        fn batch_size(&self) -> usize {
            2
        }
        fn len(&self) -> u64 {
            N
        }
        fn step(&self) -> u64 {
            0
        }
        fn seek(&mut self, _: u64) -> loaderx::Result<()> {
            Ok(())
        }
    }
    let fx = fixture();
    for workers in [0, 2] {
        let mut loader = Loader::new(
            [("x", vec![dense_view(&fx.dense, sys())])],
            Box::new(Short(vec![1, 2])),
            LoaderOptions::new(workers, 1),
        )
        .unwrap();
        match loader.next() {
            Some(Err(Error::Sampler(m))) => assert!(m.contains("expected its batch size 2"), "{m}"),
            other => panic!("unexpected {other:?}"),
        }
        assert!(loader.next().is_none());
    }
}
