//! Pickling: which objects travel to another process and how they are rebuilt there
//! (`loaderx/_pickle.py`), and the refusal, with its reason, of those that cannot.
//!
//! Stores travel as their path, allocators as (device, id, `pool_size`), views as (store path,
//! allocator): the receiver reopens the container and gets a fresh pool. Writers, loaders and
//! batches own process-local state (an open temp directory, threads, memory regions) and refuse.

use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::types::PyDict;
use zrecord::RemoteOptions;

use crate::errors::InvalidTypeError;
use crate::remote::{cache_dict, options_dict};

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

/// How a container was opened: its path (a URL stays one), `mmap` and storage options. A store
/// and its views keep it: pickling sends it, and the receiving process reopens the container
/// with it.
#[derive(Clone)]
pub(crate) struct Opened {
    pub path: PathBuf,
    pub mmap: Option<bool>,
    pub remote: RemoteOptions,
    /// The dataset version read (the receiver opens the same one), `None` for a container.
    pub version: Option<u64>,
    /// The column opened, if one was named.
    pub column: Option<String>,
}

/// The pickled form of an `Opened`: path, `mmap`, storage options, the cache keywords.
type OpenedArgs<'py> = (
    String,
    Option<bool>,
    Option<Bound<'py, PyDict>>,
    Option<Bound<'py, PyDict>>,
);

impl Opened {
    pub(crate) fn pickled<'py>(&self, py: Python<'py>) -> PyResult<OpenedArgs<'py>> {
        // The keywords beyond path, mmap and storage options: the cache's, the version, the column.
        let mut kw = cache_dict(py, &self.remote)?;
        if self.version.is_some() || self.column.is_some() {
            let d = kw.get_or_insert_with(|| PyDict::new(py));
            d.set_item("version", self.version)?;
            d.set_item("column", &self.column)?;
        }
        Ok((
            self.path.to_string_lossy().into_owned(),
            self.mmap,
            options_dict(py, &self.remote)?,
            kw,
        ))
    }
}
