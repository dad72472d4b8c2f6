//! `loaderx.Allocator`: the placement a store is bound to (a bounded, pooled CPU, pinned-host or
//! CUDA device allocator), its counters and its life cycle.

use std::sync::{Arc, Mutex};

use loaderx::PooledAllocator;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use crate::errors::{ClosedError, InternalError, InvalidInputError, UnsupportedDeviceError};
use crate::gpu::{CudaKind, Placement};
use crate::pickle::{Reduce, rebuilder};

/// Default `pool_size` of `Allocator("cuda", id)`: 1 GiB (device and staging together).
const DEVICE_POOL_SIZE: u64 = 1 << 30;

/// A placement: `Allocator("cpu" | "cuda_host" | "cuda", id, pool_size=...)`, a bounded pool.
#[pyclass(name = "Allocator", module = "loaderx", frozen)]
pub(crate) struct PyAllocator {
    /// The pool views bind to (gathers fill it): host, pinned host, or a device placement's
    /// pinned staging pool.
    inner: Mutex<Option<Arc<PooledAllocator>>>,
    pool_size: u64,
    device: &'static str,
    device_id: i64,
    /// What gathered batches become (kept after `close`, so bound views keep working).
    placement: Placement,
}

impl PyAllocator {
    pub(crate) fn arc(&self) -> PyResult<Arc<dyn zrecord::Allocator>> {
        let g = self
            .inner
            .lock()
            .map_err(|_| InternalError::new_err("allocator lock poisoned"))?;
        match &*g {
            Some(a) => Ok(a.clone() as Arc<dyn zrecord::Allocator>),
            None => Err(ClosedError::new_err(
                "allocator is closed; create a new Allocator to bind",
            )),
        }
    }

    /// What batches of views bound to this allocator become.
    pub(crate) fn placement(&self) -> Placement {
        self.placement.clone()
    }

    fn pooled(&self) -> PyResult<Option<Arc<PooledAllocator>>> {
        let g = self
            .inner
            .lock()
            .map_err(|_| InternalError::new_err("allocator lock poisoned"))?;
        Ok(g.clone())
    }
}

#[pymethods]
impl PyAllocator {
    #[new]
    #[pyo3(signature = (device="cpu", device_id=0, *, pool_size=None))]
    fn py_new(device: &str, device_id: i64, pool_size: Option<u64>) -> PyResult<Self> {
        let kind = device.to_ascii_lowercase();
        let (name, cuda) = match kind.as_str() {
            "cpu" => ("cpu", None),
            "cuda_host" | "cuda-host" | "pinned" => ("cuda_host", Some(CudaKind::Host)),
            "cuda" | "gpu" => ("cuda", Some(CudaKind::Device)),
            "rocm" | "amdgpu" | "hip" | "mps" | "xpu" => {
                return Err(UnsupportedDeviceError::new_err(format!(
                    "device {device:?} is not supported; loaderx places batches on \"cpu\", \"cuda_host\" (pinned) or \"cuda\" (see loaderx.backend)"
                )));
            }
            _ => {
                return Err(InvalidInputError::new_err(format!(
                    "unknown device {device:?}; expected \"cpu\", \"cuda_host\" or \"cuda\""
                )));
            }
        };
        let Some(cuda) = cuda else {
            if device_id != 0 {
                return Err(InvalidInputError::new_err(format!(
                    "the CPU has one device, id 0; got device_id {device_id}"
                )));
            }
            let pool_size = pool_size.unwrap_or(loaderx::DEFAULT_POOL_SIZE);
            return Ok(PyAllocator {
                inner: Mutex::new(Some(Arc::new(PooledAllocator::new(pool_size)))),
                pool_size,
                device: "cpu",
                device_id: 0,
                placement: Placement::Host,
            });
        };
        if device_id < 0 {
            return Err(InvalidInputError::new_err(format!(
                "device_id must be >= 0; got {device_id}"
            )));
        }
        let pool_size = pool_size.unwrap_or(match cuda {
            CudaKind::Device => DEVICE_POOL_SIZE,
            CudaKind::Host => loaderx::DEFAULT_POOL_SIZE,
        });
        let (pool, placement) = crate::gpu::open(cuda, name, device_id, pool_size)?;
        Ok(PyAllocator {
            inner: Mutex::new(Some(pool)),
            pool_size,
            device: name,
            device_id,
            placement,
        })
    }

    /// Pickles as (device, id, `pool_size`): the receiving process gets a fresh, empty pool
    /// with the same bound (memory never travels).
    fn __reduce__<'py>(&self, py: Python<'py>) -> PyResult<Reduce<'py, (&'static str, i64, u64)>> {
        Ok((
            rebuilder(py, "allocator")?,
            (self.device, self.device_id, self.pool_size),
        ))
    }

    /// Bound on the bytes kept in the idle pool.
    #[getter]
    fn pool_size(&self) -> u64 {
        self.pool_size
    }

    /// The device string: `"cpu"`, `"cuda_host"` or `"cuda"`.
    #[getter]
    fn device(&self) -> &'static str {
        self.device
    }

    /// The device id.
    #[getter]
    fn device_id(&self) -> i64 {
        self.device_id
    }

    /// Whether `close()` was called.
    #[getter]
    fn closed(&self) -> PyResult<bool> {
        Ok(self.pooled()?.is_none())
    }

    /// Pool and live-allocation counters (a dict).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let Some(p) = self.pooled()? else {
            return Err(ClosedError::new_err("allocator is closed"));
        };
        let s = p.pool_stats();
        let d = PyDict::new(py);
        put_stats(&d, "", &s)?;
        if let Some(ds) = self.placement.device_stats() {
            // A device placement: the counters above are its pinned staging pool's.
            put_stats(&d, "device_", &ds)?;
        }
        Ok(d)
    }

    /// Releases the allocator. Views already bound keep working (they share the pool); `bind`
    /// fails afterwards. Idempotent.
    fn close(&self) -> PyResult<()> {
        let mut g = self
            .inner
            .lock()
            .map_err(|_| InternalError::new_err("allocator lock poisoned"))?;
        if let Some(p) = g.take() {
            p.trim();
            self.placement.trim();
        }
        Ok(())
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, _args: &Bound<'_, PyTuple>) -> PyResult<bool> {
        self.close()?;
        Ok(false)
    }

    fn __repr__(&self) -> PyResult<String> {
        Ok(format!(
            "Allocator('{}', {}, pool_size={}{})",
            self.device,
            self.device_id,
            self.pool_size,
            if self.closed()? { ", closed" } else { "" }
        ))
    }
}

/// Writes the pool counters into `d`, each key prefixed with `prefix`.
fn put_stats(d: &Bound<'_, PyDict>, prefix: &str, s: &zrecord::AllocStats) -> PyResult<()> {
    let key = |k: &str| format!("{prefix}{k}");
    d.set_item(key("bytes_retained"), s.bytes_retained)?;
    d.set_item(key("pool_size"), s.pool_size)?;
    d.set_item(key("hits"), s.hits)?;
    d.set_item(key("misses"), s.misses)?;
    d.set_item(key("live_allocations"), s.live_allocations)?;
    d.set_item(key("live_bytes"), s.live_bytes)?;
    d.set_item(key("peak_live_allocations"), s.peak_live_allocations)?;
    Ok(())
}
