//! Parsing of record indices (an integer, slice, sequence or integer array) into `u64`s, for
//! view indexing, samplers and helpers.

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyList, PyRange, PySequence, PySlice, PyString, PyTuple};

use crate::errors::{DTypeError, IndexOutOfRangeError, InvalidTypeError, type_name};
use crate::tensor::import;

pub(crate) enum Index {
    One(u64),
    Many(Vec<u64>),
}

fn negative(i: i128, len: u64) -> PyErr {
    IndexOutOfRangeError::new_err(format!(
        "index {i} out of range for a store of {len} records (indices must be in 0..{len}; negative indices are not supported)"
    ))
}

fn to_u64(i: i128, len: u64) -> PyResult<u64> {
    if i < 0 || i > u64::MAX as i128 {
        Err(negative(i, len))
    } else {
        Ok(i as u64)
    }
}

pub(crate) fn one_int(item: &Bound<'_, PyAny>) -> PyResult<i128> {
    if item.is_instance_of::<PyBool>() {
        return Err(InvalidTypeError::new_err(
            "bool is not a valid record index",
        ));
    }
    item.extract::<i128>().map_err(|_| {
        let t = type_name(item);
        InvalidTypeError::new_err(format!("record indices must be integers, got {t}"))
    })
}

/// Indices from an integer, a slice, a `range`, an integer array (DLPack, any strides and integer
/// dtype), a buffer of integers (`array.array`, `memoryview`, ...) or any other sequence of
/// integers (list, tuple, ...).
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
        return Ok(Index::Many(from_iter(t.iter().map(Ok), t.len(), len)?));
    }
    if let Ok(l) = key.cast::<PyList>() {
        return Ok(Index::Many(from_iter(l.iter().map(Ok), l.len(), len)?));
    }
    if let Ok(r) = key.cast::<PyRange>() {
        return Ok(Index::Many(from_range(r, len)?));
    }
    if key.hasattr(pyo3::intern!(py, "__dlpack__"))? {
        return from_array(key, len);
    }
    if key.is_instance_of::<PyBool>() || key.hasattr(pyo3::intern!(py, "__index__"))? {
        return Ok(Index::One(to_u64(one_int(key)?, len)?));
    }
    if !key.is_instance_of::<PyString>()
        && let Ok(mv) = py.import("builtins")?.getattr("memoryview")?.call1((key,))
    {
        // A buffer (array.array, memoryview, ...): viewed as a NumPy array of its own item format
        // (no copy), then read like any integer array.
        let arr = py.import("numpy")?.getattr("asarray")?.call1((&mv,))?;
        return from_array(&arr, len);
    }
    // Any other sequence (collections.abc.Sequence, not a string): its items, in order.
    match key.cast::<PySequence>() {
        Ok(seq) if !key.is_instance_of::<PyString>() => {
            let n = seq.len().unwrap_or(0);
            Ok(Index::Many(from_iter(key.try_iter()?, n, len)?))
        }
        _ => Ok(Index::One(to_u64(one_int(key)?, len)?)),
    }
}

/// The indices of an iterable of Python integers.
fn from_iter<'py>(
    items: impl Iterator<Item = PyResult<Bound<'py, PyAny>>>,
    size_hint: usize,
    len: u64,
) -> PyResult<Vec<u64>> {
    let mut v = Vec::with_capacity(size_hint);
    for item in items {
        v.push(to_u64(one_int(&item?)?, len)?);
    }
    Ok(v)
}

/// The indices of a `range` (computed, not iterated in Python).
fn from_range(r: &Bound<'_, PyRange>, len: u64) -> PyResult<Vec<u64>> {
    let start: i128 = r.getattr("start")?.extract()?;
    let step: i128 = r.getattr("step")?.extract()?;
    let n = r.len()?;
    let mut v = Vec::with_capacity(n);
    let mut i = start;
    for _ in 0..n {
        v.push(to_u64(i, len)?);
        i += step;
    }
    Ok(v)
}

/// The indices of a 0-D or 1-D integer array of any integer dtype and strides.
fn from_array(key: &Bound<'_, PyAny>, len: u64) -> PyResult<Index> {
    let imp = import(key, "index array")?;
    if imp.shape().len() > 1 {
        return Err(InvalidTypeError::new_err(format!(
            "index arrays must be 0-D or 1-D, got shape {:?}",
            imp.shape()
        )));
    }
    let els = imp.int_elements().ok_or_else(|| {
        DTypeError::new_err(format!(
            "index arrays must have an integer dtype, got {}",
            imp.dtype()
        ))
    })?;
    let mut v = Vec::with_capacity(els.len());
    for e in els.iter().copied() {
        v.push(to_u64(e, len)?);
    }
    Ok(if imp.shape().is_empty() {
        Index::One(v[0])
    } else {
        Index::Many(v)
    })
}

/// Indices as a flat `Vec<u64>` (for samplers and helpers).
pub(crate) fn index_vec(key: &Bound<'_, PyAny>, len: u64) -> PyResult<Vec<u64>> {
    Ok(match parse_indices(key, len)? {
        Index::One(i) => vec![i],
        Index::Many(v) => v,
    })
}
