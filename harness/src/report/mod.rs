//! A run's report: aggregation over repeats ([`aggregate`]) and its outputs ([`write`]):
//! `results.json`, the data every figure is drawn from; `tables.md` (`markdown`, or
//! `remote_report` for a `harness remote` run); `plots/` (`plots`: the headline plots, or all of
//! them). `render` is `harness render`, which draws the last two again from a run's `results.json`.

mod markdown;
pub mod plots;
pub mod render;

use std::path::Path;

use benchkit::stats::{median, sample_sd};
use serde_json::Value;

use crate::error::{Result, write_file, write_json};
use crate::model::{CellResult, Report, Status, StoreRow, StoreTable, or_nan};
use crate::table::{LIMIT_ROW, Table};

pub use markdown::render_markdown;
pub use plots::PlotSet;

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

/// Writes all outputs of `rep` into `out`, with the plots of `plots`; returns the number of
/// failed cells.
pub fn write(rep: &Report, out: &Path, plots: PlotSet) -> Result<usize> {
    let j = rep.to_json();
    write_json(&out.join("results.json"), &j)?;
    write_file(&out.join("tables.md"), render_markdown(rep))?;
    plots::render(rep, &out.join("plots"), plots)?;
    let store_rows = rep.store_tables.iter().flat_map(|t| &t.rows);
    let free_rows = rep.free.iter().flat_map(|t| &t.rows);
    let store = store_rows.filter(|r| r.status == Status::Failed || r.verified == Some(false));
    Ok(store.count() + free_rows.filter(|r| r["verified"] == false).count())
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

    /// [`aggregate`]'s rows: `cells` grouped by backend, in the order each first appears.
    fn rows(cells: Vec<CellResult>) -> Vec<(String, Vec<CellResult>)> {
        let mut out: Vec<(String, Vec<CellResult>)> = Vec::new();
        for c in cells {
            match out.iter_mut().find(|(b, _)| *b == c.backend) {
                Some((_, row)) => row.push(c),
                None => out.push((c.backend.clone(), vec![c])),
            }
        }
        out
    }

    #[test]
    fn x_memcpy_is_the_median_of_each_cells_ratio_to_the_limit_timed_beside_it() {
        let paired = |gather_s: f64, limit_s: Option<f64>| CellResult {
            gather_s,
            limit_gather_s: limit_s,
            ..cell("zrecord-raw", 500.0, None)
        };
        let limit = CellResult {
            gather_mib_s: 4000.0,
            ..cell("memcpy-limit", 0.0, None)
        };
        let cells = vec![
            paired(2.0, Some(1.8)),
            paired(2.0, Some(1.0)),
            paired(1.0, Some(0.95)),
            limit.clone(),
        ];
        let t = aggregate(Table::RaggedTokens, false, rows(cells));
        assert_eq!(
            t.rows[0].x_memcpy,
            Some(0.9),
            "the median of 0.9, 0.5 and 0.95"
        );
        assert_eq!(t.rows[1].x_memcpy, Some(1.0));
        // A cell without it (an older run): the row over the limit row, 1000 / 4000.
        let cells = vec![paired(2.0, Some(1.8)), paired(2.0, None), limit];
        let t = aggregate(Table::RaggedTokens, false, rows(cells));
        assert_eq!(t.rows[0].x_memcpy, Some(0.25));
    }

    #[test]
    fn write_limit_row_and_ratios() {
        let cells = vec![
            cell("zrecord-raw", 500.0, None),
            cell("memcpy-limit", 0.0, Some(1000.0)),
            cell("memcpy-limit", 0.0, Some(3000.0)),
            cell("memcpy-limit", 0.0, Some(2000.0)),
        ];
        let mut t = aggregate(Table::RaggedTokens, false, rows(cells));
        assert_eq!(t.write_limit_mib_s, Some(2000.0));
        assert_eq!(t.rows[0].x_write_limit, Some(0.25));
        assert_eq!(t.rows[1].x_write_limit, None);
        // A cell with its own limit is divided by it, not by the table's.
        let cells = vec![
            cell("arrow-ipc-raw", 300.0, Some(600.0)),
            cell("arrow-ipc-raw", 900.0, Some(1000.0)),
            cell("arrow-ipc-raw", 100.0, Some(1000.0)),
        ];
        let own = aggregate(Table::RaggedTokens, false, rows(cells));
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
        let t = aggregate(Table::DenseTokens, false, rows(vec![z, r]));
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
        let cells = vec![
            cell("zrecord-raw", 500.0, None),
            bad,
            cell("zrecord-raw", 500.0, None),
            nothing,
            na,
            cell("memcpy-limit", 0.0, None),
        ];
        let t = aggregate(Table::RaggedTokens, false, rows(cells));
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
        // Through results.json: null stays null, false stays false.
        let j = rep.to_json();
        assert_eq!(j["tables"][0]["rows"][3]["verified"], Value::Null);
        assert_eq!(j["tables"][0]["rows"][1]["verified"], Value::Bool(false));
        let back = Report::from_json(&j);
        assert_eq!(back.store_tables[0].rows[3].verified, None);
        assert_eq!(back.store_tables[0].rows[1].verified, Some(false));
    }
}
