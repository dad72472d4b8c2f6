//! The arms of the loader tables: which loaders run ([`ARMS`]: each peer as its own docs run
//! random-access batches, at 2 and at 4 workers where it has workers, as many batches ahead as
//! loaderx's window and in step order, as are the loaderx rows but the `-completion` ones), their
//! labels and storage, how each one's fresh process is started ([`Arm::command`]: the
//! `loader-cell` subcommand for the Rust rows, `harness/python/loader_bench.py` under the project
//! venv, or under the MosaicML Streaming venv for its rows), the shared index draws every arm reads
//! ([`write_draws`]), and the private 64 MiB `/dev/shm` namespace the `/dev/shm` column runs the
//! process-based arms in ([`in_small_shm`]).

use std::path::{Path, PathBuf};
use std::process::Command;

use loaderx::{IndexSampler, Mode, Sampler};

use crate::cell_args::{Cell, LoaderCellArgs};
use crate::config;
use crate::error::{HarnessError, Result};
use crate::table::{BARE_ROW, LIMIT_ROW, Table};

/// Records per batch in every loader row.
pub const BATCH: usize = 256;
/// Untimed batches before the timed ones (each of them verified too).
pub const WARMUP: usize = 10;
/// Timed batches are taken in blocks of `BLOCK`, held until the block's timer stops, then each
/// verified; `DRAIN` untimed batches before every block take whatever a prefetching loader made
/// ahead while the previous block was verified. `harness/python/loaders/common.py` has the same
/// constants.
pub const BLOCK: usize = 8;
pub const DRAIN: usize = 32;
/// A block holds at most this many bytes of batches (and at least one batch): a loaderx row's
/// batches come from its allocator's pool, whose idle regions are bounded (256 MiB by default), and
/// a block released at once beyond that bound is freed in part and faulted in afresh by the next
/// block, a cost no trainer that holds a batch or two pays. Measured on the EPYC VM (dense vision,
/// 38.5 MB image batches): blocks of 8 (308 MB) took `loaderx-w0` 2.2-3.2 ms a batch and its
/// paired bare gather (`loader::pair`) read 0.78-1.06 of it cell to cell; blocks of 4 (154 MB) took
/// 1.7-1.9 ms and 0.97-1.00. Token batches (tens of KB) keep blocks of [`BLOCK`]. Every row of a
/// table holds the same blocks ([`BLOCK_ENV`]).
pub const HELD_BYTES: u64 = 160 << 20;
/// The block of a table's rows ([`block_for`]), for the Rust cell and the Python rows alike.
pub const BLOCK_ENV: &str = "LOADERX_LOADER_BLOCK";

/// Timed batches per block for batches of `batch_bytes`: [`BLOCK`], or fewer so a block holds at
/// most [`HELD_BYTES`].
pub fn block_for(batch_bytes: u64) -> usize {
    (HELD_BYTES / batch_bytes.max(1)).clamp(1, BLOCK as u64) as usize
}

/// The block a cell was given ([`BLOCK_ENV`]), else [`BLOCK`].
pub fn block_from_env() -> Result<usize> {
    match std::env::var(BLOCK_ENV) {
        Err(_) => Ok(BLOCK),
        Ok(v) => v
            .parse::<usize>()
            .ok()
            .filter(|b| (1..=BLOCK).contains(b))
            .ok_or_else(|| HarnessError::Argument {
                command: "loader-cell",
                name: BLOCK_ENV,
                value: v,
                expected: "a block of 1 to 8 batches",
            }),
    }
}
/// In a full run's timed passes the limit row is timed once more after every `LIMIT_EVERY` other
/// rows, so its repeats meet the placements the host gives the vCPUs over the pass (its figure is
/// its fastest repeat, a bound's figure). Quick runs keep one limit cell a pass.
pub const LIMIT_EVERY: usize = 4;

/// The cells of one pass, as indices into the table's `n` rows: the rows rotated by `rep`, and
/// where `interleave`, the limit row (`limit`) once more after every [`LIMIT_EVERY`] other rows.
pub fn pass_order(n: usize, rep: usize, limit: Option<usize>, interleave: bool) -> Vec<usize> {
    let mut order = Vec::with_capacity(n + n / LIMIT_EVERY);
    let mut since = 0;
    for k in 0..n {
        let i = (k + rep) % n;
        order.push(i);
        match limit {
            Some(l) if interleave && i != l => {
                since += 1;
                if since == LIMIT_EVERY {
                    order.push(l);
                    since = 0;
                }
            }
            _ => {}
        }
    }
    order
}

/// A row stops adding blocks once its timed batches took this long.
pub const BUDGET_S: f64 = 20.0;

/// Draws a run of `batches` timed batches in blocks of `block` consumes (warm-up, drains and
/// blocks).
pub fn steps_needed(batches: usize, block: usize) -> usize {
    WARMUP + batches.div_ceil(block) * (block + DRAIN)
}

/// Size of the private `/dev/shm` of the `/dev/shm` column.
pub const SMALL_SHM: &str = "64m";
/// Wall-clock bound of one run in the small `/dev/shm` (a loader that hangs is reported as such).
pub const SMALL_SHM_TIMEOUT_S: u32 = 150;
/// Timed batches of a run in the small `/dev/shm` (it checks completion, not speed).
pub const SMALL_SHM_BATCHES: usize = 20;

/// How an arm's process is started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Runner {
    /// `harness loader-cell` (the Rust loaderx rows).
    Rust,
    /// `loader_bench.py` under the project venv.
    Python,
    /// `loader_bench.py` under the MosaicML Streaming venv (it pins its own NumPy).
    StreamingVenv,
}

/// One row of a loader table: the name its cell is run by (`arm` in `results.json`), its label
/// and storage, how its process starts, whether the loader moves batches between processes (those
/// get the `/dev/shm` run), and whether it has a row only in the ragged table (per-record `.npy`
/// files are the reference's ragged-token variant).
#[derive(Clone, Copy, Debug)]
pub struct Arm {
    pub name: &'static str,
    pub label: &'static str,
    pub storage: &'static str,
    pub runner: Runner,
    pub multiprocess: bool,
    pub ragged_only: bool,
}

const ZR: &str = "zrecord-raw";
const NPY: &str = "npy-mmap-raw";

/// A Rust row over the zrecord store.
const fn rust(name: &'static str, label: &'static str) -> Arm {
    Arm {
        runner: Runner::Rust,
        ..py(name, label, ZR)
    }
}

/// A row run in one process by `loader_bench.py` under the project venv.
const fn py(name: &'static str, label: &'static str, storage: &'static str) -> Arm {
    Arm {
        name,
        label,
        storage,
        runner: Runner::Python,
        multiprocess: false,
        ragged_only: false,
    }
}

/// A row whose loader moves batches between processes.
const fn mp(name: &'static str, label: &'static str, storage: &'static str) -> Arm {
    Arm {
        multiprocess: true,
        ..py(name, label, storage)
    }
}

/// Every arm, in table order (one row a line, so not rustfmt's layout). The Python loaderx row at
/// 4 workers (`python-loaderx-w4`) is the reference of the `x loaderx` column. Every worker-based
/// loader has a row at 2 and at 4 workers (`-w2`, `-w4`) with the same batches ahead as loaderx's
/// window (`workers + 4`), and every row delivers in step order except the two loaderx rows named
/// `-completion`.
#[rustfmt::skip]
pub const ARMS: [Arm; 27] = [
    Arm { storage: "in-memory", ..rust(LIMIT_ROW, "memcpy limit (records in memory, no loader)") },
    rust(BARE_ROW, "view.gather loop (Rust, no loader)"),
    rust("loaderx-w0", "loaderx Rust, workers=0"),
    rust("loaderx-w1", "loaderx Rust, workers=1, prefetch=4"),
    rust("loaderx-w2", "loaderx Rust, workers=2, prefetch=4, ordered"),
    rust("loaderx-w4", "loaderx Rust, workers=4, prefetch=4, ordered"),
    rust("loaderx-w4-completion", "loaderx Rust, workers=4, prefetch=4, completion order"),
    py("python-loaderx-w2", "loaderx Python, workers=2, prefetch=4, ordered", ZR),
    py("python-loaderx-w4", "loaderx Python, workers=4, prefetch=4, ordered", ZR),
    py("python-loaderx-w4-completion", "loaderx Python, workers=4, prefetch=4, completion order", ZR),
    mp("torch-dataloader-w2", "torch DataLoader, 2 workers, batched fetch", NPY),
    mp("torch-dataloader-w4", "torch DataLoader, 4 workers, batched fetch", NPY),
    Arm { ragged_only: true, ..py("torch-files-w0", "torch DataLoader, in-process, packed collate", "npy-per-record") },
    py("spdl-thread-w2", "SPDL thread pipeline, concurrency 2", NPY),
    py("spdl-thread-w4", "SPDL thread pipeline, concurrency 4", NPY),
    mp("spdl-process-w2", "SPDL subprocess pipeline, concurrency 2, shared-memory arena", NPY),
    mp("spdl-process-w4", "SPDL subprocess pipeline, concurrency 4, shared-memory arena", NPY),
    mp("grain-w2", "Grain, 2 workers", "arrayrecord-raw"),
    mp("grain-w4", "Grain, 4 workers", "arrayrecord-raw"),
    py("lance-take", "Lance take (its own I/O threads)", "lance-raw"),
    mp("lance-torch-w2", "Lance SafeLanceDataset in torch DataLoader, 2 workers", "lance-raw"),
    mp("lance-torch-w4", "Lance SafeLanceDataset in torch DataLoader, 4 workers", "lance-raw"),
    Arm { runner: Runner::StreamingVenv, ..mp("streaming-w2", "MosaicML Streaming in torch DataLoader, 2 workers", "mds-raw") },
    Arm { runner: Runner::StreamingVenv, ..mp("streaming-w4", "MosaicML Streaming in torch DataLoader, 4 workers", "mds-raw") },
    mp("litdata-w2", "LitData in torch DataLoader, 2 workers", "litdata-raw"),
    mp("litdata-w4", "LitData in torch DataLoader, 4 workers", "litdata-raw"),
    py("webdataset", "webdataset", "tar shards"),
];

/// The arms of a `--quick` run (the CI gate): loaderx, in step and in completion order, against
/// the torch `DataLoader` row. The other peers need minutes of data-file writing and process
/// start-up that CI's time bound cannot spare (`torch-files-w0`, one file a record, took 106 s of
/// a quick token table, more than any other row); full runs have them all.
pub const QUICK_ARMS: [&str; 8] = [
    LIMIT_ROW,
    BARE_ROW,
    "loaderx-w0",
    "loaderx-w4",
    "loaderx-w4-completion",
    "python-loaderx-w4",
    "python-loaderx-w4-completion",
    "torch-dataloader-w4",
];

/// The row that explains itself instead of being timed.
pub const WEBDATASET_NOTE: &str = "not timed: webdataset 1.0.2 reads tar shards sequentially (no random access, `wids` no longer ships), so it cannot serve IID batches";

impl Arm {
    /// Whether this arm has a row in the dense (`true`) or ragged table.
    pub fn applies(&self, dense: bool) -> bool {
        !(dense && self.ragged_only)
    }

    /// The command that runs this arm once, or `Err(note)` when its interpreter is missing.
    pub fn command(&self, cell: &CellArgs<'_>) -> Result<Command> {
        let python = |py: Option<String>, what: &str| -> Result<Command> {
            let py = py.ok_or_else(|| HarnessError::missing(what))?;
            // LitData's `optimize` writes scratch files under $TMPDIR: its arm points it at the
            // peer cache for that call only (`harness/python/loaders/litdata_arm.py`).
            let mut c = Command::new(py);
            c.arg(config::python_script("loader_bench.py"))
                .args([self.name, cell.kind.name()])
                .arg(cell.store)
                .arg(cell.npy_dir)
                .arg(cell.draws)
                .arg(cell.peer_dir)
                .arg(cell.batches.to_string())
                .arg(WARMUP.to_string());
            Ok(c)
        };
        match self.runner {
            Runner::Rust => {
                let mut c = Command::new(cell.exe);
                c.args(
                    LoaderCellArgs {
                        kind: cell.kind,
                        store: cell.store.to_path_buf(),
                        corpus: cell.npy_dir.to_path_buf(),
                        arm: self.name.to_string(),
                        batches: cell.batches,
                    }
                    .argv(),
                );
                Ok(c)
            }
            Runner::Python => python(config::python(), "venv python ($LOADERX_VENV)"),
            Runner::StreamingVenv => python(
                config::streaming_python(),
                "MosaicML Streaming venv ($LOADERX_STREAMING_VENV)",
            ),
        }
    }
}

/// What every arm's command needs.
pub struct CellArgs<'a> {
    pub exe: &'a Path,
    /// The store table whose records the arm loads (its name is the cells' KIND).
    pub kind: Table,
    pub store: &'a Path,
    pub npy_dir: &'a Path,
    pub draws: &'a Path,
    pub peer_dir: &'a Path,
    pub batches: usize,
}

/// Writes `(steps, 256)` uint64 record indices: the IID draws of `IndexSampler(n, 256, Iid,
/// seed 7)`, the same ones the Rust rows and the Python loaderx row draw, so every arm loads the
/// same records at every step. Cached per (table, records, steps).
pub fn write_draws(table: Table, work: &Path, n: u64, steps: usize) -> Result<PathBuf> {
    let path = work.join(format!("loader-{table}-draws-{n}x{steps}.npy"));
    if path.exists() {
        return Ok(path);
    }
    let mut s = IndexSampler::new(n, BATCH, Mode::Iid, 7)?;
    let mut bytes = Vec::with_capacity(steps * BATCH * 8);
    for _ in 0..steps {
        for &i in s.next()? {
            bytes.extend_from_slice(&i.to_le_bytes());
        }
    }
    let tmp = path.with_extension("npy.tmp");
    datasets::npy::write_npy(&tmp, "<u8", &[steps as u64, BATCH as u64], &bytes)
        .map_err(HarnessError::datasets("write the draws"))?;
    std::fs::rename(&tmp, &path).map_err(HarnessError::io("rename", &tmp))?;
    Ok(path)
}

/// Steps past the last one a sampled peak-RAM run takes whose digests [`write_digests`] writes: a
/// prefetching loader that delivers in completion order may hand over a later step first.
pub const DIGEST_LOOKAHEAD: usize = 64;

/// The per-step batch digests the Python rows' sampled peak-RAM run checks against
/// (`LOADERX_LOADER_DIGESTS`; `write_digests` in `harness/python/loaders/common.py`), computed by
/// the project venv's Python in a process of its own, so the sampled arm process never maps the
/// source arrays to check its batches. Covers the first `WARMUP + batches + DIGEST_LOOKAHEAD`
/// steps (a memory pass drains nothing and takes blocks of one). Cached like the draws.
pub fn write_digests(
    kind: &str,
    npy_dir: &Path,
    draws: &Path,
    work: &Path,
    batches: usize,
    block: usize,
) -> Result<PathBuf> {
    let steps = (WARMUP + batches + DIGEST_LOOKAHEAD).min(steps_needed(batches, block));
    let stem = draws
        .file_stem()
        .and_then(|s| s.to_str())
        .ok_or_else(|| HarnessError::Format {
            path: draws.to_path_buf(),
            expected: "a file name",
            found: "none".into(),
        })?;
    // The digests depend on the corpus as well as the draws.
    let corpus = npy_dir.file_name().and_then(|s| s.to_str()).unwrap_or("c");
    let path = work.join(format!("{stem}-{corpus}-digests-{steps}.npy"));
    if path.exists() {
        return Ok(path);
    }
    let py =
        config::python().ok_or_else(|| HarnessError::missing("venv python ($LOADERX_VENV)"))?;
    let tmp = work.join(format!("{stem}-{corpus}-digests-{steps}.tmp.npy"));
    let out = Command::new(&py)
        .arg(config::python_script("loader_bench.py"))
        .args(["--digests", kind])
        .arg(npy_dir)
        .arg(draws)
        .arg(steps.to_string())
        .arg(&tmp)
        .output()
        .map_err(HarnessError::io("start", &py))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let last = crate::child::last_line(&err);
        return Err(HarnessError::Other(format!("digests: {last}")));
    }
    std::fs::rename(&tmp, &path).map_err(HarnessError::io("rename", &tmp))?;
    Ok(path)
}

/// `cmd` again, inside a private mount namespace whose `/dev/shm` is a fresh 64 MiB tmpfs
/// (`unshare -m` makes the mount private to the namespace; the machine's own `/dev/shm` is never
/// touched), bounded by `timeout`. Needs root.
pub fn in_small_shm(cmd: &Command) -> Command {
    let mut c = Command::new("timeout");
    c.arg(format!("{SMALL_SHM_TIMEOUT_S}s"))
        .args(["unshare", "--mount", "--propagation", "private", "sh", "-c"])
        .arg(format!(
            "mount -t tmpfs -o size={SMALL_SHM} tmpfs /dev/shm && exec \"$0\" \"$@\""
        ))
        .arg(cmd.get_program())
        .args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        if let Some(v) = v {
            c.env(k, v);
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arm_names_are_unique_and_found() {
        let mut names: Vec<_> = ARMS.iter().map(|a| a.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ARMS.len());
        let files = ARMS
            .iter()
            .find(|a| a.name == "torch-files-w0")
            .expect("files arm");
        assert!(!files.applies(true) && files.applies(false));
        assert!(
            ARMS.iter()
                .filter(|a| a.name != "torch-files-w0")
                .all(|a| a.applies(true) && a.applies(false))
        );
    }

    #[test]
    fn quick_arms_are_arms_and_worker_rows_come_in_pairs() {
        for q in QUICK_ARMS {
            assert!(
                ARMS.iter().any(|a| a.name == q),
                "quick arm {q} is not an arm"
            );
        }
        // Every worker-based loader has a row at 2 and at 4 workers: the peers' `-w4` rows and
        // loaderx's ordered rows each have a `-w2` twin.
        for a in ARMS.iter().filter(|a| a.name.ends_with("-w4")) {
            let twin = format!("{}-w2", a.name.trim_end_matches("-w4"));
            assert!(
                ARMS.iter().any(|b| b.name == twin),
                "{} has no {twin}",
                a.name
            );
        }
        // The completion-order rows are labelled as such; the other loaderx rows with workers
        // deliver in step order, as the peers do.
        for a in ARMS.iter().filter(|a| a.name.contains("loaderx-w")) {
            let completion = a.name.ends_with("-completion");
            assert_eq!(
                a.label.contains("completion order"),
                completion,
                "{}",
                a.label
            );
            let workers = !a.name.contains("-w0") && !a.name.contains("-w1");
            assert_eq!(
                a.label.ends_with("ordered"),
                workers && !completion,
                "{}",
                a.label
            );
        }
    }

    #[test]
    fn python_arms_are_known_to_the_bench_script() {
        let script = config::python_script("loader_bench.py");
        let text = std::fs::read_to_string(&script).expect("loader_bench.py");
        for a in ARMS
            .iter()
            .filter(|a| a.runner != Runner::Rust && a.name != "webdataset")
        {
            assert!(
                text.contains(&format!("\"{}\":", a.name)),
                "{} is not in {}",
                a.name,
                script.display()
            );
        }
    }

    #[test]
    fn a_full_pass_times_the_limit_after_every_few_rows_and_a_quick_one_does_not() {
        let order = pass_order(10, 3, Some(0), true);
        assert_eq!(order.len(), 10 + 9 / LIMIT_EVERY);
        assert_eq!(
            order.iter().filter(|&&i| i == 0).count(),
            1 + 9 / LIMIT_EVERY
        );
        let mut rows = order.clone();
        rows.sort_unstable();
        rows.dedup();
        assert_eq!(rows, (0..10).collect::<Vec<_>>());
        assert_eq!(order[..LIMIT_EVERY + 1], [3, 4, 5, 6, 0]);
        let quick = pass_order(10, 3, Some(0), false);
        assert_eq!(quick, (0..10).map(|k| (k + 3) % 10).collect::<Vec<_>>());
        assert_eq!(pass_order(10, 3, None, true), quick);
    }

    #[test]
    fn a_block_of_image_batches_stays_under_the_pool_bound_and_token_blocks_keep_eight() {
        // 256 images of 224 x 224 x 3 bytes: four held at once.
        assert_eq!(block_for(256 * 224 * 224 * 3), 4);
        assert_eq!(block_for(256 * 2048), BLOCK);
        assert_eq!(block_for(4 << 30), 1);
        assert_eq!(block_for(0), BLOCK);
        for b in [1, 4, BLOCK] {
            assert!(block_for(HELD_BYTES / b as u64) <= b);
        }
        // The draws a run consumes follow the block: more, shorter blocks, each after a drain.
        assert_eq!(steps_needed(800, 8), WARMUP + 100 * (8 + DRAIN));
        assert_eq!(steps_needed(800, 4), WARMUP + 200 * (4 + DRAIN));
    }

    #[test]
    fn draws_are_the_sampler_draws() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = write_draws(Table::LoaderDenseVision, dir.path(), 1000, 3).expect("draws");
        let f = datasets::npy::NpyFile::open(&p).expect("open draws");
        let bytes = f.data();
        assert_eq!(bytes.len(), 3 * BATCH * 8);
        let mut s = IndexSampler::new(1000, BATCH, Mode::Iid, 7).expect("sampler");
        for step in 0..3 {
            let want = s.next().expect("draw").to_vec();
            let got: Vec<u64> = bytes[step * BATCH * 8..(step + 1) * BATCH * 8]
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
                .collect();
            assert_eq!(got, want, "step {step}");
        }
    }
}
