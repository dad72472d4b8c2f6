"""Data-parallel loading: which process this is, and whether every process built the same loader.

Every process of a job builds the same ``Loader`` (same stores, same ``Sampler``: the same global
batch, mode and seed) with its own ``process_index``; the counter-based sampler makes them agree on
every global batch without talking, and process ``r`` of ``N`` receives the contiguous slice ``r``.
:func:`check_consistent` is the one collective: it verifies that agreement once, at start-up (or
after a resume), so a wrong seed or store on one host fails loudly instead of training on
overlapping data. See ``docs/distributed.md``.

Checkpoint and resume: every rank saves ``loader.state_dict()`` with its checkpoint and loads it
with ``loader.load_state_dict(state)`` into a loader built like the first. The sampler is
stateless, so the position is one global step: with ordered delivery (``ordered=True``) or 0 or 1
worker, every rank's state equals rank 0's but for ``process_index`` (which loading ignores), and
**rank 0's state suffices** for every rank; it also loads into another process count with the same
global batch (elastic resume: the new ranks' slices continue the same global batches). In
completion order with several workers each rank delivers steps in its own order and lists the
ones it received ahead, so **each rank saves and loads its own state**, on the same process count.
Call :func:`check_consistent` again after loading.
"""

from __future__ import annotations

import os
from typing import Any

from ._loaderx import Loader
from .errors import InvalidInputError

__all__ = ["check_consistent", "jax_process", "torch_process"]

# The order in which fingerprint fields are compared (and the first differing one reported).
_FIELDS = ("process_count", "batch", "mode", "seed", "sampler_len", "step", "streams")


def torch_process() -> tuple[int, int]:
    """``(rank, world_size)`` of the initialized default ``torch.distributed`` group; else the
    ``RANK`` / ``WORLD_SIZE`` environment variables (set by ``torchrun``); else ``(0, 1)``."""
    try:
        import torch.distributed as dist
    except ImportError:
        dist = None  # type: ignore[assignment]
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    rank, world = os.environ.get("RANK"), os.environ.get("WORLD_SIZE")
    if rank is not None and world is not None:
        return int(rank), int(world)
    return 0, 1


def jax_process() -> tuple[int, int]:
    """``(jax.process_index(), jax.process_count())``: call after ``jax.distributed.initialize``."""
    import jax

    return jax.process_index(), jax.process_count()


def _differs(fields: list[dict[str, Any]]) -> tuple[str, list[Any]] | None:
    """The first field (in ``_FIELDS`` order, then any other) whose value differs across the
    fingerprints, with every process's value; ``None`` when all agree."""
    names = list(_FIELDS) + sorted({k for f in fields for k in f} - set(_FIELDS))
    for name in names:
        values = [f.get(name) for f in fields]
        if any(v != values[0] for v in values[1:]):
            return name, values
    return None


def check_consistent(loader: Loader, group: Any = None) -> None:
    """All-gathers ``loader.fingerprint()`` over ``torch.distributed`` (``group``, or the default
    group) and raises :class:`loaderx.errors.InvalidInputError` on every process when they differ,
    naming the first differing field (``process_count``, ``batch``, ``mode``, ``seed``,
    ``sampler_len``, ``step``, ``streams``: each stream's views with their kind, store path and
    record count) and each process's value. It also checks that the processes' ``process_index``
    values are exactly ``0 .. process_count - 1``, and that ``process_count`` equals the group's
    size. A collective: every process of the group must call it. Works with any backend that
    supports ``all_gather_object`` (gloo on CPU; NCCL needs the current CUDA device set)."""
    import torch.distributed as dist

    if not dist.is_initialized():
        raise InvalidInputError("check_consistent needs an initialized torch.distributed group")
    mine = dict(loader.fingerprint())
    mine["streams"] = _plain(mine["streams"])
    world = dist.get_world_size(group)
    gathered: list[Any] = [None] * world
    dist.all_gather_object(gathered, (loader.process_index, mine), group=group)
    ranks = [g[0] for g in gathered]
    prints = [g[1] for g in gathered]
    diff = _differs(prints)
    if diff is not None:
        name, values = diff
        shown = ", ".join(f"process {i}: {v!r}" for i, v in enumerate(values))
        raise InvalidInputError(
            f"the data-parallel loaders differ in {name!r}: {shown}; every process must build the "
            "same streams and the same Sampler (batch, mode, seed) at the same step"
        )
    if prints[0]["process_count"] != world:
        raise InvalidInputError(
            f"the loaders have process_count {prints[0]['process_count']} but the group has {world} "
            "processes"
        )
    if sorted(ranks) != list(range(world)):
        raise InvalidInputError(
            f"the loaders' process_index values are {ranks}; each of 0..{world - 1} must appear once"
        )


def _plain(v: Any) -> Any:
    """Lists and tuples as nested tuples, paths as strings: values that compare across processes."""
    if isinstance(v, (list, tuple)):
        return tuple(_plain(x) for x in v)
    if isinstance(v, os.PathLike):
        return os.fspath(v)
    return v
