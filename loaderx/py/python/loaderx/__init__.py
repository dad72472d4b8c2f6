"""loaderx: typed record containers (zrecord) and a step-based multi-stream loader.

Rust core, Python API; every read is handed over through DLPack.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _dist_version

from . import backend, dataset, distributed, dtypes, errors, sampler, zrecord
from ._loaderx import DEFAULT_POOL_SIZE, Allocator, Loader
from .sampler import MixtureSource
from .errors import (
    AllocationError,
    AlreadyExistsError,
    ClosedError,
    CommitConflictError,
    CorruptError,
    DTypeError,
    Error,
    FormatError,
    IndexOutOfRangeError,
    InternalError,
    InvalidInputError,
    InvalidTypeError,
    LimitExceededError,
    NotFoundError,
    PoisonedError,
    SamplerError,
    StorageIOError,
    UnsupportedColumnError,
    UnsupportedDeviceError,
)

try:
    # The distribution name of pyproject.toml's [project]; its version is the workspace's.
    __version__: str = _dist_version("loaderx")
except PackageNotFoundError:  # imported from a tree that was never installed
    __version__ = "0+unknown"

__all__ = [
    "Allocator",
    "DEFAULT_POOL_SIZE",
    "Loader",
    "MixtureSource",
    "backend",
    "dataset",
    "distributed",
    "dtypes",
    "errors",
    "sampler",
    "zrecord",
    "Error",
    "AllocationError",
    "AlreadyExistsError",
    "ClosedError",
    "CommitConflictError",
    "CorruptError",
    "DTypeError",
    "FormatError",
    "IndexOutOfRangeError",
    "InternalError",
    "InvalidInputError",
    "InvalidTypeError",
    "LimitExceededError",
    "NotFoundError",
    "PoisonedError",
    "SamplerError",
    "StorageIOError",
    "UnsupportedColumnError",
    "UnsupportedDeviceError",
]
