//! Mapping of every zrecord / loaderx error to the Python hierarchy in `loaderx/errors.py`, and the
//! panic guard used at the boundary (a Rust panic never surfaces as `PanicException`).
//!
//! The exception classes are typed handles ([`pyo3::import_exception!`]) on the classes
//! `loaderx/errors.py` defines; [`check_catalog`] resolves every one when the extension module is
//! imported, so a misspelled or missing class fails that import instead of turning into another
//! exception later.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Mutex, MutexGuard};

use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::PyType;

/// Declares a typed handle per catalog class and the list [`check_catalog`] verifies.
macro_rules! catalog {
    ($($name:ident),* $(,)?) => {
        $(pyo3::import_exception!(loaderx.errors, $name);)*

        /// The names of the catalog classes the binding raises.
        const CATALOG: &[&str] = &[$(stringify!($name)),*];
    };
}

catalog!(
    Error,
    CorruptError,
    FormatError,
    ClosedError,
    InvalidInputError,
    InvalidTypeError,
    DTypeError,
    UnsupportedDeviceError,
    IndexOutOfRangeError,
    AlreadyExistsError,
    CommitConflictError,
    LimitExceededError,
    PoisonedError,
    AllocationError,
    StorageIOError,
    NotFoundError,
    SamplerError,
    InternalError,
);

/// Resolves every catalog class in `loaderx.errors` (called from the module initializer): each
/// must exist and be an exception class, else the import of `loaderx._loaderx` fails.
pub(crate) fn check_catalog(py: Python<'_>) -> PyResult<()> {
    let m = py.import("loaderx.errors")?;
    let base = py.get_type::<PyException>();
    for name in CATALOG {
        let cls = m.getattr(*name)?.cast_into::<PyType>()?;
        if !cls.is_subclass(&base)? {
            return Err(pyo3::exceptions::PyImportError::new_err(format!(
                "loaderx.errors.{name} is not an exception class"
            )));
        }
    }
    Ok(())
}

/// The constructor of a catalog exception from its message, e.g. `ClosedError::new_err`.
pub(crate) type ErrCtor = fn(String) -> PyErr;

/// A failure of the Rust core, carried out of a `detach` section (no GIL needed to build it).
#[derive(Debug)]
pub(crate) enum CoreError {
    /// A zrecord error.
    Z(zrecord::Error),
    /// A loaderx error.
    L(loaderx::Error),
    /// A caught panic, with its message.
    Panic(String),
    /// An error raised by the binding itself (e.g. a closed object): its class and message.
    Py(ErrCtor, String),
}

impl From<zrecord::Error> for CoreError {
    fn from(e: zrecord::Error) -> Self {
        CoreError::Z(e)
    }
}

impl From<loaderx::Error> for CoreError {
    fn from(e: loaderx::Error) -> Self {
        CoreError::L(e)
    }
}

fn panic_message(p: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}

/// Runs `f`, turning a panic into [`CoreError::Panic`].
pub(crate) fn guard<T, E: Into<CoreError>>(
    f: impl FnOnce() -> Result<T, E>,
) -> Result<T, CoreError> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r.map_err(Into::into),
        Err(p) => Err(CoreError::Panic(panic_message(p))),
    }
}

/// Locks `m` inside a `detach` section; a lock poisoned by an earlier panic fails with
/// `InternalError(poisoned)`.
pub(crate) fn lock<'a, T>(
    m: &'a Mutex<T>,
    poisoned: &'static str,
) -> Result<MutexGuard<'a, T>, CoreError> {
    m.lock()
        .map_err(|_| CoreError::Py(InternalError::new_err, poisoned.into()))
}

/// The body of an idempotent `close()`: takes the core object out of `slot` and, unless an
/// earlier call already took it, hands it to `finish` (publish, or just drop). Runs with the GIL
/// released and under [`guard`]; a poisoned lock fails with `InternalError(poisoned)`.
pub(crate) fn take_detached<T: Send>(
    py: Python<'_>,
    slot: &Mutex<Option<T>>,
    poisoned: &'static str,
    finish: impl FnOnce(T) -> Result<(), CoreError> + Send,
) -> PyResult<()> {
    py.detach(|| {
        guard(|| {
            let taken = lock(slot, poisoned)?.take();
            taken.map_or(Ok(()), finish)
        })
    })
    .py_err(py)
}

/// The name of `obj`'s Python type, for error messages (empty if it has none).
pub(crate) fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|s| s.to_string())
        .unwrap_or_default()
}

/// A `CorruptError` / `FormatError` carrying the Rust location as attributes (`path`, `shard`,
/// `record`, `offset`, `what`, `expected`, `found`; `None` where unknown). Attribute failures
/// are ignored: the exception still carries the full message.
fn located(
    py: Python<'_>,
    err: PyErr,
    at: Option<&zrecord::Location>,
    path: Option<&std::path::Path>,
    what: Option<&str>,
    expected: Option<&str>,
    found: Option<&str>,
) -> PyErr {
    let v = err.value(py);
    let _ = v.setattr("path", path.or(at.map(|a| a.path.as_path())));
    let _ = v.setattr("shard", at.and_then(|a| a.shard));
    let _ = v.setattr("record", at.and_then(|a| a.record));
    let _ = v.setattr("offset", at.and_then(|a| a.offset));
    let _ = v.setattr("what", what);
    let _ = v.setattr("expected", expected);
    let _ = v.setattr("found", found);
    err
}

/// Maps a zrecord error to its Python exception.
pub(crate) fn z_to_py(py: Python<'_>, e: zrecord::Error) -> PyErr {
    use zrecord::Error as Z;
    let msg = e.to_string();
    match &e {
        Z::Io { op, path, source } => {
            let not_found = source.kind() == std::io::ErrorKind::NotFound;
            match (source.raw_os_error(), not_found) {
                (Some(code), nf) => {
                    let args = (
                        code,
                        format!("{op} failed: {source}"),
                        path.display().to_string(),
                    );
                    if nf {
                        NotFoundError::new_err(args)
                    } else {
                        StorageIOError::new_err(args)
                    }
                }
                (None, true) => NotFoundError::new_err(msg),
                (None, false) => StorageIOError::new_err(msg),
            }
        }
        Z::Corrupt {
            at,
            what,
            expected,
            found,
        } => located(
            py,
            CorruptError::new_err(msg),
            Some(at),
            None,
            Some(what),
            Some(expected),
            Some(found),
        ),
        Z::Format { path, .. } => located(
            py,
            FormatError::new_err(msg),
            None,
            Some(path),
            None,
            None,
            None,
        ),
        Z::InvalidInput(_) => InvalidInputError::new_err(msg),
        Z::IndexOutOfRange { .. } => IndexOutOfRangeError::new_err(msg),
        Z::AlreadyExists(_) => AlreadyExistsError::new_err(msg),
        Z::Conflict { .. } => CommitConflictError::new_err(msg),
        Z::LimitExceeded(_) => LimitExceededError::new_err(msg),
        Z::Poisoned(_) => PoisonedError::new_err(msg),
        Z::Closed(_) => ClosedError::new_err(msg),
        Z::Alloc(_) => AllocationError::new_err(msg),
        _ => Error::new_err(msg),
    }
}

/// Maps a loaderx error to its Python exception. A transform's (or custom sampler's) own Python
/// exception comes back unchanged.
pub(crate) fn l_to_py(py: Python<'_>, e: loaderx::Error) -> PyErr {
    use loaderx::Error as L;
    match e {
        L::Store(z) => z_to_py(py, z),
        L::InvalidArgument(m) => InvalidInputError::new_err(format!("invalid argument: {m}")),
        L::Sampler(m) => SamplerError::new_err(format!("sampler error: {m}")),
        L::Transform(b) => match b.downcast::<PyErr>() {
            Ok(pe) => *pe,
            Err(other) => Error::new_err(format!("transform failed: {other}")),
        },
        L::Panicked(m) => InternalError::new_err(m),
        f @ L::Forked { .. } => ClosedError::new_err(f.to_string()),
        other => Error::new_err(other.to_string()),
    }
}

/// Maps any core error to its Python exception.
pub(crate) fn to_py(py: Python<'_>, e: CoreError) -> PyErr {
    match e {
        CoreError::Z(z) => z_to_py(py, z),
        CoreError::L(l) => l_to_py(py, l),
        CoreError::Panic(m) => {
            InternalError::new_err(format!("internal error (Rust panic caught): {m}"))
        }
        CoreError::Py(cls, m) => cls(m),
    }
}

/// Extension: `.py_err(py)` on core results.
pub(crate) trait IntoPyResult<T> {
    /// Converts the error to its Python exception.
    fn py_err(self, py: Python<'_>) -> PyResult<T>;
}

impl<T> IntoPyResult<T> for Result<T, CoreError> {
    fn py_err(self, py: Python<'_>) -> PyResult<T> {
        self.map_err(|e| to_py(py, e))
    }
}

impl<T> IntoPyResult<T> for Result<T, zrecord::Error> {
    fn py_err(self, py: Python<'_>) -> PyResult<T> {
        self.map_err(|e| z_to_py(py, e))
    }
}

impl<T> IntoPyResult<T> for Result<T, loaderx::Error> {
    fn py_err(self, py: Python<'_>) -> PyResult<T> {
        self.map_err(|e| l_to_py(py, e))
    }
}
