"""Corpora -> loaderx datasets of parts with Ray Data -> the loaderx Loader.

* Oxford-Pet: JPEG files listed as rows, decoded and resized by Ray tasks to uint8 [3, S, S]
  (a fixed-shape tensor column) with the breed as an int32 label -> Dense containers.
* WikiText: lines read by Ray, GPT-2 BPE-tokenized by Ray tasks to int32 token arrays of any
  length (a variable-shape tensor column) -> a Ragged container.

Each write task writes its parts straight into the dataset root; the job commits one version. Then
one Loader reads images and labels, another packs the tokens into fixed-length sequences.

    python examples/ray_convert.py                                  # 200 pets, 2,000 lines, 2 workers
    python examples/ray_convert.py --pets 1065 --lines 20000 --out /tmp/conv --check

`--check` reads every record back and compares it with the same decode / tokenization run in this
process. The last line printed is a JSON summary. See docs/ray.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "data2latent"))
sys.path.insert(0, str(HERE / "word2vec"))
import bpe  # noqa: E402
import data2latent  # noqa: E402

import ray  # noqa: E402

from loaderx import Allocator, Loader, dtypes  # noqa: E402
from loaderx.ray import Dense, Ragged, ZrecordDatasink  # noqa: E402
from loaderx.sampler import Sampler  # noqa: E402
from loaderx.zrecord import DenseStore, RaggedStore  # noqa: E402


def breed(path: str) -> str:
    return Path(path).stem.rsplit("_", 1)[0]


def decode_batch(batch: dict, size: int, breeds: list[str]) -> dict:
    """Rows of file paths -> uint8 [3, size, size] images (data2latent's decode + resize/crop)
    and int32 breed labels."""
    paths = list(batch["path"])
    images = np.stack([data2latent.resize_crop(data2latent.decode(Path(p)), size) for p in paths])
    labels = np.array([breeds.index(breed(p)) for p in paths], dtype=np.int32)
    return {"image": images, "label": labels}


def tokenize_batch(batch: dict, tokenizer: bpe.GPT2BPE, max_len: int) -> dict:
    """Lines -> int32 GPT-2 token arrays of any length (at most max_len; empty ones dropped)."""
    toks = [np.array(tokenizer.encode(str(t))[:max_len], dtype=np.int32) for t in batch["text"]]
    return {"tokens": [t for t in toks if len(t)]}


def convert_pets(files: list[Path], out: str, size: int, workers: int) -> dict:
    breeds = sorted({breed(str(f)) for f in files})
    ds = ray.data.from_items([{"path": str(f)} for f in files], override_num_blocks=2 * workers)
    ds = ds.map_batches(decode_batch, fn_kwargs={"size": size, "breeds": breeds}, batch_size=16)
    sink = ZrecordDatasink(out, schema={"image": Dense(np.uint8, (3, size, size)), "label": Dense(np.int32)},
                           codec={"image": "zstd", "label": "raw"})
    t = time.perf_counter()
    ds.write_datasink(sink)
    return {"seconds": time.perf_counter() - t, "version": sink.result["version"],
            "records": sink.result["records"], "parts": len(sink.parts), "breeds": breeds}


def convert_text(text: Path, bpe_dir: Path, out: str, lines: int, max_len: int, workers: int) -> dict:
    ds = ray.data.read_text(str(text), override_num_blocks=2 * workers).limit(lines)
    # A plain function (not an actor pool): Ray fuses read, tokenize and write into one task per
    # block. Actors would each hold a CPU for the job's life, and with as many actors as CPUs the
    # write tasks would never be scheduled. The tokenizer's tables travel with the function.
    ds = ds.map_batches(tokenize_batch, fn_kwargs={"tokenizer": bpe.GPT2BPE(bpe_dir), "max_len": max_len},
                        batch_size=128)
    # Tokens always as Ragged: a batch whose lines happen to share a length reaches the sink as a
    # fixed-shape tensor, which the explicit schema stores as Ragged records all the same.
    sink = ZrecordDatasink(out, schema={"tokens": Ragged(np.int32, 1)})
    t = time.perf_counter()
    ds.write_datasink(sink)
    return {"seconds": time.perf_counter() - t, "version": sink.result["version"],
            "records": sink.result["records"], "parts": len(sink.parts)}


def train(pets: str, text: str, steps: int) -> dict:
    """A few loader steps over each dataset: images and labels as one Dense batch; tokens packed."""
    alloc = Allocator()
    image, label = DenseStore(pets, column="image"), DenseStore(pets, column="label")
    streams = {"image": [image.bind(alloc)], "label": [label.bind(alloc)]}
    batch = min(32, len(image))
    seen_labels = set()
    pixels = 0.0
    with Loader(streams, Sampler(len(image), batch, Sampler.Mode.CYCLIC, seed=0), workers=2) as loader:
        for _, shards in zip(range(steps), loader):
            x = dtypes.from_dlpack(shards[0]["image"])
            assert x.shape == (batch, *image.item_shape)
            pixels += float(x.mean())
            seen_labels.update(np.from_dlpack(shards[0]["label"]).tolist())
    tokens = RaggedStore(text, column="tokens")
    packed_tokens = 0
    with Loader({"tokens": [tokens.bind(alloc)]}, Sampler(len(tokens), 16, Sampler.Mode.CYCLIC, seed=0),
                workers=2, ordered=True).pack("tokens", 128, 8) as loader:
        for _, b in zip(range(steps), loader):
            seg = np.from_dlpack(b["segment_ids"])
            assert seg.shape == (8, 128)
            packed_tokens += int((seg > 0).sum())
    return {"steps": steps, "mean_pixel": pixels / steps, "labels_seen": len(seen_labels),
            "packed_tokens": packed_tokens}


def check(files: list[Path], text: Path, bpe_dir: Path, lines: int, max_len: int, size: int, pets: str,
          out_text: str) -> str:
    """Every record against the same work done here, in order."""
    breeds = sorted({breed(str(f)) for f in files})
    want = decode_batch({"path": [str(f) for f in files]}, size, breeds)
    alloc = Allocator()
    with DenseStore(pets, column="image") as s:
        assert np.array_equal(dtypes.from_dlpack(s.bind(alloc)[:]), want["image"]), "images differ"
    with DenseStore(pets, column="label") as s:
        assert np.array_equal(np.from_dlpack(s.bind(alloc)[:]), want["label"]), "labels differ"
    with open(text, encoding="utf-8") as f:
        src = [line.rstrip("\n") for _, line in zip(range(lines), f)]
    toks = tokenize_batch({"text": src}, bpe.GPT2BPE(bpe_dir), max_len)["tokens"]
    with RaggedStore(out_text, column="tokens") as s:
        got = s.bind(alloc)[:].to_tensors()
        assert len(got) == len(toks), f"{len(got)} token records, {len(toks)} expected"
        for i, (g, w) in enumerate(zip(got, toks)):
            assert np.array_equal(np.from_dlpack(g), w), f"token record {i} differs"
    return "equal"


def main(argv=None) -> int:
    repo = HERE.parent
    corpora = Path(os.environ.get("LOADERX_CORPORA", repo.parent / "shared" / "corpora"))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pets", type=int, default=200, help="images (N files evenly spaced in name order)")
    ap.add_argument("--size", type=int, default=64, help="image side after resize + center crop")
    ap.add_argument("--lines", type=int, default=2000, help="WikiText lines")
    ap.add_argument("--max-len", type=int, default=512, help="tokens kept per line")
    ap.add_argument("--workers", type=int, default=2, help="Ray CPUs (write tasks run on them)")
    ap.add_argument("--steps", type=int, default=8, help="loader steps over each dataset")
    ap.add_argument("--out", type=Path, default=None, help="output root (default: a temporary folder)")
    ap.add_argument("--check", action="store_true", help="compare every record with the source")
    args = ap.parse_args(argv)

    every = sorted((corpora / "oxford-pet").glob("*.jpg"))
    files = every[:: max(1, len(every) // max(1, args.pets))][: args.pets]  # spread over the breeds
    text = corpora / "text" / "wikitext2" / "wiki.test.raw.txt"
    bpe_dir = corpora / "gpt2"
    if not files or not text.exists():
        print(f"corpora not found under {corpora} (set LOADERX_CORPORA)", file=sys.stderr)
        return 2
    out = args.out or Path(tempfile.mkdtemp(prefix="ray-convert-"))
    pets, toks = str(out / "pets"), str(out / "wikitext")

    ray.init(num_cpus=args.workers, include_dashboard=False, log_to_driver=False)
    # The helpers come from this folder, which Ray's workers cannot import: send them by value.
    for m in (bpe, data2latent, sys.modules[__name__]):
        ray.cloudpickle.register_pickle_by_value(m)
    ctx = ray.data.DataContext.get_current()
    ctx.execution_options.preserve_order = True  # records in source order
    ctx.enable_progress_bars = False
    try:
        summary = {"pets": convert_pets(files, pets, args.size, args.workers),
                   "text": convert_text(text, bpe_dir, toks, args.lines, args.max_len, args.workers)}
    finally:
        ray.shutdown()
    for k in ("pets", "text"):
        s = summary[k]
        s["rows_per_s"] = s["records"] / s["seconds"]
        print(f"{k}: {s['records']} records in {s['parts']} parts, version {s['version']}, "
              f"{s['seconds']:.2f} s ({s['rows_per_s']:.0f} rows/s)")
    summary["pets"]["breeds"] = len(summary["pets"]["breeds"])
    summary["train"] = train(pets, toks, args.steps)
    if args.check:
        summary["check"] = check(files, text, bpe_dir, args.lines, args.max_len, args.size, pets, toks)
    summary["out"] = str(out)
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
