//! Run options and paths: [`RunArgs`] (what `harness run` / `prepare` were asked to do),
//! the workspace root, the corpus cache and the venv Python the Python rows run under.

use std::path::PathBuf;
use std::process::Command;

use serde::{Deserialize, Deserializer};

use crate::error::HarnessError;
use crate::table::Table;

/// Options of a benchmark run, one field a flag (`--min-seconds` is `min_seconds`).
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RunArgs {
    pub quick: bool,
    pub repeats: usize,
    /// The tables `--only` selected (`None`: all).
    #[serde(deserialize_with = "only")]
    pub only: Option<Vec<Table>>,
    pub out: Option<PathBuf>,
    pub pets: Option<PathBuf>,
    pub text: Option<PathBuf>,
    pub wikitext_parquet: Option<PathBuf>,
    pub cache: PathBuf,
    pub min_seconds: Option<f64>,
    pub vision_records: Option<usize>,
    pub token_records: Option<usize>,
    /// `--cold`: also run the cold variants of the selected store tables (`cold`).
    pub cold: bool,
    /// `--cold-only`: run only those (no warm store, sampler or loader tables).
    pub cold_only: bool,
    /// `--all-plots`: write every plot (PNG + SVG), not only the headline ones.
    pub all_plots: bool,
    /// `prepare --download`: fetch the full public datasets.
    pub download: bool,
}

/// `--only`'s comma-separated selectors or table names (`loader` is both loader tables).
fn only<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<Table>>, D::Error> {
    let mut only = Vec::new();
    for word in String::deserialize(d)?.split(',').map(str::trim) {
        let before = only.len();
        only.extend(
            Table::ALL
                .into_iter()
                .filter(|t| t.selector() == word || t.name() == word),
        );
        if only.len() == before {
            let e = HarnessError::Unknown {
                what: "table",
                name: word.into(),
            };
            return Err(serde::de::Error::custom(e));
        }
    }
    Ok(Some(only))
}

/// The defaults of `harness run` without flags.
impl Default for RunArgs {
    fn default() -> RunArgs {
        RunArgs {
            quick: false,
            repeats: 3,
            only: None,
            out: None,
            pets: None,
            text: None,
            wikitext_parquet: None,
            cache: default_cache(),
            min_seconds: None,
            vision_records: None,
            token_records: None,
            cold: false,
            cold_only: false,
            all_plots: false,
            download: false,
        }
    }
}

impl RunArgs {
    pub fn selected(&self, t: Table) -> bool {
        self.only.as_ref().is_none_or(|o| o.contains(&t))
    }
}

/// `$LOADERX_CACHE`, or `cache/` at the workspace root.
pub fn default_cache() -> PathBuf {
    std::env::var_os("LOADERX_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../cache"))
}

pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A script of `harness/python/`.
pub fn python_script(name: &str) -> PathBuf {
    workspace_root().join("harness/python").join(name)
}

/// The Python of the venv named by `$var`, or of `default` at the workspace root, if it exists.
fn venv_python(var: &str, default: &str) -> Option<String> {
    let venv = std::env::var_os(var)
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join(default));
    let p = venv.join("bin/python");
    p.exists().then(|| p.display().to_string())
}

/// The venv Python (`$LOADERX_VENV`, or `.venv/` at the workspace root), if it exists.
pub fn python() -> Option<String> {
    venv_python("LOADERX_VENV", ".venv")
}

/// `harness/python/<name>` under the project venv's Python (a table measured by a script).
pub fn python_command(name: &str) -> Result<Command, HarnessError> {
    let py = python()
        .ok_or_else(|| HarnessError::missing("venv python (run scripts/install-deps.sh)"))?;
    let mut cmd = Command::new(py);
    cmd.arg(python_script(name));
    Ok(cmd)
}

/// The MosaicML Streaming venv's Python (`$LOADERX_STREAMING_VENV`, or `.venv-streaming/` at the
/// workspace root), if it exists: mosaicml-streaming pins NumPy < 2.2, so it has a venv of its own.
pub fn streaming_python() -> Option<String> {
    venv_python("LOADERX_STREAMING_VENV", ".venv-streaming")
}
