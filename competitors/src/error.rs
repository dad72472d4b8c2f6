//! One error type for every adapter: the failing backend library's message, with context.

use std::fmt;

/// An adapter failure, carrying a human-readable message (library errors are converted to text
/// because the adapters' libraries have unrelated error types).
#[derive(Debug)]
pub struct Error {
    message: String,
}

/// Result alias for this crate.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// An error with the given message.
    pub fn msg(message: impl Into<String>) -> Error {
        Error {
            message: message.into(),
        }
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

macro_rules! from_lib {
    ($($t:ty => $label:literal),* $(,)?) => {
        $(impl From<$t> for Error {
            fn from(e: $t) -> Error {
                Error { message: format!(concat!($label, ": {}"), e) }
            }
        })*
    };
}

from_lib! {
    std::io::Error => "io",
    hdf5::Error => "hdf5",
    heed::Error => "lmdb",
    arrow_schema::ArrowError => "arrow",
    parquet::errors::ParquetError => "parquet",
    zrecord::Error => "zrecord",
    datasets::Error => "npy",
}

/// Returns early with an [`Error`] built by `format!`.
macro_rules! bail {
    ($($arg:tt)*) => {
        return Err($crate::error::Error::msg(format!($($arg)*)))
    };
}
pub(crate) use bail;
