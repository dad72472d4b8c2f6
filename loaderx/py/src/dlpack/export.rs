//! Export of a region of a loaderx [`Allocation`] as a DLPack capsule (versioned or legacy), and
//! the deleters / capsule destructors that release it exactly once.

use std::any::Any;
use std::ffi::c_void;
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

unsafe extern "C" fn delete_versioned(p: *mut DLManagedTensorVersioned) {
    if p.is_null() {
        return;
    }
    // SAFETY: `p` was produced by `Box::into_raw` in `export` and its `manager_ctx` by
    // `Box::into_raw(Box<Ctx>)`; the DLPack contract calls the deleter exactly once.
    unsafe {
        let m = Box::from_raw(p);
        drop(Box::from_raw(m.manager_ctx.cast::<Ctx>()));
    }
}

unsafe extern "C" fn delete_legacy(p: *mut DLManagedTensor) {
    if p.is_null() {
        return;
    }
    // SAFETY: as in `delete_versioned`, for the legacy struct.
    unsafe {
        let m = Box::from_raw(p);
        drop(Box::from_raw(m.manager_ctx.cast::<Ctx>()));
    }
}

unsafe extern "C" fn capsule_dtor_versioned(cap: *mut ffi::PyObject) {
    // SAFETY: called by CPython with a live capsule. If it still carries its original name, no
    // consumer took ownership, so the managed tensor is still ours to delete (exactly once, here).
    unsafe {
        if ffi::PyCapsule_IsValid(cap, VERSIONED.as_ptr()) == 1 {
            let p = ffi::PyCapsule_GetPointer(cap, VERSIONED.as_ptr())
                .cast::<DLManagedTensorVersioned>();
            if !p.is_null()
                && let Some(d) = (*p).deleter
            {
                d(p);
            }
        }
    }
}

unsafe extern "C" fn capsule_dtor_legacy(cap: *mut ffi::PyObject) {
    // SAFETY: as in `capsule_dtor_versioned`, for the legacy capsule name.
    unsafe {
        if ffi::PyCapsule_IsValid(cap, LEGACY.as_ptr()) == 1 {
            let p = ffi::PyCapsule_GetPointer(cap, LEGACY.as_ptr()).cast::<DLManagedTensor>();
            if !p.is_null()
                && let Some(d) = (*p).deleter
            {
                d(p);
            }
        }
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
        Some(version) => {
            let m = Box::into_raw(Box::new(DLManagedTensorVersioned {
                version,
                manager_ctx: ctx,
                deleter: Some(delete_versioned),
                flags: 0,
                dl_tensor: dl,
            }));
            // SAFETY: `m` is a valid heap pointer we own; on failure we delete it ourselves.
            unsafe {
                let c =
                    ffi::PyCapsule_New(m.cast(), VERSIONED.as_ptr(), Some(capsule_dtor_versioned));
                if c.is_null() {
                    delete_versioned(m);
                }
                Bound::from_owned_ptr_or_err(py, c)
            }
        }
        None => {
            let m = Box::into_raw(Box::new(DLManagedTensor {
                dl_tensor: dl,
                manager_ctx: ctx,
                deleter: Some(delete_legacy),
            }));
            // SAFETY: as above, for the legacy struct.
            unsafe {
                let c = ffi::PyCapsule_New(m.cast(), LEGACY.as_ptr(), Some(capsule_dtor_legacy));
                if c.is_null() {
                    delete_legacy(m);
                }
                Bound::from_owned_ptr_or_err(py, c)
            }
        }
    }
}
