//! Import of foreign CPU tensors: a DLPack capsule (versioned or legacy) or, as a fallback, a
//! read-only buffer, described by an [`Imported`] that keeps the producer alive.

use std::sync::Arc;

use pyo3::exceptions::PyTypeError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyType};
use zrecord::{Allocation, DType, dlpack_code};

use super::ffi::{
    DLDataType, DLManagedTensor, DLManagedTensorVersioned, DLTensor, KDL_CPU, LEGACY, VERSIONED,
};
use crate::dtypes::ml_storage_dtype;
use crate::errors::{
    DTypeError, InvalidInputError, InvalidTypeError, UnsupportedDeviceError, type_name,
};
use crate::raw::RawBytes;

/// A foreign CPU tensor imported through DLPack (or the read-only buffer fallback). Keeps the
/// capsule / exporter alive while its memory is in use.
pub(crate) struct Imported<'py> {
    _keep: Vec<Bound<'py, PyAny>>,
    _native: Option<Arc<Allocation>>,
    ptr: *const u8,
    // Private, so that `raw` and `int_elements` can rely on them describing the producer's memory.
    shape: Vec<u64>,
    strides: Option<Vec<i64>>,
    dtype: DType,
    /// The DLPack device; anything but the CPU is never read through `raw`.
    device: (i32, i32),
}

impl Imported<'_> {
    /// The address of a C-contiguous device tensor (`None` for a host tensor or another layout):
    /// a `CUdeviceptr` the CPU must not dereference.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) fn device_ptr(&self) -> Option<usize> {
        (self.device.0 != KDL_CPU && self.is_c_contiguous()).then_some(self.ptr as usize)
    }

    /// Shape in elements.
    pub(crate) fn shape(&self) -> &[u64] {
        &self.shape
    }

    /// Strides in elements (`None` = C-contiguous).
    pub(crate) fn strides(&self) -> Option<&[i64]> {
        self.strides.as_deref()
    }

    /// Element type.
    pub(crate) fn dtype(&self) -> DType {
        self.dtype
    }

    /// Element count.
    pub(crate) fn numel(&self) -> u64 {
        self.shape.iter().product()
    }

    /// Whether the layout is C-contiguous (dims of extent 1 may carry any stride).
    pub(crate) fn is_c_contiguous(&self) -> bool {
        let Some(strides) = &self.strides else {
            return true;
        };
        if self.numel() == 0 {
            return true;
        }
        let mut expect: i64 = 1;
        for (&d, &s) in self.shape.iter().zip(strides).rev() {
            if d != 1 && s != expect {
                return false;
            }
            expect = expect.saturating_mul(d as i64);
        }
        true
    }

    /// The memory of a C-contiguous tensor, as a raw read-only view (`None` for any other
    /// layout). The producer may write it at any time; see `crate::raw`.
    pub(crate) fn raw(&self) -> Option<RawBytes<'_>> {
        if !self.is_c_contiguous() || self.device.0 != KDL_CPU {
            return None;
        }
        let n = self.numel() as usize * self.dtype.itemsize();
        if n == 0 {
            return Some(RawBytes::EMPTY);
        }
        // SAFETY: `import_foreign` / `native` checked that a non-empty tensor has a non-null,
        // aligned pointer; a C-contiguous producer tensor of `numel` elements spans exactly
        // `numel * itemsize` readable bytes from it, and the capsule / exporter in `_keep` (or the
        // native allocation) keeps them alive as long as `self`, which the returned view borrows.
        // The binding forms no reference into this memory (the exported-memory contract).
        Some(unsafe { RawBytes::new(self.ptr, n) })
    }

    /// Integer elements as `i128` (any strides), for index arrays.
    pub(crate) fn int_elements(&self) -> Option<Vec<i128>> {
        let (code, bits, _) = self.dtype.dlpack();
        if code != dlpack_code::INT && code != dlpack_code::UINT {
            return None;
        }
        let n = self.numel() as usize;
        let isz = self.dtype.itemsize() as isize;
        let step = match (&self.strides, self.shape.len()) {
            (Some(s), 1) => s[0] as isize,
            _ => 1,
        };
        let mut out = Vec::with_capacity(n);
        for i in 0..n as isize {
            // SAFETY: element `i` of a tensor with `n` elements and stride `step` (1-D or
            // contiguous) lies inside the producer's buffer, which `_keep` keeps alive; reads are
            // unaligned-tolerant.
            let p = unsafe { self.ptr.offset(i * step * isz) };
            // SAFETY: as above; `read_unaligned` of a plain integer of the tensor's width.
            let v: i128 = unsafe {
                match (code == dlpack_code::INT, bits) {
                    (true, 8) => p.cast::<i8>().read_unaligned() as i128,
                    (true, 16) => p.cast::<i16>().read_unaligned() as i128,
                    (true, 32) => p.cast::<i32>().read_unaligned() as i128,
                    (true, 64) => p.cast::<i64>().read_unaligned() as i128,
                    (false, 8) => p.read_unaligned() as i128,
                    (false, 16) => p.cast::<u16>().read_unaligned() as i128,
                    (false, 32) => p.cast::<u32>().read_unaligned() as i128,
                    (false, 64) => p.cast::<u64>().read_unaligned() as i128,
                    _ => return None,
                }
            };
            out.push(v);
        }
        Some(out)
    }
}

fn np_ndarray(py: Python<'_>) -> PyResult<&Bound<'_, PyType>> {
    static T: PyOnceLock<Py<PyType>> = PyOnceLock::new();
    T.import(py, "numpy", "ndarray")
}

fn invalid(msg: String) -> PyErr {
    InvalidInputError::new_err(msg)
}

impl Imported<'_> {
    /// A loaderx tensor's own region: `shape` elements of `dtype`, C-contiguous, starting
    /// `offset` bytes into `alloc` (kept alive by the returned value). `None` when that span does
    /// not lie inside a host-accessible allocation.
    pub(crate) fn native(
        alloc: Arc<Allocation>,
        offset: usize,
        shape: Vec<u64>,
        dtype: DType,
    ) -> Option<Self> {
        let bytes = shape
            .iter()
            .try_fold(dtype.itemsize() as u64, |a, &d| a.checked_mul(d))?;
        let end = (offset as u64).checked_add(bytes)?;
        if end > alloc.len() as u64 || !alloc.device().kind.host_accessible() {
            return None;
        }
        Some(Imported {
            _keep: Vec::new(),
            ptr: alloc.as_ptr().wrapping_add(offset),
            _native: Some(alloc),
            shape,
            strides: None,
            dtype,
            device: (KDL_CPU, 0),
        })
    }
}

/// Imports `obj` (a foreign DLPack CPU tensor, or a read-only buffer) without copying. `what`
/// names the argument in error messages. (`crate::tensor::import` recognizes loaderx's own
/// tensors first.)
pub(crate) fn import_foreign<'py>(obj: &Bound<'py, PyAny>, what: &str) -> PyResult<Imported<'py>> {
    let py = obj.py();
    let tname = type_name(obj);
    if let Ok(f) = obj.getattr(pyo3::intern!(py, "__dlpack_device__")) {
        let dev: (i32, i32) = f.call0()?.extract().map_err(|_| {
            InvalidTypeError::new_err(format!(
                "{what}: __dlpack_device__ of {tname} did not return (device_type, device_id)"
            ))
        })?;
        if dev.0 != KDL_CPU {
            return Err(UnsupportedDeviceError::new_err(format!(
                "{what}: DLPack device {dev:?} of {tname} is not supported; only CPU (device_type 1) tensors are accepted, transfer it to the CPU first"
            )));
        }
    }
    if !obj.hasattr(pyo3::intern!(py, "__dlpack__"))? {
        return import_buffer(obj, what, &tname);
    }
    // NumPy cannot export ml_dtypes (bfloat16, float8) through DLPack: export the same bytes as the
    // unsigned integer of equal width and restore the dtype.
    let mut src = obj.clone();
    let mut storage_of: Option<DType> = None;
    if obj.is_instance(np_ndarray(py)?)? {
        let dt = obj.getattr(pyo3::intern!(py, "dtype"))?;
        if let Some((d, uint)) = ml_storage_dtype(py, &dt)? {
            src = obj.call_method1(pyo3::intern!(py, "view"), (uint,))?;
            storage_of = Some(d);
        }
    }
    let kwargs = PyDict::new(py);
    kwargs.set_item("max_version", (1u32, 0u32))?;
    let cap = match src.call_method(pyo3::intern!(py, "__dlpack__"), (), Some(&kwargs)) {
        Ok(c) => c,
        Err(e) if e.is_instance_of::<PyTypeError>(py) => src
            .call_method0(pyo3::intern!(py, "__dlpack__"))
            .map_err(|e2| export_failed(py, what, &tname, e2))?,
        Err(e) => return Err(export_failed(py, what, &tname, e)),
    };
    parse_capsule(cap, src, what, &tname, storage_of, None)
}

/// Imports a kDLCUDA producer's tensor for a device-to-host copy: asks for the capsule with
/// `stream` (the consumer's CUDA stream, so the producer orders its pending work before it) and
/// accepts only that device.
#[cfg(feature = "cuda")]
pub(crate) fn import_device<'py>(
    obj: &Bound<'py, PyAny>,
    what: &str,
    device: (i32, i32),
    stream: usize,
) -> PyResult<Imported<'py>> {
    let py = obj.py();
    let tname = type_name(obj);
    let kwargs = PyDict::new(py);
    kwargs.set_item("max_version", (1u32, 0u32))?;
    kwargs.set_item("stream", stream)?;
    let cap = match obj.call_method(pyo3::intern!(py, "__dlpack__"), (), Some(&kwargs)) {
        Ok(c) => c,
        Err(e) if e.is_instance_of::<PyTypeError>(py) => {
            let k = PyDict::new(py);
            k.set_item("stream", stream)?;
            obj.call_method(pyo3::intern!(py, "__dlpack__"), (), Some(&k))
                .map_err(|e2| export_failed(py, what, &tname, e2))?
        }
        Err(e) => return Err(export_failed(py, what, &tname, e)),
    };
    parse_capsule(cap, obj.clone(), what, &tname, None, Some(device))
}

fn export_failed(py: Python<'_>, what: &str, tname: &str, e: PyErr) -> PyErr {
    let err = InvalidTypeError::new_err(format!("{what}: {tname}.__dlpack__() failed: {e}"));
    err.set_cause(py, Some(e));
    err
}

fn parse_capsule<'py>(
    cap: Bound<'py, PyAny>,
    src: Bound<'py, PyAny>,
    what: &str,
    tname: &str,
    storage_of: Option<DType>,
    device: Option<(i32, i32)>,
) -> PyResult<Imported<'py>> {
    let py = cap.py();
    let p = cap.as_ptr();
    // SAFETY: `p` is a live object (held by `cap`); PyCapsule_IsValid accepts any object and sets no
    // exception.
    let (versioned, legacy) = unsafe {
        (
            ffi::PyCapsule_IsValid(p, VERSIONED.as_ptr()) == 1,
            ffi::PyCapsule_IsValid(p, LEGACY.as_ptr()) == 1,
        )
    };
    let dl: *const DLTensor = if versioned {
        // SAFETY: the capsule is valid with this name, so the pointer is the producer's
        // DLManagedTensorVersioned, alive while the capsule is.
        let m = unsafe {
            ffi::PyCapsule_GetPointer(p, VERSIONED.as_ptr()).cast::<DLManagedTensorVersioned>()
        };
        if m.is_null() {
            return Err(PyErr::fetch(py));
        }
        // SAFETY: `m` is non-null and valid (above).
        let major = unsafe { (*m).version.major };
        if major != 1 {
            return Err(InvalidTypeError::new_err(format!(
                "{what}: {tname} exported DLPack version {major}.x; only 1.x is understood"
            )));
        }
        // SAFETY: field of the valid struct above.
        unsafe { &raw const (*m).dl_tensor }
    } else if legacy {
        // SAFETY: as above, for the legacy struct.
        let m = unsafe { ffi::PyCapsule_GetPointer(p, LEGACY.as_ptr()).cast::<DLManagedTensor>() };
        if m.is_null() {
            return Err(PyErr::fetch(py));
        }
        // SAFETY: field of the valid struct above.
        unsafe { &raw const (*m).dl_tensor }
    } else {
        return Err(InvalidTypeError::new_err(format!(
            "{what}: {tname}.__dlpack__() did not return a DLPack capsule"
        )));
    };
    // SAFETY: `dl` points into the producer's managed tensor, alive while `cap` is.
    let dl = unsafe { &*dl };
    let got = (dl.device.device_type, dl.device.device_id);
    let want = device.unwrap_or((KDL_CPU, got.1));
    if got != want {
        return Err(UnsupportedDeviceError::new_err(format!(
            "{what}: DLPack device {got:?} of {tname} is not supported here; expected {want:?}",
        )));
    }
    if !(0..=64).contains(&dl.ndim) {
        return Err(invalid(format!(
            "{what}: DLPack ndim {} is out of range",
            dl.ndim
        )));
    }
    let ndim = dl.ndim as usize;
    if ndim > 0 && dl.shape.is_null() {
        return Err(invalid(format!(
            "{what}: DLPack tensor of ndim {ndim} has a NULL shape"
        )));
    }
    let shape_i: &[i64] = if ndim == 0 {
        &[]
    } else {
        // SAFETY: non-null (checked) and `ndim` entries by the DLPack contract.
        unsafe { std::slice::from_raw_parts(dl.shape, ndim) }
    };
    if shape_i.iter().any(|&d| d < 0) {
        return Err(invalid(format!(
            "{what}: negative extent in DLPack shape {shape_i:?}"
        )));
    }
    let shape: Vec<u64> = shape_i.iter().map(|&d| d as u64).collect();
    let strides = if ndim == 0 || dl.strides.is_null() {
        None
    } else {
        // SAFETY: non-null and `ndim` entries by the DLPack contract.
        Some(unsafe { std::slice::from_raw_parts(dl.strides, ndim) }.to_vec())
    };
    let DLDataType { code, bits, lanes } = dl.dtype;
    let dtype = match storage_of {
        Some(d) if code == dlpack_code::UINT && usize::from(bits) == d.itemsize() * 8 && lanes == 1 => Some(d),
        Some(_) => None,
        None => DType::from_dlpack(code, bits, lanes),
    }
    .ok_or_else(|| {
        DTypeError::new_err(format!("{what}: DLPack dtype (code {code}, bits {bits}, lanes {lanes}) of {tname} is not in the loaderx dtype catalog"),
        )
    })?;
    let numel = shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d));
    let Some(numel) = numel else {
        return Err(invalid(format!("{what}: shape {shape:?} overflows")));
    };
    let addr = (dl.data as usize).wrapping_add(dl.byte_offset as usize);
    if numel > 0 {
        if dl.data.is_null() {
            return Err(invalid(format!(
                "{what}: non-empty DLPack tensor with a NULL data pointer"
            )));
        }
        if !addr.is_multiple_of(dtype.itemsize()) {
            return Err(invalid(format!(
                "{what}: data address {addr:#x} is misaligned for {dtype} (itemsize {})",
                dtype.itemsize()
            )));
        }
    }
    Ok(Imported {
        _keep: vec![cap, src],
        _native: None,
        ptr: addr as *const u8,
        shape,
        strides,
        dtype,
        device: got,
    })
}

/// The non-DLPack fallback: a read-only, C-contiguous CPU buffer, viewed without copying.
fn import_buffer<'py>(obj: &Bound<'py, PyAny>, what: &str, tname: &str) -> PyResult<Imported<'py>> {
    let py = obj.py();
    let builtins = py.import("builtins")?;
    let mv = builtins.getattr("memoryview")?.call1((obj,)).map_err(|_| {
        InvalidTypeError::new_err(format!(
            "{what}: expected a DLPack CPU tensor (an object with __dlpack__, e.g. a NumPy array) or a read-only buffer, got {tname}"
        ))
    })?;
    if !mv.getattr("readonly")?.extract::<bool>()? {
        mv.call_method0("release")?;
        return Err(InvalidTypeError::new_err(format!(
            "{what}: {tname} is a writable buffer-only object; it is rejected because it could change during append. Pass a DLPack tensor (e.g. a NumPy array) or a read-only buffer"
        )));
    }
    if !mv.getattr("c_contiguous")?.extract::<bool>()? {
        return Err(invalid(format!(
            "{what}: the buffer of {tname} is not C-contiguous"
        )));
    }
    let arr = py.import("numpy")?.getattr("asarray")?.call1((&mv,))?;
    if !arr.hasattr("__dlpack__")? {
        return Err(InvalidTypeError::new_err(format!(
            "{what}: could not view the buffer of {tname}"
        )));
    }
    let mut imp = import_foreign(&arr, what)?;
    imp._keep.push(mv);
    imp._keep.push(arr);
    Ok(imp)
}
