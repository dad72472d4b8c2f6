"""Checkpoint and resume a training run fed by a loaderx mixture, across a kill -9.

A small regression model trains on a weighted mixture of two sources (a clean one and a shifted,
noisier one; weights 3:1, changed to 1:1 at step 25 with ``set_weights``). Every
``--checkpoint-every`` steps it saves the model, the optimizer and ``loader.state_dict()`` with
``torch.save`` (written to a temporary file and renamed, so a kill never leaves half a checkpoint).
A run started with ``--resume`` loads the checkpoint and continues; the loader state carries the
position and the weight change, so the resumed run sees exactly the batches an uninterrupted run
sees.

    python examples/resume.py --workdir /tmp/run              # train (checkpoints in --workdir)
    python examples/resume.py --workdir /tmp/run --resume     # continue from the last checkpoint
    python examples/resume.py --check                         # the test below

``--check`` runs three trainers as separate processes: an uninterrupted one; one killed with
SIGKILL after it trained past its checkpoint at step 20 (its progress since is lost); and one that
resumes from that checkpoint. It asserts that the resumed loss curve equals the uninterrupted
one bit for bit (CPU, one thread, deterministic algorithms). Delivery is ordered
(``ordered=True``), so two workers deliver in step order and each step's batch is the same in both
runs.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

FEATURES, BATCH, LR, CHANGE_AT = 8, 64, 0.01, 25
SOURCES = {"clean": (3000, 0.5, 0.1), "shifted": (1000, -0.3, 0.3)}  # records, bias, noise


def write_stores(root: Path) -> None:
    """One Dense store of features and one of targets per source, seeded."""
    from loaderx import dtypes
    from loaderx.zrecord import DenseWriter

    rng = np.random.default_rng(0)
    w = np.linspace(-1, 1, FEATURES).astype(np.float32)
    for name, (n, bias, noise) in SOURCES.items():
        if (root / f"{name}-y").exists():
            continue
        x = rng.standard_normal((n, FEATURES)).astype(np.float32)
        y = (x @ w + bias + noise * rng.standard_normal(n)).astype(np.float32)
        with DenseWriter(root / f"{name}-x", dtypes.float32, (FEATURES,), "zstd") as wr:
            wr.append(x)
        with DenseWriter(root / f"{name}-y", dtypes.float32, (), "zstd") as wr:
            wr.append(y)


def train(root: Path, steps: int, every: int, resume: bool, hold_after: int | None) -> None:
    import torch

    from loaderx import Allocator, Loader, MixtureSource
    from loaderx.sampler import Sampler
    from loaderx.zrecord import DenseStore

    torch.manual_seed(0)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    model = torch.nn.Sequential(torch.nn.Linear(FEATURES, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    alloc = Allocator("cpu")
    stores = {name: (DenseStore(root / f"{name}-x"), DenseStore(root / f"{name}-y")) for name in SOURCES}
    sources = [
        MixtureSource({"x": [x.bind(alloc)], "y": [y.bind(alloc)]}, weight=weight, mode=Sampler.Mode.CYCLIC, seed=seed)
        for (x, y), weight, seed in zip(stores.values(), (3.0, 1.0), (1, 2))
    ]
    ckpt, log = root / "checkpoint.pt", root / "losses.jsonl"
    losses: list[str] = []
    with Loader.mixture(sources, BATCH, workers=2, prefetch=2, ordered=True) as loader:
        if resume:
            state = torch.load(ckpt)
            model.load_state_dict(state["model"])
            opt.load_state_dict(state["opt"])
            loader.load_state_dict(state["loader"])  # the position and the weight schedule
            losses = state["losses"]
        else:
            loader.set_weights([1.0, 1.0], CHANGE_AT)
        log.write_text("".join(json.dumps(v) + "\n" for v in losses))
        for step in range(loader.step, steps):
            shards = next(loader)  # one shard per source present in the batch
            x = torch.cat([torch.from_dlpack(s["x"]) for s in shards])
            y = torch.cat([torch.from_dlpack(s["y"]) for s in shards])
            loss = torch.nn.functional.mse_loss(model(x).squeeze(1), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(float(loss).hex())  # exact
            with log.open("a") as f:
                f.write(json.dumps(losses[-1]) + "\n")
            if (step + 1) % every == 0:
                tmp = ckpt.with_suffix(".tmp")
                torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "loader": loader.state_dict(),
                            "losses": losses}, tmp)
                os.replace(tmp, ckpt)
            if hold_after is not None and step + 1 == hold_after:
                # Trained past the checkpoint; wait here to be killed (the --check driver does).
                (root / "holding").write_text(str(step + 1))
                while True:
                    time.sleep(1)
    for x, y in stores.values():
        x.close()
        y.close()


def child(args: list[str]) -> subprocess.Popen:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.Popen([sys.executable, __file__, *args], env=env)


def check(work: Path, steps: int) -> None:
    full, killed = work / "full", work / "killed"
    for d in (full, killed):
        d.mkdir(parents=True, exist_ok=True)
        write_stores(d)
    assert child(["--workdir", str(full), "--steps", str(steps)]).wait(timeout=600) == 0
    # Killed after its checkpoint at step 20, having trained on to step 24.
    p = child(["--workdir", str(killed), "--steps", str(steps), "--checkpoint-every", "10", "--hold-after", "24"])
    try:
        deadline = time.monotonic() + 600
        while not (killed / "holding").exists():
            assert p.poll() is None, "the trainer exited before it was killed"
            assert time.monotonic() < deadline, "the trainer never reached step 24"
            time.sleep(0.05)
        os.kill(p.pid, signal.SIGKILL)
        assert p.wait(timeout=60) == -signal.SIGKILL
    finally:
        if p.poll() is None:
            p.kill()
    lost = len((killed / "losses.jsonl").read_text().splitlines())
    assert child(["--workdir", str(killed), "--steps", str(steps), "--resume"]).wait(timeout=600) == 0
    a = [json.loads(v) for v in (full / "losses.jsonl").read_text().splitlines()]
    b = [json.loads(v) for v in (killed / "losses.jsonl").read_text().splitlines()]
    assert len(a) == steps and a == b, f"the resumed curve differs:\n{a}\n{b}"
    print(f"killed at step {lost} (checkpoint at 20), resumed: {steps} losses equal bit for bit "
          f"(first {float.fromhex(a[0]):.5f}, last {float.fromhex(a[-1]):.5f})")
    print("loss curves match bit for bit")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--checkpoint-every", type=int, default=10)
    ap.add_argument("--resume", action="store_true", help="continue from the checkpoint in --workdir")
    ap.add_argument("--hold-after", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--check", action="store_true", help="kill and resume a run; assert the curve is unchanged")
    args = ap.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="loaderx_resume_"))
    work.mkdir(parents=True, exist_ok=True)
    if args.check:
        check(work, args.steps)
        return
    write_stores(work)
    train(work, args.steps, args.checkpoint_every, args.resume, args.hold_after)
    print(f"trained to step {args.steps}; checkpoint and losses in {work}")


if __name__ == "__main__":
    main()
