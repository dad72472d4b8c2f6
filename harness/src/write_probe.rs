//! `harness write-probe`: the store tables' write column, measured in one process with the arms
//! interleaved (hidden subcommand; method notes in `docs/performance.md`).
//!
//! Every round writes each arm once, in a rotated order, under the cell protocol
//! ([`store_cell::WRITE_METHOD`]: flush, warm pages, then the timed write into a fresh directory)
//! and prints, per write, its MiB/s, the ratio to the round's `write-limit` arm (one plain
//! sequential write of the same bytes) and the process's page faults and context switches during
//! the write (`getrusage`, all threads). The written store of every write is read back and
//! compared with the source after its timer, so a fast wrong writer cannot pass.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use competitors::Source;

use crate::corpus::Loaded;
use crate::stats::median;
use crate::store_cell::{self, BATCH};
use crate::table::Table;

const USAGE: &str =
    "write-probe TABLE CORPUS WORK ROUNDS ARM[,ARM...] (arm: a store backend, or write-limit)";

/// Page faults and context switches of this process so far (all threads).
#[derive(Clone, Copy, Debug, Default)]
struct Usage {
    minflt: i64,
    majflt: i64,
    nvcsw: i64,
    nivcsw: i64,
}

fn usage() -> Usage {
    // SAFETY: `getrusage` writes one `rusage` into the zeroed struct we own; RUSAGE_SELF is valid.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    Usage {
        minflt: ru.ru_minflt,
        majflt: ru.ru_majflt,
        nvcsw: ru.ru_nvcsw,
        nivcsw: ru.ru_nivcsw,
    }
}

/// One write's figures.
struct Write {
    mib_s: f64,
    faults: i64,
    major: i64,
    switches: i64,
}

pub fn main(a: &[String]) -> Result<ExitCode, String> {
    let [table, corpus, work, rounds, arms] = a else {
        return Err(USAGE.into());
    };
    let table = Table::from_name(table).ok_or_else(|| format!("no table {table}"))?;
    let rounds: usize = rounds.parse().map_err(|_| USAGE.to_string())?;
    let arms: Vec<&str> = arms.split(',').collect();
    let work = PathBuf::from(work);
    std::fs::create_dir_all(&work).map_err(|e| format!("create {}: {e}", work.display()))?;
    let loaded = Loaded::open(table, Path::new(corpus))?;
    let source = loaded.source();
    source
        .validate()
        .map_err(|e| format!("source invalid: {e}"))?;
    let logical = source.payload_bytes();
    let warm = usize::try_from(logical + logical / 4).map_err(|e| format!("size: {e}"))?;
    let mut backends = Vec::new();
    for &arm in &arms {
        if arm == "write-limit" {
            backends.push(None);
            continue;
        }
        let mut b = competitors::backend(arm).ok_or_else(|| format!("unknown arm {arm}"))?;
        if !b.supports(source.geometry()) {
            return Err(format!("{arm} has no {} layout", source.geometry().name()));
        }
        match Loaded::open_held_out(table, Path::new(corpus))? {
            Some(held) => b.prepare_held_out(&source, &held.source()),
            None => b.prepare(&source),
        }
        .map_err(|e| format!("{arm}: prepare: {e}"))?;
        backends.push(Some(b));
    }
    store_cell::touch(&source);
    let mib = logical as f64 / (1 << 20) as f64;
    println!(
        "write-probe {} ({} records, {mib:.0} MiB logical), {rounds} rounds",
        table.name(),
        source.len()
    );
    let fill = vec![0x5au8; 8 << 20];
    let mut results: Vec<Vec<Write>> = arms.iter().map(|_| Vec::new()).collect();
    for round in 0..rounds {
        for k in 0..arms.len() {
            let i = (k + round) % arms.len();
            let dir = work.join(format!("write-probe-{}", arms[i]));
            let _ = std::fs::remove_dir_all(&dir);
            store_cell::flush(&work)?;
            store_cell::warm_pages(&work.join("write-probe.warm"), warm, &fill)?;
            let u0 = usage();
            let t = Instant::now();
            match backends[i].as_mut() {
                Some(b) => {
                    b.write(&source, &dir)
                        .map_err(|e| format!("{}: write: {e}", arms[i]))?;
                }
                None => {
                    store_cell::plain_write(&source, &dir)?;
                }
            }
            let secs = t.elapsed().as_secs_f64();
            let u1 = usage();
            if let Some(b) = backends[i].as_ref() {
                check_store(b.as_ref(), &source, &dir, round as u64)
                    .map_err(|e| format!("{}: {e}", arms[i]))?;
            }
            let w = Write {
                mib_s: mib / secs,
                faults: u1.minflt - u0.minflt,
                major: u1.majflt - u0.majflt,
                switches: (u1.nvcsw - u0.nvcsw) + (u1.nivcsw - u0.nivcsw),
            };
            println!(
                "round {round} {:<16} {:>7.0} MiB/s  minflt {:>8}  majflt {:>4}  ctxsw {:>6}",
                arms[i], w.mib_s, w.faults, w.major, w.switches
            );
            results[i].push(w);
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
    let limit = arms.iter().position(|&a| a == "write-limit");
    println!("arm               median MiB/s   median x write-limit (per round)   median minflt");
    for (i, arm) in arms.iter().enumerate() {
        let speed: Vec<f64> = results[i].iter().map(|w| w.mib_s).collect();
        let ratio = limit.map(|l| {
            let r: Vec<f64> = results[i]
                .iter()
                .zip(&results[l])
                .map(|(w, lim)| w.mib_s / lim.mib_s)
                .collect();
            median(&r)
        });
        let faults: Vec<f64> = results[i].iter().map(|w| w.faults as f64).collect();
        println!(
            "{arm:<16} {:>14.0}   {:>32}   {:>13.0}",
            median(&speed),
            ratio.map_or("-".into(), |r| format!("{r:.2}")),
            median(&faults)
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Opens the store just written and compares one random batch with the source.
fn check_store(
    b: &dyn competitors::Competitor,
    source: &Source<'_>,
    dir: &Path,
    seed: u64,
) -> Result<(), String> {
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};
    let stored = competitors::Stored {
        backend: b.name(),
        dir: dir.to_path_buf(),
        geometry: source.geometry(),
        len: source.len(),
        write_seconds: None,
    };
    let mut reader = b.open(&stored).map_err(|e| format!("open: {e}"))?;
    let mut rng = SmallRng::seed_from_u64(seed);
    let n = source.len();
    let idx: Vec<u64> = (0..BATCH.min(n as usize))
        .map(|_| rng.random_range(0..n))
        .collect();
    let got = reader
        .gather(&idx)
        .map_err(|e| format!("gather after write: {e}"))?;
    let want = source.gather_reference(&idx).map_err(|e| e.to_string())?;
    competitors::verify(&got, &want)
        .map_err(|e| format!("written store differs from the source: {e}"))
}
