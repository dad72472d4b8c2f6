#!/usr/bin/env python3
"""What a block shuffle costs in mixing: per-batch class entropy and the mean |id difference|
between consecutive samples, IID against block shuffles, on class-sorted indexes.

Two indexes, both written in class order (record ``i`` has the class of the i-th name):

* ``pet``: the Oxford-IIIT Pet images of ``../shared/corpora/oxford-pet`` (or ``--pet DIR``; a full
  dataset's ``images/`` folder works too) sorted
  by breed, the class read off each file name (``<Breed>_<n>.jpg``, 37 breeds); only the labels
  are used, no image is read.
* ``synthetic``: 10^6 records in 1,000 classes of 1,000 consecutive records.

For each index and order the script draws whole epochs with ``loaderx.sampler.Sampler`` (batch 256,
seed 0) and prints a markdown table:

* ``entropy``: the mean over batches of the batch's class entropy, in bits, and its ratio to IID's;
* ``|Δid|``: the mean |id difference| between consecutive samples of the stream, and its ratio to
  ``len / 3`` (what independent uniform draws give);
* ``blocks/batch``: the distinct blocks a batch touches (IID: distinct records), the reads a reader
  that fetches whole blocks makes per batch without a window buffer;
* ``reads/batch, buffered``: with a window buffer every block is read once per epoch, so
  ``ceil(len / block) / (len / batch)`` block reads per batch (IID: ``batch`` record reads);
* ``window``: the window buffer, ``block x window`` records.

Run it with the wheel of this tree (``pip install .``, as ``scripts/test.sh`` does):
``python scripts/block_mixing.py [--pet DIR] [--epochs-pet 40]``.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
from pathlib import Path

import numpy as np

from loaderx.sampler import Sampler

BATCH = 256
SEED = 0
HERE = Path(__file__).resolve().parent


def pet_labels(folder: Path) -> np.ndarray:
    """The breed of each image, images sorted by (breed, number): a class-sorted index."""
    names = [n for n in os.listdir(folder) if n.lower().endswith(".jpg")]
    if not names:
        sys.exit(f"no <Breed>_<n>.jpg files in {folder}")
    parsed = []
    for n in names:
        m = re.fullmatch(r"(.+)_(\d+)\.jpg", n, flags=re.IGNORECASE)
        if m is None:
            sys.exit(f"unexpected file name {n!r} in {folder}")
        parsed.append((m.group(1), int(m.group(2))))
    parsed.sort()
    breeds = sorted({b for b, _ in parsed})
    index = {b: k for k, b in enumerate(breeds)}
    return np.array([index[b] for b, _ in parsed], dtype=np.int64)


def default_pet() -> Path:
    """``../shared/corpora/oxford-pet`` beside the project (or beside the folder of a worktree)."""
    root = HERE.parent
    for base in (root.parent, root.parent.parent):
        folder = base / "shared" / "corpora" / "oxford-pet"
        if folder.is_dir():
            return folder
    sys.exit("no ../shared/corpora/oxford-pet: give the image folder with --pet DIR")


def stream(n: int, mode: str, steps: int, **kw) -> np.ndarray:
    """The first ``steps`` batches of a sampler, as a (steps, BATCH) int64 array."""
    s = Sampler(n, BATCH, mode, seed=SEED, **kw)
    out = np.empty((steps, BATCH), dtype=np.int64)
    for k in range(steps):
        out[k] = s.next()
    return out


def entropy_bits(labels: np.ndarray, classes: int) -> float:
    counts = np.bincount(labels, minlength=classes)
    p = counts[counts > 0] / labels.size
    return float(-(p * np.log2(p)).sum())


def measure(labels: np.ndarray, ids: np.ndarray, block: int | None) -> dict:
    classes = int(labels.max()) + 1
    ent = float(np.mean([entropy_bits(labels[row], classes) for row in ids]))
    flat = ids.reshape(-1)
    dist = float(np.abs(np.diff(flat)).mean())
    unit = ids if block is None else ids // block
    reads = float(np.mean([np.unique(row).size for row in unit]))
    return {"entropy": ent, "dist": dist, "reads": reads}


def table(name: str, labels: np.ndarray, settings: list[tuple[str, int, int]], epochs: int) -> str:
    n = labels.size
    steps = max(1, (epochs * n) // BATCH)
    classes = int(labels.max()) + 1
    rows = [("IID", None, None, measure(labels, stream(n, "iid", steps), None))]
    for label, block, window in settings:
        ids = stream(n, "block", steps, block=block, window=window)
        rows.append((label, block, window, measure(labels, ids, block)))
    iid = rows[0][3]
    lines = [
        f"**{name}**: {n:,} records in {classes} classes, class-sorted; batch {BATCH}, "
        f"{steps:,} batches ({steps * BATCH / n:.1f} epochs), seed {SEED}.",
        "",
        "| order | block | window | window buffer (records) | entropy (bits) | vs IID | mean abs Δid | vs len/3 "
        "| blocks/batch | reads/batch, buffered |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for label, block, window, m in rows:
        buf = "-" if block is None else f"{min(block * window, n):,}"
        buffered = BATCH if block is None else math.ceil(n / block) / (n / BATCH)
        lines.append(
            f"| {label} | {block or '-'} | {window or '-'} | {buf} | {m['entropy']:.3f} | "
            f"{m['entropy'] / iid['entropy']:.3f} | {m['dist']:,.0f} | {m['dist'] / (n / 3):.3f} | "
            f"{m['reads']:.1f} | {buffered:.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pet", type=Path, default=None, help="the Oxford-IIIT Pet image folder")
    ap.add_argument("--epochs-pet", type=int, default=40, help="epochs drawn on the Pet index")
    ap.add_argument("--epochs-synthetic", type=int, default=1, help="epochs drawn on the 10^6 index")
    args = ap.parse_args()

    pet = pet_labels(args.pet or default_pet())
    # The Pet images' median file is about 100 KB: record_bytes=100_000 gives block 10, window 67.
    pet_shape = Sampler(pet.size, BATCH, "block", record_bytes=100_000)
    m = re.search(r"block: (\d+), window: (\d+)", repr(pet_shape))
    pb, pw = int(m.group(1)), int(m.group(2))
    print(
        table(
            "Oxford-IIIT Pet (the corpus folder)",
            pet,
            [
                ("block (default)", 256, 64),
                ("block (record_bytes=100 KB)", pb, pw),
                ("block", 16, 8),
                ("block", 32, 4),
                ("block", 64, 2),
            ],
            args.epochs_pet,
        )
    )
    print()
    synthetic = np.repeat(np.arange(1000, dtype=np.int64), 1000)
    print(
        table(
            "synthetic",
            synthetic,
            [
                ("block (1, 1): a full permutation", 1, 1),
                ("block (default)", 256, 64),
                ("block (record_bytes=64 B)", 256, 1024),
                ("block", 256, 256),
                ("block", 128, 1024),
                ("block", 64, 256),
                ("block", 16, 1024),
                ("block", 1024, 64),
            ],
            args.epochs_synthetic,
        )
    )


if __name__ == "__main__":
    main()
