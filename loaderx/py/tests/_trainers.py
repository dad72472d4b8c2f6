"""Trainers for the kill-and-resume tests of `test_trainers.py`: real Lightning, Accelerate and
`torch.distributed.checkpoint`, each training a small regression on a loaderx `Loader`.

`python _trainers.py ROOT JOB [JOB ...]` runs the jobs one after the other in this process (one
interpreter start for several runs); a job is `TRAINER,PHASE,DATA,WORKERS,WORLD,OUT`:

* TRAINER: `lightning` (the loader is the train dataloader, Lightning's `ModelCheckpoint` saves it
  every `EVERY` steps, `trainer.fit(ckpt_path=...)` resumes), `accelerate`
  (`register_for_checkpointing(loader)`, `save_state` / `load_state`) or `dcp` (the loader is a
  `Stateful` in `dcp.save` / `dcp.load`);
* PHASE: `full` (an uninterrupted run of `TOTAL` steps), `kill` (checkpoints at step `KILL_AT`,
  then exits with `os._exit` before anything else runs: the last job) or `resume` (from that
  checkpoint, to `TOTAL`);
* DATA: `plain` (one store), `mixture` (two sources whose weights change at steps 4 and 9),
  `packed` (a Ragged token store through `Loader.pack(..., mode="first_fit")`: `PACK_ROWS` rows of
  `SEQ_LEN` tokens a step, ids the tokens, features the tokens in fours) or `completion` (the plain
  store with `ordered=False`: steps in completion order);
* FORM (Lightning only, appended to TRAINER as `lightning-iter`): `training_step(self,
  dataloader_iter)`, the step taking its batch from the iterator itself;
* WORLD: processes (Lightning `ddp` on CPU with gloo when 2: then one job per process).

Each rank writes `OUT/PHASE-rank{r}.pt`: the sample ids of every step it trained (in order) and
its final weights (`kill`: the weights the checkpoint holds)."""

import glob
import os
import sys
from pathlib import Path

import numpy as np
import torch

from loaderx import Allocator, Loader, MixtureSource, dtypes
from loaderx.sampler import Sampler
from loaderx.zrecord import DenseStore, DenseWriter, RaggedBatch, RaggedStore, RaggedWriter

SIZES = (64, 40)  # records of source 0 (the plain store) and source 1
OFFSET = 1000  # source k's ids are k * OFFSET + i
BATCH, EVERY, KILL_AT, TOTAL = 8, 3, 6, 12
SCHEDULE = [(4, [3.0, 1.0]), (9, [1.0, 2.0])]
DOCS, DOC_STEP, SEQ_LEN, PACK_ROWS, POOL = 120, 6, 16, 2, 3  # the packed token store and its packing


def write_stores(root):
    rng = np.random.default_rng(0)
    for k, n in enumerate(SIZES):
        with DenseWriter(Path(root) / f"id{k}", dtypes.int64, (), "raw") as w:
            w.append(np.arange(n, dtype=np.int64) + k * OFFSET)
        with DenseWriter(Path(root) / f"x{k}", dtypes.float32, (4,), "raw") as w:
            w.append(rng.standard_normal((n, 4)).astype(np.float32))
    # Token documents of 1-23 tokens (document d: tokens 10 * d + j), some longer than SEQ_LEN.
    docs = [(10 * d + np.arange(1 + (7 * d) % 23)).astype(np.int32) for d in range(DOCS)]
    with RaggedWriter(Path(root) / "tokens", dtypes.int32, 1, "raw") as w:
        w.append(RaggedBatch.from_records(docs))


def to_torch(shards):
    """One step as torch tensors (copies): the ids and the features, shards concatenated."""
    return {
        "id": torch.cat([torch.from_dlpack(s["id"]) for s in shards]),
        "x": torch.cat([torch.from_dlpack(s["x"]) for s in shards]),
    }


def from_packed(batch):
    """A packed batch as the regression's batch: ids the tokens (padding 0), features the tokens
    in fours."""
    tokens = torch.from_dlpack(batch["tokens"]).clone()
    return {"id": tokens.reshape(-1), "x": tokens.reshape(-1, 4).float() / 100}


def make_loader(root, data, workers, rank=0, world=1):
    alloc = Allocator("cpu")
    if data == "packed":
        sampler = Sampler(DOCS, DOC_STEP, Sampler.Mode.CYCLIC, seed=7)
        streams = {"t": [RaggedStore(Path(root) / "tokens").bind(alloc)]}
        loader = Loader(streams, sampler, workers=workers, prefetch=2, ordered=True, process_index=rank,
                        process_count=world)
        return loader.pack("t", SEQ_LEN, PACK_ROWS, mode="first_fit", pool=POOL)

    def streams(k):
        return {name: [DenseStore(Path(root) / f"{name}{k}").bind(alloc)] for name in ("id", "x")}

    kw = dict(workers=workers, prefetch=2, ordered=data != "completion", process_index=rank,
              process_count=world)
    if data in ("plain", "completion"):
        return Loader(streams(0), Sampler(SIZES[0], BATCH, Sampler.Mode.CYCLIC, seed=5), to_torch, **kw)
    sources = [MixtureSource(streams(k), weight=1.0, mode=Sampler.Mode.CYCLIC, seed=3 + k) for k in range(2)]
    return Loader.mixture(sources, BATCH, to_torch, schedule=SCHEDULE, **kw)


def net():
    torch.manual_seed(0)
    return torch.nn.Linear(4, 1)


def loss_of(model, batch):
    return ((model(batch["x"]).squeeze(1) - batch["x"].sum(1)) ** 2).mean()


def optimizer(model):
    return torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def dump(out, phase, rank, ids, model):
    tmp = Path(out) / f".{phase}-rank{rank}.pt"
    torch.save({"ids": ids, "weights": {k: v.detach().clone() for k, v in model.state_dict().items()}}, tmp)
    os.replace(tmp, Path(out) / f"{phase}-rank{rank}.pt")


def lightning(phase, root, out, data, workers, world, form):
    import lightning as L
    from lightning.pytorch.callbacks import ModelCheckpoint

    from loaderx.lightning import TrainedBatches, TrainLoader

    class Net(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.lin = net()
            self.ids = []

        def train_on(self, batch):
            if data == "packed":
                batch = from_packed(batch)
            self.ids.append(batch["id"].tolist())
            return loss_of(self.lin, batch)

        def training_step(self, batch, idx):
            return self.train_on(batch)

        def configure_optimizers(self):
            return optimizer(self)

        def train_dataloader(self):
            t = self.trainer
            loader = make_loader(root, data, workers, t.global_rank, t.world_size)
            return TrainLoader(loader)

        def on_train_batch_end(self, outputs, batch, idx):
            # After every callback's hook, ModelCheckpoint's save (and its barrier) included.
            if phase == "kill" and self.trainer.global_step == KILL_AT:
                dump(out, phase, self.trainer.global_rank, self.ids, self.lin)
                os._exit(0)

    class IterNet(Net):
        def training_step(self, dataloader_iter):
            batch, _, _ = next(dataloader_iter)
            return self.train_on(batch)

    ckdir = Path(out) / ("ckpt-full" if phase == "full" else "ckpt")
    trainer = L.Trainer(
        max_steps=TOTAL, accelerator="cpu", devices=world, strategy="ddp" if world > 1 else "auto",
        logger=False, enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
        callbacks=[TrainedBatches(), ModelCheckpoint(ckdir, "ck-{step}", every_n_train_steps=EVERY, save_top_k=-1)],
    )
    model = IterNet() if form == "iter" else Net()
    ckpt = None
    if phase == "resume":
        (ckpt,) = glob.glob(str(ckdir / f"ck-step={KILL_AT}.ckpt"))
    trainer.fit(model, ckpt_path=ckpt)
    dump(out, phase, trainer.global_rank, model.ids, model.lin)
    trainer.train_dataloader.loader.close()


def loop(phase, out, loader, model, opt, save, load):
    """A plain training loop: `load()` before the first step of `resume`; `save()` right after
    step `KILL_AT` of `kill`, then the process exits."""
    ids = []
    if phase == "resume":
        load()
    for _ in range(loader.step, TOTAL):
        batch = next(loader)
        ids.append(batch["id"].tolist())
        opt.zero_grad()
        loss_of(model, batch).backward()
        opt.step()
        if phase == "kill" and loader.step == KILL_AT:
            save()
            dump(out, phase, 0, ids, model)
            os._exit(0)
    dump(out, phase, 0, ids, model)
    loader.close()


def accelerate(phase, root, out, data, workers):
    from accelerate import Accelerator

    acc = Accelerator(cpu=True)
    model = net()
    opt = optimizer(model)
    model, opt = acc.prepare(model, opt)
    loader = make_loader(root, data, workers)
    acc.register_for_checkpointing(loader)
    ckdir = str(Path(out) / "ckpt")
    loop(phase, out, loader, model, opt, lambda: acc.save_state(ckdir), lambda: acc.load_state(ckdir))


def dcp(phase, root, out, data, workers):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    model = net()
    opt = optimizer(model)
    loader = make_loader(root, data, workers)
    ckdir = str(Path(out) / "ckpt")

    def save():
        m, o = get_state_dict(model, opt)
        dcp.save({"model": m, "optim": o, "loader": loader}, checkpoint_id=ckdir)

    def load():
        m, o = get_state_dict(model, opt)
        state = {"model": m, "optim": o, "loader": loader}
        dcp.load(state, checkpoint_id=ckdir)
        set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])

    loop(phase, out, loader, model, opt, save, load)


def main(root, *jobs):
    torch.set_num_threads(1)
    for job in jobs:
        trainer, phase, data, workers, world, out = job.split(",", 5)
        if trainer.startswith("lightning"):
            form = trainer.partition("-")[2]
            lightning(phase, root, out, data, int(workers), int(world), form)
        elif trainer == "accelerate":
            accelerate(phase, root, out, data, int(workers))
        else:
            dcp(phase, root, out, data, int(workers))


if __name__ == "__main__":
    main(*sys.argv[1:])
