"""Fork and spawn safety (issue 13): loaderx inside torch DataLoader workers (fork and spawn), a
plain os.fork() child, a Loader carried across fork, and pickling of stores, views and allocators.

Every fork/spawn scenario runs in a fresh interpreter (_fork_helpers.py) with its own short
deadline (LOADERX_HANG_TIMEOUT, default 5 s), so a hang is a failure, never a stalled suite.

A forked child builds its own gather pool (zrecord never uses threads only the parent has), so
views work in DataLoader fork workers and in plain children; a Loader carried across fork raises
ClosedError naming the fork; stores, views and allocators pickle as what identifies them (path,
placement, pool_size) and writers, loaders and batches refuse with the reason.
"""

import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from loaderx import Allocator, Loader, dtypes
from loaderx.sampler import Sampler
from loaderx.zrecord import DenseStore, DenseWriter, RaggedBatch, RaggedStore, RaggedWriter

HELPERS = Path(__file__).with_name("_fork_helpers.py")
needs_fork = pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork on this platform")


def _torch():
    try:
        import torch  # noqa: F401
    except ImportError:
        pytest.skip("torch is not installed (scripts/install-deps.sh installs it)")


def run_scenario(name, root, codec):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HELPERS.parent), os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run(
        [sys.executable, str(HELPERS), name, str(root), codec],
        capture_output=True, text=True, timeout=120, env=env,
    )
    assert r.returncode == 0 and r.stdout.strip().endswith("OK"), (
        f"{name}/{codec}: exit {r.returncode}\n--- stdout\n{r.stdout[-3000:]}\n--- stderr\n{r.stderr[-3000:]}"
    )


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("fork")


# --- fork -----------------------------------------------------------------------------------------


@needs_fork
@pytest.mark.parametrize("codec", ["raw", "zstd"])
def test_os_fork_child_gathers_after_parent(root, codec):
    """Parent gathers 6 MiB (fans out) then forks; the child gathers 6 MiB Dense and Ragged from
    the inherited views and from stores it opens itself."""
    run_scenario("os_fork", root, codec)


@needs_fork
@pytest.mark.parametrize("codec", ["raw", "zstd"])
def test_torch_dataloader_fork_workers(root, codec):
    """DataLoader(num_workers=2, fork) over a Dataset holding a Dense and a Ragged view; each item
    is a 4 MiB gather; the parent gathered (fanned out) before the workers were forked."""
    _torch()
    run_scenario("dataloader_fork", root, codec)


@needs_fork
def test_loader_used_in_forked_child_raises(root):
    """A Loader started in the parent: next() in the child raises an error that says fork."""
    run_scenario("loader_in_child", root, "zstd")


# --- spawn / pickling -------------------------------------------------------------------------------


def test_spawn_multiprocessing_pool(root):
    """Views are pickled to spawn-context Pool workers, reopened there, and read the same records."""
    run_scenario("spawn_pool", root, "zstd")


def test_torch_dataloader_spawn_workers(root):
    """DataLoader(multiprocessing_context="spawn") over a Dataset holding views (pickled to the
    workers)."""
    _torch()
    run_scenario("dataloader_spawn", root, "raw")


def test_torch_dataloader_spawn_workers_open_their_own_views(root):
    """The pattern that works before issue 13: the Dataset carries the path only and each spawned
    worker opens its own store, allocator and views on first use."""
    _torch()
    run_scenario("dataloader_spawn_lazy", root, "zstd")


@pytest.fixture
def stores(tmp_path):
    with DenseWriter(tmp_path / "d", dtypes.float32, (3,), "zstd", data_shards=3) as w:
        w.append(np.arange(60, dtype=np.float32).reshape(20, 3))
    with RaggedWriter(tmp_path / "r", dtypes.int16, 1, "raw") as w:
        w.append(RaggedBatch.from_records([np.arange(1 + i % 4, dtype=np.int16) + i for i in range(20)]))
    ds, rs = DenseStore(tmp_path / "d"), RaggedStore(tmp_path / "r")
    alloc = Allocator("cpu", pool_size=3 << 20)
    yield ds, rs, alloc
    ds.close()
    rs.close()
    alloc.close()


def test_pickle_allocator_round_trip(stores):
    _, _, alloc = stores
    a2 = pickle.loads(pickle.dumps(alloc))
    assert isinstance(a2, Allocator) and a2 is not alloc
    st = a2.stats()
    assert st["pool_size"] == 3 << 20 and st["live_allocations"] == 0  # a fresh pool
    a2.close()


@pytest.mark.parametrize("kind", ["dense", "ragged"])
def test_pickle_store_round_trip(stores, kind):
    ds, rs, alloc = stores
    s = ds if kind == "dense" else rs
    s2 = pickle.loads(pickle.dumps(s))
    assert type(s2) is type(s) and len(s2) == len(s) and s2.dtype == s.dtype and s2.codec == s.codec
    assert s2.data_shards == s.data_shards
    a, b = s.bind(alloc)[[3, 0, 19]], s2.bind(alloc)[[3, 0, 19]]
    if kind == "dense":
        np.testing.assert_array_equal(np.from_dlpack(a), np.from_dlpack(b))
    else:
        np.testing.assert_array_equal(np.from_dlpack(a.values), np.from_dlpack(b.values))
        np.testing.assert_array_equal(np.from_dlpack(a.cu_seqlens), np.from_dlpack(b.cu_seqlens))
    s2.close()


@pytest.mark.parametrize("kind", ["dense", "ragged"])
def test_pickle_view_round_trip(stores, kind):
    ds, rs, alloc = stores
    v = (ds if kind == "dense" else rs).bind(alloc)
    v2 = pickle.loads(pickle.dumps(v))
    assert type(v2) is type(v) and len(v2) == len(v) and v2.dtype == v.dtype
    a, b = v[[5, 5, 1]], v2[[5, 5, 1]]
    if kind == "dense":
        np.testing.assert_array_equal(np.from_dlpack(a), np.from_dlpack(b))
    else:
        np.testing.assert_array_equal(np.from_dlpack(a.values), np.from_dlpack(b.values))


@pytest.fixture
def refusals(tmp_path, stores):
    """One object of each class that refuses to pickle; aborted or closed afterwards."""
    ds, rs, alloc = stores
    dv, rv = ds.bind(alloc), rs.bind(alloc)
    loader = Loader({"d": [dv]}, Sampler(len(dv), 4, Sampler.Mode.SEQUENTIAL), workers=1)
    objs = {
        "DenseWriter": DenseWriter(tmp_path / "w1", dtypes.int8, (), "raw"),
        "RaggedWriter": RaggedWriter(tmp_path / "w2", dtypes.int8, 1, "raw"),
        "Loader": loader,
        "DLTensor": dv[[1, 2]],
        "RaggedBatch": rv[[1, 2]],
    }
    yield objs
    for o in objs.values():
        if hasattr(o, "abort"):
            o.abort()
        elif hasattr(o, "close"):
            o.close()


@pytest.mark.parametrize("name", ["DenseWriter", "RaggedWriter", "Loader", "DLTensor", "RaggedBatch"])
def test_pickle_refused_with_reason(refusals, name):
    """Writers, loaders and batches refuse with a TypeError that says why (CPython's generic
    "cannot pickle 'X' object" would not)."""
    with pytest.raises(TypeError) as e:
        pickle.dumps(refusals[name])
    msg = str(e.value)
    assert name in msg
    assert not re.fullmatch(r"cannot pickle '[\w.]+' object", msg), f"no reason given: {msg!r}"


def test_pickle_refusal_is_a_type_error(refusals):
    """Writers, loaders and batches raise TypeError on pickling."""
    for o in refusals.values():
        with pytest.raises(TypeError, match="pickle"):
            pickle.dumps(o)
