"""Kill and resume inside real trainers (issue 56): Lightning, Accelerate, torch DCP.

Each case trains a small regression on a loaderx `Loader` (`_trainers.py`) three ways: an
uninterrupted run, a run that checkpoints at step `KILL_AT` and exits there with `os._exit`, and a
run resumed from that checkpoint. The ids of the samples trained, step by step, must be those of
the uninterrupted run (killed run's steps then the resumed run's) and the final weights equal to
its weights bit for bit, on every rank:

* Lightning 2.6 (`ModelCheckpoint(every_n_train_steps=3)`, `trainer.fit(ckpt_path=...)`, the
  loader as train dataloader through `loaderx.lightning.TrainLoader`): workers 0 and 2, a plain
  store and a mixture whose weights change at steps 4 and 9; and 2 ranks (`ddp`, gloo, 2 workers,
  the mixture); a first-fit packing loader (`Loader.pack`, its open rows carried in the state);
  the `training_step(self, dataloader_iter)` form; and completion order (`ordered=False`, 2
  workers), where the resumed run must train exactly the steps the killed one did not (completion
  order fixes the set of steps, not their order: see `loaderx.lightning`);
* Accelerate (`register_for_checkpointing(loader)`, `save_state` / `load_state`) and
  `torch.distributed.checkpoint` (the loader as a `Stateful`): plain loops, workers 0 and 2;
* without the adapter, Lightning's own save of a plain `Loader` raises (its fetcher holds a batch
  ahead of training: that state would skip it) instead of skipping data;
* `TrainLoader` itself: the state as of the last batch marked trained, the errors when the
  callback is missing, and a new iteration rewinding over the batches fetched ahead.

Subprocesses have a deadline; tests wait for them to exit, never on sleeps."""

import subprocess
import sys
from pathlib import Path

import pytest

from loaderx import InvalidInputError

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _trainers import BATCH, KILL_AT, OFFSET, PACK_ROWS, SEQ_LEN, TOTAL, make_loader, write_stores  # noqa: E402

DEADLINE = 300  # seconds for one trainer process (a cold start imports torch and the trainer)


def need(*modules):
    for module in modules:
        pytest.importorskip(module, reason="scripts/install-deps.sh installs it")


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    r = tmp_path_factory.mktemp("trainers")
    write_stores(r)
    return r


# One process: trainer, workers, data.
SINGLE = [("lightning", w, d) for w in (0, 2) for d in ("plain", "mixture")] + [
    ("lightning", 2, "packed"), ("lightning-iter", 2, "plain"), ("lightning", 2, "completion")
] + [(t, w, d) for t in ("accelerate", "dcp") for w, d in ((2, "mixture"), (0, "plain"))]


def job(case, phase, out, world=1):
    trainer, workers, data = case
    return f"{trainer},{phase},{data},{workers},{world},{out}"


def run_all(root, batches, parallel=2):
    """Runs `_trainers.py ROOT *jobs` for each list of jobs, `parallel` processes at a time, and
    waits for every one to exit (each within `DEADLINE`)."""
    pending, failed = list(batches), []
    while pending:
        procs = []
        for jobs in pending[:parallel]:
            cmd = [sys.executable, str(HERE / "_trainers.py"), str(root), *jobs]
            procs.append((cmd, subprocess.Popen(cmd, cwd=HERE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))
        pending = pending[parallel:]
        for cmd, p in procs:
            try:
                out, err = p.communicate(timeout=DEADLINE)
            except subprocess.TimeoutExpired:
                p.kill()
                out, err = p.communicate()
            if p.returncode != 0:
                failed.append(f"{' '.join(cmd[3:])}: exit {p.returncode}\n{out[-3000:]}\n{err[-6000:]}")
    assert not failed, "\n\n".join(failed)


@pytest.fixture(scope="module")
def single_runs(root, tmp_path_factory):
    """Every one-process case, run once for the module: a killed run per case (one process each),
    then the resumed and the uninterrupted runs, one process per trainer family."""
    need("torch", "lightning", "accelerate")
    base = tmp_path_factory.mktemp("runs")
    outs = {case: base / "-".join(map(str, case)) for case in SINGLE}
    for out in outs.values():
        out.mkdir()
    run_all(root, [[job(case, "kill", outs[case])] for case in SINGLE])
    lit = [c for c in SINGLE if c[0].startswith("lightning")]
    families = [lit, [c for c in SINGLE if c not in lit]]
    run_all(root, [[job(c, p, outs[c]) for c in family for p in ("resume", "full")] for family in families])
    return outs


def check(out, data, world):
    """Every rank's killed + resumed run against its uninterrupted run; the mixture's weights
    visibly changed at steps 4 and 9 (records of source 1 per global step)."""
    import torch

    per_step = [[] for _ in range(TOTAL)]
    for rank in range(world):
        full, kill, resumed = (torch.load(out / f"{p}-rank{rank}.pt") for p in ("full", "kill", "resume"))
        assert len(full["ids"]) == TOTAL and len(kill["ids"]) == KILL_AT, (rank, len(kill["ids"]))
        assert kill["ids"] + resumed["ids"] == full["ids"], f"rank {rank}: sample order differs"
        for name, w in full["weights"].items():
            assert torch.equal(w, resumed["weights"][name]), f"rank {rank}: {name} differs"
            assert not torch.equal(w, kill["weights"][name]), f"rank {rank}: {name} did not train"
        for step, ids in enumerate(full["ids"]):
            per_step[step] += ids
    if data == "packed":  # every step a full batch of packed rows, nearly all of it tokens
        assert all(len(ids) == PACK_ROWS * SEQ_LEN for ids in per_step)
        assert sum(i != 0 for ids in per_step for i in ids) > 0.8 * TOTAL * PACK_ROWS * SEQ_LEN
        return
    assert all(len(ids) == BATCH for ids in per_step)
    from_1 = [sum(i >= OFFSET for i in ids) for ids in per_step]
    if data == "plain":
        assert from_1 == [0] * TOTAL
    else:  # weights 1:1, then 3:1 from step 4, then 1:2 from step 9
        assert sum(from_1[:4]) == 16 and from_1[4:9] == [2] * 5 and abs(sum(from_1[9:]) - 16) <= 1, from_1


def saved_loader_state(ckpt):
    """The loaderx state inside a Lightning checkpoint (the dict holding `delivered_ahead`)."""
    import torch

    def find(x):
        if isinstance(x, dict):
            if "delivered_ahead" in x and "step" in x:
                return x
            x = list(x.values())
        if isinstance(x, (list, tuple)):
            for v in x:
                if (got := find(v)) is not None:
                    return got
        return None

    state = find(torch.load(ckpt, weights_only=False))
    assert state is not None, f"no loader state in {ckpt}"
    return state


def check_completion(out, root):
    """Completion order: each trained batch is one step's batch (looked up in an ordered run of
    the same sampler). The state the killed run saved counts exactly the steps it trained (every
    step below its low-water step, and those delivered ahead), and the resumed run trains only
    steps that state does not count: nothing skipped, nothing repeated across the kill."""
    import torch

    with make_loader(root, "plain", 0) as ref:
        step_of = {tuple(next(ref)["id"].tolist()): k for k in range(TOTAL + 8)}
    full, kill, resumed = (torch.load(out / f"{p}-rank0.pt") for p in ("full", "kill", "resume"))
    assert len(kill["ids"]) == KILL_AT and len(kill["ids"]) + len(resumed["ids"]) == len(full["ids"]) == TOTAL
    steps = {p: [step_of[tuple(ids)] for ids in run["ids"]] for p, run in (("full", full), ("kill", kill),
                                                                           ("resume", resumed))}
    assert len(set(steps["full"])) == TOTAL, steps
    k, r = set(steps["kill"]), set(steps["resume"])
    assert len(k) == KILL_AT and len(r) == TOTAL - KILL_AT and not k & r, steps
    saved = saved_loader_state(out / "ckpt" / f"ck-step={KILL_AT}.ckpt")
    low, ahead = saved["step"], set(saved["delivered_ahead"])
    assert k == set(range(low)) | ahead, (steps, saved)
    assert all(s >= low and s not in ahead for s in r), (steps, saved)
    for name, w in resumed["weights"].items():
        assert not torch.equal(w, kill["weights"][name]), f"{name} did not train after the resume"


@pytest.mark.timeout(8 * DEADLINE)
@pytest.mark.parametrize("case", SINGLE, ids=["-".join(map(str, c)) for c in SINGLE])
def test_one_process_resumes_bit_identically(single_runs, case, root):
    if case[2] == "completion":
        check_completion(single_runs[case], root)
    else:
        check(single_runs[case], case[2], 1)


@pytest.mark.timeout(3 * DEADLINE)
def test_lightning_ddp_two_ranks_resumes_bit_identically(root, tmp_path):
    need("torch", "lightning")
    case = ("lightning", 2, "mixture")
    for phase in ("full", "kill", "resume"):
        run_all(root, [[job(case, phase, tmp_path, world=2)]])
    check(tmp_path, "mixture", 2)


@pytest.mark.timeout(DEADLINE)
def test_lightning_saving_a_plain_loader_raises_instead_of_skipping(root, tmp_path):
    need("lightning")
    import lightning as L
    import torch
    from lightning.pytorch.callbacks import ModelCheckpoint

    trained = []

    class Net(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 1)

        def training_step(self, batch, idx):
            trained.append(batch["id"].tolist())
            return self.lin(batch["x"]).square().mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    loader = make_loader(root, "plain", 2)
    trainer = L.Trainer(max_steps=6, accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                        enable_model_summary=False, callbacks=[ModelCheckpoint(tmp_path, every_n_train_steps=2)])
    with pytest.raises(InvalidInputError, match="fetcher holds a batch pulled ahead of training") as e:
        trainer.fit(Net(), train_dataloaders=loader)
    assert "lightning.pytorch." in str(e.value) and "loaderx.lightning.TrainLoader" in str(e.value)
    # The save came after step 2, with the third batch already delivered: that state says 3.
    assert len(trained) == 2 and loader.step == 3
    assert not list(tmp_path.glob("*.ckpt"))
    loader.close()


def test_train_loader_state_is_that_of_the_last_trained_batch(root):
    need("lightning")
    from loaderx.lightning import TrainLoader

    with make_loader(root, "plain", 2) as ref:
        batches = [next(ref)["id"].tolist() for _ in range(8)]
    tl = TrainLoader(make_loader(root, "plain", 2), ahead=2)
    assert iter(tl) is tl and tl.state_dict()["step"] == 0
    got = [next(tl)["id"].tolist(), next(tl)["id"].tolist()]  # a trainer fetching one ahead
    with pytest.raises(InvalidInputError, match="TrainedBatches"):
        tl.state_dict()  # fetched ahead, none marked: no callback
    tl.trained()
    assert tl.state_dict()["step"] == 1 and tl.loader.step == 2
    with pytest.raises(InvalidInputError, match="batches fetched ahead of training"):
        next(tl), next(tl)  # a third unmarked batch: beyond ahead=2
    assert tl.loader.step == 3
    iter(tl)  # a new iteration drops the batches fetched ahead: rewinds to the trained state
    assert tl.loader.step == 1
    got += [next(tl)["id"].tolist() for _ in range(2)]
    assert got == batches[:2] + batches[1:3]
    tl.trained()
    tl.trained()
    assert tl.state_dict()["step"] == 3
    with pytest.raises(InvalidInputError, match="never delivered"):
        tl.trained()
    tl.load_state_dict(tl.state_dict())
    assert next(tl)["id"].tolist() == batches[3]
    tl.loader.close()
