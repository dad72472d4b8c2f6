//! Loader overhead: a raw Dense store with an identity transform, workers 0/1/2, against the bare
//! gather of the same view on the same batches.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use loaderx::{IndexSampler, Loader, LoaderOptions, Mode, PooledAllocator, Sampler, StreamView};
use zrecord::{Allocator, Codec, DType, DenseStore, DenseWriter, WriterOptions};

const RECORDS: u64 = 20_000;
const RECORD_BYTES: usize = 4096;
const BATCH: usize = 256;

fn loader(c: &mut Criterion) {
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
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
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
        let ratios: Vec<f64> = (0..ROUNDS).map(|r| times[0][r] / times[k][r]).collect();
        println!(
            "  {name:<16} {:8.2} us  {:.2}x",
            median(times[k].clone()),
            median(ratios)
        );
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3)).sample_size(30);
    targets = loader
}
criterion_main!(benches);
