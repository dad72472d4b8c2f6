//! Regression gate (`harness gate`): compares two `results.json` files.
//!
//! Fails when (1) any cell of CURRENT is unverified or failed, (2) a zrecord row falls behind a
//! peer of its kind (raw with raw, compressed with compressed) it beat in BASELINE (by more than
//! a 20 % noise band, current < 0.8 x peer: quick-mode cells run once on a shared machine, and
//! some pairs differ by only 5 % in the baseline), or (3) the
//! `zrecord-raw` row's `x_memcpy` drops more than 25 % below BASELINE. Rule 3 holds for raw rows
//! only: they are memory-bound like the memcpy-limit row they are divided by, while a compressed
//! row is bound by decoding, so its `x_memcpy` moves with the memcpy row's noise, not with zrecord
//! (compressed rows are still held to rule 2). (4) In the loader tables, the loaderx Python row
//! falls behind a peer loader row it beat in BASELINE (samples/s, same 20 % band), rows matched by
//! their `arm`. A peer row that was skipped or did not run (no samples/s) is not compared; a row
//! whose batches differed from the source (`verified: false`) fails rule 1, and so does a loaderx
//! loader row (bare gather, Rust or Python loader) that did not run or was not verified.
//!
//! Rules 2-4 are speed rules, and a quick cell runs once on a shared machine: one cell a neighbour
//! slowed by a third reads like a regression. So a speed violation is confirmed before it fails
//! CI: `--retry-file FILE` writes the tables with speed violations (and only when no rule-1
//! violation was found) for `scripts/ci-gate.sh` to measure once more, and the gate of that second
//! run decides. A real regression fails both runs; a verification failure is never retried.

use std::path::PathBuf;
use std::process::ExitCode;

use serde_json::Value;

use crate::error::{HarnessError, Result};
use crate::model::{SCHEMA, Status};

fn load(p: &PathBuf) -> Result<Value> {
    let b = std::fs::read(p).map_err(HarnessError::io("read", p))?;
    let v: Value = serde_json::from_slice(&b).map_err(|source| HarnessError::Parse {
        path: p.clone(),
        source,
    })?;
    let schema = v.get("schema").and_then(Value::as_str);
    if schema != Some(SCHEMA) {
        return Err(HarnessError::Schema {
            path: p.clone(),
            expected: SCHEMA,
            found: schema.map(str::to_string),
        });
    }
    Ok(v)
}

fn rows(t: &Value) -> Vec<&Value> {
    t.get("rows")
        .and_then(Value::as_array)
        .map(|v| v.iter().collect())
        .unwrap_or_default()
}

fn num(r: &Value, k: &str) -> Option<f64> {
    r.get(k).and_then(Value::as_f64)
}

fn find<'a>(rs: &[&'a Value], b: &str) -> Option<&'a Value> {
    rs.iter().find(|r| name(r) == b).copied()
}

fn name(r: &Value) -> &str {
    r.get("backend").and_then(Value::as_str).unwrap_or("")
}

fn arm(r: &Value) -> &str {
    r.get("arm").and_then(Value::as_str).unwrap_or("")
}

/// One gate violation: the table it is in, whether it is a speed rule (2-4, confirmed by a rerun)
/// or a rule-1 fact (unverified or failed: never retried), and the sentence CI prints.
#[derive(Debug, Clone, PartialEq)]
pub struct Violation {
    pub table: String,
    pub speed: bool,
    pub msg: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.msg)
    }
}

fn speed(table: &str, msg: String) -> Violation {
    Violation {
        table: table.to_string(),
        speed: true,
        msg,
    }
}

/// The tables a rerun should measure again: those with speed violations, or none at all when a
/// rule-1 violation (a wrong or failed cell) makes the verdict final.
pub fn retry_tables(violations: &[Violation]) -> Vec<String> {
    if violations.iter().any(|v| !v.speed) {
        return Vec::new();
    }
    let mut t: Vec<String> = violations.iter().map(|v| v.table.clone()).collect();
    t.sort();
    t.dedup();
    t
}

/// Rule 4: the loaderx Python row against the peer rows of one loader table.
fn loader_rule(tname: &str, base_rows: &[&Value], cur_rows: &[&Value], v: &mut Vec<Violation>) {
    const LX: &str = "python-loaderx-w4";
    let by_arm = |rs: &[&Value], a: &str| {
        rs.iter()
            .find(|r| arm(r) == a)
            .and_then(|r| num(r, "samples/s"))
    };
    let (Some(lb), Some(lc)) = (by_arm(base_rows, LX), by_arm(cur_rows, LX)) else {
        return;
    };
    for peer in base_rows.iter().filter(|r| {
        let a = arm(r);
        !a.is_empty() && !a.contains("loaderx") && a != "bare-gather" && a != "memcpy-limit"
    }) {
        let pname = arm(peer);
        let (Some(pb), Some(pc)) = (num(peer, "samples/s"), by_arm(cur_rows, pname)) else {
            continue;
        };
        if lb > pb && lc < 0.8 * pc {
            v.push(speed(tname, format!("{tname}: loaderx Python ({lc:.0} samples/s) fell behind {pname} ({pc:.0} samples/s), which it beat in the baseline")));
        }
    }
}

/// The list of gate violations (empty = pass).
pub fn check(base: &Value, cur: &Value) -> Vec<Violation> {
    let mut v = Vec::new();
    let empty = Vec::new();
    let cur_tables = cur
        .get("tables")
        .and_then(Value::as_array)
        .unwrap_or(&empty);
    let base_tables = base
        .get("tables")
        .and_then(Value::as_array)
        .unwrap_or(&empty);
    for t in cur_tables {
        let tname = t.get("name").and_then(Value::as_str).unwrap_or("?");
        for r in rows(t) {
            let failed = r
                .get("status")
                .and_then(Value::as_str)
                .and_then(Status::from_name)
                == Some(Status::Failed);
            // loaderx's own loader rows must have run and been verified: a crash leaves
            // `verified` unset, which for a peer means "did not run" but for loaderx is a failure.
            let own_loader = r
                .get("arm")
                .and_then(Value::as_str)
                .is_some_and(is_own_loader_arm);
            let unverified = r.get("verified") == Some(&Value::Bool(false))
                || (own_loader && r.get("verified") != Some(&Value::Bool(true)));
            if failed || unverified {
                let label = r
                    .get("backend")
                    .or_else(|| r.get("row"))
                    .or_else(|| r.get("loader"))
                    .map(Value::to_string)
                    .unwrap_or_default();
                v.push(Violation {
                    table: tname.to_string(),
                    speed: false,
                    msg: format!("{tname}: {label} is unverified or failed"),
                });
            }
        }
        let Some(bt) = base_tables.iter().find(|b| b.get("name") == t.get("name")) else {
            continue;
        };
        let cur_rows = rows(t);
        let base_rows = rows(bt);
        loader_rule(tname, &base_rows, &cur_rows, &mut v);
        for zr in cur_rows.iter().filter(|r| name(r).starts_with("zrecord-")) {
            let zname = name(zr);
            let Some(zb) = find(&base_rows, zname) else {
                continue;
            };
            if let (true, Some(xc), Some(xb)) = (
                zname == "zrecord-raw",
                num(zr, "x_memcpy"),
                num(zb, "x_memcpy"),
            ) && xc < 0.75 * xb
            {
                v.push(speed(
                    tname,
                    format!(
                        "{tname}: {zname} x_memcpy fell from {xb:.3} to {xc:.3} (more than 25 %)"
                    ),
                ));
            }
            for peer in base_rows.iter().filter(|r| {
                !name(r).starts_with("zrecord-")
                    && !name(r)
                        .parse::<competitors::Backend>()
                        .is_ok_and(|b| b.is_reference())
                    && is_raw(name(r)) == is_raw(zname)
            }) {
                let pname = name(peer);
                let (Some(zbg), Some(pbg)) = (num(zb, "gather_mib_s"), num(peer, "gather_mib_s"))
                else {
                    continue;
                };
                if zbg <= pbg {
                    continue;
                }
                let Some(pc) = find(&cur_rows, pname) else {
                    continue;
                };
                if let (Some(zc), Some(pcg)) = (num(zr, "gather_mib_s"), num(pc, "gather_mib_s"))
                    && zc < 0.8 * pcg
                {
                    v.push(speed(tname, format!("{tname}: {zname} ({zc:.0} MiB/s) fell behind {pname} ({pcg:.0} MiB/s), which it beat in the baseline")));
                }
            }
        }
    }
    v
}

/// Whether a store row reads records as stored (`*-raw`): memory-bound, like the memcpy row. The
/// others decode (zstd, gzip) and are bound by the CPU. Rule 2 pairs a zrecord row only with peers
/// of its own kind: how a decoder compares with a memory-bound copy depends on the machine's
/// balance of core speed and memory bandwidth (from the Xeon VM's baseline to quick runs on a Zen 4
/// VM, HDF5's raw dense-token reads moved 2.7x and zrecord's zstd reads 1.5-1.9x), so such a pair
/// measures the machine, not a regression.
fn is_raw(backend: &str) -> bool {
    backend.ends_with("-raw")
}

/// The loader-table arms that are loaderx itself (the bare gather, Rust and Python loaders).
fn is_own_loader_arm(arm: &str) -> bool {
    arm == "memcpy-limit"
        || arm == "bare-gather"
        || arm.starts_with("loaderx-")
        || arm.starts_with("python-loaderx")
}

pub fn main(base: &PathBuf, cur: &PathBuf, retry_file: Option<&PathBuf>) -> Result<ExitCode> {
    let b = load(base)?;
    let c = load(cur)?;
    let violations = check(&b, &c);
    if let Some(f) = retry_file {
        let t = retry_tables(&violations).join(",");
        std::fs::write(f, &t).map_err(HarnessError::io("write", f))?;
    }
    if violations.is_empty() {
        println!("gate: pass ({} vs {})", cur.display(), base.display());
        Ok(ExitCode::SUCCESS)
    } else {
        for x in &violations {
            println!("gate: FAIL: {x}");
        }
        Ok(ExitCode::from(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn doc(zr: f64, peer: f64, x: f64, verified: bool) -> Value {
        json!({"schema": SCHEMA, "tables": [{"name": "dense-vision", "rows": [
            {"backend": "zrecord-raw", "gather_mib_s": zr, "x_memcpy": x, "verified": verified, "status": "ok"},
            {"backend": "lmdb-raw", "gather_mib_s": peer, "x_memcpy": null, "verified": true, "status": "ok"},
            {"backend": "memcpy-limit", "gather_mib_s": 10000.0, "x_memcpy": 1.0, "verified": true, "status": "ok"}
        ]}]})
    }

    #[test]
    fn gate_rules() {
        let base = doc(5000.0, 3000.0, 0.9, true);
        assert!(check(&base, &doc(5100.0, 3000.0, 0.9, true)).is_empty());
        assert_eq!(
            check(&base, &doc(5000.0, 3000.0, 0.9, false)).len(),
            1,
            "unverified cell"
        );
        assert_eq!(
            check(&base, &doc(2000.0, 3000.0, 0.9, true)).len(),
            1,
            "fell behind a beaten peer"
        );
        assert_eq!(
            check(&base, &doc(5000.0, 3000.0, 0.6, true)).len(),
            1,
            "x_memcpy dropped > 25 %"
        );
        // Within the noise band: not a regression.
        assert!(check(&base, &doc(2900.0, 3000.0, 0.8, true)).is_empty());
        // A compressed row's x_memcpy is not gated (decode-bound), its peers still are.
        let zstd = |x: f64, g: f64| {
            let mut d = doc(5000.0, 3000.0, 0.9, true);
            d["tables"][0]["rows"][0]["backend"] = json!("zrecord-zstd");
            d["tables"][0]["rows"][0]["x_memcpy"] = json!(x);
            d["tables"][0]["rows"][0]["gather_mib_s"] = json!(g);
            d
        };
        assert!(check(&zstd(0.2, 5000.0), &zstd(0.1, 5000.0)).is_empty());
        // A compressed zrecord row is not paired with a raw peer (decode-bound vs memory-bound)...
        assert!(check(&zstd(0.2, 5000.0), &zstd(0.2, 2000.0)).is_empty());
        // ...but with a compressed one.
        let zstd_peer = |g: f64| {
            let mut d = zstd(0.2, g);
            d["tables"][0]["rows"][1]["backend"] = json!("lmdb-zstd");
            d
        };
        assert_eq!(check(&zstd_peer(5000.0), &zstd_peer(2000.0)).len(), 1);
    }

    fn loader_doc(lx: f64, torch: Option<f64>, torch_verified: Value) -> Value {
        json!({"schema": SCHEMA, "tables": [{"name": "loader-dense-vision", "rows": [
            {"loader": "view.gather loop (Rust, no loader)", "arm": "bare-gather", "samples/s": 1e6, "verified": true},
            {"loader": "loaderx Python, workers=4, prefetch=4", "arm": "python-loaderx-w4", "samples/s": lx, "verified": true},
            {"loader": "torch DataLoader, 4 workers", "arm": "torch-dataloader-w4", "samples/s": torch, "verified": torch_verified},
            {"loader": "webdataset", "arm": "webdataset", "samples/s": null, "verified": null}
        ]}]})
    }

    #[test]
    fn loader_rows() {
        let base = loader_doc(50_000.0, Some(10_000.0), json!(true));
        assert!(check(&base, &loader_doc(48_000.0, Some(11_000.0), json!(true))).is_empty());
        // A peer that did not run (not installed): skipped, not a violation.
        assert!(check(&base, &loader_doc(48_000.0, None, Value::Null)).is_empty());
        // loaderx's own row that did not run (crashed: no samples, no verdict) fails rule 1.
        let mut crashed = loader_doc(48_000.0, Some(11_000.0), json!(true));
        crashed["tables"][0]["rows"][1]["verified"] = Value::Null;
        crashed["tables"][0]["rows"][1]["samples/s"] = Value::Null;
        let v = check(&base, &crashed);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].msg.contains("loaderx Python"), "{v:?}");
        assert!(retry_tables(&v).is_empty(), "a rule-1 violation is final");
        // A peer whose batches differed from the source is not a result: rule 1.
        assert_eq!(
            check(&base, &loader_doc(48_000.0, None, json!(false))).len(),
            1
        );
        // loaderx fell behind the peer it beat.
        let v = check(&base, &loader_doc(7_000.0, Some(10_000.0), json!(true)));
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].msg.contains("torch-dataloader-w4"), "{v:?}");
        assert_eq!(retry_tables(&v), vec!["loader-dense-vision".to_string()]);
        // A peer that won in the baseline is not gated.
        let peer_won = loader_doc(5_000.0, Some(10_000.0), json!(true));
        assert!(check(&peer_won, &loader_doc(4_000.0, Some(10_000.0), json!(true))).is_empty());
    }
}
