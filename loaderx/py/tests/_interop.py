"""What the framework hand-off tests (test_torch.py, test_jax.py) share: the stores they write, the
lifetime and loader set-ups, and the writer checks that only differ by how a framework makes its
arrays."""

from __future__ import annotations

import contextlib
import gc

import numpy as np
import pytest
from conftest import as_bytes, random_array

import loaderx
from loaderx import Allocator, Loader, dtypes
from loaderx.sampler import Sampler
from loaderx.zrecord import DenseStore, DenseWriter, RaggedBatch, RaggedStore, RaggedWriter


def write_dense(tmp_path, name, data, codec="raw", shards=2):
    """A Dense store of `data` (records along axis 0) in catalog dtype `name`; returns its path."""
    p = tmp_path / f"{name}-{codec}"
    with DenseWriter(p, getattr(dtypes, name), data.shape[1:], codec, data_shards=shards) as w:
        w.append(data)
    return p


def every_dtype_reads(tmp_path, name, alloc):
    """Writes a random zstd Dense store of catalog dtype `name` and yields `(batch, its expected
    bytes)` for a full read, a gather with a repeated index and a one-record read."""
    data = random_array(getattr(dtypes, name), (24, 3, 4), np.random.default_rng(len(name)))
    with DenseStore(write_dense(tmp_path, name, data, "zstd")) as s:
        v = s.bind(alloc)
        for key, want in [(slice(None), list(range(24))), ([5, 0, 5, 23], [5, 0, 5, 23]), (7, 7)]:
            yield v[key], as_bytes(data[want])


def packed(recs):
    """The `(values, cu_seqlens, shapes)` fields of records `recs`, as NumPy arrays."""
    values = np.concatenate([r.reshape(-1) for r in recs])
    cu = np.zeros(len(recs) + 1, dtype=np.int32)
    cu[1:] = np.cumsum([r.size for r in recs])
    shapes = np.array([r.shape for r in recs], dtype=np.uint64)
    return values, cu, shapes


def append_every_dtype(tmp_path, name, convert):
    """Appends a random `(30, 2, 5)` array of catalog dtype `name`, made a framework's by `convert`,
    to a Dense writer (`tmp_path / "d"`) in two calls, and records cut from it to lengths 1 and 2 to
    a Ragged one (`tmp_path / "r"`, fields converted the same way). Returns `(data, recs, src)`,
    `src` being the converted array."""
    dt = getattr(dtypes, name)
    data = random_array(dt, (30, 2, 5), np.random.default_rng(3))
    src = convert(data)
    with DenseWriter(tmp_path / "d", dt, (2, 5), "zstd") as w:
        w.append(src[:11])
        w.append(src[11:])
    recs = [data[k, : 1 + k % 2] for k in range(30)]
    with RaggedWriter(tmp_path / "r", dt, 2, "raw") as w:
        w.append(RaggedBatch(*(convert(f) for f in packed(recs))))
    return data, recs, src


def write_ragged(path, dtype, ndim, codec, records):
    with RaggedWriter(path, dtype, ndim, codec) as w:
        w.append(RaggedBatch.from_records(records))
    return path


def random_ragged(tmp_path, ndim, codec):
    """50 random float32 records of rank `ndim` (extents 1..5, seeded by `ndim`), written to a
    Ragged store at `tmp_path / "r"`; returns them."""
    rng = np.random.default_rng(ndim)
    recs = [rng.standard_normal(tuple(int(d) for d in rng.integers(1, 6, ndim))).astype(np.float32) for _ in range(50)]
    write_ragged(tmp_path / "r", dtypes.float32, ndim, codec, recs)
    return recs


class Lifetime:
    """A float32 Dense store (`data`) and an int64 Ragged one (`recs`), opened and bound (`view`,
    `ragged`) to one small allocator. A test imports batches, drops its own references to them, then
    calls `release()`, which closes the stores and the allocator and collects: the imports must still
    hold their bytes."""

    def __init__(self, tmp_path):
        self.data = np.arange(64 * 100, dtype=np.float32).reshape(100, 64)
        self.recs = [np.arange(1 + k % 7, dtype=np.int64) * k for k in range(40)]
        p = write_dense(tmp_path, "float32", self.data, "zstd")
        r = write_ragged(tmp_path / "r", dtypes.int64, 1, "zstd", self.recs)
        self._owners = [DenseStore(p), RaggedStore(r), Allocator("cpu", pool_size=1 << 20)]
        s, rs, a = self._owners
        self.view, self.ragged = s.bind(a), rs.bind(a)

    def release(self):
        del self.view, self.ragged
        for owner in self._owners:
            owner.close()
        self._owners.clear()
        gc.collect()

    def packed(self, idx):
        """The values of records `idx`, concatenated."""
        return np.concatenate([self.recs[i] for i in idx]).tolist()


@contextlib.contextmanager
def three_stream_loader(tmp_path, n=256):
    """A one-worker Loader over streams `x` (float32 rows), `id` (int64 ids) and `tok` (ragged
    int32 runs of `i`), two views each, IID batches of 32 with seed 4. Yields `(x, tok, loader,
    ref)`, `ref` being a sampler that draws the same batches."""
    x = np.arange(n * 16, dtype=np.float32).reshape(n, 16)
    ids = np.arange(n, dtype=np.int64)
    tok = [np.full(1 + i % 9, i, np.int32) for i in range(n)]
    px, pi = write_dense(tmp_path, "float32", x, "zstd"), write_dense(tmp_path, "int64", ids, "raw")
    pt = write_ragged(tmp_path / "tok", dtypes.int32, 1, "zstd", tok)
    with DenseStore(px) as sx, DenseStore(pi) as si, RaggedStore(pt) as st, Allocator() as a:
        streams = {name: [s.bind(a), s.bind(a)] for name, s in [("x", sx), ("id", si), ("tok", st)]}
        sampler = Sampler(n, 32, Sampler.Mode.IID, seed=4)
        with Loader(streams, sampler, workers=1, prefetch=2) as loader:
            yield x, tok, loader, Sampler(n, 32, Sampler.Mode.IID, seed=4)


def check_rejects_wrong_dtype_and_shape(tmp_path, zeros, array):
    """The writers refuse a framework's arrays of the wrong dtype or shape and append nothing.
    `zeros(shape, name)` and `array(values, name)` make the framework's arrays of catalog dtype
    `name`."""
    w = DenseWriter(tmp_path / "d", dtypes.float32, (4,), "raw")
    for name in ["float64", "bfloat16"]:
        with pytest.raises(loaderx.DTypeError, match="expected dtype"):
            w.append(zeros((3, 4), name))
    for shape in [(3, 5), (4,), (3, 4, 1), (3, 2, 2)]:
        with pytest.raises(loaderx.InvalidInputError, match="expected shape"):
            w.append(zeros(shape, "float32"))
    assert len(w) == 0
    rw = RaggedWriter(tmp_path / "r", dtypes.int32, 1, "raw")
    with pytest.raises(loaderx.DTypeError):
        rw.append(RaggedBatch(array([0, 1, 2], "int64"), array([0, 3], "int32"), array([[3]], "uint64")))
    with pytest.raises((loaderx.InvalidInputError, loaderx.DTypeError)):
        rw.append(RaggedBatch(array([0, 1, 2], "int32"), array([0, 3], "int64"), array([[3]], "uint64")))
    with pytest.raises(loaderx.InvalidInputError):
        rw.append(RaggedBatch(array([0, 1, 2], "int32"), array([0, 4], "int32"), array([[4]], "uint64")))
    assert len(rw) == 0
    w.abort()
    rw.abort()
