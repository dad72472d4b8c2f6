"""Offline Hugging Face conversion: one Arrow-backed ``datasets.Dataset`` -> one root of aligned
Zrecord stores (one per column).

* primitive columns and (nested) fixed-size lists of primitives -> Dense stores
  (``item_shape`` from the list sizes);
* ``List<primitive>`` -> 1-D Ragged;
* ``struct{values: List<primitive>, shape: FixedSizeList<uint64, ndim>}`` -> N-D Ragged;
* every other column kind (binary, string, null, dictionary, nested dynamic lists, decoded Image /
  Audio, ...) fails with :class:`~loaderx.errors.UnsupportedColumnError` before anything is written.

The root is published (renamed into place) only after every column has been written and all record
counts agree; on any failure nothing appears at ``path``. A URL ``path`` (``s3://bucket/prefix``, with
``storage_options``) is written the same way in a local temporary directory, then each column is
published to ``path/<column>`` (atomically per column: uploaded, manifest last); a failure during
the uploads names the columns already published. Requires ``pip install 'loaderx[converter]'``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

import numpy as np

from . import dtypes as _dt
from .errors import AlreadyExistsError, InvalidInputError, UnsupportedColumnError
from .zrecord import DenseStore, DenseWriter, RaggedBatch, RaggedStore, RaggedWriter

__all__ = ["convert"]


def _pa():
    try:
        import pyarrow as pa
    except ImportError as e:  # pragma: no cover - exercised only without the extra
        raise ImportError("loaderx.converter needs pyarrow and datasets: pip install 'loaderx[converter]'") from e
    return pa


def _primitive_dtype(t) -> np.dtype | None:
    pa = _pa()
    if pa.types.is_boolean(t) or pa.types.is_integer(t) or pa.types.is_floating(t):
        return _dt.canonical(np.dtype(t.to_pandas_dtype()))
    return None


def _is_list(t) -> bool:
    pa = _pa()
    return pa.types.is_list(t) or pa.types.is_large_list(t)


class _Plan:
    def __init__(self, name: str, kind: str, dtype: np.dtype, item_shape=(), ndim: int = 1):
        self.name, self.kind, self.dtype, self.item_shape, self.ndim = name, kind, dtype, tuple(item_shape), ndim


def _plan(name: str, t) -> _Plan:
    pa = _pa()
    if not name or name in (".", "..") or "/" in name or "\\" in name or name.startswith("."):
        raise InvalidInputError(f"column name {name!r} cannot be used as a store directory name")
    p = _primitive_dtype(t)
    if p is not None:
        return _Plan(name, "dense", p)
    if pa.types.is_fixed_size_list(t):
        shape, inner = [], t
        while pa.types.is_fixed_size_list(inner):
            shape.append(inner.list_size)
            inner = inner.value_type
        p = _primitive_dtype(inner)
        if p is None:
            raise UnsupportedColumnError(f"column {name!r}: fixed-size list of {inner} is not supported (primitive values only)")
        if 0 in shape:
            raise UnsupportedColumnError(f"column {name!r}: fixed-size list of size 0 gives empty records")
        return _Plan(name, "dense", p, shape)
    if _is_list(t):
        p = _primitive_dtype(t.value_type)
        if p is None:
            raise UnsupportedColumnError(
                f"column {name!r}: List<{t.value_type}> is not supported; only List<primitive> (1-D Ragged) "
                "or struct{{values: List<primitive>, shape: FixedSizeList<uint64, ndim>}} (N-D Ragged)"
            )
        return _Plan(name, "ragged1", p)
    if pa.types.is_struct(t):
        names = sorted(t.field(i).name for i in range(t.num_fields))
        if names == ["shape", "values"]:
            vt, st = t.field("values").type, t.field("shape").type
            p = _primitive_dtype(vt.value_type) if _is_list(vt) else None
            if (
                p is not None
                and pa.types.is_fixed_size_list(st)
                and pa.types.is_uint64(st.value_type)
                and st.list_size >= 1
            ):
                return _Plan(name, "raggedN", p, ndim=st.list_size)
        raise UnsupportedColumnError(
            f"column {name!r}: struct {t} is not supported; an N-D ragged column must be "
            "struct{values: List<primitive>, shape: FixedSizeList<uint64, ndim>}"
        )
    raise UnsupportedColumnError(
        f"column {name!r} of Arrow type {t} is not supported (binary, string, null, dictionary, nested dynamic "
        "lists and decoded Image/Audio columns fail explicitly; materialize them with Dataset.map first)"
    )


def _check_shape_counts(name: str, shapes: np.ndarray, lengths: np.ndarray, row0: int) -> None:
    """Raises :class:`InvalidInputError` naming the first row (counted from ``row0``) whose shape
    (a row of ``shapes``) does not hold exactly its ``lengths`` values."""
    counts = np.prod(shapes, axis=1, dtype=np.uint64)
    bad = np.flatnonzero(counts != lengths.astype(np.uint64))
    if bad.size:
        r = int(bad[0])
        raise InvalidInputError(
            f"column {name!r} row {row0 + r}: shape {tuple(int(d) for d in shapes[r])} holds {int(counts[r])} "
            f"values but the row holds {int(lengths[r])}"
        )


def _no_nulls(name: str, arr) -> None:
    if arr.null_count:
        raise InvalidInputError(f"column {name!r} holds {arr.null_count} null value(s); nulls cannot be stored")


def _np(arr, dtype: np.dtype) -> np.ndarray:
    if dtype == _dt.bool:
        out = arr.to_numpy(zero_copy_only=False)
    else:
        out = arr.to_numpy(zero_copy_only=True)
    return np.ascontiguousarray(out)


def _list_parts(name: str, arr, dtype: np.dtype, row0: int):
    _no_nulls(name, arr)
    offsets = np.asarray(arr.offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
    values = arr.flatten()
    _no_nulls(name, values)
    lengths = np.diff(offsets)
    empty = np.flatnonzero(lengths == 0)
    if empty.size:
        raise InvalidInputError(f"column {name!r} row {row0 + int(empty[0])} is an empty list; ragged records must be non-empty")
    cu = offsets - offsets[0]
    if cu[-1] > np.iinfo(np.int32).max:
        raise InvalidInputError(f"column {name!r}: one Arrow chunk holds more than INT32_MAX values")
    return _np(values, dtype), cu.astype(np.int32), lengths


def _append(plan: _Plan, w, chunk, row0: int) -> None:
    pa = _pa()
    n = len(chunk)
    if n == 0:
        return
    if plan.kind == "dense":
        _no_nulls(plan.name, chunk)
        flat = chunk
        while pa.types.is_fixed_size_list(flat.type):
            flat = flat.flatten()
            _no_nulls(plan.name, flat)
        w.append(_np(flat, plan.dtype).reshape((n, *plan.item_shape)))
    elif plan.kind == "ragged1":
        values, cu, lengths = _list_parts(plan.name, chunk, plan.dtype, row0)
        w.append(RaggedBatch(values, cu, lengths.astype(np.uint64).reshape(n, 1)))
    else:
        _no_nulls(plan.name, chunk)
        fields = {f.name: a for f, a in zip(chunk.type, chunk.flatten())}
        values, cu, lengths = _list_parts(plan.name, fields["values"], plan.dtype, row0)
        shape_arr = fields["shape"]
        _no_nulls(plan.name, shape_arr)
        shapes = np.ascontiguousarray(shape_arr.flatten().to_numpy(zero_copy_only=False).astype(np.uint64).reshape(n, plan.ndim))
        _check_shape_counts(plan.name, shapes, lengths, row0)
        w.append(RaggedBatch(values, cu, shapes))


def _write_columns(table, plans, tmp: str, codec: str, data_shards: int, dict_bytes) -> None:
    """Writes every column into ``tmp/<column>`` and checks that the record counts agree."""
    for plan in plans:
        dest = os.path.join(tmp, plan.name)
        if plan.kind == "dense":
            w = DenseWriter(dest, plan.dtype, plan.item_shape, codec, data_shards, dict_bytes)
        else:
            w = RaggedWriter(dest, plan.dtype, plan.ndim, codec, data_shards, dict_bytes)
        with w:
            row0 = 0
            for chunk in table.column(plan.name).chunks:
                _append(plan, w, chunk, row0)
                row0 += len(chunk)
    counts = {}
    for plan in plans:
        cls = DenseStore if plan.kind == "dense" else RaggedStore
        with cls(os.path.join(tmp, plan.name)) as s:
            counts[plan.name] = len(s)
    if set(counts.values()) != {table.num_rows}:
        raise InvalidInputError(f"record counts disagree: {counts} (dataset has {table.num_rows} rows)")


def _convert_to_url(table, plans, url: str, codec: str, data_shards: int, dict_bytes, storage_options):
    from .zrecord import publish

    if publish is None:  # pragma: no cover
        raise InvalidInputError(f"{url}: this build of loaderx has no object-storage support")
    for plan in plans:
        cls = DenseStore if plan.kind == "dense" else RaggedStore
        try:
            cls(f"{url}/{plan.name}", storage_options=storage_options).close()
        except FileNotFoundError:
            continue
        raise AlreadyExistsError(f"destination {url}/{plan.name} already holds a container")
    tmp = tempfile.mkdtemp(prefix=".loaderx-convert-")
    try:
        _write_columns(table, plans, tmp, codec, data_shards, dict_bytes)
        done: list[str] = []
        for plan in plans:
            try:
                publish(os.path.join(tmp, plan.name), f"{url}/{plan.name}", storage_options=storage_options)
            except BaseException as e:
                if done:
                    e.add_note(f"columns already published at {url}: {', '.join(done)}")
                raise
            done.append(plan.name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {p.name: ("dense" if p.kind == "dense" else "ragged") for p in plans}


def convert(dataset: Any, path: str | os.PathLike, codec: str = "zstd", *, data_shards: int = 4,
            dict_bytes: bytes | None = None, storage_options: dict | None = None) -> dict[str, str]:
    """Writes every column of ``dataset`` to ``path/<column>`` and publishes the root atomically
    (at a URL: each column, once all are written and checked).

    Returns ``{column: "dense" | "ragged"}``. ``path`` must not exist (at a URL: hold no column)."""
    pa = _pa()
    try:
        from datasets import Dataset
    except ImportError as e:  # pragma: no cover
        raise ImportError("loaderx.converter needs datasets: pip install 'loaderx[converter]'") from e
    if not isinstance(dataset, Dataset):
        raise TypeError(
            f"convert expects one datasets.Dataset, got {type(dataset).__name__}; handle DatasetDict splits in "
            "the caller, IterableDataset is not supported"
        )
    if getattr(dataset, "_indices", None) is not None:
        dataset = dataset.flatten_indices()
    table = dataset.data.table
    if not isinstance(table, pa.Table):  # pragma: no cover
        table = pa.table(table)
    url = os.fspath(path) if "://" in os.fspath(path) else None
    root = os.path.abspath(os.fspath(path)) if url is None else ""
    if url is None and os.path.lexists(root):
        raise AlreadyExistsError(f"destination {root} already exists")
    if table.num_columns == 0:
        raise InvalidInputError("the dataset has no columns")
    if table.num_rows == 0:
        raise InvalidInputError("the dataset has no rows; an empty dataset cannot be converted")
    plans = [_plan(f.name, f.type) for f in table.schema]
    if url is not None:
        return _convert_to_url(table, plans, url.rstrip("/"), codec, data_shards, dict_bytes, storage_options)
    parent = os.path.dirname(root)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(root)}.convert-", dir=parent)
    try:
        _write_columns(table, plans, tmp, codec, data_shards, dict_bytes)
        if os.path.lexists(root):
            raise AlreadyExistsError(f"destination {root} already exists")
        dfd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
        os.rename(tmp, root)
        pfd = os.open(parent, os.O_RDONLY)
        try:
            os.fsync(pfd)
        finally:
            os.close(pfd)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return {p.name: ("dense" if p.kind == "dense" else "ragged") for p in plans}
