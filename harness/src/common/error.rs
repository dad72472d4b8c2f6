//! The harness's one error type, [`HarnessError`]: every fallible harness function returns it,
//! `main` prints it and exits non-zero, and a cell that fails writes its text into its result's
//! note.
//!
//! A leaf module: it imports nothing from the crate. Each variant names what failed with its
//! context (the path, the argument, the backend, the batch, what was expected and what was
//! found); [`HarnessError::Other`] is for the few failures that have nothing more to name.

use std::io;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;

/// Result alias of the harness.
pub type Result<T, E = HarnessError> = std::result::Result<T, E>;

/// Everything that can go wrong in a harness command, a cell or a probe.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    /// The command line was not understood (or help was asked for): `usage` says how to call it.
    #[error("{}", with_usage(.problem.as_deref(), .usage))]
    Usage {
        /// What was wrong, if anything (`None`: help was asked for).
        problem: Option<String>,
        usage: &'static str,
    },
    /// One argument of a subcommand or flag does not parse.
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
        /// The subcommand (`cell`, `cold-cell`, ...).
        command: &'static str,
        problem: String,
    },
    /// A table name no table has.
    #[error("unknown table {name:?}")]
    UnknownTable { name: String },
    /// A backend name no competitor has.
    #[error("{0}")]
    UnknownBackend(#[from] competitors::UnknownBackend),
    /// An arm name (sampler, loader or probe arm) the harness does not know.
    #[error("unknown arm {name:?}")]
    UnknownArm { name: String },
    /// A file-system operation failed.
    #[error("{op} {}: {source}", .path.display())]
    Io {
        /// What was being done (`read`, `write`, `create`, `remove`, ...).
        op: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    /// A JSON file does not parse (or is not the document expected).
    #[error("parse {}: {source}", .path.display())]
    Parse {
        path: PathBuf,
        source: serde_json::Error,
    },
    /// A value could not be written as JSON.
    #[error("JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// A competitor backend failed at one stage of a cell (`prepare`, `write`, `open`, `gather`).
    #[error("{backend}: {stage}: {source}")]
    Backend {
        /// The backend (or the arm that wraps it).
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
    /// A backend without a layout for the table's records.
    #[error("{backend} has no {layout} layout")]
    NoLayout {
        backend: String,
        /// The records' layout (`dense`, `ragged`).
        layout: String,
    },
    /// A competitors call outside a backend (a source's validation or reference gather).
    #[error("{0}")]
    Competitors(#[from] competitors::Error),
    /// A batch differed from the source records.
    #[error("{batch} differs from the source: {source}")]
    Differs {
        /// Which batch (`verification batch 3`, `timed batch 12`, ...).
        batch: String,
        source: competitors::Error,
    },
    /// A count is not the one expected.
    #[error("{what}: expected {expected}, found {found}")]
    Count {
        what: &'static str,
        expected: u64,
        found: u64,
    },
    /// Fewer of something than a step needs.
    #[error("{what}: {found}, expected at least {minimum}")]
    TooFew {
        what: &'static str,
        minimum: u64,
        found: u64,
    },
    /// A zrecord store call failed.
    #[error("zrecord: {0}")]
    Zrecord(#[from] zrecord::Error),
    /// A zrecord store at a path failed to open.
    #[error("{}: {source}", .path.display())]
    Store {
        path: PathBuf,
        source: zrecord::Error,
    },
    /// A loaderx call (sampler, loader) failed.
    #[error("loaderx: {0}")]
    Loader(#[from] loaderx::Error),
    /// A loader stopped handing out batches before the run's last one.
    #[error("the loader ended before the run's last batch{}", .delivered.map(|d| format!(" (after {d})")).unwrap_or_default())]
    LoaderEnded { delivered: Option<usize> },
    /// A batch a loader delivered is not the one its draw names.
    #[error(
        "loader batch {batch} differs from the source records ({found_bytes} bytes, expected {expected_bytes})"
    )]
    LoaderBatch {
        batch: usize,
        /// Bytes expected (the CRC32C of them differed, or their count).
        expected_bytes: usize,
        found_bytes: usize,
    },
    /// A datasets call (corpus preparation, `.npy` files, download) failed.
    #[error("{what}: {source}")]
    Datasets {
        what: &'static str,
        source: datasets::Error,
    },
    /// A `.npy` source array of a dtype no table reads.
    #[error("unsupported npy dtype {descr:?}")]
    Dtype {
        /// The array's `descr`.
        descr: String,
    },
    /// A file has the wrong format.
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
    /// A program could not be started.
    #[error("could not start {program}: {source}")]
    Spawn { program: String, source: io::Error },
    /// A program ran and failed.
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
    /// A Python arm reported an error (its own message, or the last line of its traceback).
    #[error("{0}")]
    Python(String),
    /// The page cache cannot be dropped: `/proc/sys/vm/drop_caches` is not writable.
    #[error("/proc/sys/vm/drop_caches is not writable (needs root): {0}")]
    DropCaches(io::Error),
    /// An `O_DIRECT` read failed.
    #[error("O_DIRECT read of {} at byte {offset}: {source}", .path.display())]
    DirectRead {
        path: PathBuf,
        offset: u64,
        source: io::Error,
    },
    /// An `O_DIRECT` read returned fewer bytes than the extent needs.
    #[error("short O_DIRECT read at {offset}: {got} of {want} bytes")]
    ShortRead {
        offset: u64,
        got: usize,
        want: usize,
    },
    /// A plot could not be drawn.
    #[error("plot {}: {message}", .path.display())]
    Plot { path: PathBuf, message: String },
    /// A failure with nothing more to name than its sentence.
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
    /// An [`HarnessError::Io`] of `op` on `path`.
    pub fn io(op: &'static str, path: impl AsRef<Path>) -> impl FnOnce(io::Error) -> HarnessError {
        let path = path.as_ref().to_path_buf();
        move |source| HarnessError::Io { op, path, source }
    }

    /// A [`HarnessError::Differs`] of `batch` (`timed batch 12`, ...), from what differed.
    pub fn differs(batch: impl Into<String>) -> impl FnOnce(competitors::Error) -> HarnessError {
        let batch = batch.into();
        move |source| HarnessError::Differs { batch, source }
    }

    /// A [`HarnessError::Backend`] of `backend` at `stage`.
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

    /// A [`HarnessError::Store`] of the store at `path`.
    pub fn store(path: impl AsRef<Path>) -> impl FnOnce(zrecord::Error) -> HarnessError {
        let path = path.as_ref().to_path_buf();
        move |source| HarnessError::Store { path, source }
    }

    /// A [`HarnessError::Datasets`] of `what`.
    pub fn datasets(what: &'static str) -> impl Fn(datasets::Error) -> HarnessError + Copy {
        move |source| HarnessError::Datasets { what, source }
    }

    /// A [`HarnessError::Spawn`] of `program`.
    pub fn spawn(program: impl Into<String>) -> impl FnOnce(io::Error) -> HarnessError {
        let program = program.into();
        move |source| HarnessError::Spawn { program, source }
    }

    /// A [`HarnessError::Missing`] of `what` in `place`.
    pub fn missing_in(what: impl Into<String>, place: impl AsRef<Path>) -> HarnessError {
        HarnessError::Missing {
            what: what.into(),
            place: Some(place.as_ref().to_path_buf()),
        }
    }

    /// A [`HarnessError::Missing`] with no place.
    pub fn missing(what: impl Into<String>) -> HarnessError {
        HarnessError::Missing {
            what: what.into(),
            place: None,
        }
    }

    /// A [`HarnessError::Other`].
    pub fn other(msg: impl Into<String>) -> HarnessError {
        HarnessError::Other(msg.into())
    }
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
