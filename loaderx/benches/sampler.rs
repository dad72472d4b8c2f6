//! Index generation speed: loaderx samplers against `SmallRng::random_range` and a materialized
//! Fisher–Yates permutation walk. Throughput is reported per index.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use loaderx::{IndexSampler, Mode, Sampler};
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

const LEN: u64 = 1_000_000;

fn samplers(c: &mut Criterion) {
    for batch in [256usize, 1024, 8192] {
        let mut g = c.benchmark_group(format!("sampler/batch{batch}"));
        g.throughput(Throughput::Elements(batch as u64));
        for (name, mode) in [
            ("iid", Mode::Iid),
            ("cyclic", Mode::Cyclic),
            ("sequential", Mode::Sequential),
        ] {
            let mut s = IndexSampler::new(LEN, batch, mode, 42).unwrap();
            g.bench_function(name, |b| b.iter(|| black_box(s.next().unwrap()[0])));
        }
        // A power-of-two length: no cycle-walking at all.
        let mut s = IndexSampler::new(1 << 20, batch, Mode::Cyclic, 42).unwrap();
        g.bench_function("cyclic_len2^20", |b| {
            b.iter(|| black_box(s.next().unwrap()[0]))
        });
        let mut rng = SmallRng::seed_from_u64(42);
        let mut buf = vec![0u64; batch];
        g.bench_function("smallrng_random_range", |b| {
            b.iter(|| {
                for o in buf.iter_mut() {
                    *o = rng.random_range(0..LEN);
                }
                black_box(buf[0])
            })
        });
        // A materialized permutation (8 MB for 1M ids): shuffled once, walked batch by batch.
        let mut perm: Vec<u64> = (0..LEN).collect();
        perm.shuffle(&mut rng);
        let mut pos = 0usize;
        g.bench_function("fisher_yates_walk", |b| {
            b.iter(|| {
                if pos + batch > perm.len() {
                    pos = 0;
                }
                buf.copy_from_slice(&perm[pos..pos + batch]);
                pos += batch;
                black_box(buf[0])
            })
        });
        g.finish();
    }
    // The full cost of a materialized permutation: one shuffle of all ids per cycle.
    let mut g = c.benchmark_group("sampler/permutation_build");
    g.throughput(Throughput::Elements(LEN));
    g.sample_size(10);
    let mut rng = SmallRng::seed_from_u64(1);
    let mut perm: Vec<u64> = (0..LEN).collect();
    g.bench_function("fisher_yates_shuffle_1M", |b| {
        b.iter(|| {
            perm.shuffle(&mut rng);
            black_box(perm[0])
        })
    });
    let mut s = IndexSampler::new(LEN, 1000, Mode::Cyclic, 42).unwrap();
    g.bench_function("cyclic_full_cycle_1M", |b| {
        b.iter(|| {
            let mut acc = 0u64;
            for _ in 0..1000 {
                acc ^= s.next().unwrap()[999];
            }
            black_box(acc)
        })
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
    targets = samplers
}
criterion_main!(benches);
