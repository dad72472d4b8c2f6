"""What ordered delivery costs against completion order (issue 32, item 1).

Two workloads on seeded data of the harness's shapes, written to a temporary directory:

* dense vision: uint8 images of 224 x 224 x 3 (150,528 B each), raw, batches of 64 (9.6 MB);
* ragged tokens: int32 token records of 16..512 tokens (lengths seeded, uniform), zstd, batches of
  256.

For each workload, worker count (1, 2, 4) and transform, the two delivery modes run as alternating
arms of one round (which goes first alternates from round to round, so drift on a shared machine
cannot favour one), each a fresh Loader whose first batches are untimed; the rate is batches per
second over the timed ones. Transforms: `uniform` sleeps the same time for every batch, `random`
sleeps an exponentially distributed time of the same mean, drawn from the batch's first index (so
both arms see the same duration for the same step). The sleep releases the GIL, as a transform
waiting on a device or on numpy does. The mean is the workload's measured gather time (a transform
that costs about what the gather does: the regime where several workers pay off).

    python scripts/ordered_cost.py [--rounds 7] [--batches 120] [--workers 1 2 4] [--scale 1]

``--scale k`` makes the transform's mean k times the gather (a transform-bound pipeline).

Prints one line per cell: the median rate of each mode over the rounds, the ratio of the medians
(ordered / completion) and the median of the per-round ratios.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from loaderx import Allocator, Loader, dtypes
from loaderx.sampler import Sampler
from loaderx.zrecord import DenseStore, DenseWriter, RaggedBatch, RaggedStore, RaggedWriter


def write_vision(path: Path, n: int) -> None:
    rng = np.random.default_rng(1)
    with DenseWriter(path, dtypes.uint8, (224, 224, 3), "raw") as w:
        for start in range(0, n, 64):
            rows = min(64, n - start)
            w.append(rng.integers(0, 256, (rows, 224, 224, 3), dtype=np.uint8))


def write_tokens(path: Path, n: int) -> None:
    rng = np.random.default_rng(2)
    with RaggedWriter(path, dtypes.int32, 1, "zstd") as w:
        for start in range(0, n, 4096):
            rows = min(4096, n - start)
            lens = rng.integers(16, 513, rows)
            recs = [rng.integers(0, 50257, k, dtype=np.int32) for k in lens]
            w.append(RaggedBatch.from_records(recs))


def gather_seconds(view, n: int, batch: int) -> float:
    """Median time of one batch's gather (the view indexed by a Cyclic draw)."""
    s = Sampler(n, batch, Sampler.Mode.CYCLIC, seed=9)
    out = []
    for _ in range(30):
        idx = s.next()
        t = time.perf_counter()
        view[idx]
        out.append(time.perf_counter() - t)
    return statistics.median(out[5:])


def run(streams, n, batch, workers, ordered, transform, batches, warm=10) -> float:
    loader = Loader(streams, Sampler(n, batch, Sampler.Mode.CYCLIC, seed=3), transform,
                    workers=workers, prefetch=4, ordered=ordered)
    with loader:
        for _ in range(warm):
            next(loader)
        t = time.perf_counter()
        for _ in range(batches):
            next(loader)
        return batches / (time.perf_counter() - t)


def first_index(shards) -> int:
    x = next(iter(shards[0].values()))
    if hasattr(x, "values"):  # RaggedBatch: its first value is enough to key the duration
        return int(np.from_dlpack(x.values)[0])
    return int(np.from_dlpack(x).reshape(-1)[:8].astype(np.int64).sum())


def transforms(mean: float):
    def uniform(shards):
        time.sleep(mean)
        return len(shards)

    def rand(shards):
        time.sleep(random.Random(first_index(shards)).expovariate(1.0 / mean))
        return len(shards)

    return {"uniform": uniform, "random": rand}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--batches", type=int, default=120)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--workloads", nargs="+", default=["vision", "tokens"])
    ap.add_argument("--scale", type=float, default=1.0, help="transform mean / gather time")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        alloc = Allocator("cpu", pool_size=1 << 30)
        loads = {}
        if "vision" in args.workloads:
            write_vision(d / "img", 640)
            st = DenseStore(d / "img")
            loads["vision"] = ({"image": [st.bind(alloc)]}, 640, 64, st.bind(alloc))
        if "tokens" in args.workloads:
            write_tokens(d / "tok", 20000)
            st = RaggedStore(d / "tok")
            loads["tokens"] = ({"tokens": [st.bind(alloc)]}, 20000, 256, st.bind(alloc))
        print("workload  workers  transform  mean_ms  completion_b/s  ordered_b/s  ratio_of_medians  median_ratio")
        for name, (streams, n, batch, view) in loads.items():
            mean = gather_seconds(view, n, batch) * args.scale
            for workers in args.workers:
                for tname, tf in transforms(mean).items():
                    rates = {False: [], True: []}
                    ratios = []
                    for r in range(args.rounds):
                        order = (False, True) if r % 2 == 0 else (True, False)
                        got = {o: run(streams, n, batch, workers, o, tf, args.batches) for o in order}
                        for o in order:
                            rates[o].append(got[o])
                        ratios.append(got[True] / got[False])
                    c, o = statistics.median(rates[False]), statistics.median(rates[True])
                    print(f"{name:8s}  {workers:7d}  {tname:9s}  {mean * 1e3:7.2f}  {c:14.1f}  {o:11.1f}  "
                          f"{o / c:16.3f}  {statistics.median(ratios):12.3f}", flush=True)


if __name__ == "__main__":
    main()
