//! Regression gate (`harness gate BASELINE CURRENT`): a quick run (`results.json`) against the
//! committed baseline (`results/baseline-quick.json`, built by `harness baseline` from at least
//! three quick runs of one commit: [`crate::gate_baseline`]).
//!
//! The gate fails on:
//! 1. **facts** (final, never retried): a row of CURRENT that is unverified (`verified: false`) or
//!    failed; a loaderx loader row (the bare gather, the Rust and Python loaders) that did not run
//!    or was not verified; a table or a gated figure of the baseline that CURRENT lacks;
//! 2. **speed** (confirmed by a rerun): a gated figure below its band, `value < center x (1 -
//!    band)`, where `center` is the figure's median over the baseline's runs and `band` comes from
//!    the figure's own spread over those runs ([`crate::gate_baseline::band`]).
//!
//! The gated figures ([`figures`]) are ratios to a limit measured in the same run, so that a
//! machine of another speed moves the limit and the row alike: a `zrecord-raw` store row's
//! `x_memcpy` (its MiB/s over the table's `memcpy-limit` row), and each loaderx loader row's
//! samples/s over the loader table's `memcpy-limit` row (`x_limit`). A 25 % slower zrecord or
//! loaderx therefore lowers its figure by 25 %, and every band is at most
//! [`MAX_BAND`], below that.
//!
//! A quick cell runs once on a shared machine, and one cell a neighbour slowed reads like a
//! regression. So a speed violation is confirmed before it fails CI: `--retry-file FILE` writes
//! the tables with speed violations (only when no fact was found) for `scripts/ci-gate.sh` to
//! measure once more, and the gate of that second run (`--partial`: it holds only those tables)
//! decides. A real regression fails both runs.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde_json::Value;

use crate::cell_args::GateArgs;
use crate::error::{HarnessError, Result};
use crate::model::{SCHEMA, Status};
use serde::{Deserialize, Serialize};

/// Reads a JSON document and checks its `schema`.
pub fn load(p: &PathBuf, schema: &'static str) -> Result<Value> {
    let b = std::fs::read(p).map_err(HarnessError::io("read", p))?;
    let v: Value = serde_json::from_slice(&b).map_err(|source| HarnessError::Parse {
        path: p.clone(),
        source,
    })?;
    let found = v.get("schema").and_then(Value::as_str);
    if found != Some(schema) {
        return Err(HarnessError::Schema {
            path: p.clone(),
            expected: schema,
            found: found.map(str::to_string),
        });
    }
    Ok(v)
}

/// Rule 1 on one table of CURRENT: rows that are wrong, failed, or (loaderx's own loader rows)
/// did not run verified.
fn facts(t: &Value, v: &mut Vec<Violation>) {
    let tname = text(t, "name");
    for r in rows(t) {
        let failed = r
            .get("status")
            .and_then(Value::as_str)
            .and_then(Status::from_name)
            == Some(Status::Failed);
        let own_loader = is_own_loader_arm(text(r, "arm"));
        let unverified = r.get("verified") == Some(&Value::Bool(false))
            || (own_loader && r.get("verified") != Some(&Value::Bool(true)));
        if failed || unverified {
            let label = ["backend", "arm", "row", "loader"]
                .iter()
                .find_map(|k| r.get(*k).and_then(Value::as_str))
                .unwrap_or("?");
            v.push(fact(
                tname,
                format!("{tname}: {label} is unverified or failed"),
            ));
        }
    }
}

/// The list of gate violations (empty = pass). With `partial`, a baseline table that CURRENT
/// does not hold is not checked (a confirmation run measures only the tables in question).
pub fn check(base: &Baseline, cur: &Value, partial: bool) -> Vec<Violation> {
    let mut v = Vec::new();
    for t in tables(cur) {
        facts(t, &mut v);
    }
    let have: Vec<&str> = tables(cur).iter().map(|t| text(t, "name")).collect();
    let got = figures_near(cur, base.near_ns);
    let mut missing_tables: Vec<&str> = Vec::new();
    for f in &base.figures {
        if !have.contains(&f.table.as_str()) {
            if !partial && !missing_tables.contains(&f.table.as_str()) {
                missing_tables.push(&f.table);
                v.push(fact(
                    &f.table,
                    format!("{}: the table is missing (the baseline gates it)", f.table),
                ));
            }
            continue;
        }
        let Some(c) = got
            .iter()
            .find(|g| g.table == f.table && g.row == f.row && g.metric == f.metric)
        else {
            v.push(fact(
                &f.table,
                format!(
                    "{}: {} has no {} (the row is missing or did not run; the baseline gates it)",
                    f.table, f.row, f.metric
                ),
            ));
            continue;
        };
        let floor = f.floor();
        if f.gated && c.far {
            // Taken only while the cores sat far apart. A first run asks for the confirmation
            // rerun (it retakes far cells); a confirmation run (`partial`) that still has no near
            // repeat leaves it unjudged (`unjudged` says so).
            if !partial {
                v.push(Violation {
                    table: f.table.clone(),
                    speed: true,
                    msg: format!(
                        "{}: {} {} ({:.4}) was measured only while the cores sat far apart: \
                         measured again to judge it",
                        f.table, f.row, f.metric, c.value
                    ),
                    below: None,
                });
            }
            continue;
        }
        if f.gated && c.value < floor {
            v.push(Violation {
                table: f.table.clone(),
                speed: true,
                msg: format!(
                    "{}: {} {} is {:.4}, below its floor {:.4} (baseline median {:.4} less its {:.0} % band)",
                    f.table,
                    f.row,
                    f.metric,
                    c.value,
                    floor,
                    f.center,
                    f.band * 100.0
                ),
                below: Some(confirm::key(&f.table, &f.row, f.metric.as_str())),
            });
        }
    }
    v
}

/// The gated figures of `cur` that [`check`] does not judge, each with why: every repeat behind
/// it was taken while the cores sat far apart ([`Figure::far`]).
pub fn unjudged(base: &Baseline, cur: &Value) -> Vec<String> {
    figures_near(cur, base.near_ns)
        .into_iter()
        .filter(|c| {
            c.far
                && base.figures.iter().any(|f| {
                    f.gated && f.table == c.table && f.row == c.row && f.metric == c.metric
                })
        })
        .map(|c| {
            format!(
                "{}: {} {} ({:.4}) is not judged: every repeat of a row behind it ran while the \
                 cores sat far apart (a cache line's round trip over {}x the near level)",
                c.table,
                c.row,
                c.metric,
                c.value,
                benchkit::placement::FAR_OVER_NEAR
            )
        })
        .collect()
}

pub fn main(g: GateArgs) -> Result<ExitCode> {
    let (base, cur) = (&g.baseline, &g.current);
    let c = load(cur, SCHEMA)?;
    let (b, note) = pick(&Baseline::load_all(base)?, &c);
    match note {
        Some(n) => println!("gate: {n}"),
        None => println!("gate: the baseline of {} ({} runs)", b.kind(), b.runs.len()),
    }
    let mut violations = check(&b, &c, g.partial);
    if g.partial {
        // A first run asked for this confirmation instead (`check`).
        for u in unjudged(&b, &c) {
            println!("gate: {u}");
        }
    }
    // A confirmation: a speed violation is final only where the run that asked for it put the
    // same figure below its floor too (`confirm`).
    let mut again = Vec::new();
    if let Some(first) = &g.first {
        let f = load(first, SCHEMA)?;
        let split = confirm_split(&b, &f, violations, g.last);
        for x in &split.dropped {
            println!("gate: not confirmed (below its floor in one judged run only): {x}");
        }
        for x in &split.again {
            println!("gate: judged once, measured again: {x}");
        }
        violations = split.last;
        again = split.again;
    }
    if let Some(f) = confirm::write_retry(g.retry_file.as_ref(), &violations, &again)? {
        println!("gate: tables to measure again: {f}");
    }
    if !violations.is_empty() {
        for x in &violations {
            println!("gate: FAIL: {x}");
        }
        Ok(ExitCode::from(1))
    } else if !again.is_empty() {
        Ok(ExitCode::from(confirm::AGAIN_EXIT))
    } else {
        println!(
            "gate: pass ({} vs {}: {} figures present; the {} speed-gated ones within their bands)",
            cur.display(),
            base.display(),
            b.figures.len(),
            b.figures.iter().filter(|f| f.gated).count()
        );
        Ok(ExitCode::SUCCESS)
    }
}

/// A confirmation's `violations` split by what `first` (the run that asked for it) said of each
/// figure: below its floor there too, judged and passed, or not judged (`confirm::split`).
fn confirm_split(
    base: &Baseline,
    first: &Value,
    violations: Vec<Violation>,
    last: bool,
) -> confirm::Split {
    let below: Vec<String> = check(base, first, false)
        .into_iter()
        .filter_map(|v| v.below)
        .collect();
    let judged: Vec<String> = figures_near(first, base.near_ns)
        .into_iter()
        .filter(|f| !f.far)
        .map(|f| confirm::key(&f.table, &f.row, f.metric))
        .collect();
    confirm::split(&below, &judged, violations, last)
}

/// Whether a row is one the gate's speed rule covers (a zrecord-raw store row or a loaderx
/// loader row).
pub fn is_gated_row(r: &Value) -> bool {
    is_gated_store_row(text(r, "backend")) || is_own_loader_arm(text(r, "arm"))
}

pub const BASELINE_SCHEMA: &str = "loaderx-gate-baseline/1";
/// Runs a baseline needs at least (a spread from two values says little).
pub const MIN_RUNS: usize = 3;
/// Repeats a cell of a baseline run needs for its figures to be speed-gated.
pub const MIN_REPEATS: u64 = 3;
/// Times a quick or `--gated` run (CI's first run and its confirmation) retakes a timed repeat of a
/// row the gate reads ([`reads_row`]) whose cell ran while the cores sat far apart
/// (`benchkit::placement`), keeping every take: the gate reads the repeats taken near; a figure
/// with none asks for the confirmation rerun, and one still without a near repeat there is not
/// judged.
pub const RETAKES_FAR: usize = 2;
/// A band is this many SDs of the figure's logarithm over the runs...
pub const BAND_SDS: f64 = 3.0;
/// ...and at least this wide: three runs on one VM can agree by chance, and a fresh VM of the
/// same kind (what CI gets) moved a figure by 11 % at one commit (`b5eb151`: loader-ragged-tokens
/// `bare-gather` over the limit read 0.289 on CI's EPYC VM, 0.322 on another); 15 % leaves room
/// for a VM further out than the two seen, and still catches 25 % off a run 13 % above the center...
pub const MIN_BAND: f64 = 0.15;
/// ...and at most this wide, so a 25 % slower row always fails.
pub const MAX_BAND: f64 = 0.18;

/// One run a baseline was built from, as its `results.json` names itself.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunReceipt {
    pub path: String,
    pub git_commit: Option<String>,
    pub git_dirty: Option<bool>,
    pub cpu: Option<String>,
    pub logical_cpus: Option<u64>,
}

impl RunReceipt {
    /// Measured from a clean tree at a known commit (what a baseline or spread run must be).
    pub fn is_clean(&self) -> bool {
        self.git_dirty == Some(false) && self.git_commit.is_some()
    }
}

/// A machine kind: the CPU model and logical CPU count a run's `machine` receipt names. A gated
/// figure is a ratio to a limit measured in the same run, but how a loader's worker hand-over or
/// a gather's stores compare with a plain copy still differs between CPU models (2-core EPYC and
/// Xeon VMs differ by up to 2x on the dense loader rows), so each kind has its own baseline.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Kind {
    pub cpu: Option<String>,
    pub logical_cpus: Option<u64>,
}

impl Kind {
    /// The kind a results document was measured on.
    pub fn of(doc: &Value) -> Kind {
        let m = doc.get("machine");
        Kind {
            cpu: m
                .and_then(|m| m.get("cpu"))
                .and_then(Value::as_str)
                .map(str::to_string),
            logical_cpus: m
                .and_then(|m| m.get("logical_cpus"))
                .and_then(Value::as_u64),
        }
    }

    /// A file name for the kind's baseline: `amd-epyc-2cpu`, `intel-r-xeon-r-processor-2-80ghz-2cpu`.
    pub fn slug(&self) -> String {
        let cpu = self
            .cpu
            .as_deref()
            .unwrap_or("unknown-cpu")
            .to_ascii_lowercase();
        let words: Vec<&str> = cpu
            .split(|c: char| !c.is_ascii_alphanumeric())
            .filter(|w| !w.is_empty())
            .collect();
        format!("{}-{}cpu", words.join("-"), self.logical_cpus.unwrap_or(0))
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}, {} logical CPUs",
            self.cpu.as_deref().unwrap_or("unknown CPU"),
            self.logical_cpus.map_or("?".to_string(), |n| n.to_string())
        )
    }
}

/// The baseline of `cur`'s machine kind among `bases`, and `None`; or, when no baseline is of
/// that kind, the first one with its speed rule off and a sentence saying so (a speed figure
/// measured on another CPU model is not a regression).
pub fn pick(bases: &[Baseline], cur: &Value) -> (Baseline, Option<String>) {
    let kind = Kind::of(cur);
    if let Some(b) = bases.iter().find(|b| b.kind() == kind) {
        return (b.clone(), None);
    }
    let known: Vec<String> = bases.iter().map(|b| b.kind().to_string()).collect();
    let note = format!(
        "no baseline for this machine kind ({kind}; baselines: {}): speed is not gated on it, \
         the facts are",
        known.join("; ")
    );
    (bases[0].ungated(), Some(note))
}

/// One gated figure over the baseline's runs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GatedFigure {
    pub table: String,
    pub row: String,
    pub metric: String,
    /// The figure in each run, in the order of the baseline's `runs`.
    pub values: Vec<f64>,
    /// The figure in the `spread_runs` that have it (they widen `sd_log`, never move `center`).
    #[serde(default)]
    pub spread_values: Vec<f64>,
    pub center: f64,
    pub sd_log: f64,
    pub band: f64,
    /// Whether the speed rule applies: a figure whose spread over the runs exceeds [`MAX_SD`]
    /// cannot be held to a band that catches a 25 % slowdown and passes its own noise, and one
    /// whose band would let a run at its highest value pass [`SLOWER`] times slower does not
    /// catch that slowdown: either is only required to be present and verified (the facts).
    #[serde(default = "yes")]
    pub gated: bool,
    /// Why a figure is not gated when neither rule above says it (its runs' repeats).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

fn yes() -> bool {
    true
}

/// The slowdown the gate must catch: a gated row at this share of a baseline run's speed fails.
pub const SLOWER: f64 = 0.75;

/// The largest spread (SD of the logarithm over the baseline's runs) a speed-gated figure may
/// have: at twice this SD below the median the band ([`MAX_BAND`]) is reached.
pub const MAX_SD: f64 = MAX_BAND / 2.0;

impl GatedFigure {
    /// The lowest value that passes.
    pub fn floor(&self) -> f64 {
        self.center * (1.0 - self.band)
    }

    /// Whether a run at one of the baseline's own values, [`SLOWER`] times slower, would still
    /// reach the floor: then the band does not catch that slowdown, and the figure is not gated.
    pub fn misses_a_slowdown(&self) -> bool {
        self.values.iter().any(|v| v * SLOWER >= self.floor())
    }
}

/// The committed baseline.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Baseline {
    pub schema: String,
    /// How the bands were set, in words (for a reader of the file).
    pub rule: String,
    pub runs: Vec<RunReceipt>,
    /// Runs of the same machine kind from other commits or VMs, for the spread only.
    #[serde(default)]
    pub spread_runs: Vec<RunReceipt>,
    pub figures: Vec<GatedFigure>,
    /// The near level of the baseline's runs (the lower decile of all their placement readings),
    /// ns: the gate takes the lower of it and a run's own, so a run that sat far apart for its
    /// whole length reads far ([`figures_near`]) instead of setting a far level of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub near_ns: Option<f64>,
}

/// Median, sample SD of the logarithms, and band of one figure's values.
#[cfg(test)]
pub fn band(values: &[f64]) -> (f64, f64, f64) {
    band_with(values, &[])
}

/// [`band`] with a figure's values in other runs of the machine kind (`spread`: other commits,
/// other VMs): the center is the median of `values` (the baseline's commit) alone, the SD is of
/// `values` and `spread` together. Three runs on one VM cannot show how far a fresh VM of the
/// same kind (what CI gets) moves a ratio; runs from other sessions can.
pub fn band_with(values: &[f64], spread: &[f64]) -> (f64, f64, f64) {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        // No value (every run read the figure only while the cores sat far apart): no center,
        // and the figure is not gated.
        return (0.0, 0.0, MAX_BAND);
    }
    let center = if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    };
    let logs: Vec<f64> = values.iter().chain(spread).map(|x| x.ln()).collect();
    let m = logs.len();
    let mean = logs.iter().sum::<f64>() / m as f64;
    let sd = if m > 1 {
        (logs.iter().map(|l| (l - mean).powi(2)).sum::<f64>() / (m - 1) as f64).sqrt()
    } else {
        0.0
    };
    (center, sd, (BAND_SDS * sd).clamp(MIN_BAND, MAX_BAND))
}

impl Baseline {
    /// The baseline of `runs` (results documents): every figure that all of them have.
    #[cfg(test)]
    pub fn from_runs(runs: &[Value], receipts: Vec<RunReceipt>) -> Result<Baseline> {
        Baseline::with_spread(runs, receipts, &[], Vec::new())
    }

    /// [`Baseline::from_runs`], each figure's spread taken over `spread` too ([`band_with`]).
    pub fn with_spread(
        runs: &[Value],
        receipts: Vec<RunReceipt>,
        spread: &[Value],
        spread_receipts: Vec<RunReceipt>,
    ) -> Result<Baseline> {
        if runs.len() < MIN_RUNS {
            return Err(HarnessError::other(format!(
                "a baseline needs at least {MIN_RUNS} runs, got {}",
                runs.len()
            )));
        }
        let per_run: Vec<Vec<Figure>> = runs.iter().map(figures).collect();
        let per_spread: Vec<Vec<Figure>> = spread.iter().map(figures).collect();
        // A baseline of one-repeat runs sets the level of a single reading, not of the best of
        // several, which the confirmation rerun (three repeats) reads: it gates no speed.
        let few_repeats = runs.iter().any(|r| {
            r.get("repeats")
                .and_then(Value::as_u64)
                .is_some_and(|n| n < MIN_REPEATS)
        });
        let mut out = Vec::new();
        for f in &per_run[0] {
            let found: Option<Vec<&Figure>> = per_run
                .iter()
                .map(|fs| {
                    fs.iter()
                        .find(|g| g.table == f.table && g.row == f.row && g.metric == f.metric)
                })
                .collect();
            // A run whose repeats behind the figure all ran while the cores sat far apart gives
            // it no value (the machine's placement, not the code).
            let values = found.map(|fs| {
                fs.iter()
                    .filter(|g| !g.far)
                    .map(|g| g.value)
                    .collect::<Vec<f64>>()
            });
            let Some(values) = values else {
                return Err(HarnessError::other(format!(
                    "{}: {} {} is missing from a run: a baseline gates figures every run has",
                    f.table, f.row, f.metric
                )));
            };
            let spread_values: Vec<f64> = per_spread
                .iter()
                .filter_map(|fs| {
                    fs.iter()
                        .find(|g| g.table == f.table && g.row == f.row && g.metric == f.metric)
                        .filter(|g| !g.far)
                        .map(|g| g.value)
                })
                .collect();
            let (center, sd_log, band) = band_with(&values, &spread_values);
            let mut g = GatedFigure {
                table: f.table.clone(),
                row: f.row.clone(),
                metric: f.metric.to_string(),
                values,
                spread_values,
                note: None,
                center,
                sd_log,
                band,
                gated: false,
            };
            // Gated when its spread allows a band (MAX_SD), and when that band catches a 25 %
            // slowdown from every level the runs showed, not only from their median.
            g.gated = sd_log <= MAX_SD && !g.misses_a_slowdown();
            if g.values.len() < MIN_RUNS {
                g.gated = false;
                g.note = Some(format!(
                    "not gated: {} of its runs measured it only while the cores sat far apart, \
                     leaving {} values",
                    runs.len() - g.values.len(),
                    g.values.len()
                ));
            }
            if g.gated && few_repeats {
                g.gated = false;
                g.note = Some(format!(
                    "not gated: its runs measured fewer than {MIN_REPEATS} repeats a cell, and the \
                     gate reads a row's best repeat (one-repeat figures moved 10-22 % run to run \
                     on a 2-core EPYC VM)"
                ));
            }
            out.push(g);
        }
        let readings: Vec<f64> = runs.iter().flat_map(readings).collect();
        Ok(Baseline {
            near_ns: benchkit::placement::near_level(&readings),
            schema: BASELINE_SCHEMA.to_string(),
            rule: format!(
                "floor = median over the runs x (1 - band); band = {BAND_SDS} x the sample SD of \
                 ln(value) over the runs and the spread runs, within [{MIN_BAND}, {MAX_BAND}]; \
                 gated when that SD is at most {MAX_SD} and a run at any of its values 25 % \
                 slower falls below the floor; each figure a ratio of two rows' best repeats in \
                 one run: zrecord-raw over memcpy-limit (x_memcpy, store tables), bare-gather \
                 over memcpy-limit (x_limit, loader tables), each other loaderx loader row over \
                 bare-gather (x_bare) and, in loader-dense-vision, over memcpy-limit too \
                 (x_limit); a zrecord-raw row's x_memcpy is the median of its near repeats' \
                 ratios to the copy limit timed beside it in each cell where every cell timed \
                 one, and x_memcpy_rows beside it the row over the limit row; loaderx-w0's \
                 x_bare_paired the median of its near repeats over the bare gather timed in its \
                 own cell; a repeat \
                 taken while the cores sat far apart (a cache line's round trip over {}x the \
                 run's near level, the lower decile of its readings) counts only when none was \
                 near, and a figure left with such repeats alone gives no value",
                benchkit::placement::FAR_OVER_NEAR
            ),
            runs: receipts,
            spread_runs: spread_receipts,
            figures: out,
        })
    }

    /// The machine kind its runs were measured on (the first run's: `harness baseline` refuses
    /// runs of different kinds).
    pub fn kind(&self) -> Kind {
        self.runs
            .first()
            .map(|r| Kind {
                cpu: r.cpu.clone(),
                logical_cpus: r.logical_cpus,
            })
            .unwrap_or_default()
    }

    /// The same figures with the speed rule off: what a run on a machine kind that has no
    /// baseline is held to (the facts: every table and figure present, every row verified).
    pub fn ungated(&self) -> Baseline {
        let mut b = self.clone();
        for f in &mut b.figures {
            f.gated = false;
        }
        b
    }

    /// The baselines at `p`: the one file, or every `*.json` file of the directory (one per
    /// machine kind), in name order.
    pub fn load_all(p: &Path) -> Result<Vec<Baseline>> {
        if !p.is_dir() {
            return Ok(vec![Baseline::load(&p.to_path_buf())?]);
        }
        let mut files: Vec<PathBuf> = std::fs::read_dir(p)
            .map_err(HarnessError::io("list", p))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|f| f.extension().is_some_and(|x| x == "json"))
            .collect();
        files.sort();
        if files.is_empty() {
            return Err(HarnessError::other(format!(
                "{}: no baseline (*.json) in the directory",
                p.display()
            )));
        }
        files.iter().map(Baseline::load).collect()
    }

    /// A baseline that gates no figure: only the facts apply (for tests of rule 1).
    #[cfg(test)]
    pub fn empty() -> Baseline {
        Baseline {
            schema: BASELINE_SCHEMA.to_string(),
            rule: String::new(),
            runs: Vec::new(),
            spread_runs: Vec::new(),
            figures: Vec::new(),
            near_ns: None,
        }
    }

    pub fn load(p: &PathBuf) -> Result<Baseline> {
        let v = load(p, BASELINE_SCHEMA)?;
        serde_json::from_value(v).map_err(|source| HarnessError::Parse {
            path: p.clone(),
            source,
        })
    }
}

mod figures;
pub use figures::{
    Figure, PAIRED_BARE, figures, figures_near, is_gated_store_row, is_own_loader_arm, readings,
    reads_row, retake_far,
};
mod confirm;
mod slowed;
mod violation;
use figures::{rows, tables, text};
pub use slowed::slowed;
pub use violation::Violation;
use violation::fact;

#[cfg(test)]
mod tests;
