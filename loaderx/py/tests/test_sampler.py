"""Sampler modes from Python: the block shuffle (``mode="block"``) against a naive oracle (an epoch
materialised, sorted and compared with ``range(n)``; windows made of whole blocks), seek against
replay, defaults, typed argument errors, and a loader resumed from a block sampler's state."""

import json

import numpy as np
import pytest

import loaderx
from loaderx import Allocator, Loader, dtypes
from loaderx.sampler import Sampler, block_buffer_blocks
from loaderx.zrecord import DenseStore, DenseWriter


def flat(sampler, positions, batch):
    """The first ``positions`` indices of the sampler's stream, batches concatenated."""
    steps = -(-positions // batch)
    return np.concatenate([sampler.next().copy() for _ in range(steps)])[:positions]


def check_epoch(ids, n, block, window):
    assert sorted(ids.tolist()) == list(range(n)), "not a permutation of range(n)"
    span = block * window
    for start in range(0, n, span):
        win = ids[start : start + span]
        touched = set((win // block).tolist())
        assert len(touched) <= window
        whole = sum(min(block, n - b * block) for b in touched)
        assert whole == len(win), f"window at {start} splits a block"


@pytest.mark.parametrize("n,batch,block,window", [(1003, 17, 10, 4), (1000, 8, 10, 3), (9, 4, 10, 2), (257, 16, 16, 1000)])
def test_block_epochs_hold_every_record_once_in_whole_blocks(n, batch, block, window):
    s = Sampler(n, batch, "block", seed=7, block=block, window=window)
    ids = flat(s, 3 * n, batch)
    epochs = [ids[k * n : (k + 1) * n] for k in range(3)]
    for e in epochs:
        check_epoch(e, n, block, window)
    if n > 50:
        assert not np.array_equal(epochs[0], epochs[1])


def test_block_names_and_enum_are_the_same_mode():
    a = Sampler(5000, 64, "block", seed=3)
    b = Sampler(5000, 64, Sampler.Mode.BLOCK, seed=3)
    c = Sampler(5000, 64, "BLOCK", seed=3, block=256, window=64)
    for _ in range(100):
        x, y, z = a.next().copy(), b.next().copy(), c.next().copy()
        np.testing.assert_array_equal(x, y)
        np.testing.assert_array_equal(x, z)
    assert "Block { block: 256, window: 64 }" in repr(a)
    # record_bytes sizes the shape; explicit block / window override it.
    assert "Block { block: 10, window: 65 }" in repr(Sampler(5000, 64, "block", record_bytes=100 << 10))
    assert "Block { block: 10, window: 2 }" in repr(Sampler(5000, 64, "block", record_bytes=100 << 10, window=2))
    assert "Block { block: 256, window: 1024 }" in repr(Sampler(5000, 64, "block", record_bytes=8))
    # The other modes by name.
    np.testing.assert_array_equal(Sampler(10, 4, "sequential").next(), [0, 1, 2, 3])
    np.testing.assert_array_equal(Sampler(99, 4, "iid", seed=1).next(), Sampler(99, 4, Sampler.Mode.IID, seed=1).next())


def test_block_seek_equals_replay():
    run = Sampler(997, 13, "block", seed=42, block=10, window=4)
    full = [run.next().copy() for _ in range(300)]
    for step in [0, 1, 76, 77, 299]:
        s = Sampler(997, 13, "block", seed=42, block=10, window=4)
        s.seek(step)
        for k in range(step, 300):
            np.testing.assert_array_equal(s.next(), full[k])


def test_block_arguments_are_checked_with_typed_errors():
    with pytest.raises(loaderx.InvalidInputError, match="block >= 1"):
        Sampler(100, 4, "block", block=0)
    with pytest.raises(loaderx.InvalidInputError, match="window >= 1"):
        Sampler(100, 4, "block", window=0)
    with pytest.raises(loaderx.InvalidInputError, match="overflows"):
        Sampler(100, 4, "block", block=1 << 40, window=1 << 30)
    with pytest.raises(loaderx.InvalidInputError, match="mode \"block\" only"):
        Sampler(100, 4, Sampler.Mode.IID, block=8)
    with pytest.raises(loaderx.InvalidInputError, match="mode \"block\" only"):
        Sampler(100, 4, "cyclic", record_bytes=8)
    with pytest.raises(loaderx.InvalidInputError, match="not one of"):
        Sampler(100, 4, "shuffle")
    with pytest.raises(loaderx.InvalidTypeError):
        Sampler(100, 4, 3)
    with pytest.raises(OverflowError):
        Sampler(100, 4, "block", block=-1)


N = 600
B = 24


@pytest.fixture
def streams(tmp_path):
    with DenseWriter(tmp_path / "id", dtypes.int64, (), "raw") as w:
        w.append(np.arange(N, dtype=np.int64))
    store = DenseStore(tmp_path / "id")
    alloc = Allocator("cpu", pool_size=1 << 20)
    yield {"id": [store.bind(alloc)]}
    store.close()
    alloc.close()


def ids_of(shards):
    return np.concatenate([np.from_dlpack(s["id"]) for s in shards])


@pytest.mark.parametrize("workers", [0, 2])
def test_a_loader_on_a_block_sampler_resumes_exactly(streams, workers):
    mode = dict(block=8, window=5)
    with Loader(streams, Sampler(N, B, "block", seed=1, **mode), workers=workers, ordered=True) as loader:
        full = [ids_of(next(loader)).copy() for _ in range(60)]
    check_epoch(np.concatenate(full)[:N], N, 8, 5)
    with Loader(streams, Sampler(N, B, "block", seed=1, **mode), workers=workers, ordered=True) as loader:
        for k in range(17):
            np.testing.assert_array_equal(ids_of(next(loader)), full[k])
        state = json.loads(json.dumps(loader.state_dict()))
    with Loader(streams, Sampler(N, B, "block", seed=1, **mode), workers=workers, ordered=True) as loader:
        loader.load_state_dict(state)
        for k in range(17, 60):
            np.testing.assert_array_equal(ids_of(next(loader)), full[k])
    # Another block shape is another order: its state does not load.
    with Loader(streams, Sampler(N, B, "block", seed=1, block=8, window=6), workers=workers, ordered=True) as loader:
        with pytest.raises(loaderx.InvalidInputError, match="mode"):
            loader.load_state_dict(state)


def test_a_block_loader_reads_through_a_bounded_block_buffer(tmp_path):
    with DenseWriter(tmp_path / "id", dtypes.int64, (), "raw") as w:
        w.append(np.arange(N, dtype=np.int64))
    store = DenseStore(tmp_path / "id")
    assert store.block_buffer_stats is None
    view = store.bind(Allocator("cpu"))
    epoch = -(-N // B)
    with Loader({"id": [view]}, Sampler(N, B, "block", seed=4, block=8, window=5), workers=2, ordered=True) as loader:
        got = np.concatenate([ids_of(next(loader)).copy() for _ in range(epoch)])[:N]
    check_epoch(got, N, 8, 5)
    # The loader buffered the store (its views share it): the window, the blocks a batch spans,
    # plus one; each block fetched once in the epoch, or again when workers out of step dropped it
    # before a later batch of its window.
    st = store.block_buffer_stats
    assert (st["records"], st["blocks"]) == (8, 5 + -(-B // 8) + 1), st
    # The loader's rule, for readers that buffer a store themselves; None past its 256 MiB bound.
    assert block_buffer_blocks(8, 5, B, 8) == st["blocks"]
    assert block_buffer_blocks(256, 64, 1024, 16 << 10) is None
    assert st["held"] <= st["blocks"] and st["held_bytes"] <= st["blocks"] * 8 * 8, st
    assert -(-N // 8) <= st["fetched"] <= 2 * -(-N // 8), st
    assert view.block_buffer_stats == st
    store.buffer_blocks(8, st["blocks"])  # the same shape again: nothing
    with pytest.raises(loaderx.InvalidInputError, match="block buffer"):
        store.buffer_blocks(16, 4)
    with pytest.raises(loaderx.InvalidInputError):
        DenseStore(tmp_path / "id").buffer_blocks(0, 4)


def test_block_runs_name_the_blocks_a_batch_reads():
    s = Sampler(1003, 32, "block", seed=2, block=10, window=4)
    for step in range(40):
        ids = Sampler(1003, 32, "block", seed=2, block=10, window=4)
        ids.seek(step)
        batch = ids.next().copy()
        runs = s.block_runs(step)
        assert runs.dtype == np.uint64 and runs.ndim == 2 and runs.shape[1] == 2
        starts = runs[:, 0]
        assert np.all(np.diff(starts.astype(np.int64)) > 0)
        assert set((batch // 10).tolist()) == set((starts // 10).tolist())
        windows = {tuple(r) for r in s.window_runs(step).tolist()}
        assert {tuple(r) for r in runs.tolist()} <= windows
    with pytest.raises(loaderx.InvalidInputError, match="Mode::Block"):
        Sampler(100, 4, "iid").block_runs(0)
