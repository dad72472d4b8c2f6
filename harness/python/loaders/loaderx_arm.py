"""The loaderx Python arm: ``loaderx.Loader`` with 4 workers and prefetch 4 over the zrecord raw
store, fed the harness's draws, batches handed over as torch tensors through DLPack (NumPy arrays
when torch is missing)."""

from __future__ import annotations

import itertools

import numpy as np

from .common import Job, timed

WORKERS = 4
PREFETCH = 4


class DrawSampler:
    """A loaderx sampler over the shared draws: ``next()`` returns step k's indices (wrapping
    around, for the batches the loader prefetches past the last one the run takes)."""

    def __init__(self, draws: np.ndarray):
        self.draws = draws.astype(np.uint64)
        self.steps = itertools.count()  # next() on a count is atomic: the loader's threads may draw

    def next(self):
        return self.draws[next(self.steps) % len(self.draws)]


def run(job: Job) -> dict:
    from loaderx import Allocator, Loader
    from loaderx.zrecord import DenseStore, RaggedStore

    try:
        import torch

        to_tensor, via = torch.from_dlpack, f"torch {torch.__version__}"
    except ImportError:
        to_tensor, via = np.from_dlpack, "numpy"

    dense = job.dense
    src = job.source()
    draws = job.draws()

    def transform(shards):
        v = shards[0]["data"]
        if dense:
            return to_tensor(v)
        return to_tensor(v.values), to_tensor(v.cu_seqlens), to_tensor(v.shapes)

    Store = DenseStore if dense else RaggedStore
    with Store(job.store) as store, Allocator("cpu") as alloc:
        view = store.bind(alloc)
        if len(view) != len(src):
            return {"per_batch_s": None, "verified": False, "error": f"store has {len(view)} records, source {len(src)}"}
        loader = Loader({"data": [view]}, DrawSampler(draws), transform=transform, workers=WORKERS, prefetch=PREFETCH)
        try:
            out = timed(job, src, draws, lambda _k: next(loader))
        finally:
            loader.close()
    out["config"] = f"workers={WORKERS}, prefetch={PREFETCH}, zrecord raw store, DLPack to {via}"
    return out
