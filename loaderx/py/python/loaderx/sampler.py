"""Stateless index samplers, and the sources of a weighted mixture.

``Sampler(n, batch, Sampler.Mode.SEQUENTIAL | IID | CYCLIC | BLOCK, seed=0)`` (or the mode's name,
``"sequential"`` ... ``"block"``): ``next()`` returns a read-only ``uint64`` NumPy view of one
reused buffer (valid until this sampler's next draw), ``seek(step)`` resumes in O(1).

A block shuffle (``mode="block"``, keywords ``block=``, ``window=``, ``record_bytes=``) reads the
records in runs of ``block`` consecutive records: each epoch permutes the blocks, then the records
within each window of ``window`` permuted blocks; every record is drawn once per epoch. Without
``block``/``window`` it takes ``block=256, window=64``, or, given ``record_bytes``, blocks of about
1 MiB (at most 256 records) in windows of at most 64 MiB (at most 1,024 blocks); see
``docs/loaderx.md``, "Block shuffle". ``block_buffer_blocks(block, window, batch, record_bytes)`` is
the block buffer a ``Loader`` gives such a view (None over its 256 MiB bound), for readers that call
``store.buffer_blocks`` themselves. A ``MixtureSource`` with ``Mode.BLOCK`` uses 256 and 64. Any object whose ``next()`` returns a 1-D integer index array can
replace it in a :class:`~loaderx.Loader`.

``MixtureSource(streams, weight, mode, seed)``: one source of ``Loader.mixture``: its streams (as
for ``Loader``), its weight, and the mode and seed of its own index stream over all its records.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ._loaderx import Mode, Sampler, block_buffer_blocks

__all__ = ["MixtureSource", "Sampler", "block_buffer_blocks"]


@dataclass(frozen=True)
class MixtureSource:
    """One source of :meth:`loaderx.Loader.mixture`.

    ``streams`` maps names to one view per shard position, as for :class:`~loaderx.Loader`; every
    source of a mixture has the same stream names (in the same order), kinds and shard count,
    Dense streams the same dtype and item shape, Ragged streams the same dtype and rank.
    ``weight`` (finite, positive) is the source's weight from step 0; ``mode`` and ``seed`` key the
    source's own index stream over all its records (a Cyclic source walks a fresh permutation of
    all of them each epoch)."""

    streams: Mapping[str, Sequence[Any]]
    weight: float = 1.0
    mode: Mode = Mode.CYCLIC
    seed: int = 0
