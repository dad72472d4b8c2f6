//! `tables.md` of a warm run: the receipt line, then each store table (the best value of each
//! column bold, reference rows never) and each free table (sampler, loaders) with its goals.

use serde_json::Value;

use crate::model::{Report, Status, StoreRow, or_nan};
use crate::table::{LIMIT_ROW, md_table};

fn fmt_num(v: f64, digits: usize) -> String {
    if v.is_nan() {
        "–".into()
    } else {
        format!("{v:.digits$}")
    }
}

/// The mark after a table's name when its corpus is the synthetic stand-in.
fn synthetic(yes: bool) -> &'static str {
    if yes { " (synthetic corpus)" } else { "" }
}

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

/// Bolds the best cell of each figure column (line cell `c + 1` for figure `c`: `+` in
/// `better` marks a column where higher is better, `-` one where lower is).
fn bold_best(lines: &mut [Vec<String>], values: &[[f64; 8]], better: &str) {
    for (c, dir) in better.chars().enumerate() {
        let finite = values.iter().map(|r| r[c]).filter(|v| v.is_finite());
        let best = if dir == '+' {
            finite.reduce(f64::max)
        } else {
            finite.reduce(f64::min)
        };
        for (r, row) in values.iter().enumerate() {
            if Some(row[c]) == best {
                lines[r][c + 1] = format!("**{}**", lines[r][c + 1]);
            }
        }
    }
}

fn verified_cell(r: &StoreRow) -> &'static str {
    match (r.status, r.verified) {
        (Status::Failed, _) => "**FAILED**",
        (Status::Excluded, _) => "excluded",
        (_, Some(true)) => "yes",
        (_, Some(false)) => "**NO**",
        // A reference row: nothing of its own to verify (results written before `verified`
        // could be null say `true` here, and render as they did).
        (_, None) => "reference",
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
        let syn = synthetic(t.synthetic);
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
        let (mut lines, mut values, mut notes) = (Vec::new(), Vec::new(), Vec::new());
        for r in t.rows.iter().filter(|r| r.status != Status::NotApplicable) {
            let (x, xw) = (or_nan(r.x_memcpy), or_nan(r.x_write_limit));
            let [gather, krec, p95] = read_cells(r);
            let mut line = vec![r.backend.clone()];
            // The limit row is an in-memory array: no write, no disk, no compression to report.
            let limit = r.backend == LIMIT_ROW;
            if limit {
                let dash = || "–".to_string();
                let one = "1.00x".to_string();
                line.extend([dash(), dash(), gather, krec, p95, dash(), dash(), one]);
            } else {
                line.extend([
                    format!("{} MiB/s", fmt_num(r.write_mib_s, 0)),
                    format!("{}x", fmt_num(xw, 2)),
                    gather,
                    krec,
                    p95,
                    format!("{} MiB", fmt_num(r.disk_mib, 1)),
                    format!("{}x", fmt_num(r.compression, 2)),
                    format!("{}x", fmt_num(x, 2)),
                ]);
            }
            line.push(verified_cell(r).to_string());
            lines.push(line);
            // The limit and a reference row (`npy-crc-limit`) are shown but never marked best.
            let reference = r
                .backend
                .parse::<competitors::Backend>()
                .is_ok_and(|b| b.is_reference());
            values.push(if limit || reference {
                [f64::NAN; 8]
            } else {
                let (w, g, k, p) = (r.write_mib_s, r.gather_mib_s, r.krecords_s, r.p95_ms);
                [w, xw, g, k, p, r.disk_mib, r.compression, x]
            });
            if let Some(n) = r.note.as_ref().filter(|_| !limit) {
                notes.push(format!("- `{}` ({}): {n}", r.backend, r.status));
            }
        }
        bold_best(&mut lines, &values, "++++--++");
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
    for t in rep.free.iter() {
        let syn = synthetic(t.synthetic);
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
