//! The run: corpora, every selected table in fresh processes with rotated arms, then the report.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use indicatif::{ProgressBar, ProgressStyle};

use crate::cli::RunArgs;
use crate::corpus::{self, Corpora};
use crate::report::{self, Report, StoreTable};
use crate::store_cell::{CellArgs, CellResult};
use crate::{loader_table, machine, sampler_table};

pub const STORE_TABLES: &[&str] = &[
    "dense-vision",
    "ragged-vision",
    "dense-tokens",
    "ragged-tokens",
];
/// Backends that the reference leaves out of the Ragged vision table when a batch takes > 1 s.
pub const SLOW_RAGGED_VISION: &[&str] = &["hdf5-gzip", "arrow-ipc-zstd", "parquet-zstd"];

fn today() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    // Civil date from days since 1970-01-01 (proleptic Gregorian).
    let z = (secs / 86_400) as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

pub fn progress(len: u64, what: &str) -> ProgressBar {
    let pb = ProgressBar::new(len);
    pb.set_style(
        ProgressStyle::with_template(
            "{msg:>14} [{elapsed_precise}] {wide_bar} {pos}/{len} {prefix}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    pb.set_message(what.to_string());
    pb
}

fn selected(a: &RunArgs, t: &str) -> bool {
    a.only.as_ref().is_none_or(|o| o.iter().any(|x| x == t))
}

pub fn run_cell(args: &CellArgs) -> CellResult {
    let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("harness"));
    let status = Command::new(exe).args(args.to_args()).status();
    let parsed = std::fs::read(&args.out)
        .ok()
        .and_then(|b| serde_json::from_slice::<CellResult>(&b).ok());
    match (status, parsed) {
        (_, Some(r)) => r,
        (Ok(s), None) => CellResult {
            table: args.table.clone(),
            backend: args.backend.clone(),
            status: "FAILED".into(),
            note: Some(format!("cell process exited with {s} and wrote no result")),
            ..CellResult::default()
        },
        (Err(e), None) => CellResult {
            table: args.table.clone(),
            backend: args.backend.clone(),
            status: "FAILED".into(),
            note: Some(format!("could not start the cell process: {e}")),
            ..CellResult::default()
        },
    }
}

pub fn main(a: RunArgs) -> Result<ExitCode, String> {
    let out = a.out.clone().unwrap_or_else(|| {
        let host = sysinfo::System::host_name().unwrap_or_else(|| "host".into());
        crate::cli::workspace_root().join("results").join(format!(
            "{}-{host}{}",
            today(),
            if a.quick { "-quick" } else { "" }
        ))
    });
    std::fs::create_dir_all(&out).map_err(|e| format!("create {}: {e}", out.display()))?;
    let work = a.cache.join("work");
    std::fs::create_dir_all(&work).map_err(|e| format!("create {}: {e}", work.display()))?;
    let need_vision = ["dense-vision", "ragged-vision", "loader"]
        .iter()
        .any(|t| selected(&a, t));
    let need_tokens = ["dense-tokens", "ragged-tokens", "loader"]
        .iter()
        .any(|t| selected(&a, t));
    let mut corpora = Corpora::default();
    if need_vision {
        corpora.vision = Some(corpus::vision(&a)?);
    }
    if need_tokens {
        corpora.tokens = Some(corpus::tokens(&a)?);
    }
    let min_seconds = a.min_seconds.unwrap_or(if a.quick { 0.2 } else { 2.0 });
    let verify_batches = if a.quick { 10 } else { 100 };

    let mut report = Report::new(&a, &corpora);
    let tables: Vec<&str> = STORE_TABLES
        .iter()
        .copied()
        .filter(|t| selected(&a, t))
        .collect();
    let cells = tables.len() * competitors::BACKENDS.len() * a.repeats;
    let mut results: BTreeMap<(String, String), Vec<CellResult>> = BTreeMap::new();
    if cells > 0 {
        let pb = progress(cells as u64, "store cells");
        for rep in 0..a.repeats {
            for &table in &tables {
                let prepared = if table.contains("vision") {
                    corpora.vision.as_ref()
                } else {
                    corpora.tokens.as_ref()
                };
                let Some(prepared) = prepared else { continue };
                let n = competitors::BACKENDS.len();
                for k in 0..n {
                    // Rotate the arm order every repeat so no backend always runs first or last.
                    let backend = competitors::BACKENDS[(k + rep) % n];
                    pb.set_prefix(format!("{table} / {backend} (repeat {})", rep + 1));
                    let cell_out = work.join(format!("cell-{table}-{backend}-{rep}.json"));
                    let _ = std::fs::remove_file(&cell_out);
                    let args = CellArgs {
                        table: table.to_string(),
                        backend: backend.to_string(),
                        corpus: prepared.dir.clone(),
                        work: work.clone(),
                        out: cell_out,
                        min_seconds,
                        verify_batches,
                        seed: 1000 * rep as u64 + k as u64,
                        probe_seconds: (table == "ragged-vision"
                            && SLOW_RAGGED_VISION.contains(&backend))
                        .then_some(1.0),
                    };
                    let r = run_cell(&args);
                    if r.status == "FAILED" {
                        pb.println(format!(
                            "FAILED {table} / {backend}: {}",
                            r.note.clone().unwrap_or_default()
                        ));
                    }
                    results
                        .entry((table.to_string(), backend.to_string()))
                        .or_default()
                        .push(r);
                    pb.inc(1);
                }
            }
        }
        pb.finish_and_clear();
    }
    for &table in &tables {
        let synthetic = if table.contains("vision") {
            &corpora.vision
        } else {
            &corpora.tokens
        }
        .as_ref()
        .is_some_and(|p| p.synthetic);
        let rows: Vec<(String, Vec<CellResult>)> = competitors::BACKENDS
            .iter()
            .filter_map(|b| {
                results
                    .remove(&(table.to_string(), b.to_string()))
                    .map(|v| (b.to_string(), v))
            })
            .collect();
        report
            .store_tables
            .push(StoreTable::aggregate(table, synthetic, rows));
    }
    if selected(&a, "sampler") {
        report.sampler = Some(sampler_table::run(&a, &work)?);
    }
    if selected(&a, "loader") {
        report.loader = Some(loader_table::run(&a, &corpora, &work)?);
    }
    report.machine = machine::receipts();
    report.source = machine::source_info();
    let failed = report.write(&out)?;
    println!("{}", report::render_markdown(&report));
    println!("results: {}", out.display());
    if failed > 0 {
        eprintln!("harness: {failed} cell(s) FAILED verification or errored");
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

#[allow(dead_code)]
pub fn relative(p: &Path) -> String {
    p.display().to_string()
}
