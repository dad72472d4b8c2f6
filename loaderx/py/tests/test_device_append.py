"""Device append (`RaggedWriter.append` / `DenseWriter.append` of CUDA tensors) without a GPU.

Each test runs a fresh Python process that loads the stand-in driver of fake_libcuda.c instead of
libcuda (see _fake_cuda.py): "device" memory is host memory and copies are memcpy, so the binding's
whole device-append path runs (the producer's `__dlpack__(stream=)` call, the field checks, the
copies of whole-record runs through pooled pinned staging, the appends) and the driver's counters
show which copies were made. Producers are `FakeCudaTensor`s (NumPy arrays whose capsules say
kDLCUDA) and, for a loaderx device batch, `Allocator("cuda", 0)` on the stand-in driver. What
only a GPU can show (stream ordering, real device memory) is scripts/certify_gpu.py's part.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from _fake_cuda import DIR_ENV, build

HERE = Path(__file__).resolve().parent
MIB = 1 << 20
# gpu.rs APPEND_CHUNK_BYTES: the most values bytes one device-to-host copy of an append moves.
CHUNK = 64 * MIB

PRELUDE = """
import gc
import numpy as np
import loaderx
import loaderx._ragged
from loaderx import Allocator, errors
from loaderx.zrecord import DenseStore, DenseWriter, RaggedBatch, RaggedStore, RaggedWriter
from _fake_cuda import FakeCudaTensor, dtoh_sizes, fail_dtoh_at, stat

MIB = 1 << 20
CHUNK = 64 * MIB


def read_ragged(path):
    with RaggedStore(path) as s, Allocator() as a:
        b = s.bind(a)[:]
        out = (np.from_dlpack(b.values).copy(), np.from_dlpack(b.cu_seqlens).copy(), np.from_dlpack(b.shapes).copy())
        del b
    return out


def packed(records, dtype):
    values, cu, shapes = loaderx._ragged.from_records(records, dtype)
    return values, cu, shapes


def fake_fields(values, cu, shapes, dev=0):
    return FakeCudaTensor(values, dev), FakeCudaTensor(cu, dev), FakeCudaTensor(shapes, dev)
"""


@pytest.fixture(scope="module")
def fake_dir(tmp_path_factory):
    d = build(tmp_path_factory.mktemp("fake-cuda"))
    if d is None:
        pytest.skip("no C compiler to build the stand-in CUDA driver")
    return d


def run(fake_dir: Path, tmp_path: Path, code: str) -> str:
    """Runs PRELUDE + `code` in a fresh process on the stand-in driver; its assertions fail the test."""
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = f"{fake_dir}:{env.get('LD_LIBRARY_PATH', '')}"
    env[DIR_ENV] = str(fake_dir)
    env["PYTHONPATH"] = f"{HERE}:{env.get('PYTHONPATH', '')}"
    src = PRELUDE + textwrap.dedent(code)
    r = subprocess.run([sys.executable, "-c", src], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    return r.stdout


def test_ragged_device_append_round_trips_and_passes_the_append_stream(fake_dir, tmp_path):
    run(fake_dir, tmp_path, """
        rng = np.random.default_rng(0)
        recs = [rng.integers(-1000, 1000, size=int(n), dtype=np.int32) for n in rng.integers(1, 50, 40)]
        values, cu, shapes = packed(recs, np.int32)
        fv, fc, fs = fake_fields(values, cu, shapes)
        with RaggedWriter("r1", np.int32, 1, "zstd") as w:
            w.append(RaggedBatch(fv, fc, fs))
            assert len(w) == 40
        assert stat("streams") == 1, "one append stream for device 0"
        s = stat("last_stream")
        assert s > 2, "a real stream handle, not a DLPack special value"
        for f in (fv, fc, fs):
            assert f.calls == [{"stream": s, "max_version": (1, 0)}], f.calls
        got = read_ragged("r1")
        np.testing.assert_array_equal(got[0], values)
        np.testing.assert_array_equal(got[1], cu)
        np.testing.assert_array_equal(got[2], shapes)
        # cu_seqlens, shapes, then the values in one run (all records fit in one chunk).
        assert dtoh_sizes() == [cu.nbytes, shapes.nbytes, values.nbytes], dtoh_sizes()

        # Rank-2 float32 records, appended after host ones into the same store.
        recs2 = [rng.standard_normal((int(a), int(b))).astype(np.float32) for a, b in rng.integers(1, 9, (25, 2))]
        host = packed(recs2[:5], np.float32)
        dev = packed(recs2[5:], np.float32)
        with RaggedWriter("r2", np.float32, 2, "raw") as w:
            w.append(RaggedBatch(*host))
            w.append(RaggedBatch(*fake_fields(*dev)))
            assert len(w) == 25
        want = packed(recs2, np.float32)
        got = read_ragged("r2")
        for g, x in zip(got, want):
            np.testing.assert_array_equal(g, x)
    """)


def test_ragged_device_append_copies_runs_of_whole_records_through_bounded_staging(fake_dir, tmp_path):
    run(fake_dir, tmp_path, """
        rec = 24 * MIB
        recs = [np.full(rec, k + 1, np.uint8) for k in range(3)] + [np.arange(7, dtype=np.uint8)]
        values, cu, shapes = packed(recs, np.uint8)
        fail_dtoh_at(-1)
        before = stat("dtoh_calls")
        with RaggedWriter("big", np.uint8, 1, "raw") as w:
            w.append(RaggedBatch(*fake_fields(values, cu, shapes)))
        sizes = dtoh_sizes(before)
        # Offsets and shapes whole; then runs of whole records of <= 64 MiB: 2 x 24 MiB, 24 MiB + 7.
        assert sizes == [cu.nbytes, shapes.nbytes, 2 * rec, rec + 7], sizes
        assert all(s <= CHUNK for s in sizes)
        # Pinned staging: one live run plus the pool's idle bound, never the whole input at once
        # beyond that bound.
        peak = stat("pinned_peak")
        assert 2 * rec <= peak <= 2 * CHUNK, peak
        got = read_ragged("big")
        np.testing.assert_array_equal(got[0], values)
        np.testing.assert_array_equal(got[1], cu)

        # A copy failing after the first run: a typed error, the first run stays appended.
        w = RaggedWriter("partial", np.uint8, 1, "raw")
        fail_dtoh_at(3)  # cu_seqlens, shapes, run 1, then run 2 fails
        try:
            w.append(RaggedBatch(*fake_fields(values, cu, shapes)))
            raise AssertionError("the failing copy was not reported")
        except errors.AllocationError as e:
            assert "cuMemcpyDtoHAsync" in str(e), e
        fail_dtoh_at(-1)
        assert len(w) == 2, len(w)
        w.abort()
    """)


def test_ragged_device_refusals_come_before_any_byte(fake_dir, tmp_path):
    run(fake_dir, tmp_path, """
        recs = [np.arange(1, n + 1, dtype=np.int32) for n in (3, 1, 4, 1, 5)]
        values, cu, shapes = packed(recs, np.int32)
        w = RaggedWriter("r", np.int32, 1, "raw")

        def refused(batch, cls, text, copies=0):
            before = stat("dtoh_calls")
            try:
                w.append(batch)
            except cls as e:
                assert text in str(e), (text, str(e))
                assert type(e) is cls, type(e)
            else:
                raise AssertionError(f"accepted: {text}")
            assert len(w) == 0
            assert stat("dtoh_calls") - before == copies, (text, dtoh_sizes(before))

        # Fields on different devices: refused before any export.
        fv, fc, fs = fake_fields(values, cu, shapes)
        fc.dev = 1
        refused(RaggedBatch(fv, fc, fs), errors.UnsupportedDeviceError, "different devices")
        refused(RaggedBatch(fv, cu, fs), errors.UnsupportedDeviceError, "cu_seqlens on (1, 0)")
        assert fv.calls == fc.calls == fs.calls == [], "no field was exported"
        # Misaligned values (the data pointer one byte off an int32 boundary).
        refused(RaggedBatch(FakeCudaTensor(values, shift=1), *fake_fields(values, cu, shapes)[1:]),
                errors.InvalidInputError, "misaligned")
        # Non-contiguous offsets, wrong dtypes and ranks: the host path's checks and messages.
        strided = np.repeat(cu, 2)[::2]
        refused(RaggedBatch(fv, FakeCudaTensor(strided), fs), errors.InvalidInputError, "cu_seqlens is not C-contiguous")
        refused(RaggedBatch(FakeCudaTensor(values.astype(np.int64)), FakeCudaTensor(cu), fs), errors.DTypeError,
                "values: expected dtype int32")
        refused(RaggedBatch(*fake_fields(values, cu.astype(np.int64), shapes)), errors.DTypeError,
                "cu_seqlens must be int32")
        refused(RaggedBatch(*fake_fields(values, cu, shapes.astype(np.int64))), errors.DTypeError,
                "shapes must be uint64")
        refused(RaggedBatch(*fake_fields(values.reshape(1, -1), cu, shapes)), errors.InvalidInputError,
                "values must be 1-D")
        # Bad offsets: read (two small copies) and refused before any value is copied or written.
        bad = cu.copy()
        bad[2] = bad[1]  # record 1 empty
        refused(RaggedBatch(*fake_fields(values, bad, shapes)), errors.InvalidInputError, "strictly increase",
                copies=2)
        refused(RaggedBatch(*fake_fields(values[:-1], cu, shapes)), errors.InvalidInputError,
                "cu_seqlens ends at 14 but values hold 13", copies=2)
        wrong = shapes.copy()
        wrong[0, 0] = 2
        refused(RaggedBatch(*fake_fields(values, cu, wrong)), errors.InvalidInputError, "record 0: shape [2]",
                copies=2)
        # The writer is intact: a valid device batch still goes in.
        w.append(RaggedBatch(*fake_fields(values, cu, shapes)))
        assert len(w) == 5
        w.close()
        got = read_ragged("r")
        np.testing.assert_array_equal(got[0], values)
    """)


def test_dense_device_append_round_trips_in_record_chunks(fake_dir, tmp_path):
    run(fake_dir, tmp_path, """
        x = np.random.default_rng(1).standard_normal((50, 3)).astype(np.float32)
        t = FakeCudaTensor(x)
        with DenseWriter("d", np.float32, (3,), "zstd") as w:
            w.append(t)
        assert t.calls == [{"stream": stat("last_stream"), "max_version": (1, 0)}], t.calls
        with DenseStore("d") as s, Allocator() as a:
            np.testing.assert_array_equal(np.from_dlpack(s.bind(a)[:]), x)

        rec = 4 * MIB  # 17 records of 4 MiB: a 64 MiB chunk of 16 records, then one
        big = np.broadcast_to(np.arange(17, dtype=np.float32)[:, None], (17, rec // 4)).copy()
        before = stat("dtoh_calls")
        with DenseWriter("big", np.float32, (rec // 4,), "raw") as w:
            w.append(FakeCudaTensor(big))
        assert dtoh_sizes(before) == [16 * rec, rec], dtoh_sizes(before)
        with DenseStore("big") as s, Allocator() as a:
            got = np.from_dlpack(s.bind(a)[[0, 15, 16]])
            np.testing.assert_array_equal(got, big[[0, 15, 16]])
            del got

        # Refusals before any copy: dtype, shape, layout.
        w = DenseWriter("bad", np.float32, (3,), "raw")
        before = stat("dtoh_calls")
        for arr, cls in ((x.astype(np.float64), errors.DTypeError), (x[:, :2].copy(), errors.InvalidInputError),
                         (np.asfortranarray(x), errors.InvalidInputError), (x[::2], errors.InvalidInputError)):
            try:
                w.append(FakeCudaTensor(arr))
            except cls:
                pass
            else:
                raise AssertionError(f"accepted {arr.shape} {arr.dtype} {arr.strides}")
        assert stat("dtoh_calls") == before and len(w) == 0
        w.abort()
    """)


def test_loaderx_device_batches_append_and_nothing_stays_allocated(fake_dir, tmp_path):
    run(fake_dir, tmp_path, """
        rng = np.random.default_rng(2)
        recs = [rng.integers(0, 50_000, size=int(n), dtype=np.int32) for n in rng.integers(1, 300, 64)]
        with RaggedWriter("src", np.int32, 1, "raw") as w:
            w.append(RaggedBatch.from_records(recs))
        x = rng.standard_normal((32, 5)).astype(np.float32)
        with DenseWriter("dsrc", np.float32, (5,), "raw") as w:
            w.append(x)
        idx = [5, 0, 17, 3, 3, 63]
        a = Allocator("cuda", 0)
        waits = stat("wait_calls")
        with RaggedStore("src") as s, DenseStore("dsrc") as ds:
            b = s.bind(a)[idx]
            assert b.values.__dlpack_device__() == (2, 0)
            assert stat("device_live") > 0, "the batch lives in (stand-in) device memory"
            with RaggedWriter("copy", np.int32, 1, "raw") as w:
                w.append(b)
                w.append(b)
            didx = [i % 32 for i in idx]
            t = ds.bind(a)[didx]
            assert t.__dlpack_device__() == (2, 0)
            with DenseWriter("dcopy", np.float32, (5,), "raw") as w:
                w.append(t)
            del b, t
        assert stat("wait_calls") > waits, "the append stream waited on the uploads' events"
        want = [recs[i] for i in idx] * 2
        got = read_ragged("copy")
        np.testing.assert_array_equal(got[0], np.concatenate(want))
        np.testing.assert_array_equal(got[2][:, 0], [len(r) for r in want])
        with DenseStore("dcopy") as s, Allocator() as h:
            np.testing.assert_array_equal(np.from_dlpack(s.bind(h)[:]), x[[i % 32 for i in idx]])
        a.close()
        gc.collect()
        assert stat("device_live") == 0, f"{stat('device_live')} device bytes still allocated after close"

        # Pinned host batches are exported as the CPU (torch refuses kDLCUDAHost): NumPy and torch
        # import them without a copy; the repr still names the placement.
        import torch

        with DenseStore("dsrc") as ds, Allocator("cuda_host", 0) as hp:
            t = ds.bind(hp)[didx]
            assert t.__dlpack_device__() == (1, 0) and t.device == (1, 0), t.__dlpack_device__()
            assert "device=cuda_host:0" in repr(t), repr(t)
            np.testing.assert_array_equal(np.from_dlpack(t), x[didx])
            g = torch.from_dlpack(t)
            assert g.device.type == "cpu" and torch.equal(g, torch.from_numpy(x[didx]))
            assert t.__dlpack__(stream=5) is not None, "a pinned tensor accepts any stream"
            del g, t
    """)
