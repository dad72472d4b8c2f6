//! Ordered delivery (`LoaderOptions::ordered`): step `k` is the `k`-th batch whatever the worker
//! count and however long each transform takes, while the workers stay within the window of
//! `workers + prefetch` steps past the first undelivered one.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::loader::{N, dense_view, fixture, ids, sampler, sys, wait_until, watchdog};
use loaderx::{IndexSampler, Loader, LoaderOptions, Mode, PooledAllocator, Sampler, Shard};
use zrecord::Allocator;

/// A sleep of 0-700 µs that is a pure function of the batch: transforms finish out of order.
fn random_work(ids: &[u64]) {
    let h = ids[0].wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 54;
    std::thread::sleep(Duration::from_micros(h % 700));
}

#[test]
fn ordered_delivery_yields_step_k_as_the_kth_batch_at_any_worker_count() {
    let fx = Arc::new(fixture());
    for mode in [Mode::Cyclic, Mode::Iid] {
        let mut reference = IndexSampler::new(N, 8, mode, 42).unwrap();
        let want: Vec<Vec<u64>> = (0..150)
            .map(|_| reference.next().unwrap().to_vec())
            .collect();
        for (workers, prefetch) in [(0, 1), (1, 2), (2, 1), (2, 4), (4, 1), (4, 4)] {
            let fx = fx.clone();
            let got = watchdog(
                30,
                format!("{mode:?} w {workers} p {prefetch}"),
                move || {
                    let loader = Loader::with_transform(
                        [("x", vec![dense_view(&fx.dense, sys())])],
                        sampler(mode, 8),
                        LoaderOptions::new(workers, prefetch).ordered(true),
                        |shards: Vec<Shard>| {
                            let v = ids(&shards);
                            random_work(&v);
                            Ok(v)
                        },
                    )
                    .unwrap();
                    loader.take(150).map(Result::unwrap).collect::<Vec<_>>()
                },
            );
            assert_eq!(got, want, "{mode:?} workers {workers} prefetch {prefetch}");
        }
    }
}

#[test]
fn a_slow_step_holds_the_workers_within_the_window_and_the_live_batches_within_the_bound() {
    // Step `SLOW` blocks in its transform until released. The consumer waits for it (ordered), and
    // the other workers draw on only up to step `SLOW + workers + prefetch - 1`: at most
    // `workers + prefetch` batches are drawn and undelivered, counted by the pool.
    const SLOW: u64 = 3;
    let fx = fixture();
    for (workers, prefetch) in [(2, 1), (2, 3), (4, 2)] {
        let pool = PooledAllocator::new(16 << 20);
        let alloc: Arc<dyn Allocator> = Arc::new(pool.clone());
        let release = Arc::new(AtomicBool::new(false));
        let started = Arc::new(AtomicUsize::new(0));
        let highest = Arc::new(AtomicU64::new(0));
        let (r, s, h) = (release.clone(), started.clone(), highest.clone());
        let mut loader = Loader::with_transform(
            [("x", vec![dense_view(&fx.dense, alloc)])],
            sampler(Mode::Sequential, 4),
            LoaderOptions::new(workers, prefetch).ordered(true),
            move |shards: Vec<Shard>| {
                let step = ids(&shards)[0] / 4;
                h.fetch_max(step, Ordering::SeqCst);
                s.fetch_add(1, Ordering::SeqCst);
                // Far longer than the gather of 4 records: every worker runs (no pacing).
                std::thread::sleep(Duration::from_millis(1));
                if step == SLOW {
                    let t = Instant::now();
                    while !r.load(Ordering::SeqCst) && t.elapsed() < Duration::from_secs(20) {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
                Ok(shards)
            },
        )
        .unwrap();
        for k in 0..SLOW {
            let got = loader.next().unwrap().unwrap();
            assert_eq!(ids(&got)[0] / 4, k);
        }
        // Steps SLOW .. SLOW + workers + prefetch - 1 are drawn (the window), and no more.
        let last = SLOW + (workers + prefetch) as u64 - 1;
        let case = format!("w {workers} p {prefetch}");
        wait_until(10, &format!("{case}: the window fills"), || {
            highest.load(Ordering::SeqCst) >= last && started.load(Ordering::SeqCst) as u64 > last
        });
        // A worker past the window would draw within microseconds; give it ample time to show.
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(highest.load(Ordering::SeqCst), last, "{case}");
        let live = pool.pool_stats().live_allocations;
        assert!(live <= (workers + prefetch) as u64, "{case}: {live} live");
        release.store(true, Ordering::SeqCst);
        for k in SLOW..SLOW + 40 {
            let got = loader.next().unwrap().unwrap();
            assert_eq!(ids(&got)[0] / 4, k % (N / 4), "{case}");
            drop(got);
        }
        let peak = pool.pool_stats().peak_live_allocations;
        assert!(
            peak <= (workers + prefetch + 1) as u64,
            "{case}: peak {peak} live batches"
        );
        loader.close();
    }
}

#[test]
fn ordered_and_completion_loaders_deliver_the_same_batches() {
    // Completion order delivers the same set of steps; ordered delivers them sorted.
    let fx = fixture();
    let run = |ordered: bool| {
        Loader::with_transform(
            [("x", vec![dense_view(&fx.dense, sys())])],
            sampler(Mode::Cyclic, 8),
            LoaderOptions::new(4, 2).ordered(ordered),
            |shards: Vec<Shard>| {
                let v = ids(&shards);
                random_work(&v);
                Ok(v)
            },
        )
        .unwrap()
    };
    let ordered: Vec<Vec<u64>> = run(true).take(100).map(Result::unwrap).collect();
    let mut completion = run(false);
    let mut got: Vec<Vec<u64>> = completion.by_ref().take(100).map(Result::unwrap).collect();
    // The completion-order loader's state names what it delivered: every step below its
    // low-water step and the ones ahead of it.
    let state = completion.state_dict();
    let mut expect: Vec<u64> = (0..state.step).collect();
    expect.extend(&state.delivered_ahead);
    assert_eq!(expect.len(), 100);
    let mut reference = IndexSampler::new(N, 8, Mode::Cyclic, 42).unwrap();
    let all: Vec<Vec<u64>> = (0..200)
        .map(|_| reference.next().unwrap().to_vec())
        .collect();
    let mut want: Vec<Vec<u64>> = expect.iter().map(|&s| all[s as usize].clone()).collect();
    got.sort();
    want.sort();
    assert_eq!(got, want);
    assert_eq!(ordered, all[..100]);
}
