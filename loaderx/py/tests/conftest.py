import ctypes
import os

import numpy as np
import pytest

from loaderx import Allocator


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "timing: asserts a wall-clock bound; deselected by default, run with `-m timing`",
    )


def pytest_collection_modifyitems(config, items):
    """Tests marked `timing` run only when a `-m` expression is given (e.g. `-m timing`)."""
    if config.getoption("markexpr"):
        return
    timing = [it for it in items if it.get_closest_marker("timing")]
    if timing:
        config.hook.pytest_deselected(items=timing)
        items[:] = [it for it in items if not it.get_closest_marker("timing")]


@pytest.fixture
def alloc():
    with Allocator("cpu") as a:
        yield a


@pytest.fixture
def store_path(tmp_path):
    """A published 100-record float32[4] raw Dense store (record i holds 4i .. 4i+3)."""
    from loaderx import dtypes
    from loaderx.zrecord import DenseWriter

    p = tmp_path / "s"
    with DenseWriter(p, dtypes.float32, (4,), "raw", data_shards=1) as w:
        w.append(np.arange(400, dtype=np.float32).reshape(100, 4))
    return p


@pytest.fixture
def chdir_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("major", ctypes.c_uint32),
        ("minor", ctypes.c_uint32),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", _DLTensor),
    ]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


def read_capsule(cap):
    """(name, version, flags, device, (code, bits, lanes), shape, strides_is_null) of a DLPack capsule."""
    api = ctypes.pythonapi
    api.PyCapsule_GetName.restype = ctypes.c_char_p
    api.PyCapsule_GetName.argtypes = [ctypes.py_object]
    api.PyCapsule_GetPointer.restype = ctypes.c_void_p
    api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    name = api.PyCapsule_GetName(cap)
    ptr = api.PyCapsule_GetPointer(cap, name)
    if name == b"dltensor_versioned":
        m = _DLManagedTensorVersioned.from_address(ptr)
        version, flags, t = (m.major, m.minor), m.flags, m.dl_tensor
    else:
        m = _DLManagedTensor.from_address(ptr)
        version, flags, t = None, None, m.dl_tensor
    shape = tuple(t.shape[i] for i in range(t.ndim))
    return {
        "name": name.decode(),
        "version": version,
        "flags": flags,
        "device": (t.device.device_type, t.device.device_id),
        "dtype": (t.dtype.code, t.dtype.bits, t.dtype.lanes),
        "shape": shape,
        "strides_null": not bool(t.strides),
        "data": t.data,
        "byte_offset": t.byte_offset,
    }


def random_array(dtype, shape, rng):
    """Random bytes viewed as dtype (every bit pattern, NaNs included); bool kept to 0/1."""
    dtype = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = rng.integers(0, 256, size=n, dtype=np.uint8)
    if dtype.kind == "b":
        raw = raw & 1
    return raw.view(dtype).reshape(shape)


def as_bytes(a):
    return np.ascontiguousarray(a).view(np.uint8).tobytes()


class FakeDevice:
    """Reports a CUDA DLPack device (and would export garbage if asked)."""

    def __init__(self, dev=(2, 0)):
        self.dev = dev

    def __dlpack_device__(self):
        return self.dev

    def __dlpack__(self, **kw):  # pragma: no cover - must never be reached
        raise AssertionError("__dlpack__ called on a non-CPU tensor")


def flip_middle_byte(path):
    """Inverts the byte in the middle of file `path` (a corruption every read of it must catch)."""
    with open(path, "r+b") as f:
        f.seek(os.path.getsize(path) // 2)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0xFF]))
