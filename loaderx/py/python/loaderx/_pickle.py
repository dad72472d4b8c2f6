"""Rebuilders that ``pickle`` calls in the receiving process (``__reduce__`` of the native classes).

What travels is what identifies an object, never its memory: a store is its path and ``mmap`` option (it is
reopened, and checked, where it lands), an allocator its placement and ``pool_size`` (the receiver gets a
fresh, empty pool of that bound), a view its store and allocator. Objects pickled together keep
their sharing: two views of one allocator land bound to one new allocator.
"""

from __future__ import annotations

from pathlib import Path


def allocator(device: str, device_id: int, pool_size: int):
    from . import Allocator

    return Allocator(device, device_id, pool_size=pool_size)


def store(kind: str, path: str, mmap: bool | None = None, storage_options: dict | None = None,
          cache: dict | None = None):
    from . import zrecord

    cls = {"dense": zrecord.DenseStore, "ragged": zrecord.RaggedStore}[kind]
    # A URL (s3://...) stays a string: pathlib would fold its "//".
    where = path if "://" in path else Path(path)
    return cls(where, mmap=mmap, storage_options=storage_options, **(cache or {}))


def view(kind: str, path: str, alloc, mmap: bool | None = None, storage_options: dict | None = None,
         cache: dict | None = None):
    return store(kind, path, mmap, storage_options, cache).bind(alloc)
