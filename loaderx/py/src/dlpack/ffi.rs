//! The DLPack 1.x C ABI: capsule names, the CPU device code, the device a loaderx allocation is
//! exported as ([`dl_device_of`]) and the `#[repr(C)]` structs.

use std::ffi::{CStr, c_void};

pub(crate) const VERSIONED: &CStr = c"dltensor_versioned";
pub(crate) const LEGACY: &CStr = c"dltensor";
pub(crate) const KDL_CPU: i32 = 1;

/// The DLPack `(device_type, device_id)` a loaderx allocation on `device` is exported as: the
/// CPU `(1, 0)` for host memory, page-locked (`Allocator("cuda_host")`) included, and `(2, id)`
/// for CUDA device memory. Pinned memory is host memory, and the main consumers refuse kDLCUDAHost
/// (torch: "Unsupported device_type: 3"), so it is exported the way torch exports its own pinned
/// tensors: as the CPU. Consumers see a CPU tensor whose pages are pinned (torch: `is_pinned()`).
pub(crate) fn dl_device_of(device: zrecord::Device) -> (i32, i32) {
    if device.kind.host_accessible() {
        (KDL_CPU, 0)
    } else {
        (device.kind.dlpack_code(), device.id)
    }
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct DLDevice {
    pub device_type: i32,
    pub device_id: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct DLDataType {
    pub code: u8,
    pub bits: u8,
    pub lanes: u16,
}

#[repr(C)]
#[derive(Debug)]
pub(crate) struct DLTensor {
    pub data: *mut c_void,
    pub device: DLDevice,
    pub ndim: i32,
    pub dtype: DLDataType,
    pub shape: *mut i64,
    pub strides: *mut i64,
    pub byte_offset: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct DLPackVersion {
    pub major: u32,
    pub minor: u32,
}

#[repr(C)]
#[derive(Debug)]
pub(crate) struct DLManagedTensor {
    pub dl_tensor: DLTensor,
    pub manager_ctx: *mut c_void,
    pub deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

#[repr(C)]
#[derive(Debug)]
pub(crate) struct DLManagedTensorVersioned {
    pub version: DLPackVersion,
    pub manager_ctx: *mut c_void,
    pub deleter: Option<unsafe extern "C" fn(*mut DLManagedTensorVersioned)>,
    pub flags: u64,
    pub dl_tensor: DLTensor,
}
