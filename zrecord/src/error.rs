//! Typed errors. Every error names what it is about: the path, the shard file, the record, the byte
//! offset, and what was expected against what was found.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// Result alias for zrecord operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Where in a container a corruption was found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Location {
    /// The file that holds the bad bytes.
    pub path: PathBuf,
    /// Shard number, when the file is a data shard.
    pub shard: Option<u32>,
    /// Logical record index, when the damage is inside one record.
    pub record: Option<u64>,
    /// Byte offset inside `path`.
    pub offset: Option<u64>,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.path.display())?;
        if let Some(s) = self.shard {
            write!(f, " (shard {s})")?;
        }
        if let Some(r) = self.record {
            write!(f, ", record {r}")?;
        }
        if let Some(o) = self.offset {
            write!(f, ", byte offset {o}")?;
        }
        Ok(())
    }
}

/// Every failure zrecord reports.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// An operating-system I/O call failed.
    Io {
        /// What was being done (`"create"`, `"fsync"`, `"rename"`, ...).
        op: &'static str,
        /// The path it was done to.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// Stored bytes do not match what the container says they are.
    Corrupt {
        /// Where.
        at: Box<Location>,
        /// What was checked.
        what: String,
        /// The value the format requires.
        expected: String,
        /// The value found on disk.
        found: String,
    },
    /// The path is not a zrecord container of the requested kind (foreign file, wrong kind, newer version).
    Format {
        /// Path of the offending file.
        path: PathBuf,
        /// Why it was refused.
        reason: String,
    },
    /// An argument was rejected before anything was written or read.
    InvalidInput(String),
    /// An index was outside `0..len`.
    IndexOutOfRange {
        /// The index asked for.
        index: u64,
        /// The number of records.
        len: u64,
    },
    /// The destination of a new container already exists.
    AlreadyExists(PathBuf),
    /// A size limit was exceeded (record > 2 GiB, ragged batch > i32::MAX values, ...).
    LimitExceeded(String),
    /// The writer hit an I/O failure earlier and can no longer be used.
    Poisoned(PathBuf),
    /// The store (or writer) was closed; its views are no longer usable.
    Closed(String),
    /// The allocator could not provide a region.
    Alloc(String),
    /// Another committer published this version of a dataset first (exactly one commit wins
    /// each version): re-read the newest version and retry.
    Conflict {
        /// The version manifest that was already there.
        path: PathBuf,
        /// The version number both commits claimed.
        version: u64,
    },
}

impl Error {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        Error::Io {
            op,
            path: path.into(),
            source,
        }
    }

    pub(crate) fn corrupt(
        at: Location,
        what: impl Into<String>,
        expected: impl fmt::Display,
        found: impl fmt::Display,
    ) -> Self {
        Error::Corrupt {
            at: Box::new(at),
            what: what.into(),
            expected: expected.to_string(),
            found: found.to_string(),
        }
    }

    pub(crate) fn format(path: impl Into<PathBuf>, reason: impl Into<String>) -> Self {
        Error::Format {
            path: path.into(),
            reason: reason.into(),
        }
    }

    pub(crate) fn invalid(msg: impl Into<String>) -> Self {
        Error::InvalidInput(msg.into())
    }

    /// True for errors that mean the stored bytes are damaged or not a container.
    pub fn is_corruption(&self) -> bool {
        matches!(self, Error::Corrupt { .. } | Error::Format { .. })
    }

    /// The file a corruption or format error points at.
    pub fn corrupt_path(&self) -> Option<&std::path::Path> {
        match self {
            Error::Corrupt { at, .. } => Some(&at.path),
            Error::Format { path, .. } => Some(path),
            _ => None,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io { op, path, source } => write!(f, "{op} {}: {source}", path.display()),
            Error::Corrupt {
                at,
                what,
                expected,
                found,
            } => {
                write!(
                    f,
                    "corrupt container at {at}: {what}: expected {expected}, found {found}"
                )
            }
            Error::Format { path, reason } => write!(
                f,
                "{}: not a usable zrecord container: {reason}",
                path.display()
            ),
            Error::InvalidInput(m) => write!(f, "invalid input: {m}"),
            Error::IndexOutOfRange { index, len } => {
                write!(f, "index {index} out of range for a store of {len} records")
            }
            Error::AlreadyExists(p) => write!(f, "destination {} already exists", p.display()),
            Error::LimitExceeded(m) => write!(f, "limit exceeded: {m}"),
            Error::Poisoned(p) => write!(
                f,
                "writer for {} failed earlier and is unusable",
                p.display()
            ),
            Error::Closed(m) => write!(f, "{m} is closed"),
            Error::Alloc(m) => write!(f, "allocation failed: {m}"),
            Error::Conflict { path, version } => write!(
                f,
                "commit conflict: version {version} of the dataset was committed by another \
                 writer first ({}); re-read the newest version and retry",
                path.display()
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}
