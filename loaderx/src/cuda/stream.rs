//! Events and the DLPack stream hand-off: a consumer stream waits on the event recorded after a
//! copy, and a released device region makes the copy stream wait on the consumer's work.

use std::sync::Arc;

use cudarc::driver::sys;

use super::driver::{CudaDevice, CudaResult, StreamHandle, check};

/// A CUDA event (timing disabled) of one device.
#[derive(Debug)]
pub struct Event {
    ev: usize,
    dev: Arc<CudaDevice>,
}

impl Event {
    /// A fresh event on `dev`.
    pub fn new(dev: &Arc<CudaDevice>) -> CudaResult<Event> {
        dev.bind()?;
        let mut ev: sys::CUevent = std::ptr::null_mut();
        // SAFETY: out-pointer to a local; the device context is current.
        check("cuEventCreate", unsafe {
            sys::cuEventCreate(&mut ev, sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32)
        })?;
        Ok(Event {
            ev: ev as usize,
            dev: dev.clone(),
        })
    }

    fn raw(&self) -> sys::CUevent {
        self.ev as sys::CUevent
    }

    /// Records the event on `stream` (after the work queued there so far).
    pub fn record(&self, stream: StreamHandle) -> CudaResult<()> {
        self.dev.bind()?;
        // SAFETY: the event is alive; the stream is the caller's live stream of this context.
        check("cuEventRecord", unsafe {
            sys::cuEventRecord(self.raw(), stream.raw())
        })
    }

    /// Blocks the calling thread until the recorded work is done.
    pub fn synchronize(&self) -> CudaResult<()> {
        self.dev.bind()?;
        // SAFETY: the event is alive.
        check("cuEventSynchronize", unsafe {
            sys::cuEventSynchronize(self.raw())
        })
    }

    /// Makes `stream` wait (on the device, without blocking the host) for this event.
    pub fn wait_on(&self, stream: StreamHandle) -> CudaResult<()> {
        self.dev.bind()?;
        // SAFETY: the event is alive; the stream is the caller's live stream of this context.
        check("cuStreamWaitEvent", unsafe {
            sys::cuStreamWaitEvent(stream.raw(), self.raw(), 0)
        })
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        if self.dev.bind().is_ok() {
            // SAFETY: created in `new`, destroyed once; pending waits keep their own reference in
            // the driver (destroying a recorded event is allowed).
            let _ = unsafe { sys::cuEventDestroy_v2(self.raw()) };
        }
    }
}
