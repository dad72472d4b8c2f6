"""Scenarios for test_fork.py, each run in its own interpreter so a hang cannot stall the suite.

    python _fork_helpers.py SCENARIO DIR CODEC

prints ``OK`` and exits 0 when the scenario behaved. Every place that could hang has its own
deadline (``LOADERX_HANG_TIMEOUT`` seconds, default 5: a forked child arms ``SIGALRM``, torch's
DataLoader gets ``timeout=``), so a hang turns into a failure in seconds; the test's
``subprocess.run(timeout=...)`` is only the last resort. Spawned workers import this module by
name, so everything they run lives at module level here.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import numpy as np

from loaderx import Allocator, Loader, dtypes
from loaderx.sampler import Sampler
from loaderx.zrecord import DenseStore, DenseWriter, RaggedBatch, RaggedStore, RaggedWriter

HANG = float(os.environ.get("LOADERX_HANG_TIMEOUT", "5"))
N = 128
DENSE_BYTES = 64 << 10  # one Dense record: 64 KiB, so 64 records are a 4 MiB gather (fans out)


def dense_record(i: int) -> np.ndarray:
    return ((np.arange(DENSE_BYTES, dtype=np.int64) * (i + 1) + i) % 251).astype(np.uint8)


def ragged_len(i: int) -> int:
    return 32768 + (i * 7919) % 65536


def ragged_record(i: int) -> np.ndarray:
    return ((np.arange(ragged_len(i), dtype=np.int64) + 3 * i) % 253).astype(np.uint8)


def make_stores(root: Path, codec: str) -> tuple[Path, Path]:
    """A Dense (uint8[65536] x 128, 8 MiB) and a Ragged (uint8, 32..96 KiB records) store."""
    dense, ragged = root / f"dense-{codec}", root / f"ragged-{codec}"
    if not dense.exists():
        with DenseWriter(dense, dtypes.uint8, (DENSE_BYTES,), codec) as w:
            w.append(np.stack([dense_record(i) for i in range(N)]))
    if not ragged.exists():
        with RaggedWriter(ragged, dtypes.uint8, 1, codec) as w:
            w.append(RaggedBatch.from_records([ragged_record(i) for i in range(N)]))
    return dense, ragged


def big_indices(seed: int, k: int = 96) -> np.ndarray:
    """k record positions (6 MiB Dense, about 6 MiB Ragged): every such gather fans out."""
    return np.random.default_rng(seed).integers(0, N, size=k).astype(np.int64)


def check_dense(got: np.ndarray, idx) -> None:
    want = np.stack([dense_record(int(i)) for i in idx])
    if not np.array_equal(got, want):
        raise AssertionError(f"dense gather of {list(idx)[:4]}... returned wrong bytes")


def check_ragged(values: np.ndarray, cu: np.ndarray, shapes: np.ndarray, idx) -> None:
    for k, i in enumerate(idx):
        rec = values[cu[k]:cu[k + 1]]
        if int(shapes[k][0]) != ragged_len(int(i)) or not np.array_equal(rec, ragged_record(int(i))):
            raise AssertionError(f"ragged record {int(i)} (position {k}) is wrong")


def gather_both(dense_view, ragged_view, idx) -> None:
    check_dense(np.from_dlpack(dense_view[idx]), idx)
    b = ragged_view[idx]
    check_ragged(np.from_dlpack(b.values), np.from_dlpack(b.cu_seqlens), np.from_dlpack(b.shapes), idx)


def _open(root: Path, codec: str):
    dense, ragged = make_stores(root, codec)
    alloc = Allocator("cpu")
    return DenseStore(dense), RaggedStore(ragged), alloc


def _wait_child(pid: int) -> int:
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def _check_child(code: int) -> None:
    if code == -int(signal.SIGALRM):
        raise SystemExit(f"forked child hung: killed by SIGALRM after {HANG} s")
    if code != 0:
        raise SystemExit(f"forked child failed: exit {code} (its error is above)")


def _child(body) -> None:
    """Runs body in the forked child under SIGALRM; never returns."""
    signal.alarm(int(HANG))
    code = 0
    try:
        body()
    except BaseException as e:  # noqa: BLE001 - report anything to the parent
        print(f"child: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        code = 2
    finally:
        sys.stdout.flush()
        os._exit(code)


# --- scenarios ----------------------------------------------------------------------------------


def os_fork(root: Path, codec: str) -> None:
    """The parent gathers (fanning out), forks; the child gathers several MiB; the parent again."""
    ds, rs, alloc = _open(root, codec)
    dv, rv = ds.bind(alloc), rs.bind(alloc)
    gather_both(dv, rv, big_indices(1))
    pid = os.fork()
    if pid == 0:
        def body():
            for seed in (2, 3):
                gather_both(dv, rv, big_indices(seed))
            # a store opened in the child, too
            ds2, rs2, a2 = _open(root, codec)
            gather_both(ds2.bind(a2), rs2.bind(a2), big_indices(4))
        _child(body)
    _check_child(_wait_child(pid))
    gather_both(dv, rv, big_indices(5))  # the parent still works


class ViewDataset:
    """A map-style torch Dataset over a Dense and a Ragged view; an item is a list of positions.

    The views are opened lazily in each process that first touches them (the pattern that works
    with both fork and spawn), unless ``views`` are given (then they travel with the dataset:
    inherited by fork, pickled by spawn)."""

    def __init__(self, root: str, codec: str, views=None):
        self.root, self.codec, self.views = root, codec, views

    def __len__(self) -> int:
        return N

    def __getitem__(self, idx):
        import torch

        if self.views is None:
            ds, rs, alloc = _open(Path(self.root), self.codec)
            self.views = (ds.bind(alloc), rs.bind(alloc))
        dv, rv = self.views
        idx = np.asarray(idx, dtype=np.int64)
        b = rv[idx]
        return {
            "idx": torch.from_numpy(idx),
            "dense": torch.from_dlpack(dv[idx]),
            "values": torch.from_dlpack(b.values),
            "cu_seqlens": torch.from_dlpack(b.cu_seqlens),
            "shapes": torch.from_dlpack(b.shapes),
        }


def _run_dataloader(root: Path, codec: str, context: str, lazy: bool = False) -> None:
    import torch
    from torch.utils.data import DataLoader

    ds, rs, alloc = _open(root, codec)
    dv, rv = ds.bind(alloc), rs.bind(alloc)
    gather_both(dv, rv, big_indices(1))  # the parent has fanned out before the workers start
    batches = [big_indices(10 + k, 64) for k in range(6)]
    dl = DataLoader(
        ViewDataset(str(root), codec, views=None if lazy else (dv, rv)),
        batch_size=None,  # each sampler element (a position array) goes to __getitem__ as is
        sampler=batches,
        num_workers=2,
        multiprocessing_context=context,
        timeout=HANG if context == "fork" else max(HANG, 60.0),  # spawn imports torch per worker
    )
    seen = 0
    for k, item in enumerate(dl):
        idx = item["idx"].numpy()
        if not np.array_equal(idx, batches[k]):
            raise AssertionError(f"batch {k} came out of order")
        check_dense(item["dense"].numpy(), idx)
        check_ragged(item["values"].numpy(), item["cu_seqlens"].numpy(), item["shapes"].to(torch.int64).numpy(), idx)
        seen += 1
    if seen != len(batches):
        raise AssertionError(f"{seen} of {len(batches)} batches")


def dataloader_fork(root: Path, codec: str) -> None:
    _run_dataloader(root, codec, "fork")


def dataloader_spawn(root: Path, codec: str) -> None:
    _run_dataloader(root, codec, "spawn")


def dataloader_spawn_lazy(root: Path, codec: str) -> None:
    """Spawn workers that open their own views (nothing loaderx is pickled): works today."""
    _run_dataloader(root, codec, "spawn", lazy=True)


def loader_in_child(root: Path, codec: str) -> None:
    """A Loader with worker threads started in the parent: the child's next() must raise a clear
    error that says fork (its threads do not exist there), and must never hang."""
    ds, rs, alloc = _open(root, codec)
    dv, rv = ds.bind(alloc), rs.bind(alloc)
    loader = Loader({"d": [dv], "r": [rv]}, Sampler(N, 64, Sampler.Mode.IID, seed=0), workers=2, prefetch=2)
    next(loader)
    pid = os.fork()
    if pid == 0:
        def body():
            try:
                next(loader)
            except Exception as e:  # noqa: BLE001
                if "fork" not in str(e).lower():
                    raise AssertionError(f"error does not say fork: {type(e).__name__}: {e}") from e
                return
            raise AssertionError("next() in the child returned a batch from the parent's loader")
        _child(body)
    _check_child(_wait_child(pid))
    next(loader)  # the parent's loader is unaffected
    loader.close()


def spawn_digest(args) -> list[int]:
    """Spawn-pool task: (pickled view, positions) -> the first byte of every gathered record."""
    view, idx = args
    t = view[np.asarray(idx, dtype=np.int64)]
    if hasattr(t, "values"):
        return np.from_dlpack(t.values)[np.from_dlpack(t.cu_seqlens)[:-1]].tolist()
    return np.from_dlpack(t)[:, 0].tolist()


def spawn_pool(root: Path, codec: str) -> None:
    import multiprocessing as mp

    ds, rs, alloc = _open(root, codec)
    dv, rv = ds.bind(alloc), rs.bind(alloc)
    gather_both(dv, rv, big_indices(1))
    tasks = [(dv, big_indices(20)), (rv, big_indices(21)), (dv, big_indices(22, 8)), (rv, big_indices(23, 8))]
    with mp.get_context("spawn").Pool(2) as pool:
        res = pool.map_async(spawn_digest, tasks).get(timeout=max(HANG, 60.0))
    for (view, idx), got in zip(tasks, res):
        if got != spawn_digest((view, idx)):
            raise AssertionError("a spawned worker read different records")


SCENARIOS = {f.__name__: f for f in (os_fork, dataloader_fork, dataloader_spawn, dataloader_spawn_lazy, loader_in_child, spawn_pool)}

if __name__ == "__main__":
    import _fork_helpers  # noqa: F401 - spawned workers unpickle functions/classes by this name

    name, root, codec = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
    getattr(_fork_helpers, name)(root, codec)
    print("OK", flush=True)
