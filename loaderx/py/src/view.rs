//! `DenseView` / `RaggedView` (a store bound to a placement: indexing, gathering, iteration) and
//! `train_dict`, which samples a view.
//!
//! Both classes come from one `view_class!`: the struct, the shared accessors and pickling are
//! written once; each kind adds its shape getter, indexing and `__repr__`. Code that takes either
//! kind (the loader, `train_dict`, iteration) reads a view object through `any_view`.

use std::sync::atomic::{AtomicU64, Ordering};

use loaderx::StreamView;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyTuple};
use zrecord::{DenseView, DictSample, RaggedView};

use crate::allocator::PyAllocator;
use crate::errors::{ClosedError, IntoPyResult, InvalidTypeError, guard};
use crate::gpu::Placement;
use crate::index::{Index, index_vec, parse_indices};
use crate::pickle::{Opened, Reduce, rebuilder};
use crate::tensor::{dense_to_py, ragged_to_py};

/// What a pickled view carries: kind, store path (a URL stays a string), allocator, `mmap`,
/// storage options, the cache keywords.
type ViewArgs<'py> = (
    &'static str,
    String,
    Py<PyAllocator>,
    Option<bool>,
    Option<Bound<'py, PyDict>>,
    Option<Bound<'py, PyDict>>,
);

/// A view object of either kind, as the loader, `train_dict` and iteration take it.
pub(crate) struct AnyView {
    /// `"dense"` or `"ragged"` (the fingerprint's and the pickled form's kind).
    pub kind: &'static str,
    pub view: StreamView,
    /// How its store was opened (path, `mmap`, storage options).
    pub opened: Opened,
    pub placement: Placement,
}

/// `obj` as a view of either kind; None when it is no view.
pub(crate) fn any_view(obj: &Bound<'_, PyAny>) -> Option<AnyView> {
    if let Ok(v) = obj.cast::<PyDenseView>() {
        return Some(v.get().any());
    }
    obj.cast::<PyRaggedView>().ok().map(|v| v.get().any())
}

/// The `#[pymethods]` of a store or view class `$class`, whose store or view is field `$field`:
/// `$extra`, then the accessors every store and view has (`len`, `dtype`, `codec`, `closed`).
macro_rules! record_methods {
    ($class:ident, $field:ident, { $($extra:tt)* }) => {
        #[pymethods]
        impl $class {
            $($extra)*

            fn __len__(&self) -> usize {
                self.$field.len() as usize
            }

            #[getter]
            fn dtype<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
                $crate::dtypes::dtype_obj(py, self.$field.dtype())
            }

            #[getter]
            fn codec(&self) -> &'static str {
                self.$field.codec().name()
            }

            #[getter]
            fn closed(&self) -> bool {
                self.$field.is_closed()
            }

            /// Reads in blocks of `records` consecutive records from now on, keeping at most
            /// `blocks` of them decoded in memory, for this store, its views and their clones in
            /// this process (a pickled one opens without: call it again there). A gather copies
            /// its records from the blocks it touches and fetches the ones it lacks together, each
            /// once (on object storage, one range GET per block). For a block shuffle: `records`
            /// its block, `blocks` its window plus the blocks one batch spans. Again with the
            /// same shape: nothing; another shape: `ValueError` (open the store again).
            fn buffer_blocks(&self, py: Python<'_>, records: u64, blocks: usize) -> PyResult<()> {
                use $crate::errors::IntoPyResult;
                self.$field.buffer_blocks(records, blocks).py_err(py)
            }

            /// The block buffer's shape and work (`records`, `blocks`, `held`, `held_bytes`,
            /// `fetched` blocks, `hits` records), or None without one.
            #[getter]
            fn block_buffer_stats<'py>(
                &self,
                py: Python<'py>,
            ) -> PyResult<Option<Bound<'py, pyo3::types::PyDict>>> {
                let Some(s) = self.$field.block_buffer_stats() else { return Ok(None) };
                let d = pyo3::types::PyDict::new(py);
                d.set_item("records", s.records)?;
                d.set_item("blocks", s.blocks)?;
                d.set_item("held", s.held)?;
                d.set_item("held_bytes", s.held_bytes)?;
                d.set_item("fetched", s.fetched)?;
                d.set_item("hits", s.hits)?;
                Ok(Some(d))
            }
        }
    };
}
pub(crate) use record_methods;

/// The `#[pyclass]` of a view kind and its `#[pymethods]`: `$extra` (the kind-specific methods,
/// indexing included), then the accessors both kinds share. `$variant` is the view's
/// `StreamView` variant, `$kind` its pickled kind, `$shape` its shape accessor (`item_shape` or
/// `ndim`), which `__repr__` shows.
macro_rules! view_class {
    (
        $(#[$doc:meta])* $py_view:ident($view:ty), $name:tt, $variant:ident, $kind:literal,
        $shape:ident, { $($extra:tt)* }
    ) => {
        $(#[$doc])*
        #[pyclass(name = $name, module = "loaderx.zrecord", frozen)]
        pub(crate) struct $py_view {
            pub view: $view,
            /// How its store was opened and the allocator it is bound to: what pickling sends.
            pub opened: Opened,
            pub allocator: Py<PyAllocator>,
        }

        impl $py_view {
            fn any(&self) -> AnyView {
                AnyView {
                    kind: $kind,
                    view: StreamView::$variant(self.view.clone()),
                    opened: self.opened.clone(),
                    placement: self.allocator.get().placement(),
                }
            }
        }

        record_methods!($py_view, view, {
            $($extra)*

            /// Pickles as (store path, allocator): the receiving process reopens the container
            /// and binds it to a fresh allocator of the same placement and `pool_size`.
            fn __reduce__<'py>(&self, py: Python<'py>) -> PyResult<Reduce<'py, ViewArgs<'py>>> {
                let o = &self.opened;
                if self.view.is_closed() {
                    return Err(ClosedError::new_err(format!(
                        "cannot pickle a view of {}: its store is closed",
                        o.path.display()
                    )));
                }
                let (path, mmap, options, cache) = o.pickled(py)?;
                let args = ($kind, path, self.allocator.clone_ref(py), mmap, options, cache);
                Ok((rebuilder(py, "view")?, args))
            }

            fn __repr__(&self) -> String {
                format!(
                    "{}(records={}, dtype={}, {}={:?}, codec={})",
                    $name,
                    self.view.len(),
                    self.view.dtype(),
                    stringify!($shape),
                    self.view.$shape(),
                    self.view.codec().name()
                )
            }

            fn __iter__(&self) -> ViewIter {
                let v = self.any();
                ViewIter { view: v.view, placement: v.placement, pos: AtomicU64::new(0) }
            }
        });
    };
}

view_class!(
    /// A Dense store bound to a placement: `len`, `dtype`, `item_shape`, indexing and iteration.
    PyDenseView(DenseView), "DenseView", Dense, "dense", item_shape, {
    #[getter]
    fn item_shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.view.item_shape())
    }

    /// `view[i]` → one record (no batch axis); `view[i, j]`, `view[[...]]`, `view[array]`,
    /// `view[a:b]` → one stacked `(n, *item_shape)` batch in the requested order.
    fn __getitem__(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let view = &self.view;
        let b = match parse_indices(key, view.len())? {
            Index::One(i) => py.detach(|| guard(|| view.get(i))),
            Index::Many(idx) => py.detach(|| guard(|| view.gather(&idx))),
        };
        dense_to_py(py, b.py_err(py)?, &self.allocator.get().placement())
    }
});

view_class!(
    /// A Ragged store bound to a placement: `len`, `dtype`, `ndim`, indexing and iteration.
    PyRaggedView(RaggedView), "RaggedView", Ragged, "ragged", ndim, {
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
        let p = &self.placement;
        let item = match &self.view {
            StreamView::Dense(v) => {
                dense_to_py(py, py.detach(|| guard(|| v.get(i))).py_err(py)?, p)
            }
            StreamView::Ragged(v) => {
                ragged_to_py(py, py.detach(|| guard(|| v.get(i))).py_err(py)?, p)
            }
        };
        item.map(Some)
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
    let Some(v) = any_view(view) else {
        return Err(InvalidTypeError::new_err(
            "train_dict expects a DenseView or RaggedView (store.bind(allocator))",
        ));
    };
    let view = v.view;
    let d = py.detach(move || {
        let sample: &dyn DictSample = match &view {
            StreamView::Dense(d) => d,
            StreamView::Ragged(r) => r,
        };
        guard(|| zrecord::train_dict(sample, max_bytes))
    });
    Ok(PyBytes::new(py, &d.py_err(py)?))
}
