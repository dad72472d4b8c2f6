//! Loader overhead: a raw Dense store with an identity transform, workers 0/1/2, against the bare
//! gather of the same view on the same batches.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

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
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3)).sample_size(30);
    targets = loader
}
criterion_main!(benches);
