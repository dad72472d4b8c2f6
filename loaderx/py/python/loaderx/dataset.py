"""Datasets of parts: many containers, written by any process on any host, published together.

A dataset is a root (a local directory or an object-store URL) holding ``parts/<part>/`` (each a
complete container, or for several aligned columns one container per column,
``parts/<part>/<column>/``) and ``versions/<n>.zrv``, the manifests that list them. A writer writes
its part where :func:`part_path` says (a local root: directly; a URL: locally, then
``loaderx.zrecord.publish`` to that URL) and any process commits: :func:`commit` publishes a version
listing exactly the given parts, :func:`append` one that adds parts to the newest version. A commit
reads each listed part's manifests (one request per part), unless it is handed the writers'
receipts instead of names: a writer calls :func:`describe_part` on its published part and sends the
bytes back (a Ray task's result, a queue), and the committer publishes them with no request per
part; readers check each part against its receipt when they first open it. Two
committers racing for one version never both win: the loser gets
:class:`~loaderx.errors.CommitConflictError` and nothing was written. ``DenseStore(root)`` /
``RaggedStore(root)`` open the newest version (``version=`` pins one, ``column=`` picks a column);
a part no version lists is invisible, and :func:`gc` removes it.
"""

from __future__ import annotations

import os
from typing import Any

from . import _loaderx as _native
from .errors import CommitConflictError

__all__ = ["append", "commit", "describe_part", "gc", "info", "new_part_name", "part_path", "versions"]

PathLike = str | os.PathLike


def part_path(root: PathLike, part: str, column: str | None = None) -> str:
    """Where part ``part``'s container (of ``column``, for a dataset of several) is written."""
    return _native._dataset_part_path(os.fspath(root), part, column)


def new_part_name(tag: str = "") -> str:
    """A part name unique across writers without coordination (``tag``, time, process, counter)."""
    return _native._dataset_new_part_name(tag)


def describe_part(root: PathLike, part: str, *, storage_options: dict | None = None) -> bytes:
    """Part ``part``'s receipt: what :func:`commit` reads of it (its schema, record count and
    manifests' CRC32C and sizes), read here (one request per column) as bytes for a committer."""
    return _native._dataset_describe_part(os.fspath(root), part, storage_options=storage_options)


def commit(root: PathLike, parts: list[str] | list[bytes], *,
           storage_options: dict | None = None) -> dict[str, Any]:
    """Publishes a new version listing exactly ``parts`` (in global record order) and returns it
    as :func:`info` does: part names (each part's manifests are read) or receipts from
    :func:`describe_part` (none is). Every part must be published and share one schema (a
    ``FormatError`` names the part otherwise)."""
    return _native._dataset_commit(os.fspath(root), list(parts), append=False,
                                   storage_options=storage_options)


def append(root: PathLike, parts: list[str] | list[bytes], *, retries: int = 0,
           storage_options: dict | None = None) -> dict[str, Any]:
    """Publishes a new version: the newest version's parts, then ``parts``. On
    :class:`CommitConflictError` (another commit took the version first) it re-reads and retries
    up to ``retries`` times, then raises."""
    for attempt in range(retries + 1):
        try:
            return _native._dataset_commit(os.fspath(root), list(parts), append=True,
                                           storage_options=storage_options)
        except CommitConflictError:
            if attempt == retries:
                raise
    raise AssertionError("unreachable")


def versions(root: PathLike, *, storage_options: dict | None = None) -> list[int]:
    """The committed versions, oldest first (empty: no dataset there)."""
    return _native._dataset_versions(os.fspath(root), storage_options=storage_options)


def info(root: PathLike, version: int | None = None, *,
         storage_options: dict | None = None) -> dict[str, Any] | None:
    """Version ``version`` (default: the newest) as a dict: ``version``, ``records``, ``columns``
    (name, kind, dtype, codec, ndim, item_shape) and ``parts`` (name, records, bytes); None when the
    root holds no version."""
    return _native._dataset_info(os.fspath(root), version, storage_options=storage_options)


def gc(root: PathLike, *, min_age_secs: int = 3600, dry_run: bool = True,
       storage_options: dict | None = None) -> dict[str, Any]:
    """Lists (``dry_run``, the default) or removes the parts no version lists whose newest file is
    at least ``min_age_secs`` old (younger ones may belong to a writer still at work). Returns
    ``versions`` (read), ``removed`` (part names), ``files``, ``young`` (left alone) and
    ``dry_run``."""
    return _native._dataset_gc(os.fspath(root), min_age_secs=min_age_secs, dry_run=dry_run,
                               storage_options=storage_options)
