//! Table 6: end-to-end loaders over dense vision and ragged tokens, loaderx against the peer
//! loaders (`loader::arms`). Each row runs in a fresh process (the hidden `loader-cell` subcommand,
//! `loader::cell`, for the Rust rows, `harness/python/loader_bench.py` for the Python ones), arms
//! rotated per repeat, every timed batch verified after its timer; a separate sampled run per arm
//! gives the process-tree PSS (peak RAM), and one more run of each process-based arm in a private
//! 64 MiB `/dev/shm` gives the `/dev/shm` column. Owns the two loader tables: running the cells,
//! folding their JSON lines into rows; the store the rows read is `loader::store`'s.

use std::path::Path;
use std::process::Command;

use benchkit::stats::{median, sample_sd};
use serde_json::{Value, json};

use crate::config::RunArgs;
use crate::corpus::Corpora;
use crate::error::{HarnessError, Result};
use crate::model::{FreeTable, columns};
use crate::progress::progress;
use crate::table::{Corpus, LIMIT_ROW, Layout, Table};
use arms::{ARMS, Arm, BATCH, CellArgs, DRAIN, Runner, WARMUP, WEBDATASET_NOTE};
use store::{batch_bytes, ensure_store, store_len};

pub mod arms;
pub mod cell;
pub mod goals;
pub mod limit;
pub mod matching;
pub mod pair;
pub mod store;

/// An inline loader row's bare gather, timed in the row's own cell block by block beside it
/// (`loader::pair`), samples/s, one beside each of its `samples/s repeats`.
pub const PAIRED_BARE: &str = "bare-gather samples/s paired repeats";

/// One arm's results over the repeats.
#[derive(Default)]
struct ArmResult {
    per_batch: Vec<f64>,
    /// Each timed repeat's bare gather, timed beside it in its cell (`loader::pair`), seconds per
    /// batch, beside `per_batch`; `None` for a row that is not paired.
    bare_per_batch: Vec<Option<f64>>,
    peaks: Vec<u64>,
    verified_batches: u64,
    /// A batch differed from the source (or the arm said so).
    mismatch: bool,
    /// A run failed (an error, a crash, a batch that differed): the row is `verified: false`,
    /// with no figure from the runs that passed.
    failed: bool,
    config: Option<String>,
    note: Option<String>,
    small_shm: Option<String>,
}

/// Runs one cell and reads its JSON line.
fn run_json(cmd: Command, sample: bool) -> Result<(Value, u64)> {
    let (out, peak) = crate::child::run_sampled(cmd, sample)?;
    let j: Value =
        serde_json::from_str(out.lines().last().unwrap_or("")).map_err(HarnessError::BadOutput)?;
    Ok((j, peak))
}

/// Folds one run's JSON into the arm's results.
fn record(r: &mut ArmResult, j: &Value, peak: u64, memory_pass: bool) {
    if let Some(note) = j["skipped"].as_str() {
        r.note = Some(note.to_string());
        return;
    }
    if let Some(c) = j["config"].as_str() {
        r.config = Some(c.to_string());
    }
    let ok = j["verified"].as_bool() == Some(true);
    if !ok {
        r.failed = true;
        // A batch that differed from the source fails the row; a crash leaves it unmeasured.
        r.mismatch = j["mismatch"].as_bool() == Some(true);
        let err = j["error"].as_str().unwrap_or("a batch was not verified");
        r.note = Some(format!(
            "{}: {}",
            if r.mismatch {
                "batch differs"
            } else {
                "failed"
            },
            crate::child::last_line(err)
        ));
        return;
    }
    if memory_pass {
        // Peak RAM is the sampled run's alone: a timed run holds a block of batches after its
        // timer on purpose (to check them), which an in-process loader's own RSS counts and a
        // loader with worker processes' does not (their batches sit in the workers' memory).
        let reported = j["peak_rss_bytes"].as_u64().unwrap_or(0);
        r.peaks.push(peak.max(reported));
    } else {
        r.verified_batches += j["verified_batches"].as_u64().unwrap_or(0);
        if let Some(p) = j["per_batch_s"].as_f64() {
            r.per_batch.push(p);
            r.bare_per_batch.push(j["bare_per_batch_s"].as_f64());
        }
    }
}

/// The `/dev/shm` column: whether the arm completes a short run in a private 64 MiB `/dev/shm`.
fn small_shm_run(cmd: &Command) -> String {
    let small = arms::in_small_shm(cmd);
    match run_json(small, false) {
        Ok((j, _)) if j["verified"].as_bool() == Some(true) => "completes".to_string(),
        Ok((j, _)) => format!("fails: {}", j["error"].as_str().unwrap_or("unverified")),
        Err(HarnessError::Cell {
            code: Some(124), ..
        }) => format!("hangs (killed after {} s)", arms::SMALL_SHM_TIMEOUT_S),
        Err(e) => format!("fails: {e}"),
    }
}

/// Batches a `--quick` run's sampled peak-RAM run takes of each row, at most: a loader's pools and
/// queues are full after its first few batches, and the full count (800 images, 5,000 token
/// batches, each checked against its digest) made the peak-RAM runs 206 s of a 661 s quick table.
const QUICK_MEMORY_BATCHES: usize = 100;

/// The loader tables `--only` selected (all without it). A prepared corpus is not a selection:
/// `--only loader-ragged-tokens,dense-vision` prepares the vision corpus for the store table and
/// must not run the dense loader table too.
fn selected(a: &RunArgs) -> Vec<Table> {
    Table::LOADER
        .into_iter()
        .filter(|&t| a.selected(t))
        .collect()
}

pub fn run(a: &RunArgs, corpora: &Corpora, work: &Path) -> Result<Vec<FreeTable>> {
    // Dense batches timed per row. Full runs read the 2,500-image corpus, where the slowest peers
    // run ~800 samples/s, so 200 batches already take a minute a row. Quick runs read
    // a cache-sized corpus at ~150 k samples/s: 200 batches timed 0.4 s a row and three clean runs
    // of one commit spread 10-18 % (sd of ln) on four loaderx figures, too wide to gate; 800 time
    // ~1.5 s. At 50 batches one neighbour's burst moved a row by 2x.
    let dense_batches = if a.quick { 800 } else { 200 };
    let exe =
        std::env::current_exe().map_err(HarnessError::io("locate", "the harness executable"))?;
    let mut tables = Vec::new();
    for table in selected(a) {
        let Some(prepared) = corpora.of(table) else {
            continue;
        };
        // The store table whose records the loaders read; its name is the cells' KIND.
        let source = table
            .source_table()
            .ok_or_else(|| HarnessError::other("a loader table reads a store table"))?;
        let kind = source.name();
        let dense = source.layout() == Some(Layout::Dense);
        // A token batch takes ~30 us, an image batch ~2.5 ms: token tables time 5,000 batches so
        // both last long enough to mean something (their spread was 2-7 % in quick runs).
        let batches = if table.corpus() == Some(Corpus::Tokens) {
            5_000
        } else {
            dense_batches
        };
        let store = ensure_store(source, &prepared.dir, work)?;
        let records = store_len(&store, dense)?;
        // Every row of the table holds the same blocks of timed batches (`arms::HELD_BYTES`).
        let block = arms::block_for(batch_bytes(&store, records)?);
        let draws = arms::write_draws(table, work, records, arms::steps_needed(batches, block))?;
        let corpus_name = prepared
            .dir
            .file_name()
            .and_then(|s| s.to_str())
            .unwrap_or("c");
        let peer_dir = work.join(format!("peers-{kind}-{corpus_name}"));
        std::fs::create_dir_all(&peer_dir).map_err(HarnessError::io("create", &peer_dir))?;
        let arms: Vec<Arm> = ARMS
            .into_iter()
            .filter(|arm| arm.applies(dense) && arm.name != "webdataset")
            .filter(|arm| !a.quick || arms::QUICK_ARMS.contains(&arm.name))
            .collect();
        let command = |arm: &Arm, batches: usize| -> Result<Command> {
            let args = CellArgs {
                exe: &exe,
                kind: source,
                store: &store,
                npy_dir: &prepared.dir,
                draws: &draws,
                peer_dir: &peer_dir,
                batches,
            };
            let mut c = arm.command(&args)?;
            c.env(arms::BLOCK_ENV, block.to_string());
            Ok(c)
        };
        // The Python rows' sampled peak-RAM runs check batches against digests (no source map).
        let python_rows = arms.iter().any(|x| x.runner != Runner::Rust);
        let digests = python_rows.then(|| {
            arms::write_digests(kind, &prepared.dir, &draws, work, batches, block)
                .inspect_err(|e| {
                    eprintln!("harness: {kind}: {e}; the peak-RAM runs check against the source")
                })
                .ok()
        });
        let digests = digests.flatten();
        let mut results: Vec<ArmResult> = arms.iter().map(|_| ArmResult::default()).collect();
        let mut ledger = crate::progress::Ledger::default();
        let memory_batches = if a.quick {
            batches.min(QUICK_MEMORY_BATCHES)
        } else {
            batches
        };
        let shm_runs = if a.quick {
            0
        } else {
            arms.iter()
                .filter(|x| x.multiprocess || x.name == "python-loaderx-w4")
                .count()
        };
        // Timed runs are not sampled: reading smaps_rollup walks the process's page tables and
        // slowed the timed loop by 25-75 % (most for the arms with the most memory mapped). Peak
        // RAM comes from one more, sampled run of each arm after the timed ones.
        let limit = arms.iter().position(|x| x.name == LIMIT_ROW);
        let interleave = !a.quick;
        let orders: Vec<Vec<usize>> = (0..=a.repeats)
            .map(|rep| arms::pass_order(arms.len(), rep, limit, interleave && rep < a.repeats))
            .collect();
        let cells: usize = orders.iter().map(Vec::len).sum();
        let pb = progress((cells + shm_runs) as u64, "loader");
        for (rep, order) in orders.into_iter().enumerate() {
            let memory_pass = rep == a.repeats;
            for i in order {
                let arm = arms[i];
                let r = &mut results[i];
                pb.set_prefix(format!(
                    "{kind} / {}{}",
                    arm.name,
                    if memory_pass { " (peak RAM)" } else { "" }
                ));
                pb.inc(1);
                // Skipped, or failed once: the row is not a result, nothing more to run.
                let unsampled = memory_pass && r.per_batch.is_empty();
                if r.note.is_some() || r.failed || unsampled {
                    continue;
                }
                let started = std::time::Instant::now();
                let run_batches = if memory_pass { memory_batches } else { batches };
                match command(&arm, run_batches) {
                    Err(note) => r.note = Some(note.to_string()),
                    Ok(mut cmd) => {
                        if memory_pass {
                            // Blocks of one batch: the sampled run holds no extra batches.
                            cmd.env("LOADERX_LOADER_MEMORY_PASS", "1");
                            if let Some(d) = &digests {
                                cmd.env("LOADERX_LOADER_DIGESTS", d);
                            }
                        }
                        match run_json(cmd, memory_pass) {
                            Ok((j, peak)) => record(r, &j, peak, memory_pass),
                            Err(e) => {
                                r.failed = true;
                                r.note = Some(format!("failed: {e}"));
                            }
                        }
                    }
                }
                let what = if memory_pass {
                    "peak-RAM runs"
                } else {
                    arm.name
                };
                ledger.add(what, started.elapsed().as_secs_f64());
            }
        }
        if shm_runs > 0 {
            for (arm, r) in arms.iter().zip(results.iter_mut()) {
                if !(arm.multiprocess || arm.name == "python-loaderx-w4") || r.per_batch.is_empty()
                {
                    continue;
                }
                pb.set_prefix(format!("{kind} / {} (64 MiB /dev/shm)", arm.name));
                if let Ok(cmd) = command(arm, arms::SMALL_SHM_BATCHES) {
                    r.small_shm = Some(small_shm_run(&cmd));
                }
                pb.inc(1);
            }
        }
        pb.finish_and_clear();
        eprintln!("{}", ledger.summary(&format!("{table}"), 4));
        tables.push(build_table(
            table,
            kind,
            batches,
            block,
            memory_batches,
            prepared.synthetic,
            &arms,
            &results,
        ));
    }
    Ok(tables)
}

/// The table of one loader kind from its arms' results.
#[allow(clippy::too_many_arguments)]
fn build_table(
    table: Table,
    kind: &str,
    batches: usize,
    block: usize,
    memory_batches: usize,
    synthetic: bool,
    arms: &[Arm],
    results: &[ArmResult],
) -> FreeTable {
    // A row's figure is the median of its repeats; the limit row, a bound, reads its fastest:
    // the copy's rate moves with where the host put the two vCPUs (docs/benchmarks.md, "The
    // limit row"), and the median of three repeats that all sat in the slower placement is not
    // what the copy can do.
    let rate = |arm: &Arm, r: &ArmResult| {
        let p = if arm.name == LIMIT_ROW {
            r.per_batch
                .iter()
                .copied()
                .reduce(f64::min)
                .unwrap_or(f64::NAN)
        } else {
            median(&r.per_batch)
        };
        (p.is_finite() && !r.failed).then_some(BATCH as f64 / p)
    };
    let reference = arms
        .iter()
        .zip(results)
        .find(|(a, _)| a.name == "python-loaderx-w4")
        .and_then(|(a, r)| rate(a, r));
    let mut rows = Vec::new();
    for (arm, r) in arms.iter().zip(results) {
        let sps = rate(arm, r);
        let per_rep: Vec<f64> = r.per_batch.iter().map(|p| BATCH as f64 / p).collect();
        let note = match (&r.config, &r.note) {
            (Some(c), Some(n)) => Some(format!("{c}; {n}")),
            (c, n) => n.clone().or(c.clone()),
        };
        let mut row = json!({
            "loader": arm.label,
            "arm": arm.name,
            "storage": arm.storage,
            "batches/s": sps.map(|s| s / BATCH as f64),
            "samples/s": sps,
            "samples/s sd": sps.map(|_| sample_sd(&per_rep)),
            // Every repeat's figure, in the order run (the median, or the limit's best, of these).
            "samples/s repeats": if sps.is_some() { json!(per_rep) } else { Value::Null },
            "peak RAM MiB": sps.and(r.peaks.iter().max().map(|&b| b as f64 / (1 << 20) as f64)),
            "x loaderx": match (reference, sps) { (Some(l), Some(s)) => Some(l / s), _ => None },
            "verified batches": sps.map(|_| r.verified_batches),
            // true only from batches compared with the source; false when a run failed or a
            // batch differed; null when not run (skipped) and for the memcpy-limit reference.
            "verified": if r.failed { json!(false) } else if sps.is_none() || arm.name == LIMIT_ROW { Value::Null } else { json!(r.verified_batches > 0) },
            "64 MiB /dev/shm": r.small_shm,
            "note": note,
        });
        // Beside each repeat of an inline row, the bare gather timed in its cell (`loader::pair`).
        if sps.is_some()
            && !r.bare_per_batch.is_empty()
            && r.bare_per_batch.iter().all(Option::is_some)
        {
            let bare: Vec<f64> = r
                .bare_per_batch
                .iter()
                .flatten()
                .map(|p| BATCH as f64 / p)
                .collect();
            row[PAIRED_BARE] = json!(bare);
        }
        rows.push(row);
    }
    rows.push(json!({
        "loader": "webdataset", "arm": "webdataset", "storage": "tar shards",
        "batches/s": null, "samples/s": null, "samples/s sd": null, "peak RAM MiB": null,
        "x loaderx": null, "verified batches": null, "verified": null, "64 MiB /dev/shm": null,
        "note": WEBDATASET_NOTE,
    }));
    FreeTable {
        name: table,
        title: format!(
            "End-to-end loader, {kind}: batch {BATCH}, IID (the same draws for every row), {batches} timed batches after {WARMUP} warm-up, in blocks of {block} held until the block's timer stops, each block after {DRAIN} untimed batches, each row in a fresh process, rows rotated per repeat; every timed batch is compared with the source records after its timer (the timer covers only delivery, conversion to the batch contract included); samples/s = median over repeats, for the memcpy-limit row (a bound) its fastest repeat (a full run times it again after every {} other rows; sd = sample SD); peak RAM = max(process-tree PSS sampled every 20 ms in a separate run of {memory_batches} batches, the row process's own peak RSS in that run), where the Python rows check each batch against a SHA-256 digest precomputed in another process, so no row maps the source arrays only to check them; x loaderx = loaderx Python samples/s / this row's (> 1: loaderx Python is faster); 64 MiB /dev/shm = a {}-batch run of the row in a private mount namespace with a 64 MiB /dev/shm, bounded by {} s",
            arms::LIMIT_EVERY,
            arms::SMALL_SHM_BATCHES,
            arms::SMALL_SHM_TIMEOUT_S
        ),
        synthetic,
        columns: columns(
            "loader | storage | batches/s | samples/s | samples/s sd | peak RAM MiB | x loaderx | verified | 64 MiB /dev/shm | note",
        ),
        rows,
    }
}

#[cfg(test)]
mod tests;
