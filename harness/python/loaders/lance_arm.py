"""Lance (pylance 14) arm, ``lance-take``, as Lance's docs read random rows (Lance docs, "Read and
write data": random access with ``LanceDataset.take(indices)``, whose reads run on Lance's own I/O
thread pool, ``LANCE_IO_THREADS``, 8 on local disks): the corpus written once with ``lance.write_dataset`` as one
``large_binary`` column (a record's raw bytes; ~2.5x faster to take than a FixedSizeList<uint8>
column), read in-process, one process and one calling thread, by ``dataset.take(draws[k])`` (keeps order
and duplicates: step order; no workers, so no prefetch: every batch is read when asked for). The
conversion to the contract (one copy out of the Arrow buffers; for ragged batches the Arrow
offsets become int32 cu_seqlens) is inside the timer.

``lance-torch-w2`` / ``-w4``: Lance's own torch integration (Lance docs, PyTorch integration:
``lance.torch.data.SafeLanceDataset``, whose ``__getitems__`` is one ``take`` per batch returning
``to_pylist()`` rows, in ``get_safe_loader``: spawned, persistent workers) with the shared draws as
batch sampler, 2 or 4 workers, ``prefetch_factor = ceil((workers + 4) / workers)`` as the torch
rows; ``BytesCollate`` turns the rows' bytes into the contract in the worker, with the torch
collates (one copy into a shared-memory batch)."""

from __future__ import annotations

import os

import numpy as np

from .common import Job, Source, timed, timed_loader


def write_lance(job: Job, src: Source) -> str:
    import lance
    import pyarrow as pa

    uri = job.cache(f"lance-{len(src)}/records.lance")
    if not os.path.exists(os.path.join(uri, ".complete")):
        def batches(step=1024):
            for a in range(0, len(src), step):
                recs = [np.ascontiguousarray(src.record(i)).tobytes() for i in range(a, min(a + step, len(src)))]
                yield pa.record_batch([pa.array(recs, type=pa.large_binary())], names=["x"])

        schema = pa.schema([("x", pa.large_binary())])
        lance.write_dataset(pa.RecordBatchReader.from_batches(schema, batches()), uri, mode="overwrite")
        open(os.path.join(uri, ".complete"), "w").close()
    return uri


class BytesCollate:
    """SafeLanceDataset rows (``{"x": bytes}``) -> the batch contract, via the torch collates
    (importable: the spawned workers unpickle it)."""

    def __init__(self, dense: bool, item_shape, dtype: str):
        self.dense, self.item_shape, self.dtype = dense, tuple(item_shape), dtype

    def __call__(self, rows):
        from .torch_arms import collate_for

        recs = [np.frombuffer(r["x"], dtype=self.dtype).reshape(self.item_shape or (-1,)) for r in rows]
        return collate_for(self.dense)(recs)


def run_torch(job: Job, src: Source, draws: np.ndarray, uri: str) -> dict:
    """``lance-torch-w{n}``: SafeLanceDataset in get_safe_loader's DataLoader."""
    import lance
    from lance.torch.data import SafeLanceDataset, get_safe_loader

    from .torch_arms import Draws, TIMEOUT_S, prefetch_factor, workers_of

    workers = workers_of(job.arm)
    pf = prefetch_factor(workers)
    if job.dense:
        collate = BytesCollate(True, src.dense.shape[1:], src.dense.dtype.str)
    else:
        collate = BytesCollate(False, (), src.tokens.dtype.str)
    dl = get_safe_loader(
        SafeLanceDataset(uri),
        batch_size=1,
        batch_sampler=Draws(draws),
        num_workers=workers,
        prefetch_factor=pf,
        collate_fn=collate,
        timeout=TIMEOUT_S,
    )
    out = timed_loader(job, src, draws, dl)
    out["config"] = (
        f"Lance docs, PyTorch integration (SafeLanceDataset + get_safe_loader): pylance {lance.__version__}, "
        f"one large_binary column, __getitems__ = take(indices).to_pylist(), num_workers={workers} (spawn, persistent), "
        f"prefetch_factor={pf} ({workers * pf} batches in flight, loaderx's window is workers + prefetch = {workers + 4}), "
        f"batch_sampler = the shared draws, rows' bytes collated into a shared-memory batch, step order"
    )
    return out


def taker(ds, src: Source, draws: np.ndarray, dense: bool):
    """``next_batch(k)``: step ``k``'s records by one ``ds.take`` converted to the contract (one
    copy out of the Arrow buffers; ragged offsets become int32 cu_seqlens)."""
    if dense:
        shape, dtype = src.dense.shape[1:], src.dense.dtype
    else:
        dtype = src.tokens.dtype

    def next_batch(k):
        col = ds.take(draws[k].tolist(), columns=["x"]).column("x").combine_chunks()
        _, offs_buf, data_buf = col.buffers()
        offs = np.frombuffer(offs_buf, dtype=np.int64, count=len(col) + 1, offset=col.offset * 8)
        data = np.frombuffer(data_buf, dtype=np.uint8)[offs[0] : offs[-1]]
        if dense:
            return data.view(dtype).reshape(len(col), *shape).copy()
        values = data.view(dtype).copy()
        cu = ((offs - offs[0]) // dtype.itemsize).astype(np.int32)
        return values, cu, np.diff(cu).astype(np.int64).reshape(-1, 1)

    return next_batch


def run(job: Job) -> dict:
    import lance

    src = job.source()
    draws = job.draws()
    uri = write_lance(job, src)
    if job.arm.startswith("lance-torch-w"):
        return run_torch(job, src, draws, uri)
    next_batch = taker(lance.dataset(uri), src, draws, job.dense)
    out = timed(job, src, draws, next_batch)
    threads = os.environ.get("LANCE_IO_THREADS", "default (8 local)")
    out["config"] = (
        f"Lance docs, Read and write data (random access: take): pylance {lance.__version__}, one large_binary column, "
        f"dataset.take(indices) in-process on Lance's own I/O threads (LANCE_IO_THREADS={threads}), no workers and nothing "
        f"read ahead, step order"
    )
    return out
