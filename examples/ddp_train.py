"""Linear regression trained with DistributedDataParallel on CPU (gloo), fed by loaderx.

Every process builds the same Loader over the same store (one Sampler: the global batch, mode and
seed) with its own ``process_index``; each receives its contiguous slice of every global batch, and
DDP averages the gradients, so the run equals one process training on the whole global batch.

    python examples/ddp_train.py                 # 2 processes (re-launched under torchrun)
    python examples/ddp_train.py --check         # and assert the loss curve equals a 1-process run

Under an existing launcher (``torchrun --nproc_per_node=N examples/ddp_train.py ...``) it trains
on that group. ``--workdir`` holds the store (written once) and the curves.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

N, FEATURES, BATCH, LR = 4096, 8, 64, 0.05


def write_store(root: Path) -> None:
    from loaderx import dtypes
    from loaderx.zrecord import DenseWriter

    if (root / "xy").exists():
        return
    rng = np.random.default_rng(0)
    x = rng.standard_normal((N, FEATURES)).astype(np.float32)
    w = np.arange(1, FEATURES + 1, dtype=np.float32) / FEATURES
    y = x @ w + 0.5 + 0.1 * rng.standard_normal(N).astype(np.float32)
    # One record = the features and the target.
    with DenseWriter(root / "xy", dtypes.float32, (FEATURES + 1,), "zstd") as wr:
        wr.append(np.concatenate([x, y[:, None]], axis=1))


def train(root: Path, steps: int, rank: int, world: int, ddp: bool) -> list[float]:
    """The loss of every global batch (the mean over all processes), in step order."""
    import torch

    from loaderx import Allocator, Loader
    from loaderx.distributed import check_consistent
    from loaderx.sampler import Sampler
    from loaderx.zrecord import DenseStore

    torch.manual_seed(0)
    model: torch.nn.Module = torch.nn.Linear(FEATURES, 1)
    if ddp:
        model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    store = DenseStore(root / "xy")
    alloc = Allocator("cpu")
    sampler = Sampler(len(store), BATCH, Sampler.Mode.CYCLIC, seed=1)
    curve = []
    with Loader({"xy": [store.bind(alloc)]}, sampler, workers=1, process_index=rank, process_count=world) as loader:
        if ddp:
            check_consistent(loader)
        for _ in range(steps):
            xy = torch.from_dlpack(loader.next()[0]["xy"])
            x, y = xy[:, :FEATURES], xy[:, FEATURES]
            loss = torch.nn.functional.mse_loss(model(x).squeeze(1), y)
            opt.zero_grad()
            loss.backward()  # DDP all-reduces (averages) the gradients here
            opt.step()
            global_loss = loss.detach().clone()
            if ddp:
                torch.distributed.all_reduce(global_loss)
                global_loss /= world
            curve.append(float(global_loss))
    store.close()
    alloc.close()
    # DDP's reducer holds the process group and sits in reference cycles, so without a collection
    # here the group's last reference can die during interpreter shutdown, after
    # destroy_process_group, where gloo's teardown may abort the process.
    del model, opt
    gc.collect()
    return curve


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--check", action="store_true", help="assert the curve equals a single-process run")
    args = ap.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="ddp_train_"))
    workdir.mkdir(parents=True, exist_ok=True)

    if "RANK" not in os.environ:
        # Not under a launcher: write the store once, then re-launch on args.nproc processes.
        write_store(workdir)
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={args.nproc}",
               __file__, "--steps", str(args.steps), "--workdir", str(workdir)]
        env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
        subprocess.run(cmd, check=True, env=env)
        ddp_curve = json.loads((workdir / "curve_ddp.json").read_text())
        print("DDP loss:", " ".join(f"{v:.5f}" for v in ddp_curve))
        if args.check:
            single = train(workdir, args.steps, 0, 1, ddp=False)
            print("1-process loss:", " ".join(f"{v:.5f}" for v in single))
            np.testing.assert_allclose(ddp_curve, single, rtol=1e-5, atol=1e-6)
            print(f"loss curves match over {args.steps} steps ({args.nproc} processes vs 1)")
        return

    import torch.distributed as dist

    from loaderx.distributed import torch_process

    dist.init_process_group("gloo")
    rank, world = torch_process()
    curve = train(workdir, args.steps, rank, world, ddp=True)
    if rank == 0:
        (workdir / "curve_ddp.json").write_text(json.dumps(curve))
    # Leave together: a rank that tears gloo down while its peer still has the pair open can abort
    # the peer ("terminate called without an active exception").
    dist.barrier()
    dist.destroy_process_group()
    # Leave without running interpreter finalization: the run's outputs are written and the group
    # is gone, and finalization order (gloo's threads against torch's atexit hooks) is what has
    # aborted a rank here after a successful run ("terminate called without an active exception").
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
