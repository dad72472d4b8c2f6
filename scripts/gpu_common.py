"""Shared parts of the GPU scripts (certify_gpu.py, gpu_loader_table.py): receipts, the check
runner with its progress lines and time budget, the seeded data of the two corpora's shapes, and
report writing. Imported from the scripts' own folder; needs NumPy and loaderx only."""

from __future__ import annotations

import ctypes
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

import numpy as np

# Statuses: PASS and FAIL; SKIP (not applicable here, with the reason); LIMIT (a framework's own
# limitation, e.g. a dtype its DLPack import refuses; the bytes were still checked another way);
# NOT RUN (the time budget ran out first). FAIL and NOT RUN make the scripts exit non-zero.
BAD = ("FAIL", "NOT RUN")


class Skip(Exception):
    """The check does not apply here (reason in the message)."""


class Limit(Exception):
    """A framework limitation met by a check whose bytes were otherwise verified."""


def log(msg: str) -> None:
    print(msg, flush=True)


class Checks:
    """Runs named checks one after another: each records PASS / FAIL / SKIP / LIMIT with a detail,
    prints one progress line, and never stops the others. Past `deadline` (time.monotonic()) a
    check is recorded NOT RUN without running."""

    def __init__(self, tag: str, deadline: float):
        self.tag = tag
        self.deadline = deadline
        self.results: list[dict] = []

    def run(self, name: str, fn: Callable[[], Any]) -> dict:
        k = len(self.results) + 1
        t0 = time.monotonic()
        rec: dict[str, Any]
        if t0 > self.deadline:
            rec = {"name": name, "status": "NOT RUN", "detail": "time budget spent", "seconds": 0.0}
        else:
            try:
                rec = {"name": name, "status": "PASS", "detail": str(fn() or "")}
            except Skip as e:
                rec = {"name": name, "status": "SKIP", "detail": str(e)}
            except Limit as e:
                rec = {"name": name, "status": "LIMIT", "detail": str(e)}
            except Exception as e:  # noqa: BLE001 - every failure is recorded; the rest go on
                rec = {"name": name, "status": "FAIL",
                       "detail": f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=6)}"}
            rec["seconds"] = round(time.monotonic() - t0, 3)
        self.results.append(rec)
        first = rec["detail"].splitlines()[0][:160] if rec["detail"] else ""
        log(f"[{self.tag} {k}] {rec['status']:<7} {name} ({rec['seconds']:.1f} s) {first}")
        return rec


def failed(records: list[dict]) -> bool:
    return any(r["status"] in BAD for r in records)


def mean_sd(xs: list[float]) -> tuple[float, float]:
    return statistics.fmean(xs), (statistics.stdev(xs) if len(xs) > 1 else float("nan"))


# ------------------------------------------------------------------------------------- receipts
def _driver_version() -> str:
    try:
        lib = ctypes.CDLL("libcuda.so.1")
        v = ctypes.c_int(0)
        if lib.cuDriverGetVersion(ctypes.byref(v)) == 0:
            return f"{v.value // 1000}.{(v.value % 1000) // 10}"
    except OSError as e:
        return f"unavailable ({e})"
    return "unknown"


def commit() -> str:
    if os.environ.get("LOADERX_COMMIT"):
        return os.environ["LOADERX_COMMIT"]
    try:
        here = Path(__file__).resolve().parent
        out = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=10).stdout.strip()
        return out or "unknown (no git checkout; set LOADERX_COMMIT)"
    except Exception:  # noqa: BLE001
        return "unknown (no git; set LOADERX_COMMIT)"


def receipts(frameworks: bool = True) -> dict:
    """What ran where: GPU, driver, CUDA, Python packages, CPU, commit."""
    r: dict[str, Any] = {"python": sys.version.split()[0], "platform": platform.platform(),
                         "numpy": np.__version__, "commit": commit(), "cpus": os.cpu_count(),
                         "cuda_driver_api": _driver_version()}
    try:
        with open("/proc/cpuinfo") as f:
            r["cpu"] = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "unknown")
    except OSError:
        r["cpu"] = "unknown"
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,pci.bus_id",
                              "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
        r["nvidia_smi"] = out.stdout.strip() or out.stderr.strip()
    except Exception as e:  # noqa: BLE001
        r["nvidia_smi"] = f"unavailable ({type(e).__name__})"
    try:
        from importlib.metadata import version

        r["loaderx"] = version("loaderx")
    except Exception as e:  # noqa: BLE001
        r["loaderx"] = f"unknown ({type(e).__name__})"
    if frameworks:
        for mod in ("torch", "jax", "jaxlib", "ml_dtypes"):
            try:
                m = __import__(mod)
                r[mod] = m.__version__
                if mod == "torch":
                    r["torch_cuda"] = str(m.version.cuda)
                    if m.cuda.is_available():
                        r["torch_device"] = m.cuda.get_device_name(0)
            except Exception as e:  # noqa: BLE001 - a receipt records what is missing
                r[mod] = f"absent ({type(e).__name__}: {e})"
    return r


def loaderx_cuda_reason() -> str | None:
    """None when loaderx can open CUDA device 0, else why not."""
    import loaderx

    try:
        loaderx.Allocator("cuda", 0).close()
        return None
    except loaderx.UnsupportedDeviceError as e:
        return f"loaderx: {e}"


# ----------------------------------------------------------------------------------------- data
VISION_SHAPE = (3, 224, 224)  # the harness's dense-vision records (harness/src/corpus.rs), uint8
BATCH = 256  # the harness's loader-table batch (harness/src/loader_arms.rs)
# Ragged-token lengths: WikiText-103 train has p10 28 / median 129 / mean 138.8 / p90 254 tokens
# (docs/benchmarks.md); a gamma(2, 67.5) clipped to [1, 2048] gives about 36 / 113 / 135 / 262.
TOKEN_SHAPE_K, TOKEN_SCALE = 2.0, 67.5


def vision_records(n: int, seed: int = 0) -> np.ndarray:
    """`n` seeded uint8 images of VISION_SHAPE; the first 8 bytes of record i hold i (uint64 LE),
    so a batch can be checked on the device from its own bytes."""
    x = np.random.default_rng(seed).integers(0, 256, size=(n, int(np.prod(VISION_SHAPE))), dtype=np.uint8)
    x[:, :8] = np.arange(n, dtype="<u8").view(np.uint8).reshape(n, 8)
    return x.reshape(n, *VISION_SHAPE)


def token_records(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """`n` seeded int32 token records of WikiText-like lengths, packed: (tokens, starts) with
    record i = tokens[starts[i]:starts[i + 1]]; its first token is i (the rest in [0, 50257))."""
    rng = np.random.default_rng(seed)
    lens = np.clip(np.rint(rng.gamma(TOKEN_SHAPE_K, TOKEN_SCALE, n)), 1, 2048).astype(np.int64)
    starts = np.zeros(n + 1, np.int64)
    np.cumsum(lens, out=starts[1:])
    tokens = rng.integers(0, 50257, size=int(starts[-1]), dtype=np.int32)
    tokens[starts[:-1]] = np.arange(n, dtype=np.int32)
    return tokens, starts


def length_stats(starts: np.ndarray) -> dict:
    lens = np.diff(starts)
    q = np.percentile(lens, [10, 50, 90], method="lower")
    return {"p10": int(q[0]), "median": int(q[1]), "mean": round(float(lens.mean()), 1), "p90": int(q[2]),
            "max": int(lens.max())}


# --------------------------------------------------------------------------------------- report
def write_json(path: Path, doc: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2, default=str) + "\n")


def checks_md(records: list[dict]) -> list[str]:
    lines = ["| check | status | s | detail |", "|---|---|---:|---|"]
    for c in records:
        first = c["detail"].splitlines()[0] if c["detail"] else ""
        lines.append(f"| {c['name']} | {c['status']} | {c.get('seconds', 0):.1f} | {first.replace('|', '/')} |")
    return lines
