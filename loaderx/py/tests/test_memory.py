"""The exported-memory contract (issue 12, section 3), one test per hazard.

Exports are writable and may alias one allocation; Rust reads exported (and imported) memory only
through raw copies, so concurrent writes can tear what it copies but never break an append, and the
sampler's output buffer is owned by Rust, so NumPy cannot move it.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from loaderx import InvalidInputError, dtypes
from loaderx.sampler import Sampler
from loaderx.zrecord import DenseStore, DenseWriter, RaggedBatch, RaggedStore, RaggedWriter


def _dense(tmp_path, alloc, n=64, item=(256,)):
    data = np.arange(n * int(np.prod(item)), dtype=np.int32).reshape((n, *item))
    with DenseWriter(tmp_path / "src", np.int32, item, "raw") as w:
        w.append(data)
    return DenseStore(tmp_path / "src").bind(alloc), data


def _ragged(tmp_path, alloc):
    recs = [np.full((k + 1, 2), k, dtype=np.float32) for k in range(6)]
    with RaggedWriter(tmp_path / "rsrc", np.float32, 2, "raw") as w:
        w.append(RaggedBatch.from_records(recs))
    return RaggedStore(tmp_path / "rsrc").bind(alloc), recs


class _Writer(threading.Thread):
    """Writes `arr` in a loop (NumPy releases the GIL for large copies) until stopped; `started`
    is set after the first write, so the racing phase has certainly begun."""

    def __init__(self, arr):
        super().__init__(daemon=True)
        self.arr, self.stop, self.started = arr, threading.Event(), threading.Event()
        self.writes = 0

    def run(self):
        a, b = np.full_like(self.arr, 7), np.full_like(self.arr, -7)
        while not self.stop.is_set():
            np.copyto(self.arr, a if self.writes % 2 else b)
            self.writes += 1
            self.started.set()


def test_writes_through_an_export_are_visible_in_every_alias(tmp_path, alloc):
    view, data = _dense(tmp_path, alloc)
    t = view[[3, 4]]
    a = np.from_dlpack(t)
    again = np.from_dlpack(t)
    as_float = np.from_dlpack(t.bitcast(dtypes.float32))
    assert a.flags.writeable
    a[0, 0] = 0x3F800000  # the bits of 1.0f
    assert again[0, 0] == 0x3F800000 and as_float[0, 0] == 1.0
    # The store itself is unchanged: the batch is the caller's memory.
    assert np.from_dlpack(view[3])[0] == data[3, 0]
    # copy=True is the one export that does not alias.
    c = np.from_dlpack(t, copy=True)
    a[0, 1] = 5
    assert c[0, 1] != 5


def test_ragged_fields_and_to_tensors_alias_one_allocation(tmp_path, alloc):
    view, recs = _ragged(tmp_path, alloc)
    rb = view[[2, 3]]
    values = np.from_dlpack(rb.values)
    first = np.from_dlpack(rb.to_tensors()[0])
    assert first.shape == recs[2].shape
    values[0] = 42.0
    assert first[0, 0] == 42.0 and np.from_dlpack(rb.values)[0] == 42.0


def test_append_copies_an_exported_batch_once(tmp_path, alloc):
    view, data = _dense(tmp_path, alloc)
    t = view[[1, 2]]
    a = np.from_dlpack(t)
    a[:] = 9  # a write before append is what gets stored
    with DenseWriter(tmp_path / "out", np.int32, (256,), "zstd") as w:
        w.append(t)
        a[:] = 11  # a write after append changes nothing stored
    got = np.from_dlpack(DenseStore(tmp_path / "out").bind(alloc)[[0, 1]])
    assert (got == 9).all()


def test_append_while_another_thread_writes_the_exported_batch(tmp_path, alloc):
    view, _ = _dense(tmp_path, alloc, n=256, item=(1024,))
    t = view[list(range(256))]
    writer = _Writer(np.from_dlpack(t))
    writer.start()
    assert writer.started.wait(30)
    try:
        with DenseWriter(tmp_path / "out", np.int32, (1024,), "zstd", data_shards=3) as w:
            for _ in range(8):
                w.append(t)  # native tensor, read with the GIL released
                w.append(t.bitcast(dtypes.float32).bitcast(dtypes.int32))
                w.append(np.from_dlpack(t))  # the same bytes through a foreign import
    finally:
        writer.stop.set()
        writer.join(30)
    s = DenseStore(tmp_path / "out")
    assert len(s) == 24 * 256
    s.verify()  # every stored checksum matches: the encoder only saw Rust's private copy


def test_ragged_append_while_another_thread_writes_values(tmp_path, alloc):
    values = np.zeros(1 << 20, dtype=np.float32)
    cu = np.array([0, 1 << 19, 1 << 20], dtype=np.int32)
    shapes = np.array([[1 << 19], [1 << 19]], dtype=np.uint64)
    writer = _Writer(values)
    writer.start()
    assert writer.started.wait(30)
    try:
        with RaggedWriter(tmp_path / "out", np.float32, 1, "zstd") as w:
            for _ in range(8):
                w.append(RaggedBatch(values, cu, shapes))
    finally:
        writer.stop.set()
        writer.join(30)
    s = RaggedStore(tmp_path / "out")
    assert len(s) == 16
    s.verify()


def test_offsets_written_through_an_export_are_validated_at_append(tmp_path, alloc):
    view, _ = _ragged(tmp_path, alloc)
    rb = view[[1, 2, 3]]
    cu = np.from_dlpack(rb.cu_seqlens)
    cu[2] = cu[1]  # an empty record: the append must reject it, from its own copy
    with RaggedWriter(tmp_path / "out", np.float32, 2, "raw") as w:
        with pytest.raises(InvalidInputError):
            w.append(rb)
        assert len(w) == 0


def test_sampler_buffer_survives_resize(tmp_path):
    s = Sampler(1000, 8, Sampler.Mode.IID, seed=3)
    ref = Sampler(1000, 8, Sampler.Mode.IID, seed=3)
    out = s.next()
    assert (out == ref.next()).all()
    # NumPy cannot move memory it does not own: resize refuses, whatever refcheck says.
    with pytest.raises(ValueError):
        out.resize(1 << 20, refcheck=False)
    with pytest.raises(ValueError):
        np.ndarray.resize(out, 0, refcheck=False)
    for _ in range(5):
        got = s.next()
        assert got is out and got.shape == (8,) and not got.flags.writeable
        assert (got == ref.next()).all()


def test_to_tensors_rechecks_fields_written_through_an_export(tmp_path, alloc):
    view, recs = _ragged(tmp_path, alloc)
    rb = view[[1, 2]]
    cu = np.from_dlpack(rb.cu_seqlens)
    cu[2] = 1 << 30  # past the end of the values: no tensor may point there
    with pytest.raises(InvalidInputError) as ei:
        rb.to_tensors()
    assert type(ei.value) is InvalidInputError
    cu[2] = cu[1] + recs[2].size  # restored: the batch works again
    np.testing.assert_array_equal(np.from_dlpack(rb.to_tensors()[1]), recs[2])
