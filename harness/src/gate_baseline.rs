//! The gate's baseline (`harness baseline OUT RUN...`) and its measured bite (`harness gate-bite
//! BASELINE RUN`).
//!
//! A baseline holds, for every figure the gate checks ([`crate::gate::figures`]), its value in
//! each of at least [`gate::MIN_RUNS`] quick runs of one commit on one machine kind, their median (the
//! `center`), the spread of their logarithms (`sd_log`, the sample SD) and the figure's `band`:
//! [`gate::BAND_SDS`] times that spread, kept within [`gate::MIN_BAND`] and [`gate::MAX_BAND`]. The gate fails a
//! figure below `center x (1 - band)`. `MAX_BAND` is below a 25 % slowdown on purpose: a row 25 %
//! slower than the baseline's median always fails, however noisy it was. A figure noisier than
//! `MAX_BAND / BAND_SDS` is gated at `MAX_BAND` and fails more often on noise alone; the
//! confirmation rerun (`scripts/ci-gate.sh`) makes such a false failure need two slow runs in a
//! row. `gate-bite` reports, for each figure, whether a 25 % slower copy of a committed run fails
//! and the chance that an unmodified rerun falls below the band, on the figure's own spread.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde_json::Value;

use crate::error::{HarnessError, Result};
use crate::gate::{self, Baseline, RunReceipt, is_gated_row, slowed};
use crate::model::SCHEMA;

fn receipt(path: &Path, doc: &Value) -> RunReceipt {
    let s = |k: &str, f: &str| doc.get(k).and_then(|o| o.get(f)).cloned();
    let kind = gate::Kind::of(doc);
    RunReceipt {
        path: path.display().to_string(),
        git_commit: s("source", "git_commit").and_then(|v| v.as_str().map(str::to_string)),
        git_dirty: s("source", "git_dirty").and_then(|v| v.as_bool()),
        cpu: kind.cpu,
        logical_cpus: kind.logical_cpus,
    }
}

/// `harness baseline OUT RUN...`: the runs must be of one commit, from a clean tree, on one
/// machine kind (CPU model and core count).
pub fn main_build(out: &Path, run_paths: &[PathBuf], spread_paths: &[PathBuf]) -> Result<ExitCode> {
    let runs: Vec<Value> = run_paths
        .iter()
        .map(|p| gate::load(p, SCHEMA))
        .collect::<Result<_>>()?;
    let receipts: Vec<RunReceipt> = run_paths
        .iter()
        .zip(&runs)
        .map(|(p, d)| receipt(p, d))
        .collect();
    for r in &receipts {
        if !r.is_clean() {
            return Err(HarnessError::other(format!(
                "{}: not from a clean tree at a known commit (git_dirty {:?}): a baseline is built \
                 from publishable runs only",
                r.path, r.git_dirty
            )));
        }
        if (&r.git_commit, &r.cpu, r.logical_cpus)
            != (
                &receipts[0].git_commit,
                &receipts[0].cpu,
                receipts[0].logical_cpus,
            )
        {
            return Err(HarnessError::other(format!(
                "{}: commit, CPU or core count differ from {}'s: a baseline is one commit on one \
                 machine kind",
                r.path, receipts[0].path
            )));
        }
    }
    // A spread run may be of any commit (its level is not the baseline's), but it must be a
    // quick run from a clean tree on the same machine kind: how far another CPU model or corpus
    // size moves a ratio is not noise. Others (and other documents under results/, such as the
    // remote or cold tables) are left out, each with the reason.
    let (mut spread, mut spread_receipts) = (Vec::new(), Vec::new());
    for p in spread_paths.iter().filter(|p| !run_paths.contains(p)) {
        let d = match gate::load(p, SCHEMA) {
            Ok(d) => d,
            Err(e) => {
                println!("baseline: spread run {} left out: {e}", p.display());
                continue;
            }
        };
        let r = receipt(p, &d);
        let why = if (&r.cpu, r.logical_cpus) != (&receipts[0].cpu, receipts[0].logical_cpus) {
            Some("another machine kind")
        } else if d.get("quick") != Some(&Value::Bool(true)) {
            Some("not a quick run")
        } else if !r.is_clean() {
            Some("not from a clean tree at a known commit")
        } else {
            None
        };
        match why {
            Some(why) => println!("baseline: spread run {} left out: {why}", r.path),
            None => {
                spread.push(d);
                spread_receipts.push(r);
            }
        }
    }
    let b = Baseline::with_spread(&runs, receipts, &spread, spread_receipts)?;
    // A directory holds one baseline per machine kind, named by the kind.
    let out = if out.is_dir() {
        out.join(format!("{}.json", b.kind().slug()))
    } else {
        out.to_path_buf()
    };
    let out = out.as_path();
    let text = serde_json::to_string_pretty(&b).map_err(HarnessError::BadOutput)? + "\n";
    std::fs::write(out, text).map_err(HarnessError::io("write", out))?;
    println!(
        "baseline: {} figures ({} speed-gated) from {} runs, spread over {} more -> {}",
        b.figures.len(),
        b.figures.iter().filter(|f| f.gated).count(),
        run_paths.len(),
        b.spread_runs.len(),
        out.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// The standard normal CDF (Abramowitz and Stegun 7.1.26, absolute error below 1.5e-7).
fn normal_cdf(z: f64) -> f64 {
    let x = z.abs() / std::f64::consts::SQRT_2;
    let t = 1.0 / (1.0 + 0.327_591_1 * x);
    let poly = t
        * (0.254_829_592
            + t * (-0.284_496_736
                + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
    let erfc = poly * (-x * x).exp();
    if z >= 0.0 {
        1.0 - erfc / 2.0
    } else {
        erfc / 2.0
    }
}

/// What `gate-bite` measured.
#[derive(Debug)]
pub struct Bite {
    /// Whether the unmodified run passes.
    pub clean_passes: bool,
    /// Per figure: (table, row, caught when 25 % slower alone, chance a rerun falls below the
    /// band on noise).
    pub rows: Vec<(String, String, bool, f64)>,
    /// Whether the gate fails with every gated row 25 % slower at once.
    pub all_caught: bool,
    /// The chance an unmodified run passes: alone, and with the confirmation rerun.
    pub pass_once: f64,
    pub pass_confirmed: f64,
}

/// The gate's bite on `run`: each gated row 25 % slower, alone and all together; and the chance
/// of a false failure on each figure's own spread (its log-normal noise, SD `sd_log`).
pub fn bite(b: &Baseline, run: &Value) -> Bite {
    let clean_passes = gate::check(b, run, false).is_empty();
    let mut rows = Vec::new();
    let mut per_table: Vec<(String, f64)> = Vec::new();
    for f in b.figures.iter().filter(|f| f.gated) {
        let one = |t: &str, r: &Value| {
            let name = Value::from(f.row.as_str());
            t == f.table && (r.get("backend") == Some(&name) || r.get("arm") == Some(&name))
        };
        let v = gate::check(b, &slowed(run, gate::SLOWER, &one), false);
        // This figure's own violation (a row may have two figures, `x_memcpy` and
        // `x_memcpy_rows`).
        let own = format!("{} {} is", f.row, f.metric);
        let caught = v.iter().any(|x| x.msg.contains(&own) && x.table == f.table);
        let p = if f.sd_log > 0.0 {
            normal_cdf((1.0 - f.band).ln() / f.sd_log)
        } else {
            0.0
        };
        rows.push((
            f.table.clone(),
            format!("{} {}", f.row, f.metric),
            caught,
            p,
        ));
        match per_table.iter_mut().find(|(t, _)| *t == f.table) {
            Some((_, pass)) => *pass *= 1.0 - p,
            None => per_table.push((f.table.clone(), 1.0 - p)),
        }
    }
    let all = gate::check(
        b,
        &slowed(run, gate::SLOWER, &|_, r| is_gated_row(r)),
        false,
    );
    // All at once, a loader row keeps its share of the bare gather (x_bare); the bare gather and
    // the store rows fail.
    let all_caught = b.figures.iter().all(|f| !f.gated) || all.iter().any(|x| x.speed);
    let pass_once = per_table.iter().map(|(_, p)| p).product();
    // A table that fails is measured again; CI fails only if it fails again.
    let pass_confirmed = per_table
        .iter()
        .map(|(_, p)| 1.0 - (1.0 - p).powi(2))
        .product();
    Bite {
        clean_passes,
        rows,
        all_caught,
        pass_once,
        pass_confirmed,
    }
}

/// `harness gate-bite BASELINE RUN`: prints [`bite`] and fails unless the unmodified run passes
/// and every 25 % slowdown is caught.
pub fn main_bite(base: &Path, run: &PathBuf) -> Result<ExitCode> {
    let r = gate::load(run, SCHEMA)?;
    let (b, note) = gate::pick(&Baseline::load_all(base)?, &r);
    if let Some(n) = note {
        return Err(HarnessError::other(format!("{}: {n}", run.display())));
    }
    let x = bite(&b, &r);
    println!("| table | row and figure | 25 % slower: caught | P(unmodified rerun below band) |");
    println!("|---|---|---|---|");
    for (t, row, caught, p) in &x.rows {
        println!(
            "| {t} | {row} | {} | {:.4} |",
            if *caught { "yes" } else { "NO" },
            p
        );
    }
    println!(
        "unmodified run: {}; every gated row 25 % slower at once: {}; P(an unmodified run passes): {:.3} alone, {:.3} with the confirmation rerun",
        if x.clean_passes { "passes" } else { "FAILS" },
        if x.all_caught { "fails" } else { "NOT caught" },
        x.pass_once,
        x.pass_confirmed
    );
    for f in b.figures.iter().filter(|f| !f.gated) {
        let why = if f.sd_log > gate::MAX_SD {
            format!("spread {:.3} > {:.3}", f.sd_log, gate::MAX_SD)
        } else if f.misses_a_slowdown() {
            format!(
                "a run at one of its values, 25 % slower, would pass its floor {:.3}",
                f.floor()
            )
        } else {
            f.note
                .clone()
                .unwrap_or_else(|| "marked by hand: the baseline file says why".to_string())
        };
        println!(
            "not speed-gated ({why}): {} {} {} over the runs {:?}",
            f.table, f.row, f.metric, f.values
        );
    }
    let ok = x.clean_passes && x.all_caught && x.rows.iter().all(|r| r.2);
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::{MAX_BAND, MIN_BAND, MIN_RUNS, band};

    #[test]
    fn bands_follow_the_spread_within_their_bounds() {
        let (c, sd, b) = band(&[1.0, 1.0, 1.0]);
        assert_eq!((c, sd, b), (1.0, 0.0, MIN_BAND));
        let (c, _, b) = band(&[0.9, 1.0, 1.1]);
        assert_eq!(c, 1.0);
        assert!(b > MIN_BAND && b <= MAX_BAND, "{b}");
        let (_, _, b) = band(&[0.5, 1.0, 2.0]);
        assert_eq!(b, MAX_BAND);
        let (c, _, _) = band(&[4.0, 1.0, 2.0, 3.0]);
        assert_eq!(c, 2.5);
        const { assert!(MAX_BAND < 0.25, "a 25 % slower row must always fail") };
        assert!((normal_cdf(0.0) - 0.5).abs() < 1e-6);
        assert!((normal_cdf(-1.959_964) - 0.025).abs() < 1e-5);
        assert!((normal_cdf(1.644_854) - 0.95).abs() < 1e-5);
    }

    #[test]
    fn too_few_runs_or_a_missing_figure_is_refused() {
        let doc = |x: f64| {
            serde_json::json!({"schema": SCHEMA, "tables": [{"name": "dense-vision", "rows": [
                {"backend": "zrecord-raw", "x_memcpy": x, "status": "ok", "verified": true}]}]})
        };
        assert!(Baseline::from_runs(&[doc(0.5), doc(0.6)], Vec::new()).is_err());
        let mut gone = doc(0.5);
        gone["tables"][0]["rows"][0]["x_memcpy"] = Value::Null;
        assert!(Baseline::from_runs(&[doc(0.5), doc(0.6), gone], Vec::new()).is_err());
        let b = Baseline::from_runs(&[doc(0.5), doc(0.52), doc(0.51)], Vec::new()).expect("ok");
        assert_eq!(b.figures.len(), 1);
        assert_eq!(b.figures[0].values, vec![0.5, 0.52, 0.51]);
        assert!(b.figures[0].gated);
        // A figure too noisy to gate: present and verified is all it must be.
        let noisy = Baseline::from_runs(&[doc(0.5), doc(0.7), doc(0.6)], Vec::new()).expect("ok");
        assert!(!noisy.figures[0].gated);
        assert!(gate::check(&noisy, &doc(0.3), false).is_empty());
        let x = bite(&b, &doc(0.51));
        assert!(x.clean_passes && x.all_caught && x.rows[0].2, "{x:?}");
        assert!(x.pass_confirmed >= x.pass_once);
    }

    /// Every committed baseline (one per machine kind, `results/gate/`) bites on the newest run
    /// it was built from: each gated row 25 % slower fails, the run itself passes; and a run of
    /// one kind is never speed-gated by another kind's baseline.
    #[test]
    fn the_committed_baselines_bite() {
        let root = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
        let all = Baseline::load_all(&root.join("results/gate")).expect("committed baselines");
        assert!(
            all.len() >= 2,
            "one baseline per machine kind CI has run on"
        );
        for b in &all {
            assert!(b.runs.len() >= MIN_RUNS);
            assert!(b.figures.iter().any(|f| f.row == "python-loaderx-w4"));
            assert!(b.figures.iter().any(|f| f.row == "zrecord-raw"));
            let newest = b.runs.last().expect("a run");
            let run = gate::load(&root.join(&newest.path), SCHEMA).expect("run");
            // A baseline of one-repeat runs gates no speed (the facts only), and says why.
            if run["repeats"]
                .as_u64()
                .is_some_and(|n| n < gate::MIN_REPEATS)
            {
                assert!(b.figures.iter().all(|f| !f.gated), "{:?}", b.kind());
                assert!(b.figures.iter().any(|f| f.note.is_some()));
            } else {
                assert!(
                    b.figures.iter().filter(|f| f.gated).count() >= 8,
                    "{:?} gates too little",
                    b.kind()
                );
            }
            let (picked, note) = gate::pick(&all, &run);
            assert!(note.is_none() && picked == *b, "{:?}: {note:?}", b.kind());
            let x = bite(b, &run);
            assert!(x.clean_passes, "{x:?}");
            assert!(x.all_caught, "{x:?}");
            assert!(x.rows.iter().all(|r| r.2), "{x:?}");
            // Another kind's run: its figures are not held to this kind's bands.
            let mut other = run.clone();
            other["machine"]["cpu"] = Value::from("Some Other CPU");
            let (ungated, note) = gate::pick(&all, &other);
            assert!(note.is_some() && ungated.figures.iter().all(|f| !f.gated));
            let slowed_all = slowed(&other, gate::SLOWER, &|_, r| is_gated_row(r));
            // (Facts still hold: an older kind's run lacks figures added since, such as
            // `x_bare_paired`, which the picked baseline lists.)
            let v = gate::check(&ungated, &slowed_all, false);
            assert!(v.iter().all(|x| !x.speed), "{v:?}");
        }
    }
}
