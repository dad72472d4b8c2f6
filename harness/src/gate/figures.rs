//! The gate's figures: which rows of a results document it reads, and as what ratio (each a
//! ratio of two rows' best repeats in one run; [`figures`]), and the reading of its rows.

use serde_json::Value;

use crate::model::Status;
use crate::table::{BARE_ROW, LIMIT_ROW};

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
    arm == BARE_ROW || arm.starts_with("loaderx-") || arm.starts_with("python-loaderx")
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
    name == LIMIT_ROW || is_gated_store_row(name) || is_own_loader_arm(name)
}

/// Whether a cell just taken is taken again: in a run that retakes (`retakes`: a quick or `--gated`
/// run, i.e. CI's first run, its confirmation and the baseline's runs), a cell of a row the gate
/// reads ([`reads_row`]) whose placement reading `rt` is far from the run's near level so far
/// (`benchkit::placement`). A cell is retaken at most `RETAKES_FAR` times; every take is kept,
/// and [`figures`] reads the near ones.
pub fn retake_far(retakes: bool, row: &str, rt: Option<f64>) -> bool {
    retakes
        && reads_row(row)
        && benchkit::placement::is_far(rt, benchkit::placement::near_level_seen())
}

/// One gated figure of a results document.
#[derive(Clone, Debug, PartialEq)]
pub struct Figure {
    pub table: String,
    pub row: String,
    /// `x_memcpy` and `x_memcpy_rows` (store rows), `x_limit` (the loader tables' bare gather,
    /// and the other loaderx rows of the copy-bound loader tables), `x_bare` (the other loaderx
    /// loader rows) or `x_bare_paired` (an inline loader row over the bare gather in its cell):
    /// [`figures`].
    pub metric: &'static str,
    pub value: f64,
    /// Every repeat of a row it divides (or divides by) was taken while the cores sat far apart
    /// ([`near_level`]): the figure reads the machine's placement, not the code, and the gate
    /// does not judge it.
    pub far: bool,
}

/// The run's near level: the lower decile of the readings of the cores' round trip its cells took
/// (`benchkit::placement::near_level`), `None` in runs without readings.
pub fn near_level(doc: &Value) -> Option<f64> {
    benchkit::placement::near_level(&readings(doc))
}

/// Every reading of the cores' round trip a results document holds (a store cell's `core_rt_ns`,
/// a loader row's `core round trip ns repeats`).
pub fn readings(doc: &Value) -> Vec<f64> {
    let mut readings = Vec::new();
    for t in tables(doc) {
        for r in rows(t) {
            if let Some(a) = r.get(RT_REPEATS).and_then(Value::as_array) {
                readings.extend(a.iter().filter_map(Value::as_f64));
            }
            if let Some(a) = r.get("repeats").and_then(Value::as_array) {
                readings.extend(a.iter().filter_map(|c| num(c, "core_rt_ns")));
            }
        }
    }
    readings
}

/// A loader row's readings of the cores' round trip, one beside each of its `samples/s repeats`.
pub const RT_REPEATS: &str = "core round trip ns repeats";

/// An inline loader row's bare gather, timed in the row's own cell block by block beside it
/// (`loader_pair`), samples/s, one beside each of its `samples/s repeats`.
pub const PAIRED_BARE: &str = "bare-gather samples/s paired repeats";

/// `pick` of `xs` (value, taken far) over the readings taken while the cores sat near, or over the
/// far ones when every one is far; values that are not finite and positive are left out.
fn placed(xs: Vec<(f64, bool)>, pick: fn(&[f64]) -> f64) -> Option<(f64, bool)> {
    let good: Vec<(f64, bool)> = xs
        .into_iter()
        .filter(|(x, _)| x.is_finite() && *x > 0.0)
        .collect();
    let of = |far: bool| {
        let v: Vec<f64> = good
            .iter()
            .filter(|(_, f)| *f == far)
            .map(|(x, _)| *x)
            .collect();
        (!v.is_empty()).then(|| pick(&v))
    };
    of(false)
        .map(|x| (x, false))
        .or_else(|| of(true).map(|x| (x, true)))
}

/// The best of `xs` ([`placed`]): for a row's own speed.
fn best_placed(xs: Vec<(f64, bool)>) -> Option<(f64, bool)> {
    placed(xs, |v| v.iter().copied().fold(f64::NEG_INFINITY, f64::max))
}

/// The median of `xs` ([`placed`]): for a ratio timed within each repeat (the paired figures).
/// A neighbour that slows one side of a repeat moves its ratio either way, so the best of them is
/// the repeat whose other side was slowed most; over the four EPYC baseline runs of `4419f38` the
/// best paired ratio of ragged-tokens `zrecord-raw` over the limit spread 0.115 (SD of ln), the
/// median 0.056 (three of the four store tables spread less by the median).
fn median_placed(xs: Vec<(f64, bool)>) -> Option<(f64, bool)> {
    placed(xs, benchkit::stats::median)
}

/// A loader row's per-repeat `values` (beside its `samples/s repeats`), each with whether the
/// reading beside it ([`RT_REPEATS`]) was far from `near`; repeats without a value are left out.
fn with_placement(
    r: &Value,
    near: Option<f64>,
    values: impl Iterator<Item = Option<f64>>,
) -> Vec<(f64, bool)> {
    let rts = r.get(RT_REPEATS).and_then(Value::as_array);
    values
        .enumerate()
        .filter_map(|(i, x)| {
            let rt = rts.and_then(|v| v.get(i)).and_then(Value::as_f64);
            Some((x?, benchkit::placement::is_far(rt, near)))
        })
        .collect()
}

/// A store row's repeats that passed.
fn ok_repeats(r: &Value) -> Vec<&Value> {
    let ok = |x: &&Value| {
        x.get("status")
            .and_then(Value::as_str)
            .is_none_or(|s| Status::from_name(s) == Some(Status::Ok))
    };
    r.get("repeats")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter(ok).collect())
        .unwrap_or_default()
}

/// A row's speed as the gate reads it: the best of its repeats (`samples/s repeats` of a loader
/// row, each repeat's `gather_mib_s` of a store row), else its one figure; with whether only far
/// readings were left ([`Figure::far`]). On a shared machine a neighbour only ever slows a
/// repeat down, so the fastest repeat is the least disturbed reading of the code's speed; a 25 %
/// slower build lowers every repeat, the fastest too. Repeats taken while the cores sat far
/// apart (more than `benchkit::placement::FAR_OVER_NEAR` times the run's `near` level) count only
/// when no other did: a loader that hands each batch from one thread to another ran up to 1.6x
/// slower there, a one-thread loop not at all, so their ratio moved with the host's placement.
pub fn best_speed(r: &Value, near: Option<f64>) -> Option<(f64, bool)> {
    let far = |rt: Option<f64>| benchkit::placement::is_far(rt, near);
    if let Some(a) = r.get("samples/s repeats").and_then(Value::as_array) {
        let xs = with_placement(r, near, a.iter().map(Value::as_f64));
        if let Some(x) = best_placed(xs) {
            return Some(x);
        }
    }
    let reps = ok_repeats(r);
    let xs = reps
        .iter()
        .filter_map(|c| Some((num(c, "gather_mib_s")?, far(num(c, "core_rt_ns")))))
        .collect();
    if let Some(x) = best_placed(xs) {
        return Some(x);
    }
    num(r, "samples/s")
        .or_else(|| num(r, "gather_mib_s"))
        .filter(|x| x.is_finite() && *x > 0.0)
        .map(|x| (x, false))
}

/// A zrecord-raw store row's `x_memcpy` paired within cells: the median over its repeats
/// ([`median_placed`]) of the copy limit's seconds over the row's for the same batches, timed in
/// the same cell (`limit_gather_s` over `gather_s`); `None` unless every repeat that passed
/// carries the limit.
fn paired(r: &Value, near: Option<f64>) -> Option<(f64, bool)> {
    let reps = ok_repeats(r);
    let xs: Option<Vec<(f64, bool)>> = reps
        .iter()
        .map(|c| {
            let (l, g) = (num(c, "limit_gather_s")?, num(c, "gather_s")?);
            (g > 0.0).then(|| {
                (
                    l / g,
                    benchkit::placement::is_far(num(c, "core_rt_ns"), near),
                )
            })
        })
        .collect();
    xs.filter(|x| !x.is_empty()).and_then(median_placed)
}

/// An inline loader row's `x_bare_paired`: the median over its repeats ([`median_placed`]) of the
/// row's samples/s over the bare gather timed in the same cell ([`PAIRED_BARE`]); `None` for a
/// row without them.
fn paired_bare(r: &Value, near: Option<f64>) -> Option<(f64, bool)> {
    let own = r.get("samples/s repeats").and_then(Value::as_array)?;
    let bare = r.get(PAIRED_BARE).and_then(Value::as_array)?;
    let ratios = own.iter().zip(bare).map(|(x, b)| {
        let (x, b) = (x.as_f64()?, b.as_f64()?);
        (b > 0.0).then(|| x / b)
    });
    median_placed(with_placement(r, near, ratios))
}

/// The loader tables whose loaderx rows are also read over the table's copy limit (`x_limit`,
/// beside `x_bare`), each figure gated on its own spread: tables of large records (150 KB
/// images), where a loader's gather and the limit's copy are both bound by memory bandwidth. There
/// the bare gather split over both cores reads faster far apart (two last-level caches) and the
/// loader rows over it moved 0.93-1.36 across the four EPYC baseline runs of `d13ebc7`. Token
/// batches are thousands of small records: their loader rows follow the gather across VMs, and
/// over the copy they read 9-18 % lower on CI's VM at `b5eb151` than in the baseline's.
pub const COPY_BOUND_LOADER_TABLES: [&str; 1] = ["loader-dense-vision"];

/// The gated figures of a results document, each a ratio of two rows' best repeats
/// ([`best_speed`]) in the same run, or the median of ratios timed within each repeat:
/// - a zrecord-raw store row over the copy limit (`x_memcpy`): where every cell timed the limit
///   beside its gathers (`limit_gather_s`), the median of those paired ratios ([`paired`]),
///   and beside it the row over its table's `memcpy-limit` row (`x_memcpy_rows`; in older runs
///   `x_memcpy` is that ratio too). Each is gated on its own spread: over the three runs of the EPYC
///   baseline the paired ratio spread less on three tables (SD of ln 0.006-0.038 against
///   0.041-0.057) and more on WikiText lines (0.094 against 0.052);
/// - a loader table's `bare-gather` row (zrecord's gather loop, no loader) over its
///   `memcpy-limit` row (`x_limit`);
/// - every other loaderx loader row (the Rust and Python loaders) over its table's `bare-gather`
///   row (`x_bare`): what the loader adds to the gather it runs. Across 2-core VMs of one CPU
///   model a loader row follows the bare gather more closely than it follows a contiguous copy
///   (the ragged-token loader rows' run-to-run SD of ln: 0.04-0.05 over the gather against
///   0.06-0.07 over the copy, best repeats of 12 EPYC runs on four VMs), and the gather itself is
///   gated twice (here and in the store tables). In [`COPY_BOUND_LOADER_TABLES`] each of those
///   rows is also read over the limit row (`x_limit`), a figure gated on its own spread. An
///   inline row (`loaderx-w0`) that timed the bare gather in its own cell is also read over
///   that (`x_bare_paired`, [`paired_bare`]), gated on its own spread: the same gather
///   seconds apart instead of cells minutes apart.
///
/// A row that did not run, or whose divisor did not, has no figure.
pub fn figures(doc: &Value) -> Vec<Figure> {
    figures_near(doc, None)
}

/// [`figures`] with the near level no higher than `floor` (the baseline's, `Baseline::near_ns`):
/// a run whose cores sat far apart from first to last has a far near level of its own, and by it
/// alone every figure would read near and be judged at the machine's slower speed.
pub fn figures_near(doc: &Value, floor: Option<f64>) -> Vec<Figure> {
    let near = match (near_level(doc), floor) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    let mut out = Vec::new();
    for t in tables(doc) {
        let table = text(t, "name");
        let find = |key: &str, name: &str| rows(t).iter().find(|r| text(r, key) == name);
        let speed = |r: &Value| best_speed(r, near);
        let store_limit = find("backend", LIMIT_ROW).and_then(speed);
        let limit = find("arm", LIMIT_ROW).and_then(speed);
        let bare = find("arm", BARE_ROW).and_then(speed);
        let ratio = |x: Option<(f64, bool)>, by: Option<(f64, bool)>| {
            x.zip(by).map(|((s, f), (d, g))| (s / d, f || g))
        };
        for r in rows(t) {
            let (backend, arm) = (text(r, "backend"), text(r, "arm"));
            let ok = r
                .get("status")
                .and_then(Value::as_str)
                .is_none_or(|s| Status::from_name(s) == Some(Status::Ok) || s.is_empty());
            let mut push = |row: &str, metric: &'static str, value: Option<(f64, bool)>| {
                if let Some((value, far)) = value.filter(|(v, _)| v.is_finite() && *v > 0.0) {
                    out.push(Figure {
                        table: table.to_string(),
                        row: row.to_string(),
                        metric,
                        value,
                        far,
                    });
                }
            };
            if is_gated_store_row(backend) && ok {
                let rows = ratio(speed(r), store_limit);
                let x = paired(r, near)
                    .or(rows)
                    .or_else(|| num(r, "x_memcpy").map(|x| (x, false)));
                push(backend, "x_memcpy", x);
                push(backend, "x_memcpy_rows", rows);
            } else if arm == BARE_ROW {
                push(arm, "x_limit", ratio(speed(r), limit));
            } else if is_own_loader_arm(arm) {
                push(arm, "x_bare", ratio(speed(r), bare));
                push(arm, "x_bare_paired", paired_bare(r, near));
                if COPY_BOUND_LOADER_TABLES.contains(&table) {
                    push(arm, "x_limit", ratio(speed(r), limit));
                }
            }
        }
    }
    out
}
