"""Ordered delivery and checkpoint / resume (issue 32) against an oracle: the sequence of global
batches one uninterrupted run yields.

* ordered delivery at any worker count, with a transform that sleeps a random time per batch;
* ``state_dict()`` / ``load_state_dict()``: resume at every step of a cycle, twice in a row, with
  0, 1 and 4 workers, in both delivery modes, through ``json`` and ``torch.save``;
* a trainer process killed with SIGKILL between its checkpoint and the resume (a subprocess:
  ``_resume_trainer.py``);
* N -> M processes under ``torchrun`` with gloo (``_dist_resume.py``): 1 -> 2, 2 -> 4, 4 -> 2, 2 -> 1;
* a mismatched state names the first field that differs.

Tests wait on conditions (a file appearing, a process exiting), never on sleeps; every
subprocess has a deadline."""

import importlib.util
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import loaderx
from loaderx import Allocator, Loader, dtypes
from loaderx.sampler import Sampler
from loaderx.zrecord import DenseStore, DenseWriter, RaggedBatch, RaggedStore, RaggedWriter

HERE = Path(__file__).resolve().parent
N = 512
B = 32
CYCLE = N // B  # 16 steps
TIMEOUT = 180


def write_stores(root):
    with DenseWriter(root / "id", dtypes.int64, (), "raw") as w:
        w.append(np.arange(N, dtype=np.int64))
    with RaggedWriter(root / "tok", dtypes.int32, 1, "zstd") as w:
        w.append(RaggedBatch.from_records([np.full(1 + i % 5, i, np.int32) for i in range(N)]))


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    r = tmp_path_factory.mktemp("resume")
    write_stores(r)
    return r


@pytest.fixture
def streams(root):
    alloc = Allocator("cpu", pool_size=1 << 22)
    stores = [DenseStore(root / "id"), RaggedStore(root / "tok")]
    yield {"id": [stores[0].bind(alloc), stores[0].bind(alloc)], "tok": [stores[1].bind(alloc), stores[1].bind(alloc)]}
    for s in stores:
        s.close()
    alloc.close()


def digest(shards):
    """One step as a hashable value: the ids and the ragged lengths, shards concatenated."""
    ids = np.concatenate([np.from_dlpack(s["id"]) for s in shards])
    lens = np.concatenate([np.diff(np.from_dlpack(s["tok"].cu_seqlens)) for s in shards])
    return tuple(ids.tolist()) + tuple(lens.tolist())


def sleepy(shards):
    time.sleep(random.uniform(0, 0.002))
    return digest(shards)


def make(streams, workers, ordered, mode=Sampler.Mode.CYCLIC, seed=5, transform=sleepy, **kw):
    return Loader(streams, Sampler(N, B, mode, seed=seed), transform, workers=workers, prefetch=2, ordered=ordered, **kw)


def oracle(streams, n):
    with make(streams, 0, False, transform=digest) as l:
        seq = [next(l) for _ in range(n)]
    return seq, {b: k for k, b in enumerate(seq)}


def check(got, state, orc, case):
    """`got` (the batches a sequence of loaders delivered) against the oracle, given the last
    loader's state: in order when ordered; else each an oracle batch, none twice, and exactly the
    steps the state counts."""
    seq, steps = orc
    if state["ordered"]:
        assert got == seq[: len(got)], case
        assert state["step"] == len(got) and state["delivered_ahead"] == [], case
        return
    seen = [steps[b] for b in got]
    assert len(seen) == len(set(seen)), f"{case}: a step arrived twice"
    assert set(seen) == set(range(state["step"])) | set(state["delivered_ahead"]), case


@pytest.mark.parametrize("workers", [0, 1, 2, 4])
def test_ordered_delivery_at_any_worker_count(streams, workers):
    seq, _ = oracle(streams, 60)
    with make(streams, workers, True) as l:
        assert l.ordered
        assert [next(l) for _ in range(60)] == seq


def test_state_dict_is_small_json_and_survives_torch_save(streams, tmp_path):
    with make(streams, 2, False) as l:
        for _ in range(5):
            next(l)
        s = l.state_dict()
    text = json.dumps(s)
    assert len(text) < 1000, text
    assert json.loads(text) == s
    assert (s["format"], s["version"], s["batch"], s["ordered"]) == ("loaderx.loader", 1, B, False)
    assert s["sampler"] == {"kind": "index", "len": N, "mode": "CYCLIC", "seed": 5}
    assert [(p["name"], [v["kind"] for v in p["views"]]) for p in s["streams"]] == [
        ("id", ["dense", "dense"]),
        ("tok", ["ragged", "ragged"]),
    ]
    if importlib.util.find_spec("torch") is not None:
        import torch

        torch.save({"loader": s}, tmp_path / "ck.pt")
        assert torch.load(tmp_path / "ck.pt")["loader"] == s  # weights_only: plain containers


@pytest.mark.parametrize("ordered", [False, True])
@pytest.mark.parametrize("workers,again", [(0, 4), (1, 1), (4, 0), (4, 4)])
def test_resume_at_every_step_of_a_cycle(streams, workers, again, ordered):
    total = CYCLE + 4
    orc = oracle(streams, 3 * total)
    ahead_seen = 0
    for at in range(CYCLE + 1):
        case = f"w {workers} -> {again} ordered {ordered} at {at}"
        with make(streams, workers, ordered) as first:
            got = [next(first) for _ in range(at)]
            state = json.loads(json.dumps(first.state_dict()))
        assert len(state["delivered_ahead"]) <= workers + 2, case
        ahead_seen += bool(state["delivered_ahead"])
        with make(streams, again, ordered) as second:
            second.load_state_dict(state)
            assert second.state_dict() == state, case
            got += [next(second) for _ in range(total - at)]
            check(got, second.state_dict(), orc, case)


@pytest.mark.parametrize("ordered", [False, True])
@pytest.mark.parametrize("workers", [0, 1, 4])
def test_resume_twice_in_a_row(streams, workers, ordered):
    orc = oracle(streams, 120)
    with make(streams, workers, ordered) as a:
        got = [next(a) for _ in range(6)]
        s1 = a.state_dict()
    with make(streams, workers, ordered) as b:
        b.load_state_dict(s1)
        assert b.state_dict() == s1  # saved again before taking anything: not step 0
        got += [next(b) for _ in range(9)]
        s2 = b.state_dict()
    with make(streams, workers, ordered) as c:
        c.load_state_dict(s2)
        got += [next(c) for _ in range(20)]
        check(got, c.state_dict(), orc, f"w {workers} ordered {ordered}")


def test_load_state_dict_rewinds_a_live_loader(streams):
    with make(streams, 4, True) as l:
        for _ in range(3):
            next(l)
        at3 = l.state_dict()
        later = [next(l) for _ in range(7)]
        l.load_state_dict(at3)
        assert l.step == 3
        assert [next(l) for _ in range(7)] == later


def test_a_mismatched_state_names_the_first_field_that_differs(streams, root, tmp_path):
    with make(streams, 1, False) as l:
        next(l)
        good = l.state_dict()
    cases = [
        ({"batch": 64}, "batch"),
        ({"ordered": True}, "ordered"),
        ({"sampler": dict(good["sampler"], seed=6)}, "sampler.seed"),
        ({"sampler": dict(good["sampler"], mode="IID")}, "sampler.mode"),
        ({"version": 9}, "version"),
    ]
    with make(streams, 1, False) as l:
        for change, field in cases:
            with pytest.raises(loaderx.InvalidInputError, match=f"its {field} is"):
                l.load_state_dict(dict(good, **change))
        with pytest.raises(loaderx.InvalidInputError, match="not a loader state"):
            l.load_state_dict({"step": 3})
        with pytest.raises(TypeError):
            l.load_state_dict("step 3")
        l.load_state_dict(good)
        assert l.step == good["step"]
    # The same records in a store at another path: another store.
    other = tmp_path / "copy"
    other.mkdir()
    write_stores(other)
    alloc = Allocator("cpu")
    moved = {"id": [DenseStore(other / "id").bind(alloc)] * 2, "tok": streams["tok"]}
    with make(moved, 1, False) as l:
        with pytest.raises(loaderx.InvalidInputError, match=r'streams\[0\] \("id"\) views\[0\].store'):
            l.load_state_dict(good)
    # Another stream layout.
    with make({"id": streams["id"]}, 1, False) as l:
        with pytest.raises(loaderx.InvalidInputError, match="number of streams"):
            l.load_state_dict(good)


def test_a_custom_sampler_has_no_state(streams):
    class Mine:
        def __init__(self):
            self.inner = Sampler(N, B, Sampler.Mode.IID, seed=1)

        def next(self):
            return self.inner.next().copy()

    with Loader(streams, Mine(), workers=0) as l:
        with pytest.raises(loaderx.InvalidInputError, match="custom sampler"):
            l.state_dict()


def test_completion_order_states_of_two_processes_resume_each_own_slice(streams):
    # Two processes of one job, completion order: each state lists its own steps ahead, and each
    # process resumes from its own (another process's is refused when it lists steps ahead).
    full = oracle(streams, 80)[0]
    halves = []
    for r in range(2):
        with make(streams, 4, False, process_index=r, process_count=2) as l:
            got = [next(l) for _ in range(9)]
            halves.append((got, l.state_dict()))
    for r, (got, state) in enumerate(halves):
        with make(streams, 2, False, process_index=r, process_count=2) as l:
            l.load_state_dict(state)
            got += [next(l) for _ in range(12)]
            end = l.state_dict()
        # Rank r's slice of a global batch is its positions r*16 .. r*16+16 (8 per view); map
        # each delivered slice to its step through the oracle.
        half = B // 2
        slices = {b[r * half : (r + 1) * half]: k for k, b in enumerate(full)}
        steps = [slices[g[:half]] for g in got]
        assert len(steps) == len(set(steps))
        assert set(steps) == set(range(end["step"])) | set(end["delivered_ahead"])
    other = halves[0][1]
    if other["delivered_ahead"]:
        with make(streams, 2, False, process_index=1, process_count=2) as l:
            with pytest.raises(loaderx.InvalidInputError, match="saved by process 0 of 2"):
                l.load_state_dict(other)


def run_trainer(args, timeout=TIMEOUT):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))
    return subprocess.Popen([sys.executable, str(HERE / "_resume_trainer.py"), *map(str, args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


@pytest.mark.parametrize("ordered", [False, True])
def test_a_trainer_killed_after_its_checkpoint_resumes_without_skipping_or_repeating(root, tmp_path, ordered):
    pytest.importorskip("torch")
    ckpt, log = tmp_path / "ck.pt", tmp_path / "log.json"
    p = run_trainer([root, ckpt, log, "train", int(ordered)])
    try:
        deadline = time.monotonic() + TIMEOUT
        while not ckpt.exists():
            assert p.poll() is None, f"the trainer exited early: {p.communicate()}"
            assert time.monotonic() < deadline, "no checkpoint appeared"
            time.sleep(0.01)
        # The trainer keeps going (its workers hold batches drawn past the checkpoint): kill it.
        os.kill(p.pid, signal.SIGKILL)
        p.communicate(timeout=TIMEOUT)
        assert p.returncode == -signal.SIGKILL
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    r = run_trainer([root, ckpt, log, "resume", int(ordered)])
    out, err = r.communicate(timeout=TIMEOUT)
    assert r.returncode == 0, err[-3000:]
    result = json.loads(log.read_text())
    got = [tuple(b) for b in result["consumed"]]
    ref = Sampler(N, B, Sampler.Mode.CYCLIC, seed=7)
    seq = [tuple(ref.next().tolist()) for _ in range(200)]
    check(got, result["state"], (seq, {b: k for k, b in enumerate(seq)}), f"ordered {ordered}")
    assert len(got) > 30


def test_torchrun_elastic_resume_n_to_m(tmp_path):
    """States saved by N processes (rank 0's) load into M: 1 -> 2, 2 -> 4, 4 -> 2, 2 -> 1."""
    pytest.importorskip("torch")
    sys.path.insert(0, str(HERE))
    from _dist_common import write_stores as write_dist_stores

    root = tmp_path / "stores"
    root.mkdir()
    write_dist_stores(root)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
               OMP_NUM_THREADS="1")

    def torchrun(nproc, *args):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
               str(HERE / "_dist_resume.py"), str(root), str(tmp_path), *args]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, env=env)
        assert r.returncode == 0, f"{args}: exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-5000:]}"
        for rank in range(nproc):
            assert f"RANK {rank} OK" in r.stdout, r.stdout

    for n in (1, 2, 4):
        torchrun(n, "save")
    torchrun(2, "load", "1", "4")
    torchrun(4, "load", "2")
    torchrun(1, "load", "2")


def test_the_resume_example_is_killed_resumes_and_matches_an_uninterrupted_run_bit_for_bit(tmp_path):
    pytest.importorskip("torch")
    r = subprocess.run([sys.executable, str(HERE.parents[2] / "examples" / "resume.py"), "--check", "--steps", "40",
                        "--workdir", str(tmp_path)], capture_output=True, text=True, timeout=TIMEOUT,
                       env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert r.returncode == 0, f"{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    assert "loss curves match bit for bit" in r.stdout, r.stdout


def test_state_dict_refuses_only_a_caller_that_fetches_ahead(streams):
    """The fetch-ahead guard looks at the module of the code that calls ``state_dict()``: code of
    Lightning's modules (its fetcher holds a batch ahead) is refused with the adapter's name, any
    other caller gets the state, and so does a call with no Python caller at all."""
    from loaderx import _fetch_ahead

    with Loader(streams, Sampler(N, B, Sampler.Mode.IID, seed=3), workers=0) as loader:
        next(loader)

        def called_from(module):
            scope = {"__name__": module, "loader": loader}
            exec("def save():\n    return loader.state_dict()\n", scope)
            return scope["save"]()

        with pytest.raises(loaderx.InvalidInputError, match="loaderx.lightning.TrainLoader"):
            called_from("lightning.pytorch.loops.fetchers")
        with pytest.raises(loaderx.InvalidInputError, match="pytorch_lightning.trainer"):
            called_from("pytorch_lightning.trainer.connectors")
        assert called_from("my_training_loop")["step"] == 1
        assert called_from("lightning_extras")["step"] == 1, "only Lightning's own modules"

    class Bottom:
        """A guard's frame with no Python caller below it."""

        f_back = None

    assert _fetch_ahead.caller_module(Bottom()) == ""
