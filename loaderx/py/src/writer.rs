//! `DenseWriter` / `RaggedWriter`: creating a container, appending imported tensors with the GIL
//! released, and the publish / abort life cycle.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use pyo3::prelude::*;
use pyo3::types::PyTuple;
use zrecord::{Codec, DType, DenseWriter, RaggedWriter, WriterOptions};

use crate::dlpack::Imported;
use crate::dtypes::{dtype_obj, parse_dtype};
use crate::errors::{
    ClosedError, CoreError, DTypeError, InternalError, IntoPyResult, InvalidInputError,
    InvalidTypeError, guard, lock, take_detached, type_name,
};
use crate::index::one_int;
use crate::pickle::refuse;
use crate::ragged_append::{Route, Target, check_fields, route};
use crate::raw::RawBytes;
use crate::tensor::{PyRaggedBatch, Ragged, import};

fn writer_options(
    codec: &str,
    data_shards: u32,
    dict_bytes: Option<&Bound<'_, PyAny>>,
    storage_options: Option<&Bound<'_, pyo3::types::PyDict>>,
) -> PyResult<(Codec, WriterOptions)> {
    let c = Codec::from_name(codec).ok_or_else(|| {
        InvalidInputError::new_err(format!(
            "unknown codec {codec:?}; expected \"raw\", \"zstd\" or \"zstd_dict\""
        ))
    })?;
    let dict = match dict_bytes {
        None => None,
        Some(d) if d.is_none() => None,
        Some(d) => Some(d.extract::<Vec<u8>>().map_err(|_| {
            InvalidTypeError::new_err("dict_bytes must be bytes (e.g. the result of train_dict)")
        })?),
    };
    if c != Codec::ZstdDict && dict.is_some() {
        return Err(InvalidInputError::new_err(format!(
            "dict_bytes is only used with codec \"zstd_dict\", not {codec:?}"
        )));
    }
    Ok((
        c,
        WriterOptions {
            data_shards,
            dict,
            remote: crate::remote::remote_options(storage_options)?,
            ..WriterOptions::default()
        },
    ))
}

fn shape_arg(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Vec<u64>> {
    let mut v = Vec::new();
    for item in obj.try_iter()? {
        let i: i128 = one_int(&item?)?;
        if i < 0 || i > u64::MAX as i128 {
            return Err(InvalidInputError::new_err(format!(
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
    write_detached(py, slot, kind, path, |w| f(w).map_err(CoreError::Z))
}

/// `append_detached` for work that fails in other ways too (a device copy): the writer stays
/// locked for the whole of `f`, so an append written in several runs is not interleaved with
/// another thread's.
fn write_detached<W: Send>(
    py: Python<'_>,
    slot: &Mutex<Option<W>>,
    kind: &str,
    path: &Path,
    f: impl FnOnce(&mut W) -> Result<(), CoreError> + Send,
) -> PyResult<()> {
    py.detach(|| {
        guard(|| match lock(slot, WRITER_POISONED)?.as_mut() {
            Some(w) => f(w),
            None => Err(CoreError::Py(
                ClosedError::new_err,
                closed_writer_msg(kind, path),
            )),
        })
    })
    .py_err(py)
}

/// A zrecord writer kind, created from its kind-specific argument (`item_shape` or `ndim`).
trait Create: Sized + Send {
    type Shape: Sync;
    fn create(
        path: &Path,
        dtype: DType,
        shape: &Self::Shape,
        codec: Codec,
        opts: WriterOptions,
    ) -> zrecord::Result<Self>;
}

impl Create for DenseWriter {
    type Shape = Vec<u64>;
    fn create(
        p: &Path,
        d: DType,
        s: &Vec<u64>,
        c: Codec,
        o: WriterOptions,
    ) -> zrecord::Result<Self> {
        DenseWriter::create(p, d, s, c, o)
    }
}

impl Create for RaggedWriter {
    type Shape = u32;
    fn create(p: &Path, d: DType, s: &u32, c: Codec, o: WriterOptions) -> zrecord::Result<Self> {
        RaggedWriter::create(p, d, *s, c, o)
    }
}

/// The `#[pyclass]` of a writer kind and its `#[pymethods]`: the constructor, whose kind-specific
/// argument `$shape` (a `$arg`, kept as `$writer`'s `Create::Shape` by `$keep`) is the third,
/// then `$extra` (`append` and the kind's getter), then `__repr__`, the length, accessors and
/// publish/abort life cycle both kinds share.
macro_rules! writer_class {
    (
        $(#[$doc:meta])* $py_writer:ident($writer:ident), $pyname:tt,
        $shape:ident: $arg:ty => $keep:expr, { $($extra:tt)* }
    ) => {
        $(#[$doc])*
        #[pyclass(name = $pyname, module = "loaderx.zrecord", frozen)]
        pub(crate) struct $py_writer {
            inner: Mutex<Option<$writer>>,
            path: PathBuf,
            dtype: DType,
            $shape: <$writer as Create>::Shape,
        }

        #[pymethods]
        impl $py_writer {
            #[new]
            #[allow(clippy::too_many_arguments)]
            #[pyo3(signature = (path, dtype, $shape, codec, data_shards=zrecord::DEFAULT_DATA_SHARDS, dict_bytes=None, *, storage_options=None))]
            fn py_new(
                py: Python<'_>,
                path: PathBuf,
                dtype: &Bound<'_, PyAny>,
                $shape: $arg,
                codec: &str,
                data_shards: u32,
                dict_bytes: Option<&Bound<'_, PyAny>>,
                storage_options: Option<&Bound<'_, pyo3::types::PyDict>>,
            ) -> PyResult<Self> {
                let dtype = parse_dtype(dtype)?;
                let kept: <$writer as Create>::Shape = $keep;
                let (c, opts) = writer_options(codec, data_shards, dict_bytes, storage_options)?;
                let create = || <$writer as Create>::create(&path, dtype, &kept, c, opts);
                let w = py.detach(|| guard(create)).py_err(py)?;
                Ok($py_writer { inner: Mutex::new(Some(w)), path, dtype, $shape: kept })
            }

            $($extra)*

            /// Refuses: a writer owns an open, locked temp directory in this process.
            fn __reduce__(&self) -> PyResult<()> {
                Err(refuse(
                    $pyname,
                    "it owns an open, locked temp directory in this process; close() it and \
                     pickle the store it published (DenseStore / RaggedStore) instead",
                ))
            }

            fn __repr__(&self) -> String {
                format!(
                    "{}({:?}, dtype={}, {}={:?})",
                    $pyname,
                    self.path.display().to_string(),
                    self.dtype,
                    stringify!($shape),
                    self.$shape
                )
            }

            /// Records appended so far.
            fn __len__(&self) -> PyResult<usize> {
                let g = self
                    .inner
                    .lock()
                    .map_err(|_| InternalError::new_err("writer lock poisoned"))?;
                match &*g {
                    Some(w) => Ok(w.len() as usize),
                    None => Err(ClosedError::new_err(closed_writer_msg($pyname, &self.path),
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

impl PyDenseWriter {
    /// The dtype and `(n, *item_shape)` checks of both append paths (host and device).
    fn check_input(&self, dtype: DType, shape: &[u64]) -> PyResult<()> {
        if dtype != self.dtype {
            return Err(DTypeError::new_err(format!(
                "DenseWriter.append({}): expected dtype {}, found {}",
                self.path.display(),
                self.dtype,
                dtype
            )));
        }
        if shape.len() != self.item_shape.len() + 1 || shape[1..] != self.item_shape[..] {
            let mut want = vec!["n".to_string()];
            want.extend(self.item_shape.iter().map(|d| d.to_string()));
            return Err(InvalidInputError::new_err(format!(
                "DenseWriter.append({}): expected shape ({}), found {:?}",
                self.path.display(),
                want.join(", "),
                shape
            )));
        }
        Ok(())
    }
}

#[cfg(feature = "cuda")]
impl PyDenseWriter {
    /// `append` of a kDLCUDA tensor: checked like a host input, then copied to pooled pinned
    /// staging in chunks of whole records (at most `crate::gpu::APPEND_CHUNK_BYTES`, one record if
    /// larger) and appended chunk by chunk with the writer locked throughout, so no host copy of
    /// the whole input is made. A failure after the first chunk leaves the chunks before it
    /// appended.
    fn append_device(
        &self,
        py: Python<'_>,
        batch: &Bound<'_, PyAny>,
        dev: (i32, i32),
    ) -> PyResult<()> {
        let input = crate::gpu::DeviceInput::open(batch, "DenseWriter.append", dev)?;
        let imp = input.imported();
        self.check_input(imp.dtype(), imp.shape())?;
        let record =
            (self.item_shape.iter().product::<u64>() as usize * self.dtype.itemsize()).max(1);
        let per = (crate::gpu::APPEND_CHUNK_BYTES / record).max(1) * record;
        let span = input.span()?;
        write_detached(py, &self.inner, "DenseWriter", &self.path, |w| {
            let total = span.len();
            if total == 0 {
                return w.append(&[]).map_err(CoreError::Z);
            }
            let mut off = 0;
            while off < total {
                let n = per.min(total - off);
                let st = span.copy(off, n)?;
                w.append(st.host_slice().unwrap_or(&[]))?;
                off += n;
            }
            Ok(())
        })
    }
}

writer_class!(
    /// Creates a new Dense container; `close()` (or leaving `with` normally) publishes it.
    PyDenseWriter(DenseWriter), "DenseWriter",
    item_shape: &Bound<'_, PyAny> => shape_arg(item_shape, "item_shape")?, {
    /// Appends a C-contiguous CPU tensor of shape `(n, *item_shape)` in the store dtype. The
    /// input is copied into a private staging buffer (raw-pointer copy, GIL released) before it is
    /// encoded, so a concurrent write to it can never reach the encoder half-way.
    fn append(&self, py: Python<'_>, batch: &Bound<'_, PyAny>) -> PyResult<()> {
        #[cfg(feature = "cuda")]
        if let Some(dev) = crate::gpu::cuda_input_device(batch) {
            return self.append_device(py, batch, dev);
        }
        let imp = import(batch, "DenseWriter.append")?;
        self.check_input(imp.dtype(), imp.shape())?;
        let shape = imp.shape();
        let Some(src) = imp.raw() else {
            return Err(InvalidInputError::new_err(format!(
                "DenseWriter.append({}): input of shape {:?} is not C-contiguous (strides {:?} elements); pass np.ascontiguousarray(x)",
                self.path.display(),
                shape,
                imp.strides()
            )));
        };
        append_detached(py, &self.inner, "DenseWriter", &self.path, |w| {
            w.append(&src.to_vec())
        })
    }

    #[getter]
    fn item_shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, &self.item_shape)
    }
});

/// The host memory of an imported field that passed `check_fields` (C-contiguous, on the CPU).
fn host_raw<'a>(imp: &'a Imported<'_>, path: &str, what: &str) -> PyResult<RawBytes<'a>> {
    imp.raw().ok_or_else(|| {
        InternalError::new_err(format!(
            "RaggedWriter.append({path}): {what} passed the layout checks but is not readable on the host"
        ))
    })
}

impl PyRaggedWriter {
    /// `append` of a batch whose three fields live on CUDA device `dev` (a loaderx device batch
    /// or a foreign producer's tensors); refused with what is missing in a build without CUDA.
    fn append_device_fields(
        &self,
        py: Python<'_>,
        target: &Target<'_>,
        dev: (i32, i32),
        fields: [&Bound<'_, PyAny>; 3],
    ) -> PyResult<()> {
        #[cfg(feature = "cuda")]
        {
            let batch = crate::ragged_append::DeviceBatch::open(py, target, dev, fields)?;
            let job = batch.job()?;
            write_detached(py, &self.inner, "RaggedWriter", &self.path, |w| {
                job.append_to(w)
            })
        }
        #[cfg(not(feature = "cuda"))]
        {
            let _ = (py, fields);
            Err(crate::gpu::device_input_error(
                &format!("RaggedWriter.append({})", target.path),
                "RaggedBatch",
                dev,
            )
            .unwrap_or_else(|| InternalError::new_err("device input without a CUDA device")))
        }
    }
}

writer_class!(
    /// Creates a new Ragged container; `close()` (or leaving `with` normally) publishes it.
    PyRaggedWriter(RaggedWriter), "RaggedWriter", ndim: u32 => ndim, {
    /// Appends a packed `RaggedBatch(values, cu_seqlens, shapes)`: host fields (CPU or pinned),
    /// or all three on one CUDA device (copied to the host in runs of whole records, see
    /// `crate::ragged_append::DeviceBatch`).
    fn append(&self, py: Python<'_>, batch: &Bound<'_, PyAny>) -> PyResult<()> {
        let Ok(rb) = batch.cast::<PyRaggedBatch>() else {
            let t = type_name(batch);
            return Err(InvalidTypeError::new_err(format!(
                "RaggedWriter.append expects a RaggedBatch(values, cu_seqlens, shapes), got {t}; use RaggedBatch.from_records(records) for a list of arrays"
            )));
        };
        let rb = rb.get();
        let path = self.path.display().to_string();
        let target = Target {
            path: &path,
            dtype: self.dtype,
            ndim: self.ndim,
        };
        // Every host field is read through raw-pointer copies (`crate::raw`): `cu_seqlens` and
        // `shapes` here with the GIL held, `values` into a staging buffer with the GIL released.
        let (v, c, s);
        let (values, cu, shapes): (RawBytes<'_>, Vec<i32>, Vec<u64>) = match &rb.repr {
            Ragged::Stored(s) => {
                if s.dtype != self.dtype {
                    return Err(DTypeError::new_err(format!(
                        "RaggedWriter.append({path}): expected dtype {}, found {}",
                        self.dtype, s.dtype
                    )));
                }
                if s.ndim != self.ndim as usize {
                    return Err(InvalidInputError::new_err(format!(
                        "RaggedWriter.append({path}): expected ndim {}, found {}",
                        self.ndim, s.ndim
                    )));
                }
                let dev = crate::gpu::dl_device(&s.alloc);
                if dev.0 == 2 {
                    // A device batch of a loaderx view: its fields, exported like any producer's.
                    let f = ["values", "cu_seqlens", "shapes"].map(|n| batch.getattr(n));
                    let [fv, fc, fs] = f;
                    return self.append_device_fields(py, &target, dev, [&fv?, &fc?, &fs?]);
                }
                (s.values(), s.cu(), s.shapes())
            }
            Ragged::User {
                values,
                cu_seqlens,
                shapes,
            } => {
                let fields = [values.bind(py), cu_seqlens.bind(py), shapes.bind(py)];
                if let Route::Device(dev) = route(&path, fields)? {
                    return self.append_device_fields(py, &target, dev, fields);
                }
                v = import(fields[0], "RaggedBatch.values")?;
                c = import(fields[1], "RaggedBatch.cu_seqlens")?;
                s = import(fields[2], "RaggedBatch.shapes")?;
                check_fields(&target, &v, &c, &s)?;
                let (v_raw, c_raw, s_raw) = (
                    host_raw(&v, &path, "values")?,
                    host_raw(&c, &path, "cu_seqlens")?,
                    host_raw(&s, &path, "shapes")?,
                );
                (v_raw, c_raw.to_i32s(), s_raw.to_u64s())
            }
        };
        append_detached(py, &self.inner, "RaggedWriter", &self.path, |w| {
            w.append(&values.to_vec(), &cu, &shapes)
        })
    }

    #[getter]
    fn ndim(&self) -> u32 {
        self.ndim
    }
});
