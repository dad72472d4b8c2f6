//! The binding's CUDA glue (cargo feature `cuda`; without it every entry point reports that the
//! build has no CUDA support): a view's [`Placement`], the upload of gathered batches to device
//! memory, the DLPack stream hand-off of device tensors, and the device-input error of `append`.
//!
//! Nothing here runs at import: the driver is probed by `Allocator("cuda" | "cuda_host", id)`.

use std::any::Any;
use std::sync::Arc;

use pyo3::prelude::*;
use zrecord::Allocation;

use crate::errors::{InvalidInputError, UnsupportedDeviceError};

#[cfg(feature = "cuda")]
use loaderx::cuda::{CudaDevice, CudaPlacement, DeviceBuffer, StreamHandle};

/// Where a view's batches end up: in the gather's own allocation (CPU or pinned host), or
/// uploaded to device memory.
#[derive(Clone, Debug, Default)]
pub(crate) enum Placement {
    /// The gathered allocation is the batch.
    #[default]
    Host,
    /// Gathered into pinned staging, then copied to the device.
    #[cfg(feature = "cuda")]
    Cuda(Arc<CudaPlacement>),
}

impl Placement {
    /// The device pool's counters of a device placement.
    pub(crate) fn device_stats(&self) -> Option<zrecord::AllocStats> {
        match self {
            Placement::Host => None,
            #[cfg(feature = "cuda")]
            Placement::Cuda(p) => Some(p.device_pool().pool_stats()),
        }
    }

    /// Frees the idle device regions of a device placement (live ones still return).
    pub(crate) fn trim(&self) {
        #[cfg(feature = "cuda")]
        if let Placement::Cuda(p) = self {
            p.device_pool().trim();
        }
    }
}

/// The device-side state of a tensor: none for host tensors, the upload's buffer for device ones.
#[derive(Clone, Debug, Default)]
pub(crate) struct GpuRef(#[cfg(feature = "cuda")] Option<Arc<DeviceBuffer>>);

impl GpuRef {
    /// What a DLPack export must keep alive besides the allocation.
    pub(crate) fn keep(&self) -> Option<Arc<dyn Any + Send + Sync>> {
        #[cfg(feature = "cuda")]
        if let Some(b) = &self.0 {
            return Some(b.clone() as Arc<dyn Any + Send + Sync>);
        }
        None
    }

    /// The DLPack `stream` hand-off of a device tensor (spec: `None` = the legacy default stream,
    /// `-1` = no synchronization, `0` is invalid, `1` / `2` = legacy / per-thread default streams,
    /// larger values are `CUstream` pointers). A CPU tensor accepts `None` and `-1` only; a pinned
    /// one (exported as the CPU) any stream, as the CPU has finished writing it before it is handed
    /// out.
    pub(crate) fn hand_off(&self, alloc: &Allocation, stream: Option<i64>) -> PyResult<()> {
        use zrecord::DeviceType;
        match alloc.device().kind {
            DeviceType::Cuda => {}
            DeviceType::CudaHost => return Ok(()),
            _ => {
                return match stream {
                    None | Some(-1) => Ok(()),
                    Some(s) => Err(UnsupportedDeviceError::new_err(format!(
                        "stream {s} is not valid for a CPU tensor (pass None)"
                    ))),
                };
            }
        }
        if stream == Some(0) {
            return Err(InvalidInputError::new_err(
                "stream 0 is ambiguous and disallowed by the DLPack protocol; pass 1 (legacy default stream), 2 (per-thread default stream), a stream pointer, or -1",
            ));
        }
        #[cfg(feature = "cuda")]
        if let Some(b) = &self.0 {
            let Some(h) = StreamHandle::from_dlpack(stream.unwrap_or(1)) else {
                return Ok(());
            };
            return b.hand_to(h).map_err(|e| {
                UnsupportedDeviceError::new_err(format!("DLPack stream hand-off: {e}"))
            });
        }
        Err(UnsupportedDeviceError::new_err(
            "device tensor without its upload state (internal inconsistency)",
        ))
    }
}

/// The DLPack `(device_type, device_id)` an allocation is exported as: `(1, 0)` for CPU and
/// pinned host memory, `(2, id)` for CUDA device memory (see `crate::dlpack::ffi::dl_device_of`).
pub(crate) fn dl_device(alloc: &Allocation) -> (i32, i32) {
    crate::dlpack::ffi::dl_device_of(alloc.device())
}

/// What a CUDA `Allocator` holds: the placement (feature `cuda`), or nothing.
#[derive(Debug)]
pub(crate) enum CudaKind {
    /// Pinned host memory.
    Host,
    /// Device memory.
    Device,
}

/// Without the `cuda` feature: the error every CUDA request gets.
#[cfg(not(feature = "cuda"))]
pub(crate) fn open(
    _kind: CudaKind,
    device: &str,
    _id: i64,
    _pool_size: u64,
) -> PyResult<(Arc<loaderx::PooledAllocator>, Placement)> {
    Err(UnsupportedDeviceError::new_err(format!(
        "device {device:?} needs CUDA support, which this build of loaderx does not have (built without the `cuda` feature; the published wheel has it)"
    )))
}

/// Opens device `id` (probing the driver now) and builds the pool the views bind to, plus the
/// placement their batches take. No driver, no device, or a failing driver call all raise
/// `UnsupportedDeviceError` naming what is missing.
#[cfg(feature = "cuda")]
pub(crate) fn open(
    kind: CudaKind,
    device: &str,
    id: i64,
    pool_size: u64,
) -> PyResult<(Arc<loaderx::PooledAllocator>, Placement)> {
    let dev = crate::errors::guard(|| CudaDevice::open(id).map_err(zrecord::Error::from)).map_err(
        |e| {
            UnsupportedDeviceError::new_err(format!("Allocator({device:?}, {id}): {}", core_msg(e)))
        },
    )?;
    Ok(match kind {
        CudaKind::Host => {
            let src = Arc::new(loaderx::cuda::PinnedSource::new(dev));
            (
                Arc::new(loaderx::PooledAllocator::with_source(src, pool_size)),
                Placement::Host,
            )
        }
        CudaKind::Device => {
            let p = Arc::new(CudaPlacement::new(dev, pool_size));
            (Arc::new(p.staging().clone()), Placement::Cuda(p))
        }
    })
}

#[cfg(feature = "cuda")]
fn core_msg(e: crate::errors::CoreError) -> String {
    match e {
        crate::errors::CoreError::Z(zrecord::Error::Alloc(m)) => m,
        other => format!("{other:?}"),
    }
}

/// Places a gathered allocation: unchanged for host placements, uploaded for device ones (the
/// caller has released the GIL). The staging allocation returns to its pool once copied.
pub(crate) fn place(
    placement: &Placement,
    alloc: Allocation,
) -> zrecord::Result<(Arc<Allocation>, GpuRef)> {
    match placement {
        Placement::Host => Ok((Arc::new(alloc), GpuRef::default())),
        #[cfg(feature = "cuda")]
        Placement::Cuda(p) => {
            let b = Arc::new(p.upload(alloc)?);
            Ok((b.allocation().clone(), GpuRef(Some(b))))
        }
    }
}

/// The error of a device (kDLCUDA) input to `append`, or `None` for host inputs: device append
/// needs the driver, and is refused with what is missing.
pub(crate) fn device_input_error(what: &str, tname: &str, dev: (i32, i32)) -> Option<PyErr> {
    if dev.0 != 2 {
        return None;
    }
    #[cfg(feature = "cuda")]
    let why = match CudaDevice::open(i64::from(dev.1)) {
        Err(e) => e.to_string(),
        Ok(_) => "only DenseWriter.append copies device tensors to the host; copy it to the CPU first (t.cpu())".to_string(),
    };
    #[cfg(not(feature = "cuda"))]
    let why =
        "this build of loaderx has no CUDA support (built without the `cuda` feature)".to_string();
    Some(UnsupportedDeviceError::new_err(format!(
        "{what}: {tname} lives on CUDA device {} (DLPack device {dev:?}); device input is not supported here: {why}",
        dev.1
    )))
}

/// The `(2, id)` DLPack device of a CUDA input (a loaderx device tensor or a foreign producer),
/// `None` for anything else (host inputs go through the ordinary import).
#[cfg(feature = "cuda")]
pub(crate) fn cuda_input_device(obj: &Bound<'_, PyAny>) -> Option<(i32, i32)> {
    let f = obj
        .getattr(pyo3::intern!(obj.py(), "__dlpack_device__"))
        .ok()?;
    let dev: (i32, i32) = f.call0().ok()?.extract().ok()?;
    (dev.0 == 2).then_some(dev)
}

/// Bytes of pinned staging one device-to-host chunk of an append uses at most (one record more
/// when a single record is larger).
#[cfg(feature = "cuda")]
pub(crate) const APPEND_CHUNK_BYTES: usize = 64 << 20;

/// A device append's input: the producer's tensor, imported with the loaderx stream as the
/// consumer stream; [`DeviceInput::span`] copies it to pooled pinned staging.
#[cfg(feature = "cuda")]
pub(crate) struct DeviceInput<'py> {
    imp: crate::dlpack::Imported<'py>,
    dev: Arc<CudaDevice>,
    staging: loaderx::PooledAllocator,
}

/// Per device id: the opened device and the pinned staging pool of device appends (idle bytes
/// bounded by `APPEND_CHUNK_BYTES`).
#[cfg(feature = "cuda")]
type AppendDevices =
    std::sync::Mutex<std::collections::HashMap<i32, (Arc<CudaDevice>, loaderx::PooledAllocator)>>;

#[cfg(feature = "cuda")]
fn append_device(id: i32) -> Result<(Arc<CudaDevice>, loaderx::PooledAllocator), String> {
    static DEVICES: std::sync::OnceLock<AppendDevices> = std::sync::OnceLock::new();
    let map = DEVICES.get_or_init(Default::default);
    let mut g = map
        .lock()
        .map_err(|_| "device table lock poisoned".to_string())?;
    if let Some(d) = g.get(&id) {
        return Ok(d.clone());
    }
    let dev = CudaDevice::open(i64::from(id)).map_err(|e| e.to_string())?;
    let src = Arc::new(loaderx::cuda::PinnedSource::new(dev.clone()));
    let pool = loaderx::PooledAllocator::with_source(src, APPEND_CHUNK_BYTES as u64);
    g.insert(id, (dev.clone(), pool.clone()));
    Ok((dev, pool))
}

#[cfg(feature = "cuda")]
impl<'py> DeviceInput<'py> {
    /// Opens the device (probing the driver) and imports `obj` with the loaderx stream.
    pub(crate) fn open(obj: &Bound<'py, PyAny>, what: &str, dev: (i32, i32)) -> PyResult<Self> {
        let (device, staging) = crate::errors::guard(|| {
            append_device(dev.1).map_err(|m| {
                crate::errors::CoreError::Py(UnsupportedDeviceError::new_err, m)
            })
        })
        .map_err(|e| {
            let why = match e {
                crate::errors::CoreError::Py(_, m) => m,
                other => format!("{other:?}"),
            };
            UnsupportedDeviceError::new_err(format!(
                "{what}: input on CUDA device {} (DLPack device {dev:?}) is not supported here: {why}",
                dev.1
            ))
        })?;
        device
            .bind()
            .map_err(|e| UnsupportedDeviceError::new_err(format!("{what}: {e}")))?;
        let imp = crate::dlpack::import::import_device(obj, what, dev, device.stream().0)?;
        Ok(DeviceInput {
            imp,
            dev: device,
            staging,
        })
    }

    /// The imported tensor (shape, dtype, strides for the caller's checks).
    pub(crate) fn imported(&self) -> &crate::dlpack::Imported<'py> {
        &self.imp
    }

    /// What copying the (C-contiguous) tensor needs with the GIL released; `InvalidInputError`
    /// for another layout. The span borrows `self`, which keeps the producer's memory alive.
    pub(crate) fn span(&self) -> PyResult<DeviceSpan<'_>> {
        let total = self.imp.numel() as usize * self.imp.dtype().itemsize();
        let base = match self.imp.device_ptr() {
            Some(p) => p,
            None if total == 0 => 0,
            None => {
                return Err(InvalidInputError::new_err(format!(
                    "device input of shape {:?} is not C-contiguous (strides {:?} elements); pass x.contiguous()",
                    self.imp.shape(),
                    self.imp.strides()
                )));
            }
        };
        Ok(DeviceSpan {
            dev: self.dev.clone(),
            staging: self.staging.clone(),
            base,
            total,
            _input: std::marker::PhantomData,
        })
    }
}

/// The device bytes of a [`DeviceInput`], copied on demand with the GIL released (it is `Send`;
/// it cannot outlive the input, whose capsule keeps the producer's memory alive).
#[cfg(feature = "cuda")]
pub(crate) struct DeviceSpan<'a> {
    dev: Arc<CudaDevice>,
    staging: loaderx::PooledAllocator,
    base: usize,
    total: usize,
    _input: std::marker::PhantomData<&'a ()>,
}

#[cfg(feature = "cuda")]
impl DeviceSpan<'_> {
    /// The tensor's size in bytes.
    pub(crate) fn len(&self) -> usize {
        self.total
    }

    /// Copies bytes `start .. start + len` into one pooled pinned staging region on the loaderx
    /// stream and waits for the copy; the region returns to its pool when the result is dropped.
    pub(crate) fn copy(&self, start: usize, len: usize) -> zrecord::Result<Allocation> {
        if start.checked_add(len).is_none_or(|end| end > self.total) {
            return Err(zrecord::Error::InvalidInput(format!(
                "device copy of bytes {start}..+{len} outside a tensor of {} bytes",
                self.total
            )));
        }
        let mut st = zrecord::Allocator::acquire(&self.staging, len, 64)?;
        if len == 0 {
            return Ok(st);
        }
        let dst = st
            .host_slice_mut()
            .ok_or_else(|| zrecord::Error::Alloc("pinned staging is not host-accessible".into()))?;
        // SAFETY: `base + start .. base + start + len` lies inside the producer's C-contiguous
        // device tensor of `total` bytes (checked above), which the `DeviceInput` this span
        // borrows keeps alive; the producer ordered its writes before our stream.
        unsafe { self.dev.copy_to_host(dst, self.base + start) }?;
        Ok(st)
    }
}
