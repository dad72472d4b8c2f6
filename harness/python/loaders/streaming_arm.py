"""MosaicML Streaming 0.13 arms (its own venv: it pins NumPy < 2.2), ``streaming-w2`` and
``streaming-w4``, run as Streaming's docs run it: a ``StreamingDataset`` handed to a torch
``DataLoader`` with worker processes (Streaming docs, "Quick start" / "Main concepts":
``DataLoader(StreamingDataset(local=...), num_workers=...)``). The corpus is written once with
``MDSWriter`` (one ``ndarray`` column, uncompressed shards). ``StreamingDataset`` is an
``IterableDataset``, which a ``DataLoader`` cannot drive with a batch sampler, so a map-style view
(``MdsBatches``) fetches each step's records with Streaming's batched random access
``ds[np.ndarray]`` in its ``__getitems__``; the torch collates (``torch_arms``) stack or pack them
into the contract in the worker, and the ``DataLoader`` settings (forked workers, prefetch
``ceil((workers + 4) / workers)``, step order) are the torch rows'."""

from __future__ import annotations

import os

import numpy as np

from .common import Job, Source, timed_loader


def write_mds(job: Job, src: Source) -> str:
    from streaming import MDSWriter

    out = job.cache(f"mds-{len(src)}")
    if not os.path.exists(os.path.join(out, ".complete")):
        if src.dense is not None:
            col = "ndarray:" + src.dense.dtype.name + ":" + ",".join(str(d) for d in src.dense.shape[1:])
        else:
            col = "ndarray:" + src.tokens.dtype.name
        with MDSWriter(out=out, columns={"x": col}, compression=None, exist_ok=True) as w:
            for i in range(len(src)):
                w.write({"x": np.ascontiguousarray(src.record(i))})
        open(os.path.join(out, ".complete"), "w").close()
    return out


class MdsBatches:
    """Map-style view of a ``StreamingDataset``: a step's records in one ``ds[indices]`` call."""

    def __init__(self, ds):
        self.ds = ds

    def __len__(self):
        return self.ds.num_samples

    def __getitem__(self, i):
        return self.ds[int(i)]["x"]

    def __getitems__(self, idx):
        return [s["x"] for s in self.ds[np.asarray(idx, dtype=np.int64)]]


def run(job: Job) -> dict:
    from importlib.metadata import version

    from streaming import StreamingDataset

    from .torch_arms import data_loader, workers_of

    src = job.source()
    draws = job.draws()
    ds = StreamingDataset(local=write_mds(job, src), batch_size=256, shuffle=False)
    dl, note = data_loader(MdsBatches(ds), draws, workers_of(job.arm), job.dense)
    out = timed_loader(job, src, draws, dl)
    out["config"] = (
        f"Streaming docs, Quick start (StreamingDataset in a torch DataLoader with workers): mosaicml-streaming "
        f"{version('mosaicml-streaming')}, MDS ndarray column, uncompressed, StreamingDataset(local=dir); a map-style view whose "
        f"__getitems__ is ds[np.ndarray]; {note}; numpy {np.__version__}"
    )
    return out
