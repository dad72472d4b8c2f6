"""Where the Python loader's time goes for Ragged token batches (a profile, not a test).

Builds (once) a raw Ragged store of 200,000 int32 sequences whose lengths follow WikiText-103's
quantiles (p10 28, median 127, p90 253, at most 512), then times, interleaved round by round,
batch 256 IID:

* `view[idx]` from Python (the binding's index parsing and batch object on top of the Rust gather),
  alone and followed by three `numpy.from_dlpack` / `torch.from_dlpack` conversions;
* `Loader` with workers 0, 1, 4 (prefetch 4), without a transform (batches converted on the
  consumer side) and with the conversions as the transform (run in the worker, under the GIL).

Prints the median µs per batch and the median of per-round ratios to the first row.

usage: python scripts/ragged_handoff.py STORE_PATH [ROUNDS]
"""
import os
import sys
import time

import numpy as np

from loaderx import Allocator, Loader
from loaderx.sampler import Sampler
from loaderx.zrecord import RaggedBatch, RaggedStore, RaggedWriter

N, BATCH, PER_ROUND = 200_000, 256, 1500


def build(path):
    rng = np.random.default_rng(3)
    lens = np.interp(rng.random(N), [0, 0.1, 0.5, 0.9, 1.0], [1, 28, 127, 253, 512])
    lens = lens.round().astype(np.int64).clip(1)
    cu = np.zeros(N + 1, np.int32)
    cu[1:] = np.cumsum(lens)
    values = rng.integers(0, 50_000, int(cu[-1]), dtype=np.int32)
    w = RaggedWriter(path, np.int32, 1, "raw")
    w.append(RaggedBatch(values, cu, lens.reshape(-1, 1).astype(np.uint64)))
    w.close()


def converter(to_tensor):
    def convert(b):
        return to_tensor(b.values), to_tensor(b.cu_seqlens), to_tensor(b.shapes)

    return convert


def time_one(make):
    it = make()
    for _ in range(20):
        next(it)
    t = time.perf_counter()
    for _ in range(PER_ROUND):
        next(it)
    us = (time.perf_counter() - t) / PER_ROUND * 1e6
    if hasattr(it, "close"):
        it.close()
    return us


def main():
    path, rounds = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 5
    if not os.path.exists(path):
        build(path)
    converters = [("np.from_dlpack", converter(np.from_dlpack))]
    try:
        import torch

        converters.append(("torch.from_dlpack", converter(torch.from_dlpack)))
    except ImportError:
        pass
    with RaggedStore(path) as store, Allocator("cpu") as alloc:
        view = store.bind(alloc)

        def bare(convert=None):
            def make():
                s = Sampler(N, BATCH, Sampler.Mode.IID, seed=1)
                while True:
                    b = view[s.next()]
                    yield convert(b) if convert else b

            return make

        def loader(workers, convert=None):
            tf = None
            if convert:
                def tf(shards):
                    return [convert(s["data"]) for s in shards]

            return lambda: Loader({"data": [view]}, Sampler(N, BATCH, Sampler.Mode.IID, seed=1),
                                  transform=tf, workers=workers, prefetch=4)

        rows = [("view[idx]", bare())]
        rows += [(f"view[idx] + 3x {name}", bare(c)) for name, c in converters]
        for w in (0, 1, 4):
            rows.append((f"Loader workers={w}, no transform", loader(w)))
            rows += [(f"Loader workers={w}, 3x {name} transform", loader(w, c)) for name, c in converters]
        times = [[] for _ in rows]
        for _ in range(rounds):
            for k, (_, make) in enumerate(rows):
                times[k].append(time_one(make))

    def median(v):
        return sorted(v)[len(v) // 2]

    for k, (label, _) in enumerate(rows):
        ratio = median([times[0][r] / times[k][r] for r in range(rounds)])
        print(f"  {label:<48} {median(times[k]):8.1f} us/batch  {ratio:5.2f}x view[idx]")


if __name__ == "__main__":
    main()
