"""The SPDL pinned-arena benchmark's 8 MiB fp32 table, emulated (part of gpu_loader_table.py).

SPDL's benchmark (the reference numbers below, from its documentation) runs one producer process
that generates deterministic 8 MiB fp32 payloads into a shared-memory arena, either a pool of
reusable segments or a FIFO ring, with ``pin_memory`` off or on; the consumer restores each item,
copies it to the GPU with a synchronized H2D helper and verifies every value: 256 checked items per
trial, three fresh-process repeats per arm. SPDL is not installed on the GPU machine, so this file
runs the same workflow with the standard library and torch:

* producer: a spawned process (NumPy only, no CUDA) writes payload `seq` (element j =
  (j + 17 * seq) % 251, SPDL's pattern for its first leaf) into a free slot of a
  ``multiprocessing.shared_memory`` arena of 4 slots and sends (seq, slot);
* pool: the consumer copies the slot itself to the GPU (pinned: the arena is registered with
  ``cudaHostRegister``), synchronizes, then frees the slot; ring: it first copies the item out to
  an owning tensor (pinned: from torch's pinned allocator) and frees the slot, then copies that;
* every item is verified on the device against the pattern computed there.

loaderx rows for the same records: a Dense store of 8 MiB fp32 records with the same pattern, read
by a ``Loader(workers=1)`` one record per batch, copied (``cuda_host``: non_blocking + synchronize;
``cpu``: ``.to``) or placed (``cuda``), each verified the same way; and the pinned H2D copy limit
of 8 MiB. Our numbers compare with each other; the reference's are another machine's history.
"""

from __future__ import annotations

import ctypes
import multiprocessing as mp
import time
from multiprocessing import shared_memory
from pathlib import Path

import numpy as np

ARMS = ["pool-pageable", "pool-pinned", "ring-pageable", "ring-pinned", "lx_pinned", "lx_cuda", "lx_cpu",
        "h2d_limit"]
CPU_ARMS = {"pool-pageable", "ring-pageable", "lx_cpu"}
LABELS = {"lx_pinned": 'loaderx Allocator("cuda_host") + .to(cuda, non_blocking) + sync',
          "lx_cuda": 'loaderx Allocator("cuda")', "lx_cpu": 'loaderx Allocator("cpu") + .to(cuda)',
          "h2d_limit": "pinned H2D copy limit (8 MiB, synchronized)"}
# SPDL's documented historical results (items/s, mean ± sample SD, 3 fresh-process repeats).
REFERENCE = {"pool": {"pageable": "137.09 ± 0.39", "pinned": "184.14 ± 5.73", "ratio": 1.343},
             "ring": {"pageable": "104.06 ± 5.96", "pinned": "149.42 ± 5.83", "ratio": 1.436}}
SLOTS = 4


def sizes(mode: str) -> dict:
    if mode == "smoke":
        return {"elements": 16384, "items": 8, "warm": 2, "records": 8}
    if mode == "quick":
        return {"elements": (8 << 20) // 4, "items": 64, "warm": 4, "records": 16}
    return {"elements": (8 << 20) // 4, "items": 256, "warm": 8, "records": 64}


def shift_of(seq: int) -> int:
    return (seq * 17) % 251


def tile(n: int) -> np.ndarray:
    """Payload `seq` is tile(n)[shift_of(seq):][:n]."""
    return (np.arange(n + 251) % 251).astype(np.float32)


def prepare(data: Path, mode: str) -> dict:
    from loaderx.zrecord import DenseWriter

    sz = sizes(mode)
    n, t = sz["elements"], tile(sz["elements"])
    with DenseWriter(data / "spdl8.zr", np.float32, (n,), "raw") as w:
        for a in range(0, sz["records"], 8):
            w.append(np.stack([t[shift_of(k):shift_of(k) + n] for k in range(a, min(a + 8, sz["records"]))]))
    return {"payload_bytes": n * 4, "items_per_trial": sz["items"], "warmup_items": sz["warm"],
            "slots": SLOTS, "loaderx_records": sz["records"]}


def _producer(name: str, n: int, total: int, free_q, ready_q) -> None:
    shm = shared_memory.SharedMemory(name=name)
    arena = np.ndarray((SLOTS, n), np.float32, buffer=shm.buf)
    t = tile(n)
    for seq in range(total):
        slot = free_q.get()
        s = shift_of(seq)
        arena[slot][:] = t[s:s + n]
        ready_q.put((seq, slot))
    ready_q.put(None)
    del arena
    shm.close()


def _register(ptr: int, size: int, torch) -> None:
    """Page-locks host memory the consumer did not allocate (cudaHostRegister)."""
    try:
        rc = torch.cuda.cudart().cudaHostRegister(ptr, size, 0)
        code = int(getattr(rc, "value", rc))
    except AttributeError:
        lib = None
        for name in ("libcudart.so", "libcudart.so.12", "libcudart.so.13"):
            try:
                lib = ctypes.CDLL(name)
                break
            except OSError:
                continue
        if lib is None:
            raise RuntimeError("no cudaHostRegister: neither torch.cuda.cudart() nor libcudart has it") from None
        code = lib.cudaHostRegister(ctypes.c_void_p(ptr), ctypes.c_size_t(size), 0)
    if code != 0:
        raise RuntimeError(f"cudaHostRegister failed with {code}")


def _unregister(ptr: int, torch) -> None:
    try:
        torch.cuda.cudart().cudaHostUnregister(ptr)
    except AttributeError:
        pass


def timed(item, warm: int, items: int) -> float:
    """Seconds ``items`` calls of ``item`` take, after ``warm`` untimed ones."""
    for _ in range(warm):
        item()
    t0 = time.perf_counter()
    for _ in range(items):
        item()
    return time.perf_counter() - t0


def run_arm(kind: str, data: Path, mode: str) -> dict:
    """One timed trial of `kind` in this fresh process."""
    import torch

    torch.set_num_threads(1)  # as SPDL's consumer
    sz = sizes(mode)
    cuda = mode != "smoke"
    dev = torch.device("cuda", 0) if cuda else torch.device("cpu")
    n, items, warm = sz["elements"], sz["items"], sz["warm"]
    ar = torch.arange(n, device=dev, dtype=torch.int64)

    def check(g, shift: int) -> None:
        if not torch.equal(g, ((ar + shift) % 251).to(torch.float32)):
            raise AssertionError(f"payload with shift {shift} differs on the device")

    if kind == "h2d_limit":
        src = torch.empty(n, dtype=torch.float32, pin_memory=cuda)
        dst = torch.empty(n, dtype=torch.float32, device=dev)
        for _ in range(warm):
            dst.copy_(src, non_blocking=True)
        torch.cuda.synchronize() if cuda else None
        t0 = time.perf_counter()
        for _ in range(items):
            dst.copy_(src, non_blocking=True)
            torch.cuda.synchronize() if cuda else None
        return {"batches_per_s": items / (time.perf_counter() - t0), "checked": 0}

    if kind.startswith("lx_"):
        import loaderx
        from loaderx import Loader
        from loaderx.sampler import Sampler
        from loaderx.zrecord import DenseStore

        place = {"lx_cuda": "cuda", "lx_pinned": "cuda_host", "lx_cpu": "cpu"}[kind]
        shifts = {shift_of(k) for k in range(sz["records"])}
        with DenseStore(data / "spdl8.zr") as s, loaderx.Allocator(place, 0) as a:
            with Loader({"x": [s.bind(a)]}, Sampler(sz["records"], 1, Sampler.Mode.IID, seed=7), workers=1,
                        prefetch=SLOTS) as ld:
                def item():
                    t = torch.from_dlpack(next(ld)[0]["x"]).reshape(-1)
                    g = t if t.device == dev else t.to(dev, non_blocking=(place == "cuda_host"))
                    torch.cuda.synchronize() if cuda else None
                    shift = int(g[0].item())
                    if shift not in shifts:
                        raise AssertionError(f"first element {shift} names no record")
                    check(g, shift)

                dt = timed(item, warm, items)
        return {"batches_per_s": items / dt, "checked": items + warm}

    backend, mem = kind.split("-")
    pinned = mem == "pinned"
    ctx = mp.get_context("spawn")
    shm = shared_memory.SharedMemory(create=True, size=SLOTS * n * 4)
    arena = np.ndarray((SLOTS, n), np.float32, buffer=shm.buf)
    ptr = arena.ctypes.data
    free_q, ready_q = ctx.Queue(), ctx.Queue()
    proc = None
    try:
        if pinned:
            _register(ptr, SLOTS * n * 4, torch)
        slots = [torch.from_numpy(arena[i]) for i in range(SLOTS)]
        for i in range(SLOTS):
            free_q.put(i)
        proc = ctx.Process(target=_producer, args=(shm.name, n, warm + items, free_q, ready_q), daemon=True)
        proc.start()

        def item():
            seq, slot = ready_q.get(timeout=60)
            if backend == "ring":  # copy out to an owning tensor, free the slot, then transfer
                own = torch.empty(n, dtype=torch.float32, pin_memory=pinned)
                own.copy_(slots[slot])
                free_q.put(slot)
                g = own.to(dev, non_blocking=pinned)
                torch.cuda.synchronize() if cuda else None
            else:
                g = slots[slot].to(dev, non_blocking=pinned)
                torch.cuda.synchronize() if cuda else None
                if not cuda:
                    g = g.clone()
                free_q.put(slot)
            check(g, shift_of(seq))

        dt = timed(item, warm, items)
        if ready_q.get(timeout=60) is not None:
            raise AssertionError("the producer made more items than asked")
        proc.join(timeout=30)
        del slots
        if pinned:
            _unregister(ptr, torch)
        return {"batches_per_s": items / dt, "checked": items + warm}
    finally:
        if proc is not None and proc.is_alive():
            proc.kill()
        del arena
        try:
            shm.close()
        except BufferError:  # a tensor of a failed run still views the arena; the OS frees it at exit
            pass
        shm.unlink()


def table_md(doc: dict) -> list[str]:
    rows = {r["kind"]: r for r in doc["rows"] if r["corpus"] == "spdl"}
    if not rows:
        return []

    def cell(kind: str) -> str:
        r = rows.get(kind)
        if r is None:
            return "-"
        if r["status"] != "OK":
            return f"{r['status']}"
        return f"{r['mean']:.2f} ± {r['sd']:.2f}"

    lines = ["### SPDL pinned-arena workflow, 8 MiB fp32 (emulated; reference = SPDL's documented history)", "",
             f"`{doc['data'].get('spdl')}`", "",
             "| backend | pageable items/s | pinned items/s | pinned / pageable | reference pageable | reference pinned "
             "| reference ratio |", "|---|---:|---:|---:|---:|---:|---:|"]
    for b in ("pool", "ring"):
        pg, pn = rows.get(f"{b}-pageable"), rows.get(f"{b}-pinned")
        ratio = (f"{pn['mean'] / pg['mean']:.3f}" if pg and pn and pg["status"] == pn["status"] == "OK" else "-")
        ref = REFERENCE[b]
        lines.append(f"| {b} | {cell(b + '-pageable')} | {cell(b + '-pinned')} | {ratio} | {ref['pageable']} | "
                     f"{ref['pinned']} | {ref['ratio']} |")
    lines += ["", "| loaderx / limit row, same 8 MiB records | items/s | checked items | status |", "|---|---:|---:|---|"]
    for k in ("lx_pinned", "lx_cuda", "lx_cpu", "h2d_limit"):
        r = rows.get(k)
        if r is None:
            continue
        if r["status"] == "OK":
            lines.append(f"| {LABELS[k]} | {r['mean']:.2f} ± {r['sd']:.2f} | {r['checked']} | OK |")
        else:
            lines.append(f"| {LABELS[k]} | - | - | {r['detail'].splitlines()[0][:120]} |")
    return lines + [""]
