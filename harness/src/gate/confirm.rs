//! The confirmation's verdict (`harness gate CONFIRM --partial --first FIRST [--last]`): a speed
//! violation fails CI only when two runs that judged the figure both put it below its floor. A
//! first run asks for the confirmation when any figure of a table fails or was measured only while
//! the cores sat far apart; the confirmation then judges every figure of that table again. A
//! figure below its floor there that the first run judged and passed was below it once in two
//! judged runs: noise, not confirmed. One the first run could not judge (far apart throughout) has
//! been judged once: it is measured once more (`AGAIN_EXIT`), and that run decides (`--last`).
//! A 25 % slower build fails every run that judges the figure, so it still fails twice; a VM whose
//! neighbours slow one row for a few minutes no longer fails CI on one reading (on the EPYC VM at
//! `0ea9a06`, a first run far apart for dense `python-loaderx-w4`, then a confirmation in which the
//! host's contention had cut the ragged copy limit from 20.8 to 12.3 M samples/s within three
//! repeats, read that row at 0.87 of the bare gather, its floor 0.88, its baseline 1.00-1.06).

use std::path::PathBuf;

use super::violation::{Violation, retry_tables};
use crate::error::{HarnessError, Result};

/// The exit status of a confirmation that measured figures judged once: the tables in the retry
/// file are measured once more and that run, checked with `--last`, decides.
pub const AGAIN_EXIT: u8 = 3;

/// A figure's name in violations and in the split.
pub fn key(table: &str, row: &str, metric: &str) -> String {
    format!("{table}/{row}/{metric}")
}

/// A confirmation's violations, sorted by what the first run said of each figure.
#[derive(Debug, Default)]
pub struct Split {
    /// Final: facts, and figures below their floor in both runs.
    pub last: Vec<Violation>,
    /// Below the floor here, not judged by the first run: measured once more (none with `last`).
    pub again: Vec<Violation>,
    /// Below the floor here only (the first run judged the figure and it passed), or judged once
    /// in the last confirmation: not failed.
    pub dropped: Vec<Violation>,
}

/// Splits `violations` (a confirmation's) by what the run that asked for it said of each figure:
/// `below_first`, the figures it put below their floor; `judged_first`, those it judged (read
/// near); `last`: no further confirmation follows.
pub fn split(
    below_first: &[String],
    judged_first: &[String],
    violations: Vec<Violation>,
    last: bool,
) -> Split {
    let mut out = Split::default();
    for v in violations {
        match v.below.clone() {
            // A fact, or a figure far apart here too (a confirmation does not report those).
            None => out.last.push(v),
            Some(k) if below_first.contains(&k) => out.last.push(v),
            Some(k) if judged_first.contains(&k) || last => out.dropped.push(v),
            Some(_) => out.again.push(v),
        }
    }
    out
}

/// Writes the tables a rerun should measure (those of `violations`, or of `again` when only
/// those are left) to `file`, and returns them.
pub fn write_retry(
    file: Option<&PathBuf>,
    violations: &[Violation],
    again: &[Violation],
) -> Result<Option<String>> {
    let Some(file) = file else {
        return Ok(None);
    };
    let t = if violations.is_empty() {
        retry_tables(again)
    } else {
        retry_tables(violations)
    }
    .join(",");
    std::fs::write(file, &t).map_err(HarnessError::io("write", file))?;
    Ok((!t.is_empty()).then_some(t))
}
