//! `harness render RUN [--out DIR] [--headline] [--check]`: a finished run's tables and plots,
//! drawn again from its data. A committed run keeps `results.json` (and `cold.json` for cold
//! tables), its README, its tables and at most a few headline plots; every other figure is drawn
//! here on demand, and `--check` confirms the committed tables are what the data renders to.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::plots::{self, PlotSet};
use super::{is_remote, render_results};
use crate::cell_args::{Syntax, flags};
use crate::error::{HarnessError, Result, write_file};
use crate::model::Report;

const USAGE: &str = "usage: harness render RUN [--out DIR] [--headline] [--check]
  RUN         a run folder: results.json (tables.md, plots/) and/or cold.json (cold.md)
  --out DIR   write into DIR instead of RUN
  --headline  only the headline plots, as a run writes them (default: every plot, PNG + SVG)
  --check     write nothing; exit 1 unless RUN's committed tables are what its data renders to";

/// The arguments of `harness render`.
#[derive(Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RenderArgs {
    pub run: PathBuf,
    pub out: Option<PathBuf>,
    #[serde(default)]
    pub headline: bool,
    #[serde(default)]
    pub check: bool,
}

impl RenderArgs {
    pub fn parse(args: &[String]) -> Result<RenderArgs> {
        const SYNTAX: Syntax = Syntax {
            positional: &["run"],
            switches: &["headline", "check"],
            numbers: &[],
            usage: USAGE,
        };
        flags(args, &SYNTAX)
    }

    fn plots(&self) -> PlotSet {
        match self.headline {
            true => PlotSet::Headline,
            false => PlotSet::All,
        }
    }
}

/// The JSON document at `path`, read into `T`.
pub fn read_json<T: DeserializeOwned>(path: PathBuf) -> Result<T> {
    let bytes = std::fs::read(&path).map_err(HarnessError::io("read", &path))?;
    serde_json::from_slice(&bytes).map_err(|e| HarnessError::Format {
        path,
        expected: "the JSON document of a run",
        found: e.to_string(),
    })
}

/// A run's table files (name, text) and its parsed `results.json`, if any.
type Tables = (Vec<(&'static str, String)>, Option<Value>);

/// The tables of the run in `run` as their files would hold them: `tables.md` from
/// `results.json`, `cold.md` from `cold.json` (by `cold_md`, which the caller supplies: the cold
/// tables sit above this module).
fn tables(run: &Path, cold_md: fn(&Path) -> Result<String>) -> Result<Tables> {
    let (warm, cold) = (run.join("results.json"), run.join("cold.json"));
    if !warm.exists() && !cold.exists() {
        return Err(HarnessError::missing_in("results.json or cold.json", run));
    }
    let mut docs = Vec::new();
    let mut json = None;
    if warm.exists() {
        let j: Value = read_json(warm)?;
        docs.push(("tables.md", render_results(&j)));
        json = Some(j);
    }
    if cold.exists() {
        docs.push(("cold.md", cold_md(run)?));
    }
    Ok((docs, json))
}

/// Runs `harness render`.
pub fn main(a: &RenderArgs, cold_md: fn(&Path) -> Result<String>) -> Result<ExitCode> {
    let (docs, json) = tables(&a.run, cold_md)?;
    if a.check {
        let mut differ = 0;
        for (name, text) in &docs {
            let path = a.run.join(name);
            let same = std::fs::read_to_string(&path).is_ok_and(|c| c == *text);
            println!(
                "{}: {}",
                path.display(),
                if same { "same" } else { "DIFFERS" }
            );
            differ += usize::from(!same);
        }
        return Ok(ExitCode::from(u8::from(differ > 0)));
    }
    let out = a.out.as_deref().unwrap_or(&a.run);
    std::fs::create_dir_all(out).map_err(HarnessError::io("create", out))?;
    for (name, text) in &docs {
        let path = out.join(name);
        write_file(&path, text)?;
        println!("{}", path.display());
    }
    if let Some(j) = json.filter(|j| !is_remote(j)) {
        let rep = Report::from_json(&j);
        plots::render(&rep, &out.join("plots"), a.plots())?;
        let exts: &[&str] = match a.plots() {
            PlotSet::All => &["png", "svg"],
            PlotSet::Headline => &["png"],
        };
        for stem in plots::selected(&rep, a.plots()) {
            for ext in exts {
                println!(
                    "{}",
                    out.join("plots").join(format!("{stem}.{ext}")).display()
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cell_args::words as args;

    #[test]
    fn render_takes_one_run_and_its_flags() {
        let a = RenderArgs::parse(&args("results/r --out /tmp/x --headline")).expect("parses");
        assert_eq!(
            a,
            RenderArgs {
                run: "results/r".into(),
                out: Some("/tmp/x".into()),
                headline: true,
                check: false,
            }
        );
        let c = RenderArgs::parse(&args("--check results/r")).expect("parses");
        assert!(c.check && !c.headline && c.out.is_none());
        for bad in ["", "a b", "a --out", "a --bogus"] {
            assert!(RenderArgs::parse(&args(bad)).is_err(), "{bad:?}");
        }
    }

    /// Every committed warm run, read back through the model, renders to its committed
    /// `tables.md` byte for byte (what `harness render --check` confirms), apart from the runs an
    /// older renderer wrote (before the `write × limit` column).
    #[test]
    fn committed_tables_render_byte_for_byte() {
        const OLDER_RENDERER: &[&str] = &["2026-11-30-vm-r2"];
        let results = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../results"));
        let no_cold = |_: &Path| -> Result<String> { Ok(String::new()) };
        let mut checked = Vec::new();
        for entry in std::fs::read_dir(results).expect("list results/") {
            let dir = entry.expect("results/ entry").path();
            let run = dir.file_name().map(|n| n.to_string_lossy().into_owned());
            let Some(run) = run.filter(|r| !OLDER_RENDERER.contains(&r.as_str())) else {
                continue;
            };
            if !dir.join("results.json").is_file() {
                continue;
            }
            let (docs, _) = tables(&dir, no_cold).unwrap_or_else(|e| panic!("{run}: {e}"));
            let want = std::fs::read_to_string(dir.join("tables.md")).expect("read tables.md");
            assert_eq!(docs[0], ("tables.md", want), "{run}");
            checked.push(run);
        }
        assert!(
            checked
                .iter()
                .any(|r| r == "2026-12-03-xeon-tokens-9500673")
                && checked
                    .iter()
                    .any(|r| r == "2026-12-05-remote-full-94a3f1c"),
            "{checked:?}"
        );
    }

    /// `render --out` writes the tables and every plot of a run elsewhere, and `--check` passes on
    /// what it wrote.
    #[test]
    fn render_writes_a_run_elsewhere_and_check_reads_it_back() {
        let run = Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../results/2026-12-06-loader-dense-d758910"
        ));
        let out = tempfile::tempdir().expect("tempdir");
        let no_cold = |_: &Path| -> Result<String> { unreachable!("no cold.json") };
        let a = RenderArgs {
            run: run.into(),
            out: Some(out.path().into()),
            headline: false,
            check: false,
        };
        assert_eq!(main(&a, no_cold).expect("render"), ExitCode::SUCCESS);
        for f in [
            "tables.md",
            "plots/loader-dense-vision.png",
            "plots/loader-dense-vision.svg",
        ] {
            assert!(out.path().join(f).is_file(), "{f}");
        }
        std::fs::copy(run.join("results.json"), out.path().join("results.json")).expect("copy");
        let check = RenderArgs {
            run: out.path().into(),
            out: None,
            headline: false,
            check: true,
        };
        assert_eq!(main(&check, no_cold).expect("check"), ExitCode::SUCCESS);
        std::fs::write(out.path().join("tables.md"), "edited").expect("edit");
        assert_eq!(main(&check, no_cold).expect("check"), ExitCode::from(1));
    }
}
