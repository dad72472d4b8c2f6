//! `loaderx.Allocator`: the placement a store is bound to (a bounded, pooled CPU allocator),
//! its counters and its life cycle.

use std::sync::{Arc, Mutex};

use loaderx::PooledAllocator;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use crate::errors::{ClosedError, InternalError, InvalidInputError, UnsupportedDeviceError};
use crate::pickle::{Reduce, rebuilder};

/// A placement: `Allocator("cpu", 0, pool_size=...)`, a bounded pooled CPU allocator.
#[pyclass(name = "Allocator", module = "loaderx", frozen)]
pub(crate) struct PyAllocator {
    inner: Mutex<Option<Arc<PooledAllocator>>>,
    pool_size: u64,
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
    #[pyo3(signature = (device="cpu", device_id=0, *, pool_size=loaderx::DEFAULT_POOL_SIZE))]
    fn py_new(device: &str, device_id: i64, pool_size: u64) -> PyResult<Self> {
        let kind = device.to_ascii_lowercase();
        match kind.as_str() {
            "cpu" => {}
            "cuda" | "gpu" | "rocm" | "amdgpu" | "hip" | "mps" | "xpu" => {
                return Err(UnsupportedDeviceError::new_err(format!(
                    "device {device:?} is not supported by this build; only \"cpu\" placement is available (see loaderx.backend)"
                )));
            }
            _ => {
                return Err(InvalidInputError::new_err(format!(
                    "unknown device {device:?}; expected \"cpu\""
                )));
            }
        }
        if device_id != 0 {
            return Err(InvalidInputError::new_err(format!(
                "the CPU has one device, id 0; got device_id {device_id}"
            )));
        }
        Ok(PyAllocator {
            inner: Mutex::new(Some(Arc::new(PooledAllocator::new(pool_size)))),
            pool_size,
        })
    }

    /// Pickles as (device, id, `pool_size`): the receiving process gets a fresh, empty pool
    /// with the same bound (memory never travels).
    fn __reduce__<'py>(&self, py: Python<'py>) -> PyResult<Reduce<'py, (&'static str, i64, u64)>> {
        Ok((rebuilder(py, "allocator")?, ("cpu", 0, self.pool_size)))
    }

    /// Bound on the bytes kept in the idle pool.
    #[getter]
    fn pool_size(&self) -> u64 {
        self.pool_size
    }

    /// The device string, `"cpu"`.
    #[getter]
    fn device(&self) -> &'static str {
        "cpu"
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
        d.set_item("bytes_retained", s.bytes_retained)?;
        d.set_item("pool_size", s.pool_size)?;
        d.set_item("hits", s.hits)?;
        d.set_item("misses", s.misses)?;
        d.set_item("live_allocations", s.live_allocations)?;
        d.set_item("live_bytes", s.live_bytes)?;
        d.set_item("peak_live_allocations", s.peak_live_allocations)?;
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
            "Allocator('cpu', 0, pool_size={}{})",
            self.pool_size,
            if self.closed()? { ", closed" } else { "" }
        ))
    }
}
