//! T1 crash-image simulation: record every file-system operation of a publish through an
//! in-memory `Vfs`, then for every op-prefix build crash images (durable state + random subsets of
//! the un-synced operations, torn at 512-byte sectors) and reopen each one.
//!
//! Pass criteria: 0 published-but-corrupt images, 0 images without the container once `close()`
//! has returned. Mutation check: with any single fsync skipped, or the rename moved before the
//! syncs (`zrecord::testing::Mutation`, test-only feature `testing`), the same simulation must find a
//! violation.
//!
//! `ZR_T1_SUBSETS` sets the images per prefix (CI 200, long tier 10,000); `ZR_SEED` replays.

mod support;

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use support::*;
use zrecord::testing::Mutation;
use zrecord::{Codec, Vfs, WriterOptions};

const PARENT: &str = "/data/sets";
const NAME: &str = "/data/sets/c";

fn specs() -> Vec<Spec> {
    vec![
        Spec {
            name: "ragged-zstd-3shards",
            ragged: true,
            codec: Codec::Zstd,
            shards: 3,
            records: 150,
            size: 40,
            appends: 2,
        },
        Spec {
            name: "dense-raw-2shards",
            ragged: false,
            codec: Codec::Raw,
            shards: 2,
            records: 70,
            size: 4096,
            appends: 3,
        },
        Spec {
            name: "dense-dict-1record",
            ragged: false,
            codec: Codec::ZstdDict,
            shards: 1,
            records: 1,
            size: 700,
            appends: 1,
        },
    ]
}

#[derive(Debug, Default)]
struct Tally {
    images: u64,
    absent: u64,
    valid: u64,
    /// Published (final path exists) but not a valid container with the oracle's content.
    corrupt: u64,
    /// `close()` had returned but the container is missing or damaged.
    lost_after_close: u64,
    /// Images in which the next writer left temp garbage behind.
    gc_failures: u64,
    first_violation: Option<String>,
}

impl Tally {
    fn violations(&self) -> u64 {
        self.corrupt + self.lost_after_close + self.gc_failures
    }
}

/// Records one publish of `spec` (with an optional protocol mutation) and checks crash images.
/// With `stop_at_first`, returns as soon as a violation is seen (mutation runs).
fn simulate(spec: &Spec, mutation: Option<Mutation>, subsets: u64, stop_at_first: bool) -> Tally {
    let oracle = spec.oracle(7);
    let fs = MemFs::new();
    fs.create_dir_all(Path::new(PARENT)).unwrap();
    // An unrelated, durable neighbour: crash images must never damage it.
    fs.put(Path::new("/data/sets/other.bin"), vec![42; 100]);
    fs.start_recording();
    let vfs: Arc<dyn Fs> = Arc::new(fs.clone());
    let opts = WriterOptions {
        mutation,
        ..spec.writer_options(vfs)
    };
    spec.write(Path::new(NAME), &oracle, opts)
        .expect("the recorded publish itself succeeds");
    let closed_at = fs.log_len();
    // Sanity: the live file system has a valid container.
    check_container(Arc::new(fs.clone()), Path::new(NAME), &oracle, true)
        .expect("live container is valid");
    let model = fs.crash_model();
    assert_eq!(model.log.len(), closed_at);

    let mut t = Tally::default();
    let mut r = rng(seed(0x7e1) ^ mutation.map_or(0, |m| format!("{m:?}").len() as u64));
    for p in 0..=closed_at {
        let durable = model.durable_at(p);
        let n = if durable.pending() == 0 { 1 } else { subsets };
        for k in 0..n {
            // Vary how much of the un-synced state survives: nothing, everything, or a mix.
            let keep = match k % 5 {
                0 => 0.0,
                1 => 1.0,
                2 => 0.1,
                3 => 0.9,
                _ => 0.5,
            };
            let image = CrashModel::image(&durable, &mut r, keep);
            t.images += 1;
            let exists = image.exists(Path::new(NAME)).unwrap();
            let mut bad = None;
            if !exists {
                t.absent += 1;
                if p == closed_at {
                    t.lost_after_close += 1;
                    bad = Some("container missing after close() returned".to_string());
                }
            } else {
                match check_container(Arc::new(image.clone()), Path::new(NAME), &oracle, true) {
                    Ok(()) => t.valid += 1,
                    Err(e) => {
                        t.corrupt += 1;
                        if p == closed_at {
                            t.lost_after_close += 1;
                        }
                        bad = Some(format!("published but corrupt: {e}"));
                    }
                }
            }
            if image.read(Path::new("/data/sets/other.bin")) != Some(vec![42; 100]) {
                bad = Some("unrelated durable file damaged".into());
                t.corrupt += 1;
            }
            // Every 16th image: the next writer (another name) must clean up the dead writer's
            // temp directory and lock file.
            if bad.is_none() && k % 16 == 3 {
                let next = Arc::new(image.clone());
                let o = Spec {
                    records: 1,
                    appends: 1,
                    ..spec.clone()
                };
                let oo = o.oracle(1);
                o.write(
                    Path::new("/data/sets/next"),
                    &oo,
                    o.writer_options(next.clone()),
                )
                .expect("next writer succeeds on a crash image");
                let left = temp_entries(&image.names(Path::new(PARENT)));
                if !left.is_empty() {
                    t.gc_failures += 1;
                    bad = Some(format!("next writer left temp entries {left:?}"));
                }
            }
            if let Some(b) = bad {
                if t.first_violation.is_none() {
                    t.first_violation = Some(format!(
                        "{}: mutation {mutation:?}, prefix {p}/{closed_at} (last op {:?}), keep {keep}: {b}",
                        spec.name,
                        p.checked_sub(1).map(|i| short(&model.log[i]))
                    ));
                }
                if stop_at_first {
                    return t;
                }
            }
        }
    }
    t
}

fn short(op: &Op) -> String {
    match op {
        Op::Write { ino, off, data } => format!("Write(ino {ino}, off {off}, {} B)", data.len()),
        o => format!("{o:?}"),
    }
}

#[test]
fn crash_images_of_a_publish_hold_no_container_or_a_valid_one() {
    let subsets = env_count("ZR_T1_SUBSETS", 200);
    for spec in specs() {
        let t0 = Instant::now();
        let t = simulate(&spec, None, subsets, false);
        report(
            "T1",
            &[
                ("fixture", spec.name.to_string()),
                ("subsets_per_prefix", subsets.to_string()),
                ("images", t.images.to_string()),
                ("absent", t.absent.to_string()),
                ("valid", t.valid.to_string()),
                ("corrupt", t.corrupt.to_string()),
                ("lost_after_close", t.lost_after_close.to_string()),
                ("gc_failures", t.gc_failures.to_string()),
                ("secs", format!("{:.2}", t0.elapsed().as_secs_f64())),
            ],
        );
        assert_eq!(
            t.violations(),
            0,
            "{}: {t:?}\nfirst violation: {:?}",
            spec.name,
            t.first_violation
        );
        // The simulation must see both sides of the commit point.
        assert!(t.absent > 0 && t.valid > 0, "{}: {t:?}", spec.name);
    }
}

/// The test has teeth: every single skipped fsync and the early rename are caught.
#[test]
fn a_skipped_fsync_or_an_early_rename_is_caught_by_the_crash_images() {
    let subsets = env_count("ZR_T1_SUBSETS", 200);
    for spec in specs() {
        let s = spec.shards as usize;
        let mut muts: Vec<Mutation> = (0..s + 4).map(Mutation::SkipSync).collect();
        muts.push(Mutation::RenameBeforeSync);
        for m in muts {
            let t = simulate(&spec, Some(m), subsets, true);
            report(
                "T1-mutation",
                &[
                    ("fixture", spec.name.to_string()),
                    ("mutation", format!("{m:?}").replace(' ', "")),
                    ("images_until_caught", t.images.to_string()),
                    ("caught", (t.violations() > 0).to_string()),
                ],
            );
            assert!(
                t.violations() > 0,
                "{}: mutation {m:?} was NOT caught by the crash simulation ({t:?})",
                spec.name
            );
            eprintln!("{} {m:?}: {}", spec.name, t.first_violation.unwrap());
        }
    }
}

/// The crash model itself: a synced file in a synced directory survives; un-synced data and
/// un-synced names may vanish.
#[test]
fn the_crash_model_keeps_synced_data_and_may_drop_unsynced_data() {
    let fs = MemFs::new();
    fs.create_dir_all(Path::new("/d")).unwrap();
    fs.start_recording();
    let f = fs.create_file(Path::new("/d/a")).unwrap();
    f.write_at(0, &[1; 1000]).unwrap();
    let model_a = fs.crash_model();
    f.sync().unwrap();
    fs.sync_dir(Path::new("/d")).unwrap();
    let model_b = fs.crash_model();
    let mut r = rng(1);
    let mut saw_missing = false;
    let mut saw_torn = false;
    for _ in 0..200 {
        let d = model_a.durable_at(model_a.log.len());
        let img = CrashModel::image(&d, &mut r, 0.5);
        match img.read(Path::new("/d/a")) {
            None => saw_missing = true,
            Some(v) if v != vec![1; 1000] => saw_torn = true,
            _ => {}
        }
        let d = model_b.durable_at(model_b.log.len());
        assert_eq!(d.pending(), 0);
        let img = CrashModel::image(&d, &mut r, 0.5);
        assert_eq!(img.read(Path::new("/d/a")), Some(vec![1; 1000]));
    }
    assert!(saw_missing && saw_torn);
}
