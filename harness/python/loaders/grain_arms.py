"""Grain 0.2.18 arms (``grain-w2``, ``grain-w4``), the Dataset API pipeline of Grain's docs (Grain
docs, "Dataset basics" / ``MapDataset`` ... ``to_iter_dataset(ReadOptions)`` ... ``mp_prefetch(
MultiprocessingOptions)``): ``ArrayRecordDataSource`` over an ArrayRecord file written with
``group_size:1,uncompressed`` (one record per chunk: random access), read by
``MapDataset.range(steps).map(GatherBatch)`` whose element k is step k's batch through
ArrayRecord's batched ``source.__getitems__(draws[k])`` (converted to the contract), run by
``mp_prefetch`` with 2 or 4 worker processes, each computing one batch at a time
(``ReadOptions(num_threads=1, prefetch_buffer_size=1)``) with ``per_worker_buffer_size =
ceil(4 / workers)``: ``workers`` batches in flight and 4 ahead, loaderx's window of ``workers +
prefetch``. mp_prefetch hands the workers' elements out round-robin: step order. Grain spawns its
workers, so ``GatherBatch`` lives here, importable, and opens its source lazily in the worker.
"""

from __future__ import annotations

import os

import numpy as np

from .common import Job, Source, pack, timed

LOADERX_PREFETCH = 4  # loaderx's window is workers + 4 batches: `workers` in flight, 4 ahead
# Each worker computes one element (a whole batch) at a time: ReadOptions(1 thread, 1 ahead); the
# batches ahead sit in the workers' output buffers, ceil(4 / workers) each. Grain's default
# ReadOptions (500 ahead on 16 threads) counts records, not 256-record batches: with 38.5 MB
# dense-vision batches it read up to 19 GB ahead per worker, and the kernel's OOM killer ended the
# workers (exit -9) on a 24 GiB machine.
READ = {"num_threads": 1, "prefetch_buffer_size": 1}
OPTIONS = "group_size:1,uncompressed"


def write_array_record(job: Job, src: Source) -> str:
    """The corpus as one ArrayRecord file, a record per corpus record (untimed, once)."""
    from array_record.python.array_record_module import ArrayRecordWriter

    path = job.cache(f"arrayrecord-{len(src)}/records.array_record")
    if not os.path.exists(path):
        tmp = path + ".tmp"
        w = ArrayRecordWriter(tmp, OPTIONS)
        for i in range(len(src)):
            w.write(np.ascontiguousarray(src.record(i)).tobytes())
        w.close()
        os.replace(tmp, path)
    return path


class GatherBatch:
    """Step -> batch: reads the step's records through the ArrayRecord source (opened on first use,
    in whichever process runs it) and converts them to the contract."""

    def __init__(self, path: str, draws_path: str, steps: int, dense: bool, item_shape, dtype: str):
        self.path, self.draws_path, self.steps = path, draws_path, steps
        self.dense, self.item_shape, self.dtype = dense, tuple(item_shape), dtype
        self.src = self.draws = None

    def __call__(self, step: int):
        if self.src is None:
            from grain.python import ArrayRecordDataSource

            # Grain may call this from several threads: publish draws before the source, so a
            # thread that sees the source also sees the draws.
            self.draws = np.load(self.draws_path)[: self.steps].astype(np.int64)
            self.src = ArrayRecordDataSource(self.path)
        recs = self.src.__getitems__(self.draws[step].tolist())
        if self.dense:
            out = np.empty((len(recs), *self.item_shape), dtype=self.dtype)
            for j, r in enumerate(recs):
                out[j] = np.frombuffer(r, dtype=self.dtype).reshape(self.item_shape)
            return out
        return pack([np.frombuffer(r, dtype=self.dtype) for r in recs])


def run(job: Job) -> dict:
    import grain
    from absl import flags

    flags.FLAGS(["loader_bench"])  # grain's absl flags must be parsed before a loader starts
    src = job.source()
    draws = job.draws()
    path = write_array_record(job, src)
    if job.dense:
        shape, dtype = src.dense.shape[1:], src.dense.dtype.str
    else:
        shape, dtype = (), src.tokens.dtype.str
    fn = GatherBatch(path, job.draws_path, job.steps, job.dense, shape, dtype)
    read = grain.ReadOptions(**READ)
    ds = grain.MapDataset.range(job.steps).map(fn).to_iter_dataset(read)
    workers = int(job.arm.rsplit("-w", 1)[1])
    buffer = -(-LOADERX_PREFETCH // workers)
    opts = grain.MultiprocessingOptions(num_workers=workers, per_worker_buffer_size=buffer)
    it = iter(ds.mp_prefetch(opts))
    out = timed(job, src, draws, lambda _k: next(it))
    reads = f"ReadOptions(num_threads={READ['num_threads']}, prefetch_buffer_size={READ['prefetch_buffer_size']}: one batch in flight per worker)"
    out["config"] = (
        f"Grain docs, Dataset basics (MapDataset ... mp_prefetch): grain 0.2.18, ArrayRecordDataSource ({OPTIONS}), "
        f"MapDataset.range(steps).map(step -> __getitems__(draws[step]) + contract).to_iter_dataset({reads}), "
        f"mp_prefetch(num_workers={workers}, per_worker_buffer_size={buffer}): {workers} batches in flight + "
        f"{workers * buffer} ahead, as loaderx's window of workers + prefetch = {workers + LOADERX_PREFETCH}; step order"
    )
    del it
    return out
