//! Pickling: which objects travel to another process and how they are rebuilt there
//! (`loaderx/_pickle.py`), and the refusal, with its reason, of those that cannot.
//!
//! Stores travel as their path, allocators as (device, id, `pool_size`), views as (store path,
//! allocator): the receiver reopens the container and gets a fresh pool. Writers, loaders and
//! batches own process-local state (an open temp directory, threads, memory regions) and refuse.

use pyo3::prelude::*;

use crate::errors::InvalidTypeError;

/// What `__reduce__` returns: the rebuilder and its arguments.
pub(crate) type Reduce<'py, A> = (Bound<'py, PyAny>, A);

/// The rebuilder `name` of `loaderx._pickle`, which `pickle` calls in the receiving process.
pub(crate) fn rebuilder<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
    py.import("loaderx._pickle")?.getattr(name)
}

/// The error `__reduce__` raises for a class that cannot travel (a `TypeError`, as `pickle`
/// expects), saying why and what to send instead.
pub(crate) fn refuse(class: &str, why: &str) -> PyErr {
    InvalidTypeError::new_err(format!("cannot pickle a {class}: {why}"))
}
