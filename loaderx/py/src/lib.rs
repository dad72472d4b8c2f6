//! Python bindings for zrecord and loaderx: the `loaderx._loaderx` extension module (PyO3, abi3).
//!
//! The Python package (`loaderx/py/python/loaderx`) re-exports these classes; see `docs/python.md`.

mod allocator;
#[cfg(feature = "bench-hooks")]
mod bench;
mod dataset;
mod dlpack;
mod dtypes;
mod errors;
mod gpu;
mod index;
mod loader;
mod packed;
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

/// Adds each class to the module.
macro_rules! add_classes {
    ($m:ident, $($class:ty),+) => {
        $($m.add_class::<$class>()?;)+
    };
}

#[pymodule]
fn _loaderx(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    errors::check_catalog(py)?;
    add_classes!(
        m,
        allocator::PyAllocator,
        tensor::PyDLTensor,
        tensor::PyRaggedBatch
    );
    add_classes!(m, store::PyDenseStore, store::PyRaggedStore);
    add_classes!(m, view::PyDenseView, view::PyRaggedView);
    add_classes!(m, writer::PyDenseWriter, writer::PyRaggedWriter);
    add_classes!(m, sampler::PySampler, sampler::PyMode, loader::PyLoader);
    m.add_function(wrap_pyfunction!(view::train_dict, m)?)?;
    m.add_function(wrap_pyfunction!(sampler::block_buffer_blocks, m)?)?;
    m.add_function(wrap_pyfunction!(dataset::_dataset_commit, m)?)?;
    m.add_function(wrap_pyfunction!(dataset::_dataset_describe_part, m)?)?;
    m.add_function(wrap_pyfunction!(dataset::_dataset_versions, m)?)?;
    m.add_function(wrap_pyfunction!(dataset::_dataset_info, m)?)?;
    m.add_function(wrap_pyfunction!(dataset::_dataset_gc, m)?)?;
    m.add_function(wrap_pyfunction!(dataset::_dataset_part_path, m)?)?;
    m.add_function(wrap_pyfunction!(dataset::_dataset_new_part_name, m)?)?;
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
