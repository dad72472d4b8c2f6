"""torch ``DataLoader`` arms, run the way torch's docs run random-access batches (torch docs,
``torch.utils.data``: "Map-style datasets" with the optional ``__getitems__``, which the map
fetcher calls once per batch with the batch sampler's list of indices; "Multi-process data
loading"; "Memory Pinning" is left out: the batches stay on the CPU).

* ``torch-dataloader-w2`` / ``-w4``: a map-style Dataset over the corpus ``.npy`` mmap whose
  ``__getitems__`` returns the step's records as tensors viewing the mmap (no copy), collated by
  ``default_collate`` (dense: one ``torch.stack`` into a shared-memory tensor, as torch does in a
  worker) or by the packed collate (ragged: one ``torch.cat`` into shared memory), so each record is
  copied once, into the batch the worker hands over.
* ``torch-files-w0`` (ragged only): in-process over one ``.npy`` file per record, packed collate.

The batch sampler yields the harness's draws, so every batch holds the same records as every other
arm's batch of that step, delivered in step order. Workers are forked (Linux default) with a 120 s
``timeout`` so a worker that dies (e.g. on a full ``/dev/shm``) fails the row instead of hanging it,
and keep ``prefetch_factor = ceil((workers + 4) / workers)`` batches each in flight: as many batches
ahead as loaderx's window of ``workers + prefetch`` (prefetch 4). The Streaming and LitData arms run
in the same ``DataLoader`` (``data_loader``).
"""

from __future__ import annotations

import os
import warnings

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, default_collate, get_worker_info

from .common import Job, Source, timed_loader

# The records are read-only mmap views; the batch is a fresh tensor, never written through them.
warnings.filterwarnings("ignore", message="The given NumPy array is not writable")

LOADERX_PREFETCH = 4  # loaderx's prefetch in every loaderx row: its window is workers + 4 batches
TIMEOUT_S = 120


def workers_of(arm: str) -> int:
    """The worker count an arm's name ends with (``...-w4`` -> 4)."""
    return int(arm.rsplit("-w", 1)[1])


def prefetch_factor(workers: int) -> int:
    """Batches each worker keeps in flight so that ``workers x factor`` covers loaderx's window."""
    return -(-(workers + LOADERX_PREFETCH) // workers)


def _out(like: torch.Tensor, numel: int) -> torch.Tensor:
    """A 1-D tensor of ``numel`` elements, in shared memory inside a worker (the allocation
    ``default_collate`` makes there, so handing it to the main process copies nothing)."""
    if get_worker_info() is None:
        return torch.empty(numel, dtype=like.dtype)
    storage = like._typed_storage()._new_shared(numel, device=like.device)
    return like.new(storage).resize_(numel)


def packed_collate(items):
    """Ragged contract without padding: concatenated values, int32 cu_seqlens, int64 shapes (n, 1).
    Takes tensors or NumPy arrays (records of the Streaming and LitData datasets)."""
    items = [torch.as_tensor(t) for t in items]
    lens = torch.tensor([len(t) for t in items], dtype=torch.int64)
    cu = torch.zeros(len(items) + 1, dtype=torch.int32)
    cu[1:] = torch.cumsum(lens, 0)
    values = _out(items[0], int(cu[-1]))
    torch.cat(items, out=values)
    return values, cu, lens.reshape(-1, 1)


def collate_for(dense: bool):
    """``default_collate`` (stacks into shared memory in a worker) or the packed collate."""
    return default_collate if dense else packed_collate


class Draws:
    """A batch sampler over the harness's draws (one list of indices per step)."""

    def __init__(self, draws: np.ndarray):
        self.draws = draws

    def __len__(self):
        return len(self.draws)

    def __iter__(self):
        for row in self.draws:
            yield row.tolist()


def data_loader(ds, draws: np.ndarray, workers: int, dense: bool, context: str = "fork"):
    """A ``DataLoader`` over ``ds`` with the draws as batch sampler; its settings, for the note."""
    pf = prefetch_factor(workers)
    dl = DataLoader(
        ds,
        batch_sampler=Draws(draws),
        num_workers=workers,
        collate_fn=collate_for(dense),
        prefetch_factor=pf,
        timeout=TIMEOUT_S,
        multiprocessing_context=context,
    )
    note = (
        f"torch {torch.__version__} DataLoader: num_workers={workers} ({context}), prefetch_factor={pf} "
        f"(= ceil((workers + 4) / workers): {workers * pf} batches in flight, loaderx's window is "
        f"workers + prefetch = {workers + LOADERX_PREFETCH}), batch_sampler = the shared draws, "
        f"{'default_collate' if dense else 'packed collate'} into shared memory, step order, timeout={TIMEOUT_S} s"
    )
    return dl, note


class MmapRecords(Dataset):
    """Record ``i`` of the corpus arrays, opened lazily (after fork) as an mmap; ``__getitems__``
    returns a step's records as tensors viewing the mmap."""

    def __init__(self, kind: str, npy_dir: str):
        self.kind, self.npy_dir, self.src = kind, npy_dir, None

    def _open(self) -> Source:
        if self.src is None:
            self.src = Source.open(self.kind, self.npy_dir)
        return self.src

    def __len__(self):
        return len(self._open())

    def __getitem__(self, i):
        return torch.from_numpy(self._open().record(i))

    def __getitems__(self, idx):
        src = self._open()
        return [torch.from_numpy(src.record(i)) for i in idx]


class RecordFiles(Dataset):
    """Record ``i`` read from its own ``.npy`` file (the per-record layout)."""

    def __init__(self, files_dir: str, n: int):
        self.dir, self.n = files_dir, n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return torch.from_numpy(np.load(os.path.join(self.dir, f"{i:08d}.npy")))


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
    if job.arm in ("torch-dataloader-w2", "torch-dataloader-w4"):
        dl, note = data_loader(MmapRecords(job.kind, job.npy_dir), draws, workers_of(job.arm), job.dense)
        note = (
            "torch docs, torch.utils.data: map-style Dataset with __getitems__ (records as tensors "
            f"viewing the npy mmap, one copy into the batch); {note}"
        )
    elif job.arm == "torch-files-w0":
        if job.dense:
            return {"skipped": "per-record .npy files are a ragged-tokens arm"}
        ds = RecordFiles(write_record_files(job, src), len(src))
        dl = DataLoader(ds, batch_sampler=Draws(draws), num_workers=0, collate_fn=packed_collate)
        note = f"torch docs, torch.utils.data: map-style Dataset (per-record __getitem__, single-process loading): torch {torch.__version__}, num_workers=0, one .npy file per record, packed collate, step order"
    else:
        return {"skipped": f"unknown torch arm {job.arm}"}
    out = timed_loader(job, src, draws, dl)
    out["config"] = note
    return out


if __name__ == "__main__":
    raise SystemExit("run through harness/python/loader_bench.py")
