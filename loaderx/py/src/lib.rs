//! Python bindings for zrecord and loaderx: the `loaderx._loaderx` extension module (PyO3, abi3).
//!
//! The Python package (`loaderx/py/python/loaderx`) re-exports these classes; see `docs/python.md`.

mod allocator;
#[cfg(feature = "bench-hooks")]
mod bench;
mod dlpack;
mod dtypes;
mod errors;
mod gpu;
mod index;
mod loader;
mod pickle;
mod ragged_append;
mod raw;
mod remote;
mod sampler;
mod store;
mod tensor;
mod view;
mod writer;

use pyo3::prelude::*;

#[pymodule]
fn _loaderx(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    errors::check_catalog(py)?;
    m.add_class::<allocator::PyAllocator>()?;
    m.add_class::<store::PyDenseStore>()?;
    m.add_class::<store::PyRaggedStore>()?;
    m.add_class::<view::PyDenseView>()?;
    m.add_class::<view::PyRaggedView>()?;
    m.add_class::<writer::PyDenseWriter>()?;
    m.add_class::<writer::PyRaggedWriter>()?;
    m.add_class::<tensor::PyDLTensor>()?;
    m.add_class::<tensor::PyRaggedBatch>()?;
    m.add_class::<sampler::PySampler>()?;
    m.add_class::<sampler::PyMode>()?;
    m.add_class::<loader::PyLoader>()?;
    m.add_function(wrap_pyfunction!(view::train_dict, m)?)?;
    #[cfg(feature = "remote")]
    {
        m.add_function(wrap_pyfunction!(remote::publish, m)?)?;
        m.add_function(wrap_pyfunction!(remote::gc, m)?)?;
    }
    #[cfg(feature = "bench-hooks")]
    m.add_function(wrap_pyfunction!(bench::_bench_gather, m)?)?;
    m.add("DEFAULT_DICT_BYTES", zrecord::DEFAULT_DICT_BYTES)?;
    m.add("DEFAULT_POOL_SIZE", loaderx::DEFAULT_POOL_SIZE)?;
    m.add("DEFAULT_DATA_SHARDS", zrecord::DEFAULT_DATA_SHARDS)?;
    m.add("_DTYPES", dtypes::catalog_table(py)?)?;
    Ok(())
}
