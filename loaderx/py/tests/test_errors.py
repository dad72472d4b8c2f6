"""Exception hierarchy, closed objects, corruption, and the no-PanicException guarantee."""

import os

import numpy as np
import pytest
from conftest import flip_middle_byte

import loaderx
from loaderx import Allocator, dtypes
from loaderx.zrecord import DenseStore, DenseWriter, RaggedStore


def test_hierarchy():
    assert issubclass(loaderx.CorruptError, loaderx.Error)
    assert issubclass(loaderx.ClosedError, loaderx.Error)
    assert issubclass(loaderx.IndexOutOfRangeError, IndexError)
    assert issubclass(loaderx.InvalidInputError, ValueError)
    assert issubclass(loaderx.DTypeError, TypeError)
    assert issubclass(loaderx.NotFoundError, FileNotFoundError)
    assert issubclass(loaderx.AlreadyExistsError, FileExistsError)


def test_store_close_invalidates_views(store_path):
    a = Allocator()
    s = DenseStore(store_path)
    v = s.bind(a)
    t = v[3]
    s.close()
    with pytest.raises(loaderx.ClosedError, match="closed"):
        v[0]
    with pytest.raises(loaderx.ClosedError):
        list(v)
    with pytest.raises(loaderx.ClosedError):
        s.bind(a)
    np.testing.assert_array_equal(np.from_dlpack(t), [12, 13, 14, 15])  # gathered batches stay valid


def test_closed_allocator_and_writer(store_path, tmp_path):
    a = Allocator()
    a.close()
    with DenseStore(store_path) as s, pytest.raises(loaderx.ClosedError):
        s.bind(a)
    w = DenseWriter(tmp_path / "w", dtypes.int8, (), "raw")
    w.close()
    with pytest.raises(loaderx.ClosedError, match="closed"):
        w.append(np.zeros(3, np.int8))
    w.close()  # idempotent


def test_index_errors(store_path, alloc):
    with DenseStore(store_path) as s:
        v = s.bind(alloc)
        with pytest.raises(IndexError, match="100"):
            v[100]
        with pytest.raises(loaderx.IndexOutOfRangeError):
            v[[1, 2, 1000]]
        with pytest.raises(IndexError, match="negative"):
            v[-1]
        with pytest.raises(IndexError):
            v[np.array([3, -2])]
        with pytest.raises(TypeError):
            v[1.5]
        with pytest.raises(TypeError):
            v[np.array([1.0, 2.0])]
        with pytest.raises(TypeError, match="bind"):
            s[0]


def test_open_errors(tmp_path, store_path):
    with pytest.raises(FileNotFoundError):
        DenseStore(tmp_path / "missing")
    with pytest.raises(loaderx.Error):
        RaggedStore(store_path)  # wrong kind
    with pytest.raises(FileExistsError):
        DenseWriter(store_path, dtypes.float32, (4,), "raw")
    with pytest.raises(ValueError, match="codec"):
        DenseWriter(tmp_path / "c", dtypes.float32, (4,), "lz4")
    with pytest.raises(loaderx.InvalidInputError):
        DenseWriter(tmp_path / "c", dtypes.float32, (4,), "zstd_dict")  # needs dict_bytes
    with pytest.raises(loaderx.InvalidInputError):
        DenseWriter(tmp_path / "c", dtypes.float32, (4,), "raw", data_shards=0)
    with pytest.raises(loaderx.UnsupportedDeviceError):
        Allocator("cuda")
    with pytest.raises(ValueError):
        Allocator("tpu")


def test_corruption_is_reported(store_path, alloc):
    shard = [p for p in sorted(os.listdir(store_path)) if "shard" in p or p.endswith(".dat")]
    files = sorted(os.listdir(store_path))
    target = None
    for name in files:
        full = os.path.join(store_path, name)
        if os.path.getsize(full) > 1500:
            target = full
    assert target, files
    flip_middle_byte(target)
    with DenseStore(store_path) as s:
        v = s.bind(alloc)
        with pytest.raises(loaderx.CorruptError) as ei:
            v[:]
        assert str(store_path) in str(ei.value)
        with pytest.raises(loaderx.CorruptError):
            s.verify()


def test_huge_and_odd_inputs_never_panic(store_path, alloc, tmp_path):
    with DenseStore(store_path) as s:
        v = s.bind(alloc)
        for key in [2**64 - 1, 2**63, np.array([2**63], dtype=np.uint64)]:
            with pytest.raises((IndexError, OverflowError, loaderx.Error)):
                v[key]
    with pytest.raises((loaderx.Error, ValueError, OverflowError)):
        DenseWriter(tmp_path / "huge", dtypes.uint8, (2**40, 2**40), "raw")
    with pytest.raises((loaderx.Error, ValueError, OverflowError)):
        DenseWriter(tmp_path / "zero", dtypes.uint8, (0,), "raw")
