"""Shared by the data-parallel helpers: the stores they read and the batches they compare."""

from pathlib import Path

import numpy as np

from loaderx import Allocator, Loader, dtypes
from loaderx.sampler import Sampler
from loaderx.zrecord import DenseStore, DenseWriter, RaggedBatch, RaggedStore, RaggedWriter

N = 600
BATCH = 24
VIEWS = 2
MODES = {"SEQUENTIAL": Sampler.Mode.SEQUENTIAL, "IID": Sampler.Mode.IID, "CYCLIC": Sampler.Mode.CYCLIC}


def write_stores(root):
    """A Dense store of float32 (3,) rows and a Ragged int32 store under `root`."""
    root = Path(root)
    rng = np.random.default_rng(11)
    with DenseWriter(root / "x", dtypes.float32, (3,), "zstd") as w:
        w.append(rng.standard_normal((N, 3)).astype(np.float32))
    with RaggedWriter(root / "tok", dtypes.int32, 1, "zstd") as w:
        w.append(RaggedBatch.from_records([np.arange(i % 7 + 1, dtype=np.int32) * i for i in range(N)]))


class Streams:
    """The stores opened and bound `VIEWS` times each."""

    def __init__(self, root, views=VIEWS):
        root = Path(root)
        self.alloc = Allocator("cpu")
        self.stores = [DenseStore(root / "x"), RaggedStore(root / "tok")]
        self.streams = {
            "x": [self.stores[0].bind(self.alloc) for _ in range(views)],
            "tok": [self.stores[1].bind(self.alloc) for _ in range(views)],
        }

    def loader(self, mode, seed=3, step=0, workers=0, index=0, count=1):
        s = Sampler(N, BATCH, MODES[mode], seed=seed)
        s.seek(step)
        return Loader(self.streams, s, workers=workers, prefetch=2, process_index=index, process_count=count)


def flat(shards):
    """One step's shards as plain arrays: Dense bytes, Ragged values bytes, Ragged shapes."""
    x = np.concatenate([np.from_dlpack(s["x"]) for s in shards])
    vals = np.concatenate([np.from_dlpack(s["tok"].values) for s in shards])
    shapes = np.concatenate([np.from_dlpack(s["tok"].shapes).reshape(-1) for s in shards])
    return x.view(np.uint8).tobytes(), vals.view(np.uint8).tobytes(), shapes.tolist()


def join(parts):
    """The per-process `flat` results of one step, concatenated in process order."""
    return (b"".join(p[0] for p in parts), b"".join(p[1] for p in parts), sum((p[2] for p in parts), []))
