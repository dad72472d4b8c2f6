"""The loaderx Python arms: ``loaderx.Loader`` with 2 or 4 workers and prefetch 4 over the zrecord
raw store, in step order (``ordered=True``: the contract every peer row delivers;
``python-loaderx-w4`` is the reference of the table's ``x loaderx`` column) or, for
``python-loaderx-w4-completion``, in completion order (the loader's default), drawing from ``loaderx.sampler.Sampler(n, 256, IID, seed=7)``, whose draws are the harness's
shared ones (the Rust rows draw from the same sampler; the check of every batch against the draws
file would fail otherwise). No transform: the workers gather without ever taking the GIL, and the
consumer hands each batch to torch through DLPack (NumPy when torch is missing), inside the timer.

A Python ``transform`` runs in a worker thread under the GIL, and a Python sampler object is called
under the GIL too; either puts the workers in line for the GIL with the consumer (measured on
ragged tokens, 4 workers: 159 us a batch with the same conversion as a transform, 250 us with a
Python sampler on top, 114 us as here), which is why the loaderx docs point a DLPack-only hand-off
at this form."""

from __future__ import annotations

from .common import Job, timed

PREFETCH = 4
SEED = 7  # the seed of the harness's draws (loader::arms::write_draws)


def run(job: Job) -> dict:
    import numpy as np
    from loaderx import Allocator, Loader
    from loaderx.sampler import Sampler
    from loaderx.zrecord import DenseStore, RaggedStore

    try:
        import torch

        to_tensor, via = torch.from_dlpack, f"torch {torch.__version__}"
    except ImportError:
        to_tensor, via = np.from_dlpack, "numpy"

    workers = int(job.arm.removesuffix("-completion").rsplit("-w", 1)[1])
    ordered = not job.arm.endswith("-completion")
    dense = job.dense
    src = job.source()
    draws = job.draws()

    def convert(shards):
        v = shards[0]["data"]
        if dense:
            return to_tensor(v)
        return to_tensor(v.values), to_tensor(v.cu_seqlens), to_tensor(v.shapes)

    Store = DenseStore if dense else RaggedStore
    with Store(job.store) as store, Allocator("cpu") as alloc:
        view = store.bind(alloc)
        if len(view) != len(src):
            return {"per_batch_s": None, "verified": False, "error": f"store has {len(view)} records, source {len(src)}"}
        sampler = Sampler(len(view), draws.shape[1], Sampler.Mode.IID, seed=SEED)
        loader = Loader({"data": [view]}, sampler, workers=workers, prefetch=PREFETCH, ordered=ordered)
        try:
            out = timed(job, src, draws, lambda _k: convert(next(loader)))
        finally:
            loader.close()
    out["config"] = (
        f"loaderx docs, docs/loaderx.md (Loader): workers={workers}, prefetch={PREFETCH} (a window of {workers + PREFETCH} batches), "
        f"{'ordered=True (step order)' if ordered else 'ordered=False (completion order)'}, Sampler(IID, seed={SEED}), no transform "
        f"(DLPack to {via} on the consumer thread), zrecord raw store, Allocator('cpu') 256 MiB pool"
    )
    return out
