"""SPDL 0.8 arms over the ``.npy`` mmap: a thread pipeline (``PipelineBuilder``: source of steps,
gather stage with concurrency 4, ordered output, sink buffer 4), and the same pipeline run in a
subprocess by ``iterate_in_subprocess`` with a ``SharedMemorySegmentPool`` arena (SPDL needs at
least 2 segments; 12 are used: the timed loop holds 8 batches at a time), whose batches come back as zero-copy views over shared memory.
"""

from __future__ import annotations

import functools
from importlib.metadata import version

import numpy as np

from .common import BATCH, Job, Source, pack, timed

CONCURRENCY = 4
SINK_BUFFER = 4
ARENA_SEGMENTS = 12  # the consumer holds a block of 8 timed batches (common.BLOCK)
SUBPROCESS_BUFFER = 3


def gather(src: Source, draws: np.ndarray, step: int):
    """Step ``step``'s batch in the contract: a ``(256, *item)`` copy, or packed ragged arrays."""
    idx = draws[step]
    if src.dense is not None:
        return src.dense[idx]
    return pack([src.record(int(i)) for i in idx])


def pipeline(kind: str, npy_dir: str, draws_path: str, steps: int):
    """The thread pipeline, as an iterable of batches in step order."""
    from spdl.pipeline import PipelineBuilder

    src = Source.open(kind, npy_dir)
    draws = np.load(draws_path)[:steps].astype(np.int64)
    pipe = (
        PipelineBuilder()
        .add_source(range(steps))
        .pipe(functools.partial(gather, src, draws), concurrency=CONCURRENCY, output_order="input")
        .add_sink(SINK_BUFFER)
        .build(num_threads=CONCURRENCY)
    )
    with pipe.auto_stop():
        yield from pipe.get_iterator(timeout=120)


def segment_bytes(src: Source) -> int:
    """A segment holds one batch: the dense batch, or the largest possible packed ragged batch."""
    if src.dense is not None:
        return BATCH * int(np.prod(src.dense.shape[1:])) * src.dense.itemsize + (1 << 20)
    longest = int(np.max(np.diff(src.offsets)))
    return BATCH * longest * src.tokens.itemsize + 8 * (2 * BATCH + 1) + (1 << 20)


def run(job: Job) -> dict:
    import spdl.pipeline as sp

    src = job.source()
    draws = job.draws()
    steps = job.steps
    make = functools.partial(pipeline, job.kind, job.npy_dir, job.draws_path, steps)
    if job.arm == "spdl-thread":
        it = iter(make())
        config = f"spdl {version('spdl')} thread pipeline: gather stage concurrency={CONCURRENCY}, num_threads={CONCURRENCY}, output_order=input, sink buffer={SINK_BUFFER}"
    elif job.arm == "spdl-process":
        seg = segment_bytes(src)
        arena = sp.SharedMemorySegmentPool(seg, ARENA_SEGMENTS)
        it = iter(sp.iterate_in_subprocess(make, buffer_size=SUBPROCESS_BUFFER, arena=arena, timeout=120))
        config = f"iterate_in_subprocess(thread pipeline as above, buffer_size={SUBPROCESS_BUFFER}, arena=SharedMemorySegmentPool({seg >> 20} MiB x {ARENA_SEGMENTS}))"
    else:
        return {"skipped": f"unknown spdl arm {job.arm}"}
    out = timed(job, src, draws, lambda _k: next(it))
    out["config"] = config
    del it
    return out
