#!/usr/bin/env python3
"""CUDA certification of loaderx's placements and device append (docs/gpu.md).

Usage::

    python3 scripts/certify_gpu.py --out DIR [--budget-s 240] [--require-gpu]

Checks, each independent (a failure is recorded and the rest go on), one progress line each:

* torch and JAX read every catalog dtype they know from ``Allocator("cuda", 0)`` and
  ``Allocator("cuda_host", 0)`` views (pinned batches are exported as the CPU and must come out
  pinned), compared bitwise on the device; Ragged batches (values,
  offsets, shapes, per-record tensors) the same way;
* Dense and Ragged device append from torch tensors made on a side stream that is still busy (no
  synchronize by the producer: the writer's stream must wait through the DLPack hand-off) and
  from JAX arrays still being computed, inputs larger than one 64 MiB staging chunk; loaderx's own
  device batches appended back; mixed-device and non-contiguous inputs refused;
* a consumer kernel on another stream sees complete data, and a pooled device region is not
  reused under a consumer kernel still queued on its stream;
* pool bounds under a Loader with workers 0 and 2;
* nothing leaked: in a fresh process, driver free memory (cuMemGetInfo) back to its start after
  several open / load / append / close cycles.

Writes DIR/certify_gpu.json and DIR/certify_gpu.md (receipts: GPU, driver, CUDA, torch, JAX,
commit). Exit status: 0 when nothing failed, 1 when a check failed or did not run in the budget,
2 with --require-gpu when there is no usable CUDA device. Without --require-gpu and without a GPU
every check is SKIP (exit 0): the mode the test suite runs to catch import and syntax errors.
"""

from __future__ import annotations

import os

# JAX must not take 75 % of the GPU at import: torch, JAX and loaderx share the device here.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import argparse  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_common import (  # noqa: E402
    Checks, Limit, Skip, checks_md, failed, log, loaderx_cuda_reason, receipts, write_json,
)

IDX = np.array([5, 0, 17, 3, 3, 31], dtype=np.int64)
SLEEP_CYCLES = 200_000_000  # torch.cuda._sleep: ~0.1 s of a busy stream at ~2 GHz
MIB = 1 << 20


# ---------------------------------------------------------------------------------------- helpers
def random_records(dt: np.dtype, n: int, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """`n` records of arbitrary bit patterns (0/1 for bool), so the check is bitwise."""
    rng = np.random.default_rng(seed)
    count = n * int(np.prod(shape))
    if dt.kind == "b":
        return rng.integers(0, 2, size=(n, *shape)).astype(dt)
    return rng.integers(0, 256, size=count * dt.itemsize, dtype=np.uint8).view(dt).reshape(n, *shape)


def write_dense(path: Path, x: np.ndarray) -> None:
    from loaderx.zrecord import DenseWriter

    with DenseWriter(path, x.dtype, x.shape[1:], "raw") as w:
        w.append(x)


def write_ragged(path: Path, recs: list[np.ndarray]) -> None:
    from loaderx.zrecord import RaggedBatch, RaggedWriter

    with RaggedWriter(path, recs[0].dtype, recs[0].ndim, "raw") as w:
        w.append(RaggedBatch.from_records(recs))


def int_records(n: int, lo: int, hi: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 50_000, size=int(k), dtype=np.int32) for k in rng.integers(lo, hi, n)]


def as_bytes_torch(t):
    """A tensor's bytes as a (rows, -1) uint8 tensor on its device."""
    import torch

    return t.contiguous().view(torch.uint8).reshape(t.shape[0] if t.dim() else 1, -1)


def as_bytes_jax(j, jnp, lax):
    """A JAX array's bytes as a (rows, -1) uint8 array on its device."""
    if j.dtype == jnp.bool_:
        b = j.astype(jnp.uint8)
    elif jnp.issubdtype(j.dtype, jnp.complexfloating):
        part = jnp.float32 if j.dtype == jnp.complex64 else jnp.float64
        b = lax.bitcast_convert_type(jnp.stack([jnp.real(j).astype(part), jnp.imag(j).astype(part)], -1),
                                     jnp.uint8)
    else:
        b = lax.bitcast_convert_type(j, jnp.uint8)
    return b.reshape(j.shape[0], -1)


def uint_of(itemsize: int) -> np.dtype:
    return np.dtype(f"u{itemsize}")


def import_jax():
    """(jax, jax.numpy, jax.lax, its first GPU device) with 64-bit types on, or Skip."""
    try:
        import jax
        import jax.numpy as jnp
        from jax import lax
    except Exception as e:  # noqa: BLE001
        raise Skip(f"jax not importable: {e}") from e
    jax.config.update("jax_enable_x64", True)  # int64 / uint64 / float64 / complex128 stay 64-bit
    gpu = next((d for d in jax.devices() if d.platform == "gpu"), None)
    if gpu is None:
        raise Skip(f"jax sees no GPU: {jax.devices()}")
    return jax, jnp, lax, gpu


# ---------------------------------------------------------------------------------------- checks
def dtype_checks(ck: Checks, tmp: Path) -> None:
    import loaderx
    import torch
    from loaderx import dtypes
    from loaderx.zrecord import DenseStore

    dev = torch.device("cuda", 0)
    try:
        jax, jnp, lax, jax_gpu = import_jax()
        jax_why = None
    except Skip as e:
        jax = jnp = lax = jax_gpu = None
        jax_why = str(e)

    for name in dtypes.NAMES:
        dt = np.dtype(getattr(dtypes, name))
        p = tmp / f"dtype_{name}"
        x = random_records(dt, 32, (3, 5), seed=len(name))
        write_dense(p, x)
        want = np.ascontiguousarray(x[IDX]).view(np.uint8).reshape(len(IDX), -1)

        def torch_read(name=name, dt=dt, p=p, want=want):
            tdt = getattr(torch, name, None)
            if not isinstance(tdt, torch.dtype):
                raise Skip(f"torch {torch.__version__} has no {name}")
            ref = torch.from_numpy(want).to(dev)
            limits = []
            with DenseStore(p) as s:
                for kind, code in (("cuda", (2, 0)), ("cuda_host", (1, 0))):  # pinned: exported as the CPU
                    with loaderx.Allocator(kind, 0) as a:
                        t = s.bind(a)[IDX]
                        assert t.__dlpack_device__() == code, (kind, t.__dlpack_device__())
                        try:
                            got = torch.from_dlpack(t)
                        except Exception as e:  # noqa: BLE001 - check the bytes another way
                            limits.append(f"{kind}: torch.from_dlpack refused {name}: {e}")
                            got = torch.from_dlpack(t.bitcast(uint_of(dt.itemsize)))
                        else:
                            assert got.dtype == tdt, (kind, got.dtype)
                        if kind == "cuda":
                            assert got.is_cuda, got.device
                        else:
                            assert got.device.type == "cpu" and got.is_pinned(), f"{got.device} pinned={got.is_pinned()}"
                            got = got.to(dev, non_blocking=True)
                        assert torch.equal(as_bytes_torch(got), ref), f"{kind}: bytes differ on the device"
                        del got, t
            if limits:
                raise Limit("; ".join(limits) + " (bytes checked as unsigned integers)")
            return "cuda + cuda_host, bitwise on the device"

        def jax_read(name=name, dt=dt, p=p, want=want):
            if jax_why:
                raise Skip(jax_why)
            try:
                jnp.zeros(1, dt)
            except Exception as e:  # noqa: BLE001
                raise Skip(f"jax {jax.__version__} has no {name}: {e}") from e
            ref = jax.device_put(want, jax_gpu)
            limits = []
            with DenseStore(p) as s:
                for kind in ("cuda", "cuda_host"):
                    with loaderx.Allocator(kind, 0) as a:
                        t = s.bind(a)[IDX]
                        try:
                            j = jnp.from_dlpack(t)
                        except Exception as e:  # noqa: BLE001
                            limits.append(f"{kind}: jnp.from_dlpack refused it: {str(e).splitlines()[0][:200]}")
                            host = loaderx.dtypes.from_dlpack(t) if kind == "cuda_host" else None
                            if host is None:
                                j = jnp.from_dlpack(t.bitcast(uint_of(dt.itemsize))).view(dt)
                            else:
                                j = jax.device_put(np.asarray(host), jax_gpu)
                        assert j.dtype == dt, (kind, j.dtype)
                        if kind == "cuda":
                            assert next(iter(j.devices())).platform == "gpu", j.devices()
                        j = jax.device_put(j, jax_gpu)
                        assert bool(jnp.array_equal(as_bytes_jax(j, jnp, lax), ref)), f"{kind}: bytes differ"
                        del j, t
            if limits:
                raise Limit("; ".join(limits) + " (bytes checked on the GPU after another import)")
            return "cuda + cuda_host, bitwise on the device"

        ck.run(f"torch read {name}", torch_read)
        ck.run(f"jax read {name}", jax_read)


def ragged_checks(ck: Checks, tmp: Path) -> None:
    import loaderx
    import torch
    from loaderx.zrecord import RaggedStore

    dev = torch.device("cuda", 0)
    p = tmp / "ragged"
    recs = int_records(64, 1, 300)
    write_ragged(p, recs)
    sel = [recs[i] for i in IDX]
    want_v = np.concatenate(sel)
    want_cu = np.concatenate([[0], np.cumsum([len(r) for r in sel])]).astype(np.int32)

    def torch_ragged(kind):
        with RaggedStore(p) as s, loaderx.Allocator(kind, 0) as a:
            b = s.bind(a)[IDX]
            assert len(b) == len(IDX)
            v, cu, sh = (torch.from_dlpack(f) for f in (b.values, b.cu_seqlens, b.shapes))
            if kind == "cuda":
                assert v.is_cuda and cu.is_cuda and sh.is_cuda
                assert v.data_ptr() < cu.data_ptr() < sh.data_ptr(), "fields not in one allocation"
            else:
                assert v.is_pinned() and cu.is_pinned()
                v, cu, sh = (x.to(dev, non_blocking=True) for x in (v, cu, sh))
            assert torch.equal(v, torch.from_numpy(want_v).to(dev))
            assert torch.equal(cu, torch.from_numpy(want_cu).to(dev))
            assert np.array_equal(sh.cpu().numpy()[:, 0], [len(r) for r in sel])
            for r, want in zip(b.to_tensors(), sel):
                t = torch.from_dlpack(r)
                assert torch.equal(t.to(dev), torch.from_numpy(want).to(dev))
            del v, cu, sh, b
        return "values, cu_seqlens, shapes, to_tensors: equal on the device"

    ck.run("torch ragged read cuda", lambda: torch_ragged("cuda"))
    ck.run("torch ragged read cuda_host", lambda: torch_ragged("cuda_host"))

    def jax_ragged():
        jax, jnp, _, _ = import_jax()
        with RaggedStore(p) as s, loaderx.Allocator("cuda", 0) as a:
            b = s.bind(a)[IDX]
            v, cu = jnp.from_dlpack(b.values), jnp.from_dlpack(b.cu_seqlens)
            assert next(iter(v.devices())).platform == "gpu"
            assert bool(jnp.array_equal(v, jnp.asarray(want_v))) and bool(jnp.array_equal(cu, jnp.asarray(want_cu)))
            del v, cu, b
        return "values + cu_seqlens equal on the device"

    ck.run("jax ragged read cuda", jax_ragged)


def append_checks(ck: Checks, tmp: Path) -> None:
    import loaderx
    import torch
    from loaderx import errors
    from loaderx.zrecord import DenseStore, DenseWriter, RaggedBatch, RaggedStore, RaggedWriter

    dev = torch.device("cuda", 0)

    def read_dense(p):
        with DenseStore(p) as s, loaderx.Allocator() as a:
            return np.from_dlpack(s.bind(a)[:]).copy()

    def read_ragged(p):
        with RaggedStore(p) as s, loaderx.Allocator() as a:
            b = s.bind(a)[:]
            return np.from_dlpack(b.values).copy(), np.from_dlpack(b.cu_seqlens).copy()

    def torch_dense():
        n = 80 * MIB // 16  # 80 MiB of (n, 4) float32: two staging chunks
        ref = torch.randn(n, 4, device=dev)
        torch.cuda.synchronize()
        side = torch.cuda.Stream()
        p = tmp / "append_dense_torch"
        with torch.cuda.stream(side):
            x = torch.zeros(n, 4, device=dev)
            torch.cuda._sleep(SLEEP_CYCLES)  # the side stream is busy; the data lands after it
            x.copy_(ref)
            with DenseWriter(p, np.float32, (4,), "zstd") as w:
                w.append(x)  # torch: our stream waits on `side` (current stream) via __dlpack__
        np.testing.assert_array_equal(read_dense(p), ref.cpu().numpy())
        return "80 MiB float32 from a busy side stream -> zstd store, equal"

    def torch_ragged():
        rng = np.random.default_rng(3)
        lens = rng.integers(1, 8000, 6000)  # ~24 M int32 values, ~92 MiB: two staging chunks
        cu_np = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
        total = int(cu_np[-1])
        ref = torch.randint(-2**31, 2**31 - 1, (total,), dtype=torch.int32, device=dev)
        torch.cuda.synchronize()
        side = torch.cuda.Stream()
        p = tmp / "append_ragged_torch"
        with torch.cuda.stream(side):
            values = torch.zeros(total, dtype=torch.int32, device=dev)
            torch.cuda._sleep(SLEEP_CYCLES)
            values.copy_(ref)
            # Offsets and shapes are copied in after the sleep too (plain copies: torch has few
            # uint64 kernels on CUDA).
            cu = torch.from_numpy(cu_np).to(dev, non_blocking=True)
            shapes = torch.from_numpy(lens.astype(np.uint64)[:, None]).to(dev, non_blocking=True)
            with RaggedWriter(p, np.int32, 1, "raw") as w:
                w.append(RaggedBatch(values, cu, shapes))
        v, c = read_ragged(p)
        np.testing.assert_array_equal(v, ref.cpu().numpy())
        np.testing.assert_array_equal(c, cu_np)
        return f"{len(lens)} records, {total * 4 / MIB:.0f} MiB int32 from a busy side stream, equal"

    def jax_append():
        jax, jnp, _, _ = import_jax()
        key = jax.random.PRNGKey(0)
        x = jax.random.normal(key, (80 * MIB // 16, 4), jnp.float32) * 3 + 1  # still computing
        p = tmp / "append_dense_jax"
        with DenseWriter(p, np.float32, (4,), "raw") as w:
            w.append(x)
        np.testing.assert_array_equal(read_dense(p), np.asarray(x))
        lens = np.random.default_rng(4).integers(1, 500, 2000)
        cu_np = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
        vals = jax.random.randint(key, (int(cu_np[-1]),), 0, 50_000, jnp.int32)
        p = tmp / "append_ragged_jax"
        with RaggedWriter(p, np.int32, 1, "raw") as w:
            w.append(RaggedBatch(vals, jnp.asarray(cu_np), jnp.asarray(lens.astype(np.uint64)[:, None])))
        v, c = read_ragged(p)
        np.testing.assert_array_equal(v, np.asarray(vals))
        np.testing.assert_array_equal(c, cu_np)
        return "dense 80 MiB float32 + ragged int32 from arrays still being computed"

    def loaderx_roundtrip():
        x = random_records(np.dtype(np.float32), 64, (16,), seed=5)
        write_dense(tmp / "rt_src", x)
        recs = int_records(64, 1, 300, seed=6)
        write_ragged(tmp / "rt_rsrc", recs)
        with DenseStore(tmp / "rt_src") as ds, RaggedStore(tmp / "rt_rsrc") as rs, loaderx.Allocator("cuda", 0) as a:
            with DenseWriter(tmp / "rt_d", np.float32, (16,), "raw") as w:
                w.append(ds.bind(a)[IDX])
            with RaggedWriter(tmp / "rt_r", np.int32, 1, "raw") as w:
                w.append(rs.bind(a)[IDX])
        np.testing.assert_array_equal(read_dense(tmp / "rt_d"), x[IDX])
        np.testing.assert_array_equal(read_ragged(tmp / "rt_r")[0], np.concatenate([recs[i] for i in IDX]))
        return "loaderx cuda DLTensor + RaggedBatch appended back, equal"

    def refusals():
        w = RaggedWriter(tmp / "refused", np.int32, 1, "raw")
        v = torch.arange(10, dtype=torch.int32, device=dev)
        cu = np.array([0, 4, 10], np.int32)
        sh = np.array([[4], [6]], np.uint64)
        for batch, cls, text in (
            (RaggedBatch(v, cu, sh), errors.UnsupportedDeviceError, "different devices"),
            (RaggedBatch(v, torch.tensor([0, 0, 4, 4, 10, 10], dtype=torch.int32, device=dev)[::2],
                         torch.from_numpy(sh).to(dev)), errors.InvalidInputError, "not C-contiguous"),
            (RaggedBatch(v.to(torch.int64), torch.from_numpy(cu).to(dev), torch.from_numpy(sh).to(dev)),
             errors.DTypeError, "expected dtype int32"),
        ):
            try:
                w.append(batch)
            except cls as e:
                assert text in str(e), (text, str(e))
            else:
                raise AssertionError(f"accepted: {text}")
        assert len(w) == 0
        w.abort()
        return "mixed devices, strided offsets, wrong dtype: typed errors, nothing written"

    ck.run("torch dense append from a busy side stream", torch_dense)
    ck.run("torch ragged append from a busy side stream", torch_ragged)
    ck.run("jax dense + ragged append", jax_append)
    ck.run("loaderx device batches appended back", loaderx_roundtrip)
    ck.run("device append refusals", refusals)


def stream_checks(ck: Checks, tmp: Path, quick: bool) -> None:
    import loaderx
    import torch
    from loaderx.zrecord import DenseStore

    dev = torch.device("cuda", 0)
    n = 256 if quick else 4096
    p = tmp / "stream"
    # Integer-valued floats: every sum below is exact, so equality does not depend on the order.
    x = np.random.default_rng(7).integers(-1000, 1000, size=(n, 1024)).astype(np.float32)
    write_dense(p, x)
    ref = torch.from_numpy(x).to(dev).double()

    def consumer_sees_complete_data():
        side = torch.cuda.Stream()
        with DenseStore(p) as s, loaderx.Allocator("cuda", 0) as a:
            v = s.bind(a)
            for step in range(8):
                ids = np.random.default_rng(step).permutation(n)[: n // 2]
                with torch.cuda.stream(side):
                    t = torch.from_dlpack(v[ids])  # torch passes `side` as stream=
                    got = t.double().sum(dim=1)
                    want = ref[torch.from_numpy(ids).to(dev)].sum(dim=1)
                    ok = torch.equal(got, want)
                side.synchronize()
                assert bool(ok), f"step {step}: the consumer stream saw incomplete data"
        return "8 batches summed on a side stream, equal"

    def region_not_reused_under_consumer():
        side = torch.cuda.Stream()
        sums = []
        with DenseStore(p) as s, loaderx.Allocator("cuda", 0, pool_size=256 * MIB) as a:
            v = s.bind(a)
            for step in range(8):
                ids = np.random.default_rng(100 + step).permutation(n)[: n // 2]
                with torch.cuda.stream(side):
                    t = torch.from_dlpack(v[ids])
                    torch.cuda._sleep(SLEEP_CYCLES // 4)  # the consumer reads t only later
                    sums.append((t.double().sum(dim=1), ids))
                del t  # the region returns to the pool now; the next upload may reuse it
            st = a.stats()
            torch.cuda.synchronize()
        for step, (got, ids) in enumerate(sums):
            want = ref[torch.from_numpy(ids).to(dev)].sum(dim=1)
            assert torch.equal(got, want), f"step {step}: the region was overwritten under the consumer"
        return f"8 batches released with queued consumer kernels; device pool hits {st['device_hits']}"

    ck.run("consumer kernel on another stream sees complete data", consumer_sees_complete_data)
    ck.run("pooled device region not reused under a queued consumer", region_not_reused_under_consumer)


def pool_bound_checks(ck: Checks, tmp: Path) -> None:
    import loaderx
    import torch
    from loaderx import Loader
    from loaderx.sampler import Sampler
    from loaderx.zrecord import DenseStore

    p = tmp / "bounds"
    write_dense(p, random_records(np.dtype(np.float32), 512, (256,), seed=8))
    for workers, prefetch in ((0, 2), (2, 2)):
        def bounds(workers=workers, prefetch=prefetch):
            held_max = 2
            with DenseStore(p) as s, loaderx.Allocator("cuda", 0) as a:
                v = s.bind(a)
                peak = dpeak = 0
                with Loader({"x": [v]}, Sampler(len(v), 32, Sampler.Mode.CYCLIC, seed=1), workers=workers,
                            prefetch=prefetch) as ld:
                    held = []
                    for _, shards in zip(range(40), ld):
                        held.append(torch.from_dlpack(shards[0]["x"]))
                        if len(held) > held_max:
                            held.pop(0)
                        st = a.stats()
                        peak = max(peak, st["live_allocations"])
                        dpeak = max(dpeak, st["device_live_allocations"])
                    del held, shards
                st = a.stats()
            bound = workers + prefetch + held_max + 1
            assert peak <= bound, f"staging live {peak} > {bound}"
            assert dpeak <= held_max + 2, f"device live {dpeak} > {held_max + 2}"
            assert st["live_allocations"] == 0 and st["device_live_allocations"] == 0, st
            return f"staging peak {peak} <= {bound}, device peak {dpeak} <= {held_max + 2}, 0 live after"

        ck.run(f"pool bounds under a Loader, workers={workers} prefetch={prefetch}", bounds)


def leak_child() -> dict:
    """Fresh process: driver free memory before and after open / load / append / close cycles."""
    import loaderx
    import torch
    from loaderx import Loader
    from loaderx.sampler import Sampler
    from loaderx.zrecord import DenseStore, RaggedStore, RaggedWriter

    dev = torch.device("cuda", 0)
    torch.zeros(1, device=dev)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        write_dense(tmp / "d", random_records(np.dtype(np.uint8), 512, (64, 64), seed=9))
        write_ragged(tmp / "r", int_records(256, 1, 500, seed=10))

        def cycle(k):
            for kind in ("cuda", "cuda_host"):
                with DenseStore(tmp / "d") as s, loaderx.Allocator(kind, 0, pool_size=256 * MIB) as a:
                    with Loader({"x": [s.bind(a)]}, Sampler(512, 64, Sampler.Mode.IID, seed=k), workers=2) as ld:
                        for _, shards in zip(range(20), ld):
                            torch.from_dlpack(shards[0]["x"]).to(dev).float().sum().item()
                        del shards
            with RaggedStore(tmp / "r") as s, loaderx.Allocator("cuda", 0) as a:
                b = s.bind(a)[np.arange(64)]
                with RaggedWriter(tmp / f"copy{k}", np.int32, 1, "raw") as w:
                    w.append(b)
                del b
            gc.collect()
            torch.cuda.synchronize()
            torch.cuda.empty_cache()

        cycle(0)  # warm: contexts, modules, the append stream and its staging pool
        free0, total = torch.cuda.mem_get_info()
        for k in range(1, 4):
            cycle(k)
        free1, _ = torch.cuda.mem_get_info()
    return {"free_before": free0, "free_after": free1, "total": total}


def leak_check(ck: Checks) -> None:
    def run():
        r = subprocess.run([sys.executable, os.path.abspath(__file__), "--leak-child"], capture_output=True,
                           text=True, timeout=180)
        if r.returncode != 0:
            raise AssertionError(f"leak child exited {r.returncode}: {r.stderr[-3000:]}")
        m = json.loads(r.stdout.strip().splitlines()[-1])
        lost = m["free_before"] - m["free_after"]
        assert lost <= 4 * MIB, f"{lost / MIB:.1f} MiB of device memory not returned after 3 cycles: {m}"
        return f"driver free memory {m['free_before'] / MIB:.0f} -> {m['free_after'] / MIB:.0f} MiB ({-lost / MIB:+.1f})"

    ck.run("nothing leaked after close (fresh process, cuMemGetInfo)", run)


# ------------------------------------------------------------------------------------------ main
def write_report(out: Path, doc: dict) -> None:
    write_json(out / "certify_gpu.json", doc)
    lines = ["# loaderx CUDA certification", "", f"status: **{doc['status']}**", "",
             "## Receipts", "", "```", json.dumps(doc["receipts"], indent=2), "```", "", "## Checks", ""]
    lines += checks_md(doc["checks"])
    (out / "certify_gpu.md").write_text("\n".join(lines) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("certify-out"))
    ap.add_argument("--budget-s", type=float, default=240.0, help="checks not started by then are NOT RUN")
    ap.add_argument("--require-gpu", action="store_true", help="no usable CUDA device is an error (exit 2)")
    ap.add_argument("--quick", action="store_true", help="smaller stream checks")
    ap.add_argument("--leak-child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.leak_child:
        print(json.dumps(leak_child()))
        return 0
    deadline = time.monotonic() + args.budget_s
    reason = loaderx_cuda_reason()
    if reason is None:
        try:
            import torch

            if not torch.cuda.is_available():
                reason = "torch.cuda.is_available() is False"
        except Exception as e:  # noqa: BLE001
            reason = f"torch not importable: {e}"
    doc = {"status": "", "receipts": {**receipts(), "cuda_probe": reason or "ok"}, "checks": []}
    ck = Checks("certify", deadline)
    if reason is not None:
        log(f"certify_gpu: no usable CUDA device: {reason}")
        def no_cuda():
            raise Skip(f"no CUDA: {reason}")

        ck.run("certification", no_cuda)
        doc["checks"] = ck.results
        doc["status"] = "NO CUDA" if args.require_gpu else "SKIPPED (no CUDA)"
        write_report(args.out, doc)
        return 2 if args.require_gpu else 0
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for part in (dtype_checks, ragged_checks, append_checks):
            part(ck, tmp)
        stream_checks(ck, tmp, args.quick)
        pool_bound_checks(ck, tmp)
        leak_check(ck)
    doc["checks"] = ck.results
    doc["status"] = "FAIL" if failed(ck.results) else "PASS"
    write_report(args.out, doc)
    counts = {s: sum(c["status"] == s for c in ck.results) for s in ("PASS", "FAIL", "SKIP", "LIMIT", "NOT RUN")}
    log(f"certify_gpu: {doc['status']} {counts} -> {args.out}/certify_gpu.md")
    return 1 if failed(ck.results) else 0


if __name__ == "__main__":
    sys.exit(main())
