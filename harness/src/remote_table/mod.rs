//! The remote tables (`harness remote`, feature `remote`): `remote-dense-vision` and
//! `remote-ragged-tokens`, zrecord-raw stores published to a real SeaweedFS server started on
//! loopback for the run, read with IID batches of 256:
//!
//! * `get-limit`: the byte ranges a gather of each batch requests (the remote engine's coalesced
//!   ranges), fetched by the same client with the same concurrency and dropped as they land: no
//!   checks, no copies, no decode. What the wire and the server allow for those requests.
//! * `zrecord-raw`: the store opened from its URL without a cache: every batch fetched, checked
//!   (CRC32C of every record) and copied into its allocation.
//! * `zrecord-raw-cache-cold`: with a node-local cache that starts empty: the timed batches fetch
//!   whole cache blocks and fill the cache.
//! * `zrecord-raw-cached`: with that cache holding the whole store (filled by an untimed pass).
//! * `zrecord-raw-local`: the same container on local disk, warm in the page cache and read once
//!   whole by the process before its timer, as the cached row fills its cache: the gather the
//!   cached row is measured against. Within the cached row's process the two also gather
//!   each timed batch back to back ([`paired`]): the table's paired goal line.
//! * `litdata-s3-w4`, `streaming-s3-w4`, `lance-s3-take`: the peers reading the same records from
//!   the same server, each as its docs read S3 (`harness/python/loaders/remote_arms.py`; the
//!   row's note names the doc), each in a fresh process with an empty local cache, timed and
//!   verified as in the loader tables (warm-up, then blocks of 8 timed batches after 32 drained
//!   ones), so they take the first steps of the same draws.
//!
//! Every timed batch of every reading row is compared with the source arrays after its timer.
//! The batches of one repeat are the same draws for every row; rows run in a rotated order per
//! repeat, the zrecord rows in this process. The server runs on this machine: its volume files sit in the page
//! cache, so "cold" means cold on the reader's side (no connection state, no cache), not a cold
//! disk behind the server.

use std::path::Path;
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::Instant;

use benchkit::stats::{median, sample_sd};
use competitors::{Competitor, Source, ZrecordCodec, ZrecordStore};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use zrecord::internals::GetLimit;
use zrecord::{
    DenseStore, DenseView, OpenOptions, RaggedStore, RaggedView, RemoteOptions, SystemAllocator,
};

use crate::config::{self, RunArgs};
use crate::corpus::{self, Loaded};
use crate::error::{HarnessError, Result, write_file, write_json};
use crate::loader::arms;
use crate::table::Table;

mod server;

use server::{BUCKET, KEY, SECRET, Server};

const BATCH: usize = 256;

/// The rows, in table order: the zrecord rows (in this process), then the peers.
const ARMS: [&str; 8] = [
    "get-limit",
    "zrecord-raw",
    "zrecord-raw-cache-cold",
    "zrecord-raw-cached",
    "zrecord-raw-local",
    "litdata-s3-w4",
    "streaming-s3-w4",
    "lance-s3-take",
];

const FIRST_PEER: usize = 5;

/// Timed batches of a peer row (blocks of [`arms::BLOCK`], each after
/// [`arms::DRAIN`] drained ones: the drains dominate what a peer fetches).
fn peer_batches(quick: bool) -> usize {
    if quick { 8 } else { 16 }
}

/// A peer row's timed seconds stop growing past this (the loader tables' budget, smaller: the
/// drains fetch 4x what is timed).
const PEER_BUDGET_S: &str = "8";

/// An open store of either layout, bound once to the allocator its batches come from.
enum Store {
    Dense(DenseStore, DenseView),
    Ragged(RaggedStore, RaggedView),
}

impl Store {
    fn open(path: &str, dense: bool, opts: OpenOptions) -> Result<Store> {
        let a = Arc::new(SystemAllocator::new());
        Ok(if dense {
            let s = DenseStore::open_with(path, opts)?;
            let v = s.bind(a);
            Store::Dense(s, v)
        } else {
            let s = RaggedStore::open_with(path, opts)?;
            let v = s.bind(a);
            Store::Ragged(s, v)
        })
    }

    fn len(&self) -> u64 {
        match self {
            Store::Dense(s, _) => s.len(),
            Store::Ragged(s, _) => s.len(),
        }
    }

    fn requests(&self, idx: &[u64]) -> Result<Vec<(String, std::ops::Range<u64>)>> {
        Ok(match self {
            Store::Dense(s, _) => s.remote_requests(idx)?,
            Store::Ragged(s, _) => s.remote_requests(idx)?,
        })
    }

    /// Gathers `idx` (timed by the caller) as a batch the verifier compares.
    fn gather(&self, idx: &[u64]) -> Result<competitors::Batch> {
        Ok(match self {
            Store::Dense(_, v) => competitors::Batch::Dense(Box::new(v.gather(idx)?)),
            Store::Ragged(_, v) => competitors::Batch::Ragged(Box::new(v.gather(idx)?)),
        })
    }

    /// Gathers every record once, untimed: a cached store's cache then holds the whole store,
    /// and either store's pages are mapped into this process (a first touch of a mapped page is
    /// a page fault, which a 540-byte line's gather pays almost whole).
    fn read_all(&self) -> Result<()> {
        let all: Vec<u64> = (0..self.len()).collect();
        for chunk in all.chunks(4096) {
            self.gather(chunk)?;
        }
        Ok(())
    }

    fn cache_stats(&self) -> Option<zrecord::CacheStats> {
        match self {
            Store::Dense(s, _) => s.cache_stats(),
            Store::Ragged(s, _) => s.cache_stats(),
        }
    }
}

/// One row's figures in one repeat.
#[derive(Default)]
struct Timed {
    seconds: f64,
    batches: usize,
    logical_bytes: u64,
    verified: usize,
    /// A peer row's configuration note, or why it did not run or failed.
    note: Option<String>,
    /// The run failed or a batch differed: the row is `verified: false`.
    failed: bool,
    /// The peer is not installed: the row is not measured.
    skipped: bool,
}

/// The environment a peer process reads the server from (`remote_arms.py`).
fn peer_env(server: &Server) -> Vec<(&'static str, String)> {
    vec![
        ("LOADERX_REMOTE_ENDPOINT", server.endpoint()),
        ("LOADERX_REMOTE_BUCKET", BUCKET.into()),
        ("AWS_ACCESS_KEY_ID", KEY.into()),
        ("AWS_SECRET_ACCESS_KEY", SECRET.into()),
        ("AWS_DEFAULT_REGION", "us-east-1".into()),
        ("LOADERX_LOADER_BUDGET_S", PEER_BUDGET_S.into()),
    ]
}

/// Writes the repeat's draws as `(steps, 256)` uint64 for the peer processes.
fn write_draws(path: &Path, draws: &[Vec<u64>]) -> Result<()> {
    let bytes: Vec<u8> = draws
        .iter()
        .flatten()
        .flat_map(|i| i.to_le_bytes())
        .collect();
    datasets::npy::write_npy(path, "<u8", &[draws.len() as u64, BATCH as u64], &bytes)
        .map_err(HarnessError::datasets("write the draws"))
}

/// What a peer row needs besides the server.
struct PeerArgs<'a> {
    kind: Table,
    npy_dir: &'a Path,
    draws: &'a Path,
    peer_dir: &'a Path,
    batches: usize,
}

/// Runs peer row `arm` in a fresh process (the Streaming venv's Python for Streaming) and reads
/// its JSON line: MiB/s from its mean logical batch bytes over its seconds per timed batch.
fn time_peer(arm: &str, server: &Server, p: &PeerArgs<'_>) -> Timed {
    let py = if arm.starts_with("streaming") {
        config::streaming_python()
    } else {
        config::python()
    };
    let skipped = |why: &str| Timed {
        note: Some(format!("not measured: {why}")),
        skipped: true,
        ..Timed::default()
    };
    let Some(py) = py else {
        return skipped(&format!("no Python venv for {arm}"));
    };
    let out = Command::new(py)
        .arg(config::python_script("loader_bench.py"))
        .args([arm, p.kind.name(), "-"])
        .arg(p.npy_dir)
        .arg(p.draws)
        .arg(p.peer_dir)
        .arg(p.batches.to_string())
        .arg(arms::WARMUP.to_string())
        .envs(peer_env(server))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let fail = |note: String| Timed {
        note: Some(note),
        failed: true,
        ..Timed::default()
    };
    let out = match out.and_then(|c| crate::child::output_within(c, crate::child::limit())) {
        Ok((o, true)) => {
            let err = String::from_utf8_lossy(&o.stderr);
            let why = crate::child::why(true, crate::child::last_line(&err));
            return fail(format!("{arm}: {why}"));
        }
        Ok((o, false)) => o,
        Err(e) => return fail(format!("{arm}: could not run Python: {e}")),
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let j: Value = match serde_json::from_str(stdout.lines().last().unwrap_or("")) {
        Ok(j) => j,
        Err(_) => {
            let stderr = String::from_utf8_lossy(&out.stderr);
            let last = crate::child::last_line(&stderr);
            return fail(format!(
                "{arm}: exited with {} and no result: {last}",
                out.status
            ));
        }
    };
    if let Some(why) = j["skipped"].as_str() {
        return skipped(why);
    }
    let per_batch = j["per_batch_s"].as_f64();
    let verified = j["verified"].as_bool() == Some(true);
    match (per_batch, verified) {
        (Some(s), true) => {
            let n = j["verified_batches"].as_u64().unwrap_or(0) as usize;
            let bytes = j["mean_batch_bytes"].as_f64().unwrap_or(0.0);
            Timed {
                seconds: s * n as f64,
                batches: n,
                logical_bytes: (bytes * n as f64) as u64,
                verified: n,
                note: j["config"].as_str().map(String::from),
                ..Timed::default()
            }
        }
        _ => fail(format!(
            "{arm}: {}",
            j["error"].as_str().unwrap_or("unverified")
        )),
    }
}

/// The source bytes of records `idx`.
fn logical_bytes(source: &Source<'_>, idx: &[u64]) -> u64 {
    idx.iter().map(|&i| source.record(i).len() as u64).sum()
}

/// Times `batches` gathers of `store` (after `warm` untimed ones), each compared with the source
/// after its timer.
fn time_store(
    store: &Store,
    source: &Source<'_>,
    draws: &[Vec<u64>],
    warm: usize,
) -> Result<Timed> {
    for idx in draws.iter().take(warm) {
        store.gather(idx)?;
    }
    let mut t = Timed::default();
    for idx in draws.iter().skip(warm) {
        let clock = Instant::now();
        let b = store.gather(idx)?;
        t.seconds += clock.elapsed().as_secs_f64();
        t.batches += 1;
        source
            .check(idx, &b)
            .map_err(HarnessError::differs("a timed remote batch"))?;
        t.logical_bytes += logical_bytes(source, idx);
        t.verified += 1;
    }
    Ok(t)
}

/// Rounds over a repeat's timed draws in which the cached and the local store gather the same
/// batch back to back ([`paired`]).
const PAIRED_ROUNDS: usize = 5;

/// The cached and the local warm gather side by side: [`PAIRED_ROUNDS`] passes over `draws`, each
/// batch gathered by both stores one right after the other (which goes first alternates), each
/// result compared with the source after its timer. The two rows of the table run minutes apart,
/// and this VM's speed moves between them; a pair is a few milliseconds apart. Returns the seconds
/// each store spent, summed over the pairs.
fn paired(
    cached: &Store,
    local: &Store,
    source: &Source<'_>,
    draws: &[Vec<u64>],
) -> Result<[f64; 2]> {
    let mut spent = [0.0; 2];
    let mut k = 0;
    for _ in 0..PAIRED_ROUNDS {
        for idx in draws {
            let order = if k % 2 == 0 { [0, 1] } else { [1, 0] };
            for which in order {
                let store = if which == 0 { cached } else { local };
                let clock = Instant::now();
                let b = store.gather(idx)?;
                spent[which] += clock.elapsed().as_secs_f64();
                source
                    .check(idx, &b)
                    .map_err(HarnessError::differs("a paired batch"))?;
            }
            k += 1;
        }
    }
    Ok(spent)
}

/// Runs the remote tables (`harness remote`): prepares the corpora as `harness run` does, starts
/// SeaweedFS, publishes a zrecord-raw store of each table, runs the rows and writes
/// `results.json` and `tables.md` into `--out`.
pub fn main(a: RunArgs) -> Result<ExitCode> {
    let out = a
        .out
        .clone()
        .unwrap_or_else(|| crate::config::workspace_root().join("cache/remote-run"));
    std::fs::create_dir_all(&out).map_err(HarnessError::io("create", &out))?;
    let source_at_start = crate::machine::source_info();
    let batches = if a.quick { 20 } else { 100 };
    let warm = 3;
    let server = Server::start()?;
    let ropts = server.options();
    let mut tables = Vec::new();
    for (name, table) in [
        ("remote-dense-vision", Table::DenseVision),
        ("remote-ragged-tokens", Table::RaggedTokens),
    ] {
        if !a.selected(table) {
            continue;
        }
        let prepared = match table {
            Table::DenseVision => corpus::vision(&a)?,
            _ => corpus::tokens(&a)?,
        };
        let loaded = Loaded::open(table, &prepared.dir)?;
        let source = loaded.source();
        let dense = matches!(source, Source::Dense(_));
        let work = a.cache.join("work").join(name);
        let _ = std::fs::remove_dir_all(&work);
        let stored = ZrecordStore::new(ZrecordCodec::Raw)
            .write(&source, &work)
            .map_err(|e| HarnessError::other(format!("the zrecord-raw store of {name}: {e}")))?;
        let local = ZrecordStore::container(&stored.dir);
        let url = format!("s3://{BUCKET}/{name}");
        eprintln!("harness remote: publishing {name} to SeaweedFS");
        zrecord::remote::publish_dir(&local, &url, &ropts)?;
        let n = source.len();
        let limit = GetLimit::connect(&url, &ropts)?;
        let mut per_arm: Vec<Vec<Timed>> = (0..ARMS.len()).map(|_| Vec::new()).collect();
        let mut stats = Vec::new();
        // Per repeat: the cached store's speed over the local one's, gathered in pairs.
        let mut pairs: Vec<f64> = Vec::new();
        let peer_dir = work.join("peers");
        let steps = (batches + warm).max(arms::steps_needed(peer_batches(a.quick), arms::BLOCK));
        for rep in 0..a.repeats {
            let mut rng = SmallRng::seed_from_u64(7 + rep as u64);
            let all_draws: Vec<Vec<u64>> = (0..steps)
                .map(|_| (0..BATCH).map(|_| rng.random_range(0..n)).collect())
                .collect();
            let draws_path = work.join(format!("draws-{rep}.npy"));
            write_draws(&draws_path, &all_draws)?;
            let draws = &all_draws[..batches + warm];
            let peer = PeerArgs {
                kind: table,
                npy_dir: &prepared.dir,
                draws: &draws_path,
                peer_dir: &peer_dir,
                batches: peer_batches(a.quick),
            };
            let cache_dir = work.join(format!("cache-{rep}"));
            let _ = std::fs::remove_dir_all(&cache_dir);
            let cached_opts = || OpenOptions {
                remote: RemoteOptions {
                    cache_dir: Some(cache_dir.clone()),
                    cache_bytes: 64 << 30,
                    ..ropts.clone()
                },
                ..OpenOptions::default()
            };
            let remote_opts = || OpenOptions {
                remote: ropts.clone(),
                ..OpenOptions::default()
            };
            for k in 0..ARMS.len() {
                let arm = (k + rep) % ARMS.len();
                eprintln!(
                    "harness remote: {name} repeat {}/{} {}",
                    rep + 1,
                    a.repeats,
                    ARMS[arm]
                );
                let t = match ARMS[arm] {
                    "get-limit" => {
                        let s = Store::open(&url, dense, remote_opts())?;
                        let mut t = Timed::default();
                        for (j, idx) in draws.iter().enumerate() {
                            let req = s.requests(idx)?;
                            let clock = Instant::now();
                            limit.fetch(req)?;
                            if j >= warm {
                                t.seconds += clock.elapsed().as_secs_f64();
                                t.batches += 1;
                                t.logical_bytes += logical_bytes(&source, idx);
                            }
                        }
                        t
                    }
                    "zrecord-raw" => time_store(
                        &Store::open(&url, dense, remote_opts())?,
                        &source,
                        draws,
                        warm,
                    )?,
                    "zrecord-raw-cache-cold" => {
                        // A fresh cache, and no warm-up batches (they would fill it).
                        let _ = std::fs::remove_dir_all(&cache_dir);
                        let s = Store::open(&url, dense, cached_opts())?;
                        let t = time_store(&s, &source, &draws[warm..], 0)?;
                        stats.push(json!({"repeat": rep, "row": ARMS[arm], "cache": format!("{:?}", s.cache_stats())}));
                        t
                    }
                    "zrecord-raw-cached" => {
                        let s = Store::open(&url, dense, cached_opts())?;
                        // Fill the cache with every record (untimed).
                        s.read_all()?;
                        let t = time_store(&s, &source, draws, warm)?;
                        stats.push(json!({"repeat": rep, "row": ARMS[arm], "cache": format!("{:?}", s.cache_stats())}));
                        let l =
                            Store::open(&local.to_string_lossy(), dense, OpenOptions::default())?;
                        l.read_all()?;
                        let [cached_s, local_s] = paired(&s, &l, &source, &draws[warm..])?;
                        pairs.push(local_s / cached_s.max(1e-12));
                        t
                    }
                    "zrecord-raw-local" => {
                        let l =
                            Store::open(&local.to_string_lossy(), dense, OpenOptions::default())?;
                        // Every record read once first, as the cached row fills its cache: both
                        // then time a store whose pages this process has already touched.
                        l.read_all()?;
                        time_store(&l, &source, draws, warm)?
                    }
                    other => time_peer(other, &server, &peer),
                };
                per_arm[arm].push(t);
            }
            let _ = std::fs::remove_dir_all(&cache_dir);
        }
        // Rows: MiB/s of logical bytes per repeat, the median, and the ratios of medians. A row
        // with a failed repeat has no figure; a skipped peer is "not measured".
        let mibs = |ts: &[Timed]| -> Vec<f64> {
            ts.iter()
                .filter(|t| t.batches > 0)
                .map(|t| t.logical_bytes as f64 / (1 << 20) as f64 / t.seconds.max(1e-12))
                .collect()
        };
        let failed = |k: usize| per_arm[k].iter().any(|t| t.failed);
        let measured = |k: usize| {
            !failed(k) && !per_arm[k].is_empty() && per_arm[k].iter().all(|t| t.batches > 0)
        };
        let med = |k: usize| measured(k).then(|| median(&mibs(&per_arm[k])));
        let (limit_m, local_m) = (med(0), med(4));
        let best_peer = (FIRST_PEER..ARMS.len())
            .filter_map(|k| med(k).map(|m| (k, m)))
            .max_by(|x, y| x.1.total_cmp(&y.1));
        let ratio = |m: Option<f64>, of: Option<f64>| match (m, of) {
            (Some(m), Some(of)) => json!(m / of),
            _ => Value::Null,
        };
        let rows: Vec<Value> = ARMS
            .iter()
            .enumerate()
            .map(|(k, arm)| {
                let v = mibs(&per_arm[k]);
                let m = med(k);
                let verified = per_arm[k].iter().map(|t| t.verified).sum::<usize>();
                let expected = if k >= FIRST_PEER {
                    per_arm[k].iter().map(|t| t.batches).sum::<usize>()
                } else {
                    batches * a.repeats
                };
                let skipped = per_arm[k].iter().any(|t| t.skipped);
                let note = per_arm[k].iter().rev().find_map(|t| {
                    (t.failed || t.skipped).then(|| t.note.clone()).flatten()
                });
                let config = per_arm[k].iter().rev().find_map(|t| t.note.clone());
                json!({
                    "row": arm,
                    "MiB/s": m,
                    "MiB/s sd": if measured(k) { json!(sample_sd(&v)) } else { Value::Null },
                    "MiB/s repeats": v,
                    "batches/s": measured(k).then(|| median(&per_arm[k].iter().map(|t| t.batches as f64 / t.seconds.max(1e-12)).collect::<Vec<_>>())),
                    "x GET limit": if k == 0 { Value::Null } else { ratio(m, limit_m) },
                    "x local warm": if k == 4 { Value::Null } else { ratio(m, local_m) },
                    "x best peer": if k >= FIRST_PEER { Value::Null } else { ratio(m, best_peer.map(|b| b.1)) },
                    "verified": if k == 0 || skipped {
                        Value::Null
                    } else {
                        json!(!failed(k) && verified > 0 && verified == expected)
                    },
                    "verified batches": verified,
                    "timed batches": per_arm[k].iter().map(|t| t.batches).collect::<Vec<_>>(),
                    "note": note.or(if k >= FIRST_PEER { config } else { None }),
                })
            })
            .collect();
        let mut goals = crate::remote_report::goals(&rows, FIRST_PEER);
        let paired_ok = pairs.len() == a.repeats && !failed(3);
        let x = paired_ok.then(|| median(&pairs));
        goals.push(json!({
            "goal": format!(
                "cached zrecord-raw >= 0.8x the local warm gather, paired ({PAIRED_ROUNDS} rounds \
                 of the timed draws, the two gathers of each batch back to back; per repeat {})",
                pairs.iter().map(|p| format!("{p:.2}")).collect::<Vec<_>>().join(", ")
            ),
            "row": "zrecord-raw-cached",
            "ratio": x,
            "target": 0.8,
            "met": x.map(|x| x >= 0.8),
        }));
        tables.push(json!({
            "name": name,
            "records": n,
            "batch": BATCH,
            "timed batches per repeat": batches,
            "peer timed batches per repeat": peer_batches(a.quick),
            "repeats": a.repeats,
            "rows": rows,
            "goals": goals,
            "cached/local paired": pairs,
            "cache stats": stats,
        }));
        let _ = std::fs::remove_dir_all(&work);
    }
    drop(server);
    let mut source = crate::machine::source_info();
    crate::machine::seal(&source_at_start, &mut source);
    let report = json!({
        "machine": crate::machine::receipts(),
        "source": source,
        "tables": tables,
    });
    write_json(&out.join("results.json"), &report)?;
    write_file(
        &out.join("tables.md"),
        crate::remote_report::render(&report),
    )?;
    eprintln!("harness remote: wrote {}", out.display());
    Ok(ExitCode::SUCCESS)
}
