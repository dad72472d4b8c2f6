"""Data-parallel loading with real engines on loopback (issue 16): torchrun + gloo, two JAX CPU
processes, and examples/ddp_train.py. Every engine run is a subprocess with a deadline, so a hang
(a rank waiting on a collective forever) is a failure, never a stalled suite.

The in-process tests check the Loader's process options and `check_consistent`'s comparison."""

import importlib.util
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import loaderx
from loaderx import Loader
from loaderx.distributed import _differs, jax_process, torch_process
from loaderx.sampler import Sampler

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
TIMEOUT = 120

sys.path.insert(0, str(HERE))
from _dist_common import BATCH, N, Streams, flat, join, write_stores  # noqa: E402


def need(module):
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed (scripts/install-deps.sh installs it)")


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    r = tmp_path_factory.mktemp("dist")
    write_stores(r)
    return r


def env():
    path = os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])
    # One thread per rank: two ranks share the two cores of a small CI machine.
    return dict(os.environ, PYTHONPATH=path, OMP_NUM_THREADS="1")


def check(r, what):
    assert r.returncode == 0, f"{what}: exit {r.returncode}\n--- stdout\n{r.stdout[-3000:]}\n--- stderr\n{r.stderr[-4000:]}"


def test_slices_concatenate_to_the_global_batch_in_process(root):
    st = Streams(root)
    for mode in ("SEQUENTIAL", "IID", "CYCLIC"):
        for count in (1, 2, 3):
            ref = st.loader(mode, step=7)
            loaders = [st.loader(mode, step=7, index=i, count=count) for i in range(count)]
            for _ in range(4):
                assert join([flat(l.next()) for l in loaders]) == flat(ref.next())
            assert {l.step for l in loaders} == {ref.step}
            for l in loaders:
                l.close()
            ref.close()


def test_process_options_are_checked(root):
    st = Streams(root)
    with pytest.raises(loaderx.InvalidInputError, match="process_count 5 x 2 views"):
        st.loader("IID", count=5)
    with pytest.raises(loaderx.InvalidInputError, match="process_index"):
        st.loader("IID", index=2, count=2)
    with pytest.raises(ValueError, match="process_count"):
        st.loader("IID", count=0)
    with pytest.raises(ValueError, match="process_index"):
        st.loader("IID", index=-1, count=2)
    with st.loader("CYCLIC", seed=9, index=1, count=2) as l:
        assert (l.process_index, l.process_count) == (1, 2)
        f = l.fingerprint()
        assert (f["batch"], f["mode"], f["seed"], f["sampler_len"], f["step"]) == (BATCH, "CYCLIC", 9, N, 0)
        kinds = [(name, [(k, Path(p).name, n) for k, p, n in views]) for name, views in f["streams"]]
        assert kinds == [("x", [("dense", "x", N)] * 2), ("tok", [("ragged", "tok", N)] * 2)]
        l.next()
        assert l.fingerprint()["step"] == 1


def test_a_custom_sampler_is_drawn_whole_and_sliced(root):
    st = Streams(root)

    class Mine:
        def __init__(self):
            self.inner = Sampler(N, BATCH, Sampler.Mode.IID, seed=1)

        def next(self):
            return self.inner.next().copy()

    ref = st.loader("IID", seed=1)
    halves = [Loader(st.streams, Mine(), workers=0, process_index=i, process_count=2) for i in range(2)]
    assert halves[0].fingerprint()["mode"].startswith("custom")
    for _ in range(3):
        assert join([flat(h.next()) for h in halves]) == flat(ref.next())


def test_the_first_differing_field_is_named():
    a = {"process_count": 2, "batch": 8, "mode": "IID", "seed": 1, "step": 0, "streams": ()}
    assert _differs([a, dict(a)]) is None
    assert _differs([a, dict(a, seed=2, step=5)]) == ("seed", [1, 2])
    assert _differs([a, dict(a, streams=(("x", ()),))])[0] == "streams"


def test_process_lookup_without_an_initialized_group(monkeypatch):
    need("torch")
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert torch_process() == (0, 1)
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert torch_process() == (3, 4)


def test_jax_process_single():
    need("jax")
    assert jax_process() == (0, 1)


def test_torchrun_gloo_slices_equal_the_global_batch_and_a_seed_mismatch_fails(root):
    need("torch")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           str(HERE / "_dist_torch.py"), str(root)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, env=env())
    check(r, "torchrun")
    assert "RANK 0 OK" in r.stdout and "RANK 1 OK" in r.stdout, r.stdout


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_jax_processes_build_the_global_array(root):
    need("jax")
    port = free_port()
    procs = [subprocess.Popen([sys.executable, str(HERE / "_dist_jax.py"), str(root), str(port), str(i)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=dict(env(), JAX_PLATFORMS="cpu"))
             for i in range(2)]
    outs = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=TIMEOUT)
            outs.append((p.returncode, out, err))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    for i, (rc, out, err) in enumerate(outs):
        assert rc == 0 and f"PROCESS {i} OK" in out, f"process {i}: exit {rc}\n{out[-2000:]}\n{err[-4000:]}"


def test_ddp_train_example_matches_a_single_process_run(tmp_path):
    need("torch")
    r = subprocess.run([sys.executable, str(REPO / "examples" / "ddp_train.py"), "--check", "--steps", "12",
                        "--workdir", str(tmp_path)], capture_output=True, text=True, timeout=TIMEOUT, env=env())
    check(r, "ddp_train.py --check")
    assert "loss curves match" in r.stdout, r.stdout
