//! Pacing and the memory bound: gathers are serialized, idle workers rest while transforms are
//! short, and a slow consumer finds the documented number of batches alive, in both delivery
//! modes (read off the pooled allocator's live counts).

mod common;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::loader::{N, dense_view, fixture, sampler, wait_until};
use loaderx::{Loader, LoaderOptions, Mode, PooledAllocator, Shard};
use zrecord::{Allocator, SystemAllocator};

const B: usize = 4;

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

/// A slow consumer takes 40 batches, each only once the pipeline holds as many batches beside the
/// one it holds as it can: `cap` undelivered ones (`workers + prefetch` while every worker runs,
/// `prefetch + 1` while paced), fewer in completion order by the steps the consumer received past
/// its low-water step beyond the first (the window: a worker draws at most `workers + prefetch`
/// steps past it). Returns the pool's statistics before close. Asserts the documented hard bound
/// (`workers + prefetch` plus the consumer's) throughout, and, once `settle` batches were taken,
/// that the pipeline holds exactly that many when it stops growing.
fn slow_consumer(
    path: &Path,
    (workers, prefetch, ordered): (usize, usize, bool),
    transform: Option<fn()>,
    cap: u64,
    settle: usize,
) -> zrecord::AllocStats {
    let pool = PooledAllocator::new(64 << 20);
    let alloc: Arc<dyn Allocator> = match transform {
        Some(_) => Arc::new(pool.clone()),
        None => Arc::new(SlowPool(pool.clone())),
    };
    let view = dense_view(path, alloc);
    let opts = LoaderOptions::new(workers, prefetch).ordered(ordered);
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
    let case = format!("w {workers} p {prefetch} ordered {ordered}");
    for k in 0..40 {
        let shards = loader.next().unwrap().unwrap();
        let ahead = loader.state_dict().delivered_ahead.len() as u64;
        assert!(
            ahead <= (workers + prefetch) as u64,
            "{case}: {ahead} steps ahead"
        );
        let window = (workers + prefetch + 1) as u64 - ahead;
        let steady = 1 + cap.min(window);
        wait_until(
            10,
            &format!("{case}: the pipeline fills up to {steady} batches"),
            || pool.pool_stats().live_allocations >= steady,
        );
        if k >= settle {
            // Steady: the queue is full and the workers allowed to hold a batch hold one, so
            // nothing else can be gathered until this batch is taken.
            assert_eq!(
                pool.pool_stats().live_allocations,
                steady,
                "{case}: batch {k}"
            );
        }
        drop(shards);
    }
    let s = pool.pool_stats();
    assert!(
        s.peak_live_allocations <= bound,
        "{case}: peak {} > {bound}",
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
        for ordered in [false, true] {
            let cap = (workers + prefetch) as u64;
            let s = slow_consumer(&path, (workers, prefetch, ordered), Some(work), cap, 0);
            if ordered || workers == 1 {
                // Nothing is ever delivered ahead: the pipeline fills to the bound.
                assert_eq!(s.peak_live_allocations, cap + 1);
            }
        }
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
        for ordered in [false, true] {
            let cap = (prefetch + 1) as u64;
            let case = (workers, prefetch, ordered);
            let s = slow_consumer(&path, case, None, cap, workers + prefetch);
            assert!(s.peak_live_allocations > cap);
        }
    }
}
