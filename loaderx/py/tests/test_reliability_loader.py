"""Reliability plan T11 from Python: the loader fault matrix.

A transform raising a custom exception at batch k x workers x prefetch: the batches before k arrive,
then the very same exception object; no hang (pytest-timeout as the watchdog); the process thread
count (/proc/self/task) is back to baseline after close(). The wall-clock bounds (the error arrives
at most 1 s after it was raised, close() takes under 1 s) are `timing` tests (`-m timing`). The
bad-input half of the Python reliability plan (T8) is test_reliability_inputs.py.
"""

import os
import threading
import time

import numpy as np
import pytest

from loaderx import Allocator, Loader, dtypes
from loaderx.sampler import Sampler
from loaderx.zrecord import DenseStore, DenseWriter

# ----------------------------------------------------------------------------------------------
# T11
# ----------------------------------------------------------------------------------------------

N = 256
B = 4
MAX_LATENCY = 1.0
STATS = {"t11_cases": 0, "t11_max_latency": 0.0, "t11_max_thread_excess": -(10**9)}


def n_threads():
    return len(os.listdir("/proc/self/task"))


def settle(baseline, limit=1.0):
    t = time.monotonic()
    while True:
        n = n_threads()
        if n <= baseline or time.monotonic() - t > limit:
            return n
        time.sleep(0.002)


@pytest.fixture(scope="module")
def id_store(tmp_path_factory):
    p = tmp_path_factory.mktemp("t11") / "id"
    with DenseWriter(p, dtypes.int64, (), "raw", data_shards=1) as w:
        w.append(np.arange(N, dtype=np.int64))
    s = DenseStore(p)
    a = Allocator("cpu", pool_size=1 << 20)
    yield s, a
    s.close()
    a.close()


class InjectedFault(Exception):
    pass


def t11_transform_exception(id_store, k, workers, prefetch):
    """One T11 case; returns the latency from raise to receipt (seconds)."""
    store, alloc = id_store
    baseline = n_threads()
    exc = InjectedFault(f"injected at step {k}")
    raised_at = []

    def transform(shards):
        step = int(np.from_dlpack(shards[0]["x"])[0]) // B
        if step == k:
            raised_at.append(time.monotonic())
            raise exc
        return step

    loader = Loader({"x": [store.bind(alloc)]}, Sampler(N, B, Sampler.Mode.SEQUENTIAL), transform=transform,
                    workers=workers, prefetch=prefetch)
    assert n_threads() <= baseline + loader.threads
    steps = []
    got = None
    while got is None:  # drain continuously
        try:
            steps.append(next(loader))
        except InjectedFault as e:
            got, received = e, time.monotonic()
        except StopIteration:
            pytest.fail(f"loader ended without the error after {steps}")
    assert got is exc, "the transform's exception object must propagate unchanged"
    assert type(got) is InjectedFault
    latency = received - raised_at[0]
    assert k not in steps
    if workers <= 1:
        assert steps == list(range(k))
    else:
        # Completion order: batches drawn after step k may arrive before its error, and the
        # sequential sampler wraps every N // B steps, so a value repeats at most once per wrap.
        period = N // B
        assert all(0 <= s < period for s in steps), steps
        max_repeats = len(steps) // period + 1
        assert all(steps.count(s) <= max_repeats for s in set(steps)), steps
        assert set(range(k)) <= set(steps), steps
    with pytest.raises(StopIteration):
        next(loader)
    loader.close()
    loader.close()
    after = settle(baseline)
    assert after <= baseline, (after, baseline)
    STATS["t11_cases"] += 1
    STATS["t11_max_latency"] = max(STATS["t11_max_latency"], latency)
    STATS["t11_max_thread_excess"] = max(STATS["t11_max_thread_excess"], after - baseline)
    return latency


@pytest.mark.timeout(10)
@pytest.mark.parametrize("prefetch", [1, 4])
@pytest.mark.parametrize("workers", [0, 1, 4])
@pytest.mark.parametrize("k", [0, 1, 5])
def test_t11_transform_exception_matrix(id_store, k, workers, prefetch):
    t11_transform_exception(id_store, k, workers, prefetch)


@pytest.mark.timing
@pytest.mark.timeout(10)
@pytest.mark.parametrize("prefetch", [1, 4])
@pytest.mark.parametrize("workers", [0, 1, 4])
@pytest.mark.parametrize("k", [0, 1, 5])
def test_t11_exception_latency(id_store, k, workers, prefetch):
    latency = t11_transform_exception(id_store, k, workers, prefetch)
    assert latency <= MAX_LATENCY, latency


def t11_close_while_blocked(id_store, workers, prefetch, consumed):
    """One T11 close case; returns how long close() took (seconds)."""
    store, alloc = id_store
    baseline = n_threads()
    calls = []
    cond = threading.Condition()

    def transform(shards):
        with cond:
            calls.append(1)
            cond.notify_all()
        return len(shards)

    loader = Loader({"x": [store.bind(alloc)]}, Sampler(N, B, Sampler.Mode.IID, seed=1), transform=transform,
                    workers=workers, prefetch=prefetch)
    assert n_threads() == baseline + loader.threads
    for _ in range(consumed):
        next(loader)
    # Completion order: a worker draws at most workers + prefetch steps past the first undelivered
    # one, so each step delivered ahead of it beyond the first leaves one batch fewer to draw.
    ahead = len(loader.state_dict()["delivered_ahead"])
    want = consumed + min(prefetch + workers, prefetch + workers + 1 - ahead)
    with cond:
        assert cond.wait_for(lambda: len(calls) >= want, timeout=5), (len(calls), want)
        assert len(calls) == want, "every worker blocked on the full queue"
    t = time.monotonic()
    loader.close()
    took = time.monotonic() - t
    # The workers are joined: no transform ran beyond the bound at any point before close.
    assert len(calls) == want, "every worker blocked on the full queue"
    with pytest.raises(StopIteration):
        next(loader)
    after = settle(baseline)
    assert after <= baseline, (after, baseline)
    STATS["t11_close_max"] = max(STATS.get("t11_close_max", 0.0), took)
    return took


@pytest.mark.timeout(10)
@pytest.mark.parametrize("prefetch", [1, 4])
@pytest.mark.parametrize("workers", [1, 4])
@pytest.mark.parametrize("consumed", [0, 2])
def test_t11_close_while_workers_blocked_on_full_queue(id_store, workers, prefetch, consumed):
    t11_close_while_blocked(id_store, workers, prefetch, consumed)


@pytest.mark.timing
@pytest.mark.timeout(10)
@pytest.mark.parametrize("prefetch", [1, 4])
@pytest.mark.parametrize("workers", [1, 4])
@pytest.mark.parametrize("consumed", [0, 2])
def test_t11_close_is_prompt(id_store, workers, prefetch, consumed):
    took = t11_close_while_blocked(id_store, workers, prefetch, consumed)
    assert took < 1.0, took


def test_zz_summary():
    """Runs last (file order): a summary line for docs/reliability.md."""
    if STATS["t11_cases"] == 0:
        pytest.skip("summary needs the whole file")
    print(f"\nT11 cases {STATS['t11_cases']} max latency {STATS['t11_max_latency'] * 1e3:.2f} ms, max threads "
          f"above baseline after close {STATS['t11_max_thread_excess']}, slowest blocked close "
          f"{STATS.get('t11_close_max', 0) * 1e3:.2f} ms")
