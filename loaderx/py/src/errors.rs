//! Mapping of every zrecord / loaderx error to the Python hierarchy in `loaderx/errors.py`, and the
//! panic guard used at the boundary (a Rust panic never surfaces as `PanicException`).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Mutex, MutexGuard};

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyType;

/// A failure of the Rust core, carried out of a `detach` section (no GIL needed to build it).
#[derive(Debug)]
pub(crate) enum CoreError {
    /// A zrecord error.
    Z(zrecord::Error),
    /// A loaderx error.
    L(loaderx::Error),
    /// A caught panic, with its message.
    Panic(String),
    /// An error raised by the binding itself (e.g. a closed object), by class name and message.
    Py(&'static str, String),
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
        .map_err(|_| CoreError::Py("InternalError", poisoned.into()))
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

/// The Python class `loaderx.errors.<name>`.
pub(crate) fn err_class<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyType>> {
    let m = py.import("loaderx.errors")?;
    Ok(m.getattr(name)?.cast_into::<PyType>()?)
}

/// A `loaderx.errors.<name>(msg)` exception.
pub(crate) fn raise(py: Python<'_>, name: &str, msg: impl Into<String>) -> PyErr {
    let msg = msg.into();
    match err_class(py, name) {
        Ok(t) => PyErr::from_type(t, (msg,)),
        Err(_) => PyRuntimeError::new_err(msg),
    }
}

/// Maps a zrecord error to its Python exception.
pub(crate) fn z_to_py(py: Python<'_>, e: zrecord::Error) -> PyErr {
    use zrecord::Error as Z;
    let msg = e.to_string();
    match &e {
        Z::Io { op, path, source } => {
            let cls = if source.kind() == std::io::ErrorKind::NotFound {
                "NotFoundError"
            } else {
                "StorageIOError"
            };
            match (err_class(py, cls), source.raw_os_error()) {
                (Ok(t), Some(code)) => PyErr::from_type(
                    t,
                    (
                        code,
                        format!("{op} failed: {source}"),
                        path.display().to_string(),
                    ),
                ),
                (Ok(t), None) => PyErr::from_type(t, (msg,)),
                (Err(_), _) => PyRuntimeError::new_err(msg),
            }
        }
        Z::Corrupt { .. } => raise(py, "CorruptError", msg),
        Z::Format { .. } => raise(py, "FormatError", msg),
        Z::InvalidInput(_) => raise(py, "InvalidInputError", msg),
        Z::IndexOutOfRange { .. } => raise(py, "IndexOutOfRangeError", msg),
        Z::AlreadyExists(_) => raise(py, "AlreadyExistsError", msg),
        Z::LimitExceeded(_) => raise(py, "LimitExceededError", msg),
        Z::Poisoned(_) => raise(py, "PoisonedError", msg),
        Z::Closed(_) => raise(py, "ClosedError", msg),
        Z::Alloc(_) => raise(py, "AllocationError", msg),
        _ => raise(py, "Error", msg),
    }
}

/// Maps a loaderx error to its Python exception. A transform's (or custom sampler's) own Python
/// exception comes back unchanged.
pub(crate) fn l_to_py(py: Python<'_>, e: loaderx::Error) -> PyErr {
    use loaderx::Error as L;
    match e {
        L::Store(z) => z_to_py(py, z),
        L::InvalidArgument(m) => raise(py, "InvalidInputError", format!("invalid argument: {m}")),
        L::Sampler(m) => raise(py, "SamplerError", format!("sampler error: {m}")),
        L::Transform(b) => match b.downcast::<PyErr>() {
            Ok(pe) => *pe,
            Err(other) => raise(py, "Error", format!("transform failed: {other}")),
        },
        L::Panicked(m) => raise(py, "InternalError", m),
        other => raise(py, "Error", other.to_string()),
    }
}

/// Maps any core error to its Python exception.
pub(crate) fn to_py(py: Python<'_>, e: CoreError) -> PyErr {
    match e {
        CoreError::Z(z) => z_to_py(py, z),
        CoreError::L(l) => l_to_py(py, l),
        CoreError::Panic(m) => raise(
            py,
            "InternalError",
            format!("internal error (Rust panic caught): {m}"),
        ),
        CoreError::Py(cls, m) => raise(py, cls, m),
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
