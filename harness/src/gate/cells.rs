//! The gate's cells: rows of the loader tables, each run as those tables run it (`harness
//! loader-cell KIND STORE CORPUS ARM BATCHES`, one fresh process, every warm-up and timed batch
//! compared with the corpus's source arrays after its timer), here by either build's harness.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::cell_args::{Cell as _, LoaderCellArgs};
use crate::loader::arms::{self as loader_arms, BLOCK_ENV};
use crate::loader::store::{batch_bytes, ensure_store, store_len};
use crate::table::{BARE_ROW, Layout, Table};

/// One gated path (named `path` in the log and `decision.json`): the loader-table row `arm` over
/// the store of table `kind`, `batches` timed batches a run.
#[derive(Clone, Copy, Debug)]
pub struct Cell {
    pub path: &'static str,
    pub kind: Table,
    pub arm: &'static str,
    pub batches: usize,
}

/// The gated paths: zrecord's warm gather of a Dense and of a Ragged store (the bare gather
/// loop), and the Rust loader (4 workers, ordered delivery) over the Ragged store, where a
/// batch is small and the loader's own per-batch work weighs most.
pub const CELLS: [Cell; 3] = [
    Cell {
        path: "gather-dense-vision",
        kind: Table::DenseVision,
        arm: BARE_ROW,
        batches: 4,
    },
    Cell {
        path: "gather-ragged-tokens",
        kind: Table::RaggedTokens,
        arm: BARE_ROW,
        batches: 400,
    },
    Cell {
        path: "loader-ragged-tokens",
        kind: Table::RaggedTokens,
        arm: "loaderx-w4",
        batches: 400,
    },
];

/// A cell process that runs this long has stopped: it is killed and fails the gate.
const CELL_LIMIT: Duration = Duration::from_secs(180);

/// What a cell reads: the zrecord store (written once, untimed, and compared record by record
/// with the source when reused), the corpus its batches are compared with, and the timed
/// batches per block the loader tables give this store's rows.
#[derive(Clone, Debug)]
pub struct Input {
    pub store: PathBuf,
    pub corpus: PathBuf,
    pub block: usize,
}

impl Input {
    /// The store of `kind`'s corpus at `corpus`, under `work`.
    pub fn prepare(kind: Table, corpus: &Path, work: &Path) -> crate::error::Result<Input> {
        std::fs::create_dir_all(work).map_err(crate::error::HarnessError::io("create", work))?;
        let store = ensure_store(kind, corpus, work)?;
        let records = store_len(&store, kind.layout() == Some(Layout::Dense))?;
        let block = loader_arms::block_for(batch_bytes(&store, records)?);
        Ok(Input {
            store,
            corpus: corpus.to_path_buf(),
            block,
        })
    }
}

/// One cell's figures: timed batches per second of its own timers (`wall`), and per CPU second
/// (user + system, every thread) of the whole cell process (`cpu`: its work, which a busy
/// machine's other processes delay but do not add to).
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct Measure {
    pub wall: f64,
    pub cpu: f64,
}

/// CPU seconds (user + system) of this process's children that ended and were waited for.
fn children_cpu_s() -> f64 {
    // SAFETY: an all-zero `rusage` is a valid value of the plain C struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `getrusage` writes one `rusage` into the struct we own; RUSAGE_CHILDREN is valid,
    // so the call cannot fail and leaves `ru` fully written.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) };
    let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    s(ru.ru_utime) + s(ru.ru_stime)
}

/// One run of `cell` by the harness `exe` (the gate runs one cell at a time, so the CPU time its
/// children gained meanwhile is this cell's): its figures, or why it has none (a batch differed
/// from the source, the process failed or printed no result).
pub fn run(exe: &Path, cell: &Cell, input: &Input) -> Result<Measure, String> {
    let args = LoaderCellArgs {
        kind: cell.kind,
        store: input.store.clone(),
        corpus: input.corpus.clone(),
        arm: cell.arm.to_string(),
        batches: cell.batches,
    };
    let cpu_before = children_cpu_s();
    let child = Command::new(exe)
        .args(args.argv())
        .env(BLOCK_ENV, input.block.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("could not start {}: {e}", exe.display()))?;
    let (out, killed) = crate::child::output_within(child, CELL_LIMIT)
        .map_err(|e| format!("waiting for {}: {e}", exe.display()))?;
    let cpu_s = children_cpu_s() - cpu_before;
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last = crate::child::last_line(&stderr);
    if !out.status.success() {
        return Err(crate::child::why(killed, last));
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .last()
        .and_then(|l| serde_json::from_str(l).ok());
    judge(
        &line.ok_or_else(|| format!("no result line: {last}"))?,
        cpu_s,
    )
}

/// A loader cell's JSON line and the CPU seconds of its process: its figures when every compared
/// batch was the source's.
pub fn judge(line: &Value, cpu_s: f64) -> Result<Measure, String> {
    if line["verified"].as_bool() != Some(true) {
        let why = line["error"].as_str().unwrap_or("a batch was not verified");
        return Err(format!("wrong value: {why}"));
    }
    match (
        line["per_batch_s"].as_f64(),
        line["verified_batches"].as_u64(),
    ) {
        (Some(s), Some(n)) if s > 0.0 && s.is_finite() && n > 0 && cpu_s > 0.0 => Ok(Measure {
            wall: 1.0 / s,
            cpu: n as f64 / cpu_s,
        }),
        _ => Err(format!("no timing in {line}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_cell_line_is_judged_by_its_verdict_first() {
        let ok = json!({"per_batch_s": 0.002, "verified": true, "verified_batches": 8});
        let m = judge(&ok, 0.5).map(|m| (m.wall, m.cpu));
        assert_eq!(m, Ok((500.0, 16.0)));
        let bad = json!({"per_batch_s": null, "verified": false, "mismatch": true,
                         "error": "loaderx-w4: timed batch 45 differs"});
        let e = judge(&bad, 0.5).expect_err("a wrong batch fails");
        assert_eq!(e, "wrong value: loaderx-w4: timed batch 45 differs");
        // Verified but untimed is no result either.
        assert!(judge(&json!({"verified": true, "per_batch_s": 0.0}), 0.5).is_err());
        assert!(judge(&ok, 0.0).is_err(), "no CPU time measured");
    }

    #[test]
    fn a_finished_child_adds_its_cpu_time() {
        let before = children_cpu_s();
        let busy = "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done";
        let st = Command::new("sh").args(["-c", busy]).status();
        assert!(st.expect("sh").success());
        assert!(children_cpu_s() > before);
    }

    #[test]
    fn every_path_is_a_loader_table_row() {
        for c in CELLS {
            assert!(c.kind.layout().is_some(), "{c:?}");
            assert!(
                c.arm == BARE_ROW
                    || loader_arms::ARMS
                        .iter()
                        .any(|a| a.name == c.arm
                            && a.applies(c.kind.layout() == Some(Layout::Dense))),
                "{c:?}"
            );
        }
    }
}
