//! T3 I/O-error injection (SQLite style): for every operation k of a small write workload and of
//! a read workload, fail operation k with EIO, ENOSPC or a short write (short read for the read
//! workload), once (transient) and from k on (persistent).
//!
//! Asserted for every run: no panic; the run succeeds or returns a typed error (`Error::Io` for
//! writes; `Error::Io` or a corruption error naming the file for reads); after a failed `close()`
//! nothing is published (transient faults) and the temp directory and lock file are gone; fsync is
//! never called again on a file or directory whose fsync failed; a successful run holds exactly
//! the oracle; after a persistent fault the file system is repaired and the next writer leaves no
//! temp garbage; a reader hit by a fault works again once the fault is gone.

mod support;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use support::*;
use zrecord::{Codec, Error, StdFs, Vfs};

const FAULTS: [Fault; 3] = [Fault::Eio, Fault::Enospc, Fault::ShortWrite];

fn workloads() -> Vec<Spec> {
    vec![
        Spec {
            name: "dense-zstd-2shards",
            ragged: false,
            codec: Codec::Zstd,
            shards: 2,
            records: 40,
            size: 300,
            appends: 3,
        },
        Spec {
            name: "ragged-raw-3shards",
            ragged: true,
            codec: Codec::Raw,
            shards: 3,
            records: 150,
            size: 9,
            appends: 2,
        },
    ]
}

/// Where the runs happen: the in-memory file system or a real directory.
trait Backend {
    fn fresh(&mut self) -> (Arc<dyn Fs>, PathBuf);
}

struct Mem;
impl Backend for Mem {
    fn fresh(&mut self) -> (Arc<dyn Fs>, PathBuf) {
        let fs = MemFs::new();
        fs.create_dir_all(Path::new("/p")).unwrap();
        (Arc::new(fs), PathBuf::from("/p"))
    }
}

struct Disk {
    root: tempfile::TempDir,
    n: usize,
}
impl Backend for Disk {
    fn fresh(&mut self) -> (Arc<dyn Fs>, PathBuf) {
        self.n += 1;
        let p = self.root.path().join(format!("run{}", self.n));
        std::fs::create_dir(&p).unwrap();
        (Arc::new(StdFs), p)
    }
}

fn list(vfs: &dyn Vfs, dir: &Path) -> Vec<String> {
    vfs.list_dir(dir)
        .unwrap()
        .into_iter()
        .map(|n| n.to_string_lossy().into_owned())
        .collect()
}

#[derive(Default, Debug)]
struct Stats {
    runs: u64,
    ok: u64,
    typed_errors: u64,
    injected: u64,
    published_after_persistent_fault: u64,
    by_error: HashMap<String, u64>,
}

fn write_sweep(backend: &mut dyn Backend, spec: &Spec, faults: &[Fault], stats: &mut Stats) {
    let oracle = spec.oracle(9);
    // Dry run: how many operations the workload makes.
    let (inner, dir) = backend.fresh();
    let ffs = FaultFs::new(inner);
    spec.write(
        &dir.join("c"),
        &oracle,
        spec.writer_options(Arc::new(ffs.clone())),
    )
    .expect("fault-free run");
    let n_ops = ffs.ops();
    assert!(n_ops > 10, "workload too small: {n_ops} ops");

    for &kind in faults {
        for persistent in [false, true] {
            for k in 0..n_ops {
                let (inner, dir) = backend.fresh();
                let ffs = FaultFs::new(inner.clone());
                ffs.arm(k, kind, persistent);
                let dest = dir.join("c");
                let ctx = format!(
                    "{} op {k}/{n_ops} {kind:?} {}",
                    spec.name,
                    if persistent {
                        "persistent"
                    } else {
                        "transient"
                    }
                );
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    spec.write(&dest, &oracle, spec.writer_options(Arc::new(ffs.clone())))
                }));
                let r = r.unwrap_or_else(|_| panic!("{ctx}: PANIC"));
                stats.runs += 1;
                stats.injected += ffs.injected().min(1);
                assert!(
                    ffs.retried_syncs().is_empty(),
                    "{ctx}: fsync retried after failure on {:?}",
                    ffs.retried_syncs()
                );
                let published = Vfs::exists(&*inner, &dest).unwrap();
                match &r {
                    Ok(()) => {
                        stats.ok += 1;
                        check_container(inner.clone(), &dest, &oracle, true)
                            .unwrap_or_else(|e| panic!("{ctx}: close() Ok but container bad: {e}"));
                    }
                    Err(e) => {
                        stats.typed_errors += 1;
                        assert!(ffs.injected() > 0, "{ctx}: error without a fault: {e}");
                        let Error::Io { op, path, .. } = e else {
                            panic!("{ctx}: expected Error::Io, got {e:?}")
                        };
                        assert!(!path.as_os_str().is_empty(), "{ctx}: error names no path");
                        bump(&mut stats.by_error, *op);
                        if !persistent {
                            assert!(!published, "{ctx}: published after a failed close: {e}");
                        } else if published {
                            // The repair itself was refused by the failing disk: what is visible
                            // must still be complete.
                            stats.published_after_persistent_fault += 1;
                            check_container(inner.clone(), &dest, &oracle, true).unwrap_or_else(
                                |e2| panic!("{ctx}: partial container visible ({e}): {e2}"),
                            );
                        }
                    }
                }
                // The temp directory is gone right away when the disk still works; so is the lock
                // file, except when the faulted op was its own removal after a successful close.
                let names = list(&*inner, &dir);
                if !persistent {
                    let left = temp_entries(&names);
                    assert!(
                        left.iter().all(|n| n.ends_with(".lock") && r.is_ok()),
                        "{ctx}: temp entries left: {left:?} ({r:?})"
                    );
                }
                // Repair the disk: the next writer must clean up whatever is left.
                ffs.heal();
                let o = Spec {
                    records: 2,
                    ..spec.clone()
                };
                let oo = o.oracle(1);
                o.write(&dir.join("next"), &oo, o.writer_options(inner.clone()))
                    .unwrap_or_else(|e| panic!("{ctx}: next writer failed: {e}"));
                let names = list(&*inner, &dir);
                assert!(
                    temp_entries(&names).is_empty(),
                    "{ctx}: next writer left temp entries: {names:?}"
                );
            }
        }
    }
}

#[test]
fn write_faults_in_memory_give_typed_errors_and_no_partial_container() {
    let mut stats = Stats::default();
    for spec in workloads() {
        write_sweep(&mut Mem, &spec, &FAULTS, &mut stats);
    }
    report_stats("T3-write-mem", &stats);
}

#[test]
fn write_faults_on_disk_give_typed_errors_and_no_partial_container() {
    let mut stats = Stats::default();
    let mut disk = Disk {
        root: tempfile::tempdir().unwrap(),
        n: 0,
    };
    write_sweep(
        &mut disk,
        &workloads()[0],
        &[Fault::Eio, Fault::ShortWrite],
        &mut stats,
    );
    report_stats("T3-write-disk", &stats);
}

fn report_stats(name: &str, s: &Stats) {
    let mut errs: Vec<_> = s.by_error.iter().map(|(k, v)| format!("{k}:{v}")).collect();
    errs.sort();
    report(
        name,
        &[
            ("runs", s.runs.to_string()),
            ("faulted_runs", s.injected.to_string()),
            ("ok", s.ok.to_string()),
            ("typed_errors", s.typed_errors.to_string()),
            ("panics", "0".into()),
            ("fsync_retries", "0".into()),
            (
                "published_after_persistent_fault(valid)",
                s.published_after_persistent_fault.to_string(),
            ),
            ("errors_by_op", errs.join(",").replace(' ', "_")),
        ],
    );
}

#[test]
fn read_faults_give_typed_errors_and_reads_recover_after_repair() {
    let mut stats = Stats::default();
    for spec in workloads() {
        let oracle = spec.oracle(4);
        let fs = MemFs::new();
        let dest = Path::new("/p/c");
        spec.write(dest, &oracle, spec.writer_options(Arc::new(fs.clone())))
            .unwrap();
        let ffs = FaultFs::new(Arc::new(fs.clone()));
        check_container(Arc::new(ffs.clone()), dest, &oracle, true).unwrap();
        let n_ops = ffs.ops();
        for kind in [Fault::Eio, Fault::Enospc, Fault::ShortRead] {
            for persistent in [false, true] {
                for k in 0..n_ops {
                    ffs.arm(k, kind, persistent);
                    let ctx = format!("{} read op {k}/{n_ops} {kind:?} p={persistent}", spec.name);
                    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        check_container(Arc::new(ffs.clone()), dest, &oracle, true)
                    }))
                    .unwrap_or_else(|_| panic!("{ctx}: PANIC"));
                    stats.runs += 1;
                    stats.injected += ffs.injected().min(1);
                    match r {
                        Ok(()) => stats.ok += 1,
                        Err(CheckError::Mismatch(m)) => panic!("{ctx}: silent wrong data: {m}"),
                        Err(CheckError::Zr(e)) => {
                            stats.typed_errors += 1;
                            match &e {
                                Error::Io { op, path, .. } => {
                                    assert!(path.starts_with(dest), "{ctx}: {e}");
                                    bump(&mut stats.by_error, *op);
                                }
                                e if e.is_corruption() => {
                                    assert_eq!(kind, Fault::ShortRead, "{ctx}: {e}");
                                    let p = e.corrupt_path().unwrap();
                                    assert!(p.starts_with(dest), "{ctx}: {e}");
                                    bump(&mut stats.by_error, "corrupt(short read)");
                                }
                                e => panic!("{ctx}: untyped error {e:?}"),
                            }
                        }
                    }
                    // The fault is gone: the same container reads fine again.
                    ffs.heal();
                    check_container(Arc::new(ffs.clone()), dest, &oracle, true)
                        .unwrap_or_else(|e| panic!("{ctx}: after repair: {e}"));
                }
            }
        }
    }
    report_stats("T3-read", &stats);
}
