//! Table 6: end-to-end loaders over dense vision and ragged tokens. Each row runs in a fresh process
//! (the hidden `loader-cell` subcommand, or `harness/python/loader_bench.py`) while this process
//! samples the row's process-tree PSS (peak RAM). Owns the loader arms, their cells and the two
//! loader tables.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use loaderx::{IndexSampler, Loader, LoaderOptions, Mode, PooledAllocator, Sampler, StreamView};
use serde_json::{Value, json};
use zrecord::{
    Allocator, Codec, DenseStore, DenseWriter, RaggedStore, RaggedWriter, WriterOptions,
};

use crate::config::{self, RunArgs};
use crate::corpus::{Corpora, Loaded};
use crate::model::FreeTable;
use crate::progress::progress;
use crate::stats::median;
use crate::table::{Corpus, Layout, Table};

const BATCH: usize = 256;

/// Per arm: name, seconds per batch per repeat, peak PSS per repeat, verified, note.
type ArmRow = (String, Vec<f64>, Vec<u64>, bool, Option<String>);
const WARMUP: usize = 10;

/// Process-tree PSS in bytes (the process and all its descendants).
pub fn tree_pss(root: u32) -> u64 {
    let mut children: Vec<(u32, u32)> = Vec::new();
    if let Ok(rd) = std::fs::read_dir("/proc") {
        for e in rd.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            if let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                && let Some(rest) = stat.rsplit(')').next()
                && let Some(ppid) = rest
                    .split_whitespace()
                    .nth(1)
                    .and_then(|s| s.parse::<u32>().ok())
            {
                children.push((pid, ppid));
            }
        }
    }
    let mut tree = vec![root];
    let mut k = 0;
    while k < tree.len() {
        let p = tree[k];
        tree.extend(children.iter().filter(|c| c.1 == p).map(|c| c.0));
        k += 1;
    }
    tree.iter()
        .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/smaps_rollup")).ok())
        .filter_map(|s| {
            s.lines()
                .find(|l| l.starts_with("Pss:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .sum::<u64>()
        * 1024
}

/// This process's peak resident set (`VmHWM`), a floor for runs too short for the PSS sampler.
fn own_peak_rss() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .unwrap_or(0)
        * 1024
}

/// Runs a command, sampling its tree PSS every 20 ms when `sample` is set; returns (stdout, peak
/// PSS bytes, 0 when not sampled).
fn run_cell(mut cmd: Command, sample: bool) -> Result<(String, u64), String> {
    let child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    let pid = child.id();
    let peak = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (peak, stop) = (peak.clone(), stop.clone());
        std::thread::spawn(move || {
            while sample && !stop.load(Ordering::Relaxed) {
                peak.fetch_max(tree_pss(pid), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    stop.store(true, Ordering::Relaxed);
    let _ = sampler.join();
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(err
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("failed")
            .to_string());
    }
    Ok((
        String::from_utf8_lossy(&out.stdout).to_string(),
        peak.load(Ordering::Relaxed),
    ))
}

/// Writes the zrecord raw store the loader rows read (untimed, once per corpus).
fn ensure_store(table: Table, corpus: &Path, work: &Path) -> Result<PathBuf, String> {
    let path = work.join(format!(
        "loader-{table}-{}.zr",
        corpus.file_name().and_then(|s| s.to_str()).unwrap_or("c")
    ));
    if path.exists() {
        return Ok(path);
    }
    let loaded = Loaded::open(table, corpus)?;
    match loaded.source() {
        competitors::Source::Dense(d) => {
            let mut w = DenseWriter::create(
                &path,
                d.dtype,
                &d.item_shape,
                Codec::Raw,
                WriterOptions::default(),
            )
            .map_err(|e| e.to_string())?;
            w.append(d.data).map_err(|e| e.to_string())?;
            w.close().map_err(|e| e.to_string())?;
        }
        competitors::Source::Ragged(r) => {
            let base = r.offsets[0];
            let cu: Vec<i32> = r.offsets.iter().map(|&o| (o - base) as i32).collect();
            let isz = r.dtype.itemsize();
            let values =
                &r.values[base as usize * isz..*r.offsets.last().unwrap_or(&0) as usize * isz];
            let mut w = RaggedWriter::create(
                &path,
                r.dtype,
                r.ndim as u32,
                Codec::Raw,
                WriterOptions::default(),
            )
            .map_err(|e| e.to_string())?;
            w.append(values, &cu, r.shapes).map_err(|e| e.to_string())?;
            w.close().map_err(|e| e.to_string())?;
        }
    }
    Ok(path)
}

fn batch_bytes(b: &loaderx::Batch) -> &[u8] {
    match b {
        loaderx::Batch::Dense(d) => d.bytes(),
        loaderx::Batch::Ragged(r) => r.values(),
    }
}

fn fingerprint<'a>(parts: impl IntoIterator<Item = &'a [u8]>) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for bytes in parts {
        h = (h ^ u64::from(crc32c_bytes(bytes))).wrapping_mul(0x100_0000_01b3);
    }
    h
}

fn shards_fingerprint(shards: &[loaderx::Shard]) -> u64 {
    fingerprint(
        shards
            .iter()
            .flat_map(|s| s.iter().map(|(_, b)| batch_bytes(b))),
    )
}

fn crc32c_bytes(b: &[u8]) -> u32 {
    // FNV over a strided sample plus the length: cheap and enough to tell batches apart.
    let mut h: u32 = 0x811c_9dc5 ^ b.len() as u32;
    for x in b.iter().step_by(61) {
        h = (h ^ u32::from(*x)).wrapping_mul(0x0100_0193);
    }
    h
}

/// `loader-cell KIND STORE ARM BATCHES` → prints one JSON line.
pub fn cell_main(a: &[String]) -> Result<ExitCode, String> {
    let [kind, store, arm, batches] = a else {
        return Err("loader-cell KIND STORE ARM BATCHES".into());
    };
    let layout = Table::from_name(kind)
        .and_then(Table::layout)
        .ok_or_else(|| format!("loader-cell: unknown kind {kind}"))?;
    let batches: usize = batches.parse().map_err(|_| "bad batch count")?;
    let alloc: Arc<dyn Allocator> = Arc::new(PooledAllocator::new(loaderx::DEFAULT_POOL_SIZE));
    let (view, n) = if layout == Layout::Dense {
        let s = DenseStore::open(store).map_err(|e| e.to_string())?;
        let v = s.bind(alloc.clone());
        (StreamView::Dense(v), s.len())
    } else {
        let s = RaggedStore::open(store).map_err(|e| e.to_string())?;
        let v = s.bind(alloc.clone());
        (StreamView::Ragged(v), s.len())
    };
    let sampler = || {
        IndexSampler::new(n, BATCH, Mode::Iid, 7)
            .map(|s| Box::new(s) as Box<dyn Sampler>)
            .map_err(|e| e.to_string())
    };
    // Expected fingerprints of the first steps, straight from the view.
    let mut reference = sampler()?;
    let mut expected = HashSet::new();
    for _ in 0..16 {
        let idx = reference.next().map_err(|e| e.to_string())?.to_vec();
        let b = view.gather(&idx).map_err(|e| e.to_string())?;
        expected.insert(fingerprint([batch_bytes(&b)]));
    }
    let (per_batch, verified) = match arm.as_str() {
        "bare-gather" => {
            let mut s = sampler()?;
            let mut ok = true;
            for k in 0..WARMUP {
                let idx = s.next().map_err(|e| e.to_string())?.to_vec();
                let b = view.gather(&idx).map_err(|e| e.to_string())?;
                if k < 8 {
                    ok &= expected.contains(&fingerprint([batch_bytes(&b)]));
                }
            }
            let t = Instant::now();
            for _ in 0..batches {
                let idx = s.next().map_err(|e| e.to_string())?.to_vec();
                std::hint::black_box(view.gather(&idx).map_err(|e| e.to_string())?);
            }
            (t.elapsed().as_secs_f64() / batches as f64, ok)
        }
        w => {
            let workers: usize = w
                .trim_start_matches("loaderx-w")
                .parse()
                .map_err(|_| format!("bad arm {w}"))?;
            let opts = LoaderOptions::new(workers, 4);
            let mut loader = Loader::new(vec![("data", vec![view.clone()])], sampler()?, opts)
                .map_err(|e| e.to_string())?;
            let mut ok = true;
            for k in 0..WARMUP {
                let shards = loader
                    .next()
                    .ok_or("loader ended")?
                    .map_err(|e| e.to_string())?;
                if k < 8 {
                    ok &= expected.contains(&shards_fingerprint(&shards));
                }
            }
            let t = Instant::now();
            for _ in 0..batches {
                std::hint::black_box(
                    loader
                        .next()
                        .ok_or("loader ended")?
                        .map_err(|e| e.to_string())?,
                );
            }
            let per = t.elapsed().as_secs_f64() / batches as f64;
            loader.close();
            (per, ok)
        }
    };
    println!(
        "{}",
        json!({"per_batch_s": per_batch, "verified": verified, "peak_rss_bytes": own_peak_rss()})
    );
    Ok(ExitCode::SUCCESS)
}

pub fn run(a: &RunArgs, corpora: &Corpora, work: &Path) -> Result<Vec<FreeTable>, String> {
    let base_batches = if a.quick { 50 } else { 200 };
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let py = config::python();
    let script = config::python_script("loader_bench.py");
    let mut tables = Vec::new();
    for table in Table::LOADER {
        let Some(prepared) = corpora.of(table) else {
            continue;
        };
        // The store table whose records the loaders read; its name is the cells' KIND.
        let source = table
            .source_table()
            .ok_or("a loader table reads a store table")?;
        let kind = source.name();
        // A token batch takes ~30 us, an image batch ~2.5 ms: time token tables 25x longer in
        // batches so both runs last long enough to mean something.
        let batches = if table.corpus() == Some(Corpus::Tokens) {
            base_batches * 25
        } else {
            base_batches
        };
        let store = ensure_store(source, &prepared.dir, work)?;
        let npy_dir = prepared.dir.clone();
        let arms = [
            "bare-gather",
            "loaderx-w0",
            "loaderx-w1",
            "loaderx-w2",
            "loaderx-w4",
            "python-loaderx-w4",
            "torch-dataloader-w4",
        ];
        let mut results: Vec<ArmRow> = arms
            .iter()
            .map(|a| (a.to_string(), Vec::new(), Vec::new(), true, None))
            .collect();
        let cell = |arm: &str| -> Option<Command> {
            if arm.starts_with("python-") || arm.starts_with("torch-") {
                let mut c = Command::new(py.as_ref()?);
                c.arg(&script)
                    .args([arm, kind])
                    .arg(&store)
                    .arg(&npy_dir)
                    .arg(batches.to_string());
                Some(c)
            } else {
                let mut c = Command::new(&exe);
                c.arg("loader-cell")
                    .args([kind])
                    .arg(&store)
                    .args([arm, &batches.to_string()]);
                Some(c)
            }
        };
        // Timed runs are not sampled: reading smaps_rollup walks the process's page tables and
        // slowed the timed loop by 25-75 % (most for the arms with the most memory mapped). Peak
        // RAM comes from one more, sampled run of each arm after the timed ones.
        let pb = progress((arms.len() * (a.repeats + 1)) as u64, "loader");
        for rep in 0..=a.repeats {
            let memory_pass = rep == a.repeats;
            for k in 0..arms.len() {
                let arm = arms[(k + rep) % arms.len()];
                pb.set_prefix(format!(
                    "{kind} / {arm}{}",
                    if memory_pass { " (peak RAM)" } else { "" }
                ));
                let entry = results.iter_mut().find(|r| r.0 == arm).ok_or("arm")?;
                let Some(cmd) = cell(arm) else {
                    entry.4 = Some("no venv python".into());
                    pb.inc(1);
                    continue;
                };
                if memory_pass && entry.1.is_empty() {
                    // Skipped or failed in every timed run: nothing to measure.
                    pb.inc(1);
                    continue;
                }
                match run_cell(cmd, memory_pass).and_then(|(out, peak)| {
                    let j: Value = serde_json::from_str(out.lines().last().unwrap_or(""))
                        .map_err(|e| format!("bad output: {e}"))?;
                    Ok((j, peak))
                }) {
                    Ok((j, peak)) => {
                        if let Some(note) = j.get("skipped").and_then(Value::as_str) {
                            entry.4 = Some(note.to_string());
                        } else {
                            let reported =
                                j.get("peak_rss_bytes").and_then(Value::as_u64).unwrap_or(0);
                            entry.2.push(peak.max(reported));
                            entry.3 &= j["verified"].as_bool().unwrap_or(false);
                            if !memory_pass {
                                entry.1.push(j["per_batch_s"].as_f64().unwrap_or(f64::NAN));
                            }
                        }
                    }
                    Err(e) => {
                        entry.3 = false;
                        entry.4 = Some(e);
                    }
                }
                pb.inc(1);
            }
        }
        pb.finish_and_clear();
        let bare = results
            .iter()
            .find(|r| r.0 == "bare-gather")
            .map(|r| median(&r.1))
            .unwrap_or(f64::NAN);
        let mut rows = Vec::new();
        for (arm, per, peaks, ok, note) in &results {
            let p = median(per);
            let (label, storage) = match arm.as_str() {
                "bare-gather" => ("view.gather loop (Rust, no loader)", "zrecord-raw"),
                "loaderx-w0" => ("loaderx Rust, workers=0", "zrecord-raw"),
                "loaderx-w1" => ("loaderx Rust, workers=1, prefetch=4", "zrecord-raw"),
                "loaderx-w2" => ("loaderx Rust, workers=2, prefetch=4", "zrecord-raw"),
                "loaderx-w4" => ("loaderx Rust, workers=4, prefetch=4", "zrecord-raw"),
                "python-loaderx-w4" => ("loaderx Python, workers=4, prefetch=4", "zrecord-raw"),
                _ => ("torch DataLoader, 4 workers", "npy-mmap-raw"),
            };
            let measured = p.is_finite();
            rows.push(json!({
                "loader": label,
                "arm": arm,
                "storage": storage,
                "batches/s": if measured { json!(1.0 / p) } else { Value::Null },
                "samples/s": if measured { json!(BATCH as f64 / p) } else { Value::Null },
                "peak RAM MiB": peaks.iter().max().map(|&b| json!(b as f64 / (1 << 20) as f64)).unwrap_or(Value::Null),
                "x bare gather": if measured && bare.is_finite() { json!(bare / p) } else { Value::Null },
                "verified": if measured { json!(*ok) } else if note.is_some() && !ok { json!(false) } else { Value::Null },
                "note": note,
            }));
        }
        tables.push(FreeTable {
            name: table,
            title: format!(
                "End-to-end loader, {kind}: batch 256, IID, {batches} timed batches after {WARMUP} warm-up; peak RAM = max(process-tree PSS sampled every 20 ms in a separate run, the row process's own peak RSS); x bare gather = throughput relative to a plain view.gather loop"
            ),
            synthetic: prepared.synthetic,
            columns: ["loader", "storage", "batches/s", "samples/s", "peak RAM MiB", "x bare gather", "verified", "note"].iter().map(|s| s.to_string()).collect(),
            rows,
        });
    }
    Ok(tables)
}
