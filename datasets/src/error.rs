//! The crate's error type.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// Result alias used throughout the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong while preparing, reading or downloading datasets.
///
/// Every variant names the file, directory or URL involved and, where it applies, what was
/// expected and what was found.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// An I/O operation on `path` failed.
    Io {
        /// File or directory involved.
        path: PathBuf,
        /// What was being done ("open", "read", "write", "rename", ...).
        op: &'static str,
        /// The underlying error.
        source: io::Error,
    },
    /// A `.npy` file has a malformed or unsupported header.
    NpyHeader {
        /// The file.
        path: PathBuf,
        /// What was expected.
        expected: String,
        /// What was found.
        found: String,
    },
    /// A `.npy` payload does not have the size its header (or the writer's shape) promises.
    NpySize {
        /// The file.
        path: PathBuf,
        /// Payload bytes expected.
        expected: u64,
        /// Payload bytes found / written.
        found: u64,
    },
    /// An image could not be decoded.
    Decode {
        /// The image file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// An image could not be resized.
    Resize {
        /// The image file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A source directory holds no usable input.
    EmptySource {
        /// The directory or file list.
        path: PathBuf,
        /// What was expected there.
        expected: String,
    },
    /// A file named by a split list (e.g. `annotations/trainval.txt`) does not exist.
    MissingFile {
        /// The missing file.
        path: PathBuf,
        /// Who referenced it.
        referenced_by: PathBuf,
    },
    /// A text file is not valid UTF-8.
    Utf8 {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: u64,
    },
    /// The tokenizer failed to load.
    Tokenizer(String),
    /// Not enough input to build a single record.
    NotEnoughData {
        /// The sources.
        path: PathBuf,
        /// What was needed.
        expected: String,
        /// What was there.
        found: String,
    },
    /// A caller-supplied argument is invalid.
    InvalidArgument(String),
    /// A feature needed for this input is not compiled in.
    Unsupported {
        /// The input.
        path: PathBuf,
        /// What would be needed.
        reason: String,
    },
    /// An HTTP request failed (connection, protocol or unexpected status).
    Http {
        /// The URL.
        url: String,
        /// Why.
        reason: String,
    },
    /// A download finished but its SHA-256 differs from the pinned digest. The partial file
    /// has been deleted.
    DigestMismatch {
        /// The URL.
        url: String,
        /// The digest that was pinned.
        expected: String,
        /// The digest of what arrived.
        found: String,
    },
    /// An archive could not be unpacked.
    Archive {
        /// The archive.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A JSON file could not be written or parsed.
    Json {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// Parquet input could not be read.
    Parquet {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
}

impl Error {
    pub(crate) fn io(path: impl AsRef<Path>, op: &'static str, source: io::Error) -> Self {
        Error::Io {
            path: path.as_ref().to_path_buf(),
            op,
            source,
        }
    }

    pub(crate) fn header(
        path: impl AsRef<Path>,
        expected: impl Into<String>,
        found: impl Into<String>,
    ) -> Self {
        Error::NpyHeader {
            path: path.as_ref().to_path_buf(),
            expected: expected.into(),
            found: found.into(),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io { path, op, source } => {
                write!(f, "{}: {op} failed: {source}", path.display())
            }
            Error::NpyHeader {
                path,
                expected,
                found,
            } => write!(
                f,
                "{}: bad .npy header: expected {expected}, found {found}",
                path.display()
            ),
            Error::NpySize {
                path,
                expected,
                found,
            } => write!(
                f,
                "{}: .npy payload size mismatch: expected {expected} bytes, found {found}",
                path.display()
            ),
            Error::Decode { path, reason } => {
                write!(f, "{}: cannot decode image: {reason}", path.display())
            }
            Error::Resize { path, reason } => {
                write!(f, "{}: cannot resize image: {reason}", path.display())
            }
            Error::EmptySource { path, expected } => {
                write!(f, "{}: expected {expected}, found none", path.display())
            }
            Error::MissingFile {
                path,
                referenced_by,
            } => write!(
                f,
                "{}: listed in {} but does not exist",
                path.display(),
                referenced_by.display()
            ),
            Error::Utf8 { path, line } => {
                write!(f, "{}:{line}: expected UTF-8 text", path.display())
            }
            Error::Tokenizer(msg) => write!(f, "cannot load the GPT-2 tokenizer: {msg}"),
            Error::NotEnoughData {
                path,
                expected,
                found,
            } => write!(
                f,
                "{}: not enough data: expected {expected}, found {found}",
                path.display()
            ),
            Error::InvalidArgument(msg) => write!(f, "invalid argument: {msg}"),
            Error::Unsupported { path, reason } => {
                write!(f, "{}: unsupported input: {reason}", path.display())
            }
            Error::Http { url, reason } => write!(f, "{url}: HTTP error: {reason}"),
            Error::DigestMismatch {
                url,
                expected,
                found,
            } => write!(
                f,
                "{url}: SHA-256 mismatch: expected {expected}, found {found} (download deleted)"
            ),
            Error::Archive { path, reason } => {
                write!(f, "{}: cannot unpack archive: {reason}", path.display())
            }
            Error::Json { path, reason } => write!(f, "{}: JSON error: {reason}", path.display()),
            Error::Parquet { path, reason } => {
                write!(f, "{}: cannot read parquet: {reason}", path.display())
            }
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
