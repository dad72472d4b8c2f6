"""SPDL 0.8 arms over the ``.npy`` mmap, as SPDL's docs build a pipeline (SPDL docs, "Pipeline"
guide and ``spdl.pipeline.PipelineBuilder``: ``add_source`` -> ``pipe(fn, concurrency=k,
output_order="input")`` -> ``add_sink(buffer)`` -> ``build(num_threads=k)``; ``iterate_in_subprocess``
with a ``SharedMemorySegmentPool`` arena for the subprocess form):

* ``spdl-thread-w2`` / ``-w4``: a source of steps, a gather stage with concurrency 2 / 4 on as many
  threads (one task per step: the step's records in one NumPy gather into the contract, rather
  than the docs' per-record fetch + ``aggregate(256)``, whose 256 tasks a batch cost more than the
  mmap reads themselves), step (input) order, sink buffer 4: ``workers`` batches in flight and 4
  ahead, loaderx's window of ``workers + prefetch``.
* ``spdl-process-w2`` / ``-w4``: the same pipeline run in a subprocess by ``iterate_in_subprocess``
  with a ``SharedMemorySegmentPool`` arena (SPDL needs at least 2 segments; 12 are used: the timed
  loop holds 8 batches at a time), whose batches come back as zero-copy views over shared memory;
  its sink holds 3 batches and the subprocess queue 1, so again 4 ahead.
"""

from __future__ import annotations

import functools
from importlib.metadata import version

import numpy as np

from .common import BATCH, Job, Source, pack, timed

SINK_BUFFER = 4  # batches ahead, as loaderx's prefetch
ARENA_SEGMENTS = 12  # the consumer holds a block of at most 8 timed batches (common.BLOCK)
SUBPROCESS_BUFFER = 1  # the queue out of the subprocess; its sink holds SINK_BUFFER - 1


def gather(src: Source, draws: np.ndarray, step: int):
    """Step ``step``'s batch in the contract: a ``(256, *item)`` copy, or packed ragged arrays."""
    idx = draws[step]
    if src.dense is not None:
        return src.dense[idx]
    return pack([src.record(int(i)) for i in idx])


def pipeline(kind: str, npy_dir: str, draws_path: str, steps: int, workers: int, sink: int):
    """The thread pipeline, as an iterable of batches in step order."""
    from spdl.pipeline import PipelineBuilder

    src = Source.open(kind, npy_dir)
    draws = np.load(draws_path)[:steps].astype(np.int64)
    pipe = (
        PipelineBuilder()
        .add_source(range(steps))
        .pipe(functools.partial(gather, src, draws), concurrency=workers, output_order="input")
        .add_sink(sink)
        .build(num_threads=workers)
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
    workers = int(job.arm.rsplit("-w", 1)[1])
    stage = f"gather stage concurrency={workers}, num_threads={workers}, output_order=input"
    if job.arm.startswith("spdl-thread-w"):
        it = iter(pipeline(job.kind, job.npy_dir, job.draws_path, steps, workers, SINK_BUFFER))
        config = (
            f"SPDL docs, Pipeline guide (PipelineBuilder): spdl {version('spdl')} thread pipeline, {stage}, "
            f"sink buffer={SINK_BUFFER} ({workers} batches in flight + {SINK_BUFFER} ahead = loaderx's window of workers + prefetch), step order"
        )
    elif job.arm.startswith("spdl-process-w"):
        sink = SINK_BUFFER - SUBPROCESS_BUFFER
        make = functools.partial(pipeline, job.kind, job.npy_dir, job.draws_path, steps, workers, sink)
        seg = segment_bytes(src)
        arena = sp.SharedMemorySegmentPool(seg, ARENA_SEGMENTS)
        it = iter(sp.iterate_in_subprocess(make, buffer_size=SUBPROCESS_BUFFER, arena=arena, timeout=120))
        config = (
            f"SPDL docs, iterate_in_subprocess with a SharedMemorySegmentPool arena: spdl {version('spdl')} thread pipeline "
            f"in a subprocess, {stage}, sink buffer={sink} + subprocess buffer_size={SUBPROCESS_BUFFER} "
            f"({workers} in flight + {SINK_BUFFER} ahead = loaderx's window), arena {seg >> 20} MiB x {ARENA_SEGMENTS}, step order"
        )
    else:
        return {"skipped": f"unknown spdl arm {job.arm}"}
    out = timed(job, src, draws, lambda _k: next(it))
    out["config"] = config
    del it
    return out
