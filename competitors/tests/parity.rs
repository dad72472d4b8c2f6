//! Parity: every backend returns bytes identical to the source (and identical cu_seqlens / shapes
//! for Ragged) for random index sets with duplicates, reversed, single and empty sets, on generated
//! data of both geometries and on small real slices of `../shared/corpora/`.

use std::path::{Path, PathBuf};

use competitors::{Backend, DenseSource, Geometry, RaggedSource, Source, verify};
use rand::rngs::SmallRng;
use rand::{Rng, RngCore, SeedableRng};
use zrecord::DType;

/// Owned storage behind a Ragged [`Source`]: values, element offsets, shapes.
type Ragged = (Vec<u8>, Vec<i64>, Vec<u64>);

/// Draws one Ragged record's shape.
type Shape = fn(&mut SmallRng) -> Vec<u64>;

fn ragged_source(dtype: DType, ndim: usize, (values, offsets, shapes): &Ragged) -> Source<'_> {
    Source::Ragged(RaggedSource {
        dtype,
        ndim,
        values,
        offsets,
        shapes,
    })
}

fn dense_source<'a>(dtype: DType, item_shape: &[u64], data: &'a [u8]) -> Source<'a> {
    let item_shape = item_shape.to_vec();
    Source::Dense(DenseSource {
        dtype,
        item_shape,
        data,
    })
}

/// Smooth-ish bytes (compressible like images / token ids) or plain random bytes.
fn fill(rng: &mut SmallRng, n: usize, smooth: bool) -> Vec<u8> {
    let mut v = vec![0u8; n];
    if smooth {
        let mut x = rng.random::<u8>();
        for b in &mut v {
            if rng.random_ratio(1, 8) {
                x = x.wrapping_add(rng.random_range(0..7));
            }
            *b = x;
        }
    } else {
        rng.fill_bytes(&mut v);
    }
    v
}

/// `n` Ragged records with shapes drawn by `shape`.
fn ragged(rng: &mut SmallRng, dtype: DType, n: usize, shape: Shape) -> Ragged {
    let mut offsets = vec![0i64];
    let mut shapes = Vec::new();
    for _ in 0..n {
        let s = shape(rng);
        offsets.push(offsets.last().unwrap() + s.iter().product::<u64>() as i64);
        shapes.extend(s);
    }
    let bytes = *offsets.last().unwrap() as usize * dtype.itemsize();
    (fill(rng, bytes, true), offsets, shapes)
}

fn index_sets(rng: &mut SmallRng, n: u64) -> Vec<Vec<u64>> {
    let mut sets = vec![
        (0..n).rev().collect::<Vec<_>>(), // reversed, everything
        vec![rng.random_range(0..n)],     // single
        vec![],                           // empty
        vec![n - 1, 0, n - 1, n - 1, 0],  // duplicates at the edges
        (0..3 * n).map(|_| rng.random_range(0..n)).collect(), // random with many duplicates
        (0..n.min(64)).map(|_| rng.random_range(0..n)).collect(), // random batch
    ];
    let mut sorted: Vec<u64> = (0..n).step_by(3).collect();
    sorted.extend((0..n).step_by(7));
    sets.push(sorted);
    sets
}

/// Runs every backend that supports the source's geometry (index sets drawn from seed `seed`) and
/// checks that every row ran but those allowed to skip (zrecord-zstdict on a tiny source,
/// ArrayRecord without its venv).
fn check_all(label: &str, source: &Source<'_>, seed: u64) {
    source.validate().unwrap();
    let mut rng = SmallRng::seed_from_u64(seed);
    let sets = index_sets(&mut rng, source.len());
    let tmp = tempfile::tempdir().unwrap();
    let mut ran = Vec::new();
    for row in Backend::ALL {
        let name = row.name();
        let mut b = row.competitor();
        assert_eq!(b.name(), name);
        if !b.supports(source.geometry()) {
            continue;
        }
        let dir = tmp.path().join(name);
        if let Err(e) = b.prepare(source) {
            // zstd's trainer needs a minimum amount of sample data; a few hundred bytes is not a
            // benchmark source, so tiny generated sources skip the dictionary row.
            if name == "zrecord-zstdict"
                && source.payload_bytes() < 16 << 10
                && e.message().contains("dictionary training failed")
            {
                eprintln!(
                    "SKIP {label} {name}: {e} ({} payload bytes)",
                    source.payload_bytes()
                );
                continue;
            }
            if skip(name, &e) {
                continue;
            }
            panic!("{label} {name}: prepare: {e}");
        }
        let stored = match b.write(source, &dir) {
            Ok(s) => s,
            Err(e) if skip(name, &e) => continue,
            Err(e) => panic!("{label} {name}: write: {e}"),
        };
        assert_eq!(stored.len, source.len(), "{label} {name}");
        let disk = stored.disk_bytes().unwrap();
        if name != "memcpy-limit" {
            assert!(disk > 0, "{label} {name}: no bytes on disk");
        }
        let mut r = b
            .open(&stored)
            .unwrap_or_else(|e| panic!("{label} {name}: open: {e}"));
        assert_eq!(r.len(), source.len(), "{label} {name}");
        for idx in &sets {
            let got = r
                .gather(idx)
                .unwrap_or_else(|e| panic!("{label} {name}: gather {} indices: {e}", idx.len()));
            let want = source.gather_reference(idx).unwrap();
            verify(&got, &want)
                .unwrap_or_else(|e| panic!("{label} {name}: {} indices: {e}", idx.len()));
            if name.starts_with("arrayrecord") {
                assert!(r.last_gather_seconds().is_some());
            }
        }
        assert!(
            r.gather(&[source.len()]).is_err(),
            "{label} {name}: out-of-range index accepted"
        );
        ran.push(name);
    }
    for row in Backend::ALL {
        let (name, optional) = (
            row.name(),
            ["zrecord-zstdict", "arrayrecord-raw", "arrayrecord-zstd"],
        );
        if row.competitor().supports(source.geometry()) && !optional.contains(&name) {
            assert!(ran.contains(&name), "{label}: {name} did not run");
        }
    }
}

/// Whether a failure is an allowed skip (printed): ArrayRecord when the venv lacks it.
fn skip(name: &str, e: &competitors::Error) -> bool {
    let m = e.message();
    let skip = m.contains("array_record not installed")
        && std::env::var_os("COMPETITORS_REQUIRE_ALL").is_none();
    if skip {
        eprintln!("SKIP {name}: {m}");
    }
    skip
}

/// `n` dense records of `dtype[item_shape]` from `rng`, checked in every row (draws from seed
/// `draws`).
fn dense_case(rng: &mut SmallRng, dtype: DType, item_shape: &[u64], n: usize, draws: u64) {
    let stride = item_shape.iter().product::<u64>() as usize * dtype.itemsize();
    let smooth = rng.random_bool(0.5);
    let data = fill(rng, n * stride, smooth);
    let label = format!("dense {dtype} {item_shape:?} n={n}");
    check_all(&label, &dense_source(dtype, item_shape, &data), draws);
}

#[test]
fn dense_generated_vision_and_tokens() {
    // The last case holds > PAR_MIN_BYTES per gather so the rayon copy paths run.
    for (seed, dtype, shape, n, draws) in [
        (1, DType::UInt8, &[3, 24, 20][..], 97, 11),
        (2, DType::Int32, &[512], 300, 12),
        (4, DType::UInt8, &[3, 64, 64], 160, 13),
    ] {
        dense_case(&mut SmallRng::seed_from_u64(seed), dtype, shape, n, draws);
    }
}

#[test]
fn dense_generated_odd_dtypes_and_shapes() {
    let mut rng = SmallRng::seed_from_u64(3);
    for (k, (dtype, shape)) in [
        (DType::Float32, vec![]),
        (DType::BFloat16, vec![5, 3]),
        (DType::Float64, vec![2, 1, 3]),
        (DType::Bool, vec![7]),
        (DType::Complex64, vec![4]),
        (DType::Float8E4M3Fn, vec![9, 2]),
    ]
    .into_iter()
    .enumerate()
    {
        let n = rng.random_range(1..80);
        dense_case(&mut rng, dtype, &shape, n, 100 + k as u64);
    }
}

#[test]
fn ragged_generated() {
    let cases: [(DType, usize, usize, Shape); 5] = [
        (DType::UInt8, 3, 90, |r| {
            vec![3, r.random_range(4..90), r.random_range(4..90)]
        }),
        (DType::Int32, 1, 400, |r| vec![r.random_range(16..=512)]),
        (DType::Float16, 2, 33, |r| {
            vec![r.random_range(1..9), r.random_range(1..9)]
        }),
        (DType::UInt64, 1, 1, |_| vec![1]),
        (DType::BFloat16, 3, 20, |r| {
            vec![r.random_range(1..4), 2, r.random_range(1..5)]
        }),
    ];
    for (k, (dtype, ndim, n, shape)) in cases.into_iter().enumerate() {
        let parts = ragged(&mut SmallRng::seed_from_u64(5 + k as u64), dtype, n, shape);
        let label = format!("ragged {dtype} ndim {ndim} n={n}");
        check_all(&label, &ragged_source(dtype, ndim, &parts), 21 + k as u64);
    }
}

fn corpora() -> Option<PathBuf> {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let found = ["../../shared/corpora", "../shared/corpora"].map(|p| here.join(p));
    let found = found.into_iter().find(|p| p.exists());
    if found.is_none() {
        eprintln!("SKIP real-corpus parity: ../shared/corpora not found");
    }
    found
}

/// Byte strings as a Ragged uint8 source of rank 1 (each record's one dim its length).
fn byte_records(records: impl IntoIterator<Item = impl AsRef<[u8]>>) -> Ragged {
    let (mut values, mut offsets, mut shapes) = (Vec::new(), vec![0i64], Vec::new());
    for r in records {
        let r = r.as_ref();
        values.extend_from_slice(r);
        offsets.push(values.len() as i64);
        shapes.push(r.len() as u64);
    }
    (values, offsets, shapes)
}

/// Real WikiText-2 lines: Ragged uint8 (each line's UTF-8 bytes, ndim 1) and Dense int32[512]
/// blocks of byte-level "token ids" packed from the same stream.
#[test]
fn real_text_slice() {
    let Some(root) = corpora() else { return };
    let text = std::fs::read_to_string(root.join("text/wikitext2/wiki.test.raw.txt")).unwrap();
    let lines = byte_records(text.lines().filter(|l| l.len() >= 16).take(300));
    check_all(
        "real text lines",
        &ragged_source(DType::UInt8, 1, &lines),
        31,
    );
    let ids: Vec<u8> = (text.bytes().take(512 * 200))
        .flat_map(|b| (b as i32).to_le_bytes())
        .collect();
    let source = dense_source(DType::Int32, &[512], &ids);
    check_all("real text int32[512]", &source, 32);
}

/// Real Oxford-IIIT Pet files: their encoded bytes as Ragged uint8 records (incompressible payload
/// like photographs, real size distribution).
#[test]
fn real_oxford_pet_slice() {
    let Some(root) = corpora() else { return };
    let mut names: Vec<PathBuf> = std::fs::read_dir(root.join("oxford-pet"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jpg"))
        .collect();
    names.sort();
    let files = byte_records(names.iter().take(40).map(|p| std::fs::read(p).unwrap()));
    check_all(
        "real oxford-pet bytes",
        &ragged_source(DType::UInt8, 1, &files),
        33,
    );
}

/// The rows' geometries and references (names parsing back: `backend`'s unit tests).
#[test]
fn dense_only_rows_and_reference_rows() {
    let names = |keep: fn(&Backend) -> bool| -> Vec<&str> {
        Backend::ALL
            .iter()
            .filter(|b| keep(b))
            .map(|b| b.name())
            .collect()
    };
    let dense_only = names(|b| !b.competitor().supports(Geometry::Ragged));
    assert_eq!(dense_only, ["npy-mmap-raw", "npy-crc-limit"]);
    assert_eq!(
        names(|b| b.is_reference()),
        ["npy-crc-limit", "memcpy-limit"]
    );
}
