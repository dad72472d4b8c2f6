"""Stateless index samplers.

``Sampler(n, batch, Sampler.Mode.SEQUENTIAL | IID | CYCLIC, seed=0)``: ``next()`` returns a
read-only ``uint64`` NumPy view of one reused buffer (valid until this sampler's next draw),
``seek(step)`` resumes in O(1). Any object whose ``next()`` returns a 1-D integer index array can
replace it in a :class:`~loaderx.Loader`.
"""

from __future__ import annotations

from ._loaderx import Sampler

__all__ = ["Sampler"]
