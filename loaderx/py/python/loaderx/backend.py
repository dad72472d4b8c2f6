"""Placement implementations.

This build provides one placement: ``"cpu"``, a bounded pooled host allocator
(:class:`loaderx.Allocator`). Importing loaderx probes no GPU runtime; GPU placements (CUDA, ROCm)
are not part of this build and ``Allocator("cuda")`` raises
:class:`~loaderx.errors.UnsupportedDeviceError`.
"""

from __future__ import annotations

from ._loaderx import DEFAULT_POOL_SIZE, Allocator

#: Device kinds this build can place batches on.
DEVICES: tuple[str, ...] = ("cpu",)


def cpu(device_id: int = 0, *, pool_size: int = DEFAULT_POOL_SIZE) -> Allocator:
    """The CPU placement: ``Allocator("cpu", device_id, pool_size=pool_size)``."""
    return Allocator("cpu", device_id, pool_size=pool_size)


def available() -> tuple[str, ...]:
    """Device kinds usable here (no runtime is probed)."""
    return DEVICES


__all__ = ["DEVICES", "DEFAULT_POOL_SIZE", "available", "cpu"]
