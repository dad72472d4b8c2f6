//! Stores, views, writers and the CPU allocator.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use loaderx::{PooledAllocator, StreamView};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PySlice, PyTuple};
use zrecord::{
    Codec, DType, DenseStore, DenseView, DenseWriter, RaggedStore, RaggedView, RaggedWriter,
    WriterOptions,
};

use crate::dlpack::import;
use crate::dtypes::{dtype_obj, parse_dtype};
use crate::errors::{CoreError, IntoPyResult, guard, lock, raise, take_detached, type_name};
use crate::tensor::{PyDLTensor, PyRaggedBatch, Ragged, StoredRagged};

// ---------------------------------------------------------------------------------------------
// Allocator

/// A placement: `Allocator("cpu", 0, pool_size=...)`, a bounded pooled CPU allocator.
#[pyclass(name = "Allocator", module = "loaderx", frozen)]
pub(crate) struct PyAllocator {
    inner: Mutex<Option<Arc<PooledAllocator>>>,
    pool_size: u64,
}

impl PyAllocator {
    pub(crate) fn arc(&self, py: Python<'_>) -> PyResult<Arc<dyn zrecord::Allocator>> {
        let g = self
            .inner
            .lock()
            .map_err(|_| raise(py, "InternalError", "allocator lock poisoned"))?;
        match &*g {
            Some(a) => Ok(a.clone() as Arc<dyn zrecord::Allocator>),
            None => Err(raise(
                py,
                "ClosedError",
                "allocator is closed; create a new Allocator to bind",
            )),
        }
    }

    fn pooled(&self, py: Python<'_>) -> PyResult<Option<Arc<PooledAllocator>>> {
        let g = self
            .inner
            .lock()
            .map_err(|_| raise(py, "InternalError", "allocator lock poisoned"))?;
        Ok(g.clone())
    }
}

#[pymethods]
impl PyAllocator {
    #[new]
    #[pyo3(signature = (device="cpu", device_id=0, *, pool_size=loaderx::DEFAULT_POOL_SIZE))]
    fn py_new(py: Python<'_>, device: &str, device_id: i64, pool_size: u64) -> PyResult<Self> {
        let kind = device.to_ascii_lowercase();
        match kind.as_str() {
            "cpu" => {}
            "cuda" | "gpu" | "rocm" | "amdgpu" | "hip" | "mps" | "xpu" => {
                return Err(raise(
                    py,
                    "UnsupportedDeviceError",
                    format!(
                        "device {device:?} is not supported by this build; only \"cpu\" placement is available (see loaderx.backend)"
                    ),
                ));
            }
            _ => {
                return Err(PyValueError::new_err(format!(
                    "unknown device {device:?}; expected \"cpu\""
                )));
            }
        }
        if device_id != 0 {
            return Err(PyValueError::new_err(format!(
                "the CPU has one device, id 0; got device_id {device_id}"
            )));
        }
        Ok(PyAllocator {
            inner: Mutex::new(Some(Arc::new(PooledAllocator::new(pool_size)))),
            pool_size,
        })
    }

    /// Bound on the bytes kept in the idle pool.
    #[getter]
    fn pool_size(&self) -> u64 {
        self.pool_size
    }

    /// The device string, `"cpu"`.
    #[getter]
    fn device(&self) -> &'static str {
        "cpu"
    }

    /// Whether `close()` was called.
    #[getter]
    fn closed(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.pooled(py)?.is_none())
    }

    /// Pool and live-allocation counters (a dict).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let Some(p) = self.pooled(py)? else {
            return Err(raise(py, "ClosedError", "allocator is closed"));
        };
        let s = p.pool_stats();
        let d = PyDict::new(py);
        d.set_item("bytes_retained", s.bytes_retained)?;
        d.set_item("pool_size", s.pool_size)?;
        d.set_item("hits", s.hits)?;
        d.set_item("misses", s.misses)?;
        d.set_item("live_allocations", s.live_allocations)?;
        d.set_item("live_bytes", s.live_bytes)?;
        d.set_item("peak_live_allocations", s.peak_live_allocations)?;
        Ok(d)
    }

    /// Releases the allocator. Views already bound keep working (they share the pool); `bind`
    /// fails afterwards. Idempotent.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let mut g = self
            .inner
            .lock()
            .map_err(|_| raise(py, "InternalError", "allocator lock poisoned"))?;
        if let Some(p) = g.take() {
            p.trim();
        }
        Ok(())
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!(
            "Allocator('cpu', 0, pool_size={}{})",
            self.pool_size,
            if self.closed(py)? { ", closed" } else { "" }
        ))
    }
}

// ---------------------------------------------------------------------------------------------
// Index parsing

pub(crate) enum Index {
    One(u64),
    Many(Vec<u64>),
}

fn negative(py: Python<'_>, i: i128, len: u64) -> PyErr {
    raise(
        py,
        "IndexOutOfRangeError",
        format!(
            "index {i} out of range for a store of {len} records (indices must be in 0..{len}; negative indices are not supported)"
        ),
    )
}

fn to_u64(py: Python<'_>, i: i128, len: u64) -> PyResult<u64> {
    if i < 0 || i > u64::MAX as i128 {
        Err(negative(py, i, len))
    } else {
        Ok(i as u64)
    }
}

fn one_int(item: &Bound<'_, PyAny>) -> PyResult<i128> {
    if item.is_instance_of::<pyo3::types::PyBool>() {
        return Err(PyTypeError::new_err("bool is not a valid record index"));
    }
    item.extract::<i128>().map_err(|_| {
        let t = type_name(item);
        PyTypeError::new_err(format!("record indices must be integers, got {t}"))
    })
}

/// Indices from a sequence, slice, integer or integer array (DLPack, any strides).
pub(crate) fn parse_indices(key: &Bound<'_, PyAny>, len: u64) -> PyResult<Index> {
    let py = key.py();
    if let Ok(s) = key.cast::<PySlice>() {
        let ind = s.indices(len.min(isize::MAX as u64) as isize)?;
        let mut v = Vec::with_capacity(ind.slicelength);
        let mut i = ind.start;
        for _ in 0..ind.slicelength {
            v.push(i as u64);
            i += ind.step;
        }
        return Ok(Index::Many(v));
    }
    if let Ok(t) = key.cast::<PyTuple>() {
        let mut v = Vec::with_capacity(t.len());
        for item in t.iter() {
            v.push(to_u64(py, one_int(&item)?, len)?);
        }
        return Ok(Index::Many(v));
    }
    if let Ok(l) = key.cast::<PyList>() {
        let mut v = Vec::with_capacity(l.len());
        for item in l.iter() {
            v.push(to_u64(py, one_int(&item)?, len)?);
        }
        return Ok(Index::Many(v));
    }
    if key.hasattr(pyo3::intern!(py, "__dlpack__"))? {
        let imp = import(key, "index array")?;
        if imp.shape.len() > 1 {
            return Err(PyTypeError::new_err(format!(
                "index arrays must be 0-D or 1-D, got shape {:?}",
                imp.shape
            )));
        }
        let els = imp.int_elements().ok_or_else(|| {
            PyTypeError::new_err(format!(
                "index arrays must have an integer dtype, got {}",
                imp.dtype
            ))
        })?;
        let mut v = Vec::with_capacity(els.len());
        for e in els.iter().copied() {
            v.push(to_u64(py, e, len)?);
        }
        return Ok(if imp.shape.is_empty() {
            Index::One(v[0])
        } else {
            Index::Many(v)
        });
    }
    Ok(Index::One(to_u64(py, one_int(key)?, len)?))
}

/// Indices as a flat `Vec<u64>` (for samplers and helpers).
pub(crate) fn index_vec(key: &Bound<'_, PyAny>, len: u64) -> PyResult<Vec<u64>> {
    Ok(match parse_indices(key, len)? {
        Index::One(i) => vec![i],
        Index::Many(v) => v,
    })
}

// ---------------------------------------------------------------------------------------------
// Batches → Python

pub(crate) fn dense_to_py(py: Python<'_>, b: zrecord::DenseBatch) -> PyResult<Py<PyAny>> {
    let (alloc, shape, dtype) = b.into_parts();
    Ok(Py::new(py, PyDLTensor::new(Arc::new(alloc), 0, shape, dtype))?.into_any())
}

pub(crate) fn ragged_to_py(py: Python<'_>, b: zrecord::RaggedBatch) -> PyResult<Py<PyAny>> {
    Ok(Py::new(
        py,
        PyRaggedBatch {
            repr: Ragged::Stored(StoredRagged::from_batch(b)),
        },
    )?
    .into_any())
}

fn codec_name(c: Codec) -> &'static str {
    c.name()
}

// ---------------------------------------------------------------------------------------------
// Views

/// A Dense store bound to a placement: `len`, `dtype`, `item_shape`, indexing and iteration.
#[pyclass(name = "DenseView", module = "loaderx.zrecord", frozen)]
pub(crate) struct PyDenseView {
    pub view: DenseView,
}

/// A Ragged store bound to a placement: `len`, `dtype`, `ndim`, indexing and iteration.
#[pyclass(name = "RaggedView", module = "loaderx.zrecord", frozen)]
pub(crate) struct PyRaggedView {
    pub view: RaggedView,
}

/// The `#[pymethods]` of a view class: `$extra` (the kind-specific methods, indexing included),
/// then the accessors both kinds share. `$kind` is the view's `StreamView` variant.
macro_rules! view_class {
    ($py_view:ident, $kind:ident, { $($extra:tt)* }) => {
        #[pymethods]
        impl $py_view {
            $($extra)*

            fn __len__(&self) -> usize {
                self.view.len() as usize
            }

            #[getter]
            fn dtype<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
                dtype_obj(py, self.view.dtype())
            }

            #[getter]
            fn codec(&self) -> &'static str {
                codec_name(self.view.codec())
            }

            #[getter]
            fn closed(&self) -> bool {
                self.view.is_closed()
            }

            fn __iter__(&self) -> ViewIter {
                ViewIter {
                    view: StreamView::$kind(self.view.clone()),
                    pos: AtomicU64::new(0),
                }
            }
        }
    };
}

view_class!(PyDenseView, Dense, {
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
                dense_to_py(py, b)
            }
            Index::Many(idx) => {
                let b = py.detach(|| guard(|| view.gather(&idx))).py_err(py)?;
                dense_to_py(py, b)
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

view_class!(PyRaggedView, Ragged, {
    #[getter]
    fn ndim(&self) -> u32 {
        self.view.ndim()
    }

    /// `view[i]` → a one-record `RaggedBatch`; any collection of indices → one packed batch.
    fn __getitem__(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let view = &self.view;
        let idx = index_vec(key, view.len())?;
        let b = py.detach(|| guard(|| view.gather(&idx))).py_err(py)?;
        ragged_to_py(py, b)
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
                dense_to_py(py, b).map(Some)
            }
            StreamView::Ragged(v) => {
                let b = py.detach(|| guard(|| v.get(i))).py_err(py)?;
                ragged_to_py(py, b).map(Some)
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Stores

macro_rules! store_class {
    ($py_store:ident, $pyname:literal, $store:ident, $py_view:ident, { $($extra:tt)* }) => {
        #[pymethods]
        impl $py_store {
            $($extra)*

            /// Opens a published container.
            #[new]
            fn py_new(py: Python<'_>, path: PathBuf) -> PyResult<Self> {
                let store = py.detach(|| guard(|| $store::open(&path))).py_err(py)?;
                Ok($py_store { store })
            }

            /// Binds the store to a placement; the view owns the index API.
            fn bind(&self, py: Python<'_>, allocator: PyRef<'_, PyAllocator>) -> PyResult<$py_view> {
                if self.store.is_closed() {
                    return Err(raise(
                        py,
                        "ClosedError",
                        format!("{} {} is closed", $pyname, self.store.path().display()),
                    ));
                }
                let a = allocator.arc(py)?;
                Ok($py_view {
                    view: self.store.bind(a),
                })
            }

            fn __len__(&self) -> usize {
                self.store.len() as usize
            }

            #[getter]
            fn dtype<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
                dtype_obj(py, self.store.dtype())
            }

            #[getter]
            fn codec(&self) -> &'static str {
                codec_name(self.store.codec())
            }

            #[getter]
            fn data_shards(&self) -> u32 {
                self.store.data_shards()
            }

            #[getter]
            fn path(&self) -> PathBuf {
                self.store.path().to_path_buf()
            }

            #[getter]
            fn closed(&self) -> bool {
                self.store.is_closed()
            }

            /// The dictionary of a `zstd_dict` store, else None.
            #[getter]
            fn dictionary<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyBytes>> {
                self.store.dictionary().map(|d| PyBytes::new(py, d))
            }

            /// Reads and checks every stored byte.
            fn verify(&self, py: Python<'_>) -> PyResult<()> {
                let s = &self.store;
                py.detach(|| guard(|| s.verify())).py_err(py)
            }

            /// Releases the store; its views fail with `ClosedError` afterwards. Idempotent.
            fn close(&self) {
                self.store.close();
            }

            fn __getitem__(&self, _key: &Bound<'_, PyAny>) -> PyResult<()> {
                Err(PyTypeError::new_err(concat!(
                    "a ", $pyname, " is not indexable; bind it first: store.bind(Allocator('cpu'))[i]"
                )))
            }

            fn __enter__(slf: Py<Self>) -> Py<Self> {
                slf
            }

            #[pyo3(signature = (*_args))]
            fn __exit__(&self, _args: &Bound<'_, PyTuple>) -> bool {
                self.store.close();
                false
            }

            fn __repr__(&self) -> String {
                format!(
                    "{}({:?}, records={}, dtype={}, codec={}{})",
                    $pyname,
                    self.store.path().display().to_string(),
                    self.store.len(),
                    self.store.dtype(),
                    self.store.codec().name(),
                    if self.store.is_closed() { ", closed" } else { "" }
                )
            }
        }
    };
}

/// An opened Dense container (not indexable: `bind` it).
#[pyclass(name = "DenseStore", module = "loaderx.zrecord", frozen)]
pub(crate) struct PyDenseStore {
    store: DenseStore,
}

/// An opened Ragged container (not indexable: `bind` it).
#[pyclass(name = "RaggedStore", module = "loaderx.zrecord", frozen)]
pub(crate) struct PyRaggedStore {
    store: RaggedStore,
}

store_class!(PyDenseStore, "DenseStore", DenseStore, PyDenseView, {
    /// Shape of one record.
    #[getter]
    fn item_shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.store.item_shape())
    }
});
store_class!(PyRaggedStore, "RaggedStore", RaggedStore, PyRaggedView, {
    /// Rank of every record.
    #[getter]
    fn ndim(&self) -> u32 {
        self.store.ndim()
    }
});

// ---------------------------------------------------------------------------------------------
// Writers

fn writer_options(
    py: Python<'_>,
    codec: &str,
    data_shards: u32,
    dict_bytes: Option<&Bound<'_, PyAny>>,
) -> PyResult<(Codec, WriterOptions)> {
    let c = Codec::from_name(codec).ok_or_else(|| {
        PyValueError::new_err(format!(
            "unknown codec {codec:?}; expected \"raw\", \"zstd\" or \"zstd_dict\""
        ))
    })?;
    let dict = match dict_bytes {
        None => None,
        Some(d) if d.is_none() => None,
        Some(d) => Some(d.extract::<Vec<u8>>().map_err(|_| {
            PyTypeError::new_err("dict_bytes must be bytes (e.g. the result of train_dict)")
        })?),
    };
    if c != Codec::ZstdDict && dict.is_some() {
        return Err(raise(
            py,
            "InvalidInputError",
            format!("dict_bytes is only used with codec \"zstd_dict\", not {codec:?}"),
        ));
    }
    Ok((
        c,
        WriterOptions {
            data_shards,
            dict,
            ..WriterOptions::default()
        },
    ))
}

fn shape_arg(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Vec<u64>> {
    let mut v = Vec::new();
    for item in obj.try_iter()? {
        let i: i128 = one_int(&item?)?;
        if i < 0 || i > u64::MAX as i128 {
            return Err(PyValueError::new_err(format!(
                "{what} holds a negative or too large extent {i}"
            )));
        }
        v.push(i as u64);
    }
    Ok(v)
}

/// The message of the `ClosedError` a published or aborted writer raises.
fn closed_writer_msg(kind: &str, path: &Path) -> String {
    format!(
        "{kind} for {} is closed (published or aborted)",
        path.display()
    )
}

/// The `InternalError` message of a writer lock poisoned inside a `detach` section.
const WRITER_POISONED: &str = "writer lock poisoned by an earlier failure";

/// Runs `f` (an append) on the open writer in `slot` with the GIL released; a published or
/// aborted `kind` writer fails with `ClosedError`.
fn append_detached<W: Send>(
    py: Python<'_>,
    slot: &Mutex<Option<W>>,
    kind: &str,
    path: &Path,
    f: impl FnOnce(&mut W) -> Result<(), zrecord::Error> + Send,
) -> PyResult<()> {
    py.detach(|| {
        guard(|| match lock(slot, WRITER_POISONED)?.as_mut() {
            Some(w) => f(w).map_err(CoreError::Z),
            None => Err(CoreError::Py("ClosedError", closed_writer_msg(kind, path))),
        })
    })
    .py_err(py)
}

/// The `#[pymethods]` of a writer class: `$extra` (constructor, `append`, the kind-specific getter
/// and `__repr__`), then the length, accessors and publish/abort life cycle both kinds share.
macro_rules! writer_class {
    ($py_writer:ident, $pyname:literal, { $($extra:tt)* }) => {
        #[pymethods]
        impl $py_writer {
            $($extra)*

            /// Records appended so far.
            fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
                let g = self
                    .inner
                    .lock()
                    .map_err(|_| raise(py, "InternalError", "writer lock poisoned"))?;
                match &*g {
                    Some(w) => Ok(w.len() as usize),
                    None => Err(raise(
                        py,
                        "ClosedError",
                        closed_writer_msg($pyname, &self.path),
                    )),
                }
            }

            #[getter]
            fn dtype<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
                dtype_obj(py, self.dtype)
            }

            #[getter]
            fn path(&self) -> PathBuf {
                self.path.clone()
            }

            /// Publishes the container (atomic; idempotent).
            fn close(&self, py: Python<'_>) -> PyResult<()> {
                take_detached(py, &self.inner, WRITER_POISONED, |w| {
                    w.close().map_err(CoreError::Z)
                })
            }

            /// Discards everything written; nothing is published. Idempotent.
            fn abort(&self, py: Python<'_>) -> PyResult<()> {
                take_detached(py, &self.inner, WRITER_POISONED, |w| {
                    drop(w);
                    Ok(())
                })
            }

            fn __enter__(slf: Py<Self>) -> Py<Self> {
                slf
            }

            /// Publishes on a normal exit; aborts (publishes nothing) when the block raised.
            #[pyo3(signature = (exc_type=None, _exc=None, _tb=None))]
            fn __exit__(
                &self,
                py: Python<'_>,
                exc_type: Option<&Bound<'_, PyAny>>,
                _exc: Option<&Bound<'_, PyAny>>,
                _tb: Option<&Bound<'_, PyAny>>,
            ) -> PyResult<bool> {
                if exc_type.is_some_and(|t| !t.is_none()) {
                    self.abort(py)?;
                } else {
                    self.close(py)?;
                }
                Ok(false)
            }
        }
    };
}

/// Creates a new Dense container; `close()` (or leaving `with` normally) publishes it.
#[pyclass(name = "DenseWriter", module = "loaderx.zrecord", frozen)]
pub(crate) struct PyDenseWriter {
    inner: Mutex<Option<DenseWriter>>,
    path: PathBuf,
    dtype: DType,
    item_shape: Vec<u64>,
}

writer_class!(PyDenseWriter, "DenseWriter", {
    #[new]
    #[pyo3(signature = (path, dtype, item_shape, codec, data_shards=zrecord::DEFAULT_DATA_SHARDS, dict_bytes=None))]
    fn py_new(
        py: Python<'_>,
        path: PathBuf,
        dtype: &Bound<'_, PyAny>,
        item_shape: &Bound<'_, PyAny>,
        codec: &str,
        data_shards: u32,
        dict_bytes: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let d = parse_dtype(dtype)?;
        let shape = shape_arg(item_shape, "item_shape")?;
        let (c, opts) = writer_options(py, codec, data_shards, dict_bytes)?;
        let w = py
            .detach(|| guard(|| DenseWriter::create(&path, d, &shape, c, opts)))
            .py_err(py)?;
        Ok(PyDenseWriter {
            inner: Mutex::new(Some(w)),
            path,
            dtype: d,
            item_shape: shape,
        })
    }

    /// Appends a C-contiguous CPU tensor of shape `(n, *item_shape)` in the store dtype.
    fn append(&self, py: Python<'_>, batch: &Bound<'_, PyAny>) -> PyResult<()> {
        let imp = import(batch, "DenseWriter.append")?;
        if imp.dtype != self.dtype {
            return Err(raise(
                py,
                "DTypeError",
                format!(
                    "DenseWriter.append({}): expected dtype {}, found {}",
                    self.path.display(),
                    self.dtype,
                    imp.dtype
                ),
            ));
        }
        if imp.shape.len() != self.item_shape.len() + 1 || imp.shape[1..] != self.item_shape[..] {
            let mut want = vec!["n".to_string()];
            want.extend(self.item_shape.iter().map(|d| d.to_string()));
            return Err(raise(
                py,
                "InvalidInputError",
                format!(
                    "DenseWriter.append({}): expected shape ({}), found {:?}",
                    self.path.display(),
                    want.join(", "),
                    imp.shape
                ),
            ));
        }
        if !imp.is_c_contiguous() {
            return Err(raise(
                py,
                "InvalidInputError",
                format!(
                    "DenseWriter.append({}): input of shape {:?} is not C-contiguous (strides {:?} elements); pass np.ascontiguousarray(x)",
                    self.path.display(),
                    imp.shape,
                    imp.strides
                ),
            ));
        }
        let bytes = imp.bytes();
        append_detached(py, &self.inner, "DenseWriter", &self.path, |w| {
            w.append(bytes)
        })
    }

    #[getter]
    fn item_shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, &self.item_shape)
    }

    fn __repr__(&self) -> String {
        format!(
            "DenseWriter({:?}, dtype={}, item_shape={:?})",
            self.path.display().to_string(),
            self.dtype,
            self.item_shape
        )
    }
});

/// Creates a new Ragged container; `close()` (or leaving `with` normally) publishes it.
#[pyclass(name = "RaggedWriter", module = "loaderx.zrecord", frozen)]
pub(crate) struct PyRaggedWriter {
    inner: Mutex<Option<RaggedWriter>>,
    path: PathBuf,
    dtype: DType,
    ndim: u32,
}

fn decode_i32(py: Python<'_>, imp: &crate::dlpack::Imported<'_>, what: &str) -> PyResult<Vec<i32>> {
    if imp.dtype != DType::Int32 {
        return Err(raise(
            py,
            "DTypeError",
            format!(
                "RaggedWriter.append: {what} must be int32, found {}",
                imp.dtype
            ),
        ));
    }
    Ok(imp
        .bytes()
        .chunks_exact(4)
        .map(|c| i32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

writer_class!(PyRaggedWriter, "RaggedWriter", {
    #[new]
    #[pyo3(signature = (path, dtype, ndim, codec, data_shards=zrecord::DEFAULT_DATA_SHARDS, dict_bytes=None))]
    fn py_new(
        py: Python<'_>,
        path: PathBuf,
        dtype: &Bound<'_, PyAny>,
        ndim: u32,
        codec: &str,
        data_shards: u32,
        dict_bytes: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let d = parse_dtype(dtype)?;
        let (c, opts) = writer_options(py, codec, data_shards, dict_bytes)?;
        let w = py
            .detach(|| guard(|| RaggedWriter::create(&path, d, ndim, c, opts)))
            .py_err(py)?;
        Ok(PyRaggedWriter {
            inner: Mutex::new(Some(w)),
            path,
            dtype: d,
            ndim,
        })
    }

    /// Appends a packed `RaggedBatch(values, cu_seqlens, shapes)`.
    fn append(&self, py: Python<'_>, batch: &Bound<'_, PyAny>) -> PyResult<()> {
        let Ok(rb) = batch.cast::<PyRaggedBatch>() else {
            let t = type_name(batch);
            return Err(PyTypeError::new_err(format!(
                "RaggedWriter.append expects a RaggedBatch(values, cu_seqlens, shapes), got {t}; use RaggedBatch.from_records(records) for a list of arrays"
            )));
        };
        let rb = rb.get();
        let path = self.path.display().to_string();
        let mismatch = |what: String| {
            raise(
                py,
                "InvalidInputError",
                format!("RaggedWriter.append({path}): {what}"),
            )
        };
        // Keeps imported fields alive across the detached append.
        let mut keep = Vec::new();
        let (values, cu, shapes): (&[u8], Vec<i32>, Vec<u64>) = match &rb.repr {
            Ragged::Stored(s) => {
                if s.dtype != self.dtype {
                    return Err(raise(
                        py,
                        "DTypeError",
                        format!(
                            "RaggedWriter.append({path}): expected dtype {}, found {}",
                            self.dtype, s.dtype
                        ),
                    ));
                }
                if s.ndim != self.ndim as usize {
                    return Err(mismatch(format!(
                        "expected ndim {}, found {}",
                        self.ndim, s.ndim
                    )));
                }
                (s.values(), s.cu(), s.shapes())
            }
            Ragged::User {
                values,
                cu_seqlens,
                shapes,
            } => {
                let v = import(values.bind(py), "RaggedBatch.values")?;
                let c = import(cu_seqlens.bind(py), "RaggedBatch.cu_seqlens")?;
                let s = import(shapes.bind(py), "RaggedBatch.shapes")?;
                if v.dtype != self.dtype {
                    return Err(raise(
                        py,
                        "DTypeError",
                        format!(
                            "RaggedWriter.append({path}): values: expected dtype {}, found {}",
                            self.dtype, v.dtype
                        ),
                    ));
                }
                if v.shape.len() != 1 {
                    return Err(mismatch(format!(
                        "values must be 1-D, found shape {:?}",
                        v.shape
                    )));
                }
                if c.shape.len() != 1 || c.shape[0] == 0 {
                    return Err(mismatch(format!(
                        "cu_seqlens must be 1-D with n + 1 >= 1 entries, found shape {:?}",
                        c.shape
                    )));
                }
                let n = c.shape[0] - 1;
                if s.dtype != DType::UInt64 {
                    return Err(raise(
                        py,
                        "DTypeError",
                        format!(
                            "RaggedWriter.append({path}): shapes must be uint64, found {}",
                            s.dtype
                        ),
                    ));
                }
                if s.shape != [n, u64::from(self.ndim)] {
                    return Err(mismatch(format!(
                        "shapes: expected shape ({n}, {}) for {n} records of ndim {}, found {:?}",
                        self.ndim, self.ndim, s.shape
                    )));
                }
                for (imp, what) in [(&v, "values"), (&c, "cu_seqlens"), (&s, "shapes")] {
                    if !imp.is_c_contiguous() {
                        return Err(mismatch(format!(
                            "{what} is not C-contiguous (strides {:?})",
                            imp.strides
                        )));
                    }
                }
                let cu = decode_i32(py, &c, "cu_seqlens")?;
                let sh: Vec<u64> = s
                    .bytes()
                    .chunks_exact(8)
                    .map(|b| u64::from_ne_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
                    .collect();
                keep.push(v);
                (keep[0].bytes(), cu, sh)
            }
        };
        append_detached(py, &self.inner, "RaggedWriter", &self.path, |w| {
            w.append(values, &cu, &shapes)
        })
    }

    #[getter]
    fn ndim(&self) -> u32 {
        self.ndim
    }

    fn __repr__(&self) -> String {
        format!(
            "RaggedWriter({:?}, dtype={}, ndim={})",
            self.path.display().to_string(),
            self.dtype,
            self.ndim
        )
    }
});

// ---------------------------------------------------------------------------------------------
// Functions

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
        return Err(PyTypeError::new_err(
            "train_dict expects a DenseView or RaggedView (store.bind(allocator))",
        ));
    };
    Ok(PyBytes::new(py, &d.py_err(py)?))
}

/// Benchmark helper: runs `view.gather(idx)` `iters` times in Rust (no Python in the loop) and
/// returns nanoseconds per call.
#[pyfunction]
pub(crate) fn _bench_gather(
    py: Python<'_>,
    view: &Bound<'_, PyAny>,
    idx: &Bound<'_, PyAny>,
    iters: u64,
) -> PyResult<f64> {
    let v = view
        .cast::<PyDenseView>()
        .map_err(|_| PyTypeError::new_err("_bench_gather expects a DenseView"))?
        .get()
        .view
        .clone();
    let idx = index_vec(idx, v.len())?;
    let r = py.detach(move || {
        guard(|| {
            let t = std::time::Instant::now();
            for _ in 0..iters.max(1) {
                std::hint::black_box(v.gather(&idx)?);
            }
            Ok::<f64, zrecord::Error>(t.elapsed().as_nanos() as f64 / iters.max(1) as f64)
        })
    });
    r.py_err(py)
}
