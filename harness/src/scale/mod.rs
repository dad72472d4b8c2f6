//! The `scale` table: stores of 10^6-10^9 tiny records (Dense int32 `[2]`, Ragged uint16 of 1-8
//! values) as a dataset of parts and as one container (the eager-index baseline), locally and on
//! SeaweedFS, with Lance, Parquet and MosaicML Streaming beside them, and a 1,000-part dataset
//! written by 8 concurrent writers and committed once. `harness/python/scale_bench.py` measures
//! every cell in a fresh process and verifies every batch; this module turns its JSON rows into
//! the table and its goals.

use std::path::Path;

use serde_json::{Value, json};

use crate::config::{self, RunArgs};
use crate::error::Result;
use crate::model::{FreeTable, columns, ratio};
use crate::table::Table;

/// The goals: RSS growth at open, and steady gathers against the eager index.
const OPEN_RSS_MIB: f64 = 32.0;
const GATHER_FRACTION: f64 = 0.9;

pub fn run(a: &RunArgs, work: &Path) -> Result<FreeTable> {
    // Quick (CI): 10^6 only, ~60 s with SeaweedFS and the writers' row; 10^7 adds ~2 min. The
    // full run adds 10^9 Dense records (10^4 parts; locally and on SeaweedFS).
    let (sizes, giant) = if a.quick {
        ("1000000", "0")
    } else {
        ("1000000,10000000,100000000", "1000000000")
    };
    let out = work.join("scale.json");
    let mut cmd = config::python_command("scale_bench.py")?;
    cmd.args([
        "--sizes", sizes, "--giant", giant, "--remote", "--peers", "--work",
    ])
    .arg(work)
    .arg("--json")
    .arg(&out);
    let rows: Vec<Value> = crate::child::script_json(&mut cmd, &out)?;
    Ok(table(&rows))
}

/// The table from the script's rows (`row`, `layout`, `records`, `where`, `parts`, `open_ms`,
/// `open_rss_mib`, `epoch_rss_mib`, `first_batch_ms`, `gathers_per_s`, `write_s`, `commit_ms`,
/// `verified`, `note`, `error`).
fn table(rows: &[Value]) -> FreeTable {
    let single = |r: &Value| {
        rows.iter().find(|s| {
            s["row"] == "loaderx-single"
                && s["layout"] == r["layout"]
                && s["records"] == r["records"]
                && s["where"] == r["where"]
        })
    };
    let (mut rss, mut gathers) = ((0, 0), (0, 0));
    let mut out = Vec::new();
    for r in rows {
        let name = r["row"].as_str().unwrap_or("");
        let base = single(r).filter(|_| name != "loaderx-single" && r["commit_ms"].is_null());
        let f = |k: &str| r[k].as_f64();
        let b = |k: &str| base.and_then(|s| s[k].as_f64());
        if name == "loaderx-parts" {
            if let Some(m) = f("open_rss_mib") {
                rss = (rss.0 + usize::from(m <= OPEN_RSS_MIB), rss.1 + 1);
            }
            if let (Some(g), Some(s)) = (f("gathers_per_s"), b("gathers_per_s")) {
                gathers = (
                    gathers.0 + usize::from(g >= GATHER_FRACTION * s),
                    gathers.1 + 1,
                );
            }
        }
        let note = match (&r["error"], &r["note"]) {
            (Value::String(e), _) => json!(e),
            (_, n) => n.clone(),
        };
        out.push(json!({
            "row": format!("{name} {} {} {}", r["layout"].as_str().unwrap_or(""),
                           r["records"], r["where"].as_str().unwrap_or("")),
            "impl": name,
            "where": r["where"],
            "layout": r["layout"],
            "records": r["records"],
            "parts": r["parts"],
            "open ms": f("open_ms"),
            "open RSS MiB": f("open_rss_mib"),
            "batches": r["batches"],
            "RSS after the batches MiB": f("epoch_rss_mib"),
            "first batch ms": f("first_batch_ms"),
            "gathers/s": f("gathers_per_s"),
            "open vs single": ratio(f("open_ms"), b("open_ms")),
            "gathers vs single": ratio(f("gathers_per_s"), b("gathers_per_s")),
            "write s": f("write_s"),
            "commit ms": f("commit_ms"),
            "verified": r["verified"],
            "note": note,
            "repeats": r["repeats"],
        }));
    }
    let goal = |what: &str, (met, of): (usize, usize)| {
        format!("{what}: met in {met} of {of} dataset rows")
    };
    FreeTable {
        name: Table::Scale,
        title: format!(
            "Scale: tiny records (Dense int32[2]; Ragged uint16 of 1-8 values; codec raw) as a \
             dataset of parts (10^5 records a part) and as one container (the eager-index \
             baseline), 10^6-10^8 records and, in a full run, 10^9 Dense ones (10^4 parts, also \
             on SeaweedFS, written there by 8 processes), each cell in a fresh process: open, RSS \
             growth after open and after the first batch and 1,000 or more random batches of 256 (at \
             least 0.5 s of them; on SeaweedFS, no node cache: at most 2 s), the first batch, steady gathers/s of 256 \
             random records (the median of ten consecutive groups' rates; every batch verified); \
             locally to 10^8 records the loaderx cells run 3 times, alternating, the median run \
             shown. Lance, Parquet and MosaicML Streaming (to 10^7 records) on the \
             same records, local (at most 3 s of batches); one pass. Goals: {}; {}",
            goal(&format!("open RSS <= {OPEN_RSS_MIB} MiB"), rss),
            goal(
                &format!("gathers >= {GATHER_FRACTION}x one container"),
                gathers
            ),
        ),
        synthetic: false,
        columns: columns(
            "impl | where | layout | records | parts | open ms | open RSS MiB | batches | RSS \
             after the batches MiB | first batch ms | gathers/s | open vs single | gathers vs \
             single | write s | commit ms | verified | note",
        ),
        rows: out,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_become_the_table_with_ratios_against_one_container_and_goals() {
        let row = |name: &str, open: f64, rss: f64, gps: f64| {
            json!({"row": name, "layout": "dense", "records": 1000000, "where": "local",
                   "parts": 10, "open_ms": open, "open_rss_mib": rss, "epoch_rss_mib": rss,
                   "first_batch_ms": 0.1, "gathers_per_s": gps, "verified": true})
        };
        let mut other = row("loaderx-single", 1.0, 1.0, 1.0);
        other["where"] = json!("seaweedfs");
        let rows = vec![
            row("loaderx-parts", 2.0, 40.0, 850.0),
            row("loaderx-single", 8.0, 20.0, 1000.0),
            row("lance", 1.0, 3.0, 100.0),
            other,
            json!({"row": "loaderx-8-writers", "layout": "dense", "records": 1000000,
                   "where": "local", "commit_ms": 12.5, "verified": true,
                   "error": "cell exited 1: boom"}),
        ];
        let t = table(&rows);
        assert_eq!(t.rows[0]["open vs single"], "0.25x");
        assert_eq!(t.rows[0]["gathers vs single"], "0.85x");
        assert_eq!(t.rows[2]["gathers vs single"], "0.10x");
        assert_eq!(
            t.rows[1]["open vs single"],
            Value::Null,
            "no ratio to itself"
        );
        assert_eq!(
            t.rows[3]["open vs single"],
            Value::Null,
            "no local baseline"
        );
        assert_eq!(t.rows[4]["open vs single"], Value::Null, "the writers' row");
        assert_eq!(t.rows[4]["commit ms"], 12.5);
        assert_eq!(t.rows[4]["note"], "cell exited 1: boom");
        assert_eq!(t.rows[0]["row"], "loaderx-parts dense 1000000 local");
        for goal in [
            "open RSS <= 32 MiB: met in 0 of 1",
            "one container: met in 0 of 1",
        ] {
            assert!(t.title.contains(goal), "{goal}: {}", t.title);
        }
        let t = table(&[row("loaderx-parts", 2.0, 4.0, 950.0), rows[1].clone()]);
        assert!(t.title.contains("MiB: met in 1 of 1"), "{}", t.title);
        assert!(t.title.contains("container: met in 1 of 1"), "{}", t.title);
        assert_eq!(t.columns.len(), 17);
        assert!(
            t.columns.iter().all(|c| t.rows[0].get(c).is_some()),
            "{:?}",
            t.columns
        );
    }
}
