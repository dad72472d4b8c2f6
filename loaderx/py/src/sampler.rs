//! `loaderx.sampler.Sampler` and the adapters the loader draws from.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use loaderx::{IndexSampler, Mode, Sampler};
use pyo3::prelude::*;
use pyo3::types::PyType;
use zrecord::{Allocation, Allocator, DType, OUTPUT_ALIGN, SystemAllocator};

use crate::errors::{InternalError, IntoPyResult, InvalidInputError, InvalidTypeError};
use crate::index::index_vec;
use crate::tensor::PyDLTensor;

/// Sampling mode: `SEQUENTIAL`, `IID` (uniform with replacement), `CYCLIC` (a fresh permutation
/// per cycle, full batches only) or `BLOCK` (a block shuffle: blocks of consecutive records in a
/// permuted order, records permuted within windows of blocks; every record once per epoch).
#[pyclass(name = "Mode", module = "loaderx.sampler", eq, eq_int, frozen, hash)]
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum PyMode {
    #[pyo3(name = "SEQUENTIAL")]
    Sequential,
    #[pyo3(name = "IID")]
    Iid,
    #[pyo3(name = "CYCLIC")]
    Cyclic,
    #[pyo3(name = "BLOCK")]
    Block,
}

impl PyMode {
    /// The core mode (`BLOCK`: the default block and window, [`Mode::block_default`]).
    pub(crate) fn core(self) -> Mode {
        match self {
            PyMode::Sequential => Mode::Sequential,
            PyMode::Iid => Mode::Iid,
            PyMode::Cyclic => Mode::Cyclic,
            PyMode::Block => Mode::block_default(),
        }
    }

    /// The Python name (`SEQUENTIAL`, `IID`, `CYCLIC`, `BLOCK`).
    pub(crate) fn name(self) -> &'static str {
        match self {
            PyMode::Sequential => "SEQUENTIAL",
            PyMode::Iid => "IID",
            PyMode::Cyclic => "CYCLIC",
            PyMode::Block => "BLOCK",
        }
    }

    /// The mode named `name` (any case: `"sequential"`, `"iid"`, `"cyclic"`, `"block"`).
    fn from_name(name: &str) -> Option<PyMode> {
        match name.to_ascii_lowercase().as_str() {
            "sequential" => Some(PyMode::Sequential),
            "iid" => Some(PyMode::Iid),
            "cyclic" => Some(PyMode::Cyclic),
            "block" => Some(PyMode::Block),
            _ => None,
        }
    }
}

/// The core mode of a `Sampler(mode=..., block=..., window=..., record_bytes=...)`: `mode` a
/// `Sampler.Mode` or its name. A block shuffle takes the block and window given, the rest from
/// `record_bytes` when given ([`Mode::block_for_record_bytes`]), else from the fixed default
/// ([`Mode::block_default`]); the other modes refuse the three.
fn core_mode(
    mode: &Bound<'_, PyAny>,
    block: Option<u64>,
    window: Option<u64>,
    record_bytes: Option<u64>,
) -> PyResult<Mode> {
    let m = if let Ok(m) = mode.cast::<PyMode>() {
        *m.get()
    } else if let Ok(name) = mode.extract::<String>() {
        PyMode::from_name(&name).ok_or_else(|| {
            InvalidInputError::new_err(format!(
                "mode {name:?} is not one of \"sequential\", \"iid\", \"cyclic\", \"block\""
            ))
        })?
    } else {
        return Err(InvalidTypeError::new_err(format!(
            "mode must be a Sampler.Mode or its name, got {}",
            mode.get_type().name()?
        )));
    };
    if m != PyMode::Block {
        if block.is_some() || window.is_some() || record_bytes.is_some() {
            return Err(InvalidInputError::new_err(format!(
                "block=, window= and record_bytes= apply to mode \"block\" only, not {:?}",
                m.name().to_ascii_lowercase()
            )));
        }
        return Ok(m.core());
    }
    let base = match record_bytes {
        Some(bytes) => Mode::block_for_record_bytes(bytes),
        None => Mode::block_default(),
    };
    let Mode::Block {
        block: b,
        window: w,
    } = base
    else {
        return Err(InternalError::new_err(
            "a block default that is not a block mode",
        ));
    };
    Ok(Mode::Block {
        block: block.unwrap_or(b),
        window: window.unwrap_or(w),
    })
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

    /// `(len, batch, mode name, seed)`: what a data-parallel fingerprint compares (a block
    /// shuffle's name carries its block and window).
    pub(crate) fn plan(&self) -> (u64, usize, String, u64) {
        let mode = match self.sampler.mode() {
            Mode::Sequential => "SEQUENTIAL".to_string(),
            Mode::Iid => "IID".to_string(),
            Mode::Cyclic => "CYCLIC".to_string(),
            Mode::Block { block, window } => format!("BLOCK(block={block}, window={window})"),
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
    #[pyo3(signature = (n, batch, mode, seed=0, *, block=None, window=None, record_bytes=None))]
    #[allow(clippy::too_many_arguments)]
    fn py_new(
        py: Python<'_>,
        n: u64,
        batch: usize,
        mode: &Bound<'_, PyAny>,
        seed: u64,
        block: Option<u64>,
        window: Option<u64>,
        record_bytes: Option<u64>,
    ) -> PyResult<Self> {
        let m = core_mode(mode, block, window, record_bytes)?;
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

    /// A block shuffle's reads for the batch at `step`: each block the batch touches once, as a
    /// `(k, 2)` uint64 array of `[start, end)` id ranges in ascending order.
    fn block_runs(&self, py: Python<'_>, step: u64) -> PyResult<Py<PyAny>> {
        let mut runs = Vec::new();
        let batch = self.sampler.batch_size();
        self.sampler
            .block_runs_at(step, 0..batch, &mut runs)
            .py_err(py)?;
        runs_array(py, &runs)
    }

    /// A block shuffle's window reads for the batch at `step`: every block of each window the
    /// batch draws from, in the order the epoch permuted them, as a `(k, 2)` uint64 array of
    /// `[start, end)` id ranges.
    fn window_runs(&self, py: Python<'_>, step: u64) -> PyResult<Py<PyAny>> {
        let mut runs = Vec::new();
        let batch = self.sampler.batch_size();
        self.sampler
            .window_runs_at(step, 0..batch, &mut runs)
            .py_err(py)?;
        runs_array(py, &runs)
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

/// Id ranges as a `(k, 2)` uint64 NumPy array of `[start, end)` rows.
fn runs_array(py: Python<'_>, runs: &[std::ops::Range<u64>]) -> PyResult<Py<PyAny>> {
    let flat: Vec<u64> = runs.iter().flat_map(|r| [r.start, r.end]).collect();
    let np = py.import("numpy")?;
    let arr = np.getattr("array")?.call1((flat, "uint64"))?;
    Ok(arr.call_method1("reshape", (-1i64, 2i64))?.unbind())
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

/// The blocks a `Loader`'s block buffer holds for a block shuffle (`block` records a block,
/// `window` blocks a window, `batch` records a step, `record_bytes` each): the window and the
/// blocks one batch spans, plus one; None when that is over the loader's 256 MiB bound (it then
/// reads unbuffered). For readers that buffer a store themselves (`store.buffer_blocks`) the way a
/// loader would.
#[pyfunction]
pub(crate) fn block_buffer_blocks(
    block: u64,
    window: u64,
    batch: usize,
    record_bytes: u64,
) -> Option<usize> {
    loaderx::block_buffer_blocks(block, window, batch, record_bytes)
}
