//! The one error type every fallible loaderx call returns.

use std::error::Error as StdError;
use std::fmt;

/// Result alias for loaderx operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Every failure loaderx reports. No loaderx call panics on bad input; it returns one of these.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// A store, view or allocator call failed (I/O, corruption, index out of range, allocation).
    Store(zrecord::Error),
    /// An argument was rejected at construction (sampler, allocator or loader options, stream layout).
    InvalidArgument(String),
    /// The sampler failed to draw, or drew a batch the loader cannot use.
    Sampler(String),
    /// The user's transform returned an error. The boxed value is the transform's own error, so a
    /// caller (e.g. the Python binding) can downcast it back to what it raised.
    Transform(Box<dyn StdError + Send + Sync + 'static>),
    /// User code (a transform or a sampler) panicked; the panic was caught and carries its message.
    Panicked(String),
    /// The loader was started in another process and inherited through `fork`: its worker threads
    /// and its sampler position belong to that process. Create a new loader in this one.
    Forked {
        /// The process that started the loader.
        started_in: u32,
        /// The calling process (a forked child of it).
        used_in: u32,
    },
}

impl Error {
    /// Wraps any error raised by a transform.
    pub fn transform<E>(err: E) -> Self
    where
        E: Into<Box<dyn StdError + Send + Sync + 'static>>,
    {
        Error::Transform(err.into())
    }

    pub(crate) fn invalid(msg: impl Into<String>) -> Self {
        Error::InvalidArgument(msg.into())
    }

    pub(crate) fn from_panic(payload: Box<dyn std::any::Any + Send>, what: &str) -> Self {
        let msg = if let Some(s) = payload.downcast_ref::<&str>() {
            (*s).to_string()
        } else if let Some(s) = payload.downcast_ref::<String>() {
            s.clone()
        } else {
            "non-string panic payload".to_string()
        };
        Error::Panicked(format!("{what} panicked: {msg}"))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Store(e) => write!(f, "store error: {e}"),
            Error::InvalidArgument(m) => write!(f, "invalid argument: {m}"),
            Error::Sampler(m) => write!(f, "sampler error: {m}"),
            Error::Transform(e) => write!(f, "transform failed: {e}"),
            Error::Panicked(m) => f.write_str(m),
            Error::Forked {
                started_in,
                used_in,
            } => write!(
                f,
                "this loader was started in process {started_in} and is used in process {used_in}, \
                 a fork of it: its worker threads and sampler position did not survive the fork; \
                 create a new Loader in the forked process (stores, views and allocators work there)"
            ),
        }
    }
}

impl StdError for Error {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        match self {
            Error::Store(e) => Some(e),
            Error::Transform(e) => Some(e.as_ref()),
            _ => None,
        }
    }
}

impl From<zrecord::Error> for Error {
    fn from(e: zrecord::Error) -> Self {
        Error::Store(e)
    }
}
