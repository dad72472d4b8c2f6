"""What every arm shares: the source arrays, the index draws, the batch contract, the timed loop
with per-batch verification, and the JSON line an arm prints.

Imports NumPy only, so it also runs in venvs without the loaderx wheel or torch (the MosaicML
Streaming venv pins its own NumPy).
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import sys
import time
from dataclasses import dataclass

import numpy as np

BATCH = 256
# Timed batches are taken in blocks of BLOCK, held until the block's timer stops and then each
# compared with the source; before every block DRAIN batches are pulled untimed, compared in full
# with the source too and discarded, so
# whatever a prefetching loader produced ahead while the previous block was being verified is not
# counted as free (the Rust cell uses the same constants: loader/arms.rs).
BLOCK = 8
# The harness gives every row of a table the same, smaller block where BLOCK batches would hold
# more than loaderx's default pool keeps idle (image batches; loader::arms::HELD_BYTES).
BLOCK_ENV = "LOADERX_LOADER_BLOCK"


def block() -> int:
    """Timed batches per block: ``LOADERX_LOADER_BLOCK`` (1 to BLOCK), else BLOCK."""
    raw = os.environ.get(BLOCK_ENV)
    if raw is None:
        return BLOCK
    if not raw.isdigit() or not 1 <= int(raw) <= BLOCK:
        raise ValueError(f"{BLOCK_ENV}={raw!r} is not a block of 1 to {BLOCK} batches")
    return int(raw)

DRAIN = 32  # > the deepest peer pipeline: grain mp_prefetch holds 4 workers x 4 buffered + in flight
# A row stops adding blocks once its timed batches took this long (slow arms on big token tables).
BUDGET_S = float(os.environ.get("LOADERX_LOADER_BUDGET_S", "20"))


# The sampled peak-RAM run checks batches against SHA-256 digests precomputed from the source in
# another process (``write_digests``; the harness passes the file in this variable), so an arm's
# process never maps the source arrays only to check them: without this every arm that does not
# read the .npy files itself was charged their pages twice over (once for its own store, once for
# the check), while the npy-reading arms got the check's pages for free.
DIGESTS_ENV = "LOADERX_LOADER_DIGESTS"

# Test only (never set in a measured run): with LOADERX_HARNESS_CORRUPT_BATCH=K the K-th batch a
# run receives (counted from 0 over warm-up, drained and timed batches) gets one byte flipped
# after delivery and before verification, so a test can see the row turn unverified. The Rust
# cells read the same variable (harness/src/corrupt.rs).
CORRUPT_ENV = "LOADERX_HARNESS_CORRUPT_BATCH"


def corrupted(batch):
    """A NumPy copy of ``batch`` (dense array, or (values, cu_seqlens, shapes)) with one byte of
    its values flipped, a quarter in (none of the probe records ``Steps`` matches on, so only the
    full comparison can catch it), as the Rust cells do."""
    if isinstance(batch, (tuple, list)):
        values, cu, shapes = (np.array(as_numpy(x)) for x in batch)
        flat = values.reshape(-1).view(np.uint8)
        if len(flat):
            flat[len(flat) // 4] ^= 0xFF
        return values, cu, shapes
    out = np.array(as_numpy(batch))
    flat = out.reshape(-1).view(np.uint8)
    if len(flat):
        flat[len(flat) // 4] ^= 0xFF
    return out


def steps_needed(warmup: int, batches: int) -> int:
    """Draws a run of ``batches`` timed batches consumes (warm-up, drains and blocks)."""
    b = block()
    blocks = -(-batches // b)
    return warmup + blocks * (DRAIN + b)


@dataclass
class Job:
    """One arm's run: table kind, source paths, draws and the peer-data cache directory."""

    arm: str
    kind: str
    store: str
    npy_dir: str
    draws_path: str
    peer_dir: str
    batches: int
    warmup: int

    @property
    def dense(self) -> bool:
        return self.kind == "dense-vision"

    @property
    def steps(self) -> int:
        return steps_needed(self.warmup, self.batches)

    def draws(self) -> np.ndarray:
        """``(steps, 256)`` int64 record indices, the same for every arm."""
        d = np.load(self.draws_path)
        if d.ndim != 2 or d.shape[0] < self.steps or d.shape[1] != BATCH:
            raise ValueError(f"{self.draws_path}: expected at least ({self.steps}, {BATCH}) draws, found {d.shape}")
        return d[: self.steps].astype(np.int64)

    def source(self) -> "Source":
        return Source.open(self.kind, self.npy_dir)

    def cache(self, name: str) -> str:
        """A directory for this arm family's data files (created on demand)."""
        path = os.path.join(self.peer_dir, name)
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        return path


class Source:
    """The corpus arrays the harness wrote: ``dense.npy`` or ``tokens.npy`` + ``offsets.npy``."""

    def __init__(self, kind, dense=None, tokens=None, offsets=None):
        self.kind = kind
        self.dense = dense
        self.tokens = tokens
        self.offsets = offsets

    @staticmethod
    def open(kind: str, npy_dir: str) -> "Source":
        if kind == "dense-vision":
            return Source(kind, dense=np.load(os.path.join(npy_dir, "dense.npy"), mmap_mode="r"))
        if kind == "ragged-tokens":
            # Plain ndarray views of the maps: indexing an np.memmap runs its Python-level
            # __getitem__ and __array_finalize__, which took most of a ragged row's checking time.
            return Source(
                kind,
                tokens=np.asarray(np.load(os.path.join(npy_dir, "tokens.npy"), mmap_mode="r")),
                offsets=np.asarray(np.load(os.path.join(npy_dir, "offsets.npy"), mmap_mode="r")),
            )
        raise ValueError(f"unknown table kind {kind!r} (expected dense-vision or ragged-tokens)")

    def __len__(self) -> int:
        return len(self.dense) if self.dense is not None else len(self.offsets) - 1

    def record(self, i: int) -> np.ndarray:
        """Record ``i`` as an array (a view of the mmap)."""
        if self.dense is not None:
            return self.dense[i]
        return self.tokens[self.offsets[i] : self.offsets[i + 1]]

    def ragged(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Records ``idx`` of a ragged source packed end to end, and their lengths (int64): one
        vectorised gather of their token positions, not a Python loop over the records."""
        idx = np.asarray(idx, dtype=np.int64)
        starts = self.offsets[idx].astype(np.int64)
        lens = self.offsets[idx + 1].astype(np.int64) - starts
        ends = np.cumsum(lens)
        # Position p of the packed output reads token starts[r] + (p - first[r]) of its record r.
        shift = np.repeat(starts - (ends - lens), lens)
        return self.tokens[np.arange(int(ends[-1]) if len(ends) else 0) + shift], lens


def packed(values: np.ndarray, lens: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Ragged contract from packed values and int64 record lengths: values, int32 cu_seqlens,
    int64 shapes (n, 1)."""
    cu = np.zeros(len(lens) + 1, dtype=np.int32)
    np.cumsum(lens, out=cu[1:])
    return values, cu, lens.reshape(-1, 1)


def pack(records) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Ragged contract from a list of 1-D arrays: packed values, int32 cu_seqlens, int64 shapes (n, 1)."""
    lens = np.fromiter((len(r) for r in records), dtype=np.int64, count=len(records))
    return packed(np.concatenate(records), lens)


def as_numpy(x) -> np.ndarray:
    """A NumPy view of a NumPy array or a CPU torch tensor (no copy)."""
    if isinstance(x, np.ndarray):
        return x
    if hasattr(x, "numpy"):
        return x.numpy()
    return np.from_dlpack(x)


def check(src: Source, idx: np.ndarray, batch) -> str | None:
    """Compares one delivered batch with the source records ``idx``; returns what differs, or None."""
    if src.dense is not None:
        got = as_numpy(batch)
        want_shape = (len(idx), *src.dense.shape[1:])
        if got.shape != want_shape or got.dtype != src.dense.dtype:
            return f"dense batch is {got.dtype}{tuple(got.shape)}, expected {src.dense.dtype}{want_shape}"
        # Row by row, as bytes (one memcmp a record, no batch-sized temporaries): a whole-batch
        # fancy index and array_equal took ~60 ms of a 37 MB image batch, this ~9 ms.
        bad = [j for j, i in enumerate(np.asarray(idx)) if got[j].tobytes() != src.dense[i].tobytes()]
        if bad:
            return (
                f"dense batch values differ from the source records: {len(bad)} of {len(idx)} rows, "
                f"first row {bad[0]} (record {int(idx[bad[0]])})"
            )
        return None
    values, cu, shapes = (as_numpy(x) for x in batch)
    if cu.dtype != np.int32:
        return f"cu_seqlens is {cu.dtype}, expected int32"
    want, lens = src.ragged(idx)
    if len(cu) != len(idx) + 1 or cu[0] != 0 or not np.array_equal(np.diff(cu.astype(np.int64)), lens):
        return "cu_seqlens differ from the source record lengths"
    if not np.array_equal(np.asarray(shapes).reshape(-1), lens):
        return "shapes differ from the source record lengths"
    if values.dtype != want.dtype or not np.array_equal(values, want):
        return "packed values differ from the source records"
    return None


def digest(batch) -> bytes:
    """SHA-256 of a batch in the contract: dtype, shape and bytes of the dense array, or of the
    packed values, the int32 cu_seqlens and the shapes (as int64)."""
    h = hashlib.sha256()
    if isinstance(batch, (tuple, list)):
        values, cu, shapes = (np.ascontiguousarray(as_numpy(x)) for x in batch)
        shapes = np.ascontiguousarray(shapes, dtype=np.int64).reshape(-1)
        parts = (values, cu, shapes)
    else:
        parts = (np.ascontiguousarray(as_numpy(batch)),)
    for a in parts:
        h.update(f"{a.dtype.str}{a.shape};".encode())
        h.update(a.reshape(-1).view(np.uint8))
    return h.digest()


def source_batch(src: "Source", idx: np.ndarray):
    """The batch the contract says step ``idx`` delivers, built from the source arrays."""
    if src.dense is not None:
        return src.dense[np.asarray(idx)]
    return packed(*src.ragged(idx))


def write_digests(kind: str, npy_dir: str, draws_path: str, steps: int, out: str) -> None:
    """Writes ``(steps, 32)`` uint8: the digest of each of the first ``steps`` draws' batches."""
    src = Source.open(kind, npy_dir)
    draws = np.load(draws_path)[:steps].astype(np.int64)
    table = np.zeros((len(draws), 32), dtype=np.uint8)
    for s, idx in enumerate(draws):
        table[s] = np.frombuffer(digest(source_batch(src, idx)), dtype=np.uint8)
    np.save(out, table)


class DigestSteps:
    """``Steps`` for the memory pass: a batch belongs to a step whose precomputed digest equals
    its own (equal digests: equal dtype, shapes and bytes), without reading the source."""

    def __init__(self, digests: np.ndarray):
        self.steps: dict[bytes, list[int]] = {}
        for s, d in enumerate(digests):
            self.steps.setdefault(d.tobytes(), []).append(s)

    def take(self, batch) -> int | None:
        pending = self.steps.get(digest(batch))
        return pending.pop(0) if pending else None


PROBE = (0, 1, BATCH // 2, BATCH - 1)  # the records that tell which step a batch belongs to


def _records(src: Source, batch):
    """Record j of a delivered batch, for j in PROBE (None when the batch is not that big)."""
    if src.dense is not None:
        b = as_numpy(batch)
        return [b[j] for j in PROBE] if len(b) >= BATCH else None
    values, cu = as_numpy(batch[0]), as_numpy(batch[1])
    if len(cu) < BATCH + 1:
        return None
    return [values[cu[j] : cu[j + 1]] for j in PROBE]


class Steps:
    """The steps a run has drawn but not yet received. A loader may deliver in completion order
    (loaderx with several workers does, as documented); a batch belongs to the earliest pending
    step whose probe records (4 of the 256) it holds, and must then equal that step's records."""

    WINDOW = 256

    def __init__(self, src: Source, draws: np.ndarray):
        self.src, self.draws, self.next_step, self.pending = src, draws, 0, []

    def take(self, batch) -> int | None:
        """The step ``batch`` belongs to (removed from the pending steps), or None."""
        recs = _records(self.src, batch)
        if recs is None:
            return None
        while len(self.pending) < self.WINDOW and self.next_step < len(self.draws):
            self.pending.append(self.next_step)
            self.next_step += 1
        for pos, s in enumerate(self.pending):
            idx = self.draws[s]
            if all(np.array_equal(r, self.src.record(int(idx[j]))) for r, j in zip(recs, PROBE)):
                del self.pending[pos]
                return s
        return None


def timed(job: Job, src: Source, draws: np.ndarray, next_batch) -> dict:
    """Warm-up, then blocks: DRAIN untimed batches, BLOCK timed ones held until the block's timer
    stops. Warm-up and timed batches are compared in full with the source records of their step
    (``Steps``); a drained batch is only matched to its step by its probe records and is neither
    timed nor counted: comparing drained batches in full lets a prefetching loader refill its whole
    window meanwhile, and the timed block would then time batches made before its timer started. Stops after ``job.batches`` timed batches or once they took BUDGET_S.
    ``next_batch(k)`` returns the k-th delivered batch in the contract. With
    ``LOADERX_LOADER_MEMORY_PASS=1`` (the harness's sampled peak-RAM run) blocks are one batch,
    so no extra batches are held, and with ``LOADERX_LOADER_DIGESTS`` set each batch is checked
    against its step's precomputed digest instead of the source arrays (``DIGESTS_ENV``)."""
    memory_pass = os.environ.get("LOADERX_LOADER_MEMORY_PASS") == "1"
    # The sampled peak-RAM run is not timed: one batch at a time, nothing drained.
    per_block, drain = (1, 0) if memory_pass else (block(), DRAIN)
    digests = os.environ.get(DIGESTS_ENV) if memory_pass else None
    steps = DigestSteps(np.load(digests)) if digests else Steps(src, draws)
    k = 0
    corrupt = os.environ.get(CORRUPT_ENV)
    if corrupt is not None:
        corrupt_k, deliver = int(corrupt), next_batch

        def next_batch(i):
            b = deliver(i)
            return corrupted(b) if i == corrupt_k else b

    def verify(b, what) -> str | None:
        s = steps.take(b)
        if s is None:
            return f"{what} {k}: holds no pending step's records" + (" (no step has its digest)" if digests else "")
        if digests:
            return None  # its digest equals step s's: the same dtype, shapes and bytes
        err = check(src, draws[s], b)
        return f"{what} {k} (step {s}): {err}" if err else None

    for _ in range(job.warmup):
        err = verify(next_batch(k), "warm-up batch")
        if err:
            return {"per_batch_s": None, "verified": False, "mismatch": True, "error": err}
        k += 1
    spent = 0.0
    verified = 0
    while verified < job.batches and (verified == 0 or spent < BUDGET_S):
        for _ in range(drain):
            # Matched to its step, not compared in full (see above), and not counted.
            if steps.take(next_batch(k)) is None:
                return {"per_batch_s": None, "verified": False, "mismatch": True, "error": f"drained batch {k}: holds no pending step's records"}
            k += 1
        n = min(per_block, job.batches - verified)
        t0 = time.perf_counter()
        held = [next_batch(k + i) for i in range(n)]
        spent += time.perf_counter() - t0
        for b in held:
            err = verify(b, "timed batch")
            if err:
                return {"per_batch_s": None, "verified": False, "mismatch": True, "error": err}
            verified += 1
            k += 1
        del held, b
    return {
        "per_batch_s": spent / verified,
        "verified": True,
        "verified_batches": verified,
    }


def timed_loader(job: Job, src: Source, draws: np.ndarray, loader) -> dict:
    """``timed`` over the batches ``loader`` yields in turn (a torch ``DataLoader``), its iterator,
    and with it the loader's worker processes, released before returning."""
    it = iter(loader)
    try:
        return timed(job, src, draws, lambda _k: next(it))
    finally:
        del it


def emit(obj: dict) -> None:
    """Prints the arm's one JSON line, with the process's own peak RSS (a floor for the harness's
    sampled process-tree PSS, which covers worker processes). Children are left out on purpose:
    the ``ru_maxrss`` of a child that forked and exec'ed reports the parent's RSS at the fork
    (``import torch`` runs ``ldconfig -p`` through ctypes, which read 449 MB), and adding it to the
    parent's counts the same pages twice."""
    obj["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps(obj))
    sys.stdout.flush()
