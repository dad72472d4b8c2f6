//! The bridge to `loaderx.dtypes` (the NumPy / ml_dtypes catalog).

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyList;
use zrecord::{DType, dlpack_code};

/// The catalog's NumPy dtype objects, in `DType::ALL` order.
fn catalog(py: Python<'_>) -> PyResult<&Vec<Py<PyAny>>> {
    static CATALOG: PyOnceLock<Vec<Py<PyAny>>> = PyOnceLock::new();
    CATALOG.get_or_try_init(py, || {
        let m = py.import("loaderx.dtypes")?;
        DType::ALL
            .iter()
            .map(|d| m.getattr(d.name()).map(Bound::unbind))
            .collect()
    })
}

fn index_of(d: DType) -> usize {
    DType::ALL.iter().position(|&x| x == d).unwrap_or(0)
}

/// The NumPy dtype for `d`.
pub(crate) fn dtype_obj(py: Python<'_>, d: DType) -> PyResult<Bound<'_, PyAny>> {
    Ok(catalog(py)?[index_of(d)].bind(py).clone())
}

/// Canonicalizes any dtype-like through `loaderx.dtypes.canonical` (which rejects structured,
/// subarray, object, metadata-bearing, non-native-endian and zero-itemsize dtypes).
pub(crate) fn parse_dtype(obj: &Bound<'_, PyAny>) -> PyResult<DType> {
    let py = obj.py();
    let name: String = py
        .import("loaderx.dtypes")?
        .getattr("_canonical_name")?
        .call1((obj,))?
        .extract()?;
    DType::from_name(&name).ok_or_else(|| {
        crate::errors::DTypeError::new_err(format!("dtype {name:?} is not in the catalog"))
    })
}

/// Whether NumPy can exchange `d` through DLPack itself (ml_dtypes types cannot).
pub(crate) fn numpy_native(d: DType) -> bool {
    let code = d.dlpack().0;
    code != dlpack_code::BFLOAT && code < dlpack_code::FLOAT8_E3M4
}

/// For an ml_dtypes NumPy dtype (bfloat16, float8_*): the catalog entry and the unsigned dtype of
/// the same width whose bytes NumPy can export.
pub(crate) fn ml_storage_dtype<'py>(
    py: Python<'py>,
    dt: &Bound<'py, PyAny>,
) -> PyResult<Option<(DType, Bound<'py, PyAny>)>> {
    let Ok(name) = dt.getattr(pyo3::intern!(py, "name")) else {
        return Ok(None);
    };
    let Ok(name) = name.extract::<String>() else {
        return Ok(None);
    };
    let Some(d) = DType::from_name(&name) else {
        return Ok(None);
    };
    if numpy_native(d) || !dtype_obj(py, d)?.eq(dt)? {
        return Ok(None);
    }
    let uint = if d.itemsize() == 2 {
        DType::UInt16
    } else {
        DType::UInt8
    };
    Ok(Some((d, dtype_obj(py, uint)?)))
}

/// `[(name, itemsize, (code, bits, lanes)), ...]` for `loaderx.dtypes`.
pub(crate) fn catalog_table(py: Python<'_>) -> PyResult<Bound<'_, PyList>> {
    let rows: Vec<(&str, usize, (u8, u8, u16))> = DType::ALL
        .iter()
        .map(|d| (d.name(), d.itemsize(), d.dlpack()))
        .collect();
    PyList::new(py, rows)
}
