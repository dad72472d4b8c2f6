"""Lance (pylance 14) arm, ``lance-take``, as Lance's docs read random rows (Lance docs, "Read and
write data": random access with ``LanceDataset.take(indices)``, whose reads run on Lance's own I/O
thread pool, ``LANCE_IO_THREADS``, 8 on local disks): the corpus written once with ``lance.write_dataset`` as one
``large_binary`` column (a record's raw bytes; ~2.5x faster to take than a FixedSizeList<uint8>
column), read in-process, one process and one calling thread, by ``dataset.take(draws[k])`` (keeps order
and duplicates: step order; no workers, so no prefetch: every batch is read when asked for). The
conversion to the contract (one copy out of the Arrow buffers; for ragged batches the Arrow
offsets become int32 cu_seqlens) is inside the timer."""

from __future__ import annotations

import os

import numpy as np

from .common import Job, Source, timed


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


def run(job: Job) -> dict:
    import lance

    src = job.source()
    draws = job.draws()
    ds = lance.dataset(write_lance(job, src))
    if job.dense:
        shape, dtype = src.dense.shape[1:], src.dense.dtype
    else:
        dtype = src.tokens.dtype

    def next_batch(k):
        col = ds.take(draws[k].tolist(), columns=["x"]).column("x").combine_chunks()
        _, offs_buf, data_buf = col.buffers()
        offs = np.frombuffer(offs_buf, dtype=np.int64, count=len(col) + 1, offset=col.offset * 8)
        data = np.frombuffer(data_buf, dtype=np.uint8)[offs[0] : offs[-1]]
        if job.dense:
            return data.view(dtype).reshape(len(col), *shape).copy()
        values = data.view(dtype).copy()
        cu = ((offs - offs[0]) // dtype.itemsize).astype(np.int32)
        return values, cu, np.diff(cu).astype(np.int64).reshape(-1, 1)

    out = timed(job, src, draws, next_batch)
    threads = os.environ.get("LANCE_IO_THREADS", "default (8 local)")
    out["config"] = (
        f"Lance docs, Read and write data (random access: take): pylance {lance.__version__}, one large_binary column, "
        f"dataset.take(indices) in-process on Lance's own I/O threads (LANCE_IO_THREADS={threads}), no workers and nothing "
        f"read ahead, step order"
    )
    return out
