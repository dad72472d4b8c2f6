//! Benchmark-only hooks, compiled with the `bench-hooks` feature (off by default): they exist
//! for `scripts/bench_python.py` and are not part of the public API.

use pyo3::prelude::*;

use crate::errors::{IntoPyResult, InvalidTypeError, guard};
use crate::index::index_vec;
use crate::view::PyDenseView;

/// Benchmark helper: runs `view.gather(idx)` `iters` times in Rust (no Python in the loop) and
/// returns nanoseconds per call.
#[pyfunction]
pub(crate) fn _bench_gather(
    py: Python<'_>,
    view: &Bound<'_, PyAny>,
    idx: &Bound<'_, PyAny>,
    iters: u64,
) -> PyResult<f64> {
    let v = view
        .cast::<PyDenseView>()
        .map_err(|_| InvalidTypeError::new_err("_bench_gather expects a DenseView"))?
        .get()
        .view
        .clone();
    let idx = index_vec(idx, v.len())?;
    let r = py.detach(move || {
        guard(|| {
            let t = std::time::Instant::now();
            for _ in 0..iters.max(1) {
                std::hint::black_box(v.gather(&idx)?);
            }
            Ok::<f64, zrecord::Error>(t.elapsed().as_nanos() as f64 / iters.max(1) as f64)
        })
    });
    r.py_err(py)
}
