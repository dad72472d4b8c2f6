"""torch ``DataLoader`` arms: a map-style Dataset over the ``.npy`` mmap with default collate
(dense), and for ragged tokens the packed ``values + cu_seqlens + shapes`` collate, in-process over
one ``.npy`` file per record, or with 4 workers over the tokens/offsets mmap.

The batch sampler yields the harness's draws, so every batch holds the same records as every
other arm's batch of that step. Workers are forked (Linux default) with a 120 s ``timeout`` so a
worker that dies (e.g. on a full ``/dev/shm``) fails the row instead of hanging it.
"""

from __future__ import annotations

import os

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from .common import Job, Source, emit, timed

WORKERS = 4
PREFETCH = 2  # torch's default prefetch_factor with workers
TIMEOUT_S = 120


class MmapRecords(Dataset):
    """Record ``i`` of the corpus arrays, opened lazily (after fork) as an mmap."""

    def __init__(self, kind: str, npy_dir: str):
        self.kind, self.npy_dir, self.src = kind, npy_dir, None

    def _open(self) -> Source:
        if self.src is None:
            self.src = Source.open(self.kind, self.npy_dir)
        return self.src

    def __len__(self):
        return len(self._open())

    def __getitem__(self, i):
        return torch.from_numpy(np.array(self._open().record(i)))


class RecordFiles(Dataset):
    """Record ``i`` read from its own ``.npy`` file (the per-record layout)."""

    def __init__(self, files_dir: str, n: int):
        self.dir, self.n = files_dir, n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return torch.from_numpy(np.load(os.path.join(self.dir, f"{i:08d}.npy")))


def packed_collate(items):
    """Ragged contract without padding: concatenated values, int32 cu_seqlens, int64 shapes (n, 1)."""
    lens = torch.tensor([len(t) for t in items], dtype=torch.int64)
    cu = torch.zeros(len(items) + 1, dtype=torch.int32)
    cu[1:] = torch.cumsum(lens, 0)
    return torch.cat(items), cu, lens.reshape(-1, 1)


class Draws:
    """A batch sampler over the harness's draws (one list of indices per step)."""

    def __init__(self, draws: np.ndarray):
        self.draws = draws

    def __len__(self):
        return len(self.draws)

    def __iter__(self):
        for row in self.draws:
            yield row.tolist()


def write_record_files(job: Job, src: Source) -> str:
    """One ``.npy`` per ragged record under the peer cache (untimed, once)."""
    d = job.cache(f"npy-files-{len(src)}")
    done = os.path.join(d, ".complete")
    if not os.path.exists(done):
        os.makedirs(d, exist_ok=True)
        for i in range(len(src)):
            np.save(os.path.join(d, f"{i:08d}.npy"), np.array(src.record(i)))
        open(done, "w").close()
    return d


def run(job: Job) -> dict:
    src = job.source()
    draws = job.draws()
    if job.arm == "torch-dataloader-w4":
        ds = MmapRecords(job.kind, job.npy_dir)
        collate = None if job.dense else packed_collate
        workers = WORKERS
        note = f"torch {torch.__version__}, num_workers={WORKERS}, prefetch_factor={PREFETCH}, map-style Dataset over the npy mmap, {'default' if job.dense else 'packed'} collate, batch_sampler = the shared draws"
    elif job.arm == "torch-files-w0":
        if job.dense:
            return {"skipped": "per-record .npy files are a ragged-tokens arm"}
        ds = RecordFiles(write_record_files(job, src), len(src))
        collate = packed_collate
        workers = 0
        note = f"torch {torch.__version__}, num_workers=0 (in-process), one .npy file per record, packed collate"
    else:
        return {"skipped": f"unknown torch arm {job.arm}"}
    kw = dict(num_workers=workers, collate_fn=collate, batch_sampler=Draws(draws))
    if workers:
        kw.update(prefetch_factor=PREFETCH, timeout=TIMEOUT_S)
    it = iter(DataLoader(ds, **kw))
    out = timed(job, src, draws, lambda _k: next(it))
    out["config"] = note
    del it
    return out


if __name__ == "__main__":
    raise SystemExit("run through harness/python/loader_bench.py")
