//! Ragged gathers of large, variable-size batches through the pooled allocator, beside the memcpy
//! limit measured in the same run.
//!
//! The store: synthetic `uint8[3, H, W]` records with H log-uniform in 116..1600 and W in
//! 133..1725 (the photo distribution of the Ragged vision table, mean ~1 MiB), enough of them that
//! the store is larger than a 260 MiB last-level cache. Each gather takes 256 random records
//! (~135-300 MB, a different size every batch) and is dropped before the next one, as a training
//! step does. Variants:
//!
//! * `zrecord-pooled`: `RaggedView::gather` bound to `PooledAllocator::default()` (256 MiB pool).
//! * `zrecord-system`: the same bound to `SystemAllocator` (a fresh region every batch).
//! * `memcpy-limit`: the same records copied with `memcpy` out of an in-memory copy into one
//!   recycled output buffer, split into zrecord's byte-balanced pieces on the same rayon pool
//!   (`benchkit::copy`).
//!
//! Besides Criterion's report, an interleaved section times the variants round by round and prints
//! medians, the ratio to memcpy and the minor page faults per batch.
//!
//! A second, interleaved-only section does the same for ragged tokens: 200,000 int32 sequences
//! whose lengths follow WikiText-103's quantiles (`benchkit::lengths::WIKITEXT_103_TOKENS`: p10
//! 28, median 127, p90 253, at most 512; mean ~147), batch 256 (~150 KB, gathered on the calling thread): zrecord with and without CRC
//! verification against a fresh-`Vec` per-record copy with `cu_seqlens` and shapes built the way
//! the `arrow-ipc-raw` row does. `RAGGED_BENCH_SECTIONS=vision,tokens` picks sections. Run:
//! `cargo bench -p loaderx --bench ragged`.

mod common;

use std::hint::black_box;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use benchkit::copy::{Kernel, copy_records, parallel_pieces};
use benchkit::lengths::WIKITEXT_103_TOKENS;
use benchkit::probe::Usage;
use benchkit::rng::SplitMix64;
use benchkit::stats::median;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use loaderx::PooledAllocator;
use zrecord::{
    Allocator, Codec, DType, OpenOptions, RaggedStore, RaggedView, RaggedWriter, SystemAllocator,
    WriterOptions,
};

const BATCH: usize = 256;

/// Log-uniform integer in `lo..=hi`.
fn log_uniform(r: &mut SplitMix64, lo: f64, hi: f64) -> u64 {
    (lo * (hi / lo).powf(r.unit())).round() as u64
}

/// A raw Ragged store `name` of the given records (written without fsync) in a new temporary
/// directory, which lives as long as the returned guard.
fn raw_store(
    name: &str,
    dtype: DType,
    ndim: u32,
    values: &[u8],
    cu: &[i32],
    shapes: &[u64],
) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    let opts = WriterOptions {
        sync: false,
        ..WriterOptions::default()
    };
    let mut w = RaggedWriter::create(&path, dtype, ndim, Codec::Raw, opts).unwrap();
    w.append(values, cu, shapes).unwrap();
    w.close().unwrap();
    (dir, path)
}

struct Fixture {
    _dir: tempfile::TempDir,
    values: Vec<u8>,
    offsets: Vec<usize>,
    pooled: RaggedView,
    system: RaggedView,
    sets: Vec<Vec<u64>>,
}

fn fixture() -> Fixture {
    let records: usize = common::env_or("RAGGED_BENCH_RECORDS", 480);
    let mut r = SplitMix64::new(11);
    let mut values = Vec::new();
    let mut offsets = vec![0usize];
    let mut shapes = Vec::new();
    for _ in 0..records {
        let h = log_uniform(&mut r, 116.0, 1600.0);
        let w = log_uniform(&mut r, 133.0, 1725.0);
        let len = (3 * h * w) as usize;
        let start = values.len();
        values.resize(start + len, 0);
        r.image_like(&mut values[start..]);
        offsets.push(values.len());
        shapes.extend_from_slice(&[3, h, w]);
    }
    let cu: Vec<i32> = offsets.iter().map(|&o| o as i32).collect();
    let (dir, path) = raw_store("ragged_vision", DType::UInt8, 3, &values, &cu, &shapes);
    let store = RaggedStore::open(&path).unwrap();
    let pooled = store.bind(Arc::new(PooledAllocator::default()) as Arc<dyn Allocator>);
    let system = store.bind(Arc::new(SystemAllocator::new()) as Arc<dyn Allocator>);
    let mut r = SplitMix64::new(5);
    let sets = (0..32)
        .map(|_| (0..BATCH).map(|_| r.below(records as u64)).collect())
        .collect();
    Fixture {
        _dir: dir,
        values,
        offsets,
        pooled,
        system,
        sets,
    }
}

/// The memcpy limit: the records `idx` copied into `out` (resized, never shrunk), split into
/// byte-balanced pieces over rayon's pool.
fn memcpy_gather(f: &Fixture, idx: &[u64], out: &mut Vec<u8>) -> usize {
    let mut offs = Vec::with_capacity(idx.len() + 1);
    offs.push(0usize);
    for &i in idx {
        offs.push(offs[offs.len() - 1] + f.offsets[i as usize + 1] - f.offsets[i as usize]);
    }
    let total = offs[idx.len()];
    if out.len() < total {
        out.resize(total, 0);
    }
    let record = |k: usize| {
        let i = idx[k] as usize;
        &f.values[f.offsets[i]..f.offsets[i + 1]]
    };
    let at = |k: usize| offs[k];
    copy_records(
        &mut out[..total],
        idx.len(),
        &at,
        record,
        Kernel::Memcpy,
        parallel_pieces(),
    );
    total
}

fn batch_bytes(f: &Fixture, idx: &[u64]) -> usize {
    idx.iter()
        .map(|&i| f.offsets[i as usize + 1] - f.offsets[i as usize])
        .sum()
}

fn section(name: &str) -> bool {
    std::env::var("RAGGED_BENCH_SECTIONS").map_or(true, |s| s.contains(name))
}

fn ragged(c: &mut Criterion) {
    if !section("vision") {
        return;
    }
    let f = fixture();
    let mean = f.sets.iter().map(|s| batch_bytes(&f, s)).sum::<usize>() / f.sets.len();
    let mut g = c.benchmark_group("ragged_vision_batch256");
    g.sample_size(10);
    g.throughput(Throughput::Bytes(mean as u64));
    let mut k = 0;
    g.bench_function("zrecord-pooled", |b| {
        b.iter(|| {
            k = (k + 1) % f.sets.len();
            black_box(f.pooled.gather(&f.sets[k]).unwrap().values()[0])
        })
    });
    g.bench_function("zrecord-system", |b| {
        b.iter(|| {
            k = (k + 1) % f.sets.len();
            black_box(f.system.gather(&f.sets[k]).unwrap().values()[0])
        })
    });
    let mut out = Vec::new();
    g.bench_function("memcpy-limit", |b| {
        b.iter(|| {
            k = (k + 1) % f.sets.len();
            black_box(memcpy_gather(&f, &f.sets[k], &mut out))
        })
    });
    g.finish();
    interleaved(&f, &mut out);
}

fn interleaved(f: &Fixture, out: &mut Vec<u8>) {
    let rounds: usize = common::env_or("RAGGED_BENCH_ROUNDS", 7);
    const PER_ROUND: usize = 8;
    let names = ["memcpy-limit", "zrecord-pooled", "zrecord-system"];
    let mut rate = vec![Vec::new(); names.len()];
    let mut faults = vec![0u64; names.len()];
    let mut k = 0;
    for _ in 0..rounds {
        for (v, _) in names.iter().enumerate() {
            let (mut bytes, u0, t) = (0usize, Usage::now(), Instant::now());
            for _ in 0..PER_ROUND {
                k = (k + 1) % f.sets.len();
                let idx = &f.sets[k];
                bytes += match v {
                    0 => memcpy_gather(f, idx, out),
                    1 => black_box(f.pooled.gather(idx).unwrap()).values_bytes(),
                    _ => black_box(f.system.gather(idx).unwrap()).values_bytes(),
                };
            }
            rate[v].push(bytes as f64 / t.elapsed().as_secs_f64() / 1e9);
            faults[v] += Usage::now().since(u0).minor_faults as u64;
        }
    }
    println!(
        "\ninterleaved ({rounds} rounds x {PER_ROUND} batches of {BATCH}; median GB/s, median of \
         per-round ratios to memcpy-limit, minor page faults per batch):"
    );
    for (v, name) in names.iter().enumerate() {
        println!(
            "  {name:<16} {:6.2} GB/s  {:.2}x  {:>8} faults/batch",
            median(&rate[v]),
            common::median_ratio(&rate[v], &rate[0]),
            faults[v] / (rounds * PER_ROUND) as u64
        );
    }
    if let Some(s) = f.pooled.allocator().stats() {
        println!("  pool: {s:?}");
    }
}

fn tokens(_: &mut Criterion) {
    if !section("tokens") {
        return;
    }
    const N: usize = 200_000;
    let mut r = SplitMix64::new(17);
    let mut values: Vec<u8> = Vec::new();
    let mut offsets = vec![0usize];
    let mut shapes = Vec::new();
    for _ in 0..N {
        let len = WIKITEXT_103_TOKENS.draw(&mut r);
        for _ in 0..len {
            values.extend_from_slice(&((r.below(50_000) >> r.below(8)) as i32).to_ne_bytes());
        }
        offsets.push(values.len());
        shapes.push(len as u64);
    }
    let cu: Vec<i32> = offsets.iter().map(|&o| (o / 4) as i32).collect();
    let (_dir, path) = raw_store("tokens", DType::Int32, 1, &values, &cu, &shapes);
    let pool: Arc<dyn Allocator> = Arc::new(PooledAllocator::default());
    let verified = RaggedStore::open(&path).unwrap().bind(pool.clone());
    let unverified = RaggedStore::open_with(
        &path,
        OpenOptions {
            verify: false,
            ..OpenOptions::default()
        },
    )
    .unwrap()
    .bind(pool);
    let mut r = SplitMix64::new(23);
    let sets: Vec<Vec<u64>> = (0..512)
        .map(|_| (0..BATCH).map(|_| r.below(N as u64)).collect())
        .collect();
    // The arrow-ipc-raw row's gather, minus locating the record batch: per-record slices, a fresh
    // values Vec, cu_seqlens and shapes.
    let copy = |idx: &[u64]| -> usize {
        let recs: Vec<&[u8]> = idx
            .iter()
            .map(|&i| &values[offsets[i as usize]..offsets[i as usize + 1]])
            .collect();
        let mut cu = Vec::with_capacity(recs.len() + 1);
        cu.push(0i32);
        let mut total = 0usize;
        for rec in &recs {
            total += rec.len();
            cu.push((total / 4) as i32);
        }
        let mut out = vec![0u8; total];
        let mut at = 0;
        for rec in &recs {
            out[at..at + rec.len()].copy_from_slice(rec);
            at += rec.len();
        }
        let sh: Vec<u64> = recs.iter().map(|rec| (rec.len() / 4) as u64).collect();
        black_box((&out, &cu, &sh));
        total
    };
    let rounds: usize = common::env_or("RAGGED_BENCH_ROUNDS", 9);
    const PER_ROUND: usize = 2000;
    let names = ["copy (arrow-like)", "zrecord-raw", "zrecord-noverify"];
    let mut rate = vec![Vec::new(); names.len()];
    let mut k = 0;
    for _ in 0..rounds {
        for (v, _) in names.iter().enumerate() {
            let (mut bytes, t) = (0usize, Instant::now());
            for _ in 0..PER_ROUND {
                k = (k + 1) % sets.len();
                let idx = &sets[k];
                bytes += match v {
                    0 => copy(idx),
                    1 => black_box(verified.gather(idx).unwrap()).values_bytes(),
                    _ => black_box(unverified.gather(idx).unwrap()).values_bytes(),
                };
            }
            rate[v].push(bytes as f64 / t.elapsed().as_secs_f64() / 1e9);
        }
    }
    let mean_len = values.len() as f64 / 4.0 / N as f64;
    println!(
        "\nragged tokens ({N} records, mean {mean_len:.1} tokens; {rounds} rounds x {PER_ROUND} \
         batches of {BATCH}; median GB/s, median of per-round ratios to the copy):"
    );
    for (v, name) in names.iter().enumerate() {
        println!(
            "  {name:<18} {:6.2} GB/s  {:.2}x",
            median(&rate[v]),
            common::median_ratio(&rate[v], &rate[0])
        );
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(4));
    targets = ragged, tokens
}
criterion_main!(benches);
