//! Negative tests of the harness's verification: a batch corrupted after delivery (the test-only
//! `LOADERX_HARNESS_CORRUPT_BATCH`) or a store that differs from the source turns the row
//! `verified: false`, and the regression gate, which runs the Rust loader cells, fails at once; the
//! same cell without the corruption says `verified: true`. Each cell runs as the harness runs it: the built executable, in a fresh
//! process, over a small corpus of `.npy` source arrays in a temporary directory.
//!
//! Covered: the store cell (`cell`, dense and ragged), the Rust loader cell (`loader-cell`, dense
//! and ragged, and a store that differs from the source), and the Python rows' shared timed loop
//! (`harness/python/loaders/common.py`, when the project venv's Python is found). The cold cells
//! drop the machine's page cache, which a test must not do; their batch check is unit-tested in
//! `cold::loader`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use competitors::{Competitor, DenseSource, RaggedSource, Source, ZrecordCodec, ZrecordStore};
use serde_json::{Value, json};
use zrecord::DType;

const EXE: &str = env!("CARGO_BIN_EXE_harness");
const CORRUPT: &str = "LOADERX_HARNESS_CORRUPT_BATCH";
/// Records of the test corpora: more than a batch of 256, so draws repeat records rarely.
const RECORDS: usize = 600;
const ITEM: usize = 16;

/// A dense corpus (`dense.npy`, int32 `(RECORDS, ITEM)`), every record distinct.
fn dense_corpus(dir: &Path) -> Vec<u8> {
    std::fs::create_dir_all(dir).expect("corpus dir");
    let bytes: Vec<u8> = (0..(RECORDS * ITEM) as i32)
        .flat_map(|v| (v * 7 + 3).to_le_bytes())
        .collect();
    datasets::npy::write_npy(
        dir.join("dense.npy"),
        "<i4",
        &[RECORDS as u64, ITEM as u64],
        &bytes,
    )
    .expect("write dense.npy");
    bytes
}

/// A ragged token corpus (`tokens.npy` int32, `offsets.npy` int64), records of 1 to 37 tokens.
fn ragged_corpus(dir: &Path) -> (Vec<u8>, Vec<i64>) {
    std::fs::create_dir_all(dir).expect("corpus dir");
    let mut offsets = vec![0i64];
    for i in 0..RECORDS {
        offsets.push(offsets[i] + (i % 37) as i64 + 1);
    }
    let total = *offsets.last().expect("offsets") as i32;
    let tokens: Vec<u8> = (0..total).flat_map(|v| (v * 5 + 1).to_le_bytes()).collect();
    let off: Vec<u8> = offsets.iter().flat_map(|o| o.to_le_bytes()).collect();
    datasets::npy::write_npy(dir.join("tokens.npy"), "<i4", &[total as u64], &tokens)
        .expect("write tokens.npy");
    datasets::npy::write_npy(
        dir.join("offsets.npy"),
        "<i8",
        &[offsets.len() as u64],
        &off,
    )
    .expect("write offsets.npy");
    (tokens, offsets)
}

/// The zrecord raw store (competitors' `zrecord-raw` row) of `source` in `dir`: its path.
fn store(dir: &Path, source: Source<'_>) -> PathBuf {
    let row = ZrecordStore::new(ZrecordCodec::Raw).write(&source, dir);
    row.expect("write the store");
    ZrecordStore::container(dir)
}

/// The dense corpus's records, int32 `[ITEM]` each.
fn dense_source(data: &[u8]) -> Source<'_> {
    let item_shape = vec![ITEM as u64];
    Source::Dense(DenseSource {
        dtype: DType::Int32,
        item_shape,
        data,
    })
}

/// Runs `cmd` with the corruption switch set to `corrupt` (and unset otherwise).
fn run(mut cmd: Command, corrupt: Option<u64>) -> Output {
    cmd.env_remove(CORRUPT);
    if let Some(k) = corrupt {
        cmd.env(CORRUPT, k.to_string());
    }
    cmd.output().expect("run the harness")
}

/// Whether `harness gate` (this harness against itself, small cells over the corpora `dense`
/// and `ragged`, stores and cache under `dir`) fails at once when every cell's timed batch
/// `corrupt` is flipped: the first cell that runs returns a wrong value, and the gate fails
/// without pairing it. The same gate without the corruption runs every pair with no failed
/// cell (its speed verdicts, on a loaded test machine, are not asserted), so the failure is the
/// batch's, not the setup's.
fn gate_fails(dir: &Path, dense: &Path, ragged: &Path, corrupt: u64) -> bool {
    let gate = |corrupt: Option<u64>| {
        let mut c = Command::new(EXE);
        c.args(["gate", EXE, EXE, "--pairs", "5", "--batches", "8"])
            .arg("--vision-corpus")
            .arg(dense)
            .arg("--token-corpus")
            .arg(ragged)
            .arg("--cache")
            .arg(dir.join("gate-cache"))
            .arg("--out")
            .arg(dir.join("gate-out"));
        let out = run(c, corrupt);
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let decision: Value = serde_json::from_slice(
            &std::fs::read(dir.join("gate-out/decision.json")).expect("decision.json"),
        )
        .expect("decision JSON");
        (out.status.success(), text, decision)
    };
    let (_, text, control) = gate(None);
    assert_eq!(control["fact"], Value::Null, "the control gate: {text}");
    assert_eq!(
        control["pairs"].as_array().map(Vec::len),
        Some(15),
        "the control gate runs 5 pairs of each of the 3 paths: {text}"
    );
    let (ok, text, decision) = gate(Some(corrupt));
    !ok && text.contains("gate: FAIL")
        && text.contains("wrong value")
        && decision["pass"] == json!(false)
        && decision["pairs"] == json!([])
}

/// Runs store cell `backend` of `table` over `corpus` (`harness cell field=value ...`: no timed
/// seconds, 3 verified batches, seed 7, its stores under `tmp/work`); returns its result.
fn store_cell(
    tmp: &Path,
    table: &str,
    backend: &str,
    corpus: &Path,
    corrupt: Option<u64>,
) -> Value {
    let work = tmp.join("work");
    let out = tmp.join(format!("{table}-{backend}-{corrupt:?}.json"));
    std::fs::create_dir_all(&work).expect("work dir");
    let mut c = Command::new(EXE);
    c.args([
        "cell",
        &format!("table={table}"),
        &format!("backend={backend}"),
    ])
    .arg(format!("corpus={}", corpus.display()))
    .arg(format!("work={}", work.display()))
    .arg(format!("out={}", out.display()))
    .args(["min_seconds=0", "verify_batches=3", "seed=7"]);
    let o = run(c, corrupt);
    let r: Value = serde_json::from_slice(&std::fs::read(&out).expect("cell result"))
        .expect("cell result JSON");
    // A failed cell exits non-zero; an ok or not-applicable one zero.
    assert_eq!(
        o.status.success(),
        r["status"] != "FAILED",
        "{r}: exit {:?}",
        o.status
    );
    r
}

#[test]
fn a_corrupted_store_cell_batch_fails_the_row() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dense = tmp.path().join("dense");
    dense_corpus(&dense);
    let ragged = tmp.path().join("ragged");
    ragged_corpus(&ragged);
    for (table, corpus) in [("dense-tokens", &dense), ("ragged-tokens", &ragged)] {
        let good = store_cell(tmp.path(), table, "zrecord-raw", corpus, None);
        assert_eq!(good["verified"], json!(true), "{good}");
        assert!(good["verified_batches"].as_u64() > Some(0), "{good}");
        // Batch 1 is a verification batch, batch 5 a timed one (3 verified before timing).
        for k in [1, 5] {
            let bad = store_cell(tmp.path(), table, "zrecord-raw", corpus, Some(k));
            assert_eq!(bad["verified"], json!(false), "{table} batch {k}: {bad}");
            assert_eq!(bad["status"], json!("FAILED"), "{table} batch {k}: {bad}");
            assert!(
                bad["note"].as_str().is_some_and(|n| n.contains("differs")),
                "{bad}"
            );
        }
    }
}

#[test]
fn a_store_cell_with_no_layout_is_unverified_not_verified() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let ragged = tmp.path().join("ragged");
    ragged_corpus(&ragged);
    let r = store_cell(tmp.path(), "ragged-tokens", "npy-mmap-raw", &ragged, None);
    assert_eq!(r["status"], json!("n/a"), "{r}");
    assert_eq!(r["verified"], Value::Null, "{r}");
}

/// Runs a Rust loader cell; returns its JSON line.
fn loader_cell(kind: &str, store: &Path, corpus: &Path, arm: &str, corrupt: Option<u64>) -> Value {
    let mut c = Command::new(EXE);
    c.args(["loader-cell", &format!("kind={kind}")])
        .arg(format!("store={}", store.display()))
        .arg(format!("corpus={}", corpus.display()))
        .args([format!("arm={arm}"), "batches=8".into()]);
    let o = run(c, corrupt);
    assert!(
        o.status.success(),
        "{arm}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let out = String::from_utf8_lossy(&o.stdout);
    serde_json::from_str(out.lines().last().unwrap_or("")).expect("the cell's JSON line")
}

/// The dense and ragged corpora with their stores: (kind, store, corpus).
fn loader_inputs(tmp: &Path) -> Vec<(&'static str, PathBuf, PathBuf)> {
    let dense = tmp.join("dense");
    let bytes = dense_corpus(&dense);
    let ragged = tmp.join("ragged");
    let (values, offsets) = ragged_corpus(&ragged);
    let shapes: Vec<u64> = offsets.windows(2).map(|w| (w[1] - w[0]) as u64).collect();
    let (dtype, offsets, shapes) = (DType::Int32, &offsets[..], &shapes[..]);
    let tokens = RaggedSource {
        dtype,
        ndim: 1,
        values: &values,
        offsets,
        shapes,
    };
    vec![
        (
            "dense-tokens",
            store(&tmp.join("dense-store"), dense_source(&bytes)),
            dense,
        ),
        (
            "ragged-tokens",
            store(&tmp.join("ragged-store"), Source::Ragged(tokens)),
            ragged,
        ),
    ]
}

#[test]
fn a_corrupted_loader_batch_fails_the_rust_loader_row_and_the_gate() {
    let tmp = tempfile::tempdir().expect("tempdir");
    for (kind, store, corpus) in loader_inputs(tmp.path()) {
        // The limit row is a reference (a span of the store, not the batch's records): it is
        // not compared, and says so.
        let limit = loader_cell(kind, &store, &corpus, "memcpy-limit", None);
        assert_eq!(limit["reference"], json!(true), "{kind}: {limit}");
        assert!(limit["per_batch_s"].as_f64().is_some(), "{kind}: {limit}");
        for arm in ["bare-gather", "loaderx-w2"] {
            let good = loader_cell(kind, &store, &corpus, arm, None);
            assert_eq!(good["verified"], json!(true), "{kind} {arm}: {good}");
            assert_eq!(good["verified_batches"], json!(8), "{kind} {arm}: {good}");
            // 10 warm-up batches, then 32 drained ones, then the 8 timed ones. A drained
            // batch is matched to its step by its probe records only, neither timed nor
            // counted: a byte flipped outside them passes, and the row still counts 8.
            let drained = loader_cell(kind, &store, &corpus, arm, Some(20));
            assert_eq!(drained["verified"], json!(true), "{kind} {arm}: {drained}");
            assert_eq!(
                drained["verified_batches"],
                json!(8),
                "{kind} {arm}: {drained}"
            );
            for (k, what) in [(3, "warm-up"), (45, "timed")] {
                let bad = loader_cell(kind, &store, &corpus, arm, Some(k));
                assert_eq!(bad["verified"], json!(false), "{kind} {arm} {k}: {bad}");
                assert_eq!(bad["mismatch"], json!(true), "{kind} {arm} {k}: {bad}");
                assert!(
                    bad["error"].as_str().is_some_and(|e| e.contains(what)),
                    "{kind} {arm} {k}: {bad}"
                );
            }
        }
    }
    // The gate runs the same cells and fails at once on a wrong value.
    let (dense, ragged) = (tmp.path().join("dense"), tmp.path().join("ragged"));
    assert!(gate_fails(tmp.path(), &dense, &ragged, 45));
}

#[test]
fn a_store_that_differs_from_the_source_fails_the_rust_loader_row() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dense = tmp.path().join("dense");
    let mut bytes = dense_corpus(&dense);
    // The store holds one byte the source does not: a gather of the store agrees with itself,
    // the source does not.
    for b in bytes.iter_mut().step_by(ITEM * 4) {
        *b ^= 0x55;
    }
    let store = store(&tmp.path().join("stale"), dense_source(&bytes));
    for arm in ["bare-gather", "loaderx-w1"] {
        let r = loader_cell("dense-tokens", &store, &dense, arm, None);
        assert_eq!(r["verified"], json!(false), "{arm}: {r}");
    }
}

/// The project venv's Python, if there is one (`$LOADERX_VENV`, else `.venv` at the root).
fn venv_python() -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let venv = std::env::var_os("LOADERX_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join(".venv"));
    let py = venv.join("bin/python");
    py.exists().then_some(py)
}

/// The Python rows' timed loop over a loader that hands out the source batches themselves, with
/// `corrupt` set: its result dict.
fn python_timed(py: &Path, kind: &str, corpus: &Path, draws: &Path, corrupt: Option<u64>) -> Value {
    let script = r#"
import json, sys
sys.path.insert(0, sys.argv[1])
from loaders.common import Job, source_batch, timed
import numpy as np
job = Job("test", sys.argv[2], "", sys.argv[3], sys.argv[4], "", 8, 10)
src, draws = job.source(), job.draws()
print(json.dumps(timed(job, src, draws, lambda k: source_batch(src, draws[k]))))
"#;
    let mut c = Command::new(py);
    c.arg("-c")
        .arg(script)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("python"))
        .arg(kind)
        .arg(corpus)
        .arg(draws);
    c.env_remove("LOADERX_LOADER_MEMORY_PASS");
    let o = run(c, corrupt);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).expect("timed() result")
}

#[test]
fn a_corrupted_batch_fails_the_python_loader_row() {
    let Some(py) = venv_python() else {
        eprintln!("no project venv: the Python loader rows' check is not exercised here");
        return;
    };
    let tmp = tempfile::tempdir().expect("tempdir");
    let dense = tmp.path().join("dense");
    dense_corpus(&dense);
    let ragged = tmp.path().join("ragged");
    ragged_corpus(&ragged);
    // Draws: (steps, 256) record indices; 10 + 32 + 8 steps for 8 timed batches.
    let steps = 50u64;
    let idx: Vec<u8> = (0..steps * 256)
        .flat_map(|i| ((i * 7919) % RECORDS as u64).to_le_bytes())
        .collect();
    let draws = tmp.path().join("draws.npy");
    datasets::npy::write_npy(&draws, "<u8", &[steps, 256], &idx).expect("write draws");
    // The Python rows' kinds: dense-vision reads dense.npy, ragged-tokens tokens.npy + offsets.
    for (kind, corpus) in [("dense-vision", &dense), ("ragged-tokens", &ragged)] {
        let good = python_timed(&py, kind, corpus, &draws, None);
        assert_eq!(good["verified"], json!(true), "{kind}: {good}");
        // A drained batch is matched to its step only (not compared, not counted).
        let drained = python_timed(&py, kind, corpus, &draws, Some(20));
        assert_eq!(drained["verified"], json!(true), "{kind}: {drained}");
        for (k, what) in [(3, "warm-up"), (45, "timed")] {
            let bad = python_timed(&py, kind, corpus, &draws, Some(k));
            assert_eq!(bad["verified"], json!(false), "{kind} {k}: {bad}");
            assert!(
                bad["error"].as_str().is_some_and(|e| e.contains(what)),
                "{kind} {k}: {bad}"
            );
        }
    }
}
