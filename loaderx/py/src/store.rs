//! `DenseStore` / `RaggedStore`: an opened, published container (metadata, `verify`, `close`);
//! `bind` turns it into a view.

use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyTuple};
use zrecord::{DenseStore, OpenOptions, RaggedStore};

use crate::allocator::PyAllocator;
use crate::errors::{ClosedError, IntoPyResult, InvalidTypeError, guard};
use crate::pickle::{Opened, Reduce, rebuilder};
use crate::remote::{remote_options, stats_dict, with_cache};
use crate::view::{PyDenseView, PyRaggedView, record_methods};

/// The `#[pyclass]` of a store kind (`$store` opened, bound into `$py_view`) and its
/// `#[pymethods]`: `$extra` (the kind's shape getter), then everything both kinds share.
macro_rules! store_class {
    ($(#[$doc:meta])* $py_store:ident($store:ident), $pyname:tt, $kind:literal, $py_view:ident, { $($extra:tt)* }) => {
        $(#[$doc])*
        #[pyclass(name = $pyname, module = "loaderx.zrecord", frozen)]
        pub(crate) struct $py_store {
            store: $store,
            /// How it was opened: what pickling sends and its views keep.
            opened: Opened,
        }

        record_methods!($py_store, store, {
            $($extra)*

            /// Opens a published container: a local path, or a URL (`s3://bucket/prefix`,
            /// `gs://`, `az://`, `http(s)://`) with `storage_options` (object_store keys:
            /// `endpoint`, `region`, `allow_http`, `access_key_id`, `secret_access_key`, ...;
            /// credentials come from the environment by default). `mmap`: None maps local files
            /// except on a shared or network file system (NFS, SMB, FUSE, Lustre, ...), where
            /// they are read with positional reads; True always maps, False never does.
            /// `cache_dir` (a URL's store only): a node-local cache of the store's blocks there,
            /// shared by the node's processes, holding at most `cache_bytes` (default 10 GiB) in
            /// blocks of `cache_block` bytes (default 256 KiB). A dataset of parts
            /// (`loaderx.dataset`) opens at its newest version, or at `version`; `column` names
            /// the column of a dataset of several (or of a converter's root).
            #[new]
            #[pyo3(signature = (path, *, mmap = None, storage_options = None, cache_dir = None, cache_bytes = None, cache_block = None, version = None, column = None))]
            #[allow(clippy::too_many_arguments)]
            fn py_new(
                py: Python<'_>,
                path: PathBuf,
                mmap: Option<bool>,
                storage_options: Option<&Bound<'_, PyDict>>,
                cache_dir: Option<PathBuf>,
                cache_bytes: Option<u64>,
                cache_block: Option<u64>,
                version: Option<u64>,
                column: Option<String>,
            ) -> PyResult<Self> {
                let remote = with_cache(remote_options(storage_options)?, cache_dir, cache_bytes, cache_block)?;
                let opts = OpenOptions {
                    mmap,
                    remote: remote.clone(),
                    version,
                    column: column.clone(),
                    ..OpenOptions::default()
                };
                let store = py.detach(|| guard(|| $store::open_with(&path, opts))).py_err(py)?;
                let opened = Opened { path: path.clone(), mmap, remote, version: store.version(), column };
                Ok($py_store { store, opened })
            }

            /// Whether the store's files are memory-mapped (False: read with positional reads).
            #[getter]
            fn mapped(&self) -> bool {
                self.store.is_mapped()
            }

            /// What the node-local cache did for this store in this process (`hits`, `misses`,
            /// `fills`, `corrupt` and `evicted` blocks, `last_error`), or None without a cache.
            #[getter]
            fn cache_stats<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
                stats_dict(py, self.store.cache_stats())
            }

            /// The requests this store on object storage made in this process (its open
            /// included) and the bytes they received (`requests`, `bytes`), or None for a local
            /// store.
            #[getter]
            fn request_stats<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
                let Some(r) = self.store.request_stats() else { return Ok(None) };
                let d = PyDict::new(py);
                d.set_item("requests", r.requests)?;
                d.set_item("bytes", r.bytes)?;
                Ok(Some(d))
            }

            /// Pickles as its path, `mmap` and `storage_options` (credentials included: they
            /// travel to the receiving process, which reopens and checks the container).
            fn __reduce__<'py>(&self, py: Python<'py>) -> PyResult<Reduce<'py, StoreArgs<'py>>> {
                if self.store.is_closed() {
                    return Err(ClosedError::new_err(format!(
                        "cannot pickle {} {}: it is closed", $pyname, self.store.path().display()
                    )));
                }
                let (path, mmap, options, cache) = self.opened.pickled(py)?;
                Ok((rebuilder(py, "store")?, ($kind, path, mmap, options, cache)))
            }

            /// Binds the store to a placement; the view owns the index API.
            fn bind(&self, allocator: Bound<'_, PyAllocator>) -> PyResult<$py_view> {
                if self.store.is_closed() {
                    return Err(ClosedError::new_err(format!("{} {} is closed", $pyname, self.store.path().display()),
                    ));
                }
                let a = allocator.get().arc()?;
                Ok($py_view {
                    view: self.store.bind(a),
                    opened: self.opened.clone(),
                    allocator: allocator.unbind(),
                })
            }

            /// The dataset version this store reads, None for a single container.
            #[getter]
            fn version(&self) -> Option<u64> {
                self.store.version()
            }

            #[getter]
            fn data_shards(&self) -> u32 {
                self.store.data_shards()
            }

            #[getter]
            fn path(&self) -> PathBuf {
                self.store.path().to_path_buf()
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

            /// Number of parts (a dataset's; 1 for a single container).
            #[getter]
            fn parts(&self) -> usize {
                self.store.parts()
            }

            /// `verify()` of part `p` alone (for progress reports).
            fn verify_part(&self, py: Python<'_>, p: usize) -> PyResult<()> {
                let s = &self.store;
                py.detach(|| guard(|| s.verify_part(p))).py_err(py)
            }

            /// Releases the store; its views fail with `ClosedError` afterwards. Idempotent.
            fn close(&self) {
                self.store.close();
            }

            fn __getitem__(&self, _key: &Bound<'_, PyAny>) -> PyResult<()> {
                Err(InvalidTypeError::new_err(concat!(
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
        });
    };
}

/// What a pickled store carries: kind, then its `Opened`.
type StoreArgs<'py> = (
    &'static str,
    String,
    Option<bool>,
    Option<Bound<'py, PyDict>>,
    Option<Bound<'py, PyDict>>,
);

store_class!(
    /// An opened Dense container (not indexable: `bind` it).
    PyDenseStore(DenseStore), "DenseStore", "dense", PyDenseView, {
        /// Shape of one record.
        #[getter]
        fn item_shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
            PyTuple::new(py, self.store.item_shape())
        }
    }
);
store_class!(
    /// An opened Ragged container (not indexable: `bind` it).
    PyRaggedStore(RaggedStore), "RaggedStore", "ragged", PyRaggedView, {
        /// Rank of every record.
        #[getter]
        fn ndim(&self) -> u32 {
            self.store.ndim()
        }
    }
);
