"""Measures one process's per-step cost in a data-parallel job (docs/distributed.md): the index
computation of its slice of a global batch, and the draw + gather of that slice through a Loader,
at process_count 1 and 2 (and more, with --procs). Single process, workers=0 (everything in the
calling thread), warm page cache; the median over --reps steps after a warm-up.

    python scripts/dist_slice_cost.py [--batch 8192] [--record 256] [--procs 1 2 4]

The Python Sampler has no range method, so the index cost of a slice of B/N positions is timed as a
Sampler whose batch is B/N: the same per-position code (`Plan::fill` with an offset), the same work.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from loaderx import Allocator, Loader, dtypes
from loaderx.sampler import Sampler
from loaderx.zrecord import DenseStore, DenseWriter


def median_ns(fn, reps):
    for _ in range(max(10, reps // 10)):
        fn()
    out = []
    for _ in range(reps):
        t = time.perf_counter_ns()
        fn()
        out.append(time.perf_counter_ns() - t)
    return statistics.median(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1 << 20)
    ap.add_argument("--batch", type=int, default=8192)
    ap.add_argument("--record", type=int, default=256, help="bytes per record")
    ap.add_argument("--procs", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--reps", type=int, default=300)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "x"
        with DenseWriter(path, dtypes.uint8, (args.record,), "raw") as w:
            for start in range(0, args.n, 1 << 16):
                rows = min(1 << 16, args.n - start)
                w.append(np.full((rows, args.record), start % 251, np.uint8))
        store = DenseStore(path)
        alloc = Allocator("cpu")
        print(f"N={args.n} records of {args.record} B, global batch B={args.batch}, median of {args.reps}")
        print("mode      procs  slice  index_us  step_us  MB/step")
        for mode in (Sampler.Mode.SEQUENTIAL, Sampler.Mode.IID, Sampler.Mode.CYCLIC):
            for p in args.procs:
                local = args.batch // p
                s = Sampler(args.n, local, mode, seed=1)
                index = median_ns(s.next, args.reps)
                full = Sampler(args.n, args.batch, mode, seed=1)
                with Loader({"x": [store.bind(alloc)]}, full, workers=0, process_index=p - 1, process_count=p) as ld:
                    step = median_ns(ld.next, args.reps)
                name = str(mode).split(".")[-1]
                print(f"{name:9} {p:5} {local:6} {index / 1e3:9.1f} {step / 1e3:8.1f} {local * args.record / 1e6:8.2f}")
        store.close()
        alloc.close()


if __name__ == "__main__":
    main()
