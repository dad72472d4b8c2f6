#!/usr/bin/env python3
"""The GPU loader table: loaderx placements against torch's DataLoader, feeding a CUDA device.

Usage::

    python3 scripts/gpu_loader_table.py --out DIR [--repeats 3] [--workers 4] [--budget-s 330]
                                        [--quick | --smoke] [--require-gpu]

Rows, each repeat in a fresh process (rows rotated per repeat), mean +/- sample SD over the
repeats, every delivered batch checked on the device against a resident copy of the data:

* dense vision (3x224x224 uint8 images, the harness's shape) and ragged tokens (int32 records of
  WikiText-like lengths), batch 256, IID draws, seeded data generated here:
  loaderx ``Allocator("cuda")``, ``"cuda_host"`` + ``.to("cuda", non_blocking=True)`` and
  ``"cpu"`` + ``.to("cuda")`` through a ``Loader(workers=W)``, against
  ``torch.utils.data.DataLoader(pin_memory=True, num_workers=W)`` with batched fetch +
  ``.to("cuda", non_blocking=True)``; beside them the pinned host-to-device copy limit of the same
  bytes;
* the SPDL pinned-arena benchmark's 8 MiB fp32 table (pool / ring x pageable / pinned), as an
  emulation of its workflow (SPDL is not installed on the GPU machine: gpu_spdl.py), with the
  reference's historical numbers beside, and loaderx rows for the same 8 MiB records.

Writes DIR/gpu_loader_table.json and DIR/gpu_loader_table.md. ``--smoke`` runs the CPU-only rows
on tiny data (no GPU needed; what the test suite runs). Exit status 1 when a row failed or did
not run within the budget, 2 with --require-gpu and no usable CUDA device.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_spdl  # noqa: E402
from gpu_common import (  # noqa: E402
    BATCH, VISION_SHAPE, length_stats, log, loaderx_cuda_reason, mean_sd, receipts, token_records,
    vision_records, write_json,
)

ROWS = {  # kind -> label
    "lx_cuda": 'loaderx Allocator("cuda")',
    "lx_pinned": 'loaderx Allocator("cuda_host") + .to(cuda, non_blocking)',
    "lx_cpu": 'loaderx Allocator("cpu") + .to(cuda)',
    "torch_pin": "torch DataLoader(pin_memory=True) + .to(cuda, non_blocking)",
    "h2d_limit": "pinned H2D copy limit of the same bytes",
}
GPU_ONLY = {"lx_cuda", "lx_pinned", "h2d_limit"}


def sizes(mode: str) -> dict:
    if mode == "smoke":
        return {"vision_n": 64, "tokens_n": 2000, "batch": 16, "warm": 2, "vision_steps": 4, "token_steps": 20}
    if mode == "quick":
        return {"vision_n": 512, "tokens_n": 20000, "batch": BATCH, "warm": 5, "vision_steps": 20, "token_steps": 500}
    return {"vision_n": 2048, "tokens_n": 200_000, "batch": BATCH, "warm": 10, "vision_steps": 50,
            "token_steps": 2000}


# ------------------------------------------------------------------------------------------- data
def prepare(data: Path, sz: dict) -> dict:
    """Writes the corpora (npy for torch, raw zrecord stores for loaderx); returns their facts."""
    from loaderx.zrecord import DenseWriter, RaggedBatch, RaggedWriter

    x = vision_records(sz["vision_n"], seed=1)
    np.save(data / "vision.npy", x)
    with DenseWriter(data / "vision.zr", np.uint8, VISION_SHAPE, "raw") as w:
        w.append(x)
    tokens, starts = token_records(sz["tokens_n"], seed=2)
    np.save(data / "tokens.npy", tokens)
    np.save(data / "starts.npy", starts)
    lens = np.diff(starts)
    with RaggedWriter(data / "tokens.zr", np.int32, 1, "raw") as w:
        step = 50_000
        for a in range(0, len(lens), step):
            b = min(a + step, len(lens))
            cu = (starts[a:b + 1] - starts[a]).astype(np.int32)
            w.append(RaggedBatch(tokens[starts[a]:starts[b]], cu, lens[a:b].astype(np.uint64)[:, None]))
    return {"vision": {"records": len(x), "shape": list(VISION_SHAPE), "dtype": "uint8",
                       "batch_bytes": sz["batch"] * x[0].nbytes},
            "tokens": {"records": len(lens), "dtype": "int32", "lengths": length_stats(starts),
                       "mean_batch_bytes": int(sz["batch"] * lens.mean() * 4 + (sz["batch"] + 1) * 4)}}


def plan(n: int, batch: int, steps: int) -> list[np.ndarray]:
    """The first `steps` draws of the loaderx IID sampler every row uses (seed 7)."""
    from loaderx.sampler import Sampler

    s = Sampler(n, batch, Sampler.Mode.IID, seed=7)
    return [np.array(s.next(), dtype=np.int64) for _ in range(steps)]


# ------------------------------------------------------------------------------------------- arms
class Device:
    """The target device: CUDA, or the CPU in --smoke (then `to` copies nothing)."""

    def __init__(self, smoke: bool):
        import torch

        self.torch = torch
        self.cuda = not smoke
        self.dev = torch.device("cuda", 0) if self.cuda else torch.device("cpu")

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()


def run_arm(corpus: str, kind: str, data: Path, sz: dict, workers: int, smoke: bool) -> dict:
    """One timed trial in this fresh process: {'batches_per_s', 'checked', ...}."""
    import torch

    d = Device(smoke)
    dev = d.dev
    batch = sz["batch"]
    warm = sz["warm"]
    steps = sz["vision_steps" if corpus == "vision" else "token_steps"]
    if corpus == "vision":
        host = np.load(data / "vision.npy", mmap_mode="r")
        n = len(host)
        ref = torch.from_numpy(np.ascontiguousarray(host)).to(dev)
    else:
        tokens = np.load(data / "tokens.npy", mmap_mode="r")
        starts = np.load(data / "starts.npy")
        n = len(starts) - 1
        flat = torch.from_numpy(np.ascontiguousarray(tokens)).to(dev)
        st_dev = torch.from_numpy(starts).to(dev)
        lens_dev = st_dev[1:] - st_dev[:-1]
    draws = plan(n, batch, warm + steps + workers + 8)

    if kind == "h2d_limit":
        nbytes = (batch * int(np.prod(VISION_SHAPE)) if corpus == "vision"
                  else int(batch * float(np.diff(starts).mean()) * 4 + (batch + 1) * 4))
        src = torch.empty(nbytes, dtype=torch.uint8, pin_memory=d.cuda)
        dst = torch.empty(nbytes, dtype=torch.uint8, device=dev)
        for _ in range(warm):
            dst.copy_(src, non_blocking=True)
        d.sync()
        t0 = time.perf_counter()
        for _ in range(steps):
            dst.copy_(src, non_blocking=True)
        d.sync()
        dt = time.perf_counter() - t0
        return {"batches_per_s": steps / dt, "checked": 0, "bytes_per_batch": nbytes}

    held: list[tuple] = []  # the delivered batches as device tensors, checked after the timer

    if kind.startswith("lx_"):
        import loaderx
        from loaderx import Loader
        from loaderx.sampler import Sampler
        from loaderx.zrecord import DenseStore, RaggedStore

        place = {"lx_cuda": "cuda", "lx_pinned": "cuda_host", "lx_cpu": "cpu"}[kind]
        alloc = loaderx.Allocator(place, 0) if place != "cpu" else loaderx.Allocator()
        store = DenseStore(data / "vision.zr") if corpus == "vision" else RaggedStore(data / "tokens.zr")
        view = store.bind(alloc)
        loader = Loader({"x": [view]}, Sampler(n, batch, Sampler.Mode.IID, seed=7), workers=workers, prefetch=4)
        inflight: list = []  # pinned host batches kept until their non_blocking copy has run

        def own(t):
            """The consumer's own device copy: a clone of a device batch (its region goes back to the
            pool), an asynchronous copy of a pinned one, a plain copy of a pageable one."""
            if t.device == dev:
                return t.clone()
            return t.to(dev, non_blocking=(place == "cuda_host"))

        def deliver():
            b = next(loader)[0]["x"]
            parts: tuple
            if corpus == "vision":
                parts = (torch.from_dlpack(b),)
            else:
                parts = (torch.from_dlpack(b.values), torch.from_dlpack(b.cu_seqlens))
            out = tuple(own(p) for p in parts)
            if place == "cuda_host" and d.cuda:
                ev = torch.cuda.Event()
                ev.record()
                inflight.append((parts, ev))
                if len(inflight) > 8:
                    inflight.pop(0)[1].synchronize()
            return out
    else:  # torch DataLoader, batched fetch: one dataset item is one planned batch
        from torch.utils.data import DataLoader, Dataset

        class Batches(Dataset):
            def __len__(self):
                return len(draws)

            def __getitem__(self, k):
                ids = draws[k]
                if corpus == "vision":
                    return torch.from_numpy(np.ascontiguousarray(host[ids]))
                parts = [tokens[starts[i]:starts[i + 1]] for i in ids]
                cu = np.zeros(len(ids) + 1, np.int32)
                np.cumsum([len(p) for p in parts], out=cu[1:])
                return torch.from_numpy(np.concatenate(parts)), torch.from_numpy(cu)

        it = iter(DataLoader(Batches(), batch_size=None, shuffle=False, num_workers=workers,
                             pin_memory=d.cuda, prefetch_factor=2 if workers else None))

        def deliver():
            b = next(it)
            parts = (b,) if corpus == "vision" else b
            return tuple(p.to(dev, non_blocking=True) for p in parts)

    for _ in range(warm):
        held.append(deliver())
    d.sync()
    t0 = time.perf_counter()
    for _ in range(steps):
        held.append(deliver())
    d.sync()
    dt = time.perf_counter() - t0
    if kind.startswith("lx_"):
        inflight.clear()
        loader.close()
        store.close()
        alloc.close()

    # Every batch, warm-up included, checked on the device; which records it holds is read from
    # its own bytes (record id in the first 8 bytes / first token) and matched to the draws.
    delivered = []
    for parts in held:
        if corpus == "vision":
            g = parts[0]
            ids = g.reshape(g.shape[0], -1)[:, :8].contiguous().view(torch.int64).reshape(-1)
            ok = torch.equal(g, ref[ids])
        else:
            v, cu = parts
            cu = cu.long()
            ids = v[cu[:-1]].long()
            rec_lens = lens_dev[ids]
            total = v.numel()
            base = torch.repeat_interleave(st_dev[ids] - cu[:-1], rec_lens, output_size=total)
            ok = torch.equal(cu[1:] - cu[:-1], rec_lens) and torch.equal(
                v, flat[base + torch.arange(total, device=dev)])
        if not ok:
            raise AssertionError(f"a {corpus} batch differs from the records it names")
        delivered.append(tuple(ids.cpu().tolist()))
    pending = [tuple(p.tolist()) for p in draws]
    for got in delivered:
        if got not in pending:
            raise AssertionError(f"a delivered batch is none of the sampler's pending draws: {got[:8]}...")
        pending.remove(got)
    return {"batches_per_s": steps / dt, "checked": len(held)}


# ------------------------------------------------------------------------------------------- main
def run_fresh(args: list[str], timeout: float) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__)] + args
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"exited {r.returncode}: {r.stderr.strip()[-1500:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def table_md(doc: dict) -> list[str]:
    lines = []
    facts = doc["data"]
    for corpus, title in (("vision", "Dense vision"), ("tokens", "Ragged tokens")):
        rows = [r for r in doc["rows"] if r["corpus"] == corpus]
        if not rows:
            continue
        base = next((r["mean"] for r in rows if r["kind"] == "torch_pin" and r["status"] == "OK"), None)
        lines += [f"### {title}", "", f"`{json.dumps(facts[corpus])}`; batch {doc['sizes']['batch']}, "
                  f"workers {doc['workers']}, {doc['sizes'][('vision' if corpus == 'vision' else 'token') + '_steps']} "
                  "timed batches per run", "",
                  "| row | batches/s | samples/s | x torch | checked batches | status |", "|---|---:|---:|---:|---:|---|"]
        for r in rows:
            if r["status"] != "OK":
                lines.append(f"| {ROWS[r['kind']]} | - | - | - | - | {r['status']}: {r['detail'].splitlines()[0][:120]} |")
                continue
            x = f"{r['mean'] / base:.2f}" if base and r["kind"] != "h2d_limit" else "-"
            lines.append(f"| {ROWS[r['kind']]} | {r['mean']:.1f} ± {r['sd']:.1f} | "
                         f"{r['mean'] * doc['sizes']['batch']:.0f} | {x} | {r['checked']} | OK |")
        lines.append("")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("certify-out"))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--budget-s", type=float, default=330.0)
    ap.add_argument("--quick", action="store_true", help="smaller data and runs (still 3 repeats)")
    ap.add_argument("--smoke", action="store_true", help="CPU-only rows on tiny data, 1 repeat")
    ap.add_argument("--require-gpu", action="store_true")
    ap.add_argument("--only", default="vision,tokens,spdl")
    ap.add_argument("--arm", help=argparse.SUPPRESS)
    ap.add_argument("--data", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    mode = "smoke" if args.smoke else ("quick" if args.quick else "full")
    sz = sizes(mode)
    if args.arm:
        corpus, kind = args.arm.split(":")
        if corpus == "spdl":
            print(json.dumps(gpu_spdl.run_arm(kind, args.data, mode)))
        else:
            print(json.dumps(run_arm(corpus, kind, args.data, sz, args.workers, args.smoke)))
        return 0
    deadline = time.monotonic() + args.budget_s
    reason = None if args.smoke else loaderx_cuda_reason()
    if reason is None and not args.smoke:
        import torch

        reason = None if torch.cuda.is_available() else "torch.cuda.is_available() is False"
    repeats = 1 if args.smoke else args.repeats
    only = set(args.only.split(","))
    doc = {"status": "", "mode": mode, "workers": args.workers, "repeats": repeats, "sizes": sz,
           "receipts": {**receipts(frameworks=False),
                        "cuda_probe": "not probed (--smoke: CPU only)" if args.smoke else (reason or "ok")},
           "data": {}, "rows": [],
           "spdl": {"reference": gpu_spdl.REFERENCE}}
    try:
        import torch

        doc["receipts"]["torch"] = torch.__version__
        doc["receipts"]["torch_cuda"] = str(torch.version.cuda)
    except Exception as e:  # noqa: BLE001
        doc["receipts"]["torch"] = f"absent ({e})"
    if reason is not None:
        log(f"gpu_loader_table: no usable CUDA device: {reason}")
        doc["status"] = "NO CUDA" if args.require_gpu else "SKIPPED (no CUDA)"
        finish(args.out, doc)
        return 2 if args.require_gpu else 0
    arms = [(c, k) for c in ("vision", "tokens") if c in only for k in ROWS
            if not (args.smoke and k in GPU_ONLY)]
    if "spdl" in only:
        arms += [("spdl", k) for k in gpu_spdl.ARMS if not (args.smoke and k not in gpu_spdl.CPU_ARMS)]
    results: dict[tuple, list] = {a: [] for a in arms}
    errors: dict[tuple, str] = {}
    with tempfile.TemporaryDirectory() as d:
        data = Path(d)
        t0 = time.monotonic()
        doc["data"] = prepare(data, sz)
        if "spdl" in only:
            doc["data"]["spdl"] = gpu_spdl.prepare(data, mode)
        log(f"[table] data ready in {time.monotonic() - t0:.1f} s: {json.dumps(doc['data'])}")
        k = 0
        for rep in range(repeats):
            for i in range(len(arms)):
                arm = arms[(i + rep) % len(arms)]
                k += 1
                if arm in errors:
                    continue
                if time.monotonic() > deadline:
                    errors[arm] = "NOT RUN: time budget spent"
                    log(f"[table {k}] NOT RUN {arm[0]}:{arm[1]} (budget)")
                    continue
                t = time.monotonic()
                extra = ["--smoke"] if args.smoke else (["--quick"] if args.quick else [])
                try:
                    r = run_fresh(["--arm", f"{arm[0]}:{arm[1]}", "--data", str(data), "--workers",
                                   str(args.workers)] + extra, timeout=90)
                    results[arm].append(r)
                    log(f"[table {k}] OK      {arm[0]}:{arm[1]} rep {rep + 1}: {r['batches_per_s']:.1f}/s, "
                        f"checked {r['checked']} ({time.monotonic() - t:.1f} s)")
                except Exception as e:  # noqa: BLE001 - a failed row is recorded, the rest go on
                    errors[arm] = f"FAIL: {type(e).__name__}: {e}"
                    log(f"[table {k}] FAIL    {arm[0]}:{arm[1]} rep {rep + 1}: {str(e).splitlines()[-1][:200]}")
    for arm in arms:
        runs = results[arm]
        row: dict = {"corpus": arm[0], "kind": arm[1], "runs": runs}
        if arm in errors or len(runs) < repeats:
            why = errors.get(arm, "NOT RUN: fewer repeats than asked")
            row.update(status=why.split(":")[0], detail=why)
        else:
            m, sd = mean_sd([r["batches_per_s"] for r in runs])
            row.update(status="OK", mean=m, sd=sd, checked=sum(r["checked"] for r in runs), detail="")
        doc["rows"].append(row)
    bad = [r for r in doc["rows"] if r["status"] != "OK"]
    doc["status"] = "FAIL" if bad else "PASS"
    finish(args.out, doc)
    log(f"gpu_loader_table: {doc['status']} ({len(doc['rows']) - len(bad)} rows OK, {len(bad)} not) -> "
        f"{args.out}/gpu_loader_table.md")
    return 1 if bad else 0


def finish(out: Path, doc: dict) -> None:
    write_json(out / "gpu_loader_table.json", doc)
    lines = ["# loaderx GPU loader table", "", f"status: **{doc['status']}** (mode {doc['mode']}, "
             f"{doc['repeats']} fresh-process repeats per row, mean ± sample SD)", "",
             "## Receipts", "", "```", json.dumps(doc["receipts"], indent=2), "```", ""]
    if doc["rows"]:
        lines += table_md(doc) + gpu_spdl.table_md(doc)
    (out / "gpu_loader_table.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
