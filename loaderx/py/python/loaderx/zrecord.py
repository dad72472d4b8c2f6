"""Zrecord: typed, immutable, random-access record containers.

Writers create containers (published atomically on ``close``); stores open them; ``store.bind(
allocator)`` returns the view that owns the index API. Reads return :class:`DLTensor` (Dense) or
:class:`RaggedBatch` (Ragged).
"""

from __future__ import annotations

from ._loaderx import (
    DEFAULT_DATA_SHARDS,
    DEFAULT_DICT_BYTES,
    DenseStore,
    DenseView,
    DenseWriter,
    DLTensor,
    RaggedBatch,
    RaggedStore,
    RaggedView,
    RaggedWriter,
    train_dict,
)
from . import _loaderx as _native

# Object storage (wheels built with the `remote` feature, as published): publish a local container
# to a URL, and clean up after a failed publish.
publish = getattr(_native, "publish", None)
gc = getattr(_native, "gc", None)

__all__ = [
    "DEFAULT_DATA_SHARDS",
    "DEFAULT_DICT_BYTES",
    "DLTensor",
    "DenseStore",
    "DenseView",
    "DenseWriter",
    "RaggedBatch",
    "RaggedStore",
    "RaggedView",
    "RaggedWriter",
    "gc",
    "publish",
    "train_dict",
]
