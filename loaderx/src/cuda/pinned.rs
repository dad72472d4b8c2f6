//! Page-locked host regions (`kDLCUDAHost`) from `cuMemHostAlloc`, as a pool [`RegionSource`].

use std::ptr::NonNull;
use std::sync::Arc;

use cudarc::driver::sys;
use zrecord::{Device, DeviceType};

use super::driver::{CudaDevice, check};
use crate::RegionSource;

/// Alignment `cuMemHostAlloc` guarantees (a page).
pub const PINNED_ALIGN: usize = 4096;

/// Pinned host memory of one device's context, zeroed on allocation (the pool hands regions to
/// gathers that expect initialized bytes). `CU_MEMHOSTALLOC_PORTABLE`: usable from every context.
#[derive(Debug)]
pub struct PinnedSource {
    dev: Arc<CudaDevice>,
}

impl PinnedSource {
    /// A pinned source on an opened device.
    pub fn new(dev: Arc<CudaDevice>) -> Self {
        PinnedSource { dev }
    }
}

// SAFETY: the `RegionSource` contract: `alloc` returns `cuMemHostAlloc` memory, host memory of
// `capacity` bytes aligned to a page, usable from every thread and context
// (`CU_MEMHOSTALLOC_PORTABLE`); it refuses alignments above a page, and zeroes every byte before
// returning; the region stays allocated until `free` calls `cuMemFreeHost` (the source holds its
// device, whose retained context outlives every region); `device()` is always this device's
// `CudaHost` placement.
unsafe impl RegionSource for PinnedSource {
    fn alloc(&self, capacity: usize, align: usize) -> zrecord::Result<NonNull<u8>> {
        self.dev
            .bind_for_alloc("pinned host", PINNED_ALIGN, align)?;
        let mut p: *mut std::ffi::c_void = std::ptr::null_mut();
        // SAFETY: out-pointer to a local; the device's context is current.
        check("cuMemHostAlloc", unsafe {
            sys::cuMemHostAlloc(&mut p, capacity, sys::CU_MEMHOSTALLOC_PORTABLE)
        })?;
        let p = NonNull::new(p.cast::<u8>())
            .ok_or_else(|| zrecord::Error::Alloc("cuMemHostAlloc returned NULL".into()))?;
        // SAFETY: the driver just handed out `capacity` writable host bytes at `p`.
        unsafe { std::ptr::write_bytes(p.as_ptr(), 0, capacity) };
        Ok(p)
    }

    unsafe fn free(&self, ptr: NonNull<u8>, _capacity: usize, _align: usize) {
        if self.dev.bind().is_ok() {
            // SAFETY: `ptr` came from cuMemHostAlloc in `alloc` (the caller's contract) and is unused.
            let _ = unsafe { sys::cuMemFreeHost(ptr.as_ptr().cast()) };
        }
    }

    fn device(&self) -> Device {
        self.dev.placement(DeviceType::CudaHost)
    }
}
