"""Helpers behind ``RaggedBatch.from_records`` / ``to_tensors`` for user-built batches."""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np

from . import dtypes as _dt
from .errors import DTypeError, InvalidInputError


def from_records(records: Iterable[Any], dtype: Any = None, ndim: int | None = None):
    want = None if dtype is None else _dt.canonical(dtype)
    arrays = []
    for k, r in enumerate(records):
        if not isinstance(r, np.ndarray):
            if hasattr(r, "__dlpack__"):
                r = _dt.from_dlpack(r)
            else:
                raise TypeError(f"record {k}: expected a NumPy array, got {type(r).__name__}")
        if want is None:
            want = _dt.canonical(r.dtype)
        elif r.dtype != want:
            raise DTypeError(f"record {k}: expected dtype {want}, found {r.dtype}")
        if r.ndim == 0:
            raise InvalidInputError(f"record {k} is 0-D; scalar records belong in a Dense store with item_shape ()")
        if ndim is None:
            ndim = r.ndim
        elif r.ndim != ndim:
            raise InvalidInputError(f"record {k}: expected ndim {ndim}, found {r.ndim} (shape {r.shape})")
        if r.size == 0:
            raise InvalidInputError(f"record {k} is empty (shape {r.shape}); ragged records must be non-empty")
        arrays.append(r)
    if want is None:
        raise InvalidInputError("from_records got no records and no dtype=; cannot infer the dtype")
    if ndim is None:
        ndim = 1
    n = len(arrays)
    lengths = np.fromiter((a.size for a in arrays), dtype=np.int64, count=n)
    cu = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=cu[1:])
    if cu[-1] > np.iinfo(np.int32).max:
        raise InvalidInputError(f"{cu[-1]} values exceed the int32 cu_seqlens limit of one batch")
    shapes = np.array([a.shape for a in arrays], dtype=np.uint64).reshape(n, ndim)
    if n:
        values = np.concatenate([a.reshape(-1) for a in arrays])
    else:
        values = np.empty(0, dtype=want)
    return values, cu.astype(np.int32), shapes


def to_tensors(values: Any, cu_seqlens: Any, shapes: Any) -> list:
    v = values if isinstance(values, np.ndarray) else _dt.from_dlpack(values)
    cu = np.asarray(cu_seqlens if isinstance(cu_seqlens, np.ndarray) else np.from_dlpack(cu_seqlens))
    sh = np.asarray(shapes if isinstance(shapes, np.ndarray) else np.from_dlpack(shapes))
    return [v[cu[k]:cu[k + 1]].reshape(tuple(int(d) for d in sh[k])) for k in range(len(cu) - 1)]
