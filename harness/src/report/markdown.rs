//! `tables.md` of a warm run: the receipt line, then each store table (the best value of each
//! column bold, reference rows never) and each free table (sampler, loaders) with its goals.

use serde_json::Value;

use crate::model::{Report, Status, StoreRow};
use crate::table::{LIMIT_ROW, md_table};

fn fmt_num(v: f64, digits: usize) -> String {
    if v.is_nan() {
        "–".into()
    } else {
        format!("{v:.digits$}")
    }
}

/// Bold the best cell of each numeric column (`higher` says which direction is better).
/// A store row's read cells: logical gather (± its spread), krecords/s, p95 latency.
fn read_cells(r: &StoreRow) -> [String; 3] {
    [
        format!(
            "{} ± {} MiB/s",
            fmt_num(r.gather_mib_s, 0),
            fmt_num(r.sd, 0)
        ),
        fmt_num(r.krecords_s, 1),
        format!("{} ms", fmt_num(r.p95_ms, 2)),
    ]
}

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
    let Some(ok) = rep.source["publishable"].as_bool() else {
        return String::new();
    };
    let commit = rep.source["git_commit"]
        .as_str()
        .map_or("unknown commit", |c| &c[..c.len().min(12)]);
    let machine = crate::machine::machine_line(&rep.machine);
    if ok {
        format!("Run at commit `{commit}` (clean tree) on {machine}.\n\n")
    } else {
        let why = rep.source["unpublishable_because"]
            .as_str()
            .unwrap_or("unknown");
        format!("**UNPUBLISHABLE** (not to be cited): {why}. Commit `{commit}` on {machine}.\n\n")
    }
}

const STORE_COLUMNS: &str = "backend | logical write | write × limit | logical gather | krecords/s | p95 | disk | ratio | × memcpy-limit | verified";

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
                let [gather, krec, p95] = read_cells(r);
                cells.push(vec![
                    "–".into(),
                    "–".into(),
                    gather,
                    krec,
                    p95,
                    "–".into(),
                    "–".into(),
                    "1.00x".into(),
                ]);
                values.push(vec![f64::NAN; 8]);
                continue;
            }
            let xw = r.x_write_limit.unwrap_or(f64::NAN);
            let [gather, krec, p95] = read_cells(r);
            cells.push(vec![
                format!("{} MiB/s", fmt_num(r.write_mib_s, 0)),
                format!("{}x", fmt_num(xw, 2)),
                gather,
                krec,
                p95,
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
        let mut lines = Vec::new();
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
            lines.push([vec![r.backend.clone()], c, vec![v]].concat());
        }
        if let Some(w) = t.write_limit_mib_s {
            let mut row = vec![
                "write-limit".into(),
                format!("{} MiB/s", fmt_num(w, 0)),
                "1.00x".into(),
            ];
            row.extend(std::iter::repeat_n("–".to_string(), 7));
            lines.push(row);
        }
        s.push_str(&md_table(STORE_COLUMNS, "lrrrrrrrrl", &lines));
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
        s.push_str(&format!("### {}{syn}\n\n{}\n\n", t.name, t.title));
        let mut lines = Vec::new();
        for r in &t.rows {
            lines.push(
                t.columns
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
                    .collect(),
            );
        }
        s.push_str(&md_table(
            &t.columns.join(" | "),
            &"l".repeat(t.columns.len()),
            &lines,
        ));
        s.push('\n');
        s.push_str(&crate::loader::goals::render(t));
    }
    s
}
