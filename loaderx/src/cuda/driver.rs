//! The driver itself: probing and opening a device (`CudaDevice`), its context and stream, and
//! the error type of every CUDA call.

use std::ffi::c_int;
use std::fmt;
use std::sync::Arc;

use cudarc::driver::sys;

/// Why a CUDA placement is unavailable or a driver call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CudaError {
    /// `libcuda.so` (the NVIDIA driver library) could not be loaded.
    NoDriver,
    /// The driver loaded but `cuInit` failed (no usable GPU, or a driver/kernel-module mismatch).
    Init(String),
    /// The requested device id is not one of the `count` devices the driver reports.
    NoSuchDevice {
        /// Requested id.
        id: i64,
        /// Devices present.
        count: i32,
    },
    /// A driver call failed.
    Driver {
        /// The driver function.
        call: &'static str,
        /// The driver's error name and text.
        detail: String,
    },
}

impl fmt::Display for CudaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CudaError::NoDriver => write!(
                f,
                "the NVIDIA driver library libcuda.so (libcuda.so.1) could not be loaded: no CUDA driver is installed on this machine"
            ),
            CudaError::Init(d) => write!(f, "cuInit failed: {d} (no usable CUDA device)"),
            CudaError::NoSuchDevice { id, count } => write!(
                f,
                "CUDA device id {id} does not exist: the driver reports {count} device(s) (ids 0..{count})"
            ),
            CudaError::Driver { call, detail } => write!(f, "{call} failed: {detail}"),
        }
    }
}

impl std::error::Error for CudaError {}

impl From<CudaError> for zrecord::Error {
    fn from(e: CudaError) -> Self {
        zrecord::Error::Alloc(e.to_string())
    }
}

/// Result alias for driver calls.
pub type CudaResult<T> = Result<T, CudaError>;

/// Turns a driver status into a result naming the call.
pub(crate) fn check(call: &'static str, r: sys::CUresult) -> CudaResult<()> {
    match r {
        sys::CUresult::CUDA_SUCCESS => Ok(()),
        other => Err(CudaError::Driver {
            call,
            detail: format!("{other:?}"),
        }),
    }
}

/// Whether the driver library can be loaded. Loads nothing else and never panics.
pub fn driver_present() -> bool {
    // SAFETY: `is_culib_present` only tries `dlopen` on the candidate names and drops the handles.
    unsafe { sys::is_culib_present() }
}

/// One CUDA device, opened: its primary context and a loaderx-owned non-blocking stream.
pub struct CudaDevice {
    id: i32,
    dev: sys::CUdevice,
    ctx: sys::CUcontext,
    stream: sys::CUstream,
    name: String,
    driver_version: i32,
}

// SAFETY: a CUcontext / CUstream are driver handles usable from any thread once the context is made
// current there (`bind` does that before every call); the driver API is thread-safe.
unsafe impl Send for CudaDevice {}
// SAFETY: as above; no method mutates Rust-side state.
unsafe impl Sync for CudaDevice {}

impl fmt::Debug for CudaDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CudaDevice")
            .field("id", &self.id)
            .field("name", &self.name)
            .field("driver_version", &self.driver_version)
            .finish()
    }
}

impl CudaDevice {
    /// Probes the driver and opens device `id`: `NoDriver` without libcuda, `Init` when `cuInit`
    /// fails, `NoSuchDevice` for an id outside the device count.
    pub fn open(id: i64) -> CudaResult<Arc<CudaDevice>> {
        if !driver_present() {
            return Err(CudaError::NoDriver);
        }
        // SAFETY: the library is present (checked above), so the lazily bound entry points load.
        unsafe { sys::cuInit(0) }
            .result()
            .map_err(|e| CudaError::Init(format!("{e:?}")))?;
        let mut count: c_int = 0;
        // SAFETY: out-pointer to a local.
        check("cuDeviceGetCount", unsafe {
            sys::cuDeviceGetCount(&mut count)
        })?;
        let Ok(ordinal) = i32::try_from(id) else {
            return Err(CudaError::NoSuchDevice { id, count });
        };
        if ordinal < 0 || ordinal >= count {
            return Err(CudaError::NoSuchDevice { id, count });
        }
        let mut dev: sys::CUdevice = 0;
        // SAFETY: out-pointer to a local; the ordinal is in range.
        check("cuDeviceGet", unsafe {
            sys::cuDeviceGet(&mut dev, ordinal)
        })?;
        let mut ctx: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: `dev` came from cuDeviceGet; the retained context is released in Drop.
        check("cuDevicePrimaryCtxRetain", unsafe {
            sys::cuDevicePrimaryCtxRetain(&mut ctx, dev)
        })?;
        // SAFETY: `ctx` is the retained primary context.
        let bound = check("cuCtxSetCurrent", unsafe { sys::cuCtxSetCurrent(ctx) });
        let mut stream: sys::CUstream = std::ptr::null_mut();
        let made = bound.and_then(|()| {
            // SAFETY: out-pointer to a local; a context is current.
            check("cuStreamCreate", unsafe {
                sys::cuStreamCreate(
                    &mut stream,
                    sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32,
                )
            })
        });
        if let Err(e) = made {
            // SAFETY: balances the retain above; nothing else uses the context.
            unsafe { sys::cuDevicePrimaryCtxRelease_v2(dev) };
            return Err(e);
        }
        let mut name_buf = [0 as std::ffi::c_char; 128];
        // SAFETY: the buffer holds 128 bytes; the driver writes a NUL-terminated name into it.
        let name = match unsafe { sys::cuDeviceGetName(name_buf.as_mut_ptr(), 128, dev) } {
            sys::CUresult::CUDA_SUCCESS => {
                name_buf[127] = 0;
                // SAFETY: the buffer is NUL-terminated within its 128 bytes (last byte forced above).
                unsafe { std::ffi::CStr::from_ptr(name_buf.as_ptr()) }
                    .to_string_lossy()
                    .into_owned()
            }
            _ => String::from("unknown"),
        };
        let mut driver_version: c_int = 0;
        // SAFETY: out-pointer to a local.
        let _ = unsafe { sys::cuDriverGetVersion(&mut driver_version) };
        Ok(Arc::new(CudaDevice {
            id: ordinal,
            dev,
            ctx,
            stream,
            name,
            driver_version,
        }))
    }

    /// The device ordinal.
    pub fn id(&self) -> i32 {
        self.id
    }

    /// The device's name as the driver reports it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `cuDriverGetVersion` (e.g. 12060).
    pub fn driver_version(&self) -> i32 {
        self.driver_version
    }

    /// Makes this device's context current on the calling thread (cheap; needed before any call
    /// from a thread that has not used it yet, e.g. a loader worker).
    pub fn bind(&self) -> CudaResult<()> {
        // SAFETY: the context is retained for `self`'s lifetime.
        check("cuCtxSetCurrent", unsafe { sys::cuCtxSetCurrent(self.ctx) })
    }

    /// This device's placement of `kind`: `Cuda` for its memory, `CudaHost` for pinned memory.
    pub(crate) fn placement(&self, kind: zrecord::DeviceType) -> zrecord::Device {
        zrecord::Device { kind, id: self.id }
    }

    /// What a region source does before it allocates: refuses an `align` above the `max` its
    /// driver call guarantees (for `what` regions), then makes this device's context current.
    pub(crate) fn bind_for_alloc(
        &self,
        what: &str,
        max: usize,
        align: usize,
    ) -> zrecord::Result<()> {
        if align > max {
            return Err(zrecord::Error::Alloc(format!(
                "{what} regions are {max}-byte aligned; alignment {align} was asked"
            )));
        }
        self.bind().map_err(Into::into)
    }

    /// The loaderx-owned copy stream.
    pub fn stream(&self) -> StreamHandle {
        StreamHandle(self.stream as usize)
    }

    /// Copies `dst.len()` bytes from device address `src` into host memory on the loaderx stream
    /// and waits for the copy (the stream is ordered after whatever the producer asked it to wait
    /// on). `dst` should be pinned for an asynchronous DMA; pageable memory also works.
    ///
    /// # Safety
    /// `src .. src + dst.len()` must be readable device memory of this device's context, alive
    /// until the call returns.
    pub unsafe fn copy_to_host(&self, dst: &mut [u8], src: usize) -> CudaResult<()> {
        if dst.is_empty() {
            return Ok(());
        }
        self.bind()?;
        // SAFETY: `dst` is writable for its length; `src` is valid device memory (the caller's
        // contract); the stream is alive while `self` is.
        check("cuMemcpyDtoHAsync", unsafe {
            sys::cuMemcpyDtoHAsync_v2(
                dst.as_mut_ptr().cast(),
                src as sys::CUdeviceptr,
                dst.len(),
                self.stream,
            )
        })?;
        // SAFETY: as above; waiting keeps `dst` borrowed until the copy has landed.
        check("cuStreamSynchronize", unsafe {
            sys::cuStreamSynchronize(self.stream)
        })
    }

    pub(crate) fn raw_stream(&self) -> sys::CUstream {
        self.stream
    }
}

impl Drop for CudaDevice {
    fn drop(&mut self) {
        // SAFETY: the stream and the context retain were created in `open` and are released once.
        unsafe {
            let _ = sys::cuCtxSetCurrent(self.ctx);
            let _ = sys::cuStreamSynchronize(self.stream);
            let _ = sys::cuStreamDestroy_v2(self.stream);
            let _ = sys::cuDevicePrimaryCtxRelease_v2(self.dev);
        }
    }
}

/// A raw `CUstream` handle as an integer (what DLPack's `stream=` passes); 0 is the legacy default
/// stream, 1 and 2 are the legacy / per-thread default streams of the DLPack protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamHandle(pub usize);

impl StreamHandle {
    /// Maps a DLPack `stream` argument for a CUDA tensor to a driver stream: `None` means "no
    /// synchronization wanted" (the protocol's `-1`), `1` the legacy default stream (`CU_STREAM_LEGACY`),
    /// `2` the per-thread default stream, anything else a `CUstream` pointer. `0` is disallowed by
    /// the protocol (ambiguous) and rejected by the caller.
    pub fn from_dlpack(s: i64) -> Option<StreamHandle> {
        match s {
            -1 => None,
            // `CU_STREAM_LEGACY` and `CU_STREAM_PER_THREAD` are the handle values 1 and 2 in cuda.h.
            other => Some(StreamHandle(other as usize)),
        }
    }

    pub(crate) fn raw(self) -> sys::CUstream {
        self.0 as sys::CUstream
    }
}
