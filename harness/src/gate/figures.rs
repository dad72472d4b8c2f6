//! The gate's figures: which rows of a results document it reads, and as what ratio (each a
//! ratio of two rows' best repeats in one run; [`figures`]), and the reading of its rows.

use serde_json::Value;

use crate::model::Status;

pub(super) fn rows(t: &Value) -> &[Value] {
    t.get("rows")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

pub(super) fn tables(doc: &Value) -> &[Value] {
    doc.get("tables")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

pub(super) fn text<'a>(r: &'a Value, k: &str) -> &'a str {
    r.get(k).and_then(Value::as_str).unwrap_or("")
}

pub(super) fn num(r: &Value, k: &str) -> Option<f64> {
    r.get(k).and_then(Value::as_f64).filter(|x| x.is_finite())
}

/// The loader-table arms that are loaderx itself (the bare gather, Rust and Python loaders).
pub fn is_own_loader_arm(arm: &str) -> bool {
    arm == BARE || arm.starts_with("loaderx-") || arm.starts_with("python-loaderx")
}

/// The store rows whose speed is gated: zrecord's raw reads, memory-bound like the limit row they
/// are divided by. A compressed row is bound by decoding, so its ratio to a memory copy moves with
/// the machine's balance of core and memory speed; it is held to the facts only.
pub fn is_gated_store_row(backend: &str) -> bool {
    backend == "zrecord-raw"
}

/// Whether a `--gated` run (the gate's confirmation) measures the row named `name` (a store
/// table's backend or a loader table's arm): the limit rows its figures divide by and the rows
/// whose speed it gates.
pub fn reads_row(name: &str) -> bool {
    name == "memcpy-limit" || is_gated_store_row(name) || is_own_loader_arm(name)
}

/// One gated figure of a results document.
#[derive(Clone, Debug, PartialEq)]
pub struct Figure {
    pub table: String,
    pub row: String,
    /// `x_memcpy` (store rows), `x_limit` (the loader tables' bare gather) or `x_bare` (the
    /// other loaderx loader rows): [`figures`].
    pub metric: &'static str,
    pub value: f64,
}

/// A row's speed as the gate reads it: the best of its repeats (`samples/s repeats` of a loader
/// row, each repeat's `gather_mib_s` of a store row), else its one figure. On a shared machine a
/// neighbour only ever slows a repeat down, so the fastest repeat is the least disturbed reading
/// of the code's speed; a 25 % slower build lowers every repeat, the fastest too.
pub fn best_speed(r: &Value) -> Option<f64> {
    let pick = |xs: Vec<f64>| {
        xs.into_iter()
            .filter(|x| x.is_finite() && *x > 0.0)
            .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))))
    };
    if let Some(a) = r.get("samples/s repeats").and_then(Value::as_array)
        && let Some(x) = pick(a.iter().filter_map(Value::as_f64).collect())
    {
        return Some(x);
    }
    if let Some(a) = r.get("repeats").and_then(Value::as_array) {
        let ok = |x: &&Value| {
            x.get("status")
                .and_then(Value::as_str)
                .is_none_or(|s| Status::from_name(s) == Some(Status::Ok))
        };
        if let Some(x) = pick(
            a.iter()
                .filter(ok)
                .filter_map(|x| num(x, "gather_mib_s"))
                .collect(),
        ) {
            return Some(x);
        }
    }
    num(r, "samples/s")
        .or_else(|| num(r, "gather_mib_s"))
        .filter(|x| x.is_finite() && *x > 0.0)
}

/// The loader row every other loaderx row of its table is divided by (`x_bare`).
pub const BARE: &str = "bare-gather";

/// The gated figures of a results document, each a ratio of two rows' best repeats
/// ([`best_speed`]) in the same run:
/// - a zrecord-raw store row over its table's `memcpy-limit` row (`x_memcpy`);
/// - a loader table's `bare-gather` row (zrecord's gather loop, no loader) over its
///   `memcpy-limit` row (`x_limit`);
/// - every other loaderx loader row (the Rust and Python loaders) over its table's `bare-gather`
///   row (`x_bare`): what the loader adds to the gather it runs. Across 2-core VMs of one CPU
///   model a loader row follows the bare gather more closely than it follows a contiguous copy
///   (the ragged-token loader rows' run-to-run SD of ln: 0.04-0.05 over the gather against
///   0.06-0.07 over the copy, best repeats of 12 EPYC runs on four VMs), and the gather itself is
///   gated twice (here and in the store tables).
///
/// A row that did not run, or whose divisor did not, has no figure.
pub fn figures(doc: &Value) -> Vec<Figure> {
    let mut out = Vec::new();
    for t in tables(doc) {
        let table = text(t, "name");
        let find = |key: &str, name: &str| rows(t).iter().find(|r| text(r, key) == name);
        let store_limit = find("backend", "memcpy-limit").and_then(best_speed);
        let limit = find("arm", "memcpy-limit").and_then(best_speed);
        let bare = find("arm", BARE).and_then(best_speed);
        for r in rows(t) {
            let (backend, arm) = (text(r, "backend"), text(r, "arm"));
            let ok = r
                .get("status")
                .and_then(Value::as_str)
                .is_none_or(|s| Status::from_name(s) == Some(Status::Ok) || s.is_empty());
            let mut push = |row: &str, metric: &'static str, value: Option<f64>| {
                if let Some(value) = value.filter(|v| v.is_finite() && *v > 0.0) {
                    out.push(Figure {
                        table: table.to_string(),
                        row: row.to_string(),
                        metric,
                        value,
                    });
                }
            };
            if is_gated_store_row(backend) && ok {
                let x = match (best_speed(r), store_limit) {
                    (Some(s), Some(l)) => Some(s / l),
                    _ => num(r, "x_memcpy"),
                };
                push(backend, "x_memcpy", x);
            } else if arm == BARE {
                push(arm, "x_limit", best_speed(r).zip(limit).map(|(s, l)| s / l));
            } else if is_own_loader_arm(arm) {
                push(arm, "x_bare", best_speed(r).zip(bare).map(|(s, b)| s / b));
            }
        }
    }
    out
}
