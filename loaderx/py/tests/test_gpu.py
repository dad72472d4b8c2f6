"""CUDA placement: what runs without a GPU (typed errors, device codes, the stream hand-off of a fake
producer, nothing probed at import, the certification script's CPU-only mode) and, where a CUDA
driver and torch CUDA are present, device reads (skipped with the reason otherwise)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import loaderx
from loaderx import Allocator, backend, errors
from loaderx.zrecord import DenseStore, DenseWriter, RaggedBatch, RaggedWriter

ROOT = Path(__file__).resolve().parents[3]


def _cuda_reason() -> str | None:
    """None when loaderx can open CUDA device 0, else why not."""
    try:
        Allocator("cuda", 0).close()
        return None
    except errors.UnsupportedDeviceError as e:
        return str(e)


NO_CUDA = _cuda_reason()
needs_gpu = pytest.mark.skipif(NO_CUDA is not None, reason=f"no CUDA device: {NO_CUDA}")
no_gpu_only = pytest.mark.skipif(NO_CUDA is None, reason="a CUDA device is present")


def test_import_probes_no_driver():
    code = "import loaderx, loaderx.backend; print(any('libcuda' in l for l in open('/proc/self/maps')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_backend_lists_cuda_placements():
    assert backend.DEVICES == ("cpu", "cuda_host", "cuda")
    assert backend.available() == backend.DEVICES


@no_gpu_only
@pytest.mark.parametrize("kind", ["cuda", "cuda_host", "gpu"])
def test_cuda_allocator_without_driver_names_what_is_missing(kind):
    with pytest.raises(errors.UnsupportedDeviceError) as ei:
        Allocator(kind, 0)
    msg = str(ei.value)
    assert "libcuda" in msg or "cuda` feature" in msg, msg
    assert type(ei.value) is errors.UnsupportedDeviceError


def test_cuda_allocator_bad_ids_and_kinds():
    with pytest.raises(errors.InvalidInputError, match="device_id must be >= 0"):
        Allocator("cuda", -1)
    with pytest.raises(errors.UnsupportedDeviceError, match="rocm"):
        Allocator("rocm", 0)
    with pytest.raises(errors.InvalidInputError, match="cuda_host"):
        Allocator("tpu", 0)


def test_cpu_tensor_device_codes_and_streams(tmp_path):
    x = np.arange(24, dtype=np.float32).reshape(6, 4)
    with DenseWriter(tmp_path / "s", np.float32, (4,), "raw") as w:
        w.append(x)
    with DenseStore(tmp_path / "s") as s, Allocator() as a:
        t = s.bind(a)[[1, 2]]
        assert t.__dlpack_device__() == (1, 0) and t.device == (1, 0)
        assert t.__dlpack__(stream=None, max_version=(1, 0)) is not None
        np.testing.assert_array_equal(np.from_dlpack(t), x[[1, 2]])
        assert t.__dlpack__(stream=-1) is not None
        for bad in (0, 1, 2, 12345):
            with pytest.raises(errors.UnsupportedDeviceError, match="not valid for a CPU tensor"):
                t.__dlpack__(stream=bad)
        with pytest.raises(errors.InvalidTypeError, match="stream must be None or an int"):
            t.__dlpack__(stream="s")
        with pytest.raises(errors.UnsupportedDeviceError, match=r"\(1, 0\)"):
            t.__dlpack__(dl_device=(2, 0))
        assert "device=cpu" in repr(t)


class FakeCudaProducer:
    """Reports kDLCUDA; records whether loaderx asked it for a capsule."""

    def __init__(self, dev_id: int = 0):
        self.dev_id = dev_id
        self.dlpack_calls: list[dict] = []

    def __dlpack_device__(self):
        return (2, self.dev_id)

    def __dlpack__(self, **kw):
        self.dlpack_calls.append(kw)
        raise AssertionError("loaderx must not ask for a device capsule it cannot copy")


@no_gpu_only
def test_device_append_from_fake_producer_is_a_clear_error(tmp_path):
    w = DenseWriter(tmp_path / "d", np.float32, (2,), "raw")
    p = FakeCudaProducer(1)
    with pytest.raises(errors.UnsupportedDeviceError) as ei:
        w.append(p)
    msg = str(ei.value)
    assert "CUDA device 1" in msg and "(2, 1)" in msg and "DenseWriter.append" in msg, msg
    assert "libcuda" in msg or "cuda` feature" in msg, msg
    assert p.dlpack_calls == []
    # Ragged: all three fields on one CUDA device reach the driver probe, which names what is missing.
    rw = RaggedWriter(tmp_path / "r", np.float32, 1, "raw")
    fields = [FakeCudaProducer(0) for _ in range(3)]
    with pytest.raises(errors.UnsupportedDeviceError) as ei:
        rw.append(RaggedBatch(*fields))
    msg = str(ei.value)
    assert "RaggedWriter.append" in msg and "CUDA device 0" in msg and "(2, 0)" in msg, msg
    assert "libcuda" in msg or "cuda` feature" in msg, msg
    assert all(f.dlpack_calls == [] for f in fields)
    assert len(w) == 0 and len(rw) == 0
    w.abort()
    rw.abort()


def test_ragged_fields_on_different_devices_are_refused_before_any_export(tmp_path):
    rw = RaggedWriter(tmp_path / "r", np.float32, 1, "raw")
    cu, shapes = np.array([0, 2], np.int32), np.array([[2]], np.uint64)
    for fields, where in (
        ([FakeCudaProducer(0), cu, shapes], "values on (2, 0), cu_seqlens on (1, 0), shapes on (1, 0)"),
        ([FakeCudaProducer(0), FakeCudaProducer(1), FakeCudaProducer(0)], "cu_seqlens on (2, 1)"),
        ([np.zeros(2, np.float32), cu, FakeCudaProducer(0)], "shapes on (2, 0)"),
    ):
        with pytest.raises(errors.UnsupportedDeviceError, match="different devices") as ei:
            rw.append(RaggedBatch(*fields))
        assert where in str(ei.value), str(ei.value)
        assert all(f.dlpack_calls == [] for f in fields if isinstance(f, FakeCudaProducer))
    assert len(rw) == 0
    rw.append(RaggedBatch(np.zeros(2, np.float32), cu, shapes))
    assert len(rw) == 1
    rw.abort()


@no_gpu_only
def test_device_scripts_without_a_gpu(tmp_path):
    """The GPU machine's scripts import and run here: the certification reports every check SKIP
    (exit 0), or exits 2 naming what is missing with --require-gpu; the loader table's CPU-only
    smoke rows (tiny data, one fresh process each) run end to end, every batch checked."""
    out = tmp_path / "out"
    cert = [sys.executable, str(ROOT / "scripts" / "certify_gpu.py"), "--out", str(out)]
    r = subprocess.run(cert, capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads((out / "certify_gpu.json").read_text())
    assert doc["status"] == "SKIPPED (no CUDA)"
    assert [c["status"] for c in doc["checks"]] == ["SKIP"] and "no CUDA" in doc["checks"][0]["detail"]
    assert (out / "certify_gpu.md").read_text().startswith("# loaderx CUDA certification")
    r = subprocess.run(cert + ["--require-gpu"], capture_output=True, text=True, timeout=240)
    assert r.returncode == 2 and "no usable CUDA device" in r.stdout, r.stdout + r.stderr

    pytest.importorskip("torch")
    table = [sys.executable, str(ROOT / "scripts" / "gpu_loader_table.py"), "--out", str(out), "--smoke",
             "--workers", "2"]
    r = subprocess.run(table, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads((out / "gpu_loader_table.json").read_text())
    rows = {(x["corpus"], x["kind"]): x for x in doc["rows"]}
    want = {("vision", "lx_cpu"), ("vision", "torch_pin"), ("tokens", "lx_cpu"), ("tokens", "torch_pin"),
            ("spdl", "pool-pageable"), ("spdl", "ring-pageable"), ("spdl", "lx_cpu")}
    assert set(rows) == want, sorted(rows)
    for key, row in rows.items():
        assert row["status"] == "OK", (key, row)
        assert row["checked"] > 0 and len(row["runs"]) == 1 and row["mean"] > 0, (key, row)
    assert doc["data"]["vision"]["shape"] == [3, 224, 224]
    md = (out / "gpu_loader_table.md").read_text()
    assert "### Dense vision" in md and "### Ragged tokens" in md and "137.09" in md
    r = subprocess.run(table[:-3] + ["--require-gpu"], capture_output=True, text=True, timeout=240)
    assert r.returncode == 2 and "no usable CUDA device" in r.stdout, r.stdout + r.stderr


@needs_gpu
def test_device_read_matches_on_gpu(tmp_path):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA")
    x = np.random.default_rng(0).standard_normal((64, 8)).astype(np.float32)
    with DenseWriter(tmp_path / "s", np.float32, (8,), "raw") as w:
        w.append(x)
    idx = [3, 1, 60]
    with DenseStore(tmp_path / "s") as s:
        t = s.bind(Allocator("cuda", 0))[idx]
        assert t.__dlpack_device__() == (2, 0)
        g = torch.from_dlpack(t)
        assert g.is_cuda and torch.equal(g.cpu(), torch.from_numpy(x[idx]))
        h = torch.from_dlpack(s.bind(Allocator("cuda_host", 0))[idx])
        assert h.is_pinned() and torch.equal(h, torch.from_numpy(x[idx]))
