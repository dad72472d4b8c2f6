//! Quick numbers: every row on generated data of both geometries (not the harness; no real corpus,
//! few gathers). `cargo run -p competitors --example quick [--release]`; `QUICK_ONLY=hdf5` filters rows.

use std::time::Instant;

use competitors::{Backend, DenseSource, RaggedSource, Source, verify};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use zrecord::DType;

fn smooth(rng: &mut SmallRng, n: usize) -> Vec<u8> {
    let mut x = 0u8;
    (0..n)
        .map(|_| {
            if rng.random_ratio(1, 8) {
                x = x.wrapping_add(rng.random_range(0..7));
            }
            x
        })
        .collect()
}

fn run(label: &str, source: &Source<'_>, batch: usize, gathers: usize) {
    let tmp = tempfile::tempdir().unwrap();
    let mut rng = SmallRng::seed_from_u64(9);
    let mb = source.payload_bytes() as f64 / (1 << 20) as f64;
    println!(
        "\n## {label}: {} records, {mb:.1} MiB, batch {batch}, {gathers} gathers",
        source.len()
    );
    println!("| backend | write MiB/s | gather MiB/s | krec/s | median ms | disk MiB |");
    println!("|---|---:|---:|---:|---:|---:|");
    let only = std::env::var("QUICK_ONLY").unwrap_or_default();
    for &row in Backend::all() {
        let name = row.name();
        if !name.contains(only.as_str()) {
            continue;
        }
        let mut b = row.competitor();
        if !b.supports(source.geometry()) {
            continue;
        }
        if let Err(e) = b.prepare(source) {
            println!("| {name} | prepare failed: {e} |");
            continue;
        }
        let t = Instant::now();
        let stored = b.write(source, &tmp.path().join(name)).unwrap();
        let wt = stored.write_seconds.unwrap_or(t.elapsed().as_secs_f64());
        let mut r = b.open(&stored).unwrap();
        let mut times = Vec::new();
        let mut bytes = 0usize;
        for k in 0..gathers {
            let idx: Vec<u64> = (0..batch)
                .map(|_| rng.random_range(0..source.len()))
                .collect();
            let t = Instant::now();
            let out = r.gather(&idx).unwrap();
            let gt = r.last_gather_seconds().unwrap_or(t.elapsed().as_secs_f64());
            if k == 0 {
                verify(&out, &source.gather_reference(&idx).unwrap()).unwrap();
            }
            bytes += out.payload_bytes();
            times.push(gt);
        }
        let total: f64 = times.iter().sum();
        times.sort_by(f64::total_cmp);
        println!(
            "| {name} | {:.0} | {:.0} | {:.1} | {:.2} | {:.1} |",
            mb / wt,
            bytes as f64 / (1 << 20) as f64 / total,
            (batch * gathers) as f64 / total / 1e3,
            times[times.len() / 2] * 1e3,
            stored.disk_bytes().unwrap() as f64 / (1 << 20) as f64
        );
    }
}

fn main() {
    let mut rng = SmallRng::seed_from_u64(1);
    let vision = smooth(&mut rng, 300 * 3 * 224 * 224);
    run(
        "Dense uint8[3,224,224]",
        &Source::Dense(DenseSource {
            dtype: DType::UInt8,
            item_shape: vec![3, 224, 224],
            data: &vision,
        }),
        64,
        10,
    );
    let tokens = smooth(&mut rng, 20_000 * 512 * 4);
    run(
        "Dense int32[512]",
        &Source::Dense(DenseSource {
            dtype: DType::Int32,
            item_shape: vec![512],
            data: &tokens,
        }),
        256,
        20,
    );
    let (mut offsets, mut shapes) = (vec![0i64], Vec::new());
    for _ in 0..20_000 {
        let l = rng.random_range(16..=512u64);
        offsets.push(offsets.last().unwrap() + l as i64);
        shapes.push(l);
    }
    let values = smooth(&mut rng, *offsets.last().unwrap() as usize * 4);
    run(
        "Ragged int32 16..512",
        &Source::Ragged(RaggedSource {
            dtype: DType::Int32,
            ndim: 1,
            values: &values,
            offsets: &offsets,
            shapes: &shapes,
        }),
        256,
        20,
    );
    let (mut offsets, mut shapes) = (vec![0i64], Vec::new());
    for _ in 0..150 {
        let (h, w) = (rng.random_range(100..500u64), rng.random_range(100..500u64));
        offsets.push(offsets.last().unwrap() + (3 * h * w) as i64);
        shapes.extend([3, h, w]);
    }
    let values = smooth(&mut rng, *offsets.last().unwrap() as usize);
    run(
        "Ragged uint8[3,H,W]",
        &Source::Ragged(RaggedSource {
            dtype: DType::UInt8,
            ndim: 3,
            values: &values,
            offsets: &offsets,
            shapes: &shapes,
        }),
        64,
        10,
    );
}
