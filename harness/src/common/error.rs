//! The harness's one error type, [`HarnessError`]: every fallible harness function returns it,
//! `main` prints it and exits non-zero, and a cell that fails writes its text into its result's
//! note. Each variant names what failed with its context (the path, the argument, the backend, the batch, what was expected and what was
//! found); [`HarnessError::Other`] is for the few failures that have nothing more to name.

use std::io;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;

/// Result alias of the harness.
pub type Result<T, E = HarnessError> = std::result::Result<T, E>;

/// Everything that can go wrong in a harness command, a cell or a probe.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    /// The command line was not understood; `problem: None` when help was asked for.
    #[error("{}", with_usage(.problem.as_deref(), .usage))]
    Usage {
        problem: Option<String>,
        usage: &'static str,
    },
    #[error("{command}: {name} {value:?} is not {expected}")]
    Argument {
        command: &'static str,
        name: &'static str,
        value: String,
        expected: &'static str,
    },
    /// A hidden subcommand's `field=value` words do not make its arguments (a word with no
    /// `=`, a field given twice, missing or unknown, a value of the wrong type).
    #[error("{command}: {problem}")]
    CellArgs {
        command: &'static str,
        problem: String,
    },
    /// A name the harness has no `what` of (a table, an arm, an npy dtype).
    #[error("unknown {what} {name:?}")]
    Unknown { what: &'static str, name: String },
    #[error("{0}")]
    UnknownBackend(#[from] competitors::UnknownBackend),
    /// A file-system operation `op` (`read`, `write`, `create`, `start` a program, ...) failed.
    #[error("{op} {}: {source}", .path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error("JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// A competitor backend (or the arm that wraps it) failed at one stage of a cell
    /// (`prepare`, `write`, `open`, `gather`).
    #[error("{backend}: {stage}: {source}")]
    Backend {
        backend: String,
        stage: &'static str,
        source: competitors::Error,
    },
    /// A table's source arrays are inconsistent (offsets, shapes and values disagree).
    #[error("source invalid: {0}")]
    InvalidSource(competitors::Error),
    /// A size that does not fit this machine's `usize`.
    #[error("{what} {value} does not fit in memory")]
    Size { what: &'static str, value: u64 },
    #[error("{backend} has no {layout} layout")]
    NoLayout { backend: String, layout: String },
    /// A competitors call outside a backend (a source's validation or reference gather).
    #[error("{0}")]
    Competitors(#[from] competitors::Error),
    /// Batch `batch` (`verification batch 3`, `timed batch 12`, ...) differed from the source.
    #[error("{batch} differs from the source: {source}")]
    Differs {
        batch: String,
        source: competitors::Error,
    },
    /// A count is not the one expected (`expected`: `1`, `at least 16`, ...).
    #[error("{what}: expected {expected}, found {found}")]
    Count {
        what: &'static str,
        expected: String,
        found: u64,
    },
    #[error("zrecord: {0}")]
    Zrecord(#[from] zrecord::Error),
    /// A zrecord store at a path failed to open.
    #[error("{}: {source}", .path.display())]
    Store {
        path: PathBuf,
        source: zrecord::Error,
    },
    #[error("loaderx: {0}")]
    Loader(#[from] loaderx::Error),
    #[error("the loader ended before the run's last batch{}", .delivered.map(|d| format!(" (after {d})")).unwrap_or_default())]
    LoaderEnded { delivered: Option<usize> },
    /// A delivered batch is not the one its draw names (its CRC32C or its byte count differed).
    #[error(
        "loader batch {batch} differs from the source records ({found_bytes} bytes, expected {expected_bytes})"
    )]
    LoaderBatch {
        batch: usize,
        expected_bytes: usize,
        found_bytes: usize,
    },
    /// A datasets call (corpus preparation, `.npy` files, download) failed.
    #[error("{what}: {source}")]
    Datasets {
        what: &'static str,
        source: datasets::Error,
    },
    #[error("{}: expected {expected}, found {found}", .path.display())]
    Format {
        path: PathBuf,
        expected: &'static str,
        found: String,
    },
    /// Something the run needs is missing (a venv, a metadata file, a device counter, ...).
    #[error("{what} not found{}", .place.as_ref().map(|p| format!(" in {}", p.display())).unwrap_or_default())]
    Missing {
        what: String,
        place: Option<PathBuf>,
    },
    #[error("{command} exited with {status}")]
    Exited { command: String, status: ExitStatus },
    /// A cell process failed: its exit code (`None`: killed by a signal) and the last line of
    /// its standard error.
    #[error("{}: {last_line}", .code.map_or_else(|| "killed".to_string(), |c| format!("exit {c}")))]
    Cell {
        code: Option<i32>,
        last_line: String,
    },
    /// A cell or arm printed a result line that is not the JSON expected.
    #[error("bad output: {0}")]
    BadOutput(serde_json::Error),
    /// An `O_DIRECT` read failed, or returned fewer bytes than its extent needs.
    #[error("O_DIRECT read of {} at byte {offset}: {source}", .path.display())]
    DirectRead {
        path: PathBuf,
        offset: u64,
        source: io::Error,
    },
    #[error("plot {}: {message}", .path.display())]
    Plot { path: PathBuf, message: String },
    /// A failure with nothing more to name than its sentence (a Python arm's own message, or
    /// the last line of its traceback, among them).
    #[error("{0}")]
    Other(String),
}

fn with_usage(problem: Option<&str>, usage: &str) -> String {
    match problem {
        Some(p) => format!("{p}\n{usage}"),
        None => usage.to_string(),
    }
}

impl HarnessError {
    pub fn io(op: &'static str, path: impl AsRef<Path>) -> impl FnOnce(io::Error) -> HarnessError {
        let path = path.as_ref().to_path_buf();
        move |source| HarnessError::Io { op, path, source }
    }

    pub fn differs(batch: impl Into<String>) -> impl FnOnce(competitors::Error) -> HarnessError {
        let batch = batch.into();
        move |source| HarnessError::Differs { batch, source }
    }

    pub fn backend(
        backend: impl Into<String>,
        stage: &'static str,
    ) -> impl FnOnce(competitors::Error) -> HarnessError {
        let backend = backend.into();
        move |source| HarnessError::Backend {
            backend,
            stage,
            source,
        }
    }

    pub fn store(path: impl AsRef<Path>) -> impl FnOnce(zrecord::Error) -> HarnessError {
        let path = path.as_ref().to_path_buf();
        move |source| HarnessError::Store { path, source }
    }

    pub fn datasets(what: &'static str) -> impl Fn(datasets::Error) -> HarnessError + Copy {
        move |source| HarnessError::Datasets { what, source }
    }

    pub fn missing_in(what: impl Into<String>, place: impl AsRef<Path>) -> HarnessError {
        HarnessError::Missing {
            what: what.into(),
            place: Some(place.as_ref().to_path_buf()),
        }
    }

    pub fn missing(what: impl Into<String>) -> HarnessError {
        HarnessError::Missing {
            what: what.into(),
            place: None,
        }
    }

    pub fn other(msg: impl Into<String>) -> HarnessError {
        HarnessError::Other(msg.into())
    }
}

/// Writes `bytes` to `path`; a failure names the path.
pub fn write_file(path: &Path, bytes: impl AsRef<[u8]>) -> Result<()> {
    std::fs::write(path, bytes).map_err(HarnessError::io("write", path))
}

/// Writes `value` to `path` as pretty-printed JSON.
pub fn write_json(path: &Path, value: &impl serde::Serialize) -> Result<()> {
    write_file(path, serde_json::to_vec_pretty(value)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_what_failed() {
        let e = HarnessError::io("write", "/tmp/x.json")(io::Error::other("disk full"));
        assert_eq!(e.to_string(), "write /tmp/x.json: disk full");
        let e = HarnessError::Argument {
            command: "cell",
            name: "seed",
            value: "x".into(),
            expected: "an integer",
        };
        assert_eq!(e.to_string(), "cell: seed \"x\" is not an integer");
        let e = HarnessError::Cell {
            code: Some(124),
            last_line: "timeout".into(),
        };
        assert_eq!(e.to_string(), "exit 124: timeout");
        let e = HarnessError::Usage {
            problem: Some("unknown argument \"--x\"".into()),
            usage: "usage: harness",
        };
        assert_eq!(e.to_string(), "unknown argument \"--x\"\nusage: harness");
        assert_eq!(
            HarnessError::missing("venv python").to_string(),
            "venv python not found"
        );
    }
}
