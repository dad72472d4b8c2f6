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
    "train_dict",
]
