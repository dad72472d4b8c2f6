//! T4 exhaustive single-bit flips and T5 truncation / extension / missing-file / swap sweeps.
//!
//! Fixtures are small containers (raw / zstd / zstd+dict x Dense / Ragged, multi-shard, 1 record,
//! 0 records) written through an in-memory `Vfs`, so each case is an open + read-all without
//! syscalls.
//!
//! Rule asserted for every damaged container: the damage is reported as a corruption error
//! (`Error::is_corruption()`) whose `corrupt_path()` is exactly the damaged file. Bit flips and
//! truncations/extensions must be caught by `open()` or, for record payload bytes, by the first
//! gather that touches the record and by `verify()`; truncations, an appended byte, a missing file
//! and foreign/swapped files must be caught by `open()` itself. Pristine fixtures: 0 false alarms.

mod support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use rayon::prelude::*;
use support::*;
use zrecord::{
    Codec, DType, Dense, DenseStore, DenseWriter, Error, Layout, OpenOptions, Ragged, RaggedStore,
    Store, WriterOptions,
};

fn fixtures() -> Vec<Spec> {
    let s = |name, ragged, codec, shards, records, size| Spec {
        name,
        ragged,
        codec,
        shards,
        records,
        size,
        appends: 2,
    };
    vec![
        s("dense-raw", false, Codec::Raw, 1, 24, 48),
        s("dense-zstd-2shards", false, Codec::Zstd, 2, 24, 96),
        s("dense-dict", false, Codec::ZstdDict, 1, 16, 96),
        s("ragged-raw", true, Codec::Raw, 1, 40, 12),
        s("ragged-zstd-3shards", true, Codec::Zstd, 3, 150, 10),
        s("ragged-dict-2shards", true, Codec::ZstdDict, 2, 80, 24),
        s("dense-1record", false, Codec::Raw, 1, 1, 64),
        s("ragged-1record-zstd", true, Codec::Zstd, 1, 1, 40),
        s("dense-empty-2shards", false, Codec::Zstd, 2, 0, 16),
    ]
}

struct Fixture {
    spec: Spec,
    fs: MemFs,
    path: PathBuf,
    oracle: Oracle,
    files: Vec<PathBuf>,
}

fn build(spec: &Spec, dir: &str, seed: u64) -> Fixture {
    let fs = MemFs::new();
    let path = PathBuf::from(dir).join(spec.name);
    let oracle = spec.oracle(seed);
    spec.write(&path, &oracle, spec.writer_options(Arc::new(fs.clone())))
        .expect("fixture");
    let mut files = vec![path.join("manifest.zrm"), path.join("index.zri")];
    for s in 0..spec.shards {
        files.push(path.join(format!("shard-{s:03}.zrd")));
    }
    for f in &files {
        assert!(fs.read(f).is_some(), "{} missing", f.display());
    }
    Fixture {
        spec: spec.clone(),
        fs,
        path,
        oracle,
        files,
    }
}

fn open_opts(fs: &MemFs) -> OpenOptions {
    OpenOptions {
        verify: true,
        vfs: Arc::new(fs.clone()),
        ..OpenOptions::default()
    }
}

/// Asserts the precise rule: a corruption error naming `file`.
fn names(e: &Error, file: &Path) -> Result<(), String> {
    if !e.is_corruption() {
        return Err(format!("not a corruption error: {e}"));
    }
    if e.corrupt_path() != Some(file) {
        return Err(format!(
            "error names {:?}, damaged file is {}: {e}",
            e.corrupt_path(),
            file.display()
        ));
    }
    Ok(())
}

enum Outcome {
    AtOpen,
    AtRead,
}

/// Opens the damaged container and reads everything; the damage must be reported naming `file`.
fn expect_detected(fx: &Fixture, fs: &MemFs, file: &Path) -> Result<Outcome, String> {
    if fx.spec.ragged {
        detect::<Ragged>(fx, fs, file)
    } else {
        detect::<Dense>(fx, fs, file)
    }
}

/// [`expect_detected`] with the container opened as a `Store<L>`.
fn detect<L: Layout>(fx: &Fixture, fs: &MemFs, file: &Path) -> Result<Outcome, String> {
    let all: Vec<u64> = (0..fx.oracle.recs.len() as u64).collect();
    let st = match Store::<L>::open_with(&fx.path, open_opts(fs)) {
        Err(e) => return names(&e, file).map(|()| Outcome::AtOpen),
        Ok(s) => s,
    };
    match st.bind(alloc()).gather(&all) {
        Err(e) => names(&e, file)?,
        Ok(_) => return Err("gather of all records succeeded (undetected)".into()),
    }
    match st.verify() {
        Err(e) => names(&e, file)?,
        Ok(()) => return Err("verify() succeeded (undetected)".into()),
    }
    Ok(Outcome::AtRead)
}

fn open_err(fx: &Fixture, fs: &MemFs) -> Option<Error> {
    if fx.spec.ragged {
        RaggedStore::open_with(&fx.path, open_opts(fs)).err()
    } else {
        DenseStore::open_with(&fx.path, open_opts(fs)).err()
    }
}

#[test]
fn pristine_fixtures_have_no_false_alarms() {
    for spec in fixtures() {
        let fx = build(&spec, "/fx", 3);
        check_container(Arc::new(fx.fs.clone()), &fx.path, &fx.oracle, true)
            .unwrap_or_else(|e| panic!("{}: false alarm: {e}", spec.name));
    }
}

#[test]
fn every_bit_flip_of_every_fixture_is_detected_and_names_the_file() {
    let t0 = Instant::now();
    let mut total = 0u64;
    let mut total_bytes = 0u64;
    for spec in fixtures() {
        let fx = build(&spec, "/fx", 3);
        let at_open = AtomicU64::new(0);
        let at_read = AtomicU64::new(0);
        let mut fixture_bytes = 0;
        for file in &fx.files {
            let orig = fx.fs.read(file).unwrap();
            fixture_bytes += orig.len();
            let failures: Vec<String> = (0..orig.len() * 8)
                .into_par_iter()
                .filter_map(|bit| {
                    let fs = fx.fs.snapshot();
                    let mut d = orig.clone();
                    d[bit / 8] ^= 1 << (bit % 8);
                    fs.put(file, d);
                    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        expect_detected(&fx, &fs, file)
                    }));
                    match r {
                        Ok(Ok(Outcome::AtOpen)) => {
                            at_open.fetch_add(1, Ordering::Relaxed);
                            None
                        }
                        Ok(Ok(Outcome::AtRead)) => {
                            at_read.fetch_add(1, Ordering::Relaxed);
                            None
                        }
                        Ok(Err(msg)) => Some(format!(
                            "{} bit {bit} (byte {}): {msg}",
                            file.display(),
                            bit / 8
                        )),
                        Err(_) => Some(format!("{} bit {bit}: PANIC", file.display())),
                    }
                })
                .collect();
            assert!(
                failures.is_empty(),
                "{}: {} of {} flips in {} not detected as required, e.g. {:?}",
                spec.name,
                failures.len(),
                orig.len() * 8,
                file.display(),
                &failures[..failures.len().min(5)]
            );
        }
        let (o, r) = (at_open.into_inner(), at_read.into_inner());
        assert_eq!(o + r, fixture_bytes as u64 * 8);
        total += o + r;
        total_bytes += fixture_bytes as u64;
        report(
            "T4",
            &[
                ("fixture", spec.name.to_string()),
                ("bytes", fixture_bytes.to_string()),
                ("flips", (o + r).to_string()),
                ("detected_at_open", o.to_string()),
                ("detected_at_read", r.to_string()),
                ("undetected", "0".into()),
                ("panics", "0".into()),
            ],
        );
    }
    report(
        "T4-total",
        &[
            ("bytes", total_bytes.to_string()),
            ("flips", total.to_string()),
            ("undetected", "0".into()),
            ("secs", format!("{:.1}", t0.elapsed().as_secs_f64())),
        ],
    );
}

#[test]
fn truncations_appends_and_missing_files_are_detected_at_open() {
    let mut cases = 0u64;
    for spec in fixtures() {
        let fx = build(&spec, "/fx", 3);
        for file in &fx.files {
            let orig = fx.fs.read(file).unwrap();
            let mut variants: Vec<(String, Option<Vec<u8>>)> = (0..orig.len())
                .map(|n| (format!("truncated to {n}"), Some(orig[..n].to_vec())))
                .collect();
            for extra in [0u8, 0xA5] {
                let mut v = orig.clone();
                v.push(extra);
                variants.push((format!("byte {extra:#x} appended"), Some(v)));
            }
            variants.push(("missing".into(), None));
            for (what, data) in variants {
                let fs = fx.fs.snapshot();
                match data {
                    Some(d) => fs.put(file, d),
                    None => assert!(fs.unlink(file)),
                }
                let r =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| open_err(&fx, &fs)));
                let Ok(err) = r else {
                    panic!("{}: {} {what}: PANIC", spec.name, file.display())
                };
                let Some(e) = err else {
                    panic!("{}: {} {what}: open() succeeded", spec.name, file.display())
                };
                // A directory without its manifest is "not a container": that error names the
                // container directory (it cannot tell a damaged container from a foreign directory).
                let expect = if what == "missing" && file.ends_with("manifest.zrm") {
                    fx.path.clone()
                } else {
                    file.clone()
                };
                names(&e, &expect)
                    .unwrap_or_else(|m| panic!("{}: {} {what}: {m}", spec.name, file.display()));
                cases += 1;
            }
        }
    }
    report(
        "T5",
        &[("cases", cases.to_string()), ("undetected", "0".into())],
    );
}

/// A file taken from another container of identical shape (same lengths, other uuid), or two
/// files of one container exchanged.
#[test]
fn foreign_and_swapped_files_are_detected_at_open() {
    let mut cases = 0u64;
    for spec in fixtures() {
        let a = build(&spec, "/fx", 3);
        let b = build(&spec, "/other", 3);
        for (fa, fb) in a.files.iter().zip(&b.files) {
            let foreign = b.fs.read(fb).unwrap();
            assert_eq!(foreign.len(), a.fs.read(fa).unwrap().len());
            let fs = a.fs.snapshot();
            fs.put(fa, foreign);
            let e = open_err(&a, &fs)
                .unwrap_or_else(|| panic!("{}: foreign {} not detected", spec.name, fa.display()));
            assert!(e.is_corruption(), "{}: {e}", spec.name);
            // A foreign manifest is self-consistent; the mismatch shows in the first file that
            // does not belong to it (the index). Every other foreign file is named itself.
            let expect = if fa.ends_with("manifest.zrm") {
                a.path.join("index.zri")
            } else {
                fa.clone()
            };
            names(&e, &expect).unwrap_or_else(|m| panic!("{}: {m}", spec.name));
            cases += 1;
        }
    }
    // Two shards of equal length exchanged inside one container.
    let spec = Spec {
        name: "ragged-raw-equal-shards",
        ragged: true,
        codec: Codec::Raw,
        shards: 2,
        records: 128,
        size: 1,
        appends: 1,
    };
    let fx = build(&spec, "/fx", 3);
    let (s0, s1) = (fx.files[2].clone(), fx.files[3].clone());
    let (d0, d1) = (fx.fs.read(&s0).unwrap(), fx.fs.read(&s1).unwrap());
    assert_eq!(d0.len(), d1.len());
    let fs = fx.fs.snapshot();
    fs.put(&s0, d1);
    fs.put(&s1, d0);
    let e = open_err(&fx, &fs).expect("swapped shards not detected");
    names(&e, &s0).unwrap();
    cases += 1;

    // Two index pages exchanged (8,192 one-byte records = 2 pages of 4,096 entries).
    let fs = MemFs::new();
    let path = Path::new("/fx/pages");
    let data = fine_bytes(8192, 5, false);
    let mut w = DenseWriter::create(
        path,
        DType::UInt8,
        &[],
        Codec::Raw,
        WriterOptions {
            data_shards: 1,
            vfs: Arc::new(fs.clone()),
            ..WriterOptions::default()
        },
    )
    .unwrap();
    w.append(&data).unwrap();
    w.close().unwrap();
    let ip = path.join("index.zri");
    let idx = fs.read(&ip).unwrap();
    let page = 4096 * 16 + 4;
    assert_eq!(idx.len(), 64 + 2 * page);
    let mut swapped = idx[..64].to_vec();
    swapped.extend_from_slice(&idx[64 + page..]);
    swapped.extend_from_slice(&idx[64..64 + page]);
    let vfs: Arc<dyn Fs> = Arc::new(fs.clone());
    fs.put(&ip, swapped);
    let e = DenseStore::open_with(
        path,
        OpenOptions {
            verify: true,
            vfs,
            ..OpenOptions::default()
        },
    )
    .expect_err("swapped index pages not detected");
    names(&e, &ip).unwrap();
    cases += 1;
    report(
        "T5-swap",
        &[("cases", cases.to_string()), ("undetected", "0".into())],
    );
}
