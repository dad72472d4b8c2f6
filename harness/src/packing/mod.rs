//! The `packing` table: the token corpus's Ragged records packed into `[batch, seq_len]` rows
//! (seq_len 1,024 and 4,096, batch 8 and 32) by loaderx's `Loader.pack` (concat, first-fit), a
//! plain NumPy concat-split, Grain's packers (when installed) and the memcpy limit of the output
//! bytes. One Python process runs every cell (`harness/python/packing_bench.py`), verifies each
//! row on its own output and writes the rows as JSON; this module turns them into the table and
//! its goals.

use std::path::Path;

use serde_json::{Value, json};

use crate::config::{self, RunArgs};
use crate::corpus::Corpora;
use crate::error::{HarnessError, Result};
use crate::model::{FreeTable, columns};
use crate::table::Table;

/// The goals the issue set: loaderx over Grain at equal or less padding, over the memcpy
/// limit, and first-fit padding at seq_len 4,096.
const GRAIN_FACTOR: f64 = 50.0;
const MEMCPY_FRACTION: f64 = 0.5;
const PADDING_4096: f64 = 0.02;

pub fn run(a: &RunArgs, corpora: &Corpora, work: &Path) -> Result<FreeTable> {
    let corpus = corpora
        .tokens
        .as_ref()
        .map(|p| p.dir.clone())
        .ok_or_else(|| HarnessError::missing("the token corpus"))?;
    let secs = if a.quick { "0.3" } else { "2" };
    let mut runs = Vec::new();
    for _ in 0..a.repeats.max(1) {
        runs.push(one_pass(&corpus, secs, &work.join("packing.json"))?);
    }
    let synthetic = corpora.tokens.as_ref().is_some_and(|p| p.synthetic);
    Ok(table(&merge(&runs), synthetic))
}

/// One run of the script over every cell: its rows.
fn one_pass(corpus: &Path, secs: &str, out: &Path) -> Result<Vec<Value>> {
    let mut cmd = config::python_command("packing_bench.py")?;
    cmd.arg("--corpus")
        .arg(corpus)
        .args(["--seconds", secs, "--json"])
        .arg(out);
    crate::child::script_json(&mut cmd, out)
}

/// The rows of every pass as one row per cell: the median of its tokens/s over the passes, every
/// pass's figure kept (`tokens_per_s_repeats`), verified only when every pass verified it.
fn merge(runs: &[Vec<Value>]) -> Vec<Value> {
    let Some(first) = runs.first() else {
        return Vec::new();
    };
    first
        .iter()
        .map(|r| {
            let same = |o: &&Value| {
                o["seq_len"] == r["seq_len"] && o["batch"] == r["batch"] && o["row"] == r["row"]
            };
            let all: Vec<&Value> = runs.iter().filter_map(|p| p.iter().find(same)).collect();
            let mut tps: Vec<f64> = all
                .iter()
                .filter_map(|o| o["tokens_per_s"].as_f64())
                .collect();
            let every: Vec<Value> = tps.iter().map(|&x| json!(x)).collect();
            tps.sort_by(f64::total_cmp);
            let mut m = r.clone();
            m["tokens_per_s"] = tps.get(tps.len() / 2).map_or(Value::Null, |&x| json!(x));
            m["tokens_per_s_repeats"] = Value::Array(every);
            if !r["verified"].is_null() {
                m["verified"] =
                    json!(all.len() == runs.len() && all.iter().all(|o| o["verified"] == true));
            }
            m
        })
        .collect()
}

/// The table from the script's rows (`seq_len`, `batch`, `row`, `tokens_per_s`, `padding`,
/// `verified`, `note`).
fn table(rows: &[Value], synthetic: bool) -> FreeTable {
    let tps = |seq: u64, batch: u64, name: &str| {
        rows.iter()
            .find(|r| r["seq_len"] == seq && r["batch"] == batch && r["row"] == name)
            .and_then(|r| r["tokens_per_s"].as_f64())
    };
    let mut out = Vec::new();
    let mut goals = Goals::default();
    for r in rows {
        let (seq, batch) = (
            r["seq_len"].as_u64().unwrap_or(0),
            r["batch"].as_u64().unwrap_or(0),
        );
        let name = r["row"].as_str().unwrap_or("");
        let v = r["tokens_per_s"].as_f64();
        let ratio = |base: Option<f64>| match (v, base) {
            (Some(v), Some(b)) if b > 0.0 => json!(format!("{:.2}x", v / b)),
            _ => Value::Null,
        };
        let grain = if name.ends_with("first-fit") {
            tps(seq, batch, "grain-first-fit")
        } else {
            tps(seq, batch, "grain-concat-then-split")
        };
        let limit = tps(seq, batch, "memcpy-limit");
        let unpacked = tps(seq, batch, "loaderx-unpacked");
        let packer = name.starts_with("loaderx-") && name != "loaderx-unpacked";
        if packer {
            goals.add(v, grain, limit, r["padding"].as_f64(), seq, name);
        }
        out.push(json!({
            "row": format!("{name} L{seq} b{batch}"),
            "impl": name,
            "seq_len": seq,
            "batch": batch,
            "M tokens/s": v.map(|x| x / 1e6),
            "padding %": r["padding"].as_f64().map(|p| p * 100.0),
            "vs grain": if packer { ratio(grain) } else { Value::Null },
            "vs memcpy": if name == "memcpy-limit" { Value::Null } else { ratio(limit) },
            "vs unpacked": if packer { ratio(unpacked) } else { Value::Null },
            "verified": r["verified"],
            "note": r["note"],
            "M tokens/s repeats": r["tokens_per_s_repeats"],
        }));
    }
    FreeTable {
        name: Table::Packing,
        title: format!(
            "Sequence packing of the token corpus's records (delivered by a 2-worker ordered \
             loader, 512 records a step): real (non-padding) tokens/s and padding; Grain's \
             packers as its API reference documents them (each Grain row's note names the page), first-fit \
             with 32 bins as loaderx's pool; `loaderx-unpacked` is the same loader \
             delivering the same records unpacked, the most the packer can consume. Goals: >= {GRAIN_FACTOR}x Grain, >= \
             {MEMCPY_FRACTION}x memcpy, first-fit padding <= {}% at seq_len 4,096: {}",
            PADDING_4096 * 100.0,
            goals.render()
        ),
        synthetic,
        columns: columns(
            "impl | seq_len | batch | M tokens/s | padding % | vs grain | vs memcpy | vs unpacked \
             | verified | note",
        ),
        rows: out,
    }
}

/// How many loaderx cells meet each goal (of those where it could be judged).
#[derive(Default)]
struct Goals {
    grain: (usize, usize),
    memcpy: (usize, usize),
    padding: (usize, usize),
}

impl Goals {
    fn add(
        &mut self,
        v: Option<f64>,
        grain: Option<f64>,
        limit: Option<f64>,
        pad: Option<f64>,
        seq: u64,
        name: &str,
    ) {
        let count = |slot: &mut (usize, usize), met: bool| {
            slot.0 += usize::from(met);
            slot.1 += 1;
        };
        if let (Some(v), Some(g)) = (v, grain) {
            count(&mut self.grain, v >= GRAIN_FACTOR * g);
        }
        if let (Some(v), Some(l)) = (v, limit) {
            count(&mut self.memcpy, v >= MEMCPY_FRACTION * l);
        }
        if let (Some(p), true) = (pad, seq == 4096 && name.ends_with("first-fit")) {
            count(&mut self.padding, p <= PADDING_4096);
        }
    }

    fn render(&self) -> String {
        let part = |what: &str, (met, of): (usize, usize)| {
            if of == 0 {
                format!("{what} not judged (no baseline row)")
            } else {
                format!("{what} met in {met} of {of} cells")
            }
        };
        [
            part("Grain", self.grain),
            part("memcpy", self.memcpy),
            part("padding", self.padding),
        ]
        .join("; ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_become_the_table_with_ratios_and_goals() {
        let row = |name: &str, tps: Option<f64>, pad: f64| {
            json!({"seq_len": 4096, "batch": 8, "row": name, "tokens_per_s": tps,
                   "padding": pad, "verified": true, "note": null})
        };
        let rows = vec![
            row("loaderx-first-fit", Some(100e6), 0.01),
            row("grain-first-fit", Some(1e6), 0.02),
            row("memcpy-limit", Some(400e6), 0.0),
            row("loaderx-unpacked", Some(200e6), 0.0),
        ];
        let t = table(&rows, false);
        assert_eq!(t.rows[0]["vs unpacked"], "0.50x");
        assert_eq!(t.rows[3]["vs unpacked"], Value::Null);
        assert_eq!(
            t.rows[3]["vs grain"],
            Value::Null,
            "the unpacked row is no packer"
        );
        assert_eq!(t.rows[0]["vs grain"], "100.00x");
        assert_eq!(t.rows[0]["vs memcpy"], "0.25x");
        assert_eq!(t.rows[0]["M tokens/s"], 100.0);
        assert!(t.title.contains("Grain met in 1 of 1 cells"), "{}", t.title);
        assert!(
            t.title.contains("memcpy met in 0 of 1 cells"),
            "{}",
            t.title
        );
        assert!(
            t.title.contains("padding met in 1 of 1 cells"),
            "{}",
            t.title
        );
        let t = table(&rows[..1], false);
        assert!(t.title.contains("Grain not judged"), "{}", t.title);
    }

    #[test]
    fn passes_merge_to_the_median_keeping_every_figure() {
        let row = |tps: f64, ok: bool| {
            json!({"seq_len": 1024, "batch": 8, "row": "loaderx-concat", "tokens_per_s": tps,
                   "padding": 0.0, "verified": ok, "note": null})
        };
        let m = merge(&[
            vec![row(3.0, true)],
            vec![row(1.0, true)],
            vec![row(2.0, true)],
        ]);
        assert_eq!(m[0]["tokens_per_s"], 2.0);
        assert_eq!(m[0]["tokens_per_s_repeats"], json!([3.0, 1.0, 2.0]));
        assert_eq!(m[0]["verified"], true);
        let m = merge(&[vec![row(3.0, true)], vec![row(1.0, false)]]);
        assert_eq!(m[0]["verified"], false, "one failed pass fails the row");
    }
}
