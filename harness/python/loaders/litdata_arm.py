"""LitData 0.2.76 arms, ``litdata-w2`` and ``litdata-w4``: the corpus written once with
``litdata.optimize(record_of, range(n), keep_data_ordered=True)`` (record i is input i; chunks and
scratch files under a temp dir in the peer cache), read as LitData's docs read a dataset: a
``StreamingDataset(dir)`` in a torch ``DataLoader`` with worker processes (LitData README, "Stream
data" / ``StreamingDataLoader(StreamingDataset(...), num_workers=...)``). ``StreamingDataset`` is an
``IterableDataset`` without a batched fetch, so the ``DataLoader`` drives a map-style view
(``LitBatches``) whose ``__getitems__`` loops ``ds[i]`` over the step's indices
(``batch_decode=False``: ~25x faster on ndarray records than "auto"); the torch collates stack or
pack the records into the contract in the worker, and the ``DataLoader`` settings (forked workers:
the README asks for spawn only with its Polars-based Parquet loader; prefetch ``ceil((workers + 4)
/ workers)``; step order) are the torch rows'. ``optimize`` spawns its writer processes, so
``record_of`` is importable from here."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import tempfile

import numpy as np

from .common import Job, Source, timed_loader

_SRC = {}


def record_of(i: int, kind: str = "", npy_dir: str = ""):
    """Record ``i`` of the corpus, for ``optimize`` (runs in its spawned workers)."""
    key = (kind, npy_dir)
    if key not in _SRC:
        _SRC[key] = Source.open(kind, npy_dir)
    return {"x": np.ascontiguousarray(_SRC[key].record(i))}


@contextlib.contextmanager
def temp_dir(path: str):
    """``$TMPDIR`` (where ``optimize`` writes ``chunks`` and ``data``) set to ``path`` while the body
    runs, then as it was (the harness leaves it unset): torch's workers hand each batch's shared memory over an AF_UNIX socket
    under the temp dir, whose path must stay under 108 bytes, so they keep the system's."""
    old = os.environ.get("TMPDIR")
    os.makedirs(path, exist_ok=True)
    os.environ["TMPDIR"] = path
    tempfile.tempdir = None
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = old
        tempfile.tempdir = None
        multiprocessing.current_process()._config.pop("tempdir", None)


class LitBatches:
    """Map-style view of a LitData ``StreamingDataset``: a step's records by ``ds[i]`` each."""

    def __init__(self, ds):
        self.ds = ds

    def __len__(self):
        return len(self.ds)

    def __getitem__(self, i):
        return self.ds[int(i)]["x"]

    def __getitems__(self, idx):
        return [np.asarray(self.ds[i]["x"]) for i in idx]


def write_litdata(job: Job, src: Source) -> str:
    import functools

    from litdata import optimize

    out = job.cache(f"litdata-{len(src)}")
    if not os.path.exists(os.path.join(out, ".complete")):
        with temp_dir(job.cache(f"litdata-{len(src)}-tmp")):
            optimize(
                fn=functools.partial(record_of, kind=job.kind, npy_dir=job.npy_dir),
                inputs=list(range(len(src))),
                output_dir=out,
                num_workers=1,
                chunk_bytes="64MB",
                keep_data_ordered=True,
                mode="overwrite",
            )
        open(os.path.join(out, ".complete"), "w").close()
    return out


def run(job: Job) -> dict:
    from importlib.metadata import version

    from litdata import StreamingDataset

    from .torch_arms import data_loader, workers_of

    src = job.source()
    draws = job.draws()
    ds = StreamingDataset(write_litdata(job, src), batch_decode=False)
    dl, note = data_loader(LitBatches(ds), draws, workers_of(job.arm), job.dense)
    out = timed_loader(job, src, draws, dl)
    out["config"] = (
        f"LitData README, Stream data (StreamingDataset in a DataLoader with workers): litdata {version('litdata')}, "
        f"optimize(keep_data_ordered=True, chunk_bytes=64MB), StreamingDataset(dir, batch_decode=False); a map-style "
        f"view whose __getitems__ loops ds[i] (LitData has no batched fetch); {note}"
    )
    return out
