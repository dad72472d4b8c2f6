"""loaderx datasets of parts from and into Ray Data (``pip install 'loaderx[ray]'``, ray 2.60).

Write: ``ds.write_datasink(ZrecordDatasink(url, ...))``. Each write task writes its rows as one
part (or one part per ``rows_per_part`` rows) straight to the dataset root (a local path, or an
object-store URL with ``storage_options``), one container per column: Dense from scalar columns and
fixed-shape tensor columns, Ragged from variable-shape tensor columns and lists, ``uint8`` Ragged
from bytes columns. ``on_write_complete`` commits one version listing the parts the tasks returned,
in task order, from the receipts the tasks read of their own parts (no request per part at commit);
a failed job commits nothing and leaves its parts to :func:`loaderx.dataset.gc`.

Read: ``read_zrecord(url, ...)`` (a :class:`ZrecordDatasource`): read tasks over parts and record
ranges of one pinned version; each task opens its stores itself (nothing but the URL, the version
and the options travels with it) and gathers as every loaderx read does, each record's CRC checked.

Reference: docs/ray.md.
"""

from __future__ import annotations

import math
import os
import threading
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from . import dataset as _dataset
from .converter import _check_shape_counts
from . import dtypes as _dt
from .errors import (
    CommitConflictError,
    DTypeError,
    InvalidInputError,
    NotFoundError,
    UnsupportedColumnError,
)
from .zrecord import DenseStore, DenseWriter, RaggedBatch, RaggedStore, RaggedWriter

try:
    import pyarrow as pa
    import ray
    from ray.data import Datasink, Datasource, ReadTask
    from ray.data.block import BlockAccessor, BlockMetadata
    from ray.data.extensions import (
        ArrowTensorArray,
        ArrowVariableShapedTensorType,
    )
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ImportError("loaderx.ray needs Ray Data: pip install 'loaderx[ray]' (ray[data]==2.60.0)") from e

__all__ = ["Dense", "Ragged", "ZrecordDatasink", "ZrecordDatasource", "read_zrecord"]

# The name a single-container part's column (one container per part, no column folder) has in Ray.
SINGLE_COLUMN = "data"

_FIXED_TENSORS = ("ray.data.arrow_tensor", "ray.data.arrow_tensor_v2")
_VAR_TENSOR = "ray.data.arrow_variable_shaped_tensor"


@dataclass(frozen=True)
class Dense:
    """A column stored as a Dense container: every record ``item_shape`` in ``dtype``."""

    dtype: Any
    item_shape: tuple[int, ...] = ()
    codec: str | None = None

    def __post_init__(self):
        object.__setattr__(self, "dtype", _dt.canonical(self.dtype))
        object.__setattr__(self, "item_shape", tuple(int(d) for d in self.item_shape))


@dataclass(frozen=True)
class Ragged:
    """A column stored as a Ragged container: records of rank ``ndim`` and any shape in ``dtype``."""

    dtype: Any
    ndim: int = 1
    codec: str | None = None

    def __post_init__(self):
        object.__setattr__(self, "dtype", _dt.canonical(self.dtype))
        object.__setattr__(self, "ndim", int(self.ndim))


Column = Dense | Ragged


# --------------------------------------------------------------------------------------------------
# Arrow -> writer inputs


def _arrow_dtype(name: str, t) -> np.dtype:
    if pa.types.is_boolean(t) or pa.types.is_integer(t) or pa.types.is_floating(t):
        return _dt.canonical(np.dtype(t.to_pandas_dtype()))
    raise UnsupportedColumnError(
        f"column {name!r}: values of Arrow type {t} cannot be stored (bool, integer and float values only)"
    )


def _fixed_list_shape(t) -> tuple[tuple[int, ...], Any]:
    shape = []
    while pa.types.is_fixed_size_list(t):
        shape.append(t.list_size)
        t = t.value_type
    return tuple(shape), t


def infer_column(name: str, t) -> Column:
    """The column an Arrow type maps to: scalars and fixed-shape tensors (Ray's tensor types, Arrow's
    ``fixed_shape_tensor``, nested fixed-size lists) -> Dense; variable-shape tensors and lists ->
    Ragged; binary -> ``uint8`` Ragged of rank 1. Any other type raises
    :class:`~loaderx.errors.UnsupportedColumnError` naming the column."""
    if isinstance(t, pa.ExtensionType):
        if t.extension_name in _FIXED_TENSORS or isinstance(t, pa.FixedShapeTensorType):
            return Dense(_arrow_dtype(name, t.value_type), tuple(t.shape))
        if t.extension_name == _VAR_TENSOR:
            return Ragged(_arrow_dtype(name, t.value_type), t.ndim)
        raise UnsupportedColumnError(f"column {name!r}: Arrow extension type {t} cannot be stored")
    if pa.types.is_fixed_size_list(t):
        shape, inner = _fixed_list_shape(t)
        return Dense(_arrow_dtype(name, inner), shape)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return Ragged(_arrow_dtype(name, t.value_type), 1)
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return Ragged(_dt.uint8, 1)
    return Dense(_arrow_dtype(name, t), ())


def _check_dtype(name: str, row: int, got: np.dtype, col: Column) -> None:
    if got != col.dtype:
        raise DTypeError(f"column {name!r} row {row}: values are {got}, the column holds {col.dtype}")


def _no_nulls(name: str, arr, row0: int) -> None:
    if arr.null_count:
        bad = int(np.flatnonzero(arr.is_null().to_numpy(zero_copy_only=False))[0])
        raise InvalidInputError(f"column {name!r} row {row0 + bad} is null; nulls cannot be stored")


def _np(arr, dtype: np.dtype) -> np.ndarray:
    out = arr.to_numpy(zero_copy_only=dtype != _dt.bool)
    return np.ascontiguousarray(out)


def _dense_input(name: str, col: Dense, arr, row0: int) -> np.ndarray:
    n = len(arr)
    t = arr.type
    _no_nulls(name, arr, row0)
    if isinstance(t, pa.ExtensionType):
        if t.extension_name == _VAR_TENSOR:
            shapes = arr.storage.field("shape")
            for r in range(n):
                s = tuple(shapes[r].as_py())
                if s != col.item_shape:
                    raise InvalidInputError(
                        f"column {name!r} row {row0 + r}: shape {s}, the Dense column holds {col.item_shape}"
                    )
            values = arr.storage.field("data").flatten()
            _check_dtype(name, row0, _arrow_dtype(name, values.type), col)
            return _np(values, col.dtype).reshape((n, *col.item_shape))
        infer = infer_column(name, t)
        values = arr.storage.flatten()
    elif pa.types.is_fixed_size_list(t):
        infer = infer_column(name, t)
        values = arr
        while pa.types.is_fixed_size_list(values.type):
            values = values.flatten()
    elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t):
        raise InvalidInputError(
            f"column {name!r} row {row0}: variable-length values ({t}), the column is Dense {col.item_shape}"
        )
    else:
        infer = infer_column(name, t)
        values = arr
    _check_dtype(name, row0, infer.dtype, col)
    if not isinstance(infer, Dense) or infer.item_shape != col.item_shape:
        raise InvalidInputError(
            f"column {name!r} row {row0}: shape {getattr(infer, 'item_shape', None)}, "
            f"the Dense column holds {col.item_shape}"
        )
    return _np(values, col.dtype).reshape((n, *col.item_shape))


def _ragged_from(name: str, col: Ragged, values: np.ndarray, offsets: np.ndarray, shapes: np.ndarray,
                 row0: int) -> RaggedBatch:
    lengths = np.diff(offsets)
    empty = np.flatnonzero(lengths == 0)
    if empty.size:
        r = int(empty[0])
        raise InvalidInputError(
            f"column {name!r} row {row0 + r}: an empty record (shape {tuple(int(d) for d in shapes[r])}); "
            "Ragged records must be non-empty"
        )
    _check_shape_counts(name, shapes, lengths, row0)
    if offsets[-1] - offsets[0] > np.iinfo(np.int32).max:
        raise InvalidInputError(f"column {name!r} rows {row0}..: one block holds more than INT32_MAX values")
    cu = (offsets - offsets[0]).astype(np.int32)
    return RaggedBatch(values, cu, np.ascontiguousarray(shapes, dtype=np.uint64))


def _ragged_input(name: str, col: Ragged, arr, row0: int) -> RaggedBatch:
    n = len(arr)
    t = arr.type
    _no_nulls(name, arr, row0)
    if isinstance(t, pa.ExtensionType) and t.extension_name == _VAR_TENSOR:
        data, shape = arr.storage.field("data"), arr.storage.field("shape")
        _no_nulls(name, data, row0)
        _check_dtype(name, row0, _arrow_dtype(name, t.value_type), col)
        sl = np.diff(np.asarray(shape.offsets.to_numpy(zero_copy_only=False), dtype=np.int64))
        wrong = np.flatnonzero(sl != col.ndim)
        if wrong.size:
            r = int(wrong[0])
            raise InvalidInputError(
                f"column {name!r} row {row0 + r}: a tensor of rank {int(sl[r])}, the Ragged column holds rank {col.ndim}"
            )
        shapes = shape.flatten().to_numpy(zero_copy_only=False).astype(np.uint64).reshape(n, col.ndim)
        values = data.flatten()
        offsets = np.asarray(data.offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
        return _ragged_from(name, col, _np(values, col.dtype), offsets, shapes, row0)
    if isinstance(t, pa.ExtensionType) or pa.types.is_fixed_size_list(t):
        # Rows that happened to share one shape: Ray makes a fixed-shape tensor of them.
        infer = infer_column(name, t)
        _check_dtype(name, row0, infer.dtype, col)
        if len(infer.item_shape) != col.ndim:
            raise InvalidInputError(
                f"column {name!r} row {row0}: a tensor of rank {len(infer.item_shape)}, the Ragged column holds "
                f"rank {col.ndim}"
            )
        per = math.prod(infer.item_shape)
        values = _dense_input(name, infer, arr, row0).reshape(-1)
        offsets = np.arange(0, (n + 1) * per, per, dtype=np.int64) if per else np.zeros(n + 1, np.int64)
        shapes = np.tile(np.asarray(infer.item_shape, np.uint64), (n, 1))
        return _ragged_from(name, col, values, offsets, shapes, row0)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        _check_dtype(name, row0, _arrow_dtype(name, t.value_type), col)
        if col.ndim != 1:
            raise InvalidInputError(f"column {name!r} row {row0}: lists are rank 1, the Ragged column holds rank {col.ndim}")
        values = arr.flatten()
        _no_nulls(name, values, row0)
        offsets = np.asarray(arr.offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
        shapes = np.diff(offsets).astype(np.uint64).reshape(n, 1)
        return _ragged_from(name, col, _np(values, col.dtype), offsets, shapes, row0)
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        _check_dtype(name, row0, _dt.uint8, col)
        if col.ndim != 1:
            raise InvalidInputError(f"column {name!r} row {row0}: bytes are rank 1, the Ragged column holds rank {col.ndim}")
        bufs = arr.buffers()
        otype = np.int64 if pa.types.is_large_binary(t) else np.int32
        offsets = np.frombuffer(bufs[1], dtype=otype)[arr.offset:arr.offset + n + 1].astype(np.int64)
        buf = bufs[2]
        raw = np.frombuffer(buf, dtype=np.uint8) if buf is not None else np.zeros(0, np.uint8)
        values = raw[offsets[0]:offsets[-1]]
        shapes = np.diff(offsets).astype(np.uint64).reshape(n, 1)
        return _ragged_from(name, col, values, offsets, shapes, row0)
    raise InvalidInputError(f"column {name!r} row {row0}: scalar values ({t}), the column is Ragged of rank {col.ndim}")


# --------------------------------------------------------------------------------------------------
# The sink


def _per_column(value, name: str, default):
    if isinstance(value, Mapping):
        return value.get(name, default)
    return value if value is not None else default


class _Part:
    """One part being written: one writer per column."""

    def __init__(self, sink: "ZrecordDatasink", tag: str):
        self.name = _dataset.new_part_name(tag)
        self.rows = 0
        self.writers: dict[str, Any] = {}
        try:
            for c, col in sink._columns.items():
                path = _dataset.part_path(sink._root, self.name, c)
                codec = col.codec or _per_column(sink._codec, c, "zstd")
                shards = int(_per_column(sink._data_shards, c, 4))
                dict_bytes = _per_column(sink._dict_bytes, c, None)
                if isinstance(col, Dense):
                    w = DenseWriter(path, col.dtype, col.item_shape, codec, shards, dict_bytes,
                                    storage_options=sink._storage_options)
                else:
                    w = RaggedWriter(path, col.dtype, col.ndim, codec, shards, dict_bytes,
                                     storage_options=sink._storage_options)
                self.writers[c] = w
        except BaseException:
            self.abort()
            raise

    def close(self) -> None:
        for w in self.writers.values():
            w.close()

    def abort(self) -> None:
        for w in self.writers.values():
            try:
                w.abort()
            except Exception:
                pass


class ZrecordDatasink(Datasink):
    """A Ray Data sink writing a loaderx dataset of parts and committing it as one version.

    ``url``: the dataset root (a local path or ``s3://bucket/prefix`` etc. with
    ``storage_options``, the keys the writers take). ``schema``: ``{column: Dense(...) |
    Ragged(...)}`` for the columns to write (default: every column of the first block, mapped by
    :func:`infer_column`; give it for token columns, whose rows Ray turns into a fixed-shape tensor
    whenever one batch's rows happen to share a length). ``codec`` / ``data_shards`` /
    ``dict_bytes``: as the writers take them, one value or ``{column: value}``.
    ``rows_per_part``: at most this many rows per part (default: one part per write task).
    ``mode``: ``"append"`` (the new version lists the newest version's parts, then this job's) or
    ``"overwrite"`` (exactly this job's parts). The version is ``newest + 1`` where newest is the
    version seen when the job started: when another job committed since, the commit raises
    :class:`~loaderx.errors.CommitConflictError` and nothing is committed (the parts are left for
    ``gc``); ``retries=k`` (append only) instead appends onto whatever version is newest, retrying
    up to ``k`` lost races.

    After a successful write, ``result`` is the committed version (as :func:`loaderx.dataset.info`
    gives it) and ``parts`` the part names in the order listed. Rows are listed in task order; set
    ``DataContext.get_current().execution_options.preserve_order = True`` for the dataset's order.
    """

    def __init__(self, url: str | os.PathLike, *, schema: Mapping[str, Column] | None = None,
                 codec: str | Mapping[str, str] = "zstd", data_shards: int | Mapping[str, int] = 4,
                 dict_bytes: bytes | Mapping[str, bytes] | None = None, rows_per_part: int | None = None,
                 mode: str = "append", retries: int = 0, storage_options: dict | None = None):
        self._root = os.fspath(url)
        if "://" not in self._root:
            self._root = os.path.abspath(self._root)
        if mode not in ("append", "overwrite"):
            raise InvalidInputError(f"mode must be 'append' or 'overwrite', not {mode!r}")
        if retries and mode != "append":
            raise InvalidInputError("retries= needs mode='append': an overwrite cannot be retried onto another version")
        if rows_per_part is not None and rows_per_part < 1:
            raise InvalidInputError(f"rows_per_part must be >= 1, not {rows_per_part}")
        self._schema = dict(schema) if schema is not None else None
        if self._schema is not None:
            for c, col in self._schema.items():
                if not isinstance(col, (Dense, Ragged)):
                    raise InvalidInputError(f"schema column {c!r}: expected Dense(...) or Ragged(...), got {col!r}")
        self._codec, self._data_shards, self._dict_bytes = codec, data_shards, dict_bytes
        self._rows_per_part = rows_per_part
        self._mode, self._retries = mode, int(retries)
        self._storage_options = storage_options
        self._columns: dict[str, Column] = dict(self._schema or {})
        self._base: int | None = None
        self.result: dict[str, Any] | None = None
        self.parts: list[str] = []

    def get_name(self) -> str:
        return "Zrecord"

    # -- driver ------------------------------------------------------------------------------------

    def on_write_start(self, schema=None) -> None:
        vs = _dataset.versions(self._root, storage_options=self._storage_options)
        self._base = vs[-1] if vs else 0
        if self._schema is None and isinstance(schema, pa.Schema):
            self._columns = {f.name: infer_column(f.name, f.type) for f in schema}
        for c in self._columns:
            if not c or c in (".", "..") or "/" in c or "\\" in c or c.startswith("."):
                raise InvalidInputError(f"column name {c!r} cannot be used as a container folder name")

    def on_write_complete(self, write_result) -> None:
        by_task: dict[int, list[list]] = {}
        for ret in write_result.write_returns:
            if not ret:
                continue
            # Each write task returns once; a task re-run by Ray (an exception with retries on, or a
            # lost result rebuilt) returns only from the run that succeeded, under the same index.
            by_task.setdefault(int(ret["task"]), ret["parts"])
        listed = [(name, receipt) for t in sorted(by_task) for name, rows, receipt in by_task[t] if rows]
        self.parts = parts = [name for name, _ in listed]
        receipts = [receipt for _, receipt in listed]
        if not parts:
            self.result = None
            return
        so = self._storage_options
        if self._retries:
            self.result = _dataset.append(self._root, receipts, retries=self._retries, storage_options=so)
            return
        vs = _dataset.versions(self._root, storage_options=so)
        newest = vs[-1] if vs else 0
        base = self._base if self._base is not None else newest
        if newest != base:
            raise CommitConflictError(
                f"{self._root}: version {newest} was committed after this job started at version {base}; "
                f"nothing committed (the job's {len(parts)} parts are left for gc)"
            )
        if self._mode == "append" and base:
            self.result = _dataset.append(self._root, receipts, storage_options=so)
        else:
            self.result = _dataset.commit(self._root, receipts, storage_options=so)

    def on_write_failed(self, error: Exception) -> None:
        # Nothing is committed; parts written by tasks that finished are listed by no version and
        # `loaderx.dataset.gc` removes them once older than its `min_age_secs`.
        self.result = None

    # -- write task ------------------------------------------------------------------------------

    def write(self, blocks: Iterable, ctx) -> dict[str, Any]:
        task = int(ctx.task_idx)
        uuid = str(ctx.kwargs.get("write_uuid", ""))[:12]
        tag = f"ray-{uuid}-t{task:05d}"
        done: list[list] = []
        part: _Part | None = None
        row = 0  # rows of this task's input seen so far (named by errors)
        try:
            for block in blocks:
                table = BlockAccessor.for_block(block).to_arrow()
                if not self._columns:
                    self._columns = {f.name: infer_column(f.name, f.type) for f in table.schema}
                missing = [c for c in self._columns if c not in table.column_names]
                if missing:
                    raise InvalidInputError(
                        f"write task {task} row {row}: the block has no column {missing[0]!r} "
                        f"(it has {', '.join(table.column_names)})"
                    )
                table = table.select(list(self._columns))
                start = 0
                while start < table.num_rows:
                    if part is None:
                        part = _Part(self, tag)
                    take = table.num_rows - start
                    if self._rows_per_part:
                        take = min(take, self._rows_per_part - part.rows)
                    self._append(part, table.slice(start, take), task, row)
                    part.rows += take
                    start += take
                    row += take
                    if self._rows_per_part and part.rows >= self._rows_per_part:
                        done.append(self._finish(part))
                        part = None
            if part is not None:
                done.append(self._finish(part))
                part = None
        except BaseException as e:
            if part is not None:
                part.abort()
            e.add_note(f"loaderx.ray: write task {task} into {self._root} (parts published so far, left for gc: "
                       f"{', '.join(p[0] for p in done) or 'none'})")
            raise
        return {"task": task, "parts": done}

    def _finish(self, part: _Part) -> list:
        """Closes (publishes) ``part``; its name, rows and receipt (read here, in the task, so
        that the commit reads nothing per part)."""
        part.close()
        receipt = _dataset.describe_part(self._root, part.name, storage_options=self._storage_options)
        return [part.name, part.rows, receipt]

    def _append(self, part: _Part, table, task: int, row0: int) -> None:
        inputs = {}
        # Every column is converted (and checked) before any is appended: a refused row leaves the
        # writers of this part at equal record counts.
        for c, col in self._columns.items():
            chunks = table.column(c).chunks
            got, r = [], row0
            for ch in chunks:
                if len(ch) == 0:
                    continue
                try:
                    got.append(_dense_input(c, col, ch, r) if isinstance(col, Dense) else _ragged_input(c, col, ch, r))
                except (UnsupportedColumnError, DTypeError, InvalidInputError) as e:
                    e.add_note(f"row numbers count the rows of write task {task}")
                    raise
                r += len(ch)
            inputs[c] = got
        for c, got in inputs.items():
            for x in got:
                part.writers[c].append(x)


# --------------------------------------------------------------------------------------------------
# The source


_OPEN: dict[tuple, Any] = {}
_OPEN_LOCK = threading.Lock()
_ALLOC: list = []


def _view(url: str, version: int, column: str | None, kind: str, storage_options: dict | None):
    """This process's view of one column at one version, opened on first use."""
    key = (url, version, column, kind, tuple(sorted((storage_options or {}).items())))
    with _OPEN_LOCK:
        v = _OPEN.get(key)
        if v is None:
            from ._loaderx import Allocator

            if not _ALLOC:
                _ALLOC.append(Allocator())
            cls = DenseStore if kind == "dense" else RaggedStore
            store = cls(url, version=version, column=column, storage_options=storage_options)
            v = _OPEN[key] = store.bind(_ALLOC[0])
        return v


@dataclass(frozen=True)
class _Col:
    name: str  # the Ray column's name
    stored: str | None  # the dataset's column name (None: single-container parts)
    kind: str
    dtype: np.dtype
    shape: tuple[int, ...]  # Dense item shape
    ndim: int
    binary: bool
    row_bytes: float  # decoded bytes per row (Arrow)


def _arrow_type(c: _Col):
    vt = pa.from_numpy_dtype(c.dtype)
    if c.kind == "dense":
        return vt if not c.shape else None  # a tensor type: from the first block
    if c.binary:
        return pa.binary()
    return ArrowVariableShapedTensorType(vt, c.ndim)


def _to_arrow(c: _Col, batch) -> Any:
    if c.kind == "dense":
        x = _dt.from_dlpack(batch)
        if not c.shape:
            return pa.array(x)
        return ArrowTensorArray.from_numpy(x, column_name=c.name)
    values = _dt.from_dlpack(batch.values)
    cu = np.from_dlpack(batch.cu_seqlens)
    n = len(cu) - 1
    if c.binary:
        if int(cu[-1]) <= np.iinfo(np.int32).max:
            return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(cu.astype(np.int32)), pa.py_buffer(values)])
        return pa.Array.from_buffers(pa.large_binary(), n,
                                     [None, pa.py_buffer(cu.astype(np.int64)), pa.py_buffer(values)])
    shapes = np.from_dlpack(batch.shapes).astype(np.int64).reshape(-1)
    data = pa.LargeListArray.from_arrays(pa.array(cu.astype(np.int64)), pa.array(values))
    shape = pa.ListArray.from_arrays(pa.array(np.arange(0, (n + 1) * c.ndim, c.ndim, dtype=np.int32)),
                                     pa.array(shapes))
    storage = pa.StructArray.from_arrays([data, shape], ["data", "shape"])
    return ArrowVariableShapedTensorType(pa.from_numpy_dtype(c.dtype), c.ndim).wrap_array(storage)


def _read_pieces(url, version, cols, storage_options, pieces, rows_per_block):
    for a, b in pieces:
        for s in range(a, b, rows_per_block):
            e = min(b, s + rows_per_block)
            arrays = [_to_arrow(c, _view(url, version, c.stored, c.kind, storage_options)[s:e]) for c in cols]
            yield pa.Table.from_arrays(arrays, names=[c.name for c in cols])


class ZrecordDatasource(Datasource):
    """A Ray Data source over one version of a loaderx dataset of parts (default: the newest when
    the source is made; ``version=`` pins one). ``columns``: the columns to read (default: all; a
    dataset of single-container parts has one, named ``"data"``). ``binary_columns``: ``uint8``
    rank-1 Ragged columns to return as Arrow ``binary`` (default: a variable-shape tensor).
    ``rows_per_task``: at most this many rows per read task (default: the records split evenly
    over Ray's requested parallelism, cut at part boundaries). Dense columns come back as scalars or
    fixed-shape tensors (``DataContext.arrow_fixed_shape_tensor_format``), Ragged ones as
    variable-shape tensors (``ArrowVariableShapedTensorType``)."""

    def __init__(self, url: str | os.PathLike, *, columns: Sequence[str] | None = None, version: int | None = None,
                 storage_options: dict | None = None, binary_columns: Sequence[str] = (),
                 rows_per_task: int | None = None):
        super().__init__()
        url = os.fspath(url)
        self._url = url if "://" in url else os.path.abspath(url)
        self._storage_options = storage_options
        info = _dataset.info(self._url, version, storage_options=storage_options)
        if info is None:
            raise NotFoundError(f"{self._url}: no committed version of a loaderx dataset")
        self._version = int(info["version"])
        self._records = int(info["records"])
        self._parts = [(p["name"], int(p["records"])) for p in info["parts"]]
        stored = {(c["name"] or SINGLE_COLUMN): c for c in info["columns"]}
        want = list(columns) if columns is not None else list(stored)
        for name in [*want, *binary_columns]:
            if name not in stored:
                raise InvalidInputError(f"{self._url}: no column {name!r} (columns: {', '.join(stored)})")
        if rows_per_task is not None and rows_per_task < 1:
            raise InvalidInputError(f"rows_per_task must be >= 1, not {rows_per_task}")
        self._rows_per_task = rows_per_task
        cols = []
        for name in want:
            c = stored[name]
            dtype = _dt.canonical(c["dtype"])
            try:
                pa.from_numpy_dtype(dtype)
            except Exception:
                raise UnsupportedColumnError(f"{self._url}: column {name!r} holds {dtype}, which Arrow has no type for")
            binary = name in binary_columns
            if binary and not (c["kind"] == "ragged" and dtype == _dt.uint8 and c["ndim"] == 1):
                raise InvalidInputError(f"{self._url}: column {name!r} is not uint8 Ragged of rank 1; it cannot be binary")
            col = _Col(name, c["name"] or None, c["kind"], dtype, tuple(c["item_shape"]), int(c["ndim"]), binary, 0.0)
            cols.append(_Col(**{**col.__dict__, "row_bytes": self._row_bytes(col)}))
        self._cols = cols

    def _row_bytes(self, c: _Col) -> float:
        if c.kind == "dense":
            return float(math.prod(c.shape) * c.dtype.itemsize)
        # Ragged: the mean decoded row of up to 64 evenly spaced records (values, offsets, shapes).
        if not self._records:
            return 0.0
        view = _view(self._url, self._version, c.stored, c.kind, self._storage_options)
        idx = np.unique(np.linspace(0, self._records - 1, num=min(64, self._records)).astype(np.int64))
        b = view[idx]
        values = int(np.from_dlpack(b.cu_seqlens)[-1]) * c.dtype.itemsize
        per_row = 8 + (0 if c.binary else 8 * c.ndim + 4)
        return values / len(idx) + per_row

    @property
    def version(self) -> int:
        """The version read."""
        return self._version

    def get_name(self) -> str:
        return "Zrecord"

    def estimate_inmemory_data_size(self) -> int:
        """Decoded bytes of the selected columns (Dense: exact; Ragged: from a sample of records)."""
        return int(sum(c.row_bytes for c in self._cols) * self._records)

    def _pieces(self, parallelism: int) -> list[list[tuple[int, int]]]:
        """Tasks, each a list of global record ranges, every range inside one part."""
        target = max(1, math.ceil(self._records / max(1, parallelism)))
        if self._rows_per_task:
            target = min(target, self._rows_per_task)
        tasks: list[list[tuple[int, int]]] = []
        cur: list[tuple[int, int]] = []
        cur_rows = 0
        start = 0
        for _, n in self._parts:
            a = start
            while a < start + n:
                b = min(start + n, a + target - cur_rows)
                cur.append((a, b))
                cur_rows += b - a
                a = b
                if cur_rows >= target:
                    tasks.append(cur)
                    cur, cur_rows = [], 0
            start += n
        if cur:
            tasks.append(cur)
        return tasks

    def get_read_tasks(self, parallelism: int, per_task_row_limit: int | None = None,
                       data_context=None) -> list[ReadTask]:
        from ray.data.context import DataContext

        ctx = data_context or DataContext.get_current()
        row_bytes = sum(c.row_bytes for c in self._cols) or 1.0
        rows_per_block = max(1, int(ctx.target_max_block_size // row_bytes)) if ctx.target_max_block_size else 1 << 20
        types = [_arrow_type(c) for c in self._cols]
        schema = pa.schema([(c.name, t) for c, t in zip(self._cols, types)]) if all(t is not None for t in types) else None
        url, version, cols, so = self._url, self._version, self._cols, self._storage_options
        out = []
        for pieces in self._pieces(parallelism):
            rows = sum(b - a for a, b in pieces)
            meta = BlockMetadata(num_rows=rows, size_bytes=int(rows * row_bytes), input_files=None, exec_stats=None)

            def read_fn(pieces=pieces):
                return _read_pieces(url, version, cols, so, pieces, rows_per_block)

            out.append(ReadTask(read_fn, meta, schema=schema, per_task_row_limit=per_task_row_limit))
        return out


def read_zrecord(url: str | os.PathLike, *, columns: Sequence[str] | None = None, version: int | None = None,
                 storage_options: dict | None = None, binary_columns: Sequence[str] = (),
                 rows_per_task: int | None = None, **read_args) -> "ray.data.Dataset":
    """``ray.data.read_datasource(ZrecordDatasource(url, ...), **read_args)`` (``read_args``: e.g.
    ``override_num_blocks``, ``concurrency``, ``ray_remote_args``)."""
    src = ZrecordDatasource(url, columns=columns, version=version, storage_options=storage_options,
                            binary_columns=binary_columns, rows_per_task=rows_per_task)
    return ray.data.read_datasource(src, **read_args)
