#!/usr/bin/env python3
"""Binding-overhead benchmarks for the loaderx wheel (not a timed test).

1. Sampler(1_000_000, 256, IID).next() vs numpy.random.default_rng().integers(0, 1_000_000, 256)
   (target: the sampler is >= 10x faster per call).
2. view[idx] for 256 random 2 KiB raw records vs the same gather looped in Rust
   (loaderx._loaderx._bench_gather; target: Python / Rust <= 1.25).

Usage: python scripts/bench_python.py [--records 65536] [--repeat 5]

The Rust loop is a bench-only hook: build the wheel with
`pip install --no-build-isolation . -C build-args="--features bench-hooks"` first.
"""

from __future__ import annotations

import argparse
import tempfile
import time

import numpy as np

from loaderx import Allocator, _loaderx, dtypes
from loaderx.sampler import Sampler
from loaderx.zrecord import DenseStore, DenseWriter


def per_call(fn, iters: int, repeat: int) -> float:
    """Best-of-`repeat` seconds per call."""
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        for _ in range(iters):
            fn()
        best = min(best, (time.perf_counter() - t) / iters)
    return best


def bench_sampler(repeat: int) -> tuple[float, float]:
    s = Sampler(1_000_000, 256, Sampler.Mode.IID, seed=42)
    rng = np.random.default_rng()
    iters = 20_000
    ours = per_call(s.next, iters, repeat)
    theirs = per_call(lambda: rng.integers(0, 1_000_000, 256), iters, repeat)
    return ours, theirs


def bench_gather(records: int, repeat: int) -> tuple[float, float]:
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as d:
        data = rng.integers(0, 256, size=(records, 2048), dtype=np.uint8)
        with DenseWriter(f"{d}/s", dtypes.uint8, (2048,), "raw") as w:
            w.append(data)
        del data
        with DenseStore(f"{d}/s") as store, Allocator("cpu") as alloc:
            view = store.bind(alloc)
            idx = rng.integers(0, records, 256).astype(np.int64)
            view[idx]  # warm the pool and the page cache
            iters = 2000
            py_best = rust_best = float("inf")
            for _ in range(repeat):  # interleave so both see the same machine state
                py_best = min(py_best, per_call(lambda: view[idx], iters, 1))
                rust_best = min(rust_best, _loaderx._bench_gather(view, idx, iters) * 1e-9)
            return py_best, rust_best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=65536)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    if not hasattr(_loaderx, "_bench_gather"):
        raise SystemExit('bench_python: this wheel has no bench hook; build it with '
                         'pip install --no-build-isolation . -C build-args="--features bench-hooks"')
    ours, numpy_ = bench_sampler(a.repeat)
    print(f"sampler  : Sampler.next {ours * 1e9:8.0f} ns/call | rng.integers {numpy_ * 1e9:8.0f} ns/call | speedup {numpy_ / ours:5.1f}x (target >= 10x)")
    py, rust = bench_gather(a.records, a.repeat)
    print(f"gather   : view[idx] {py * 1e6:8.1f} us/call | Rust gather {rust * 1e6:8.1f} us/call | ratio {py / rust:5.3f} (target <= 1.25)")


if __name__ == "__main__":
    main()
