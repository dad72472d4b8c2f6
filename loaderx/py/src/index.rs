//! Parsing of record indices (an integer, slice, sequence or integer array) into `u64`s, for
//! view indexing, samplers and helpers.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyList, PySlice, PyTuple};

use crate::errors::{raise, type_name};
use crate::tensor::import;

pub(crate) enum Index {
    One(u64),
    Many(Vec<u64>),
}

fn negative(py: Python<'_>, i: i128, len: u64) -> PyErr {
    raise(
        py,
        "IndexOutOfRangeError",
        format!(
            "index {i} out of range for a store of {len} records (indices must be in 0..{len}; negative indices are not supported)"
        ),
    )
}

fn to_u64(py: Python<'_>, i: i128, len: u64) -> PyResult<u64> {
    if i < 0 || i > u64::MAX as i128 {
        Err(negative(py, i, len))
    } else {
        Ok(i as u64)
    }
}

pub(crate) fn one_int(item: &Bound<'_, PyAny>) -> PyResult<i128> {
    if item.is_instance_of::<pyo3::types::PyBool>() {
        return Err(PyTypeError::new_err("bool is not a valid record index"));
    }
    item.extract::<i128>().map_err(|_| {
        let t = type_name(item);
        PyTypeError::new_err(format!("record indices must be integers, got {t}"))
    })
}

/// Indices from a sequence, slice, integer or integer array (DLPack, any strides).
pub(crate) fn parse_indices(key: &Bound<'_, PyAny>, len: u64) -> PyResult<Index> {
    let py = key.py();
    if let Ok(s) = key.cast::<PySlice>() {
        let ind = s.indices(len.min(isize::MAX as u64) as isize)?;
        let mut v = Vec::with_capacity(ind.slicelength);
        let mut i = ind.start;
        for _ in 0..ind.slicelength {
            v.push(i as u64);
            i += ind.step;
        }
        return Ok(Index::Many(v));
    }
    if let Ok(t) = key.cast::<PyTuple>() {
        let mut v = Vec::with_capacity(t.len());
        for item in t.iter() {
            v.push(to_u64(py, one_int(&item)?, len)?);
        }
        return Ok(Index::Many(v));
    }
    if let Ok(l) = key.cast::<PyList>() {
        let mut v = Vec::with_capacity(l.len());
        for item in l.iter() {
            v.push(to_u64(py, one_int(&item)?, len)?);
        }
        return Ok(Index::Many(v));
    }
    if key.hasattr(pyo3::intern!(py, "__dlpack__"))? {
        let imp = import(key, "index array")?;
        if imp.shape().len() > 1 {
            return Err(PyTypeError::new_err(format!(
                "index arrays must be 0-D or 1-D, got shape {:?}",
                imp.shape()
            )));
        }
        let els = imp.int_elements().ok_or_else(|| {
            PyTypeError::new_err(format!(
                "index arrays must have an integer dtype, got {}",
                imp.dtype()
            ))
        })?;
        let mut v = Vec::with_capacity(els.len());
        for e in els.iter().copied() {
            v.push(to_u64(py, e, len)?);
        }
        return Ok(if imp.shape().is_empty() {
            Index::One(v[0])
        } else {
            Index::Many(v)
        });
    }
    Ok(Index::One(to_u64(py, one_int(key)?, len)?))
}

/// Indices as a flat `Vec<u64>` (for samplers and helpers).
pub(crate) fn index_vec(key: &Bound<'_, PyAny>, len: u64) -> PyResult<Vec<u64>> {
    Ok(match parse_indices(key, len)? {
        Index::One(i) => vec![i],
        Index::Many(v) => v,
    })
}
