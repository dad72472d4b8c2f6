#!/usr/bin/env python3
"""CUDA certification and benchmark of loaderx placements (docs/gpu.md).

Usage::

    python3 scripts/certify_gpu.py --out DIR [--repeats 3] [--quick]

Part 1, certification (one fresh process): torch and JAX read Dense and Ragged batches placed by
``Allocator("cuda", 0)`` / ``Allocator("cuda_host", 0)`` for every catalog dtype the framework
knows, values compared on the device; device append; pool bounds under a loader (workers 0 and 2);
the DLPack ``stream`` hand-off (a consumer kernel on another stream sees complete data).

Part 2, benchmark arms, each repeat in a fresh process, mean +/- sample SD over ``--repeats``, every
batch checked on the device against a resident copy of the data:

* dense vision and ragged tokens: loaderx ``cuda`` / ``cuda_host`` + ``.to("cuda")`` / ``cpu`` +
  ``.to("cuda")`` vs torch ``DataLoader(pin_memory=True)`` + ``.to("cuda")``;
* the SPDL-style 8 MiB fp32 table: pool (one reused buffer) vs ring (FIFO of 4), pageable vs
  pinned, plus loaderx ``cuda_host`` gathers of 8 MiB batches; with the pinned H2D bandwidth of one
  large copy (the physical limit) beside.

Writes ``DIR/certify_gpu.json`` and ``DIR/certify_gpu.md`` with receipts (GPU, driver, versions,
commit). Without a CUDA driver (or without torch CUDA) every GPU check and arm is reported SKIP with
its reason, the CPU-only arm still runs, and the exit status is 0; with a GPU the exit status is 1
if any check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np

REPEATS_MIN = 3


# ----------------------------------------------------------------------------------------- helpers
def _versions() -> dict:
    out = {"python": sys.version.split()[0], "platform": platform.platform(), "numpy": np.__version__}
    for mod in ("torch", "jax", "jaxlib", "ml_dtypes"):
        try:
            out[mod] = __import__(mod).__version__
        except Exception as e:  # noqa: BLE001 - a receipt records what is missing
            out[mod] = f"absent ({type(e).__name__})"
    try:
        from importlib.metadata import version

        out["loaderx"] = version("loaderx")
    except Exception as e:  # noqa: BLE001
        out["loaderx"] = f"unknown ({type(e).__name__})"
    return out


def _commit() -> str:
    if os.environ.get("LOADERX_COMMIT"):
        return os.environ["LOADERX_COMMIT"]
    try:
        here = Path(__file__).resolve().parent
        return subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True,
                              text=True, timeout=10).stdout.strip() or "unknown"
    except Exception:  # noqa: BLE001
        return "unknown"


def _gpu_receipt() -> dict:
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                            "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
        return {"nvidia_smi": r.stdout.strip() or r.stderr.strip()}
    except Exception as e:  # noqa: BLE001
        return {"nvidia_smi": f"unavailable ({type(e).__name__}: {e})"}


def cuda_probe() -> tuple[bool, str]:
    """(usable, reason): loaderx can open CUDA device 0 and torch sees CUDA."""
    import loaderx

    try:
        a = loaderx.Allocator("cuda", 0)
        a.close()
    except loaderx.UnsupportedDeviceError as e:
        return False, f"loaderx: {e}"
    try:
        import torch
    except Exception as e:  # noqa: BLE001
        return False, f"torch not importable: {e}"
    if not torch.cuda.is_available():
        return False, "torch.cuda.is_available() is False"
    return True, "ok"


def _mean_sd(xs: list[float]) -> tuple[float, float]:
    return statistics.fmean(xs), (statistics.stdev(xs) if len(xs) > 1 else float("nan"))


# ------------------------------------------------------------------------------------------ stores
def make_dense(path: Path, records: int, shape: tuple[int, ...], dtype, seed: int = 0) -> np.ndarray:
    from loaderx.zrecord import DenseWriter

    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        x = rng.integers(max(info.min, -1000), min(info.max, 1000), size=(records, *shape)).astype(dt)
    elif dt.kind == "b":
        x = rng.integers(0, 2, size=(records, *shape)).astype(dt)
    else:
        x = rng.standard_normal(size=(records, *shape)).astype(np.float32).astype(dt)
    with DenseWriter(path, dt, shape, "raw") as w:
        w.append(x)
    return x


def make_ragged(path: Path, records: int, lo: int, hi: int, seed: int = 0) -> list[np.ndarray]:
    from loaderx.zrecord import RaggedBatch, RaggedWriter

    rng = np.random.default_rng(seed)
    recs = [rng.integers(0, 50_000, size=int(n), dtype=np.int32) for n in rng.integers(lo, hi, records)]
    with RaggedWriter(path, np.int32, 1, "raw") as w:
        w.append(RaggedBatch.from_records(recs))
    return recs


# ----------------------------------------------------------------------------------- certification
def certify(tmp: Path, quick: bool) -> list[dict]:
    """Every check as {name, status: PASS|FAIL|SKIP, detail}."""
    import loaderx
    import torch
    from loaderx import dtypes
    from loaderx.zrecord import DenseStore, DenseWriter, RaggedStore

    results: list[dict] = []

    def check(name, fn):
        try:
            detail = fn()
            results.append({"name": name, "status": "PASS", "detail": detail or ""})
        except _Skip as s:
            results.append({"name": name, "status": "SKIP", "detail": str(s)})
        except Exception as e:  # noqa: BLE001 - every failure is recorded, none stops the run
            results.append({"name": name, "status": "FAIL",
                            "detail": f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=4)}"})

    dev = torch.device("cuda", 0)
    idx = np.array([5, 0, 17, 3, 3, 31], dtype=np.int64)
    names = [n for n, _code, _dl in loaderx._loaderx._DTYPES]

    for name in names:
        dt = np.dtype(getattr(dtypes, name))
        p = tmp / f"d_{name}"

        def dense_torch(dt=dt, p=p, name=name):
            x = make_dense(p, 32, (3, 5), dt)
            with DenseStore(p) as s:
                for kind in ("cuda", "cuda_host"):
                    a = loaderx.Allocator(kind, 0)
                    t = s.bind(a)[idx]
                    want = (2, 0) if kind == "cuda" else (3, 0)
                    assert t.__dlpack_device__() == want, t.__dlpack_device__()
                    try:  # through DLPack directly when torch knows the dtype (bfloat16 included)
                        got = torch.from_dlpack(t)
                        direct = True
                    except Exception:  # noqa: BLE001 - float8 etc.: the same bytes as uint
                        got = torch.from_dlpack(t.bitcast(np.dtype(f"u{dt.itemsize}")))
                        direct = False
                    ref_np = np.ascontiguousarray(x[idx]).view(np.uint8)
                    if kind == "cuda":
                        assert got.is_cuda, got.device
                    else:
                        assert got.is_pinned(), "cuda_host batch is not pinned"
                        got = got.to(dev, non_blocking=True)
                    ref = torch.from_numpy(ref_np).to(dev)
                    assert torch.equal(got.contiguous().view(torch.uint8).reshape(ref.shape), ref), \
                        f"{kind}: bytes differ on the device"
            return f"{name}: cuda + cuda_host, {'dlpack dtype' if direct else 'as uint'}, bitwise"

        check(f"torch dense read {name}", dense_torch)

    def ragged_torch():
        p = tmp / "ragged"
        recs = make_ragged(p, 64, 1, 300)
        with RaggedStore(p) as s:
            b = s.bind(loaderx.Allocator("cuda", 0))[idx]
            vals = torch.from_dlpack(b.values)
            cu = torch.from_dlpack(b.cu_seqlens)
            assert vals.is_cuda and cu.is_cuda
            want = np.concatenate([recs[i] for i in idx])
            assert torch.equal(vals, torch.from_numpy(want).to(dev))
            want_cu = np.concatenate([[0], np.cumsum([len(recs[i]) for i in idx])]).astype(np.int32)
            assert torch.equal(cu, torch.from_numpy(want_cu).to(dev))
            base = vals.data_ptr()
            assert cu.data_ptr() > base, "cu_seqlens is not in the values' allocation"
        return "values, cu_seqlens on device, one allocation"

    check("torch ragged read", ragged_torch)

    def jax_read():
        try:
            import jax
            import jax.numpy as jnp
        except Exception as e:  # noqa: BLE001
            raise _Skip(f"jax not importable: {e}") from e
        if not any(d.platform == "gpu" for d in jax.devices()):
            raise _Skip(f"jax sees no GPU: {jax.devices()}")
        p = tmp / "jax_dense"
        x = make_dense(p, 32, (4, 4), np.float32)
        with DenseStore(p) as s:
            t = s.bind(loaderx.Allocator("cuda", 0))[idx]
            j = jnp.from_dlpack(t)
            assert next(iter(j.devices())).platform == "gpu"
            assert bool(jnp.array_equal(j, jnp.asarray(x[idx])))
        p = tmp / "jax_ragged"
        recs = make_ragged(p, 16, 1, 50)
        with RaggedStore(p) as s:
            b = s.bind(loaderx.Allocator("cuda", 0))[idx[:3] % 16]
            v = jnp.from_dlpack(b.values)
            assert bool(jnp.array_equal(v, jnp.asarray(np.concatenate([recs[i] for i in idx[:3] % 16]))))
        return "dense float32 + ragged int32"

    check("jax read", jax_read)

    def append_dense():
        x = torch.arange(4 * 3 * 1000, dtype=torch.float32, device=dev).reshape(-1, 3)
        p = tmp / "append"
        with DenseWriter(p, np.float32, (3,), "zstd") as w:
            w.append(x)
        with DenseStore(p) as s:
            np.testing.assert_array_equal(np.from_dlpack(s.bind(loaderx.Allocator())[:]), x.cpu().numpy())
        return "torch cuda float32 -> zstd store"

    check("torch dense append from device", append_dense)

    def stream_semantics():
        p = tmp / "stream"
        n = 256 if quick else 4096
        x = make_dense(p, n, (1024,), np.float32)
        ref = torch.from_numpy(x).to(dev)
        s2 = torch.cuda.Stream()
        with DenseStore(p) as s:
            v = s.bind(loaderx.Allocator("cuda", 0))
            for step in range(8):
                ids = np.random.default_rng(step).permutation(n)[: n // 2]
                with torch.cuda.stream(s2):
                    t = torch.from_dlpack(v[ids])  # torch passes s2 as stream=
                    ok = torch.equal(t.sum(dim=1), ref[torch.from_numpy(ids).to(dev)].sum(dim=1))
                s2.synchronize()
                assert ok, f"step {step}: consumer stream saw incomplete data"
        return "8 batches consumed on a side stream"

    check("dlpack stream hand-off", stream_semantics)

    def pool_bounds():
        from loaderx import Loader
        from loaderx.sampler import Sampler

        p = tmp / "bounds"
        make_dense(p, 512, (256,), np.float32)
        out = []
        for workers, prefetch in ((0, 2), (2, 2)):
            with DenseStore(p) as s:
                a = loaderx.Allocator("cuda", 0)
                v = s.bind(a)
                peak = 0
                with Loader({"x": [v]}, Sampler(len(v), 32, Sampler.Mode.CYCLIC, seed=1), workers=workers, prefetch=prefetch) as ld:
                    held = []
                    for i, shards in zip(range(40), ld):
                        held.append(shards)
                        if len(held) > 2:
                            held.pop(0)
                        st = a.stats()
                        peak = max(peak, st["live_allocations"])
                        assert st["device_live_allocations"] <= 2 + 1, st
                bound = workers + prefetch + 2 + 1
                assert peak <= bound, f"staging live {peak} > {bound}"
                out.append(f"w{workers}p{prefetch}: staging peak {peak} <= {bound}")
        return "; ".join(out)

    check("pool bounds under a loader", pool_bounds)
    return results


class _Skip(Exception):
    pass


# ------------------------------------------------------------------------------------------ arms
def _arm(name: str, tmp: Path, quick: bool) -> dict:
    """One benchmark trial in this (fresh) process: {'items_per_s', 'checked', ...}."""
    import loaderx
    from loaderx.zrecord import DenseStore, RaggedStore

    batch = 64 if quick else 256
    steps = 8 if quick else 64
    if name == "loaderx-cpu-host":  # CPU-only smoke arm (runs everywhere)
        x = make_dense(tmp / "v", batch * 4, (3, 32, 32), np.uint8)
        with DenseStore(tmp / "v") as s:
            v = s.bind(loaderx.Allocator())
            t0 = time.perf_counter()
            checked = 0
            for k in range(steps):
                ids = np.random.default_rng(k).integers(0, len(v), batch)
                got = np.from_dlpack(v[ids])
                assert np.array_equal(got, x[ids])
                checked += 1
            dt = time.perf_counter() - t0
        return {"items_per_s": checked * batch / dt, "checked": checked}

    import torch

    dev = torch.device("cuda", 0)
    if name.startswith("spdl-"):
        _, mode, mem = name.split("-")  # spdl-pool|ring-pageable|pinned
        n = (8 << 20) // 4
        bufs = [torch.empty(n, dtype=torch.float32, pin_memory=(mem == "pinned")) for _ in range(1 if mode == "pool" else 4)]
        trials = 64 if quick else 256
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for k in range(trials):
            b = bufs[k % len(bufs)]
            b.fill_(float(k))
            g = b.to(dev, non_blocking=(mem == "pinned"))
            if not bool((g == float(k)).all()):
                raise AssertionError(f"batch {k} wrong")
        torch.cuda.synchronize()
        return {"items_per_s": trials / (time.perf_counter() - t0), "checked": trials}

    if name == "h2d-limit":
        big = torch.empty(256 << 20, dtype=torch.uint8, pin_memory=True)
        g = torch.empty_like(big, device=dev)
        g.copy_(big, non_blocking=True)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(8):
            g.copy_(big, non_blocking=True)
        torch.cuda.synchronize()
        return {"items_per_s": 8 * big.numel() / (time.perf_counter() - t0) / 1e9, "checked": 0, "unit": "GB/s"}

    kind, what = name.rsplit("-", 1)  # e.g. loaderx_cuda-dense, torch_pin-ragged, loaderx_8mib-dense
    if what == "dense":
        shape, rec = ((1024,), 2048) if kind == "loaderx_8mib" else ((3, 64, 64), 4096)
        dt = np.float32 if kind == "loaderx_8mib" else np.uint8
        if kind == "loaderx_8mib":
            batch = 2048
        x = make_dense(tmp / "v", rec if not quick else batch * 2, shape, dt)
        ref = torch.from_numpy(x).to(dev)
        src = tmp / "v"
    else:
        recs = make_ragged(tmp / "r", 2048 if not quick else batch * 2, 16, 1024)
        flat = torch.from_numpy(np.concatenate(recs)).to(dev)
        starts = np.concatenate([[0], np.cumsum([len(r) for r in recs])])
        src = tmp / "r"

    def expect_dense(ids):
        return ref[torch.from_numpy(ids).to(dev)]

    def expect_ragged(ids):
        return torch.cat([flat[starts[i]:starts[i + 1]] for i in ids])

    rng = np.random.default_rng(7)
    plan = [rng.integers(0, (len(x) if what == "dense" else len(recs)), batch) for _ in range(steps)]
    checked = 0
    torch.cuda.synchronize()
    if kind.startswith("loaderx"):
        place = {"loaderx_cuda": "cuda", "loaderx_pinned": "cuda_host", "loaderx_cpu": "cpu", "loaderx_8mib": "cuda_host"}[kind]
        a = loaderx.Allocator(place, 0)
        store = DenseStore(src) if what == "dense" else RaggedStore(src)
        v = store.bind(a)
        t0 = time.perf_counter()
        for ids in plan:
            b = v[ids]
            if what == "dense":
                g = torch.from_dlpack(b)
                g = g if g.is_cuda else g.to(dev, non_blocking=(place != "cpu"))
                ok = torch.equal(g, expect_dense(ids))
            else:
                g = torch.from_dlpack(b.values)
                g = g if g.is_cuda else g.to(dev, non_blocking=(place != "cpu"))
                ok = torch.equal(g, expect_ragged(ids))
            if not ok:
                raise AssertionError("batch differs")
            checked += 1
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        store.close()
    else:  # torch DataLoader(pin_memory=True) over a memory-mapped copy
        from torch.utils.data import DataLoader

        if what == "dense":
            mm = np.ascontiguousarray(x)

            class DS(torch.utils.data.Dataset):
                def __len__(self):
                    return len(plan)

                def __getitem__(self, k):
                    return torch.from_numpy(mm[plan[k]])
        else:
            class DS(torch.utils.data.Dataset):
                def __len__(self):
                    return len(plan)

                def __getitem__(self, k):
                    return torch.from_numpy(np.concatenate([recs[i] for i in plan[k]]))

        dl = DataLoader(DS(), batch_size=None, num_workers=2, pin_memory=True)
        t0 = time.perf_counter()
        for k, b in enumerate(dl):
            g = b.to(dev, non_blocking=True)
            ok = torch.equal(g, expect_dense(plan[k]) if what == "dense" else expect_ragged(plan[k]))
            if not ok:
                raise AssertionError("batch differs")
            checked += 1
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
    return {"items_per_s": checked * batch / dt, "checked": checked}


GPU_ARMS = [
    "h2d-limit",
    "loaderx_cuda-dense", "loaderx_pinned-dense", "loaderx_cpu-dense", "torch_pin-dense",
    "loaderx_cuda-ragged", "loaderx_pinned-ragged", "loaderx_cpu-ragged", "torch_pin-ragged",
    "spdl-pool-pageable", "spdl-pool-pinned", "spdl-ring-pageable", "spdl-ring-pinned",
    "loaderx_8mib-dense",
]
CPU_ARMS = ["loaderx-cpu-host"]


def run_arm_fresh(name: str, quick: bool, timeout: float) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--arm", name] + (["--quick"] if quick else [])
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"arm {name} exited {r.returncode}: {r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------------------------------ report
def write_report(out: Path, doc: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "certify_gpu.json").write_text(json.dumps(doc, indent=2))
    lines = ["# loaderx CUDA certification", "", f"status: **{doc['status']}**", ""]
    lines += ["## Receipts", "", "```", json.dumps(doc["receipts"], indent=2), "```", ""]
    lines += ["## Checks", "", "| check | status | detail |", "|---|---|---|"]
    for c in doc["checks"]:
        lines.append(f"| {c['name']} | {c['status']} | {c['detail'].splitlines()[0] if c['detail'] else ''} |")
    lines += ["", "## Benchmark arms (mean ± sample SD over fresh processes)", "",
              "| arm | items/s (or GB/s) | repeats | checked batches | status |", "|---|---|---|---|---|"]
    for a in doc["arms"]:
        if a["status"] == "OK":
            lines.append(f"| {a['name']} | {a['mean']:.2f} ± {a['sd']:.2f} | {a['repeats']} | {a['checked']} | OK |")
        else:
            lines.append(f"| {a['name']} | - | - | - | {a['status']}: {a['detail'].splitlines()[0]} |")
    ratios = doc.get("ratios", {})
    if ratios:
        lines += ["", "## Ratios (same run)", ""] + [f"* {k}: {v:.3f}" for k, v in ratios.items()]
    (out / "certify_gpu.md").write_text("\n".join(lines) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("certify-out"))
    ap.add_argument("--repeats", type=int, default=REPEATS_MIN)
    ap.add_argument("--quick", action="store_true", help="small sizes (smoke run)")
    ap.add_argument("--arm", help=argparse.SUPPRESS)
    ap.add_argument("--arm-timeout", type=float, default=120.0)
    args = ap.parse_args()
    if args.arm:
        with tempfile.TemporaryDirectory() as d:
            print(json.dumps(_arm(args.arm, Path(d), args.quick)))
        return 0
    if args.repeats < REPEATS_MIN:
        ap.error(f"--repeats must be >= {REPEATS_MIN}")
    ok, reason = cuda_probe()
    doc = {"status": "", "receipts": {**_versions(), **_gpu_receipt(), "commit": _commit(),
                                      "cuda_probe": reason, "quick": args.quick},
           "checks": [], "arms": [], "ratios": {}}
    if ok:
        with tempfile.TemporaryDirectory() as d:
            doc["checks"] = certify(Path(d), args.quick)
    else:
        doc["checks"] = [{"name": "certification", "status": "SKIP", "detail": f"no CUDA: {reason}"}]
    means = {}
    for name in CPU_ARMS + GPU_ARMS:
        if name in GPU_ARMS and not ok:
            doc["arms"].append({"name": name, "status": "SKIP", "detail": f"no CUDA: {reason}"})
            continue
        try:
            runs = [run_arm_fresh(name, args.quick, args.arm_timeout) for _ in range(args.repeats)]
            m, sd = _mean_sd([r["items_per_s"] for r in runs])
            means[name] = m
            doc["arms"].append({"name": name, "status": "OK", "mean": m, "sd": sd, "repeats": len(runs),
                                "checked": sum(r["checked"] for r in runs), "runs": runs})
        except Exception as e:  # noqa: BLE001
            doc["arms"].append({"name": name, "status": "FAIL", "detail": f"{type(e).__name__}: {e}"})
    for what in ("dense", "ragged"):
        base = means.get(f"torch_pin-{what}")
        for k in ("loaderx_cuda", "loaderx_pinned", "loaderx_cpu"):
            if base and f"{k}-{what}" in means:
                doc["ratios"][f"{k}-{what} / torch_pin-{what}"] = means[f"{k}-{what}"] / base
    for mode in ("pool", "ring"):
        a, b = means.get(f"spdl-{mode}-pinned"), means.get(f"spdl-{mode}-pageable")
        if a and b:
            doc["ratios"][f"spdl {mode} pinned / pageable"] = a / b
    failed = any(c["status"] == "FAIL" for c in doc["checks"]) or any(a["status"] == "FAIL" for a in doc["arms"])
    doc["status"] = "FAIL" if failed else ("PASS" if ok else "SKIPPED (no CUDA)")
    write_report(args.out, doc)
    print(f"certify_gpu: {doc['status']} -> {args.out}/certify_gpu.md")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
