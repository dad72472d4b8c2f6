//! `loaderx.sampler.Sampler` and the adapters the loader draws from.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use loaderx::{IndexSampler, Mode, Sampler};
use pyo3::prelude::*;
use pyo3::types::PyType;
use zrecord::{Allocation, Allocator, DType, OUTPUT_ALIGN, SystemAllocator};

use crate::errors::{InternalError, IntoPyResult};
use crate::index::index_vec;
use crate::tensor::PyDLTensor;

/// Sampling mode: `SEQUENTIAL`, `IID` (uniform with replacement) or `CYCLIC` (a fresh permutation
/// per cycle, full batches only).
#[pyclass(name = "Mode", module = "loaderx.sampler", eq, eq_int, frozen, hash)]
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum PyMode {
    #[pyo3(name = "SEQUENTIAL")]
    Sequential,
    #[pyo3(name = "IID")]
    Iid,
    #[pyo3(name = "CYCLIC")]
    Cyclic,
}

impl PyMode {
    /// The core mode.
    pub(crate) fn core(self) -> Mode {
        match self {
            PyMode::Sequential => Mode::Sequential,
            PyMode::Iid => Mode::Iid,
            PyMode::Cyclic => Mode::Cyclic,
        }
    }

    /// The Python name (`SEQUENTIAL`, `IID`, `CYCLIC`).
    pub(crate) fn name(self) -> &'static str {
        match self {
            PyMode::Sequential => "SEQUENTIAL",
            PyMode::Iid => "IID",
            PyMode::Cyclic => "CYCLIC",
        }
    }
}

/// A stateless batch sampler. `next()` returns a read-only uint64 NumPy view of one reused buffer,
/// valid until this sampler's next draw; `seek(step)` resumes in O(1).
///
/// The buffer is owned by Rust (`region`); NumPy only views it through DLPack, so it cannot
/// reallocate it (`ndarray.resize` refuses an array that does not own its data) and the pointer
/// `next()` writes through stays valid for the sampler's lifetime.
#[pyclass(name = "Sampler", module = "loaderx.sampler", frozen)]
pub(crate) struct PySampler {
    sampler: IndexSampler,
    step: Arc<AtomicU64>,
    /// `batch_size` uint64 slots, exported (read-only) as `buf`.
    region: Arc<Allocation>,
    buf: Py<PyAny>,
    /// Where a draw is computed before it is copied into `region`.
    scratch: Mutex<Vec<u64>>,
}

impl PySampler {
    /// An adapter sharing this sampler's step counter (the loader draws it forward).
    pub(crate) fn shared(&self) -> SharedSampler {
        SharedSampler {
            buf: vec![0; self.sampler.batch_size()],
            sampler: self.sampler.clone(),
            step: self.step.clone(),
        }
    }

    /// `(len, batch, mode name, seed)`: what a data-parallel fingerprint compares.
    pub(crate) fn plan(&self) -> (u64, usize, &'static str, u64) {
        let mode = match self.sampler.mode() {
            Mode::Sequential => "SEQUENTIAL",
            Mode::Iid => "IID",
            Mode::Cyclic => "CYCLIC",
        };
        (
            self.sampler.len(),
            self.sampler.batch_size(),
            mode,
            self.sampler.seed(),
        )
    }
}

#[pymethods]
impl PySampler {
    #[new]
    #[pyo3(signature = (n, batch, mode, seed=0))]
    fn py_new(
        py: Python<'_>,
        n: u64,
        batch: usize,
        mode: &Bound<'_, PyMode>,
        seed: u64,
    ) -> PyResult<Self> {
        let m = match *mode.get() {
            PyMode::Sequential => Mode::Sequential,
            PyMode::Iid => Mode::Iid,
            PyMode::Cyclic => Mode::Cyclic,
        };
        let sampler = IndexSampler::new(n, batch, m, seed).py_err(py)?;
        let n = sampler.batch_size();
        let region = SystemAllocator::new()
            .acquire(n * size_of::<u64>(), OUTPUT_ALIGN)
            .py_err(py)?;
        let region = Arc::new(region);
        let view = PyDLTensor::new(region.clone(), 0, vec![n as u64], DType::UInt64);
        let buf = py
            .import("numpy")?
            .getattr("from_dlpack")?
            .call1((Py::new(py, view)?,))?;
        buf.getattr("flags")?.setattr("writeable", false)?;
        Ok(PySampler {
            sampler,
            step: Arc::new(AtomicU64::new(0)),
            region,
            buf: buf.unbind(),
            scratch: Mutex::new(vec![0; n]),
        })
    }

    #[classattr]
    #[allow(non_snake_case)]
    fn Mode(py: Python<'_>) -> Py<PyType> {
        py.get_type::<PyMode>().unbind()
    }

    /// Draws the batch at the current step and advances; returns the borrowed index buffer.
    fn next(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let s = self.step.fetch_add(1, Ordering::Relaxed);
        let mut scratch = self
            .scratch
            .lock()
            .map_err(|_| InternalError::new_err("sampler lock poisoned"))?;
        self.sampler.batch_at(s, &mut scratch).py_err(py)?;
        let bytes = scratch.len() * size_of::<u64>();
        if bytes > 0 && bytes <= self.region.len() {
            // SAFETY: `region` is a live allocation (held by `self`) of exactly `bytes` host
            // bytes that Rust never borrows: it is only exported, as the read-only array `buf`, so
            // no Rust reference to it exists, and `as_ptr` carries the region's write permission
            // (the exported-memory contract of `zrecord::Allocation`). The source is our own
            // scratch vector, so the ranges cannot overlap. The GIL is held: no Python code
            // that holds it runs during the copy.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    scratch.as_ptr().cast::<u8>(),
                    self.region.as_ptr().cast_mut(),
                    bytes,
                );
            }
        }
        Ok(self.buf.clone_ref(py))
    }

    /// Moves to `step`: the next draw is the batch at `step`.
    fn seek(&self, step: u64) {
        self.step.store(step, Ordering::Relaxed);
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.next(py)
    }

    fn __repr__(&self) -> String {
        format!(
            "Sampler(len={}, batch={}, mode={:?}, seed={}, step={})",
            self.sampler.len(),
            self.sampler.batch_size(),
            self.sampler.mode(),
            self.sampler.seed(),
            self.step.load(Ordering::Relaxed)
        )
    }
}

/// The loader's view of a `loaderx.sampler.Sampler`: same plan, shared step counter.
pub(crate) struct SharedSampler {
    sampler: IndexSampler,
    step: Arc<AtomicU64>,
    buf: Vec<u64>,
}

impl Sampler for SharedSampler {
    fn next(&mut self) -> loaderx::Result<&[u64]> {
        let s = self.step.fetch_add(1, Ordering::Relaxed);
        self.sampler.batch_at(s, &mut self.buf)?;
        Ok(&self.buf)
    }
    /// Only this process's positions are computed (O(range), not O(batch)).
    fn next_range(&mut self, range: std::ops::Range<usize>) -> loaderx::Result<&[u64]> {
        let out = self.buf.get_mut(..range.len()).ok_or_else(|| {
            loaderx::Error::InvalidArgument("index range is longer than the batch".into())
        })?;
        let s = self.step.fetch_add(1, Ordering::Relaxed);
        self.sampler.batch_range_at(s, range, out)?;
        Ok(out)
    }
    fn batch_size(&self) -> usize {
        self.sampler.batch_size()
    }
    fn len(&self) -> u64 {
        self.sampler.len()
    }
    fn step(&self) -> u64 {
        self.step.load(Ordering::Relaxed)
    }
    fn seek(&mut self, step: u64) -> loaderx::Result<()> {
        self.step.store(step, Ordering::Relaxed);
        Ok(())
    }
    fn spec(&self) -> Option<loaderx::IndexSpec> {
        Some(self.sampler.spec())
    }
}

/// Any Python object with `next()` returning a 1-D integer index array. Its first draw is taken at
/// construction (to learn the batch size) and delivered first. It cannot draw a range: in a
/// data-parallel loader each process draws the whole batch and keeps its slice (the trait's
/// default `next_range`).
pub(crate) struct CustomSampler {
    obj: Py<PyAny>,
    buf: Vec<u64>,
    batch: usize,
    pending: bool,
    steps: u64,
}

impl CustomSampler {
    pub(crate) fn new(obj: &Bound<'_, PyAny>) -> PyResult<Self> {
        let buf = draw(obj)?;
        Ok(CustomSampler {
            obj: obj.clone().unbind(),
            batch: buf.len(),
            buf,
            pending: true,
            steps: 0,
        })
    }
}

fn draw(obj: &Bound<'_, PyAny>) -> PyResult<Vec<u64>> {
    let r = obj.call_method0(pyo3::intern!(obj.py(), "next"))?;
    index_vec(&r, u64::MAX)
}

impl Sampler for CustomSampler {
    fn next(&mut self) -> loaderx::Result<&[u64]> {
        if self.pending {
            self.pending = false;
        } else {
            let obj = &self.obj;
            self.buf =
                Python::attach(|py| draw(obj.bind(py))).map_err(loaderx::Error::transform)?;
        }
        self.steps += 1;
        Ok(&self.buf)
    }
    fn batch_size(&self) -> usize {
        self.batch
    }
    fn len(&self) -> u64 {
        // Unknown: indices are checked by the gather instead.
        0
    }
    fn step(&self) -> u64 {
        self.steps
    }
    fn seek(&mut self, step: u64) -> loaderx::Result<()> {
        self.steps = step;
        Ok(())
    }
}
