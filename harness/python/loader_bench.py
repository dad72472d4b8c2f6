"""Python loader rows for the harness. Prints one JSON line:
{"per_batch_s": s, "verified": bool} or {"skipped": "reason"}.

usage: loader_bench.py ARM KIND ZRECORD_STORE NPY_DIR BATCHES
  ARM  = python-loaderx-w4 | torch-dataloader-w4
  KIND = dense-vision | ragged-tokens
"""
import json
import os
import sys
import time

import numpy as np

BATCH = 256
WARMUP = 10


def emit(obj):
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss + resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    obj["peak_rss_bytes"] = peak * 1024
    print(json.dumps(obj))
    sys.stdout.flush()


def loaderx_arm(kind, store_path, batches):
    from loaderx import Allocator, Loader
    from loaderx.sampler import Sampler
    from loaderx.zrecord import DenseStore, RaggedStore

    try:
        import torch

        to_tensor = torch.from_dlpack
    except ImportError:
        to_tensor = np.from_dlpack

    dense = kind == "dense-vision"
    Store = DenseStore if dense else RaggedStore

    def transform(shards):
        out = []
        for shard in shards:
            v = shard["data"]
            if dense:
                out.append(to_tensor(v))
            else:
                out.append((to_tensor(v.values), to_tensor(v.cu_seqlens), to_tensor(v.shapes)))
        return out

    def first_array(item):
        x = item[0] if dense else item[0][0]
        return np.asarray(x)

    with Store(store_path) as store, Allocator("cpu") as alloc:
        view = store.bind(alloc)
        n = len(view)
        # Verification: an ordered loader's first batches equal direct view gathers of the same draws.
        ref = Sampler(n, BATCH, Sampler.Mode.IID, seed=7)
        check = Loader({"data": [view]}, Sampler(n, BATCH, Sampler.Mode.IID, seed=7), transform=transform, workers=1, prefetch=1)
        ok = True
        try:
            for _ in range(3):
                got = first_array(next(check))
                idx = ref.next().copy()
                want = view[idx]
                want = np.from_dlpack(want) if dense else np.from_dlpack(want.values)
                ok = ok and np.array_equal(got, want)
        finally:
            check.close()
        loader = Loader({"data": [view]}, Sampler(n, BATCH, Sampler.Mode.IID, seed=7), transform=transform, workers=4, prefetch=4)
        try:
            for _ in range(WARMUP):
                next(loader)
            t0 = time.perf_counter()
            for _ in range(batches):
                next(loader)
            per = (time.perf_counter() - t0) / batches
        finally:
            loader.close()
    return per, bool(ok)


def torch_arm(kind, npy_dir, batches):
    try:
        import torch
        from torch.utils.data import DataLoader, Dataset, RandomSampler
    except ImportError:
        return None

    dense = kind == "dense-vision"

    class Records(Dataset):
        def __init__(self):
            self.arr = None

        def _open(self):
            if self.arr is None:
                if dense:
                    self.arr = np.load(os.path.join(npy_dir, "dense.npy"), mmap_mode="r")
                else:
                    self.arr = (np.load(os.path.join(npy_dir, "tokens.npy"), mmap_mode="r"),
                                np.load(os.path.join(npy_dir, "offsets.npy"), mmap_mode="r"))

        def __len__(self):
            self._open()
            return len(self.arr) if dense else len(self.arr[1]) - 1

        def __getitem__(self, i):
            self._open()
            if dense:
                return torch.from_numpy(np.array(self.arr[i]))
            toks, offs = self.arr
            return torch.from_numpy(np.array(toks[offs[i]:offs[i + 1]]))

    def packed(items):
        lens = torch.tensor([len(t) for t in items], dtype=torch.int32)
        cu = torch.zeros(len(items) + 1, dtype=torch.int32)
        cu[1:] = torch.cumsum(lens, 0)
        return torch.cat(items), cu, lens.to(torch.int64)

    ds = Records()
    n = len(ds)
    dl = DataLoader(ds, batch_size=BATCH, sampler=RandomSampler(ds, replacement=True, num_samples=n * 1000),
                    num_workers=4, collate_fn=None if dense else packed, persistent_workers=True)
    it = iter(dl)
    for _ in range(WARMUP):
        next(it)
    t0 = time.perf_counter()
    for _ in range(batches):
        next(it)
    return (time.perf_counter() - t0) / batches, True


def main():
    arm, kind, store, npy_dir, batches = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
    if arm == "python-loaderx-w4":
        try:
            import loaderx  # noqa: F401
        except ImportError as e:
            emit({"skipped": f"loaderx wheel not installed ({e})"})
            return
        per, ok = loaderx_arm(kind, store, batches)
        emit({"per_batch_s": per, "verified": ok})
    elif arm == "torch-dataloader-w4":
        r = torch_arm(kind, npy_dir, batches)
        if r is None:
            emit({"skipped": "torch not installed"})
        else:
            emit({"per_batch_s": r[0], "verified": r[1]})
    else:
        emit({"skipped": f"unknown arm {arm}"})


if __name__ == "__main__":
    main()
