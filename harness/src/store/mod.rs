//! One (store table, backend) cell, run in its own process (the hidden `cell` subcommand): write
//! (timed, repeated: [`WRITE_METHOD`], then the write limit beside it), open, verify 100 random
//! batches, then timed IID gathers until the time budget is spent, each checked after its timer,
//! in rounds alternating with the copy limit of the same draws ([`LIMIT_METHOD`]). Reads its
//! command line ([`StoreCellArgs`]) and fills a [`CellResult`].

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

use benchkit::stats::{median, percentile};
use competitors::Source;

use crate::cell_args::StoreCellArgs;
use crate::corpus::Loaded;
use crate::corrupt;
use crate::error::{HarnessError, Result, write_json};
use crate::model::{CellResult, Status};
use crate::table::LIMIT_ROW;

pub mod sampler;
pub mod write_probe;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

pub const BATCH: usize = 256;

pub fn main(args: &StoreCellArgs) -> Result<ExitCode> {
    let mut r = CellResult::new(args.table, &args.backend, Status::Failed);
    let outcome = run(args, &mut r);
    finish(r, outcome, &args.out)
}

/// Ends a store or cold cell: an error fails `r` (unverified, the error its note), `r` goes to
/// `out` as JSON, and the exit code is 1 for a failed cell.
pub fn finish(mut r: CellResult, outcome: Result<()>, out: &Path) -> Result<ExitCode> {
    if let Err(e) = outcome {
        r.status = Status::Failed;
        r.verified = Some(false);
        r.note = Some(e.to_string());
    }
    write_json(out, &r)?;
    Ok(ExitCode::from(u8::from(r.status == Status::Failed)))
}

/// Runs a store or cold cell in a fresh process and reads the result it wrote to `out`; when it
/// wrote none, `failed` (unverified) with a note saying how the process ended.
pub fn spawn(argv: Vec<String>, out: &Path, failed: CellResult) -> CellResult {
    let _ = std::fs::remove_file(out);
    let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("harness"));
    let status = Command::new(exe).args(argv).status();
    let parsed = std::fs::read(out)
        .ok()
        .and_then(|b| serde_json::from_slice::<CellResult>(&b).ok());
    parsed.unwrap_or_else(|| CellResult {
        note: Some(match status {
            Ok(s) => format!("cell process exited with {s} and wrote no result"),
            Err(e) => format!("could not start the cell process: {e}"),
        }),
        verified: Some(false),
        status: Status::Failed,
        ..failed
    })
}

/// Writes per cell: the cell's write time is the median of up to this many.
pub const WRITE_REPEATS: usize = 3;
/// No further write starts once the cell's writes took this many seconds together.
pub const WRITE_BUDGET_S: f64 = 4.0;

/// The caption of a table with an `npy-crc-limit` row (the Dense tables).
pub const VERIFIED_COPY_LIMIT: &str = "`npy-crc-limit` is a reference, not a peer: npy-mmap-raw's \
gather (same file, same method), then a CRC32C pass over each gathered record with zrecord's kernel: the \
least work a gather that verifies every record adds to npy's copy. zrecord-raw verifies every \
record it returns; npy-mmap-raw verifies none.";

/// How the write column is measured (the store tables' caption says it).
pub const WRITE_METHOD: &str = "Write = median of up to 3 timed writes per cell (no further \
write starts after 4 s of writing), median over the repeats; each write goes into a fresh \
directory after the previous write's directory was removed and `sync -f` flushed the work file \
system (no earlier dirty data or freed blocks are pending) and \
right after an untimed plain write of 1.25x the logical bytes into a scratch file that is then \
deleted (warm pages: this VM reports memory free for a few seconds to its host, and the first \
touch of a reported page costs a host fault; a page-cache writer that met such pages ran up to \
10x slower, so without this step which row met them was luck); the source is in the page cache \
(touched once before); the timer stops when the writer has closed its files: the data is in the \
page cache, not fsynced (no row fsyncs). `write-limit` is one plain sequential `write` of the \
same logical bytes (8 MiB chunks, one file), timed the same way in every cell right after its \
writes; `write x limit` = median over the row's cells of the cell's write / its own limit; the \
write-limit row is the median of all cells' limits.";

/// How a store cell times the copy limit beside its gathers (the store tables' caption says it).
pub const LIMIT_METHOD: &str = "`× memcpy-limit` = median over the row's cells of the cell's gather / \
the `memcpy-limit` copy of the same batches timed in that cell: every cell replays its timed \
batches' draws through the limit row's copy (the records held in memory, copied into a recycled \
buffer with the stores a gather of that size uses) in rounds of at least 0.25 s alternating with \
its own gathers, so both figures of a ratio come from the same seconds of the same process; the \
memcpy-limit row itself is its own cells' figures.";

/// Rounds of at least this many seconds of the backend's timed gathers alternate with the limit
/// copy of the same draws.
const LIMIT_ROUND_S: f64 = 0.25;

/// The copy limit of one store cell, timed beside its gathers: the draws of a round of the
/// backend's timed gathers are replayed through competitors' `memcpy-limit` once the round has
/// lasted [`LIMIT_ROUND_S`], so the two alternate within the cell (a machine whose speed drifts
/// between cells moves both) and the limit's cache and memory traffic never lands inside a
/// backend's timed gather.
struct LimitRounds {
    reader: Box<dyn competitors::Reader>,
    dir: PathBuf,
    round: Vec<Vec<u64>>,
    round_s: f64,
    total_s: f64,
}

impl LimitRounds {
    fn new(source: &Source<'_>, dir: &Path) -> Result<LimitRounds> {
        let mut c = competitors::Backend::MemcpyLimit.competitor();
        let stored = c
            .write(source, dir)
            .map_err(HarnessError::backend(LIMIT_ROW, "write"))?;
        let reader = c
            .open(&stored)
            .map_err(HarnessError::backend(LIMIT_ROW, "open"))?;
        Ok(LimitRounds {
            reader,
            dir: dir.to_path_buf(),
            round: Vec::new(),
            round_s: 0.0,
            total_s: 0.0,
        })
    }

    /// The backend gathered `idx` in `seconds`; a round that has lasted long enough is replayed.
    fn gathered(&mut self, idx: Vec<u64>, seconds: f64) -> Result<()> {
        self.round.push(idx);
        self.round_s += seconds;
        if self.round_s >= LIMIT_ROUND_S {
            self.replay()?;
        }
        Ok(())
    }

    fn replay(&mut self) -> Result<()> {
        for idx in self.round.drain(..) {
            let t = Instant::now();
            let b = self
                .reader
                .gather(&idx)
                .map_err(HarnessError::backend(LIMIT_ROW, "gather"))?;
            self.total_s += self
                .reader
                .last_gather_seconds()
                .unwrap_or(t.elapsed().as_secs_f64());
            drop(b);
        }
        self.round_s = 0.0;
        Ok(())
    }

    /// Replays the last round; the limit's seconds for every batch the backend timed.
    fn finish(mut self) -> Result<f64> {
        self.replay()?;
        Ok(self.total_s)
    }
}

impl Drop for LimitRounds {
    /// The limit's directory goes however the cell ends (a gather error included).
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Flushes the file system holding `dir` (`sync -f`), so a timed write starts with no dirty
/// data of earlier work pending.
pub(crate) fn flush(dir: &Path) -> Result<()> {
    let status = Command::new("sync")
        .arg("-f")
        .arg(dir)
        .status()
        .map_err(HarnessError::io("start", "sync"))?;
    if status.success() {
        Ok(())
    } else {
        Err(HarnessError::Exited {
            command: format!("sync -f {}", dir.display()),
            status,
        })
    }
}

/// Writes `bytes` (in 8 MiB pieces of `fill`) into the scratch file `path` and deletes it,
/// untimed, right before a timed write (see [`WRITE_METHOD`]).
///
/// This VM's balloon reports memory that stayed free for a few seconds to its host (virtio-balloon
/// free page reporting); the next touch of a reported page costs a fault in the host. Measured
/// here (600 MiB plain writes, 4 protocols interleaved, 3 writes each, a 6 s pause before each
/// group): writes that met reported pages ran at 330-750 MiB/s, the others at ~4,000 MiB/s, and
/// which write met them followed from the page cache's history, not the writer. Deleting a
/// just-written file returns its page-cache pages, host-backed, to the guest's free lists, where
/// the next writer takes them: 11 of 12 timed writes after this step ran at 3,650-4,040 MiB/s.
/// Touching and freeing anonymous memory instead did not help (5 of 12). The scratch file is
/// deleted before writeback, so it leaves no dirty data behind.
pub(crate) fn warm_pages(path: &Path, bytes: usize, fill: &[u8]) -> Result<()> {
    let mut f = File::create(path).map_err(HarnessError::io("create", path))?;
    let mut left = bytes;
    while left > 0 {
        let n = left.min(fill.len());
        f.write_all(&fill[..n])
            .map_err(HarnessError::io("write", path))?;
        left -= n;
    }
    drop(f);
    std::fs::remove_file(path).map_err(HarnessError::io("remove", path))
}

/// Runs `write` into fresh directories `work/stem-w<k>` (flushed, then pages warmed before each:
/// [`warm_pages`] of `warm_bytes`, see [`WRITE_METHOD`]) up to [`WRITE_REPEATS`] times within
/// [`WRITE_BUDGET_S`]; keeps the last result (earlier directories are removed) and returns it,
/// its directory and every write's seconds.
fn timed_writes<T>(
    work: &Path,
    stem: &str,
    warm_bytes: usize,
    mut write: impl FnMut(&Path) -> Result<(T, f64)>,
) -> Result<(T, PathBuf, Vec<f64>)> {
    let fill = vec![0x5au8; 8 << 20];
    let mut times = Vec::new();
    let mut last: Option<(T, PathBuf)> = None;
    while times.len() < WRITE_REPEATS && times.iter().sum::<f64>() < WRITE_BUDGET_S {
        let dir = work.join(format!("{stem}-w{}", times.len()));
        let _ = std::fs::remove_dir_all(&dir);
        // The previous write's directory goes before the flush, so the journal commit that
        // frees (and discards) its blocks is done before the next timer starts.
        if let Some((_, old)) = last.take() {
            let _ = std::fs::remove_dir_all(old);
        }
        flush(work)?;
        warm_pages(&work.join(format!("{stem}.warm")), warm_bytes, &fill)?;
        let (out, secs) = write(&dir)?;
        times.push(secs);
        last = Some((out, dir));
    }
    let (out, dir) = last.ok_or_else(|| HarnessError::other("no write ran"))?;
    Ok((out, dir, times))
}

/// Reads one byte of every page of the source, so the timed writes find it in memory.
pub(crate) fn touch(source: &Source<'_>) {
    let bytes = source.payload();
    let sum = bytes
        .iter()
        .step_by(4096)
        .fold(0u64, |a, &b| a + u64::from(b));
    std::hint::black_box(sum);
}

/// The write limit: one plain sequential file write of the source's logical bytes into `dir`.
pub(crate) fn plain_write(source: &Source<'_>, dir: &Path) -> Result<((), f64)> {
    std::fs::create_dir_all(dir).map_err(HarnessError::io("create", dir))?;
    let path = dir.join("limit.bin");
    let t = Instant::now();
    let mut f = File::create(&path).map_err(HarnessError::io("create", &path))?;
    for chunk in source.payload().chunks(8 << 20) {
        f.write_all(chunk)
            .map_err(HarnessError::io("write", &path))?;
    }
    drop(f);
    Ok(((), t.elapsed().as_secs_f64()))
}

/// Sets a cell's figures from the seconds of its timed batches of [`BATCH`] records (`total`
/// their sum; `gather_bytes` counted as they came) and marks it ok, verified when it compared
/// a batch.
pub fn timed(r: &mut CellResult, times: Vec<f64>, total: f64) {
    r.gather_s = total;
    r.gather_batches = times.len() as u64;
    r.gather_records = times.len() as u64 * BATCH as u64;
    r.gather_mib_s = r.gather_bytes as f64 / (1 << 20) as f64 / total;
    r.krecords_s = r.gather_records as f64 / total / 1e3;
    r.p50_ms = percentile(&times, 0.5) * 1e3;
    r.p95_ms = percentile(&times, 0.95) * 1e3;
    r.verified = Some(r.verified_batches > 0);
    r.status = Status::Ok;
}

/// The competitor `backend` for `source`, with `r`'s records and logical bytes set; `None`, and
/// row `row` not applicable, when it has no layout for the source's records.
pub fn competitor(
    backend: &str,
    row: &str,
    source: &Source<'_>,
    r: &mut CellResult,
) -> Result<Option<Box<dyn competitors::Competitor>>> {
    let c = backend.parse::<competitors::Backend>()?.competitor();
    if !c.supports(source.geometry()) {
        r.status = Status::NotApplicable;
        r.note = Some(format!("{row} has no {} layout", source.geometry().name()));
        return Ok(None);
    }
    r.records = source.len();
    r.logical_bytes = source.payload_bytes();
    Ok(Some(c))
}

fn run(args: &StoreCellArgs, r: &mut CellResult) -> Result<()> {
    let loaded = Loaded::open(args.table, &args.corpus)?;
    let source = loaded.source();
    source.validate().map_err(HarnessError::InvalidSource)?;
    let Some(mut backend) = competitor(&args.backend, &args.backend, &source, r)? else {
        return Ok(());
    };
    let n = source.len();
    match Loaded::open_held_out(args.table, &args.corpus)? {
        Some(held) => backend.prepare_held_out(&source, &held.source()),
        None => backend.prepare(&source),
    }
    .map_err(HarnessError::backend(&args.backend, "prepare"))?;
    touch(&source);
    let stem = format!("{}-{}", args.table, args.backend);
    let logical = usize::try_from(r.logical_bytes).map_err(|_| HarnessError::Size {
        what: "logical bytes",
        value: r.logical_bytes,
    })?;
    let warm = logical + logical / 4;
    let (stored, _, times) = timed_writes(&args.work, &stem, warm, |dir| {
        let t = Instant::now();
        let stored = backend
            .write(&source, dir)
            .map_err(HarnessError::backend(&args.backend, "write"))?;
        let wall = t.elapsed().as_secs_f64();
        let secs = stored.write_seconds.unwrap_or(wall);
        Ok((stored, secs))
    })?;
    let dir = stored.dir.clone();
    let write_s = median(&times);
    r.write_s = Some(write_s);
    r.write_mib_s = Some(r.logical_bytes as f64 / (1 << 20) as f64 / write_s);
    r.write_repeats_s = times;
    {
        // Every cell times the limit beside its own writes, so `write x limit` is a ratio taken
        // side by side even when the machine's load drifts between cells.
        let stem = format!("{}-write-limit", args.table);
        let (_, last, limit) = timed_writes(&args.work, &stem, warm, |d| plain_write(&source, d))?;
        let _ = std::fs::remove_dir_all(last);
        r.write_limit_mib_s = Some(r.logical_bytes as f64 / (1 << 20) as f64 / median(&limit));
    }
    let disk_bytes = stored
        .disk_bytes()
        .map_err(HarnessError::backend(&args.backend, "disk bytes"))?;
    r.disk_bytes = Some(disk_bytes);
    r.compression = Some(if disk_bytes == 0 {
        0.0
    } else {
        r.logical_bytes as f64 / disk_bytes as f64
    });
    let mut reader = backend
        .open(&stored)
        .map_err(HarnessError::backend(&args.backend, "open"))?;
    if reader.len() != n {
        return Err(HarnessError::Count {
            what: "records in the store",
            expected: n.to_string(),
            found: reader.len(),
        });
    }
    let mut rng = SmallRng::seed_from_u64(args.seed);
    // The test-only switch (`corrupt::ENV`): one received batch gets a flipped byte.
    let mut counter = corrupt::Counter::from_env();
    // One batch of random records: gathered (timed), then compared with the source as `what`;
    // its draws, seconds and payload bytes.
    let mut batch = |what: String| -> Result<(Vec<u64>, f64, u64)> {
        let idx: Vec<u64> = (0..BATCH).map(|_| rng.random_range(0..n)).collect();
        let t = Instant::now();
        let got = reader
            .gather(&idx)
            .map_err(HarnessError::backend(&args.backend, "gather"))?;
        let elapsed = t.elapsed().as_secs_f64();
        let dt = reader.last_gather_seconds().unwrap_or(elapsed);
        let bytes = got.payload_bytes() as u64;
        let got = counter.pass(got);
        source
            .check(&idx, &got)
            .map_err(HarnessError::differs(what))?;
        Ok((idx, dt, bytes))
    };

    // Probe: tables where a backend may be impractically slow time one batch first.
    if let Some(limit) = args.probe_seconds {
        let (_, dt, _) = batch("the probe batch".into())?;
        if dt > limit {
            r.status = Status::Excluded;
            r.note = Some(format!(
                "one {BATCH}-record batch took {dt:.2} s (> {limit} s): excluded from this table, as the reference does"
            ));
            r.p95_ms = dt * 1e3;
            r.verified = Some(true);
            r.verified_batches = 1;
            let _ = std::fs::remove_dir_all(&dir);
            return Ok(());
        }
    }

    // Verify before timing.
    for k in 0..args.verify_batches {
        batch(format!("verification batch {k}"))?;
        r.verified_batches += 1;
    }
    // The limit beside the gathers (`LIMIT_METHOD`): the same records copied from memory, in
    // rounds alternating with this backend's.
    let mut limit = if backend.backend() == competitors::Backend::MemcpyLimit {
        None
    } else {
        Some(LimitRounds::new(
            &source,
            &args.work.join(format!("{stem}-limit")),
        )?)
    };
    // Timed gathers, each checked after its timer stopped.
    let mut times = Vec::new();
    let mut total = 0.0;
    while total < args.min_seconds || times.len() < 5 {
        let (idx, dt, bytes) = batch(format!("timed batch {}", times.len() + 1))?;
        total += dt;
        times.push(dt);
        r.gather_bytes += bytes;
        r.verified_batches += 1;
        if let Some(l) = limit.as_mut() {
            l.gathered(idx, dt)?;
        }
        if times.len() > 2_000_000 {
            break;
        }
    }
    if let Some(l) = limit {
        r.limit_gather_s = Some(l.finish()?);
    }
    timed(r, times, total);
    drop(reader);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_store_tables_limit_backend_is_the_limit_row() {
        // The gate and the report find a store table's limit row by `LIMIT_ROW`.
        assert_eq!(competitors::Backend::MemcpyLimit.name(), LIMIT_ROW);
    }

    #[test]
    fn timed_writes_keep_only_the_last_directory_within_the_budget() {
        let work = tempfile::tempdir().expect("tempdir");
        let mut runs = 0;
        let (n, last, times) = timed_writes(work.path(), "t", 1 << 20, |d| {
            runs += 1;
            std::fs::create_dir_all(d).map_err(HarnessError::io("create", d))?;
            std::fs::write(d.join("f"), [runs as u8]).map_err(HarnessError::io("write", d))?;
            Ok((runs, 0.001))
        })
        .expect("writes");
        assert_eq!(
            (n, times.len(), runs),
            (WRITE_REPEATS, WRITE_REPEATS, WRITE_REPEATS)
        );
        assert_eq!(
            std::fs::read(last.join("f")).expect("last"),
            [WRITE_REPEATS as u8]
        );
        let left: Vec<_> = std::fs::read_dir(work.path()).expect("ls").collect();
        assert_eq!(
            left.len(),
            1,
            "earlier write directories and the warm-up scratch file are removed"
        );
        // The budget stops further writes.
        let (_, _, times) = timed_writes(work.path(), "slow", 0, |d| {
            std::fs::create_dir_all(d).map_err(HarnessError::io("create", d))?;
            Ok(((), WRITE_BUDGET_S + 1.0))
        })
        .expect("writes");
        assert_eq!(times.len(), 1);
    }

    #[test]
    fn plain_write_writes_the_payload() {
        let work = tempfile::tempdir().expect("tempdir");
        let values: Vec<u8> = (0..=255u8).cycle().take(10_000).collect();
        let offsets = [2i64, 4000, 9000];
        let shapes = [3998u64, 5000];
        let src = Source::Ragged(competitors::RaggedSource {
            dtype: zrecord::DType::UInt8,
            ndim: 1,
            values: &values,
            offsets: &offsets,
            shapes: &shapes,
        });
        plain_write(&src, work.path()).expect("write");
        let got = std::fs::read(work.path().join("limit.bin")).expect("read");
        assert_eq!(got, &values[2..9000]);
    }
}
