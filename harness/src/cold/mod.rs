//! The cold store tables (`--cold`: `cold-dense-vision`, `cold-ragged-vision`, `cold-dense-tokens`,
//! `cold-ragged-tokens`): every backend of the warm tables under one protocol, in which each timed
//! batch starts from a dropped page cache, plus the `cold-limit` row (`O_DIRECT` random reads of
//! the same record extents at the best queue depth). Owns the hidden `cold-cell` subcommand (one
//! backend of one table in its own process), its result (a cold [`CellResult`]), and `cold.json` /
//! `cold.md` in the results directory. The loader rows are `cold::loader`'s.
//!
//! Protocol: the store is opened once per cell (untimed; a reader loads its own metadata at open,
//! as in the warm tables, and keeps it, as a training job keeps its store open). Each timed batch:
//! drop this process's mappings of the store's pages (`MADV_DONTNEED`: the kernel never evicts a
//! mapped page, and an open maps headers, index and footers, with large folios megabytes of data
//! around each), `sync` and drop the page cache (untimed), gather 256 random records (timed, with
//! the block device's read counters read before and after), verify the batch against the source
//! (untimed).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use competitors::ZrecordStore;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::cell_args::{Cell, ColdCellArgs};
use crate::config::RunArgs;
use crate::corpus::{Corpora, Loaded};
use crate::corrupt;
use crate::error::{HarnessError, Result, write_file, write_json};
use crate::model::{CellResult, CellTable, Status, or_nan};
use crate::progress::progress;
use crate::store::BATCH;
use crate::table::{Table, md_table};
use limit::{DEPTHS, DiskStat, Extent};

pub mod limit;
pub mod loader;

/// The row name of the device limit.
pub const LIMIT_ROW: &str = "cold-limit";

/// Timed cold batches per cell: full run, and `--quick --cold`.
pub const BATCHES: u64 = 20;
pub const QUICK_BATCHES: u64 = 3;

/// The rows of a cold table: every disk backend of the warm tables (the in-memory
/// `memcpy-limit` row has no cold form, and `npy-crc-limit` is the verified-copy reference of a
/// warm gather), the cold loader rows, then the device limit.
pub fn rows() -> Vec<&'static str> {
    competitors::Backend::ALL
        .iter()
        .filter(|b| !b.is_reference())
        .map(|b| b.name())
        .chain(loader::ARMS.iter().map(|a| a.0))
        .chain([LIMIT_ROW])
        .collect()
}

/// The `cold-cell` subcommand: one row of one cold table, its result written to `args.out`.
pub fn cell_main(args: &ColdCellArgs) -> Result<ExitCode> {
    let mut r = CellResult::cold(args.table, &args.backend);
    let outcome = cell(args, &mut r);
    crate::store::finish(r, outcome, &args.out)
}

fn cell(args: &ColdCellArgs, r: &mut CellResult) -> Result<()> {
    let (table, backend_name, batches) = (args.table, args.backend.as_str(), args.batches);
    if let Err(why) = limit::can_drop_caches() {
        r.status = Status::NotApplicable;
        r.note = Some(format!("skipped: {why}"));
        return Ok(());
    }
    let loaded = Loaded::open_records(table, &args.corpus, true)?;
    let source = loaded.source();
    source.validate().map_err(HarnessError::InvalidSource)?;
    let limit_row = backend_name == LIMIT_ROW;
    let loader_arm = loader::arm(backend_name);
    // The limit reads the extents of the zrecord raw store; the loader rows read that store.
    let write_as = if limit_row || loader_arm.is_some() {
        "zrecord-raw"
    } else {
        backend_name
    };
    let Some(mut backend) = crate::store::competitor(write_as, backend_name, &source, r)? else {
        return Ok(());
    };
    let n = source.len();
    backend
        .prepare(&source)
        .map_err(HarnessError::backend(write_as, "prepare"))?;
    let dir = args.work.join(format!("cold-{table}-{backend_name}"));
    let _ = std::fs::remove_dir_all(&dir);
    let stored = backend
        .write(&source, &dir)
        .map_err(HarnessError::backend(write_as, "write"))?;
    let mut rng = SmallRng::seed_from_u64(args.seed);
    let draws: Vec<Vec<u64>> = (0..batches)
        .map(|_| (0..BATCH).map(|_| rng.random_range(0..n)).collect())
        .collect();
    let result = if limit_row {
        limit_cell(&stored.dir, &draws, r)
    } else if let Some((workers, prefetch)) = loader_arm {
        // A loader run pays one drop for all its batches: more of them, so its start-up and
        // first batch do not dominate.
        loader_cell(
            &stored.dir,
            &source,
            workers,
            prefetch,
            (batches * 4).max(16),
            r,
        )
    } else {
        timed_cell(&*backend, &stored, &source, &draws, r)
    };
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn timed_cell(
    backend: &dyn competitors::Competitor,
    stored: &competitors::Stored,
    source: &competitors::Source<'_>,
    draws: &[Vec<u64>],
    r: &mut CellResult,
) -> Result<()> {
    let stat_file = DiskStat::file_for(&stored.dir)?;
    let mut times = Vec::with_capacity(draws.len());
    let (mut dev, mut wall) = (DiskStat::default(), 0.0);
    // One reader for the whole cell, as a training job keeps its store open: what the open
    // mapped is unmapped before each drop, so every batch starts with nothing of the store cached.
    // Each table stands for a store larger than memory: a backend with a setting for that case
    // opens with it (zrecord: `ColdReads::Always`, what `Auto` picks for such a store).
    let mut reader = backend
        .open_larger_than_memory(stored)
        .map_err(HarnessError::backend(&r.backend, "open"))?;
    // The test-only switch (`corrupt::ENV`): one received batch gets a flipped byte.
    let mut counter = corrupt::Counter::from_env();
    for (k, idx) in draws.iter().enumerate() {
        limit::unmap_pages_under(&stored.dir)?;
        limit::drop_caches()?;
        let before = DiskStat::read(&stat_file)?;
        let t = Instant::now();
        let got = reader
            .gather(idx)
            .map_err(HarnessError::backend(&r.backend, "gather"))?;
        let elapsed = t.elapsed().as_secs_f64();
        let after = DiskStat::read(&stat_file)?;
        let dt = reader.last_gather_seconds().unwrap_or(elapsed);
        let d = after.since(before);
        dev = DiskStat {
            reads: dev.reads + d.reads,
            sectors: dev.sectors + d.sectors,
            read_ms: dev.read_ms + d.read_ms,
        };
        wall += elapsed;
        times.push(dt);
        r.gather_bytes += got.payload_bytes() as u64;
        let got = counter.pass(got);
        source
            .check(idx, &got)
            .map_err(HarnessError::differs(format!("cold batch {k}")))?;
        r.verified_batches += 1;
    }
    let total: f64 = times.iter().sum();
    crate::store::timed(r, times, total);
    device_figures(r, dev, wall);
    Ok(())
}

/// The device figures of `r` from the reads `dev` counted over `seconds`.
fn device_figures(r: &mut CellResult, dev: DiskStat, seconds: f64) {
    r.iops = Some(dev.reads as f64 / seconds);
    r.queue_depth = Some(dev.read_ms as f64 / 1e3 / seconds);
    r.device_mib_s = Some(dev.sectors as f64 * 512.0 / f64::from(1 << 20) / seconds);
}

/// The gather figures of `r`: `records` records, `bytes` bytes, in `batches` batches over
/// `seconds`.
fn gathered(r: &mut CellResult, batches: u64, records: u64, bytes: u64, seconds: f64) {
    r.gather_batches = batches;
    r.gather_records = records;
    r.gather_s = seconds;
    r.gather_bytes = bytes;
    r.gather_mib_s = bytes as f64 / f64::from(1 << 20) / seconds;
    r.krecords_s = records as f64 / seconds / 1e3;
}

/// A loader row: `batches` batches through a loaderx loader started on a dropped page cache
/// (one drop for the run: the point is batches in flight while others are read).
fn loader_cell(
    dir: &Path,
    source: &competitors::Source<'_>,
    workers: usize,
    prefetch: usize,
    batches: u64,
    r: &mut CellResult,
) -> Result<()> {
    let path = ZrecordStore::container(dir);
    let stat_file = DiskStat::file_for(dir)?;
    let run = loader::run(&path, source, workers, prefetch, batches, &stat_file)?;
    let records = run.batches * BATCH as u64;
    gathered(r, run.batches, records, run.bytes, run.seconds);
    device_figures(r, run.dev, run.seconds);
    r.verified_batches = run.batches;
    r.note = Some(format!(
        "{workers} worker(s), prefetch {prefetch}; one drop, then {batches} batches (timer includes start and the consumer's CRC32C check of each batch)"
    ));
    r.verified = Some(r.verified_batches > 0);
    r.status = Status::Ok;
    Ok(())
}

/// The limit row: the extents of every drawn record, read with `O_DIRECT` once per queue depth;
/// the row reports the depth with the most records/s (every depth goes in the note).
fn limit_cell(dir: &Path, draws: &[Vec<u64>], r: &mut CellResult) -> Result<()> {
    let path = ZrecordStore::container(dir);
    let extents = match zrecord::DenseStore::open(&path) {
        Ok(s) => s.record_extents(&draws.concat()),
        Err(_) => zrecord::RaggedStore::open(&path)
            .map_err(HarnessError::store(&path))?
            .record_extents(&draws.concat()),
    }?;
    let mut files: Vec<PathBuf> = Vec::new();
    let ext: Vec<Extent> = extents
        .into_iter()
        .map(|e| {
            let file = files.iter().position(|p| *p == e.path).unwrap_or_else(|| {
                files.push(e.path.clone());
                files.len() - 1
            });
            Extent {
                file,
                offset: e.offset,
                len: e.len,
            }
        })
        .collect();
    let mut runs = Vec::new();
    for depth in DEPTHS {
        runs.push(limit::limit(&files, &ext, depth)?);
    }
    let best = runs
        .iter()
        .max_by(|a, b| (a.records as f64 / a.seconds).total_cmp(&(b.records as f64 / b.seconds)))
        .ok_or_else(|| HarnessError::other("no queue depth measured"))?;
    let batches = draws.len() as u64;
    gathered(r, batches, best.records, best.bytes, best.seconds);
    r.iops = Some(best.reads as f64 / best.seconds);
    r.queue_depth = Some(best.depth as f64);
    r.device_mib_s = Some(r.gather_mib_s);
    // The same reads at the best depth, with a barrier after each batch as a gather has: the
    // last reads of a batch run with fewer in flight (shown beside, not the row's figure).
    let mut barrier_s = 0.0;
    for batch in ext.chunks(BATCH) {
        barrier_s += limit::limit(&files, batch, best.depth)?.seconds;
    }
    let mut note: Vec<String> = runs
        .iter()
        .map(|x| {
            format!(
                "qd{} {:.1}k rec/s",
                x.depth,
                x.records as f64 / x.seconds / 1e3
            )
        })
        .collect();
    note.push(format!(
        "qd{} with a barrier per batch {:.0} MiB/s",
        best.depth,
        best.bytes as f64 / f64::from(1 << 20) / barrier_s
    ));
    r.note = Some(note.join(", "));
    // Nothing is gathered, so nothing to verify: the row is the device's, not a reader's (a
    // reference: `verified` stays null).
    r.verified = None;
    r.status = Status::Ok;
    Ok(())
}

/// Runs the cold variant of every selected store table, writes `cold.json` and `cold.md` into
/// `out`, and returns the markdown and the number of failed cells.
pub fn run(a: &RunArgs, corpora: &Corpora, work: &Path, out: &Path) -> Result<(String, usize)> {
    let batches = if a.quick { QUICK_BATCHES } else { BATCHES };
    let tables: Vec<Table> = Table::STORE
        .into_iter()
        .filter(|&t| a.selected(t))
        .collect();
    let rows = rows();
    let pb = progress((tables.len() * rows.len()) as u64, "cold cells");
    let mut cells = Vec::new();
    for &table in &tables {
        let Some(prepared) = corpora.of(table) else {
            continue;
        };
        for backend in &rows {
            pb.set_prefix(format!("cold-{table} / {backend}"));
            let cell_out = work.join(format!("cold-cell-{table}-{backend}.json"));
            let args = ColdCellArgs {
                table,
                backend: backend.to_string(),
                corpus: prepared.dir.clone(),
                work: work.to_path_buf(),
                out: cell_out.clone(),
                batches,
                // The same batches for every row of a table.
                seed: 7,
            };
            let c = crate::store::spawn(args.argv(), &cell_out, CellResult::cold(table, backend));
            if c.status == Status::Failed {
                pb.println(format!(
                    "FAILED {} / {backend}: {}",
                    c.table,
                    c.note.clone().unwrap_or_default()
                ));
            }
            cells.push(c);
            pb.inc(1);
        }
    }
    pb.finish_and_clear();
    let failed = cells
        .iter()
        .filter(|c| c.status == Status::Failed || c.verified == Some(false))
        .count();
    write_json(&out.join("cold.json"), &cells)?;
    let md = render(&tables, &cells, batches);
    write_file(&out.join("cold.md"), &md)?;
    Ok((md, failed))
}

/// The timed batches per cell of the cold tables in `cells`: the most any backend row or the
/// limit row ran (a loader row runs more, a failed or skipped cell none); [`BATCHES`] when no
/// cell says.
fn batches_of(cells: &[CellResult]) -> u64 {
    cells
        .iter()
        .filter(|c| loader::arm(&c.backend).is_none())
        .map(|c| c.gather_batches)
        .max()
        .filter(|&b| b > 0)
        .unwrap_or(BATCHES)
}

/// `cold.md` of a finished run, from its `cold.json` (`harness render`).
pub fn cold_md(dir: &Path) -> Result<String> {
    let cells: Vec<CellResult> = crate::report::render::read_json(dir.join("cold.json"))?;
    Ok(rerendered(&cells))
}

/// `cold.md` of the cells of a finished run.
fn rerendered(cells: &[CellResult]) -> String {
    let tables: Vec<Table> = Table::STORE
        .into_iter()
        .filter(|&t| cells.iter().any(|c| c.table == CellTable::cold(t)))
        .collect();
    render(&tables, cells, batches_of(cells))
}

fn num(v: f64, digits: usize) -> String {
    if v.is_finite() {
        format!("{v:.digits$}")
    } else {
        "–".into()
    }
}

const COLUMNS: &str = "backend | logical gather MiB/s | krecords/s | p50 ms | p95 ms | × cold-limit | device IOPS | queue depth | device MiB/s | verified | note";

/// The cold tables as markdown: columns of the warm tables, the ratio to the limit row (records/s
/// for token tables, MiB/s for vision tables), achieved IOPS and queue depth.
pub fn render(tables: &[Table], cells: &[CellResult], batches: u64) -> String {
    let mut s = String::new();
    for &t in tables {
        let name = CellTable::cold(t).name();
        let mine: Vec<&CellResult> = cells
            .iter()
            .filter(|c| c.table == CellTable::cold(t))
            .collect();
        if mine.is_empty() {
            continue;
        }
        let vision = t.name().contains("vision");
        let metric = |c: &CellResult| {
            if vision { c.gather_mib_s } else { c.krecords_s }
        };
        let limit = mine
            .iter()
            .find(|c| c.backend == LIMIT_ROW && c.status == Status::Ok)
            .map(|c| metric(c));
        let records = mine.iter().map(|c| c.records).max().unwrap_or(0);
        s.push_str(&format!(
            "### {name}\n\n{} — {records} records (the whole prepared corpus), one reader per \
             row; before each of {batches} timed batches the reader's mappings of the store are \
             dropped (`MADV_DONTNEED`) and then the page cache (`sync`, `drop_caches`); × limit \
             compares {}\n\n",
            t.title(),
            if vision { "MiB/s" } else { "records/s" }
        ));
        let mut lines = Vec::new();
        for c in mine {
            let ok = c.status == Status::Ok;
            let ratio = match (ok, limit) {
                (true, Some(l)) if l > 0.0 => num(metric(c) / l, 2),
                _ => "–".into(),
            };
            let verified = match (ok, c.verified) {
                (false, _) => c.status.name(),
                (_, Some(true)) => "yes",
                (_, Some(false)) => "NO",
                (_, None) => "reference",
            };
            lines.push(vec![
                c.backend.clone(),
                num(c.gather_mib_s, 1),
                num(c.krecords_s, 2),
                num(c.p50_ms, 2),
                num(c.p95_ms, 2),
                ratio,
                num(or_nan(c.iops), 0),
                num(or_nan(c.queue_depth), 1),
                num(or_nan(c.device_mib_s), 1),
                verified.to_string(),
                c.note.clone().unwrap_or_default().replace('|', "/"),
            ]);
        }
        s.push_str(&md_table(COLUMNS, "lrrrrrrrrll", &lines));
        s.push('\n');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_the_disk_backends_then_the_limit() {
        let r = rows();
        assert_eq!(r.last(), Some(&LIMIT_ROW));
        assert!(!r.contains(&"memcpy-limit") && !r.contains(&"npy-crc-limit"));
        assert!(r.contains(&"zrecord-raw") && r.contains(&"npy-mmap-raw"));
    }

    #[test]
    fn render_puts_the_ratio_to_the_limit_beside_each_row() {
        let mut a = CellResult::cold(Table::DenseTokens, "zrecord-raw");
        a.status = Status::Ok;
        a.verified = Some(true);
        a.krecords_s = 35.0;
        let mut l = CellResult::cold(Table::DenseTokens, LIMIT_ROW);
        l.status = Status::Ok;
        l.verified = None;
        l.krecords_s = 50.0;
        let md = render(&[Table::DenseTokens], &[a, l], 3);
        assert!(md.contains("### cold-dense-tokens"), "{md}");
        assert!(md.contains("| zrecord-raw |"), "{md}");
        assert!(md.contains("| 0.70 |"), "{md}");
        assert!(md.contains("| 1.00 |"), "{md}");
    }

    /// Every committed cold run, read back through the one cell model (their `cold.json`
    /// predates it), renders to its committed `cold.md` byte for byte (what `harness render`
    /// writes).
    #[test]
    fn committed_cold_tables_render_byte_for_byte() {
        let results = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../results"));
        let mut checked = Vec::new();
        for entry in std::fs::read_dir(results).expect("list results/") {
            let dir = entry.expect("results/ entry").path();
            let Ok(json) = std::fs::read(dir.join("cold.json")) else {
                continue;
            };
            let run = dir.display().to_string();
            let cells: Vec<CellResult> =
                serde_json::from_slice(&json).unwrap_or_else(|e| panic!("{run}: {e}"));
            assert!(cells.iter().all(|c| c.table.cold), "{run}");
            let want = std::fs::read_to_string(dir.join("cold.md")).expect("read cold.md");
            assert_eq!(rerendered(&cells), want, "{run}");
            checked.push(run);
        }
        assert!(
            checked
                .iter()
                .any(|r| r.ends_with("2026-12-03-xeon-cold-91f5d72-a")),
            "{checked:?}"
        );
    }
}
