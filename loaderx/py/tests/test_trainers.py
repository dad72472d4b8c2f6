"""Kill and resume inside real trainers (issue 56): Lightning, Accelerate, torch DCP.

Each case trains a small regression on a loaderx `Loader` (`_trainers.py`) three ways: an
uninterrupted run, a run that checkpoints at step `KILL_AT` and exits there with `os._exit`, and a
run resumed from that checkpoint. The ids of the samples trained, step by step, must be those of
the uninterrupted run (killed run's steps then the resumed run's) and the final weights equal to
its weights bit for bit, on every rank:

* Lightning 2.6 (`ModelCheckpoint(every_n_train_steps=3)`, `trainer.fit(ckpt_path=...)`, the
  loader as train dataloader through `loaderx.lightning.TrainLoader`): workers 0 and 2, a plain
  store and a mixture whose weights change at steps 4 and 9, one process and 2 (`ddp`, gloo);
* Accelerate (`register_for_checkpointing(loader)`, `save_state` / `load_state`) and
  `torch.distributed.checkpoint` (the loader as a `Stateful`): plain loops, workers 0 and 2;
* without the adapter, Lightning's own save of a plain `Loader` raises (its fetcher holds a batch
  ahead of training: that state would skip it) instead of skipping data;
* `TrainLoader` itself: the state as of the last batch marked trained, the errors when the
  callback is missing, and a new iteration rewinding over the batches fetched ahead.

Subprocesses have a deadline; tests wait for them to exit, never on sleeps."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from loaderx import InvalidInputError

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _trainers import BATCH, KILL_AT, OFFSET, TOTAL, make_loader, write_stores  # noqa: E402

DEADLINE = 300  # seconds for one trainer process (a cold start imports torch and the trainer)


def need(*modules):
    for module in modules:
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed (scripts/install-deps.sh installs it)")


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    r = tmp_path_factory.mktemp("trainers")
    write_stores(r)
    return r


def run(trainer, phases, root, out, data, workers, world=1):
    cmd = [sys.executable, str(HERE / "_trainers.py"), trainer, phases, str(root), str(out), data, str(workers), str(world)]
    r = subprocess.run(cmd, cwd=HERE, capture_output=True, text=True, timeout=DEADLINE)
    assert r.returncode == 0, f"{' '.join(cmd)}: exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}"


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
    assert all(len(ids) == BATCH for ids in per_step)
    from_1 = [sum(i >= OFFSET for i in ids) for ids in per_step]
    if data == "plain":
        assert from_1 == [0] * TOTAL
    else:  # weights 1:1, then 3:1 from step 4, then 1:2 from step 9
        assert sum(from_1[:4]) == 16 and from_1[4:9] == [2] * 5 and abs(sum(from_1[9:]) - 16) <= 1, from_1


@pytest.mark.timeout(3 * DEADLINE)
@pytest.mark.parametrize("data", ["plain", "mixture"])
@pytest.mark.parametrize("workers", [0, 2])
def test_lightning_resumes_bit_identically(root, tmp_path, workers, data):
    need("lightning")
    run("lightning", "full,kill", root, tmp_path, data, workers)
    run("lightning", "resume", root, tmp_path, data, workers)
    check(tmp_path, data, 1)


@pytest.mark.timeout(4 * DEADLINE)
@pytest.mark.parametrize("workers,data", [(2, "mixture"), (0, "plain")])
def test_lightning_ddp_two_ranks_resumes_bit_identically(root, tmp_path, workers, data):
    need("lightning")
    for phase in ("full", "kill", "resume"):
        run("lightning", phase, root, tmp_path, data, workers, world=2)
    check(tmp_path, data, 2)


@pytest.mark.timeout(3 * DEADLINE)
@pytest.mark.parametrize("trainer", ["accelerate", "dcp"])
@pytest.mark.parametrize("workers,data", [(2, "mixture"), (0, "plain")])
def test_accelerate_and_dcp_resume_bit_identically(root, tmp_path, trainer, workers, data):
    need("torch", "accelerate")
    run(trainer, "full,kill", root, tmp_path, data, workers)
    run(trainer, "resume", root, tmp_path, data, workers)
    check(tmp_path, data, 1)


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
