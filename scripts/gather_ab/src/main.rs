//! A/B of the gather hot path: this one program, which uses only the public API, is built against
//! two checkouts of zrecord + loaderx (`scripts/gather_ab.sh`). Each build opens the same stores
//! (written once, by whichever build runs first) and prints, per allocator and store, the median
//! MiB/s of `rounds` passes over 64 batches.
//!
//! usage: gather_ab <store-dir> <rounds>
use std::sync::Arc;
use std::time::Instant;
use zrecord::{
    Allocator, Codec, DType, DenseStore, DenseWriter, RaggedStore, RaggedWriter, SystemAllocator,
    WriterOptions,
};

fn xs(seed: u64) -> impl FnMut() -> u64 {
    let mut x = seed | 1;
    move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    }
}

fn make(dir: &std::path::Path) {
    if dir.join("done").exists() {
        return;
    }
    std::fs::create_dir_all(dir).unwrap();
    let mut r = xs(1);
    for (name, n, shape) in [
        ("d2k", 150_000usize, vec![512u64]),
        ("d147k", 2_000, vec![3, 224, 224]),
    ] {
        let dtype = if name == "d2k" {
            DType::Int32
        } else {
            DType::UInt8
        };
        let item: usize =
            shape.iter().product::<u64>() as usize * if name == "d2k" { 4 } else { 1 };
        let mut w = DenseWriter::create(
            dir.join(name),
            dtype,
            &shape,
            Codec::Raw,
            WriterOptions::default(),
        )
        .unwrap();
        let chunk = 1000.min(n);
        for _ in 0..n / chunk {
            let buf: Vec<u8> = (0..chunk * item)
                .map(|k| ((k / 7) as u8).wrapping_add((r() % 16) as u8))
                .collect();
            w.append(&buf).unwrap();
        }
        w.close().unwrap();
    }
    for (name, codec) in [("rraw", Codec::Raw), ("rzstd", Codec::Zstd)] {
        let mut r = xs(2);
        let mut w = RaggedWriter::create(
            dir.join(name),
            DType::Int32,
            1,
            codec,
            WriterOptions::default(),
        )
        .unwrap();
        for _ in 0..100 {
            let mut vals = Vec::new();
            let mut cu = vec![0i32];
            let mut shapes = Vec::new();
            for _ in 0..1000 {
                let len = 16 + (r() % 497) as usize;
                for _ in 0..len {
                    vals.extend_from_slice(&((r() % 50_000) as i32).to_le_bytes());
                }
                cu.push(cu.last().unwrap() + len as i32);
                shapes.push(len as u64);
            }
            w.append(&vals, &cu, &shapes).unwrap();
        }
        w.close().unwrap();
    }
    std::fs::write(dir.join("done"), b"").unwrap();
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let dir = std::path::PathBuf::from(&a[1]);
    let reps: usize = a[2].parse().unwrap();
    make(&dir);
    let allocs: Vec<(&str, Arc<dyn Allocator>)> = vec![
        ("system", Arc::new(SystemAllocator::new())),
        (
            "pooled",
            Arc::new(loaderx::PooledAllocator::new(loaderx::DEFAULT_POOL_SIZE)),
        ),
    ];
    let mut r = xs(7);
    for (aname, alloc) in &allocs {
        for name in ["d2k", "d147k", "rraw", "rzstd"] {
            let dense = name.starts_with('d');
            let n: u64;
            let gather: Box<dyn Fn(&[u64]) -> usize>;
            if dense {
                let v = DenseStore::open(dir.join(name))
                    .unwrap()
                    .bind(alloc.clone());
                n = v.len();
                gather = Box::new(move |i| v.gather(i).unwrap().bytes().len());
            } else {
                let v = RaggedStore::open(dir.join(name))
                    .unwrap()
                    .bind(alloc.clone());
                n = v.len();
                gather = Box::new(move |i| {
                    let b = v.gather(i).unwrap();
                    b.values().len()
                });
            }
            let batch = if name == "d147k" { 64 } else { 256 };
            let sets: Vec<Vec<u64>> = (0..64)
                .map(|_| (0..batch).map(|_| r() % n).collect())
                .collect();
            for s in &sets {
                gather(s);
            }
            let mut rates = Vec::new();
            for _ in 0..reps {
                let t = Instant::now();
                let mut bytes = 0usize;
                for s in &sets {
                    bytes += gather(s);
                }
                rates.push(bytes as f64 / t.elapsed().as_secs_f64() / (1 << 20) as f64);
            }
            println!("{aname}/{name} {:.0}", median(rates));
        }
    }
}
