"""Loader: order, completion order, transform exceptions, close while blocked, memory bound, resume.

Tests wait on conditions (events, counters with a deadline), never on sleeps; wall-clock bounds are
`timing` tests, deselected by default (`-m timing` runs them)."""

import threading
import time

import numpy as np
import pytest

import loaderx
from loaderx import Allocator, Loader, dtypes
from loaderx.sampler import Sampler
from loaderx.zrecord import DenseStore, DenseWriter, RaggedBatch, RaggedStore, RaggedWriter

N = 1024


@pytest.fixture
def streams(tmp_path):
    ids = np.arange(N, dtype=np.int64)
    feats = (np.arange(N * 8, dtype=np.float32).reshape(N, 8))
    with DenseWriter(tmp_path / "id", dtypes.int64, (), "raw") as w:
        w.append(ids)
    with DenseWriter(tmp_path / "x", dtypes.float32, (8,), "zstd") as w:
        w.append(feats)
    with RaggedWriter(tmp_path / "tok", dtypes.int32, 1, "zstd") as w:
        w.append(RaggedBatch.from_records([np.full(1 + i % 5, i, np.int32) for i in range(N)]))
    stores = [DenseStore(tmp_path / "id"), DenseStore(tmp_path / "x"), RaggedStore(tmp_path / "tok")]
    alloc = Allocator("cpu", pool_size=1 << 20)
    yield {"id": [stores[0].bind(alloc)], "x": [stores[1].bind(alloc)], "tok": [stores[2].bind(alloc)]}, alloc, stores
    for s in stores:
        s.close()
    alloc.close()


def ids_of(shards):
    return np.concatenate([np.from_dlpack(s["id"]) for s in shards])


def test_one_worker_preserves_order(streams):
    st, _, _ = streams
    s = Sampler(N, 64, Sampler.Mode.CYCLIC, seed=5)
    ref = Sampler(N, 64, Sampler.Mode.CYCLIC, seed=5)
    with Loader(st, s, workers=1, prefetch=2) as loader:
        for _ in range(40):
            shards = loader.next()
            want = ref.next().astype(np.int64)
            np.testing.assert_array_equal(ids_of(shards), want)
            np.testing.assert_array_equal(np.from_dlpack(shards[0]["x"])[:, 0], want * 8)
            tok = shards[0]["tok"]
            for t, i in zip(tok.to_tensors(), want):
                assert np.from_dlpack(t)[0] == i


def test_inline_workers_zero(streams):
    st, _, _ = streams
    ref = Sampler(N, 32, Sampler.Mode.SEQUENTIAL)
    loader = Loader(st, Sampler(N, 32, Sampler.Mode.SEQUENTIAL), workers=0)
    for _ in range(5):
        np.testing.assert_array_equal(ids_of(next(loader)), ref.next())
    loader.close()
    with pytest.raises(StopIteration):
        next(loader)


def test_several_workers_completion_order(streams):
    st, _, _ = streams
    ref = Sampler(N, 16, Sampler.Mode.IID, seed=9)
    expected = {tuple(ref.next()) for _ in range(60)}

    def slow(shards):
        time.sleep(np.random.default_rng().uniform(0, 0.004))
        return shards

    ref_all = Sampler(N, 16, Sampler.Mode.IID, seed=9)
    draws = [tuple(ref_all.next()) for _ in range(600)]
    got = []
    # Completion order: every batch is a draw, none arrives twice, none is skipped. A preempted
    # worker may deliver arbitrarily late, so consume on until all of the first 60 draws arrived.
    with Loader(st, Sampler(N, 16, Sampler.Mode.IID, seed=9), transform=slow, workers=4, prefetch=4) as loader:
        while not expected <= set(got):
            assert len(got) < 540, "a batch went missing"
            got.append(tuple(ids_of(next(loader))))
    assert set(got) <= set(draws)
    assert len(got) == len(set(got)), "a batch arrived twice"


class Boom(Exception):
    pass


@pytest.mark.parametrize("workers", [0, 1, 3])
def test_transform_exception_propagates_unchanged(streams, workers):
    st, _, _ = streams
    calls = []

    def transform(shards):
        calls.append(1)
        if len(calls) == 3:
            raise Boom("third batch")
        return ids_of(shards)

    loader = Loader(st, Sampler(N, 8, Sampler.Mode.SEQUENTIAL), transform=transform, workers=workers, prefetch=2)
    first = next(loader)
    assert isinstance(first, np.ndarray)
    with pytest.raises(Boom, match="third batch") as ei:
        for _ in range(10):
            next(loader)
    assert type(ei.value) is Boom
    with pytest.raises(StopIteration):
        next(loader)
    loader.close()


def test_transform_result_passed_unchanged(streams):
    st, _, _ = streams
    sentinel = object()
    with Loader(st, Sampler(N, 8, Sampler.Mode.SEQUENTIAL), transform=lambda s: sentinel, workers=2) as loader:
        assert next(loader) is sentinel


def wait_until(cond, what, timeout=10.0):
    """Waits for `cond()` (polled); a hang becomes a failure naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.001)


def wait_pipeline_full(alloc, prefetch, streams_n=3):
    """Blocks until the queue is full and a worker waits on it holding the next batch: with no
    transform (paced: the other workers rest meanwhile) that is prefetch + 1 batches of
    `streams_n` allocations each."""
    want = (prefetch + 1) * streams_n
    wait_until(lambda: alloc.stats()["live_allocations"] >= want, f"{want} live allocations")


def close_while_workers_blocked(streams):
    """Fills the pipeline, then closes; returns how long close() took."""
    st, alloc, _ = streams
    loader = Loader(st, Sampler(N, 64, Sampler.Mode.IID), workers=3, prefetch=1)
    wait_pipeline_full(alloc, 1)  # queue full; a worker is blocked on it
    t = time.monotonic()
    loader.close()
    took = time.monotonic() - t
    loader.close()  # idempotent
    with pytest.raises(StopIteration):
        next(loader)
    wait_until(lambda: alloc.stats()["live_allocations"] == 0, "every batch to be released")
    assert alloc.stats()["live_allocations"] == 0
    return took


def test_close_while_workers_blocked(streams):
    close_while_workers_blocked(streams)


@pytest.mark.timing
def test_close_while_workers_blocked_is_prompt(streams):
    assert close_while_workers_blocked(streams) < 2.0


def test_close_from_other_thread_while_transform_blocks(streams):
    st, _, _ = streams
    entered, calling, release = threading.Event(), threading.Event(), threading.Event()

    def slow(shards):
        entered.set()
        release.wait(5)
        return len(shards)

    loader = Loader(st, Sampler(N, 8, Sampler.Mode.SEQUENTIAL), transform=slow, workers=2, prefetch=1)
    assert entered.wait(10), "no transform started"

    def close():
        calling.set()
        loader.close()

    closer = threading.Thread(target=close)
    closer.start()
    assert calling.wait(10)  # close() is called while a transform is blocked
    release.set()
    closer.join(5)
    assert not closer.is_alive()


def test_memory_bound(streams):
    st, alloc, _ = streams
    workers, prefetch = 2, 3
    with Loader(st, Sampler(N, 32, Sampler.Mode.IID, seed=1), workers=workers, prefetch=prefetch) as loader:
        wait_pipeline_full(alloc, prefetch)  # let the pipeline fill up
        for _ in range(50):
            shards = next(loader)
            del shards
    s = alloc.stats()
    streams_n = 3
    # at most workers + prefetch batches alive besides the one the consumer holds
    assert s["peak_live_allocations"] <= (workers + prefetch + 1) * streams_n, s
    assert s["bytes_retained"] <= s["pool_size"]


def test_resume_by_seek(streams):
    st, _, _ = streams
    full = []
    with Loader(st, Sampler(N, 32, Sampler.Mode.CYCLIC, seed=3), workers=1) as loader:
        for _ in range(20):
            full.append(ids_of(next(loader)))
    s = Sampler(N, 32, Sampler.Mode.CYCLIC, seed=3)
    with Loader(st, s, workers=1) as loader:
        for k in range(8):
            np.testing.assert_array_equal(ids_of(next(loader)), full[k])
        resume = loader.step
    assert resume == 8
    s2 = Sampler(N, 32, Sampler.Mode.CYCLIC, seed=3)
    s2.seek(resume)
    with Loader(st, s2, workers=1) as loader:
        for k in range(8, 20):
            np.testing.assert_array_equal(ids_of(next(loader)), full[k])


def test_custom_python_sampler(streams):
    st, _, _ = streams

    class Reverse:
        def __init__(self):
            self.pos = N

        def next(self):
            self.pos -= 4
            return np.arange(self.pos, self.pos + 4, dtype=np.int64)[::-1].copy()

    with Loader(st, Reverse(), workers=1) as loader:
        np.testing.assert_array_equal(ids_of(next(loader)), [N - 1, N - 2, N - 3, N - 4])
        np.testing.assert_array_equal(ids_of(next(loader)), [N - 5, N - 6, N - 7, N - 8])

    class Bad:
        def __init__(self):
            self.k = 0

        def next(self):
            self.k += 1
            if self.k == 2:
                raise KeyError("sampler failed")
            return np.array([0, 1])

    loader = Loader(st, Bad(), workers=0)
    next(loader)
    with pytest.raises(KeyError, match="sampler failed"):
        next(loader)
    loader.close()

    class OutOfRange:
        def next(self):
            return np.array([N + 5])

    loader = Loader(st, OutOfRange(), workers=0)
    with pytest.raises(IndexError):
        next(loader)


def test_loader_validation(streams, tmp_path):
    st, alloc, stores = streams
    with pytest.raises(TypeError):
        Loader({"id": [object()]}, Sampler(N, 8, Sampler.Mode.IID))
    with pytest.raises(loaderx.InvalidInputError):
        Loader({"id": []}, Sampler(N, 8, Sampler.Mode.IID))
    with pytest.raises(loaderx.InvalidInputError):
        Loader({"id": st["id"] * 3}, Sampler(N, 8, Sampler.Mode.IID))  # 8 % 3 != 0
    with pytest.raises(loaderx.InvalidInputError):
        Loader(st, Sampler(N, 8, Sampler.Mode.IID), workers=2, prefetch=0)
    with pytest.raises(TypeError):
        Loader(st, object())


def test_loader_after_store_close(streams):
    st, _, stores = streams
    loader = Loader(st, Sampler(N, 8, Sampler.Mode.IID), workers=0)
    next(loader)
    stores[0].close()
    with pytest.raises(loaderx.ClosedError):
        next(loader)


def test_sampler_modes():
    s = Sampler(10, 4, Sampler.Mode.SEQUENTIAL)
    assert list(s.next()) == [0, 1, 2, 3]
    assert list(s.next()) == [4, 5, 6, 7]
    assert list(s.next()) == [8, 9, 0, 1]
    c = Sampler(10, 5, Sampler.Mode.CYCLIC, seed=1)
    a, b = c.next().copy(), c.next().copy()
    assert sorted(np.concatenate([a, b]).tolist()) == list(range(10))
    it = iter(Sampler(100, 3, Sampler.Mode.IID, seed=2))
    x = next(it)
    assert x.shape == (3,) and x.dtype == np.uint64 and not x.flags.writeable
    with pytest.raises(ValueError):
        Sampler(0, 4, Sampler.Mode.IID)
    with pytest.raises(ValueError):
        Sampler(3, 4, Sampler.Mode.CYCLIC)
