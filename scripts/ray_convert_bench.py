"""Convert throughput with Ray Data: the same job (Oxford-Pet decode + resize, WikiText GPT-2
tokenization) written by loaderx's ZrecordDatasink and by Ray's Lance sink (what `write_lance`
builds, with a shim: see `_lance_shim`), at 1 and 2 Ray
workers (num_cpus), locally. Every output is read back and compared record by record with the
driver's own decode / tokenization before its row is printed.

    python scripts/ray_convert_bench.py --pets 400 --lines 8000 --out /tmp/rcb

Rows/s counts the whole job (the `write_datasink` call: read, transform, write, commit), after a
warm-up job that starts the workers; each cell runs `--repeats` times, alternating the sinks, and
the table keeps the fastest. Not part of the Rust harness.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "examples"))
import ray_convert as rc  # noqa: E402  (its decode_batch / tokenize_batch: the same transforms)

import ray  # noqa: E402

from loaderx import Allocator, dtypes  # noqa: E402
from loaderx.ray import Dense, Ragged, ZrecordDatasink  # noqa: E402
from loaderx.zrecord import DenseStore, RaggedStore  # noqa: E402


def pets_job(files, size, blocks):
    import pyarrow as pa

    breeds = sorted({rc.breed(str(f)) for f in files})

    def to_arrow(batch):
        # Plain Arrow types both sinks take: nested fixed-size lists (Dense [3,S,S] for loaderx).
        out = rc.decode_batch(batch, size, breeds)
        img = pa.array(out["image"].reshape(-1))
        for d in (size, size, 3):  # innermost first: image [3, S, S]
            img = pa.FixedSizeListArray.from_arrays(img, d)
        return pa.table({"image": img, "label": out["label"]})

    ds = ray.data.from_items([{"path": str(f)} for f in files], override_num_blocks=blocks)
    return ds.map_batches(to_arrow, batch_size=16, batch_format="numpy"), breeds


def text_job(lines_src, tokenizer, max_len, blocks):
    import pyarrow as pa

    def to_arrow(batch):
        toks = rc.tokenize_batch(batch, tokenizer, max_len)["tokens"]
        return pa.table({"tokens": pa.array(toks, type=pa.list_(pa.int32()))})

    ds = ray.data.from_items([{"text": t} for t in lines_src], override_num_blocks=blocks)
    return ds.map_batches(to_arrow, batch_size=128, batch_format="numpy")


def _lance_shim() -> None:
    """ray 2.60's Lance sink passes `storage_options_provider=` to `lance.fragment.write_fragments`,
    and `storage_options_provider=` to `LanceDataset.commit`, which no pylance on the registry
    (14.0.2, 14.0.3) takes: `write_lance` fails with a TypeError. Drop the argument when it is
    None (no namespace), in the process that writes or commits."""
    import lance
    import lance.fragment as lf

    if getattr(lf.write_fragments, "_shimmed", False):
        return

    def drop(f):
        def g(*a, storage_options_provider=None, **kw):
            assert storage_options_provider is None
            return f(*a, **kw)

        g._shimmed = True
        return g

    lf.write_fragments = drop(lf.write_fragments)
    lance.LanceDataset.commit = staticmethod(drop(lance.LanceDataset.commit))


def lance_sink(uri: str, min_rows_per_file: int):
    """What `Dataset.write_lance(uri, min_rows_per_file=...)` builds, with the shim in each task."""
    from ray.data._internal.datasource.lance_datasink import LanceDatasink

    class ShimmedLanceDatasink(LanceDatasink):
        def write(self, blocks, ctx):
            _lance_shim()
            return super().write(blocks, ctx)

        def on_write_complete(self, write_result):
            _lance_shim()
            return super().on_write_complete(write_result)

    return ShimmedLanceDatasink(uri, min_rows_per_file=min_rows_per_file)


def verify_loaderx(root, kind, want):
    a = Allocator()
    if kind == "pets":
        with DenseStore(root, column="image") as s:
            assert np.array_equal(dtypes.from_dlpack(s.bind(a)[:]), want["image"]), "images differ"
        with DenseStore(root, column="label") as s:
            assert np.array_equal(np.from_dlpack(s.bind(a)[:]), want["label"]), "labels differ"
    else:
        with RaggedStore(root, column="tokens") as s:
            got = s.bind(a)[:].to_tensors()
            assert len(got) == len(want) and all(np.array_equal(np.from_dlpack(g), w) for g, w in zip(got, want))


def verify_lance(root, kind, want):
    import lance

    t = lance.dataset(root).to_table()
    if kind == "pets":
        img = t.column("image").combine_chunks().flatten().flatten().flatten().to_numpy()
        assert np.array_equal(img.reshape(want["image"].shape), want["image"]), "images differ"
        assert np.array_equal(t.column("label").to_numpy(), want["label"]), "labels differ"
    else:
        got = t.column("tokens").to_pylist()
        assert len(got) == len(want) and all(np.array_equal(np.array(g, np.int32), w) for g, w in zip(got, want))


def main() -> int:
    corpora = Path(os.environ.get("LOADERX_CORPORA", REPO.parent / "shared" / "corpora"))
    ap = argparse.ArgumentParser()
    ap.add_argument("--pets", type=int, default=400)
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--lines", type=int, default=8000)
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--repeats", type=int, default=2, help="runs per cell, alternating the sinks; the table keeps the fastest")
    ap.add_argument("--out", type=Path, default=Path("/tmp/ray-convert-bench"))
    args = ap.parse_args()
    import bpe

    every = sorted((corpora / "oxford-pet").glob("*.jpg"))
    files = every[:: max(1, len(every) // args.pets)][: args.pets]
    # WikiText-2 test (2,891 lines), then the supplement's prose in name order, up to --lines.
    lines: list[str] = []
    for path in [corpora / "text" / "wikitext2" / "wiki.test.raw.txt", *sorted((corpora / "text" / "supplement").glob("*.txt"))]:
        with open(path, encoding="utf-8") as f:
            lines += [line.rstrip("\n") for line in f if line.strip()][: args.lines - len(lines)]
    t = time.perf_counter()
    want_pets = rc.decode_batch({"path": [str(f) for f in files]}, args.size, sorted({rc.breed(str(f)) for f in files}))
    # A tokenizer of its own: GPT2BPE caches each word's merges, and a job handed a warm cache
    # would measure lookups, not tokenization.
    want_text = rc.tokenize_batch({"text": lines}, bpe.GPT2BPE(corpora / "gpt2"), 512)["tokens"]
    print(f"reference (driver, 1 core): {time.perf_counter() - t:.1f} s", flush=True)
    rows = []
    for w in [int(x) for x in args.workers.split(",")]:
        ray.init(num_cpus=w, include_dashboard=False, log_to_driver=False)
        for m in (rc, rc.data2latent, bpe):
            ray.cloudpickle.register_pickle_by_value(m)
        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
        ctx = ray.data.DataContext.get_current()
        ctx.execution_options.preserve_order = True
        ctx.enable_progress_bars = False
        blocks = 4 * w
        ray.data.range(4 * w, override_num_blocks=2 * w).map_batches(lambda b: b).materialize()  # warm workers
        for kind in ("pets", "text"):
            n = len(files) if kind == "pets" else len(want_text)
            for rep, target in [(r, t) for r in range(args.repeats) for t in ("loaderx", "lance")]:
                out = args.out / f"{kind}-{target}-w{w}"
                shutil.rmtree(out, ignore_errors=True)
                ds = (pets_job(files, args.size, blocks)[0] if kind == "pets"
                      else text_job(lines, bpe.GPT2BPE(corpora / "gpt2"), 512, blocks))
                t = time.perf_counter()
                if target == "loaderx":
                    schema = ({"image": Dense(np.uint8, (3, args.size, args.size)), "label": Dense(np.int32)}
                              if kind == "pets" else {"tokens": Ragged(np.int32)})
                    ds.write_datasink(ZrecordDatasink(str(out), schema=schema))
                else:
                    ds.write_datasink(lance_sink(str(out), max(1, n // blocks)))
                secs = time.perf_counter() - t
                want = want_pets if kind == "pets" else want_text
                (verify_loaderx if target == "loaderx" else verify_lance)(str(out), kind, want)
                size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
                row = {"job": kind, "target": target, "workers": w, "rep": rep, "rows": n, "seconds": round(secs, 3),
                       "rows_per_s": round(n / secs, 1), "MiB_written": round(size / 2**20, 2), "verified": True}
                rows.append(row)
                print(json.dumps(row), flush=True)
        ray.shutdown()
    best = {}
    for r in rows:
        k = (r["job"], r["target"], r["workers"])
        if k not in best or r["seconds"] < best[k]["seconds"]:
            best[k] = r
    print(f"| job | target | workers | rows | s (best of {args.repeats}) | rows/s | MiB written |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for r in best.values():
        print(f"| {r['job']} | {r['target']} | {r['workers']} | {r['rows']} | {r['seconds']} | {r['rows_per_s']} | {r['MiB_written']} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
