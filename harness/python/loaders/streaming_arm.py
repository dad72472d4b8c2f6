"""MosaicML Streaming 0.13 arm (its own venv: it pins NumPy < 2.2): the corpus written once with
``MDSWriter`` (one ``ndarray`` column, uncompressed shards), read in-process by
``StreamingDataset(local=dir)[i]`` for each index of the step, then stacked (dense) or packed
(ragged) into the contract inside the timer."""

from __future__ import annotations

import os

import numpy as np

from .common import Job, Source, pack, timed


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


def run(job: Job) -> dict:
    from importlib.metadata import version

    from streaming import StreamingDataset

    src = job.source()
    draws = job.draws()
    ds = StreamingDataset(local=write_mds(job, src), batch_size=256, shuffle=False)

    def next_batch(k):
        recs = [ds[int(i)]["x"] for i in draws[k]]
        return np.stack(recs) if job.dense else pack(recs)

    out = timed(job, src, draws, next_batch)
    out["config"] = f"mosaicml-streaming {version('mosaicml-streaming')}, MDS ndarray column, uncompressed, StreamingDataset(local=dir)[i] in-process, numpy {np.__version__}"
    return out
