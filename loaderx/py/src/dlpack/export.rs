//! Export of a region of a loaderx [`Allocation`] as a DLPack capsule (versioned or legacy), and
//! the deleters / capsule destructors that release it exactly once.

use std::any::Any;
use std::ffi::{CStr, c_void};
use std::sync::Arc;

use pyo3::ffi;
use pyo3::prelude::*;
use zrecord::{Allocation, DType};

use crate::errors::InternalError;

use super::ffi::{
    DLDataType, DLDevice, DLManagedTensor, DLManagedTensorVersioned, DLPackVersion, DLTensor,
    LEGACY, VERSIONED,
};

/// What a managed tensor keeps alive: the allocation, anything else its owner needs (a device
/// tensor's upload state), and the shape array `dl_tensor.shape` points to.
struct Ctx {
    _owner: Arc<Allocation>,
    _keep: Option<Arc<dyn Any + Send + Sync>>,
    shape: Vec<i64>,
}

/// The two managed-tensor structs (versioned and legacy), each with the capsule name it travels
/// under: what the deleter, the capsule destructor and `into_capsule` below need of them.
trait Managed: Sized {
    const NAME: &'static CStr;
    fn manager_ctx(&self) -> *mut c_void;
    fn deleter(&self) -> Option<unsafe extern "C" fn(*mut Self)>;
}

/// `Managed` for each struct `$t`, travelling under capsule name `$name`.
macro_rules! managed {
    ($($t:ty = $name:expr),+) => {$(
        impl Managed for $t {
            const NAME: &'static CStr = $name;
            fn manager_ctx(&self) -> *mut c_void {
                self.manager_ctx
            }
            fn deleter(&self) -> Option<unsafe extern "C" fn(*mut Self)> {
                self.deleter
            }
        }
    )+};
}

managed!(
    DLManagedTensorVersioned = VERSIONED,
    DLManagedTensor = LEGACY
);

/// The deleter of an exported managed tensor of either struct.
unsafe extern "C" fn delete<M: Managed>(p: *mut M) {
    if p.is_null() {
        return;
    }
    // SAFETY: `p` was produced by `Box::into_raw` in `into_capsule` and its `manager_ctx` by
    // `Box::into_raw(Box<Ctx>)` in `export`; the DLPack contract calls the deleter exactly once.
    unsafe {
        let m = Box::from_raw(p);
        drop(Box::from_raw(m.manager_ctx().cast::<Ctx>()));
    }
}

/// The destructor of a capsule named `M::NAME`.
unsafe extern "C" fn capsule_dtor<M: Managed>(cap: *mut ffi::PyObject) {
    // SAFETY: called by CPython with a live capsule. If it still carries its original name, no
    // consumer took ownership (a consumer renames it), so the `M` it points to is still ours to
    // delete (exactly once, here).
    unsafe {
        if ffi::PyCapsule_IsValid(cap, M::NAME.as_ptr()) == 1 {
            let p = ffi::PyCapsule_GetPointer(cap, M::NAME.as_ptr()).cast::<M>();
            if !p.is_null()
                && let Some(d) = (*p).deleter()
            {
                d(p);
            }
        }
    }
}

/// Moves `m` to the heap and wraps it in a capsule named `M::NAME` whose destructor deletes it
/// unless a consumer took it.
fn into_capsule<M: Managed>(py: Python<'_>, m: M) -> PyResult<Bound<'_, PyAny>> {
    let m = Box::into_raw(Box::new(m));
    // SAFETY: `m` is a valid heap pointer we own; on failure we delete it ourselves.
    unsafe {
        let c = ffi::PyCapsule_New(m.cast(), M::NAME.as_ptr(), Some(capsule_dtor::<M>));
        if c.is_null() {
            delete(m);
        }
        Bound::from_owned_ptr_or_err(py, c)
    }
}

/// Exports `shape` elements of `dtype` starting `offset` bytes into `owner` as a DLPack capsule:
/// versioned (`"dltensor_versioned"`, version `version`) or legacy (`"dltensor"`). The data pointer
/// is `base + offset` with `byte_offset = 0`, strides are NULL (C-contiguous), flags are 0 (writable),
/// the device is the allocation's (`ffi::dl_device_of`: the CPU for host and pinned host memory, the
/// CUDA device for device memory). `keep` rides along with the
/// allocation until the consumer deletes the managed tensor.
///
/// Exports are writable on purpose (users write into batches, as NumPy users expect), and several
/// exports may alias one allocation (`bitcast`, the fields of a `RaggedBatch`, `to_tensors`,
/// repeated `__dlpack__` calls): a write through one is visible in all. From here on the region is
/// foreign-writable memory: the binding reads it only through `crate::raw::RawBytes` copies and
/// never borrows it as `&[u8]` (the "Exported regions" rule of `zrecord::Allocation`).
pub(crate) fn export<'py>(
    py: Python<'py>,
    owner: &Arc<Allocation>,
    offset: usize,
    shape: &[u64],
    dtype: DType,
    version: Option<DLPackVersion>,
    keep: Option<Arc<dyn Any + Send + Sync>>,
) -> PyResult<Bound<'py, PyAny>> {
    let bytes = shape
        .iter()
        .try_fold(dtype.itemsize() as u64, |a, &d| a.checked_mul(d));
    let inside = bytes
        .and_then(|n| n.checked_add(offset as u64))
        .is_some_and(|end| end <= owner.len() as u64);
    if !inside {
        return Err(InternalError::new_err(format!(
            "DLPack export of shape {shape:?} {dtype} at byte {offset} lies outside its {}-byte allocation",
            owner.len()
        )));
    }
    let (code, bits, lanes) = dtype.dlpack();
    let mut ctx = Box::new(Ctx {
        _owner: owner.clone(),
        _keep: keep,
        shape: shape.iter().map(|&d| d as i64).collect(),
    });
    let dl = DLTensor {
        data: owner
            .as_ptr()
            .wrapping_add(offset)
            .cast_mut()
            .cast::<c_void>(),
        device: {
            let (device_type, device_id) = super::ffi::dl_device_of(owner.device());
            DLDevice {
                device_type,
                device_id,
            }
        },
        ndim: shape.len() as i32,
        dtype: DLDataType { code, bits, lanes },
        shape: ctx.shape.as_mut_ptr(),
        strides: std::ptr::null_mut(),
        byte_offset: 0,
    };
    let ctx = Box::into_raw(ctx).cast::<c_void>();
    match version {
        Some(version) => into_capsule(
            py,
            DLManagedTensorVersioned {
                version,
                manager_ctx: ctx,
                deleter: Some(delete),
                flags: 0,
                dl_tensor: dl,
            },
        ),
        None => into_capsule(
            py,
            DLManagedTensor {
                dl_tensor: dl,
                manager_ctx: ctx,
                deleter: Some(delete),
            },
        ),
    }
}
