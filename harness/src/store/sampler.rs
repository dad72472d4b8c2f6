//! Table 5: index generation. loaderx's stateless sampler (Rust) beside `SmallRng` uniform draws and
//! a materialized Fisher–Yates permutation; through Python, loaderx `Sampler.next()` beside
//! `numpy.random.default_rng().integers`. 1M ids, batch 256 / 1024 / 8192, each cell in a fresh
//! process (the hidden `sampler-cell` subcommand, or `harness/python/sampler_bench.py`). Owns
//! the sampler arms and the sampler table.

use std::hint::black_box;
use std::path::Path;
use std::process::{Command, ExitCode};
use std::time::Instant;

use benchkit::stats::{median, sample_sd};
use loaderx::{IndexSampler, Mode, Sampler};
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};

use crate::cell_args::{Cell, SamplerCellArgs};
use crate::config::{self, RunArgs};
use crate::error::{HarnessError, Result, write_file};
use crate::model::FreeTable;
use crate::progress::progress;
use crate::table::Table;

const IDS: u64 = 1_000_000;
pub const BATCHES: &[usize] = &[256, 1024, 8192];
const RUST_IMPLS: &[&str] = &[
    "loaderx-iid",
    "loaderx-cyclic",
    "smallrng-uniform",
    "fisher-yates-permutation",
];

fn measure(min_seconds: f64, mut f: impl FnMut()) -> f64 {
    // Warm up, then time batches of calls until the budget is spent.
    for _ in 0..100 {
        f();
    }
    let mut calls = 0u64;
    let t = Instant::now();
    loop {
        for _ in 0..256 {
            f();
        }
        calls += 256;
        if t.elapsed().as_secs_f64() >= min_seconds {
            break;
        }
    }
    t.elapsed().as_secs_f64() / calls as f64
}

/// Runs one Rust sampler arm; returns (seconds per batch, verified).
fn rust_arm(imp: &str, batch: usize, min_seconds: f64) -> Result<(f64, bool)> {
    match imp {
        "loaderx-iid" | "loaderx-cyclic" => {
            let mode = if imp == "loaderx-iid" {
                Mode::Iid
            } else {
                Mode::Cyclic
            };
            let mut s = IndexSampler::new(IDS, batch, mode, 42)?;
            // Verify: in range; for Cyclic the batches of one cycle are disjoint.
            let mut ok = true;
            let mut seen = vec![false; IDS as usize];
            let steps = (IDS / batch as u64).min(64);
            for _ in 0..steps {
                for &i in s.next()? {
                    ok &= i < IDS;
                    if mode == Mode::Cyclic && i < IDS {
                        ok &= !seen[i as usize];
                        seen[i as usize] = true;
                    }
                }
            }
            s.seek(0)?;
            let per = measure(min_seconds, || {
                black_box(s.next().map(|v| v[0]).unwrap_or(0));
            });
            Ok((per, ok))
        }
        "smallrng-uniform" => {
            let mut rng = SmallRng::seed_from_u64(42);
            let mut buf = vec![0u64; batch];
            let per = measure(min_seconds, || {
                for x in buf.iter_mut() {
                    *x = rng.random_range(0..IDS);
                }
                black_box(buf[0]);
            });
            Ok((per, buf.iter().all(|&i| i < IDS)))
        }
        "fisher-yates-permutation" => {
            // The epoch-based way: shuffle a materialized permutation once per epoch (its cost is
            // amortized over the epoch's batches here), then hand out slices.
            let mut rng = SmallRng::seed_from_u64(42);
            let mut perm: Vec<u64> = (0..IDS).collect();
            let mut pos = IDS as usize;
            let mut buf = vec![0u64; batch];
            let per = measure(min_seconds, || {
                if pos + batch > perm.len() {
                    perm.shuffle(&mut rng);
                    pos = 0;
                }
                buf.copy_from_slice(&perm[pos..pos + batch]);
                pos += batch;
                black_box(buf[0]);
            });
            Ok((per, buf.iter().all(|&i| i < IDS)))
        }
        other => Err(HarnessError::Unknown {
            what: "arm",
            name: other.to_string(),
        }),
    }
}

pub fn cell_main(args: &SamplerCellArgs) -> Result<ExitCode> {
    let (per, ok) = rust_arm(&args.arm, args.batch, args.seconds)?;
    let result = json!({"per_batch_s": per, "verified": ok}).to_string();
    write_file(&args.out, result)?;
    Ok(ExitCode::SUCCESS)
}

/// Per arm: name, language, seconds per batch per repeat, verified, note.
type ArmRow<'a> = (String, &'a str, Vec<f64>, bool, Option<String>);

/// Adds one repeat of arm `name` to its row (a new row when it has none). A Rust cell that
/// fails fails the row; a Python repeat that fails after others ran fails it too, while a Python
/// arm that never ran (no venv) is a note, not a result.
fn add_repeat(arms: &mut Vec<ArmRow>, name: &str, lang: &'static str, r: Repeat) {
    let entry = match arms.iter().position(|x| x.0 == name) {
        Some(p) => p,
        None => {
            arms.push((name.to_string(), lang, Vec::new(), true, None));
            arms.len() - 1
        }
    };
    let row = &mut arms[entry];
    match r {
        Ok((per, ok)) => {
            row.2.push(per);
            row.3 &= ok;
        }
        Err(note) => {
            if lang == "rust" || !row.2.is_empty() {
                row.3 = false;
            }
            row.4 = Some(note);
        }
    }
}

/// One repeat of an arm: seconds per batch and whether it verified, or why it has none.
type Repeat = Result<(f64, bool), String>;

/// Seconds per batch and whether every index was in range, from an arm's JSON.
fn figures(j: &Value) -> (f64, bool) {
    let per = j["per_batch_s"].as_f64().unwrap_or(f64::NAN);
    (per, j["verified"].as_bool().unwrap_or(false))
}

/// One repeat of each Python arm at `batch`: its figures, or why it has none.
fn python_arms(batch: usize, secs: f64) -> Vec<(&'static str, Repeat)> {
    let Some(py) = config::python() else {
        let missing = HarnessError::missing("venv python (run scripts/install-deps.sh)");
        return vec![("python", Err(missing.to_string()))];
    };
    let script = config::python_script("sampler_bench.py");
    let arms = ["loaderx-sampler-next", "numpy-default_rng-integers"];
    arms.map(|arm| {
        let out = Command::new(&py)
            .arg(&script)
            .args([arm, &batch.to_string(), &secs.to_string()])
            .output();
        let r = match out {
            Ok(o) if o.status.success() => match serde_json::from_slice::<Value>(&o.stdout) {
                Ok(j) => j["error"]
                    .as_str()
                    .map_or(Ok(figures(&j)), |e| Err(e.to_string())),
                Err(e) => Err(HarnessError::BadOutput(e).to_string()),
            },
            Ok(o) => {
                let err = String::from_utf8_lossy(&o.stderr);
                Err(err.lines().last().unwrap_or("python failed").to_string())
            }
            Err(source) => Err(HarnessError::io("start", &py)(source).to_string()),
        };
        (arm, r)
    })
    .to_vec()
}

pub fn run(a: &RunArgs, work: &Path) -> Result<FreeTable> {
    let secs = if a.quick { 0.1 } else { 0.5 };
    let exe =
        std::env::current_exe().map_err(HarnessError::io("locate", "the harness executable"))?;
    let mut rows = Vec::new();
    let pb = progress(
        (BATCHES.len() * (RUST_IMPLS.len() + 2) * a.repeats) as u64,
        "sampler",
    );
    for &batch in BATCHES {
        let mut arms: Vec<ArmRow> = Vec::new();
        for rep in 0..a.repeats {
            for k in 0..RUST_IMPLS.len() {
                let imp = RUST_IMPLS[(k + rep) % RUST_IMPLS.len()];
                let out = work.join(format!("sampler-{imp}-{batch}.json"));
                let _ = std::fs::remove_file(&out);
                let cell = SamplerCellArgs {
                    arm: imp.to_string(),
                    batch,
                    seconds: secs,
                    out: out.clone(),
                };
                let st = Command::new(&exe).args(cell.argv()).status();
                let res = std::fs::read(&out)
                    .ok()
                    .and_then(|b| serde_json::from_slice::<Value>(&b).ok());
                let r = res
                    .map(|j| figures(&j))
                    .ok_or_else(|| format!("cell failed: {st:?}"));
                add_repeat(&mut arms, imp, "rust", r);
                pb.inc(1);
            }
            for (arm, r) in python_arms(batch, secs) {
                add_repeat(&mut arms, arm, "python", r);
                pb.inc(1);
            }
        }
        let med = |name: &str| {
            arms.iter()
                .find(|x| x.0 == name)
                .map(|x| median(&x.2))
                .unwrap_or(f64::NAN)
        };
        let rust_base = med("smallrng-uniform");
        let py_base = med("numpy-default_rng-integers");
        for (name, lang, vals, ok, note) in &arms {
            // A failed or unverified repeat leaves the row no figure from the others.
            let per = if *ok { median(vals) } else { f64::NAN };
            let base = if *lang == "rust" { rust_base } else { py_base };
            let vs = if *lang == "rust" {
                "SmallRng"
            } else {
                "numpy default_rng"
            };
            rows.push(json!({
                "row": format!("{name} ({lang}) b{batch}"),
                "impl": name,
                "language": lang,
                "batch": batch,
                "per batch µs": if per.is_finite() { json!(per * 1e6) } else { Value::Null },
                "ns/index": if per.is_finite() { json!(per * 1e9 / batch as f64) } else { Value::Null },
                "ratio": if per.is_finite() && base.is_finite() { json!(format!("{:.2}x vs {vs}", base / per)) } else { Value::Null },
                "sd µs": if *ok { sample_sd(&vals.iter().map(|v| v * 1e6).collect::<Vec<_>>()) } else { f64::NAN },
                // false: a repeat failed or an index was out of range or repeated; null: the
                // arm never ran.
                "verified": if !*ok { json!(false) } else if vals.is_empty() { Value::Null } else { json!(true) },
                "note": note,
            }));
        }
    }
    pb.finish_and_clear();
    Ok(FreeTable {
        name: Table::Sampler,
        title: "Index generation, 1M ids: loaderx sampler vs SmallRng uniform draws vs a materialized permutation (Rust), and loaderx Sampler.next() vs numpy default_rng().integers (Python); ratio > 1 means faster than the baseline".into(),
        synthetic: false,
        columns: crate::model::columns("impl | language | batch | per batch µs | sd µs | ns/index | ratio | verified"),
        rows,
    })
}
