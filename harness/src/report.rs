//! Aggregation over repeats ([`aggregate`]) and the three outputs of a run: `results.json`,
//! `tables.md` ([`render_markdown`]) and `plots/` (drawn by `plots`); [`rerender`] rebuilds the
//! last two from a finished run's `results.json`.

use std::path::Path;

use benchkit::stats::{median, sample_sd};
use serde_json::Value;

use crate::error::{HarnessError, Result};
use crate::model::{CellResult, Report, Status, StoreRow, StoreTable, or_nan};
use crate::table::{LIMIT_ROW, Table};

/// A store table from its cells: per backend, the medians over the repeats that ran.
pub fn aggregate(
    table: Table,
    synthetic: bool,
    rows: Vec<(String, Vec<CellResult>)>,
) -> StoreTable {
    let mut out = Vec::new();
    let mut records = 0;
    let mut logical = 0;
    for (backend, reps) in rows {
        // One repeat that failed or differed fails the row: no figure from the other repeats.
        let failed = reps
            .iter()
            .any(|r| r.status == Status::Failed || r.verified == Some(false));
        let ok: Vec<&CellResult> = reps
            .iter()
            .filter(|r| !failed && r.status == Status::Ok)
            .collect();
        let status = if failed {
            Status::Failed
        } else {
            reps.first().map_or(Status::Failed, |r| r.status)
        };
        let note = reps
            .iter()
            .filter(|r| !failed || r.status == Status::Failed || r.verified == Some(false))
            .find_map(|r| r.note.clone());
        let reference = backend
            .parse::<competitors::Backend>()
            .is_ok_and(|b| b.is_reference());
        // True only when every repeat compared batches with the source and all matched; null
        // for a row with nothing of its own to verify (not applicable, a reference).
        let verified = if failed || reps.is_empty() {
            Some(false)
        } else if reference || status == Status::NotApplicable {
            None
        } else {
            Some(
                reps.iter()
                    .all(|r| r.verified == Some(true) && r.verified_batches > 0),
            )
        };
        let col = |f: fn(&CellResult) -> f64| median(&ok.iter().map(|r| f(r)).collect::<Vec<_>>());
        if let Some(r) = reps.first() {
            records = records.max(r.records);
            logical = logical.max(r.logical_bytes);
        }
        let gathers: Vec<f64> = ok.iter().map(|r| r.gather_mib_s).collect();
        let excluded_p95 = reps
            .iter()
            .find(|r| r.status == Status::Excluded)
            .map(|r| r.p95_ms);
        out.push(StoreRow {
            backend,
            verified,
            status,
            note,
            write_mib_s: col(|r| or_nan(r.write_mib_s)),
            gather_mib_s: col(|r| r.gather_mib_s),
            krecords_s: col(|r| r.krecords_s),
            p95_ms: if ok.is_empty() {
                excluded_p95.unwrap_or(f64::NAN)
            } else {
                col(|r| r.p95_ms)
            },
            disk_mib: col(|r| {
                r.disk_bytes
                    .map_or(f64::NAN, |b| b as f64 / (1 << 20) as f64)
            }),
            compression: col(|r| or_nan(r.compression)),
            x_memcpy: paired_x_memcpy(&ok),
            x_write_limit: None,
            sd: sample_sd(&gathers),
            repeats: reps,
        });
    }
    let limit = out
        .iter()
        .find(|r| r.backend == LIMIT_ROW && r.status == Status::Ok)
        .map(|r| r.gather_mib_s);
    if let Some(l) = limit {
        for r in &mut out {
            if r.status == Status::Ok && l > 0.0 && r.x_memcpy.is_none() {
                // The limit's own row (its cells time no limit beside them) and cells from
                // before every cell did: the row over the limit row.
                r.x_memcpy = Some(r.gather_mib_s / l);
            }
        }
    }
    let limits: Vec<f64> = out
        .iter()
        .flat_map(|r| r.repeats.iter().filter_map(|c| c.write_limit_mib_s))
        .collect();
    let write_limit = (!limits.is_empty()).then(|| median(&limits));
    for r in &mut out {
        if r.status != Status::Ok || r.backend == LIMIT_ROW {
            continue;
        }
        // Side by side: each cell's write over the limit timed in that cell; a cell without
        // its own limit (older results) is divided by the table's.
        let ratios: Vec<f64> = r
            .repeats
            .iter()
            .filter(|c| c.status == Status::Ok)
            .filter_map(|c| {
                let w = c.write_limit_mib_s.or(write_limit)?;
                (w > 0.0).then(|| or_nan(c.write_mib_s) / w)
            })
            .collect();
        if !ratios.is_empty() {
            r.x_write_limit = Some(median(&ratios));
        }
    }
    StoreTable {
        name: table,
        title: table.title().to_string(),
        synthetic,
        records,
        logical_mib: logical as f64 / (1 << 20) as f64,
        write_limit_mib_s: write_limit,
        captions: Vec::new(),
        rows: out,
    }
}

/// Writes all outputs of `rep` into `out`; returns the number of failed cells.
pub fn write(rep: &Report, out: &Path) -> Result<usize> {
    let j = rep.to_json();
    let json_path = out.join("results.json");
    std::fs::write(&json_path, serde_json::to_vec_pretty(&j)?)
        .map_err(HarnessError::io("write", &json_path))?;
    let md_path = out.join("tables.md");
    std::fs::write(&md_path, render_markdown(rep)).map_err(HarnessError::io("write", &md_path))?;
    crate::plots::render_all(rep, &out.join("plots"))?;
    let mut failed = 0;
    for t in &rep.store_tables {
        failed += t
            .rows
            .iter()
            .filter(|r| r.status == Status::Failed || r.verified == Some(false))
            .count();
    }
    for t in rep.free_tables() {
        failed += t
            .rows
            .iter()
            .filter(|r| r.get("verified") == Some(&Value::Bool(false)))
            .count();
    }
    Ok(failed)
}

fn fmt_num(v: f64, digits: usize) -> String {
    if v.is_nan() {
        "–".into()
    } else {
        format!("{v:.digits$}")
    }
}

/// Bold the best cell of each numeric column (`higher` says which direction is better).
fn bold_best(cells: &mut [Vec<String>], values: &[Vec<f64>], higher: &[Option<bool>]) {
    for (c, dir) in higher.iter().enumerate() {
        let Some(higher) = dir else { continue };
        let best = values.iter().map(|r| r[c]).filter(|v| v.is_finite()).fold(
            None,
            |acc: Option<f64>, v| {
                Some(match acc {
                    None => v,
                    Some(a) if *higher => a.max(v),
                    Some(a) => a.min(v),
                })
            },
        );
        if let Some(b) = best {
            for (r, row) in values.iter().enumerate() {
                if row[c] == b {
                    cells[r][c] = format!("**{}**", cells[r][c]);
                }
            }
        }
    }
}

/// The run's receipt above its tables: the machine, read from the machine, and whether the run
/// may be published (from a clean tree at one commit). Runs recorded before receipts were sealed
/// (no `publishable` field) render without it, as they always did.
fn receipt_line(rep: &Report) -> String {
    let Some(ok) = rep.source.get("publishable").and_then(Value::as_bool) else {
        return String::new();
    };
    let commit = rep
        .source
        .get("git_commit")
        .and_then(Value::as_str)
        .map_or("unknown commit", |c| &c[..c.len().min(12)]);
    let machine = crate::machine::machine_line(&rep.machine);
    if ok {
        format!("Run at commit `{commit}` (clean tree) on {machine}.\n\n")
    } else {
        let why = rep
            .source
            .get("unpublishable_because")
            .and_then(Value::as_str)
            .unwrap_or("unknown");
        format!("**UNPUBLISHABLE** (not to be cited): {why}. Commit `{commit}` on {machine}.\n\n")
    }
}

pub fn render_markdown(rep: &Report) -> String {
    let mut s = receipt_line(rep);
    for t in &rep.store_tables {
        let syn = if t.synthetic {
            " (synthetic corpus)"
        } else {
            ""
        };
        s.push_str(&format!(
            "### {}{syn}\n\n{} — {} records, {:.1} MiB logical\n\n",
            t.name, t.title, t.records, t.logical_mib
        ));
        for c in &t.captions {
            s.push_str(&format!("{c}\n"));
        }
        if !t.captions.is_empty() {
            s.push('\n');
        }
        s.push_str("| backend | logical write | write × limit | logical gather | krecords/s | p95 | disk | ratio | × memcpy-limit | verified |\n");
        s.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n");
        let mut cells = Vec::new();
        let mut values = Vec::new();
        let mut notes = Vec::new();
        for r in &t.rows {
            if r.status == Status::NotApplicable {
                continue;
            }
            let x = r.x_memcpy.unwrap_or(f64::NAN);
            let is_limit = r.backend == LIMIT_ROW;
            if is_limit {
                // An in-memory array: no write, no disk, no compression to report.
                cells.push(vec![
                    "–".into(),
                    "–".into(),
                    format!(
                        "{} ± {} MiB/s",
                        fmt_num(r.gather_mib_s, 0),
                        fmt_num(r.sd, 0)
                    ),
                    fmt_num(r.krecords_s, 1),
                    format!("{} ms", fmt_num(r.p95_ms, 2)),
                    "–".into(),
                    "–".into(),
                    "1.00x".into(),
                ]);
                values.push(vec![f64::NAN; 8]);
                continue;
            }
            let xw = r.x_write_limit.unwrap_or(f64::NAN);
            cells.push(vec![
                format!("{} MiB/s", fmt_num(r.write_mib_s, 0)),
                format!("{}x", fmt_num(xw, 2)),
                format!(
                    "{} ± {} MiB/s",
                    fmt_num(r.gather_mib_s, 0),
                    fmt_num(r.sd, 0)
                ),
                fmt_num(r.krecords_s, 1),
                format!("{} ms", fmt_num(r.p95_ms, 2)),
                format!("{} MiB", fmt_num(r.disk_mib, 1)),
                format!("{}x", fmt_num(r.compression, 2)),
                format!("{}x", fmt_num(x, 2)),
            ]);
            // A reference row (`npy-crc-limit`) is shown in full but never marked best.
            if r.backend
                .parse::<competitors::Backend>()
                .is_ok_and(|b| b.is_reference())
            {
                values.push(vec![f64::NAN; 8]);
            } else {
                values.push(vec![
                    r.write_mib_s,
                    xw,
                    r.gather_mib_s,
                    r.krecords_s,
                    r.p95_ms,
                    r.disk_mib,
                    r.compression,
                    x,
                ]);
            }
            if let Some(n) = &r.note {
                notes.push(format!("- `{}` ({}): {n}", r.backend, r.status));
            }
        }
        bold_best(
            &mut cells,
            &values,
            &[
                Some(true),
                Some(true),
                Some(true),
                Some(true),
                Some(false),
                Some(false),
                Some(true),
                Some(true),
            ],
        );
        let rows: Vec<&StoreRow> = t
            .rows
            .iter()
            .filter(|r| r.status != Status::NotApplicable)
            .collect();
        for (r, c) in rows.iter().zip(cells) {
            let v = match (r.status, r.verified) {
                (Status::Failed, _) => "**FAILED**".to_string(),
                (Status::Excluded, _) => "excluded".to_string(),
                (_, Some(true)) => "yes".to_string(),
                (_, Some(false)) => "**NO**".to_string(),
                // A reference row: nothing of its own to verify (results written before
                // `verified` could be null say `true` here, and render as they did).
                (_, None) => "reference".to_string(),
            };
            s.push_str(&format!("| {} | {} | {v} |\n", r.backend, c.join(" | ")));
        }
        if let Some(w) = t.write_limit_mib_s {
            s.push_str(&format!(
                "| write-limit | {} MiB/s | 1.00x | – | – | – | – | – | – | – |\n",
                fmt_num(w, 0)
            ));
        }
        if !notes.is_empty() {
            s.push('\n');
            s.push_str(&notes.join("\n"));
            s.push('\n');
        }
        s.push('\n');
    }
    for t in rep.free_tables() {
        let syn = if t.synthetic {
            " (synthetic corpus)"
        } else {
            ""
        };
        s.push_str(&format!(
            "### {}{syn}\n\n{}\n\n| {} |\n|{}|\n",
            t.name,
            t.title,
            t.columns.join(" | "),
            t.columns
                .iter()
                .map(|_| "---")
                .collect::<Vec<_>>()
                .join("|")
        ));
        for r in &t.rows {
            let cells: Vec<String> = t
                .columns
                .iter()
                .map(|c| match r.get(c) {
                    Some(Value::String(x)) => x.clone(),
                    Some(Value::Number(n)) => {
                        let f = n.as_f64().unwrap_or(f64::NAN);
                        if f.fract() == 0.0 && f.abs() < 1e12 {
                            format!("{}", f as i64)
                        } else {
                            format!("{f:.2}")
                        }
                    }
                    Some(Value::Bool(b)) => b.to_string(),
                    Some(Value::Null) | None => "–".into(),
                    Some(v) => v.to_string(),
                })
                .collect();
            s.push_str(&format!("| {} |\n", cells.join(" | ")));
        }
        s.push('\n');
        s.push_str(&crate::loader::goals::render(t));
    }
    s
}

/// Rebuilds `tables.md` and `plots/` of a finished run from its `results.json`.
pub fn rerender(dir: &Path) -> Result<()> {
    let path = dir.join("results.json");
    let bytes = std::fs::read(&path).map_err(HarnessError::io("read", &path))?;
    let j: Value =
        serde_json::from_slice(&bytes).map_err(|source| HarnessError::Parse { path, source })?;
    let md_path = dir.join("tables.md");
    std::fs::write(&md_path, render_results(&j)).map_err(HarnessError::io("write", &md_path))?;
    if is_remote(&j) {
        return Ok(());
    }
    crate::plots::render_all(&Report::from_json(&j), &dir.join("plots"))
}

/// Whether a `results.json` is the object-storage run's (`harness remote`): its tables are named
/// `remote-…` (no other run's are).
fn is_remote(j: &Value) -> bool {
    j["tables"]
        .as_array()
        .and_then(|t| t.first())
        .and_then(|t| t["name"].as_str())
        .is_some_and(|n| n.starts_with("remote-"))
}

/// `tables.md` of any run's `results.json`: the remote renderer for a `harness remote` run, the
/// warm tables' renderer for the others.
pub fn render_results(j: &Value) -> String {
    if is_remote(j) {
        crate::remote_report::render(j)
    } else {
        render_markdown(&Report::from_json(j))
    }
}

/// `x memcpy` from the limit timed beside each cell's gathers (`store::LIMIT_METHOD`):
/// the median over the cells of the limit's seconds over the cell's for the same batches; `None`
/// unless every cell timed it.
fn paired_x_memcpy(cells: &[&CellResult]) -> Option<f64> {
    let x: Option<Vec<f64>> = cells
        .iter()
        .map(|c| {
            c.limit_gather_s
                .filter(|l| *l > 0.0 && c.gather_s > 0.0)
                .map(|l| l / c.gather_s)
        })
        .collect();
    x.filter(|x| !x.is_empty()).map(|x| median(&x))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Report;

    /// Committed runs whose `tables.md` an older renderer wrote (before the `write × limit`
    /// column): not reproduced.
    const OLDER_RENDERER: &[&str] = &["2026-11-30-vm-r2"];

    /// Every other committed run, read back through the model, renders to its committed
    /// `tables.md` byte for byte (what `harness render` writes).
    #[test]
    fn committed_tables_render_byte_for_byte() {
        let results = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../results"));
        let mut checked = Vec::new();
        for entry in std::fs::read_dir(results).expect("list results/") {
            let dir = entry.expect("results/ entry").path();
            let run = dir.file_name().map(|n| n.to_string_lossy().into_owned());
            let Some(run) = run.filter(|r| !OLDER_RENDERER.contains(&r.as_str())) else {
                continue;
            };
            let Ok(json) = std::fs::read(dir.join("results.json")) else {
                continue;
            };
            let j: Value = serde_json::from_slice(&json).unwrap_or_else(|e| panic!("{run}: {e}"));
            let want = std::fs::read_to_string(dir.join("tables.md")).expect("read tables.md");
            assert_eq!(render_results(&j), want, "{run}");
            checked.push(run);
        }
        assert!(
            checked
                .iter()
                .any(|r| r == "2026-12-03-xeon-tokens-9500673")
                && checked.iter().any(|r| r == "2026-12-04-remote-0bda08d"),
            "{checked:?}"
        );
    }

    fn cell(backend: &str, write_mib_s: f64, limit: Option<f64>) -> CellResult {
        CellResult {
            write_mib_s: Some(write_mib_s),
            gather_mib_s: 1000.0,
            verified: Some(true),
            verified_batches: 1,
            write_limit_mib_s: limit,
            ..CellResult::new(Table::RaggedTokens, backend, Status::Ok)
        }
    }

    #[test]
    fn x_memcpy_is_the_median_of_each_cells_ratio_to_the_limit_timed_beside_it() {
        let paired = |gather_s: f64, limit_s: Option<f64>| CellResult {
            gather_s,
            limit_gather_s: limit_s,
            ..cell("zrecord-raw", 500.0, None)
        };
        let limit_row = (
            "memcpy-limit".to_string(),
            vec![CellResult {
                gather_mib_s: 4000.0,
                ..cell("memcpy-limit", 0.0, None)
            }],
        );
        let rows = vec![
            (
                "zrecord-raw".to_string(),
                vec![
                    paired(2.0, Some(1.8)),
                    paired(2.0, Some(1.0)),
                    paired(1.0, Some(0.95)),
                ],
            ),
            limit_row.clone(),
        ];
        let t = aggregate(Table::RaggedTokens, false, rows);
        assert_eq!(
            t.rows[0].x_memcpy,
            Some(0.9),
            "the median of 0.9, 0.5 and 0.95"
        );
        assert_eq!(t.rows[1].x_memcpy, Some(1.0));
        // A cell without it (an older run): the row over the limit row, 1000 / 4000.
        let rows = vec![
            (
                "zrecord-raw".to_string(),
                vec![paired(2.0, Some(1.8)), paired(2.0, None)],
            ),
            limit_row,
        ];
        let t = aggregate(Table::RaggedTokens, false, rows);
        assert_eq!(t.rows[0].x_memcpy, Some(0.25));
    }

    #[test]
    fn write_limit_row_and_ratios() {
        let rows = vec![
            (
                "zrecord-raw".to_string(),
                vec![cell("zrecord-raw", 500.0, None)],
            ),
            (
                "memcpy-limit".to_string(),
                vec![
                    cell("memcpy-limit", 0.0, Some(1000.0)),
                    cell("memcpy-limit", 0.0, Some(3000.0)),
                    cell("memcpy-limit", 0.0, Some(2000.0)),
                ],
            ),
        ];
        let mut t = aggregate(Table::RaggedTokens, false, rows);
        assert_eq!(t.write_limit_mib_s, Some(2000.0));
        assert_eq!(t.rows[0].x_write_limit, Some(0.25));
        assert_eq!(t.rows[1].x_write_limit, None);
        // A cell with its own limit is divided by it, not by the table's.
        let own = aggregate(
            Table::RaggedTokens,
            false,
            vec![(
                "arrow-ipc-raw".to_string(),
                vec![
                    cell("arrow-ipc-raw", 300.0, Some(600.0)),
                    cell("arrow-ipc-raw", 900.0, Some(1000.0)),
                    cell("arrow-ipc-raw", 100.0, Some(1000.0)),
                ],
            )],
        );
        assert_eq!(own.rows[0].x_write_limit, Some(0.5));
        assert_eq!(own.write_limit_mib_s, Some(1000.0));
        t.captions.push("Caption line.".into());
        let mut rep = Report::new(true, 1, vec![]);
        rep.store_tables.push(t);
        let md = render_markdown(&rep);
        assert!(md.contains("| write-limit | 2000 MiB/s | 1.00x |"), "{md}");
        assert!(
            md.contains("| zrecord-raw | **500 MiB/s** | **0.25x** |"),
            "{md}"
        );
        assert!(md.contains("\nCaption line.\n"), "{md}");
        // Through results.json and back, the new fields survive.
        let back = Report::from_json(&rep.to_json());
        assert_eq!(back.store_tables[0].write_limit_mib_s, Some(2000.0));
        assert_eq!(back.store_tables[0].captions, ["Caption line."]);
    }

    #[test]
    fn a_reference_row_is_never_marked_best() {
        let mut z = cell("zrecord-raw", 500.0, None);
        z.gather_mib_s = 900.0;
        let mut r = cell("npy-crc-limit", 800.0, None);
        r.gather_mib_s = 950.0;
        let t = aggregate(
            Table::DenseTokens,
            false,
            vec![
                ("zrecord-raw".to_string(), vec![z]),
                ("npy-crc-limit".to_string(), vec![r]),
            ],
        );
        let mut rep = Report::new(true, 1, vec![]);
        rep.store_tables.push(t);
        let md = render_markdown(&rep);
        assert!(
            md.contains("| zrecord-raw | **500 MiB/s** | –x | **900 ± 0 MiB/s** |"),
            "{md}"
        );
        assert!(
            md.contains("| npy-crc-limit | 800 MiB/s | –x | 950 ± 0 MiB/s |"),
            "{md}"
        );
    }

    #[test]
    fn a_failed_repeat_fails_the_row_and_reference_rows_are_unverified() {
        let mut bad = cell("zrecord-raw", 500.0, None);
        bad.status = Status::Failed;
        bad.verified = Some(false);
        bad.note = Some("timed batch 3 differs from the source".into());
        let nothing = CellResult {
            verified: None,
            verified_batches: 0,
            ..cell("lmdb-raw", 400.0, None)
        };
        let na = CellResult::new(Table::RaggedTokens, "npy-mmap-raw", Status::NotApplicable);
        let rows = vec![
            (
                "zrecord-raw".to_string(),
                vec![
                    cell("zrecord-raw", 500.0, None),
                    bad,
                    cell("zrecord-raw", 500.0, None),
                ],
            ),
            ("lmdb-raw".to_string(), vec![nothing]),
            ("npy-mmap-raw".to_string(), vec![na]),
            (
                "memcpy-limit".to_string(),
                vec![cell("memcpy-limit", 0.0, None)],
            ),
        ];
        let t = aggregate(Table::RaggedTokens, false, rows);
        let z = &t.rows[0];
        assert_eq!((z.status, z.verified), (Status::Failed, Some(false)));
        assert!(z.gather_mib_s.is_nan() && z.write_mib_s.is_nan());
        assert_eq!(
            z.note.as_deref(),
            Some("timed batch 3 differs from the source")
        );
        // A row that compared no batch is not verified, whatever its cells said.
        assert_eq!(t.rows[1].verified, Some(false));
        assert_eq!(t.rows[2].verified, None);
        assert_eq!(t.rows[3].verified, None);
        let mut rep = Report::new(true, 1, vec![]);
        rep.store_tables.push(t);
        let md = render_markdown(&rep);
        assert!(md.contains("| zrecord-raw | – MiB/s |"), "{md}");
        assert!(md.contains(" | **FAILED** |\n"), "{md}");
        assert!(md.contains(" | 1.00x | reference |\n"), "{md}");
        // Through results.json: null stays null, and the gate fails the failed rows.
        let j = rep.to_json();
        assert_eq!(j["tables"][0]["rows"][3]["verified"], Value::Null);
        let back = Report::from_json(&j);
        assert_eq!(back.store_tables[0].rows[3].verified, None);
        let v = crate::gate::check(&crate::gate::Baseline::empty(), &j, false);
        let msgs: Vec<&str> = v.iter().map(|x| x.msg.as_str()).collect();
        assert!(msgs.iter().any(|m| m.contains("zrecord-raw")), "{msgs:?}");
        assert!(msgs.iter().any(|m| m.contains("lmdb-raw")), "{msgs:?}");
        assert!(!msgs.iter().any(|m| m.contains("memcpy-limit")), "{msgs:?}");
        assert!(!msgs.iter().any(|m| m.contains("npy-mmap-raw")), "{msgs:?}");
    }
}
