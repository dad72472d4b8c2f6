"""Property tests: every bad append input is rejected with a clear error, nothing is written, no crash."""

import mmap
import os

import numpy as np
import pytest
from conftest import FakeDevice
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import loaderx
from loaderx import Allocator, dtypes
from loaderx.zrecord import DenseStore, DenseWriter, RaggedBatch, RaggedStore, RaggedWriter

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
NAMES = st.sampled_from(dtypes.NAMES)


class DelegatingTensor:
    """Forwards DLPack to a wrapped array but lies about nothing: used to feed raw capsules."""

    def __init__(self, arr, device=(1, 0)):
        self.arr, self.device = arr, device

    def __dlpack_device__(self):
        return self.device

    def __dlpack__(self, **kw):
        return self.arr.__dlpack__(**kw)


def _expect_nothing_written(w, before):
    assert len(w) == before


def _dense_writer(tmp_path, dt, shape):
    return DenseWriter(tmp_path / f"d{os.urandom(4).hex()}", dt, shape, "raw")


@SETTINGS
@given(name=NAMES, other=NAMES, n=st.integers(1, 5))
def test_wrong_dtype_rejected(tmp_path, name, other, n):
    dt, odt = getattr(dtypes, name), getattr(dtypes, other)
    if dt == odt:
        return
    w = _dense_writer(tmp_path, dt, (3,))
    with pytest.raises(loaderx.DTypeError, match="expected dtype"):
        w.append(np.zeros((n, 3), dtype=odt))
    _expect_nothing_written(w, 0)
    w.abort()


@SETTINGS
@given(item=st.lists(st.integers(1, 4), min_size=0, max_size=3), bad=st.lists(st.integers(0, 5), min_size=0, max_size=4))
def test_wrong_shape_rejected(tmp_path, item, bad):
    w = _dense_writer(tmp_path, dtypes.int16, tuple(item))
    arr = np.zeros(tuple(bad), dtype=np.int16)
    if len(bad) == len(item) + 1 and bad[1:] == item:
        w.append(arr)
        assert len(w) == bad[0]
    else:
        with pytest.raises(loaderx.InvalidInputError, match="expected shape"):
            w.append(arr)
        _expect_nothing_written(w, 0)
    w.abort()


@SETTINGS
@given(rows=st.integers(2, 6), cols=st.integers(2, 6), step=st.integers(2, 3), order=st.sampled_from(["F", "step", "T"]))
def test_non_contiguous_rejected(tmp_path, rows, cols, step, order):
    base = np.arange(rows * cols * step, dtype=np.float32)
    if order == "F":
        arr = np.asfortranarray(base[: rows * cols].reshape(rows, cols))
        shape = (cols,)
    elif order == "T":
        arr = base[: rows * cols].reshape(cols, rows).T
        shape = (cols,)
    else:
        arr = base[::step][: rows * cols].reshape(rows, cols) if False else base.reshape(rows, cols * step)[:, ::step]
        shape = (cols,)
    w = _dense_writer(tmp_path, dtypes.float32, shape)
    with pytest.raises(loaderx.InvalidInputError, match="not C-contiguous"):
        w.append(arr)
    _expect_nothing_written(w, 0)
    w.abort()


@SETTINGS
@given(offset=st.integers(1, 7), n=st.integers(1, 8))
def test_misaligned_rejected(tmp_path, offset, n):
    raw = np.zeros(8 * n + 16, dtype=np.uint8)
    arr = np.frombuffer(raw.data, dtype=np.float64, count=n, offset=offset)
    assert arr.ctypes.data % 8 != 0
    w = _dense_writer(tmp_path, dtypes.float64, ())
    with pytest.raises((loaderx.InvalidInputError, TypeError)):
        w.append(arr)
    _expect_nothing_written(w, 0)
    w.abort()


@SETTINGS
@given(kind=st.sampled_from(["bytearray", "writable-mmap", "array.array", "memoryview-rw"]), n=st.integers(1, 64))
def test_writable_buffer_only_rejected(tmp_path, kind, n):
    import array
    if kind == "bytearray":
        obj = bytearray(n)
    elif kind == "writable-mmap":
        obj = mmap.mmap(-1, n)
    elif kind == "array.array":
        obj = array.array("B", bytes(n))
    else:
        obj = memoryview(bytearray(n))
    w = _dense_writer(tmp_path, dtypes.uint8, ())
    with pytest.raises(TypeError, match="writable buffer-only"):
        w.append(obj)
    _expect_nothing_written(w, 0)
    w.abort()


def test_readonly_buffer_fallback_accepted(tmp_path):
    data = bytes(range(200))
    path = tmp_path / "raw.bin"
    path.write_bytes(data)
    w = _dense_writer(tmp_path, dtypes.uint8, ())
    w.append(data)  # bytes: read-only buffer, no __dlpack__
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        w.append(m)  # read-only mmap
    ro = np.load_like = np.arange(10, dtype=np.uint8)
    ro.flags.writeable = False
    w.append(ro)
    assert len(w) == 410
    w.close()


def test_npy_mmap_readonly(tmp_path):
    np.save(tmp_path / "x.npy", np.arange(60, dtype=np.int32).reshape(20, 3))
    x = np.load(tmp_path / "x.npy", mmap_mode="r")
    with DenseWriter(tmp_path / "s", x.dtype, x.shape[1:], "zstd") as w:
        w.append(x)
    with DenseStore(tmp_path / "s") as s, Allocator() as a:
        np.testing.assert_array_equal(np.from_dlpack(s.bind(a)[:]), x)


@SETTINGS
@given(dev=st.tuples(st.sampled_from([2, 3, 4, 7, 8, 10, 13, 14]), st.integers(0, 3)))
def test_fake_cuda_device_rejected(tmp_path, dev):
    w = _dense_writer(tmp_path, dtypes.float32, (2,))
    with pytest.raises(loaderx.UnsupportedDeviceError, match="not supported"):
        w.append(FakeDevice(dev))
    rw = RaggedWriter(tmp_path / f"r{os.urandom(4).hex()}", dtypes.float32, 1, "raw")
    with pytest.raises(loaderx.UnsupportedDeviceError):
        rw.append(RaggedBatch(FakeDevice(dev), np.array([0, 2], np.int32), np.array([[2]], np.uint64)))
    _expect_nothing_written(w, 0)
    _expect_nothing_written(rw, 0)
    w.abort()
    rw.abort()


def test_non_tensor_objects_rejected(tmp_path):
    w = _dense_writer(tmp_path, dtypes.int64, ())
    for bad in [[1, 2, 3], (1, 2), 5, "abc", None, object()]:
        with pytest.raises(TypeError):
            w.append(bad)
    _expect_nothing_written(w, 0)
    w.abort()


def test_unsupported_dtypes_rejected(tmp_path):
    bad = [
        np.dtype([("a", np.int32), ("b", np.float32)]),
        np.dtype((np.int32, (2,))),
        np.dtype(object),
        np.dtype(np.float32, metadata={"unit": "m"}),
        np.dtype(">f4"),
        np.dtype(">i8"),
        np.dtype("V0"),
        np.dtype("S0"),
        np.dtype("U3"),
        np.dtype("datetime64[ns]"),
        "float128",
        "not-a-dtype",
    ]
    for dt in bad:
        with pytest.raises(loaderx.DTypeError):
            DenseWriter(tmp_path / "never", dt, (), "raw")
        assert not (tmp_path / "never").exists()
    assert dtypes.canonical("<f4") == dtypes.float32
    assert dtypes.canonical(np.float16) == dtypes.float16
    assert dtypes.canonical("bfloat16") == dtypes.bfloat16


@st.composite
def bad_ragged(draw):
    """A RaggedBatch with exactly one defect."""
    n = draw(st.integers(1, 6))
    lengths = draw(st.lists(st.integers(1, 5), min_size=n, max_size=n))
    cu = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    values = np.arange(cu[-1], dtype=np.int32)
    shapes = np.array(lengths, dtype=np.uint64).reshape(n, 1)
    defect = draw(st.sampled_from([
        "empty-record", "first-nonzero", "decreasing", "end-short", "end-long", "shape-mismatch",
        "cu-dtype", "shapes-dtype", "values-dtype", "shapes-rank", "values-2d", "cu-noncontig", "values-cuda",
    ]))
    if defect == "empty-record":
        k = draw(st.integers(0, n - 1))
        lengths2 = list(lengths)
        lengths2[k] = 0
        cu = np.concatenate([[0], np.cumsum(lengths2)]).astype(np.int32)
        values = np.arange(cu[-1], dtype=np.int32)
        shapes = np.array(lengths2, dtype=np.uint64).reshape(n, 1)
    elif defect == "first-nonzero":
        cu = cu + 1
        values = np.arange(cu[-1], dtype=np.int32)
    elif defect == "decreasing" and n >= 2:
        cu = cu.copy()
        cu[1], cu[2] = cu[2], cu[1]
    elif defect == "end-short":
        values = values[:-1]
    elif defect == "end-long":
        values = np.arange(cu[-1] + 1, dtype=np.int32)
    elif defect == "shape-mismatch":
        shapes = shapes + 1
    elif defect == "cu-dtype":
        cu = cu.astype(np.int64)
    elif defect == "shapes-dtype":
        shapes = shapes.astype(np.int64)
    elif defect == "values-dtype":
        values = values.astype(np.float32)
    elif defect == "shapes-rank":
        shapes = shapes.reshape(-1)
    elif defect == "values-2d":
        values = values.reshape(1, -1)
    elif defect == "cu-noncontig":
        cu = np.repeat(cu, 2)[::2]
        if n == 0:
            return None
        return RaggedBatch(values, cu, shapes), "strided-ok"
    elif defect == "values-cuda":
        values = FakeDevice()
    else:
        shapes = shapes + 1
    return RaggedBatch(values, cu, shapes), defect


@SETTINGS
@given(case=bad_ragged())
def test_bad_ragged_rejected(tmp_path, case):
    batch, defect = case
    w = RaggedWriter(tmp_path / f"r{os.urandom(4).hex()}", dtypes.int32, 1, "raw")
    if defect == "strided-ok":
        # np.repeat(...)[::2] is a non-contiguous view: rejected too
        with pytest.raises(loaderx.InvalidInputError):
            w.append(batch)
    else:
        with pytest.raises((loaderx.InvalidInputError, loaderx.DTypeError, loaderx.UnsupportedDeviceError)):
            w.append(batch)
    assert len(w) == 0
    w.close()
    with RaggedStore(w.path) as s:
        assert len(s) == 0


def test_ragged_from_records_validation():
    with pytest.raises(loaderx.InvalidInputError, match="empty"):
        RaggedBatch.from_records([np.arange(3), np.arange(0)])
    with pytest.raises(loaderx.InvalidInputError, match="0-D"):
        RaggedBatch.from_records([np.array(3, dtype=np.int32)])
    with pytest.raises(loaderx.InvalidInputError, match="ndim"):
        RaggedBatch.from_records([np.zeros(3), np.zeros((2, 2))])
    with pytest.raises(loaderx.DTypeError):
        RaggedBatch.from_records([np.zeros(3, np.float32), np.zeros(3, np.float64)])
    with pytest.raises(loaderx.InvalidInputError, match="no records"):
        RaggedBatch.from_records([])
    b = RaggedBatch.from_records([], dtype=dtypes.int32)
    assert len(b) == 0


def test_ragged_append_wrong_type(tmp_path):
    with RaggedWriter(tmp_path / "r", dtypes.int32, 1, "raw") as w:
        with pytest.raises(TypeError, match="RaggedBatch"):
            w.append([np.arange(3)])
        with pytest.raises(loaderx.InvalidInputError, match="ndim"):
            w.append(RaggedBatch.from_records([np.zeros((2, 2), np.int32)]))


def test_failed_writer_publishes_nothing(tmp_path):
    p = tmp_path / "x"
    with pytest.raises(RuntimeError):
        with DenseWriter(p, dtypes.int8, (), "raw") as w:
            w.append(np.arange(5, dtype=np.int8))
            raise RuntimeError("boom")
    assert not p.exists()
    assert not any(tmp_path.iterdir()), list(tmp_path.iterdir())
