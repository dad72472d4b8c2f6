//! T10 concurrency: (a) 8 threads x 10^4 random gathers on one shared view against a
//! single-thread reference: 0 mismatches; (b) a reader polling the destination during 1,000
//! create+close cycles never sees a partial container (it sees "not found" or a complete, valid
//! container with exactly the expected records).
//!
//! `ZR_T10_GATHERS` (per thread) and `ZR_T10_CLOSES` scale the test.

mod support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use rand::Rng;
use support::*;
use zrecord::{Codec, DenseStore, DenseWriter, Error, RaggedStore, WriterOptions};

const THREADS: usize = 8;

#[test]
fn parallel_gathers_match_a_single_thread_reference() {
    let per_thread = env_count("ZR_T10_GATHERS", 10_000);
    let dir = tempfile::tempdir().unwrap();
    // Dense zstd (decoder per gather, rayon path for big batches) and Ragged raw.
    let dense = Spec {
        name: "dense-zstd",
        ragged: false,
        codec: Codec::Zstd,
        shards: 3,
        records: 600,
        size: 2048,
        appends: 3,
    };
    let ragged = Spec {
        name: "ragged-dict",
        ragged: true,
        codec: Codec::ZstdDict,
        shards: 4,
        records: 500,
        size: 300,
        appends: 2,
    };
    for spec in [dense, ragged] {
        let path = dir.path().join(spec.name);
        let oracle = spec.oracle(21);
        spec.write(
            &path,
            &oracle,
            spec.writer_options(Arc::new(zrecord::StdFs)),
        )
        .unwrap();
        let n = oracle.recs.len() as u64;
        // Single-thread reference: one record at a time, on this thread.
        let t0 = Instant::now();
        let reference: Vec<(Vec<u8>, Vec<u64>)> = if spec.ragged {
            let v = RaggedStore::open(&path).unwrap().bind(alloc());
            (0..n)
                .map(|i| {
                    let b = v.get(i).unwrap();
                    (b.record(0).to_vec(), b.shapes().to_vec())
                })
                .collect()
        } else {
            let v = DenseStore::open(&path).unwrap().bind(alloc());
            (0..n)
                .map(|i| (v.get(i).unwrap().bytes().to_vec(), vec![]))
                .collect()
        };
        assert_eq!(reference, oracle.recs, "reference differs from the oracle");
        let mismatches = AtomicU64::new(0);
        let gathers = AtomicU64::new(0);
        let records = AtomicU64::new(0);
        let dense_view = (!spec.ragged).then(|| DenseStore::open(&path).unwrap().bind(alloc()));
        let ragged_view = spec
            .ragged
            .then(|| RaggedStore::open(&path).unwrap().bind(alloc()));
        std::thread::scope(|s| {
            for t in 0..THREADS {
                let (dense_view, ragged_view, reference) = (&dense_view, &ragged_view, &reference);
                let (mismatches, gathers, records) = (&mismatches, &gathers, &records);
                s.spawn(move || {
                    let mut r = rng(seed(1000 + t as u64));
                    for g in 0..per_thread {
                        // Mostly small batches; every 500th a large one (parallel gather path).
                        let k = if g % 500 == 499 {
                            r.random_range(300..1200)
                        } else {
                            r.random_range(0..24)
                        };
                        let idx: Vec<u64> = (0..k).map(|_| r.random_range(0..n)).collect();
                        let ok = if let Some(v) = dense_view {
                            let b = v.gather(&idx).unwrap();
                            let stride = v.record_bytes() as usize;
                            idx.iter().enumerate().all(|(j, &i)| {
                                b.bytes()[j * stride..(j + 1) * stride]
                                    == reference[i as usize].0[..]
                            })
                        } else {
                            let v = ragged_view.as_ref().unwrap();
                            let b = v.gather(&idx).unwrap();
                            idx.iter().enumerate().all(|(j, &i)| {
                                b.record(j) == &reference[i as usize].0[..]
                                    && b.shapes()[j..j + 1] == reference[i as usize].1[..]
                            })
                        };
                        if !ok {
                            mismatches.fetch_add(1, Ordering::Relaxed);
                        }
                        gathers.fetch_add(1, Ordering::Relaxed);
                        records.fetch_add(k as u64, Ordering::Relaxed);
                    }
                });
            }
        });
        report(
            "T10-gathers",
            &[
                ("fixture", spec.name.to_string()),
                ("threads", THREADS.to_string()),
                ("gathers", gathers.load(Ordering::Relaxed).to_string()),
                ("records", records.load(Ordering::Relaxed).to_string()),
                ("mismatches", mismatches.load(Ordering::Relaxed).to_string()),
                ("secs", format!("{:.1}", t0.elapsed().as_secs_f64())),
            ],
        );
        assert_eq!(mismatches.load(Ordering::Relaxed), 0);
        assert_eq!(gathers.load(Ordering::Relaxed), THREADS as u64 * per_thread);
    }
}

/// What one poll of a destination saw.
enum Seen {
    Absent,
    Complete,
}

fn poll(path: &Path, expect: &[u8], stride: usize) -> Result<Seen, String> {
    match DenseStore::open(path) {
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            // Only "the container directory does not exist" is acceptable.
            if path.exists() {
                // It appeared between the failed open and this check: fine only if it is now complete.
                return poll_complete(path, expect, stride).map(|_| Seen::Complete);
            }
            Ok(Seen::Absent)
        }
        Err(e) => Err(format!("partial or damaged container observed: {e}")),
        Ok(store) => check(&store, expect, stride).map(|()| Seen::Complete),
    }
}

fn poll_complete(path: &Path, expect: &[u8], stride: usize) -> Result<(), String> {
    let store = DenseStore::open(path).map_err(|e| format!("after appearing: {e}"))?;
    check(&store, expect, stride)
}

fn check(store: &DenseStore, expect: &[u8], stride: usize) -> Result<(), String> {
    store.verify().map_err(|e| format!("verify: {e}"))?;
    let n = (expect.len() / stride) as u64;
    if store.len() != n {
        return Err(format!("{} records, expected {n}", store.len()));
    }
    let all: Vec<u64> = (0..n).collect();
    let b = store
        .bind(alloc())
        .gather(&all)
        .map_err(|e| e.to_string())?;
    if b.bytes() != expect {
        return Err("records differ".into());
    }
    Ok(())
}

#[test]
fn a_reader_polling_during_closes_never_sees_a_partial_container() {
    let closes = env_count("ZR_T10_CLOSES", 1000);
    let dir = tempfile::tempdir().unwrap();
    let parent = dir.path().to_path_buf();
    let stride = 512usize;
    let recs = 48usize;
    let data_of = |k: u64| fine_bytes(stride * recs, k, true);
    let current = AtomicU64::new(0);
    let done = AtomicBool::new(false);
    let (absent, complete, listed) = (AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0));
    let name = |k: u64| -> PathBuf { parent.join(format!("c{k:05}")) };
    let t0 = Instant::now();
    std::thread::scope(|s| {
        let reader = s.spawn(|| -> Result<(), String> {
            while !done.load(Ordering::Acquire) {
                let k = current.load(Ordering::Acquire);
                // The destination being written right now (may or may not be published yet).
                match poll(&name(k), &data_of(k), stride)? {
                    Seen::Absent => absent.fetch_add(1, Ordering::Relaxed),
                    Seen::Complete => complete.fetch_add(1, Ordering::Relaxed),
                };
                // Every visible, non-hidden recent entry of the parent must be a complete container
                // (nothing is ever deleted here, so no check races with a removal).
                {
                    for e in std::fs::read_dir(&parent).unwrap() {
                        let e = e.unwrap();
                        let n = e.file_name().to_string_lossy().into_owned();
                        if n.starts_with('.') {
                            continue;
                        }
                        let kk: u64 = n[1..].parse().unwrap();
                        if kk + 2 < k {
                            continue;
                        }
                        poll_complete(&e.path(), &data_of(kk), stride)
                            .map_err(|m| format!("{n}: {m}"))?;
                        listed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            Ok(())
        });
        // Stop the reader even if the writer side panics.
        struct Done<'a>(&'a AtomicBool);
        impl Drop for Done<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Release);
            }
        }
        let _done = Done(&done);
        for k in 0..closes {
            current.store(k, Ordering::Release);
            let mut w = DenseWriter::create(
                name(k),
                zrecord::DType::UInt8,
                &[stride as u64],
                if k % 2 == 0 { Codec::Raw } else { Codec::Zstd },
                WriterOptions {
                    data_shards: 1 + (k % 3) as u32,
                    ..WriterOptions::default()
                },
            )
            .unwrap();
            let d = data_of(k);
            w.append(&d[..d.len() / 2]).unwrap();
            w.append(&d[d.len() / 2..]).unwrap();
            w.close().unwrap();
        }
        done.store(true, Ordering::Release);
        let r = reader.join().unwrap();
        r.unwrap_or_else(|m| panic!("reader: {m}"));
    });
    let (a, c) = (absent.into_inner(), complete.into_inner());
    report(
        "T10-polling",
        &[
            ("closes", closes.to_string()),
            ("polls_absent", a.to_string()),
            ("polls_complete", c.to_string()),
            ("listed_checked", listed.into_inner().to_string()),
            ("partial_observations", "0".into()),
            ("secs", format!("{:.1}", t0.elapsed().as_secs_f64())),
        ],
    );
    assert!(a + c > 0);
}
