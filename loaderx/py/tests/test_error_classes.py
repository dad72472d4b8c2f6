"""Exact exception classes (issue 12, section 4): every error the binding raises is a catalog class
of loaderx.errors, CorruptError carries its location, prefetch is always positive, and views accept
any integer sequence or buffer as an index collection."""

from __future__ import annotations

import array
import contextlib
import os
from pathlib import Path

import numpy as np
import pytest
from conftest import flip_middle_byte

import loaderx
from loaderx import Allocator, Loader, dtypes, errors
from loaderx.sampler import Sampler
from loaderx.zrecord import DenseStore, DenseWriter, RaggedStore, train_dict


@contextlib.contextmanager
def raises_exactly(cls):
    with pytest.raises(cls) as ei:
        yield ei
    assert type(ei.value) is cls, f"expected exactly {cls.__name__}, got {type(ei.value).__name__}: {ei.value}"


def test_every_catalog_class_is_an_error():
    for name in errors.__all__:
        cls = getattr(errors, name)
        assert issubclass(cls, errors.Error), name
        assert getattr(loaderx, name) is cls
    assert issubclass(errors.InvalidTypeError, errors.InvalidInputError)
    assert issubclass(errors.InvalidTypeError, TypeError)


def test_placement_and_writer_options(tmp_path):
    with raises_exactly(errors.InvalidInputError):
        Allocator("tpu")
    with raises_exactly(errors.InvalidInputError):
        Allocator("cpu", 1)
    with raises_exactly(errors.UnsupportedDeviceError):
        Allocator("cuda")
    with raises_exactly(errors.InvalidInputError):
        DenseWriter(tmp_path / "c", dtypes.float32, (4,), "lz4")
    with raises_exactly(errors.InvalidTypeError):
        DenseWriter(tmp_path / "c", dtypes.float32, (4,), "zstd_dict", dict_bytes=123)
    with raises_exactly(errors.InvalidInputError):
        DenseWriter(tmp_path / "c", dtypes.float32, (-1,), "raw")
    with raises_exactly(errors.DTypeError):
        DenseWriter(tmp_path / "c", np.dtype([("a", "i4")]), (4,), "raw")


def test_dlpack_stream_and_device(store_path, alloc):
    t = DenseStore(store_path).bind(alloc)[0]
    with raises_exactly(errors.UnsupportedDeviceError):
        t.__dlpack__(stream=5)
    with raises_exactly(errors.UnsupportedDeviceError):
        t.__dlpack__(dl_device=(2, 0))


def test_store_view_and_index_errors(store_path, tmp_path, alloc):
    with raises_exactly(errors.NotFoundError):
        DenseStore(tmp_path / "missing")
    with raises_exactly(errors.FormatError) as ei:
        RaggedStore(store_path)
    assert ei.value.path == store_path or Path(ei.value.path).parent == store_path
    with raises_exactly(errors.AlreadyExistsError):
        DenseWriter(store_path, dtypes.float32, (4,), "raw")
    s = DenseStore(store_path)
    v = s.bind(alloc)
    with raises_exactly(errors.InvalidTypeError):
        s[0]
    with raises_exactly(errors.InvalidTypeError):
        v[1.5]
    with raises_exactly(errors.InvalidTypeError):
        v[[1, True]]
    with raises_exactly(errors.DTypeError):
        v[np.array([1.0, 2.0])]
    with raises_exactly(errors.InvalidTypeError):
        v[np.zeros((2, 2), np.int64)]
    with raises_exactly(errors.IndexOutOfRangeError):
        v[100]
    with raises_exactly(errors.IndexOutOfRangeError):
        v[range(-1, 3)]
    with raises_exactly(errors.InvalidTypeError):
        train_dict(object())
    s.close()
    with raises_exactly(errors.ClosedError):
        v[0]


def test_corrupt_error_carries_its_location(store_path, alloc):
    target = os.path.join(store_path, "shard-000.zrd")
    flip_middle_byte(target)
    with DenseStore(store_path) as s:
        with raises_exactly(errors.CorruptError) as ei:
            s.bind(alloc)[:]
    e = ei.value
    assert isinstance(e.path, Path) and e.path == Path(target)
    assert e.shard == 0 and isinstance(e.offset, int) and isinstance(e.record, int)
    assert e.what and e.expected and e.found and e.expected != e.found
    assert str(e.path) in str(e)


def test_loader_arguments(store_path, alloc):
    st = {"x": [DenseStore(store_path).bind(alloc)]}
    with raises_exactly(errors.InvalidTypeError):
        Loader({"x": [object()]}, Sampler(100, 8, Sampler.Mode.IID))
    with raises_exactly(errors.InvalidTypeError):
        Loader(st, object())
    with raises_exactly(errors.InvalidTypeError):
        Loader([1, 2], Sampler(100, 8, Sampler.Mode.IID))
    for workers in (0, 1, 2):
        for prefetch in (0, -1):
            with raises_exactly(errors.InvalidInputError):
                Loader(st, Sampler(100, 8, Sampler.Mode.IID), workers=workers, prefetch=prefetch)
    with Loader(st, Sampler(100, 8, Sampler.Mode.SEQUENTIAL), workers=0, prefetch=1) as loader:
        assert np.from_dlpack(next(loader)[0]["x"]).shape == (8, 4)


INT_CODES = ["b", "B", "h", "H", "i", "I", "l", "L", "q", "Q"]
INT_DTYPES = [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64]


def test_views_accept_any_integer_collection(store_path, alloc):
    v = DenseStore(store_path).bind(alloc)
    want = [7, 3, 3, 9, 0]
    ref = np.from_dlpack(v[want]).copy()

    def same(key):
        np.testing.assert_array_equal(np.from_dlpack(v[key]), ref, err_msg=repr(key))

    same(want)
    same(tuple(want))
    for code in INT_CODES:
        same(array.array(code, want))
        same(memoryview(array.array(code, want)))
    for dt in INT_DTYPES:
        same(np.array(want, dtype=dt))
        strided = np.zeros(2 * len(want), dtype=dt)
        strided[::2] = want
        same(strided[::2])
    np.testing.assert_array_equal(np.from_dlpack(v[range(2, 11, 3)]), np.from_dlpack(v[[2, 5, 8]]))
    np.testing.assert_array_equal(np.from_dlpack(v[range(9, 2, -3)]), np.from_dlpack(v[[9, 6, 3]]))
    assert np.from_dlpack(v[range(0)]).shape == (0, 4)
    np.testing.assert_array_equal(np.from_dlpack(v[np.int16(4)]), np.from_dlpack(v[4]))
