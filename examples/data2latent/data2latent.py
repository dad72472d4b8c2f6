"""Oxford-Pet images -> loaderx Dense and Ragged containers -> one Loader -> a small convolutional
encoder (torch or JAX) -> latents; the Dense and the Ragged path must give the same latents.

    python examples/data2latent/data2latent.py --framework torch
    python examples/data2latent/data2latent.py --framework jax --limit 64 --size 96 --out /tmp/d2l

See README.md next to this file for the design (what each store holds, where the Ragged images
are resized, why both paths agree exactly).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from loaderx import Allocator, Loader, dtypes
from loaderx.sampler import Sampler
from loaderx.zrecord import DenseStore, DenseWriter, RaggedBatch, RaggedStore, RaggedWriter

REPO = Path(__file__).resolve().parents[2]
LATENT = 32


def corpora_dir() -> Path:
    """$LOADERX_CORPORA, else ../shared/corpora next to the repository (the CI layout)."""
    return Path(os.environ.get("LOADERX_CORPORA", REPO.parent / "shared" / "corpora"))


# --- preparation -------------------------------------------------------------------------------


def decode(path: Path) -> np.ndarray:
    """RGB uint8 CHW. Pillow detects the format by content (the archive has a GIF and an RGBA PNG
    named .jpg); convert("RGB") does the palette lookup and drops alpha."""
    from PIL import Image

    with Image.open(path) as im:
        return np.ascontiguousarray(np.asarray(im.convert("RGB")).transpose(2, 0, 1))


def resize_crop(chw: np.ndarray, size: int) -> np.ndarray:
    """torchvision's Resize(round(size * 256 / 224)) + CenterCrop(size) with Pillow: the short side
    becomes S, the long side floor(long * S / short), antialiased bilinear; crop at
    round((H' - size) / 2), round((W' - size) / 2). uint8 CHW in, uint8 CHW (3, size, size) out.
    Deterministic: the same bytes in give the same bytes out."""
    from PIL import Image

    short = round(size * 256 / 224)
    _, h, w = chw.shape
    nw, nh = (short, math.floor(h * short / w)) if w <= h else (math.floor(w * short / h), short)
    im = Image.fromarray(np.ascontiguousarray(chw.transpose(1, 2, 0)))
    im = im.resize((nw, nh), Image.Resampling.BILINEAR)
    top, left = round((nh - size) / 2), round((nw - size) / 2)
    im = im.crop((left, top, left + size, top + size))
    return np.ascontiguousarray(np.asarray(im).transpose(2, 0, 1))


def prepare(files: list[Path], out: Path, size: int) -> None:
    """Dense: resize_crop(decode(f)) as uint8[3,size,size]; Ragged: decode(f) at native resolution,
    uint8 [3,H,W]; plus the record's position as an int64 stream (to name records in the output)."""
    images = [decode(f) for f in files]
    with DenseWriter(out / "dense", dtypes.uint8, (3, size, size), "zstd") as w:
        w.append(np.stack([resize_crop(im, size) for im in images]))
    with RaggedWriter(out / "ragged", dtypes.uint8, 3, "zstd") as w:
        w.append(RaggedBatch.from_records(images))
    with DenseWriter(out / "index", dtypes.int64, (), "raw") as w:
        w.append(np.arange(len(images), dtype=np.int64))


# --- the encoder (same weights in both frameworks) ---------------------------------------------


def weights(seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Three 3x3 stride-2 convolutions (3->16->32->64) and a linear 64->LATENT; He-initialised
    from NumPy so torch and JAX run the very same network."""
    rng = np.random.default_rng(seed)
    out = []
    for cin, cout in [(3, 16), (16, 32), (32, 64)]:
        out.append((rng.normal(0, math.sqrt(2 / (9 * cin)), (cout, cin, 3, 3)).astype(np.float32),
                    np.zeros(cout, np.float32)))
    out.append((rng.normal(0, math.sqrt(1 / 64), (LATENT, 64)).astype(np.float32), np.zeros(LATENT, np.float32)))
    return out


class TorchEncoder:
    def __init__(self, seed: int):
        import torch

        self.torch = torch
        torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
        self.w = [(torch.from_numpy(w), torch.from_numpy(b)) for w, b in weights(seed)]

    def images(self, dl):
        """A uint8 NCHW batch from a loaderx DLTensor (zero-copy) or a NumPy array."""
        return self.torch.from_dlpack(dl) if hasattr(dl, "__dlpack__") and not isinstance(dl, np.ndarray) else self.torch.from_numpy(dl)

    def __call__(self, x_u8) -> np.ndarray:
        F = self.torch.nn.functional
        with self.torch.no_grad():
            x = x_u8.to(self.torch.float32) / 255.0
            for w, b in self.w[:3]:
                x = F.relu(F.conv2d(x, w, b, stride=2, padding=1))
            x = x.mean(dim=(2, 3))
            w, b = self.w[3]
            return (x @ w.T + b).numpy()


class JaxEncoder:
    def __init__(self, seed: int):
        import jax
        import jax.numpy as jnp

        self.jax, self.jnp = jax, jnp
        self.w = [(jnp.asarray(w), jnp.asarray(b)) for w, b in weights(seed)]
        self.fn = jax.jit(self._forward)

    def images(self, dl):
        """A uint8 NCHW batch: a loaderx DLTensor is imported zero-copy (its buffer is 64-byte
        aligned, JAX's condition), a NumPy array is copied to a device buffer."""
        if hasattr(dl, "__dlpack__") and not isinstance(dl, np.ndarray):
            return self.jax.dlpack.from_dlpack(dl)
        return self.jnp.asarray(dl)

    def _forward(self, params, x_u8):
        jnp, lax = self.jnp, self.jax.lax
        x = x_u8.astype(jnp.float32) / 255.0
        for w, b in params[:3]:
            x = lax.conv_general_dilated(x, w, (2, 2), ((1, 1), (1, 1)), dimension_numbers=("NCHW", "OIHW", "NCHW"))
            x = jnp.maximum(x + b[None, :, None, None], 0.0)
        x = x.mean(axis=(2, 3))
        w, b = params[3]
        return x @ w.T + b

    def __call__(self, x_u8) -> np.ndarray:
        return np.asarray(self.fn(self.w, x_u8))


# --- the loop ------------------------------------------------------------------------------------


def run(out: Path, framework: str, batch: int, size: int, seed: int, workers: int) -> dict:
    enc = TorchEncoder(seed) if framework == "torch" else JaxEncoder(seed)

    def transform(shards):
        # Runs on a loader worker thread. The Ragged records (native resolution) are brought to
        # the Dense shape with the same resize_crop the Dense store was prepared with.
        sh = shards[0]
        ragged = np.stack([resize_crop(dtypes.from_dlpack(t), size) for t in sh["ragged"].to_tensors()])
        return np.from_dlpack(sh["index"]).copy(), sh["dense"], ragged

    with DenseStore(out / "dense") as ds, RaggedStore(out / "ragged") as rs, DenseStore(out / "index") as xs, \
            Allocator("cpu") as alloc:
        n = len(ds)
        streams = {"dense": [ds.bind(alloc)], "ragged": [rs.bind(alloc)], "index": [xs.bind(alloc)]}
        lat_d = np.zeros((n, LATENT), np.float32)
        lat_r = np.zeros((n, LATENT), np.float32)
        inputs_equal = True
        t0 = time.perf_counter()
        steps = math.ceil(n / batch)
        with Loader(streams, Sampler(n, batch, Sampler.Mode.SEQUENTIAL), transform=transform,
                    workers=workers, prefetch=2) as loader:
            for _ in range(steps):
                idx, dense, ragged = next(loader)
                xd, xr = enc.images(dense), enc.images(ragged)
                inputs_equal &= bool(np.array_equal(np.asarray(xd), np.asarray(xr)))
                lat_d[idx] = enc(xd)
                lat_r[idx] = enc(xr)
        secs = time.perf_counter() - t0
    np.save(out / f"latents_dense_{framework}.npy", lat_d)
    np.save(out / f"latents_ragged_{framework}.npy", lat_r)
    return {
        "framework": framework,
        "records": n,
        "latent": LATENT,
        "inputs_equal": inputs_equal,
        "max_abs_diff": float(np.abs(lat_d - lat_r).max()),
        "latent_norm_mean": float(np.linalg.norm(lat_d, axis=1).mean()),
        "seconds": round(secs, 3),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--framework", choices=["torch", "jax"], required=True)
    ap.add_argument("--images", type=Path, help="image directory (default: <corpora>/oxford-pet)")
    ap.add_argument("--limit", type=int, default=256, help="the first N images in file-name order")
    ap.add_argument("--files", help="comma-separated file names instead of --limit")
    ap.add_argument("--size", type=int, default=224, help="Dense side (Resize(size*256/224) + CenterCrop(size))")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, help="directory for the stores and latents (default: a temp dir)")
    args = ap.parse_args(argv)
    src = args.images or corpora_dir() / "oxford-pet"
    if not src.is_dir():
        print(f"data2latent: no image directory at {src} (set LOADERX_CORPORA or pass --images)", file=sys.stderr)
        return 2
    if args.files:
        files = [src / f for f in args.files.split(",")]
    else:
        files = sorted((p for p in src.iterdir() if p.suffix.lower() in (".jpg", ".jpeg")), key=lambda p: p.name.encode())
        files = files[: args.limit]

    def go(out: Path) -> dict:
        if not (out / "dense").exists():
            prepare(files, out, args.size)
        return run(out, args.framework, args.batch, args.size, args.seed, args.workers)

    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        res = go(args.out)
    else:
        with tempfile.TemporaryDirectory() as d:
            res = go(Path(d))
    print(json.dumps(res))
    ok = res["inputs_equal"] and res["max_abs_diff"] <= 1e-5
    print("dense and ragged latents agree" if ok else "dense and ragged latents DIFFER", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
