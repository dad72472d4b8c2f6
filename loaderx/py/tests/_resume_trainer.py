"""A trainer for the kill -9 test of `test_resume.py`.

`train`: consumes batches from a 4-worker loader whose transform sleeps a random time, checkpoints
after 12 (`torch.save` of the loader state and the batches consumed so far, published by rename),
and goes on consuming until it is killed. `resume`: loads the checkpoint into a fresh loader,
consumes 30 more batches and writes everything it consumed, with its final state, as JSON."""

import json
import os
import random
import sys
import time

import numpy as np
import torch

from loaderx import Allocator, Loader
from loaderx.sampler import Sampler
from loaderx.zrecord import DenseStore

N, B, CHECKPOINT_AT, MORE = 512, 32, 12, 30


def main(root, ckpt, log, mode, ordered):
    alloc = Allocator("cpu")
    store = DenseStore(os.path.join(root, "id"))
    views = {"id": [store.bind(alloc), store.bind(alloc)]}

    def slow(shards):
        time.sleep(random.uniform(0, 0.003))
        return np.concatenate([np.from_dlpack(s["id"]) for s in shards]).tolist()

    loader = Loader(views, Sampler(N, B, Sampler.Mode.CYCLIC, seed=7), slow, workers=4, prefetch=2,
                    ordered=bool(int(ordered)))
    if mode == "resume":
        ck = torch.load(ckpt)
        loader.load_state_dict(ck["loader"])
        consumed = ck["consumed"] + [next(loader) for _ in range(MORE)]
        with open(log, "w") as f:
            json.dump({"consumed": consumed, "state": loader.state_dict()}, f)
        return
    consumed = []
    while True:
        consumed.append(next(loader))
        if len(consumed) == CHECKPOINT_AT:
            tmp = ckpt + ".tmp"
            torch.save({"loader": loader.state_dict(), "consumed": consumed}, tmp)
            os.replace(tmp, ckpt)


if __name__ == "__main__":
    main(*sys.argv[1:])
