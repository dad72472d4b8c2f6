//! `DenseView` / `RaggedView` (a store bound to a placement: indexing, gathering, iteration) and
//! `train_dict`, which samples a view.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use loaderx::StreamView;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};
use zrecord::{DenseView, RaggedView};

use crate::allocator::PyAllocator;
use crate::dtypes::dtype_obj;
use crate::errors::{ClosedError, IntoPyResult, InvalidTypeError, guard};
use crate::gpu::Placement;
use crate::index::{Index, index_vec, parse_indices};
use crate::pickle::{Reduce, rebuilder};
use crate::tensor::{dense_to_py, ragged_to_py};

/// A Dense store bound to a placement: `len`, `dtype`, `item_shape`, indexing and iteration.
#[pyclass(name = "DenseView", module = "loaderx.zrecord", frozen)]
pub(crate) struct PyDenseView {
    pub view: DenseView,
    /// The container's path and the allocator the view is bound to: what pickling sends.
    pub path: PathBuf,
    /// The store's `mmap` and storage options, which the receiving process reopens it with.
    pub mmap: Option<bool>,
    pub remote: zrecord::RemoteOptions,
    pub allocator: Py<PyAllocator>,
}

/// A Ragged store bound to a placement: `len`, `dtype`, `ndim`, indexing and iteration.
#[pyclass(name = "RaggedView", module = "loaderx.zrecord", frozen)]
pub(crate) struct PyRaggedView {
    pub view: RaggedView,
    /// The container's path and the allocator the view is bound to: what pickling sends.
    pub path: PathBuf,
    /// The store's `mmap` and storage options, which the receiving process reopens it with.
    pub mmap: Option<bool>,
    pub remote: zrecord::RemoteOptions,
    pub allocator: Py<PyAllocator>,
}

/// What a pickled view carries: kind, store path (a URL stays a string), allocator, `mmap`,
/// storage options.
type ViewArgs<'py> = (
    &'static str,
    String,
    Py<PyAllocator>,
    Option<bool>,
    Option<Bound<'py, pyo3::types::PyDict>>,
    Option<Bound<'py, pyo3::types::PyDict>>,
);

/// The `#[pymethods]` of a view class: `$extra` (the kind-specific methods, indexing included),
/// then the accessors both kinds share. `$kind` is the view's `StreamView` variant.
macro_rules! view_class {
    ($py_view:ident, $kind:ident, $kind_name:literal, { $($extra:tt)* }) => {
        #[pymethods]
        impl $py_view {
            $($extra)*

            /// Pickles as (store path, allocator): the receiving process reopens the container
            /// and binds it to a fresh allocator of the same placement and `pool_size`.
            fn __reduce__<'py>(
                &self,
                py: Python<'py>,
            ) -> PyResult<Reduce<'py, ViewArgs<'py>>> {
                if self.view.is_closed() {
                    return Err(ClosedError::new_err(format!(
                        "cannot pickle a view of {}: its store is closed",
                        self.path.display()
                    )));
                }
                Ok((
                    rebuilder(py, "view")?,
                    (
                        $kind_name,
                        self.path.to_string_lossy().into_owned(),
                        self.allocator.clone_ref(py),
                        self.mmap,
                        crate::remote::options_dict(py, &self.remote)?,
                        crate::remote::cache_dict(py, &self.remote)?,
                    ),
                ))
            }

            fn __len__(&self) -> usize {
                self.view.len() as usize
            }

            #[getter]
            fn dtype<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
                dtype_obj(py, self.view.dtype())
            }

            #[getter]
            fn codec(&self) -> &'static str {
                self.view.codec().name()
            }

            #[getter]
            fn closed(&self) -> bool {
                self.view.is_closed()
            }

            fn __iter__(&self) -> ViewIter {
                ViewIter {
                    view: StreamView::$kind(self.view.clone()),
                    placement: self.allocator.get().placement(),
                    pos: AtomicU64::new(0),
                }
            }
        }
    };
}

view_class!(PyDenseView, Dense, "dense", {
    #[getter]
    fn item_shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.view.item_shape())
    }

    /// `view[i]` → one record (no batch axis); `view[i, j]`, `view[[...]]`, `view[array]`,
    /// `view[a:b]` → one stacked `(n, *item_shape)` batch in the requested order.
    fn __getitem__(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let view = &self.view;
        match parse_indices(key, view.len())? {
            Index::One(i) => {
                let b = py.detach(|| guard(|| view.get(i))).py_err(py)?;
                dense_to_py(py, b, &self.allocator.get().placement())
            }
            Index::Many(idx) => {
                let b = py.detach(|| guard(|| view.gather(&idx))).py_err(py)?;
                dense_to_py(py, b, &self.allocator.get().placement())
            }
        }
    }

    fn __repr__(&self) -> String {
        format!(
            "DenseView(records={}, dtype={}, item_shape={:?}, codec={})",
            self.view.len(),
            self.view.dtype(),
            self.view.item_shape(),
            self.view.codec().name()
        )
    }
});

view_class!(PyRaggedView, Ragged, "ragged", {
    #[getter]
    fn ndim(&self) -> u32 {
        self.view.ndim()
    }

    /// `view[i]` → a one-record `RaggedBatch`; any collection of indices → one packed batch.
    fn __getitem__(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let view = &self.view;
        let idx = index_vec(key, view.len())?;
        let b = py.detach(|| guard(|| view.gather(&idx))).py_err(py)?;
        ragged_to_py(py, b, &self.allocator.get().placement())
    }

    fn __repr__(&self) -> String {
        format!(
            "RaggedView(records={}, dtype={}, ndim={}, codec={})",
            self.view.len(),
            self.view.dtype(),
            self.view.ndim(),
            self.view.codec().name()
        )
    }
});

/// Iterates a view record by record.
#[pyclass(module = "loaderx.zrecord", frozen)]
pub(crate) struct ViewIter {
    view: StreamView,
    placement: Placement,
    pos: AtomicU64,
}

#[pymethods]
impl ViewIter {
    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        let i = self.pos.fetch_add(1, Ordering::Relaxed);
        if i >= self.view.len() {
            return Ok(None);
        }
        match &self.view {
            StreamView::Dense(v) => {
                let b = py.detach(|| guard(|| v.get(i))).py_err(py)?;
                dense_to_py(py, b, &self.placement).map(Some)
            }
            StreamView::Ragged(v) => {
                let b = py.detach(|| guard(|| v.get(i))).py_err(py)?;
                ragged_to_py(py, b, &self.placement).map(Some)
            }
        }
    }
}

/// Trains a zstd dictionary (at most `max_bytes`) from an evenly spread sample of a view.
#[pyfunction]
#[pyo3(signature = (view, max_bytes=zrecord::DEFAULT_DICT_BYTES))]
pub(crate) fn train_dict<'py>(
    py: Python<'py>,
    view: &Bound<'py, PyAny>,
    max_bytes: usize,
) -> PyResult<Bound<'py, PyBytes>> {
    let d = if let Ok(v) = view.cast::<PyDenseView>() {
        let v = v.get().view.clone();
        py.detach(move || guard(|| zrecord::train_dict(&v, max_bytes)))
    } else if let Ok(v) = view.cast::<PyRaggedView>() {
        let v = v.get().view.clone();
        py.detach(move || guard(|| zrecord::train_dict(&v, max_bytes)))
    } else {
        return Err(InvalidTypeError::new_err(
            "train_dict expects a DenseView or RaggedView (store.bind(allocator))",
        ));
    };
    Ok(PyBytes::new(py, &d.py_err(py)?))
}
