"""Framework-owned tensors -> loaderx containers -> back into the framework, compared.

    python examples/dlpack_roundtrip.py --framework torch --memory cpu
    python examples/dlpack_roundtrip.py --framework jax --memory cpu --records 64

Dense: a few dtypes and shapes (float32 N-D, bfloat16, int64, uint8 images) made by the framework,
appended through DLPack, reopened, read back with ``from_dlpack`` (zero-copy) and compared.
Ragged: variable-length records made by the framework, packed as ``RaggedBatch(values,
cu_seqlens, shapes)`` from framework tensors, appended, reopened, compared record by record.

``--memory gpu`` makes the source tensors on the GPU. This build of loaderx reads and writes host
memory only (see docs/python.md, "Not in this build"): a GPU tensor handed to a writer is refused
with ``UnsupportedDeviceError`` (shown), so the example copies to the host for the append and moves
what it reads back to the GPU. Without a GPU it exits with status 2 and says so.
Exit status: 0 when every comparison holds, 1 when one fails.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

import loaderx
from loaderx import Allocator, dtypes
from loaderx.zrecord import DenseStore, DenseWriter, RaggedBatch, RaggedStore, RaggedWriter


class Torch:
    name = "torch"

    def __init__(self, memory: str):
        import torch

        self.t = torch
        if memory == "gpu" and not torch.cuda.is_available():
            raise SystemExit2("torch sees no CUDA GPU here (torch.cuda.is_available() is False)")
        self.device = torch.device("cuda" if memory == "gpu" else "cpu")
        self.gen = torch.Generator().manual_seed(0)

    def dense_sources(self, n: int):
        t = self.t
        return {
            "float32[n,4,8]": t.randn(n, 4, 8, generator=self.gen),
            "bfloat16[n,16]": t.randn(n, 16, generator=self.gen).to(t.bfloat16),
            "int64[n]": t.randint(-(2**62), 2**62, (n,), generator=self.gen, dtype=t.int64),
            "uint8[n,3,16,16]": t.randint(0, 256, (n, 3, 16, 16), generator=self.gen, dtype=t.uint8),
            "float8_e4m3fn[n,8]": t.randn(n, 8, generator=self.gen).to(t.float8_e4m3fn),
        }

    def ragged_sources(self, n: int):
        t = self.t
        lens = t.randint(1, 40, (n,), generator=self.gen).tolist()
        return {
            "int32 1-D tokens": [t.arange(k, dtype=t.int32) * 7 + i for i, k in enumerate(lens)],
            "float16 [3,h,w]": [t.randn(3, 1 + k % 5, 1 + k % 7, generator=self.gen).half() for k in lens],
        }

    def on_device(self, x):
        return x.to(self.device)

    def to_host(self, x):
        return x.cpu()

    def from_dlpack(self, t):
        return self.t.from_dlpack(t).to(self.device)

    def pack(self, recs):
        t = self.t
        values = t.cat([r.reshape(-1) for r in recs])
        cu = t.zeros(len(recs) + 1, dtype=t.int32)
        cu[1:] = t.cumsum(t.tensor([r.numel() for r in recs]), 0)
        shapes = t.tensor([list(r.shape) for r in recs], dtype=t.uint64)
        return values, cu, shapes

    def equal(self, a, b) -> bool:
        if a.shape != b.shape or a.dtype != b.dtype or a.device != b.device:
            return False
        u8 = self.t.uint8
        return bool((a.contiguous().reshape(-1).view(u8) == b.contiguous().reshape(-1).view(u8)).all())

    def take(self, x, idx):
        return x[self.t.as_tensor(idx, device=x.device)]

    def loaderx_dtype(self, x):
        return getattr(dtypes, str(x.dtype).removeprefix("torch."))

    def shape(self, x):
        return tuple(x.shape)


class Jax:
    name = "jax"

    def __init__(self, memory: str):
        import jax

        jax.config.update("jax_enable_x64", True)  # keep int64 64-bit
        import jax.numpy as jnp

        self.jax, self.jnp = jax, jnp
        if memory == "gpu":
            try:
                self.device = jax.devices("gpu")[0]
            except RuntimeError:
                raise SystemExit2(f"JAX sees no GPU here (default backend {jax.default_backend()!r})") from None
        else:
            self.device = jax.devices("cpu")[0]
        self.key = jax.random.PRNGKey(0)

    def _split(self):
        self.key, k = self.jax.random.split(self.key)
        return k

    def dense_sources(self, n: int):
        r, jnp = self.jax.random, self.jnp
        return {
            "float32[n,4,8]": r.normal(self._split(), (n, 4, 8), jnp.float32),
            "bfloat16[n,16]": r.normal(self._split(), (n, 16), jnp.float32).astype(jnp.bfloat16),
            "int64[n]": r.randint(self._split(), (n,), -(2**62), 2**62, jnp.int64),
            "uint8[n,3,16,16]": r.randint(self._split(), (n, 3, 16, 16), 0, 256, jnp.int32).astype(jnp.uint8),
            "float8_e4m3fn[n,8]": r.normal(self._split(), (n, 8), jnp.float32).astype(jnp.float8_e4m3fn),
        }

    def ragged_sources(self, n: int):
        # made on the host and handed to JAX: one jax.random call per distinct shape would compile
        jnp, rng = self.jnp, np.random.default_rng(0)
        lens = rng.integers(1, 40, n).tolist()
        return {
            "int32 1-D tokens": [jnp.asarray(np.arange(k, dtype=np.int32) * 7 + i) for i, k in enumerate(lens)],
            "float16 [3,h,w]": [jnp.asarray(rng.standard_normal((3, 1 + k % 5, 1 + k % 7)).astype(np.float16)) for k in lens],
        }

    def on_device(self, x):
        return self.jax.device_put(x, self.device)

    def to_host(self, x):
        return self.jax.device_put(x, self.jax.devices("cpu")[0])

    def from_dlpack(self, t):
        return self.jax.device_put(self.jax.dlpack.from_dlpack(t), self.device)

    def pack(self, recs):
        jnp = self.jnp
        values = jnp.asarray(np.concatenate([np.asarray(r).reshape(-1) for r in recs]))
        cu = np.zeros(len(recs) + 1, dtype=np.int32)
        cu[1:] = np.cumsum([r.size for r in recs])
        shapes = np.array([r.shape for r in recs], dtype=np.uint64)
        return values, jnp.asarray(cu), jnp.asarray(shapes)

    def equal(self, a, b) -> bool:
        a, b = np.asarray(a), np.asarray(b)
        return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()

    def take(self, x, idx):
        return x[idx]

    def loaderx_dtype(self, x):
        return dtypes.canonical(x.dtype)

    def shape(self, x):
        return tuple(x.shape)


class SystemExit2(SystemExit):
    def __init__(self, msg: str):
        print(f"dlpack_roundtrip: --memory gpu: {msg}; nothing to do", file=sys.stderr)
        super().__init__(2)


def run(fw, records: int, out: Path) -> bool:
    ok = True
    with Allocator("cpu") as alloc:
        for label, src in fw.dense_sources(records).items():
            src = fw.on_device(src)
            path = out / f"dense-{label.split('[')[0]}"
            with DenseWriter(path, fw.loaderx_dtype(src), fw.shape(src)[1:], "zstd") as w:
                try:
                    w.append(src[: records // 2])
                except loaderx.UnsupportedDeviceError as e:  # --memory gpu
                    print(f"  {label}: GPU tensor refused as documented ({e}); appending a host copy")
                    w.append(fw.to_host(src[: records // 2]))
                w.append(fw.to_host(src[records // 2:]))
            with DenseStore(path) as s:
                v = s.bind(alloc)
                got = fw.from_dlpack(v[:])
                idx = np.arange(records)[::-1].copy()
                picked = fw.from_dlpack(v[idx])
                same = fw.equal(got, src) and fw.equal(picked, fw.take(src, idx))
            ok &= same
            print(f"dense  {label:<20} {records} records, {s.codec}: {'equal' if same else 'DIFFERENT'}")
        for label, recs in fw.ragged_sources(records).items():
            recs = [fw.on_device(r) for r in recs]
            values, cu, shapes = fw.pack([fw.to_host(r) for r in recs])
            ndim = len(fw.shape(recs[0]))
            path = out / f"ragged-{label.split()[0]}"
            with RaggedWriter(path, fw.loaderx_dtype(values), ndim, "zstd") as w:
                w.append(RaggedBatch(values, cu, shapes))
            with RaggedStore(path) as s:
                b = s.bind(alloc)[:]
                pieces = [fw.from_dlpack(t) for t in b.to_tensors()]
                same = len(pieces) == len(recs) and all(fw.equal(p, r) for p, r in zip(pieces, recs))
                same &= fw.equal(fw.from_dlpack(b.values), values)
            ok &= same
            print(f"ragged {label:<20} {records} records, ndim {ndim}: {'equal' if same else 'DIFFERENT'}")
    return ok


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--framework", choices=["torch", "jax"], required=True)
    ap.add_argument("--memory", choices=["cpu", "gpu"], default="cpu")
    ap.add_argument("--records", type=int, default=256)
    ap.add_argument("--out", type=Path, help="directory for the containers (default: a temp dir)")
    args = ap.parse_args(argv)
    fw = Torch(args.memory) if args.framework == "torch" else Jax(args.memory)
    print(f"dlpack_roundtrip: {args.framework}, source tensors in {args.memory} memory")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        ok = run(fw, args.records, args.out)
    else:
        with tempfile.TemporaryDirectory() as d:
            ok = run(fw, args.records, Path(d))
    print("all equal" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
