//! Device regions (`kDLCUDA`) from `cuMemAlloc`, as a pool [`RegionSource`], and [`DeviceBuffer`],
//! a device allocation with its copy event and the consumer streams it was handed to.

use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

use cudarc::driver::sys;
use zrecord::{Allocation, Device, DeviceType};

use super::driver::{CudaDevice, CudaResult, StreamHandle, check};
use super::stream::Event;
use crate::RegionSource;

/// Alignment `cuMemAlloc` guarantees.
pub const DEVICE_ALIGN: usize = 256;

/// Device memory of one device. Regions are not zeroed: the CPU cannot address them (their
/// placement is `kDLCUDA`, which an `Allocation` never exposes as a host slice; see
/// [`RegionSource`]'s contract), and every byte handed to a user is written by the upload copy
/// first.
#[derive(Debug)]
pub struct DeviceSource {
    dev: Arc<CudaDevice>,
}

impl DeviceSource {
    /// A device-memory source on an opened device.
    pub fn new(dev: Arc<CudaDevice>) -> Self {
        DeviceSource { dev }
    }
}

// SAFETY: the `RegionSource` contract: `alloc` returns `cuMemAlloc` memory of `capacity` bytes
// aligned to 256 and refuses larger alignments; the region stays allocated until `free` calls
// `cuMemFree` (the source holds its device, whose retained context outlives every region), and
// device pointers are valid from any thread of the process; `device()` is always this device's
// `Cuda` placement, which is not host-accessible, so the bytes need not be initialised (the CPU
// is never handed a slice of them).
unsafe impl RegionSource for DeviceSource {
    fn device(&self) -> Device {
        self.dev.placement(DeviceType::Cuda)
    }

    fn alloc(&self, capacity: usize, align: usize) -> zrecord::Result<NonNull<u8>> {
        self.dev.bind_for_alloc("device", DEVICE_ALIGN, align)?;
        let mut p: sys::CUdeviceptr = 0;
        // SAFETY: out-pointer to a local; the device's context is current.
        check("cuMemAlloc", unsafe {
            sys::cuMemAlloc_v2(&mut p, capacity)
        })?;
        NonNull::new(p as usize as *mut u8)
            .ok_or_else(|| zrecord::Error::Alloc("cuMemAlloc returned 0".into()))
    }

    unsafe fn free(&self, ptr: NonNull<u8>, _capacity: usize, _align: usize) {
        if self.dev.bind().is_ok() {
            // Work still queued on the copy stream may use the region: let it finish first.
            // SAFETY: the stream is alive while the device is.
            let _ = unsafe { sys::cuStreamSynchronize(self.dev.raw_stream()) };
            // SAFETY: `ptr` came from cuMemAlloc in `alloc` (the caller's contract) and is unused.
            let _ = unsafe { sys::cuMemFree_v2(ptr.as_ptr() as usize as sys::CUdeviceptr) };
        }
    }
}

/// A device allocation filled by an upload: `ready` completes when its bytes are in place.
///
/// When the last owner (the Python tensor, every DLPack export of it) drops, each consumer stream
/// it was handed to records an event that the copy stream waits on before the region returns to
/// the pool: a later upload into the same region is ordered after the consumer's queued kernels.
#[derive(Debug)]
pub struct DeviceBuffer {
    alloc: Arc<Allocation>,
    ready: Event,
    consumers: Mutex<Vec<StreamHandle>>,
    dev: Arc<CudaDevice>,
}

impl DeviceBuffer {
    pub(crate) fn new(alloc: Allocation, ready: Event, dev: Arc<CudaDevice>) -> Self {
        DeviceBuffer {
            alloc: Arc::new(alloc),
            ready,
            consumers: Mutex::new(Vec::new()),
            dev,
        }
    }

    /// The device allocation (its pointer is a `CUdeviceptr`).
    pub fn allocation(&self) -> &Arc<Allocation> {
        &self.alloc
    }

    /// The device ordinal.
    pub fn device_id(&self) -> i32 {
        self.dev.id()
    }

    /// DLPack hand-off: `stream` waits (on the device) for the upload, and is remembered so the
    /// region is not reused before the work queued on it at release time has run.
    pub fn hand_to(&self, stream: StreamHandle) -> CudaResult<()> {
        self.ready.wait_on(stream)?;
        if let Ok(mut c) = self.consumers.lock()
            && !c.contains(&stream)
        {
            c.push(stream);
        }
        Ok(())
    }

    /// Blocks until the upload is complete (for a consumer that asked for no stream).
    pub fn wait_ready(&self) -> CudaResult<()> {
        self.ready.synchronize()
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        let consumers = match self.consumers.get_mut() {
            Ok(c) => std::mem::take(c),
            Err(p) => std::mem::take(p.into_inner()),
        };
        for s in consumers {
            if let Ok(ev) = Event::new(&self.dev)
                && ev.record(s).is_ok()
            {
                let _ = ev.wait_on(self.dev.stream());
            }
        }
    }
}
