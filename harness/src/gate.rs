//! Regression gate (`harness gate`): compares two `results.json` files.
//!
//! Fails when (1) any cell of CURRENT is unverified or failed, (2) a zrecord row falls behind a
//! peer it beat in BASELINE (by more than a 20 % noise band, current < 0.8 x peer: quick-mode cells
//! run once on a shared machine, and some pairs differ by only 5 % in the baseline), or (3) the
//! `zrecord-raw` row's `x_memcpy` drops more than 25 % below BASELINE. Rule 3 holds for raw rows
//! only: they are memory-bound like the memcpy-limit row they are divided by, while a compressed
//! row is bound by decoding, so its `x_memcpy` moves with the memcpy row's noise, not with zrecord
//! (compressed rows are still held to rule 2).

use std::path::PathBuf;
use std::process::ExitCode;

use serde_json::Value;

use crate::model::{SCHEMA, Status};

fn load(p: &PathBuf) -> Result<Value, String> {
    let b = std::fs::read(p).map_err(|e| format!("read {}: {e}", p.display()))?;
    let v: Value = serde_json::from_slice(&b).map_err(|e| format!("parse {}: {e}", p.display()))?;
    if v.get("schema").and_then(Value::as_str) != Some(SCHEMA) {
        return Err(format!("{}: not a {SCHEMA} file", p.display()));
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

/// The list of gate violations (empty = pass).
pub fn check(base: &Value, cur: &Value) -> Vec<String> {
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
            if failed || r.get("verified") == Some(&Value::Bool(false)) {
                let label = r
                    .get("backend")
                    .or_else(|| r.get("row"))
                    .or_else(|| r.get("loader"))
                    .map(Value::to_string)
                    .unwrap_or_default();
                v.push(format!("{tname}: {label} is unverified or failed"));
            }
        }
        let Some(bt) = base_tables.iter().find(|b| b.get("name") == t.get("name")) else {
            continue;
        };
        let cur_rows = rows(t);
        let base_rows = rows(bt);
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
                v.push(format!(
                    "{tname}: {zname} x_memcpy fell from {xb:.3} to {xc:.3} (more than 25 %)"
                ));
            }
            for peer in base_rows
                .iter()
                .filter(|r| !name(r).starts_with("zrecord-") && name(r) != "memcpy-limit")
            {
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
                    v.push(format!("{tname}: {zname} ({zc:.0} MiB/s) fell behind {pname} ({pcg:.0} MiB/s), which it beat in the baseline"));
                }
            }
        }
    }
    v
}

pub fn main(base: &PathBuf, cur: &PathBuf) -> Result<ExitCode, String> {
    let b = load(base)?;
    let c = load(cur)?;
    let violations = check(&b, &c);
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
        assert_eq!(check(&zstd(0.2, 5000.0), &zstd(0.2, 2000.0)).len(), 1);
    }
}
