//! `DLTensor` (a DLPack-only view of a region of an allocation) and `RaggedBatch`, the
//! conversion of gathered batches to them, and [`import`], which takes any tensor argument
//! (loaderx's own, or a foreign one through `crate::dlpack`).

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple, PyType};
use zrecord::{Allocation, Allocator, DType, OUTPUT_ALIGN, SystemAllocator};

use crate::dlpack::{DLPackVersion, Imported, export, import_foreign};
use crate::dtypes::{dtype_obj, parse_dtype};
use crate::errors::{
    DTypeError, InternalError, IntoPyResult, InvalidInputError, InvalidTypeError,
    UnsupportedDeviceError, guard,
};
use crate::gpu::{GpuRef, Placement, dl_device, place};
use crate::pickle::refuse;
use crate::raw::RawBytes;

/// A tensor living in a loaderx allocation (CPU, pinned host, or CUDA device memory), consumed
/// through DLPack only. Its DLPack exports
/// are writable and alias the allocation (as do `bitcast` and a ragged batch's fields), so the
/// binding reads the region only through raw copies (`crate::raw`).
#[pyclass(name = "DLTensor", module = "loaderx.zrecord", frozen)]
pub(crate) struct PyDLTensor {
    pub alloc: Arc<Allocation>,
    pub offset: usize,
    pub shape: Vec<u64>,
    pub dtype: DType,
    /// The upload state of a device tensor (none for host tensors).
    pub gpu: GpuRef,
}

impl PyDLTensor {
    pub(crate) fn new(
        alloc: Arc<Allocation>,
        offset: usize,
        shape: Vec<u64>,
        dtype: DType,
    ) -> Self {
        PyDLTensor {
            alloc,
            offset,
            shape,
            dtype,
            gpu: GpuRef::default(),
        }
    }

    /// The same tensor, carrying a device tensor's upload state.
    pub(crate) fn with_gpu(mut self, gpu: &GpuRef) -> Self {
        self.gpu = gpu.clone();
        self
    }

    pub(crate) fn nbytes(&self) -> usize {
        self.shape.iter().product::<u64>() as usize * self.dtype.itemsize()
    }

    /// The tensor's region, read-only and raw: it may be written at any time through an export
    /// (see `crate::raw`).
    pub(crate) fn raw(&self) -> RawBytes<'_> {
        raw_region(&self.alloc, self.offset, self.nbytes())
    }
}

/// `len` bytes at `offset` into `alloc`, as a raw view; empty when that span is not inside a
/// host-accessible allocation (it always is for the spans this module builds).
fn raw_region(alloc: &Allocation, offset: usize, len: usize) -> RawBytes<'_> {
    let inside = offset
        .checked_add(len)
        .is_some_and(|end| end <= alloc.len());
    if len == 0 || !inside || !alloc.device().kind.host_accessible() {
        return RawBytes::EMPTY;
    }
    // SAFETY: `offset..offset + len` lies inside the allocation's host-readable region (checked
    // above), which lives as long as the borrow of `alloc`. The binding forms no Rust reference to
    // an allocation it has wrapped in a tensor (the exported-memory contract), so only raw copies
    // read it while Python code may write it through an export.
    unsafe { RawBytes::new(alloc.as_ptr().add(offset), len) }
}

/// Imports a tensor argument without copying: a loaderx `DLTensor` by its own region, anything
/// else through DLPack (or the read-only buffer fallback). `what` names the argument in errors.
pub(crate) fn import<'py>(obj: &Bound<'py, PyAny>, what: &str) -> PyResult<Imported<'py>> {
    if let Ok(t) = obj.cast::<PyDLTensor>() {
        let t = t.get();
        if let Some(e) = crate::gpu::device_input_error(what, "DLTensor", dl_device(&t.alloc)) {
            return Err(e);
        }
        return Imported::native(t.alloc.clone(), t.offset, t.shape.clone(), t.dtype).ok_or_else(
            || {
                InternalError::new_err(format!(
                    "{what}: DLTensor region lies outside its allocation"
                ))
            },
        );
    }
    if let Ok(f) = obj.getattr(pyo3::intern!(obj.py(), "__dlpack_device__"))
        && let Ok(v) = f.call0()
        && let Ok(dev) = v.extract::<(i32, i32)>()
        && let Some(e) = crate::gpu::device_input_error(what, &crate::errors::type_name(obj), dev)
    {
        return Err(e);
    }
    import_foreign(obj, what)
}

/// A gathered Dense batch as a `DLTensor` at `placement` (a device placement uploads it).
pub(crate) fn dense_to_py(
    py: Python<'_>,
    b: zrecord::DenseBatch,
    placement: &Placement,
) -> PyResult<Py<PyAny>> {
    let (alloc, shape, dtype) = b.into_parts();
    let (alloc, gpu) = py.detach(|| guard(|| place(placement, alloc))).py_err(py)?;
    Ok(Py::new(py, PyDLTensor::new(alloc, 0, shape, dtype).with_gpu(&gpu))?.into_any())
}

/// A gathered Ragged batch as a `RaggedBatch` at `placement` (a device placement uploads the one
/// `values | cu_seqlens | shapes` allocation whole).
pub(crate) fn ragged_to_py(
    py: Python<'_>,
    b: zrecord::RaggedBatch,
    placement: &Placement,
) -> PyResult<Py<PyAny>> {
    let s = py
        .detach(|| guard(|| StoredRagged::from_batch(b, placement)))
        .py_err(py)?;
    Ok(Py::new(
        py,
        PyRaggedBatch {
            repr: Ragged::Stored(s),
        },
    )?
    .into_any())
}

/// The pickling refusal of a batch class (`DLTensor`, `RaggedBatch`): what to send instead, or
/// `copy`.
fn refuse_batch(class: &str, copy: &str) -> PyErr {
    refuse(
        class,
        &format!(
            "it is a view of memory in this process; send the indices (and the view) and gather \
             them there, or {copy}"
        ),
    )
}

fn shape_tuple<'py>(py: Python<'py>, shape: &[u64]) -> PyResult<Bound<'py, PyTuple>> {
    PyTuple::new(py, shape)
}

#[pymethods]
impl PyDLTensor {
    /// Refuses: a tensor is a view of memory in this process.
    fn __reduce__(&self) -> PyResult<()> {
        Err(refuse_batch(
            "DLTensor",
            "copy it first (numpy.from_dlpack(t).copy())",
        ))
    }

    /// DLPack export. `max_version >= (1, 0)` gives a versioned capsule (writable: the flags word is
    /// 0), otherwise the legacy capsule. The device is the allocation's (CPU, pinned host, CUDA); `copy=True` copies into a
    /// fresh allocation.
    #[pyo3(signature = (*, stream=None, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__<'py>(
        &self,
        py: Python<'py>,
        stream: Option<Bound<'py, PyAny>>,
        max_version: Option<(u32, u32)>,
        dl_device: Option<(i32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let stream = match &stream {
            None => None,
            Some(s) if s.is_none() => None,
            Some(s) => Some(s.extract::<i64>().map_err(|_| {
                InvalidTypeError::new_err(format!("stream must be None or an int, got {s}"))
            })?),
        };
        let here = crate::gpu::dl_device(&self.alloc);
        if let Some(dev) = dl_device
            && dev != here
        {
            return Err(UnsupportedDeviceError::new_err(format!(
                "cannot export to DLPack device {dev:?}: this tensor lives on {here:?} and loaderx does not transfer between devices"
            )));
        }
        self.gpu.hand_off(&self.alloc, stream)?;
        let version = match max_version {
            Some((major, minor)) if major >= 1 => Some(DLPackVersion {
                major: 1,
                minor: if major > 1 || minor >= 1 { 1 } else { 0 },
            }),
            _ => None,
        };
        if copy == Some(true) {
            if !self.alloc.device().kind.host_accessible() {
                return Err(UnsupportedDeviceError::new_err(format!(
                    "copy=True of a tensor on DLPack device {here:?} is not supported; copy it on the consumer side"
                )));
            }
            let n = self.nbytes();
            let sys = SystemAllocator::new();
            let mut a = sys.acquire(n, OUTPUT_ALIGN).py_err(py)?;
            let src = self.raw();
            if let Some(dst) = a.host_slice_mut()
                && dst.len() == src.len()
            {
                // `a` is fresh and not exported yet: a `&mut [u8]` over it is exclusive.
                src.copy_into(dst);
            }
            return export(py, &Arc::new(a), 0, &self.shape, self.dtype, version, None);
        }
        export(
            py,
            &self.alloc,
            self.offset,
            &self.shape,
            self.dtype,
            version,
            self.gpu.keep(),
        )
    }

    /// `(1, 0)` for CPU and pinned host memory, `(2, id)` for a CUDA device.
    fn __dlpack_device__(&self) -> (i32, i32) {
        dl_device(&self.alloc)
    }

    /// Shape (tuple of ints).
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        shape_tuple(py, &self.shape)
    }

    /// Element dtype (a NumPy dtype from `loaderx.dtypes`).
    #[getter]
    fn dtype<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        dtype_obj(py, self.dtype)
    }

    /// Number of dimensions.
    #[getter]
    fn ndim(&self) -> usize {
        self.shape.len()
    }

    /// Size in bytes.
    #[getter(nbytes)]
    fn py_nbytes(&self) -> usize {
        self.nbytes()
    }

    /// The DLPack device (as `__dlpack_device__`).
    #[getter]
    fn device(&self) -> (i32, i32) {
        dl_device(&self.alloc)
    }

    fn __len__(&self) -> PyResult<usize> {
        self.shape
            .first()
            .map(|&d| d as usize)
            .ok_or_else(|| InvalidTypeError::new_err("len() of a 0-d DLTensor"))
    }

    /// The same bytes reinterpreted as another catalog dtype of equal itemsize (no copy), e.g.
    /// `t.bitcast(dtypes.uint16)` for a bfloat16 tensor that NumPy should import.
    fn bitcast(&self, dtype: &Bound<'_, PyAny>) -> PyResult<PyDLTensor> {
        let d = parse_dtype(dtype)?;
        if d.itemsize() != self.dtype.itemsize() {
            return Err(DTypeError::new_err(format!(
                "bitcast needs equal itemsize: {} has {}, {} has {}",
                self.dtype,
                self.dtype.itemsize(),
                d,
                d.itemsize()
            )));
        }
        Ok(
            PyDLTensor::new(self.alloc.clone(), self.offset, self.shape.clone(), d)
                .with_gpu(&self.gpu),
        )
    }

    fn __repr__(&self) -> String {
        let d = self.alloc.device();
        let device = match d.kind {
            zrecord::DeviceType::CudaHost => format!("cuda_host:{}", d.id),
            zrecord::DeviceType::Cuda => format!("cuda:{}", d.id),
            _ => "cpu".to_string(),
        };
        format!(
            "DLTensor(shape={:?}, dtype={}, device={device})",
            self.shape, self.dtype
        )
    }
}

/// A gathered Ragged batch: `values | cu_seqlens | shapes` in one allocation.
pub(crate) struct StoredRagged {
    pub alloc: Arc<Allocation>,
    pub n: usize,
    pub ndim: usize,
    pub dtype: DType,
    pub values_len: usize,
    pub cu_off: usize,
    pub shapes_off: usize,
    /// A device batch's upload state.
    pub gpu: GpuRef,
    /// A device batch's `cu_seqlens` and `shapes`, copied from staging before the upload (the CPU
    /// cannot read the device copy).
    pub host_meta: Option<(Vec<i32>, Vec<u64>)>,
}

impl StoredRagged {
    /// One field of the batch as a `DLTensor` on its allocation: `shape` elements of `dtype` at
    /// byte `off`.
    fn field(
        &self,
        py: Python<'_>,
        off: usize,
        shape: Vec<u64>,
        dtype: DType,
    ) -> PyResult<Py<PyAny>> {
        let t = PyDLTensor::new(self.alloc.clone(), off, shape, dtype).with_gpu(&self.gpu);
        Ok(Py::new(py, t)?.into_any())
    }

    pub(crate) fn from_batch(
        b: zrecord::RaggedBatch,
        placement: &Placement,
    ) -> zrecord::Result<Self> {
        let (_, cu_off, shapes_off) = b.field_offsets();
        let (n, ndim, dtype, values_len) = (b.len(), b.ndim(), b.dtype(), b.values_bytes());
        let staging = b.into_allocation();
        let host_meta = match placement {
            Placement::Host => None,
            #[allow(unreachable_patterns)]
            _ => Some((
                raw_region(&staging, cu_off, 4 * (n + 1)).to_i32s(),
                raw_region(&staging, shapes_off, 8 * n * ndim).to_u64s(),
            )),
        };
        let (alloc, gpu) = place(placement, staging)?;
        Ok(StoredRagged {
            alloc,
            n,
            ndim,
            dtype,
            values_len,
            cu_off,
            shapes_off,
            gpu,
            host_meta,
        })
    }

    /// The packed values, raw (see `crate::raw`).
    pub(crate) fn values(&self) -> RawBytes<'_> {
        raw_region(&self.alloc, 0, self.values_len)
    }

    /// A copy of `cu_seqlens` (`n + 1` entries).
    pub(crate) fn cu(&self) -> Vec<i32> {
        if let Some((cu, _)) = &self.host_meta {
            return cu.clone();
        }
        raw_region(&self.alloc, self.cu_off, 4 * (self.n + 1)).to_i32s()
    }

    /// Record `k`'s byte offset into the values and its shape, from copies `cu` / `shapes` of the
    /// fields; `None` unless they describe a span inside the values whose size matches the shape.
    fn record_span(&self, cu: &[i32], shapes: &[u64], k: usize) -> Option<(usize, Vec<u64>)> {
        let isz = self.dtype.itemsize();
        let (a, b) = (*cu.get(k)?, *cu.get(k + 1)?);
        let (a, b) = (usize::try_from(a).ok()?, usize::try_from(b).ok()?);
        let shape = shapes.get(k * self.ndim..(k + 1) * self.ndim)?.to_vec();
        let numel = shape.iter().try_fold(1u64, |x, &d| x.checked_mul(d))?;
        let inside = b.checked_mul(isz).is_some_and(|end| end <= self.values_len);
        (a <= b && inside && numel == (b - a) as u64).then_some((a * isz, shape))
    }

    /// A copy of the flattened per-record shapes (`n * ndim` entries).
    pub(crate) fn shapes(&self) -> Vec<u64> {
        if let Some((_, shapes)) = &self.host_meta {
            return shapes.clone();
        }
        raw_region(&self.alloc, self.shapes_off, 8 * self.n * self.ndim).to_u64s()
    }
}

pub(crate) enum Ragged {
    Stored(StoredRagged),
    User {
        values: Py<PyAny>,
        cu_seqlens: Py<PyAny>,
        shapes: Py<PyAny>,
    },
}

/// A packed ragged batch: `values` (1-D, store dtype), `cu_seqlens` (int32, n + 1) and `shapes`
/// (uint64, (n, ndim)).
#[pyclass(name = "RaggedBatch", module = "loaderx.zrecord", frozen)]
pub(crate) struct PyRaggedBatch {
    pub repr: Ragged,
}

fn ragged_helper<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
    py.import("loaderx._ragged")?.getattr(name)
}

#[pymethods]
impl PyRaggedBatch {
    /// Refuses: a batch is a view of memory in this process.
    fn __reduce__(&self) -> PyResult<()> {
        Err(refuse_batch("RaggedBatch", "copy its fields first"))
    }

    /// Wraps three packed fields (any DLPack CPU tensors); they are validated by `append`.
    #[new]
    fn py_new(values: Py<PyAny>, cu_seqlens: Py<PyAny>, shapes: Py<PyAny>) -> Self {
        PyRaggedBatch {
            repr: Ragged::User {
                values,
                cu_seqlens,
                shapes,
            },
        }
    }

    /// Packs a finite iterable of NumPy arrays (same dtype and ndim >= 1, each non-empty).
    #[classmethod]
    #[pyo3(signature = (records, dtype=None, ndim=None))]
    fn from_records(
        _cls: &Bound<'_, PyType>,
        records: &Bound<'_, PyAny>,
        dtype: Option<&Bound<'_, PyAny>>,
        ndim: Option<usize>,
    ) -> PyResult<Self> {
        let py = records.py();
        let (values, cu_seqlens, shapes): (Py<PyAny>, Py<PyAny>, Py<PyAny>) =
            ragged_helper(py, "from_records")?
                .call1((records, dtype, ndim))?
                .extract()?;
        Ok(PyRaggedBatch {
            repr: Ragged::User {
                values,
                cu_seqlens,
                shapes,
            },
        })
    }

    /// Packed values, 1-D in the store dtype.
    #[getter]
    fn values(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        match &self.repr {
            Ragged::Stored(s) => {
                let n = (s.values_len / s.dtype.itemsize()) as u64;
                s.field(py, 0, vec![n], s.dtype)
            }
            Ragged::User { values, .. } => Ok(values.clone_ref(py)),
        }
    }

    /// Record offsets, int32, `len(batch) + 1` entries starting at 0.
    #[getter]
    fn cu_seqlens(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        match &self.repr {
            Ragged::Stored(s) => s.field(py, s.cu_off, vec![s.n as u64 + 1], DType::Int32),
            Ragged::User { cu_seqlens, .. } => Ok(cu_seqlens.clone_ref(py)),
        }
    }

    /// Per-record shapes, uint64 `(len(batch), ndim)`.
    #[getter]
    fn shapes(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        match &self.repr {
            Ragged::Stored(s) => {
                let shape = vec![s.n as u64, s.ndim as u64];
                s.field(py, s.shapes_off, shape, DType::UInt64)
            }
            Ragged::User { shapes, .. } => Ok(shapes.clone_ref(py)),
        }
    }

    /// Element dtype.
    #[getter]
    fn dtype<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        match &self.repr {
            Ragged::Stored(s) => dtype_obj(py, s.dtype),
            Ragged::User { values, .. } => values.bind(py).getattr("dtype"),
        }
    }

    /// Rank of every record.
    #[getter]
    fn ndim(&self, py: Python<'_>) -> PyResult<usize> {
        match &self.repr {
            Ragged::Stored(s) => Ok(s.ndim),
            Ragged::User { shapes, .. } => shapes.bind(py).getattr("shape")?.get_item(1)?.extract(),
        }
    }

    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        match &self.repr {
            Ragged::Stored(s) => Ok(s.n),
            Ragged::User { cu_seqlens, .. } => Ok(cu_seqlens.bind(py).len()?.saturating_sub(1)),
        }
    }

    /// One shape-restored tensor per record (views into the batch, no copy): `DLTensor`s for a
    /// gathered batch, NumPy arrays for a user-built one.
    fn to_tensors<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        match &self.repr {
            Ragged::Stored(s) => {
                let cu = s.cu();
                let shapes = s.shapes();
                let out = PyList::empty(py);
                for k in 0..s.n {
                    // The fields are exported writable: check them again before slicing by them.
                    let (offset, shape) = s.record_span(&cu, &shapes, k).ok_or_else(|| {
                        InvalidInputError::new_err(format!(
                            "RaggedBatch.to_tensors: record {k}: cu_seqlens and shapes no longer describe the values (were they written through an export?)"
                        ))
                    })?;
                    out.append(
                        PyDLTensor::new(s.alloc.clone(), offset, shape, s.dtype).with_gpu(&s.gpu),
                    )?;
                }
                Ok(out)
            }
            Ragged::User {
                values,
                cu_seqlens,
                shapes,
            } => Ok(ragged_helper(py, "to_tensors")?
                .call1((values, cu_seqlens, shapes))?
                .cast_into::<PyList>()?),
        }
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let n = self.__len__(py)?;
        let dt = self.dtype(py)?.str()?.to_string();
        Ok(format!(
            "RaggedBatch(records={n}, ndim={}, dtype={dt})",
            self.ndim(py)?
        ))
    }
}
