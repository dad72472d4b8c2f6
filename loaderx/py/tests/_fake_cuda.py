"""Helpers for the device-append tests that run without a GPU: building the stand-in driver
(fake_libcuda.c), reading its counters, and `FakeCudaTensor`, a NumPy array whose DLPack capsules
say it lives on a CUDA device.

A process sees the stand-in driver only when it starts with LD_LIBRARY_PATH naming the folder
`build()` returns (loaderx loads ``libcuda.so`` by name); the tests run such processes and never
load it into the pytest process itself.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np

SOURCE = Path(__file__).with_name("fake_libcuda.c")
DIR_ENV = "LOADERX_FAKE_CUDA_DIR"

# Offsets in the DLPack 1.x ABI (64-bit): DLManagedTensorVersioned holds {version (8 bytes),
# manager_ctx, deleter, flags} before its DLTensor; DLManagedTensor starts with it. In DLTensor,
# `data` is at 0 and DLDevice {int32 device_type, int32 device_id} at 8.
_VERSIONED_TENSOR_AT = 32
_KDL_CUDA = 2


def build(out_dir: Path) -> Path | None:
    """Compiles the stand-in driver into ``out_dir/libcuda.so``; None without a C compiler."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    out_dir.mkdir(parents=True, exist_ok=True)
    lib = out_dir / "libcuda.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-Wall", "-Wl,-soname,libcuda.so", "-o", str(lib), str(SOURCE),
                    "-lpthread"], check=True, capture_output=True, text=True)
    return out_dir


def _lib() -> ctypes.CDLL:
    lib = ctypes.CDLL(os.path.join(os.environ[DIR_ENV], "libcuda.so"))
    lib.fake_stat.restype = ctypes.c_longlong
    lib.fake_stat.argtypes = [ctypes.c_char_p]
    lib.fake_dtoh_size.restype = ctypes.c_longlong
    lib.fake_dtoh_size.argtypes = [ctypes.c_longlong]
    lib.fake_fail_dtoh_at.argtypes = [ctypes.c_longlong]
    return lib


def stat(name: str) -> int:
    """One counter of the stand-in driver (see fake_stat in fake_libcuda.c)."""
    v = _lib().fake_stat(name.encode())
    assert v != -1 or name == "last_stream", f"unknown counter {name}"
    return v


def dtoh_sizes(since: int = 0) -> list[int]:
    """Sizes of the device-to-host copies made since copy number ``since``."""
    lib = _lib()
    return [lib.fake_dtoh_size(k) for k in range(since, stat("dtoh_calls"))]


def fail_dtoh_at(k: int) -> None:
    """The k-th device-to-host copy from now on fails (-1: none); the peak counters restart."""
    _lib().fake_fail_dtoh_at(k)


_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


class FakeCudaTensor:
    """`arr` presented as a tensor on CUDA device `dev`: ``__dlpack_device__`` is ``(2, dev)`` and
    each capsule is NumPy's own with its device rewritten (the data pointer, moved by `shift`
    bytes, still addresses host memory, which the stand-in driver copies from). Records the
    arguments of every ``__dlpack__`` call."""

    def __init__(self, arr: np.ndarray, dev: int = 0, shift: int = 0):
        self.arr = arr
        self.dev = dev
        self.shift = shift
        self.calls: list[dict] = []

    def __dlpack_device__(self):
        return (_KDL_CUDA, self.dev)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        self.calls.append({"stream": stream, "max_version": max_version})
        versioned = max_version is not None and max_version[0] >= 1
        cap = self.arr.__dlpack__(max_version=(1, 0)) if versioned else self.arr.__dlpack__()
        ptr = _get_pointer(cap, b"dltensor_versioned" if versioned else b"dltensor")
        tensor = ptr + (_VERSIONED_TENSOR_AT if versioned else 0)
        ctypes.c_int32.from_address(tensor + 8).value = _KDL_CUDA
        ctypes.c_int32.from_address(tensor + 12).value = self.dev
        if self.shift:
            data = ctypes.c_void_p.from_address(tensor)
            data.value = (data.value or 0) + self.shift
        return cap
