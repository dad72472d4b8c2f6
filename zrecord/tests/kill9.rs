//! T2 kill -9 loop: a child process (this test binary, re-executed with `ZR_T2_DEST` set) writes a
//! container of ~3 MB and is killed with SIGKILL after a random delay in U(0, 1.5 x its unkilled
//! duration). After each kill: the destination is absent, or it opens, verifies and holds exactly
//! the oracle's records; leftover temp directories are removed by `zrecord::gc` or by the next
//! writer (alternating). Negative control: a naive writer that writes straight into the final path
//! must be caught by the same harness (some runs published-but-corrupt).
//!
//! `ZR_T2_RUNS` (CI 300) and `ZR_T2_NEG_RUNS` (CI 100) scale the loop.

mod support;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::Rng;
use support::*;
use zrecord::{Codec, DType, DenseWriter, StdFs, WriterOptions};

const STRIDE: usize = 4096;
const RECORDS: usize = 768;
const APPENDS: usize = 12;

fn oracle() -> Oracle {
    let data = fine_bytes(STRIDE * RECORDS, 77, true);
    Oracle {
        ragged: false,
        recs: data.chunks(STRIDE).map(|c| (c.to_vec(), vec![])).collect(),
    }
}

fn write_correct(dest: &Path, o: &Oracle) {
    let mut w = DenseWriter::create(
        dest,
        DType::UInt8,
        &[STRIDE as u64],
        Codec::Raw,
        WriterOptions {
            data_shards: 4,
            ..WriterOptions::default()
        },
    )
    .unwrap();
    for chunk in o.recs.chunks(RECORDS / APPENDS) {
        let d: Vec<u8> = chunk.iter().flat_map(|r| r.0.iter().copied()).collect();
        w.append(&d).unwrap();
    }
    w.close().unwrap();
}

/// The negative control: "publishes" by creating the final directory and copying the files of a
/// template container into it (shards, index, manifest last), 64 KiB at a time, without any
/// temp directory, fsync or rename.
fn write_naive(dest: &Path, template: &Path) {
    std::fs::create_dir(dest).unwrap();
    let mut names: Vec<String> = std::fs::read_dir(template)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort_by_key(|n| (n == "manifest.zrm", n == "index.zri", n.clone()));
    for n in names {
        let data = std::fs::read(template.join(&n)).unwrap();
        let mut f = std::fs::File::create(dest.join(&n)).unwrap();
        for c in data.chunks(64 << 10) {
            f.write_all(c).unwrap();
        }
    }
}

/// Child side: does nothing unless started by the parent loop.
#[test]
fn kill_loop_child_writes_a_container() {
    let Ok(dest) = std::env::var("ZR_T2_DEST") else {
        return;
    };
    let dest = PathBuf::from(dest);
    match std::env::var("ZR_T2_MODE").as_deref() {
        Ok("naive") => write_naive(&dest, Path::new(&std::env::var("ZR_T2_TEMPLATE").unwrap())),
        _ => write_correct(&dest, &oracle()),
    }
}

fn spawn(dest: &Path, mode: &str, template: &Path) -> std::process::Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "kill_loop_child_writes_a_container",
            "--exact",
            "--test-threads=1",
            "-q",
        ])
        .env("ZR_T2_DEST", dest)
        .env("ZR_T2_MODE", mode)
        .env("ZR_T2_TEMPLATE", template)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

#[derive(Debug, Default)]
struct Tally {
    runs: u64,
    absent: u64,
    valid: u64,
    corrupt: u64,
    exited_before_kill: u64,
    temp_left_by_kill: u64,
    temp_left_after_cleanup: u64,
    first_corrupt: Option<String>,
}

impl Tally {
    /// The `RELIABILITY` fields of the runs' outcomes, followed by `more`.
    fn fields(&self, more: &[(&'static str, String)]) -> Vec<(&'static str, String)> {
        let mut f = vec![
            ("runs", self.runs.to_string()),
            ("absent", self.absent.to_string()),
            ("published_valid", self.valid.to_string()),
            ("published_corrupt", self.corrupt.to_string()),
        ];
        f.extend_from_slice(more);
        f
    }
}

fn names(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

fn kill_loop(mode: &str, runs: u64, parent: &Path, template: &Path, o: &Oracle) -> Tally {
    // Calibrate: the unkilled duration of a child, on this machine, now.
    let mut d = Duration::ZERO;
    for k in 0..3 {
        let dest = parent.join(format!("calib-{mode}-{k}"));
        let t0 = Instant::now();
        let st = spawn(&dest, mode, template).wait().unwrap();
        d += t0.elapsed();
        assert!(st.success(), "calibration child failed");
        check_container(Arc::new(StdFs), &dest, o, true)
            .expect("unkilled child wrote a valid container");
        std::fs::remove_dir_all(&dest).unwrap();
    }
    let d = d / 3;
    let mut t = Tally::default();
    let mut r = rng(seed(0x2_0000) ^ mode.len() as u64);
    for i in 0..runs {
        let dest = parent.join(format!("c-{mode}-{i}"));
        let delay = d.mul_f64(r.random_range(0.0..1.5));
        let mut child = spawn(&dest, mode, template);
        std::thread::sleep(delay);
        if child.try_wait().unwrap().is_some() {
            t.exited_before_kill += 1;
        }
        let _ = child.kill(); // SIGKILL
        child.wait().unwrap();
        t.runs += 1;
        if dest.exists() {
            match check_container(Arc::new(StdFs), &dest, o, true) {
                Ok(()) => t.valid += 1,
                Err(e) => {
                    t.corrupt += 1;
                    t.first_corrupt
                        .get_or_insert_with(|| format!("run {i} (delay {delay:?}): {e}"));
                }
            }
            std::fs::remove_dir_all(&dest).unwrap();
        } else {
            t.absent += 1;
        }
        let left = temp_entries(&names(parent));
        if !left.is_empty() {
            t.temp_left_by_kill += 1;
        }
        if mode == "zrecord" {
            if i % 2 == 0 {
                zrecord::gc(parent).unwrap();
            } else {
                // The next writer cleans up dead writers' leftovers (then aborts itself).
                let w = DenseWriter::create(
                    parent.join("probe"),
                    DType::UInt8,
                    &[1],
                    Codec::Raw,
                    WriterOptions::default(),
                )
                .unwrap();
                drop(w);
            }
            let left = temp_entries(&names(parent));
            if !left.is_empty() {
                t.temp_left_after_cleanup += 1;
                eprintln!("run {i}: left after cleanup: {left:?}");
            }
        }
    }
    t
}

#[test]
fn a_killed_writer_never_leaves_a_corrupt_container_but_a_naive_one_does() {
    let runs = env_count("ZR_T2_RUNS", 300);
    let neg_runs = env_count("ZR_T2_NEG_RUNS", 100);
    let root = tempfile::tempdir().unwrap();
    let parent = root.path().join("p");
    std::fs::create_dir(&parent).unwrap();
    let template = root.path().join("template");
    let o = oracle();
    write_correct(&template, &o);
    let t0 = Instant::now();
    let t = kill_loop("zrecord", runs, &parent, &template, &o);
    let secs = t0.elapsed().as_secs_f64();
    report(
        "T2",
        &t.fields(&[
            ("finished_before_kill", t.exited_before_kill.to_string()),
            ("runs_leaving_temp", t.temp_left_by_kill.to_string()),
            ("temp_left_after_gc", t.temp_left_after_cleanup.to_string()),
            ("secs", format!("{secs:.1}")),
        ]),
    );
    assert_eq!(t.corrupt, 0, "published-but-corrupt: {:?}", t.first_corrupt);
    assert_eq!(
        t.temp_left_after_cleanup, 0,
        "gc / next writer left temp entries"
    );
    // The kill points must land on both sides of the commit point.
    assert!(t.absent * 50 >= runs && t.valid * 50 >= runs, "{t:?}");

    let t0 = Instant::now();
    let n = kill_loop("naive", neg_runs, &parent, &template, &o);
    report(
        "T2-negative-control",
        &n.fields(&[
            ("caught", (n.corrupt > 0).to_string()),
            ("secs", format!("{:.1}", t0.elapsed().as_secs_f64())),
        ]),
    );
    assert!(
        n.corrupt > 0,
        "the harness failed to catch the naive writer: {n:?}"
    );
}
