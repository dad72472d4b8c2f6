//! One (store table, backend) cell, run in its own process (the hidden `cell` subcommand): write
//! (timed), open, verify 100 random batches, then timed IID gathers until the time budget is
//! spent, each checked after its timer. Owns the cell's command line ([`CellArgs`]) and fills a
//! [`CellResult`].

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use crate::corpus::Loaded;
use crate::model::{CellResult, Status};
use crate::table::Table;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

pub const BATCH: usize = 256;

/// A store cell's command line (the hidden `cell` subcommand).
#[derive(Clone, Debug)]
pub struct CellArgs {
    pub table: Table,
    pub backend: String,
    pub corpus: PathBuf,
    pub work: PathBuf,
    pub out: PathBuf,
    pub min_seconds: f64,
    pub verify_batches: u64,
    pub seed: u64,
    pub probe_seconds: Option<f64>,
}

impl CellArgs {
    pub fn to_args(&self) -> Vec<String> {
        let mut v = vec![
            "cell".into(),
            self.table.name().to_string(),
            self.backend.clone(),
            self.corpus.display().to_string(),
            self.work.display().to_string(),
            self.out.display().to_string(),
            self.min_seconds.to_string(),
            self.verify_batches.to_string(),
            self.seed.to_string(),
        ];
        if let Some(p) = self.probe_seconds {
            v.push(p.to_string());
        }
        v
    }

    fn parse(a: &[String]) -> Result<CellArgs, String> {
        if a.len() < 8 {
            return Err("cell: internal subcommand; expects table backend corpus work out min_seconds verify seed [probe]".into());
        }
        let num = |s: &str| {
            s.parse::<f64>()
                .map_err(|_| format!("cell: bad number {s:?}"))
        };
        let table =
            Table::from_name(&a[0]).ok_or_else(|| format!("cell: no source for table {}", a[0]))?;
        Ok(CellArgs {
            table,
            backend: a[1].clone(),
            corpus: a[2].clone().into(),
            work: a[3].clone().into(),
            out: a[4].clone().into(),
            min_seconds: num(&a[5])?,
            verify_batches: num(&a[6])? as u64,
            seed: num(&a[7])? as u64,
            probe_seconds: a.get(8).map(|s| num(s)).transpose()?,
        })
    }
}

pub fn main(a: &[String]) -> Result<ExitCode, String> {
    let args = CellArgs::parse(a)?;
    let mut r = CellResult::new(args.table, &args.backend, Status::Failed);
    let outcome = run(&args, &mut r);
    if let Err(e) = outcome {
        r.status = Status::Failed;
        r.verified = false;
        r.note = Some(e);
    }
    let json = serde_json::to_vec_pretty(&r).map_err(|e| e.to_string())?;
    std::fs::write(&args.out, json).map_err(|e| format!("write {}: {e}", args.out.display()))?;
    Ok(if r.status == Status::Failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let k = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[k.min(sorted.len() - 1)]
}

fn run(args: &CellArgs, r: &mut CellResult) -> Result<(), String> {
    let loaded = Loaded::open(args.table, &args.corpus)?;
    let source = loaded.source();
    source
        .validate()
        .map_err(|e| format!("source invalid: {e}"))?;
    let mut backend = competitors::backend(&args.backend)
        .ok_or_else(|| format!("unknown backend {}", args.backend))?;
    if !backend.supports(source.geometry()) {
        r.status = Status::NotApplicable;
        r.note = Some(format!(
            "{} has no {} layout",
            args.backend,
            source.geometry().name()
        ));
        return Ok(());
    }
    let n = source.len();
    r.records = n;
    r.logical_bytes = source.payload_bytes();
    backend
        .prepare(&source)
        .map_err(|e| format!("prepare: {e}"))?;
    let dir = args.work.join(format!("{}-{}", args.table, args.backend));
    let _ = std::fs::remove_dir_all(&dir);
    let t = Instant::now();
    let stored = backend
        .write(&source, &dir)
        .map_err(|e| format!("write: {e}"))?;
    let wall = t.elapsed().as_secs_f64();
    r.write_s = stored.write_seconds.unwrap_or(wall);
    r.write_mib_s = r.logical_bytes as f64 / (1 << 20) as f64 / r.write_s;
    r.disk_bytes = stored
        .disk_bytes()
        .map_err(|e| format!("disk bytes: {e}"))?;
    r.compression = if r.disk_bytes == 0 {
        0.0
    } else {
        r.logical_bytes as f64 / r.disk_bytes as f64
    };
    let mut reader = backend.open(&stored).map_err(|e| format!("open: {e}"))?;
    if reader.len() != n {
        return Err(format!(
            "store reports {} records, source has {n}",
            reader.len()
        ));
    }
    let mut rng = SmallRng::seed_from_u64(args.seed);
    let draw =
        |rng: &mut SmallRng| -> Vec<u64> { (0..BATCH).map(|_| rng.random_range(0..n)).collect() };

    // Probe: tables where a backend may be impractically slow time one batch first.
    if let Some(limit) = args.probe_seconds {
        let idx = draw(&mut rng);
        let t = Instant::now();
        let b = reader.gather(&idx).map_err(|e| format!("gather: {e}"))?;
        let dt = reader
            .last_gather_seconds()
            .unwrap_or(t.elapsed().as_secs_f64());
        competitors::verify(
            &b,
            &source.gather_reference(&idx).map_err(|e| e.to_string())?,
        )
        .map_err(|e| format!("verification failed on the probe batch: {e}"))?;
        if dt > limit {
            r.status = Status::Excluded;
            r.note = Some(format!(
                "one {BATCH}-record batch took {dt:.2} s (> {limit} s): excluded from this table, as the reference does"
            ));
            r.p95_ms = dt * 1e3;
            r.verified = true;
            r.verified_batches = 1;
            let _ = std::fs::remove_dir_all(&dir);
            return Ok(());
        }
    }

    // Verify before timing.
    for k in 0..args.verify_batches {
        let idx = draw(&mut rng);
        let got = reader.gather(&idx).map_err(|e| format!("gather: {e}"))?;
        let want = source.gather_reference(&idx).map_err(|e| e.to_string())?;
        competitors::verify(&got, &want)
            .map_err(|e| format!("verification batch {k} differs from the source: {e}"))?;
        r.verified_batches += 1;
    }
    // Timed gathers, each checked after its timer stopped.
    let mut times = Vec::new();
    let mut total = 0.0;
    while total < args.min_seconds || times.len() < 5 {
        let idx = draw(&mut rng);
        let t = Instant::now();
        let got = reader.gather(&idx).map_err(|e| format!("gather: {e}"))?;
        let elapsed = t.elapsed().as_secs_f64();
        let dt = reader.last_gather_seconds().unwrap_or(elapsed);
        total += dt;
        times.push(dt);
        r.gather_bytes += got.payload_bytes() as u64;
        let want = source.gather_reference(&idx).map_err(|e| e.to_string())?;
        competitors::verify(&got, &want)
            .map_err(|e| format!("timed batch {} differs from the source: {e}", times.len()))?;
        r.verified_batches += 1;
        drop(got);
        if times.len() > 2_000_000 {
            break;
        }
    }
    r.gather_s = total;
    r.gather_batches = times.len() as u64;
    r.gather_records = times.len() as u64 * BATCH as u64;
    r.gather_mib_s = r.gather_bytes as f64 / (1 << 20) as f64 / total;
    r.krecords_s = r.gather_records as f64 / total / 1e3;
    times.sort_by(f64::total_cmp);
    r.p50_ms = percentile(&times, 0.5) * 1e3;
    r.p95_ms = percentile(&times, 0.95) * 1e3;
    r.verified = true;
    r.status = Status::Ok;
    drop(reader);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
