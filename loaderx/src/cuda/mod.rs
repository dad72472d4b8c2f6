//! CUDA placement (cargo feature `cuda`): runtime-loaded driver, pinned-host and device region
//! sources behind the ordinary [`PooledAllocator`] bound, and the host-to-device upload of a
//! gathered batch on a loaderx-owned stream.
//!
//! * Nothing here touches the driver until [`CudaDevice::open`] is called (the Python binding calls
//!   it from `Allocator("cuda" | "cuda_host", id)` only): `libcuda` is `dlopen`ed then, after
//!   [`driver_present`] has checked that it can be loaded at all (cudarc would panic otherwise).
//! * [`pinned::PinnedSource`] hands out page-locked host regions (`kDLCUDAHost`); the CPU gathers
//!   into them directly.
//! * [`device::DeviceSource`] hands out device regions (`kDLCUDA`). A device batch is gathered into
//!   a pooled pinned *staging* region, copied with one `cuMemcpyHtoDAsync` on the device's own
//!   stream, and an event is recorded after the copy ([`CudaPlacement::upload`]).
//! * [`stream`] holds the event / stream hand-off that DLPack consumers use.
//!
//! Bounds: a [`CudaPlacement`] owns two pools whose idle bytes together never exceed its
//! `pool_size` (staging gets `min(pool_size / 4, 256 MiB)`, device memory the rest).

pub mod device;
pub mod driver;
pub mod pinned;
pub mod stream;

use std::sync::Arc;

use cudarc::driver::sys;
use zrecord::{Allocation, Allocator, Device, DeviceType};

use crate::PooledAllocator;
pub use device::{DeviceBuffer, DeviceSource};
pub(crate) use driver::check;
pub use driver::{CudaDevice, CudaError, CudaResult, StreamHandle, driver_present};
pub use pinned::PinnedSource;
pub use stream::Event;

/// Largest idle staging pool a [`CudaPlacement`] keeps: 256 MiB.
pub const MAX_STAGING_POOL: u64 = 256 << 20;

/// Default `pool_size` for device memory (1 GiB).
pub const DEFAULT_DEVICE_POOL_SIZE: u64 = 1 << 30;

/// A device placement: device-memory pool, pinned staging pool, and the device's stream.
#[derive(Debug, Clone)]
pub struct CudaPlacement {
    dev: Arc<CudaDevice>,
    device_pool: PooledAllocator,
    staging: PooledAllocator,
}

/// The idle bounds of the (device, staging) pools for one `pool_size`: they sum to `pool_size`.
pub fn split_pool_size(pool_size: u64) -> (u64, u64) {
    let staging = (pool_size / 4).min(MAX_STAGING_POOL);
    (pool_size - staging, staging)
}

impl CudaPlacement {
    /// A device placement on an opened device, idle bytes bounded by `pool_size` in total.
    pub fn new(dev: Arc<CudaDevice>, pool_size: u64) -> Self {
        let (dpool, spool) = split_pool_size(pool_size);
        CudaPlacement {
            device_pool: PooledAllocator::with_source(
                Arc::new(DeviceSource::new(dev.clone())),
                dpool,
            ),
            staging: PooledAllocator::with_source(Arc::new(PinnedSource::new(dev.clone())), spool),
            dev,
        }
    }

    /// The opened device.
    pub fn device(&self) -> &Arc<CudaDevice> {
        &self.dev
    }

    /// The pinned staging allocator views are bound to (gathers fill it).
    pub fn staging(&self) -> &PooledAllocator {
        &self.staging
    }

    /// The device-memory pool.
    pub fn device_pool(&self) -> &PooledAllocator {
        &self.device_pool
    }

    /// Copies a filled staging allocation into a fresh pooled device region on the device's
    /// stream, records the copy's event, waits for it (so the staging region can be reused
    /// safely), and returns the device buffer. The staging allocation is dropped (back to its pool).
    pub fn upload(&self, staging: Allocation) -> zrecord::Result<DeviceBuffer> {
        let n = staging.len();
        let mut dst = self.device_pool.acquire(n, staging.align().max(64))?;
        self.dev.bind()?;
        let event = Event::new(&self.dev)?;
        if n > 0 {
            // SAFETY: `dst` is a device region of >= n bytes from this device's pool (the device
            // source's `RegionSource` contract: at least the capacity asked for, allocated until
            // freed); `staging` is a host region of n readable bytes (pinned, from the staging
            // pool) that stays alive until the event below has completed (we synchronize on it
            // before dropping `staging`).
            check("cuMemcpyHtoDAsync", unsafe {
                sys::cuMemcpyHtoDAsync_v2(
                    dst.as_mut_ptr() as sys::CUdeviceptr,
                    staging.as_ptr().cast(),
                    n,
                    self.dev.raw_stream(),
                )
            })?;
        }
        event.record(self.dev.stream())?;
        event.synchronize()?;
        drop(staging);
        Ok(DeviceBuffer::new(dst, event, self.dev.clone()))
    }

    /// Device placement of the device regions.
    pub fn device_placement(&self) -> Device {
        Device {
            kind: DeviceType::Cuda,
            id: self.dev.id(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_split_sums_to_pool_size() {
        for p in [0u64, 1, 4, 1 << 20, 1 << 30, 1 << 34, u64::MAX] {
            let (d, s) = split_pool_size(p);
            assert_eq!(d + s, p);
            assert!(s <= MAX_STAGING_POOL);
            assert!(s <= p / 4);
        }
    }

    #[test]
    fn open_without_a_driver_is_a_typed_error() {
        if driver_present() {
            return; // covered by the GPU certification instead
        }
        let e = CudaDevice::open(0).unwrap_err();
        assert_eq!(e, CudaError::NoDriver);
        assert!(e.to_string().contains("libcuda.so"), "{e}");
    }

    #[test]
    fn errors_name_what_is_missing() {
        let e = CudaError::NoSuchDevice { id: 3, count: 1 };
        let s = e.to_string();
        assert!(s.contains("id 3") && s.contains("1 device"), "{s}");
        let z: zrecord::Error = CudaError::Driver {
            call: "cuMemAlloc",
            detail: "CUDA_ERROR_OUT_OF_MEMORY".into(),
        }
        .into();
        assert!(z.to_string().contains("cuMemAlloc"), "{z}");
    }
}
