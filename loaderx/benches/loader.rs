//! Loader overhead: a raw Dense store with an identity transform, workers 0/1/2, against the bare
//! gather of the same view on the same batches.
//!
//! A second, interleaved-only section does the same for Dense vision batches (256 records of
//! `uint8[3,224,224]`, 37.6 MiB per batch, a store larger than a 260 MiB last-level cache) with
//! workers 1-4 and prefetch 4, and prints the pool's misses per batch beside the ratios: a loader
//! keeps up to `workers + prefetch` batches alive, so a pool smaller than that set refaults memory.
//! `LOADER_BENCH_POOL_MIB` sets the pool size of that section (default: the 256 MiB default);
//! `LOADER_BENCH_SECTIONS=small,vision` picks sections (default: both).

mod common;

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use benchkit::stats::median;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use loaderx::{IndexSampler, Loader, LoaderOptions, Mode, PooledAllocator, Sampler, StreamView};
use zrecord::{Allocator, Codec, DType, DenseStore, DenseWriter, WriterOptions};

const RECORDS: u64 = 20_000;
const RECORD_BYTES: usize = 4096;
const BATCH: usize = 256;

fn loader(c: &mut Criterion) {
    if std::env::var("LOADER_BENCH_SECTIONS").is_ok_and(|s| !s.contains("small")) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dense");
    let mut w = DenseWriter::create(
        &path,
        DType::UInt8,
        &[RECORD_BYTES as u64],
        Codec::Raw,
        WriterOptions::default(),
    )
    .unwrap();
    let data: Vec<u8> = (0..RECORDS as usize * RECORD_BYTES)
        .map(|i| (i * 31 % 251) as u8)
        .collect();
    w.append(&data).unwrap();
    w.close().unwrap();
    drop(data);
    let store = DenseStore::open(&path).unwrap();
    let alloc: Arc<dyn Allocator> = Arc::new(PooledAllocator::default());
    let view = store.bind(alloc);

    let mut g = c.benchmark_group(format!("loader/dense_{RECORD_BYTES}B_batch{BATCH}"));
    g.throughput(Throughput::Bytes((BATCH * RECORD_BYTES) as u64));
    let mut s = IndexSampler::new(RECORDS, BATCH, Mode::Iid, 7).unwrap();
    g.bench_function("bare_gather", |b| {
        b.iter(|| {
            let batch = view.gather(s.next().unwrap()).unwrap();
            black_box(batch.bytes()[0])
        })
    });
    for workers in [0usize, 1, 2] {
        let sampler = Box::new(IndexSampler::new(RECORDS, BATCH, Mode::Iid, 7).unwrap());
        let mut l = Loader::new(
            [("x", vec![StreamView::Dense(view.clone())])],
            sampler,
            LoaderOptions::new(workers, 4),
        )
        .unwrap();
        g.bench_function(format!("loader_workers{workers}"), |b| {
            b.iter(|| {
                let shards = l.next().unwrap().unwrap();
                black_box(shards[0].get("x").unwrap().as_dense().unwrap().bytes()[0])
            })
        });
        l.close();
    }
    g.finish();

    // The same four variants again, interleaved round by round, so that drift on a shared machine
    // hits them alike: medians of per-round µs per batch, and their ratios to the bare gather.
    interleaved(&view);
}

/// Interleaved Dense-vision rounds: bare gather vs loader workers 1-4 (prefetch 4).
fn vision(_: &mut Criterion) {
    if std::env::var("LOADER_BENCH_SECTIONS").is_ok_and(|s| !s.contains("vision")) {
        return;
    }
    const STRIDE: usize = 3 * 224 * 224;
    const N: u64 = 2400;
    const ROUNDS: usize = 5;
    const PER_ROUND: u32 = 24;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("vision");
    let opts = WriterOptions {
        sync: false,
        ..WriterOptions::default()
    };
    let mut w = DenseWriter::create(&path, DType::UInt8, &[3, 224, 224], Codec::Raw, opts).unwrap();
    let data: Vec<u8> = (0..N as usize * STRIDE)
        .map(|i| (i / 7 % 251) as u8)
        .collect();
    w.append(&data).unwrap();
    w.close().unwrap();
    drop(data);
    let pool_mib: u64 = common::env_or("LOADER_BENCH_POOL_MIB", loaderx::DEFAULT_POOL_SIZE >> 20);
    let pool = PooledAllocator::new(pool_mib << 20);
    let view = DenseStore::open(&path)
        .unwrap()
        .bind(Arc::new(pool.clone()) as Arc<dyn Allocator>);
    // 0: bare gather; 1-4: loader workers; 5: bare gather holding its last `HELD` batches alive,
    // so its output rotates over as many regions as a loader's in-flight set (cache footprint).
    const HELD: usize = 5;
    let variants = [0usize, 1, 2, 3, 4, 5];
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); variants.len()];
    let mut misses = vec![0u64; variants.len()];
    for round in 0..ROUNDS {
        let seed = 500 + round as u64;
        for (k, &workers) in variants.iter().enumerate() {
            let mut sampler = IndexSampler::new(N, BATCH, Mode::Iid, seed).unwrap();
            if workers == 0 || workers == 5 {
                let held = if workers == 0 { 1 } else { HELD };
                let mut alive = std::collections::VecDeque::new();
                for _ in 0..held {
                    alive.push_back(view.gather(sampler.next().unwrap()).unwrap());
                }
                let m0 = pool.pool_stats().misses;
                let t = Instant::now();
                for _ in 0..PER_ROUND {
                    alive.pop_front();
                    let batch = view.gather(sampler.next().unwrap()).unwrap();
                    black_box(batch.bytes()[0]);
                    alive.push_back(batch);
                }
                times[k].push(t.elapsed().as_secs_f64() * 1e3 / f64::from(PER_ROUND));
                misses[k] += pool.pool_stats().misses - m0;
                continue;
            }
            let mut l = Loader::new(
                [("x", vec![StreamView::Dense(view.clone())])],
                Box::new(sampler),
                LoaderOptions::new(workers, 4),
            )
            .unwrap();
            for _ in 0..8 {
                black_box(l.next().unwrap().unwrap());
            }
            let m0 = pool.pool_stats().misses;
            let t = Instant::now();
            for _ in 0..PER_ROUND {
                let shards = l.next().unwrap().unwrap();
                black_box(shards[0].get("x").unwrap().as_dense().unwrap().bytes()[0]);
            }
            times[k].push(t.elapsed().as_secs_f64() * 1e3 / f64::from(PER_ROUND));
            misses[k] += pool.pool_stats().misses - m0;
            l.close();
        }
    }
    println!(
        "\ndense vision 147 KiB x {BATCH}, pool {pool_mib} MiB, prefetch 4 ({ROUNDS} rounds x \
         {PER_ROUND} batches; median ms/batch, median per-round rate vs bare gather, pool misses \
         per batch):"
    );
    for (k, &workers) in variants.iter().enumerate() {
        let name = if workers == 0 {
            "bare_gather".to_string()
        } else if workers == 5 {
            format!("bare_hold{HELD}")
        } else {
            format!("loader_workers{workers}")
        };
        println!(
            "  {name:<16} {:8.2} ms  {:.2}x  {:.2} misses/batch",
            median(&times[k]),
            common::median_ratio(&times[0], &times[k]),
            misses[k] as f64 / (ROUNDS as f64 * f64::from(PER_ROUND))
        );
    }
}

fn interleaved(view: &zrecord::DenseView) {
    const ROUNDS: usize = 15;
    const PER_ROUND: u32 = 400;
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); 4];
    for round in 0..ROUNDS {
        // Each round continues the same sampler sequence from a new seed; each loader lives for
        // its own turn only, so no idle loader sits beside the variant being timed.
        let seed = 100 + round as u64;
        let mut bare_sampler = IndexSampler::new(RECORDS, BATCH, Mode::Iid, seed).unwrap();
        let t = Instant::now();
        for _ in 0..PER_ROUND {
            let batch = view.gather(bare_sampler.next().unwrap()).unwrap();
            black_box(batch.bytes()[0]);
        }
        times[0].push(t.elapsed().as_secs_f64() * 1e6 / f64::from(PER_ROUND));
        for (k, workers) in [0usize, 1, 2].into_iter().enumerate() {
            let sampler = Box::new(IndexSampler::new(RECORDS, BATCH, Mode::Iid, seed).unwrap());
            let mut l = Loader::new(
                [("x", vec![StreamView::Dense(view.clone())])],
                sampler,
                LoaderOptions::new(workers, 4),
            )
            .unwrap();
            // Start-up batches (threads starting, transforms not yet measured) are not timed.
            for _ in 0..8 {
                black_box(l.next().unwrap().unwrap());
            }
            let t = Instant::now();
            for _ in 0..PER_ROUND {
                let shards = l.next().unwrap().unwrap();
                black_box(shards[0].get("x").unwrap().as_dense().unwrap().bytes()[0]);
            }
            times[k + 1].push(t.elapsed().as_secs_f64() * 1e6 / f64::from(PER_ROUND));
            l.close();
        }
    }
    println!(
        "\ninterleaved ({ROUNDS} rounds x {PER_ROUND} batches; median us/batch, and the median over \
         rounds of the rate relative to that round's bare gather):"
    );
    for (k, name) in [
        "bare_gather",
        "loader_workers0",
        "loader_workers1",
        "loader_workers2",
    ]
    .iter()
    .enumerate()
    {
        println!(
            "  {name:<16} {:8.2} us  {:.2}x",
            median(&times[k]),
            common::median_ratio(&times[0], &times[k])
        );
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3)).sample_size(30);
    targets = loader, vision
}
criterion_main!(benches);
