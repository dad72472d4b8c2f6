//! The `convert` table: Oxford-Pet and WikiText converted by Ray Data jobs at 1 and 2 workers into
//! loaderx (`ZrecordDatasink`) and Lance (Ray's Lance sink), locally and on SeaweedFS, beside one
//! process writing the same transforms without Ray. `harness/python/convert_bench.py` runs the
//! cells and verifies every record; this module turns its JSON rows into the table and its goals.

use std::path::Path;

use serde_json::{Value, json};

use crate::config::{self, RunArgs};
use crate::error::Result;
use crate::model::{FreeTable, columns, ratio};
use crate::table::Table;

/// The goals: rows/s against Lance on the same Ray job, and 2 workers against 1 (text).
const X_LANCE: f64 = 1.0;
const X_SCALING: f64 = 1.8;

pub fn run(a: &RunArgs, work: &Path) -> Result<FreeTable> {
    let out = work.join("convert.json");
    let mut cmd = config::python_command("convert_bench.py")?;
    cmd.arg("--repeats")
        .arg(a.repeats.to_string())
        .arg("--work")
        .arg(work)
        .arg("--json")
        .arg(&out);
    // Quick: 40 images at 64 px, 1,000 lines (the full run: all 1,065 images at 128 px, 8,000).
    let sizes: &[&str] = if a.quick {
        &["--pets", "40", "--size", "64", "--lines", "1000"]
    } else {
        &["--pets", "1065", "--size", "128", "--lines", "8000"]
    };
    cmd.args(sizes);
    if let Some(p) = &a.pets {
        cmd.arg("--pets-dir").arg(p);
    }
    if let Some(t) = &a.text {
        cmd.arg("--text-dir").arg(t);
    }
    let rows: Vec<Value> = crate::child::script_json(&mut cmd, &out)?;
    Ok(table(&rows))
}

/// The table from the script's rows: `row` (`loaderx`, `lance`, `single-process`), `job`, `where`,
/// `workers`, `rows`, `seconds`, `rows_per_s`, `rows_per_s_each`, `mib_written`, `mib_s`,
/// `peak_rss_mib`, `verified`, `note`, `error`, `repeats` (kept in the row, not a column).
fn table(rows: &[Value]) -> FreeTable {
    let (mut lance, mut scaling) = ((0, 0), (0, 0));
    let tally = |t: &mut (usize, usize), met: bool| *t = (t.0 + usize::from(met), t.1 + 1);
    // The rows/s of `row`'s cell at `workers` for `r`'s job and target.
    let rate = |row: &str, r: &Value, workers: u64| {
        let same = |o: &&Value| ["job", "where"].iter().all(|k| o[*k] == r[*k]);
        let cell = rows.iter().filter(same);
        cell.filter(|o| o["row"] == row && o["workers"] == workers)
            .find_map(|o| o["rows_per_s"].as_f64())
    };
    let mut out = Vec::new();
    for r in rows {
        let f = |k: &str| r[k].as_f64();
        let w = r["workers"].as_u64().unwrap_or(0);
        let ray = r["row"] != "single-process";
        let vs_lance = rate("lance", r, w).filter(|_| r["row"] == "loaderx");
        let one = rate(r["row"].as_str().unwrap_or(""), r, 1).filter(|_| ray && w > 1);
        if let (Some(v), Some(l)) = (f("rows_per_s"), vs_lance) {
            tally(&mut lance, v >= X_LANCE * l);
        }
        let text = r["row"] == "loaderx" && r["job"] == "text";
        if let (Some(v), Some(o), true) = (f("rows_per_s"), one, text) {
            tally(&mut scaling, v >= X_SCALING * o);
        }
        let note = match (&r["error"], &r["note"]) {
            (Value::String(e), _) => json!(e),
            (_, n) => n.clone(),
        };
        out.push(json!({
            "row": format!("{} {} {} w{w}", r["row"].as_str().unwrap_or(""),
                           r["job"].as_str().unwrap_or(""), r["where"].as_str().unwrap_or("")),
            "impl": r["row"], "job": r["job"], "where": r["where"], "workers": r["workers"],
            "rows": r["rows"], "s": f("seconds"), "rows/s": f("rows_per_s"),
            "rows/s each repeat": r["rows_per_s_each"], "MiB written": f("mib_written"),
            "MiB/s written": f("mib_s"), "peak RSS MiB": f("peak_rss_mib"),
            "x Lance": ratio(f("rows_per_s"), vs_lance),
            "x 1 worker": ratio(f("rows_per_s"), one),
            "x single-process": ratio(f("rows_per_s"), rate("single-process", r, 1).filter(|_| ray)),
            "verified": r["verified"], "note": note, "repeats": r["repeats"],
        }));
    }
    let goal = |what: String, (met, of)| format!("{what}: met in {met} of {of}");
    FreeTable {
        name: Table::Convert,
        title: format!(
            "Convert: Oxford-Pet images (decoded, resized to uint8 [3,S,S], int32 breed label) and \
             WikiText lines (GPT-2 BPE to int32 tokens) converted by a Ray Data job (read, \
             transform and write fused, 4 x workers blocks) into loaderx (ZrecordDatasink, zstd) \
             or Lance (Ray's Lance sink, what write_lance builds), locally or on SeaweedFS on \
             loopback; single-process: one process, the same transforms, DenseWriter / \
             RaggedWriter, no Ray. Time: the whole write_datasink call (commit included), fastest \
             of the repeats (each listed); MiB/s: bytes written (files or objects) over that time; \
             peak RSS: the highest VmHWM of one worker process during a write task of the job \
             (reset as each task starts). Every record read back and compared with the driver's \
             own transforms. Goals: {}; {}",
            goal(
                format!(">= {X_LANCE}x Lance's rows/s on the same Ray job"),
                lance
            ),
            goal(
                format!(">= {X_SCALING}x the 1-worker rows/s at 2 workers (text)"),
                scaling
            ),
        ),
        synthetic: false,
        columns: columns(
            "impl | job | where | workers | rows | s | rows/s | rows/s each repeat | MiB written | \
             MiB/s written | peak RSS MiB | x Lance | x 1 worker | x single-process | verified | note",
        ),
        rows: out,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(name: &str, job: &str, workers: u64, rate: f64) -> Value {
        json!({"row": name, "job": job, "where": "local", "workers": workers, "rows": 100,
               "seconds": 100.0 / rate, "rows_per_s": rate, "rows_per_s_each": "x", "mib_written": 1.0,
               "mib_s": 2.0, "peak_rss_mib": 300.0, "verified": true, "repeats": [{"rep": 0}]})
    }

    #[test]
    fn rows_join_lance_one_worker_and_single_process_and_count_the_goals() {
        let rows = vec![
            row("single-process", "text", 1, 50.0),
            row("loaderx", "text", 1, 100.0),
            row("lance", "text", 1, 80.0),
            row("loaderx", "text", 2, 190.0),
            row("lance", "text", 2, 200.0),
            json!({"row": "lance", "job": "pets", "where": "local", "workers": 1, "verified": null,
                   "note": "not measured: pylance not installed"}),
        ];
        let t = table(&rows);
        assert_eq!(t.rows[1]["x Lance"], "1.25x");
        assert_eq!(t.rows[1]["x single-process"], "2.00x");
        assert_eq!(t.rows[1]["x 1 worker"], Value::Null);
        assert_eq!(t.rows[3]["x 1 worker"], "1.90x");
        assert_eq!(t.rows[3]["x Lance"], "0.95x");
        assert_eq!(t.rows[4]["x 1 worker"], "2.50x");
        assert_eq!(t.rows[0]["x single-process"], Value::Null);
        assert_eq!(t.rows[5]["note"], "not measured: pylance not installed");
        assert_eq!(t.rows[3]["repeats"][0]["rep"], 0);
        assert!(
            t.title
                .contains("Lance's rows/s on the same Ray job: met in 1 of 2"),
            "{}",
            t.title
        );
        assert!(
            t.title.contains("at 2 workers (text): met in 1 of 1"),
            "{}",
            t.title
        );
        assert!(
            t.columns.iter().all(|c| t.rows[1].get(c).is_some()),
            "{:?}",
            t.columns
        );
    }
}
