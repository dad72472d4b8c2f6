"""One Python sampler arm for the harness: prints {"per_batch_s": ..., "verified": ...} as JSON."""
import json
import sys
import time

import numpy as np

IDS = 1_000_000


def timed(fn, seconds):
    for _ in range(200):
        fn()
    calls = 0
    t0 = time.perf_counter()
    while True:
        for _ in range(256):
            fn()
        calls += 256
        if time.perf_counter() - t0 >= seconds:
            break
    return (time.perf_counter() - t0) / calls


def main():
    arm, batch, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    if arm == "loaderx-sampler-next":
        try:
            from loaderx.sampler import Sampler
        except ImportError as e:  # wheel not installed
            print(json.dumps({"error": f"loaderx wheel not installed: {e}"}))
            return
        s = Sampler(IDS, batch, Sampler.Mode.IID, seed=42)
        first = s.next()
        ok = first.dtype == np.uint64 and first.shape == (batch,) and bool((first < IDS).all())
        per = timed(s.next, seconds)
    else:
        rng = np.random.default_rng(42)
        out = rng.integers(0, IDS, batch)
        ok = bool((out < IDS).all()) and out.shape == (batch,)
        per = timed(lambda: rng.integers(0, IDS, batch), seconds)
    print(json.dumps({"per_batch_s": per, "verified": ok}))


if __name__ == "__main__":
    main()
