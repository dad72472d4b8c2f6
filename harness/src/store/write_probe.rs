//! `harness write-probe`: the store tables' write column, measured in one process with the arms
//! interleaved (hidden subcommand; method notes in `docs/benchmarks.md`, "Probes and cells").
//!
//! Every round writes each arm once, in a rotated order, under the cell protocol
//! ([`store::WRITE_METHOD`]: flush, warm pages, then the timed write into a fresh directory)
//! and prints, per write, its MiB/s, the ratio to the round's `write-limit` arm (one plain
//! sequential write of the same bytes) and the process's page faults and context switches during
//! the write (`getrusage`, all threads). The written store of every write is read back and
//! compared with the source after its timer, so a fast wrong writer cannot pass.

use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use benchkit::probe::Usage;
use benchkit::rng::uniform_batch;
use benchkit::stats::median;
use competitors::Source;

use super::BATCH;
use crate::cell_args::WriteProbeArgs;
use crate::corpus::Loaded;
use crate::error::{HarnessError, Result};

struct Write {
    mib_s: f64,
    faults: i64,
    major: i64,
    switches: i64,
}

pub fn main(args: &WriteProbeArgs) -> Result<ExitCode> {
    let (table, rounds, corpus) = (args.table, args.rounds, &args.corpus);
    let arms: Vec<&str> = args.arms.iter().map(String::as_str).collect();
    let work = args.work.clone();
    std::fs::create_dir_all(&work).map_err(HarnessError::io("create", &work))?;
    let loaded = Loaded::open(table, Path::new(corpus))?;
    let source = loaded.source();
    source.validate().map_err(HarnessError::InvalidSource)?;
    let logical = source.payload_bytes();
    let warm = usize::try_from(logical + logical / 4).map_err(|_| HarnessError::Size {
        what: "warm-up bytes",
        value: logical + logical / 4,
    })?;
    let mut backends = Vec::new();
    for &arm in &arms {
        if arm == "write-limit" {
            backends.push(None);
            continue;
        }
        let mut b = arm
            .parse::<competitors::Backend>()
            .map_err(|e| HarnessError::Unknown {
                what: "arm",
                name: e.name,
            })?
            .competitor();
        if !b.supports(source.geometry()) {
            return Err(HarnessError::NoLayout {
                backend: arm.to_string(),
                layout: source.geometry().name().to_string(),
            });
        }
        match Loaded::open_held_out(table, Path::new(corpus))? {
            Some(held) => b.prepare_held_out(&source, &held.source()),
            None => b.prepare(&source),
        }
        .map_err(HarnessError::backend(arm, "prepare"))?;
        backends.push(Some(b));
    }
    super::touch(&source);
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
            super::flush(&work)?;
            super::warm_pages(&work.join("write-probe.warm"), warm, &fill)?;
            let u0 = Usage::now();
            let t = Instant::now();
            match backends[i].as_mut() {
                Some(b) => {
                    b.write(&source, &dir)
                        .map_err(HarnessError::backend(arms[i], "write"))?;
                }
                None => {
                    super::plain_write(&source, &dir)?;
                }
            }
            let secs = t.elapsed().as_secs_f64();
            let used = Usage::now().since(u0);
            if let Some(b) = backends[i].as_ref() {
                check_store(b.as_ref(), &source, &dir, round as u64)?;
            }
            let w = Write {
                mib_s: mib / secs,
                faults: used.minor_faults,
                major: used.major_faults,
                switches: used.switches(),
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
) -> Result<()> {
    use rand::SeedableRng;
    use rand::rngs::SmallRng;
    let stored = competitors::Stored::new(b.backend(), dir, source);
    let mut reader = b
        .open(&stored)
        .map_err(HarnessError::backend(b.name(), "open"))?;
    let mut rng = SmallRng::seed_from_u64(seed);
    let n = source.len();
    let idx = uniform_batch(&mut rng, n, BATCH.min(n as usize));
    let got = reader
        .gather(&idx)
        .map_err(HarnessError::backend(b.name(), "gather after write"))?;
    source
        .check(&idx, &got)
        .map_err(HarnessError::differs(format!(
            "the batch read back from the {} store just written",
            b.name()
        )))
}
