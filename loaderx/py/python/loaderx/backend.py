"""Placement implementations.

Three placements, each a bounded pooled allocator (:class:`loaderx.Allocator`): ``"cpu"`` (host
memory), ``"cuda_host"`` (page-locked host memory, exported as DLPack ``kDLCPU``) and ``"cuda"`` (device
memory, ``kDLCUDA``; gathered into pinned staging and copied on a loaderx-owned stream). Importing
loaderx probes no GPU runtime: the NVIDIA driver is loaded when a CUDA ``Allocator`` is made, and
its absence (or a missing device id) raises :class:`~loaderx.errors.UnsupportedDeviceError` naming
what is missing. ROCm is not supported. See ``docs/gpu.md``.
"""

from __future__ import annotations

from ._loaderx import DEFAULT_POOL_SIZE, Allocator

#: Device kinds loaderx can place batches on (CUDA ones need the driver at run time).
DEVICES: tuple[str, ...] = ("cpu", "cuda_host", "cuda")


def cpu(device_id: int = 0, *, pool_size: int = DEFAULT_POOL_SIZE) -> Allocator:
    """The CPU placement: ``Allocator("cpu", device_id, pool_size=pool_size)``."""
    return Allocator("cpu", device_id, pool_size=pool_size)


def cuda(device_id: int = 0, *, pool_size: int | None = None) -> Allocator:
    """Device memory: ``Allocator("cuda", device_id, pool_size=pool_size)`` (default 1 GiB)."""
    return Allocator("cuda", device_id, pool_size=pool_size)


def cuda_host(device_id: int = 0, *, pool_size: int = DEFAULT_POOL_SIZE) -> Allocator:
    """Pinned host memory: ``Allocator("cuda_host", device_id, pool_size=pool_size)``."""
    return Allocator("cuda_host", device_id, pool_size=pool_size)


def available() -> tuple[str, ...]:
    """Device kinds this package knows (no runtime is probed; a CUDA one may still fail to open)."""
    return DEVICES


__all__ = ["DEVICES", "DEFAULT_POOL_SIZE", "available", "cpu", "cuda", "cuda_host"]
