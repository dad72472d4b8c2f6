"""The `convert` table: converting corpora with Ray Data into loaderx and into Lance.

Two jobs, the transforms of `examples/ray_convert.py`:

* ``pets``: ``--pets`` Oxford-Pet files (evenly spaced in name order) decoded, resized and
  center-cropped to uint8 ``[3, S, S]`` with the breed as an int32 label;
* ``text``: ``--lines`` non-empty lines (WikiText-2 test, then the supplement's prose in name
  order) GPT-2 BPE-tokenised to int32 arrays of at most ``--max-len`` tokens.

Rows, each at ``--where`` ``local`` (a folder under ``--work``) and ``seaweedfs`` (``s3://convert/``
on a SeaweedFS server on loopback, ``_remote_helpers.Seaweed``):

* ``loaderx``: ``ds.write_datasink(ZrecordDatasink(...))`` (codec zstd, one part per write task);
* ``lance``: Ray's Lance sink, what ``ds.write_lance(uri, min_rows_per_file=rows / tasks)``
  builds, with a shim (``_lance_shim``); at SeaweedFS with Lance's S3 ``storage_options``
  (``aws_endpoint``, ``allow_http``, ...). Absent pylance, a row with a note and no figures;
* ``single-process``: no Ray: one spawned process runs the same transforms batch by batch and
  writes with ``DenseWriter`` / ``RaggedWriter`` (codec zstd): the path without Ray.

The Ray rows run at each of ``--workers`` (``ray.init(num_cpus=w)``; 4 w blocks, each write task
fusing read, transform and write), after a warm-up job that starts the workers and imports what the
write tasks import. The time is the whole ``write_datasink`` call (read, transform, write, commit); rows/s and MiB/s
written (bytes of the output: files, or objects listed under the prefix) follow from it. Peak RSS:
each write task resets its process's peak (``/proc/self/clear_refs`` 5) when it starts and reads
``VmHWM`` when it ends; a row keeps the largest, i.e. the highest resident set of any one worker
process while it ran a write task of the job (the single-process row: of that process over the
whole conversion). Every output is read back whole and compared record by record with the
driver's own decode / tokenisation: ``verified`` is true only when every repeat was compared equal.

Each cell runs ``--repeats`` times, repeat r of every cell before repeat r + 1 of any (the sinks
alternating; a fresh Ray cluster per repeat and worker count); a row gives its fastest repeat and
keeps all of them under ``repeats``.

Usage: python convert_bench.py --pets 400 --lines 8000 --workers 1,2 --where local,seaweedfs \
           --repeats 2 --work DIR --json OUT
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "examples"))
sys.path.insert(0, str(REPO / "loaderx" / "py" / "tests"))
import ray_convert as rc  # noqa: E402  (decode_batch / tokenize_batch: the example's transforms)

BUCKET = "convert"


# ---- peak RSS of a process ------------------------------------------------------------------


def reset_peak() -> None:
    """Resets this process's peak resident set (VmHWM) to its current one (Linux)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def peak_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


class _Peak:
    """Mixed into a sink: each write task records its process's peak RSS in ``rss_dir``."""

    rss_dir = ""

    def write(self, blocks, ctx):
        reset_peak()
        try:
            return super().write(blocks, ctx)
        finally:
            Path(self.rss_dir, f"{os.getpid()}-{uuid.uuid4().hex}").write_text(f"{peak_mib():.1f}")


def _lance_shim() -> None:
    """ray 2.60's Lance sink passes ``storage_options_provider=`` to ``lance.fragment.write_fragments``
    and ``LanceDataset.commit``, which no pylance on the registry (14.0.2, 14.0.3) takes:
    ``write_lance`` fails with a TypeError. Drop the argument when it is None (no namespace), in
    the process that writes or commits."""
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


def loaderx_sink(uri, schema, so, rss_dir):
    from loaderx.ray import ZrecordDatasink

    class Sink(_Peak, ZrecordDatasink):
        pass

    s = Sink(uri, schema=schema, storage_options=so)
    s.rss_dir = rss_dir
    return s


def lance_sink(uri, min_rows_per_file, so, rss_dir):
    """What ``Dataset.write_lance(uri, min_rows_per_file=...)`` builds, with the shim in each task."""
    from ray.data._internal.datasource.lance_datasink import LanceDatasink

    class Sink(_Peak, LanceDatasink):
        def write(self, blocks, ctx):
            _lance_shim()
            return super().write(blocks, ctx)

        def on_write_complete(self, write_result):
            _lance_shim()
            return super().on_write_complete(write_result)

    s = Sink(uri, min_rows_per_file=min_rows_per_file, storage_options=so)
    s.rss_dir = rss_dir
    return s


def lance_options(so):
    """Lance's (object_store's) S3 options for the server of loaderx's ``so``."""
    return {"aws_endpoint": so["endpoint"], "aws_region": so["region"], "allow_http": "true",
            "aws_access_key_id": so["access_key_id"], "aws_secret_access_key": so["secret_access_key"]}


# ---- the jobs -----------------------------------------------------------------------------------


def to_arrow_pets(batch, size, breeds):
    import pyarrow as pa

    out = rc.decode_batch(batch, size, breeds)
    img = pa.array(out["image"].reshape(-1))
    for d in (size, size, 3):  # nested fixed-size lists, innermost first: image [3, S, S]
        img = pa.FixedSizeListArray.from_arrays(img, d)
    return pa.table({"image": img, "label": out["label"]})


def to_arrow_text(batch, tokenizer, max_len):
    import pyarrow as pa

    toks = rc.tokenize_batch(batch, tokenizer, max_len)["tokens"]
    return pa.table({"tokens": pa.array(toks, type=pa.list_(pa.int32()))})


def ray_job(src, blocks):
    import ray

    if src["job"] == "pets":
        ds = ray.data.from_items([{"path": p} for p in src["files"]], override_num_blocks=blocks)
        return ds.map_batches(to_arrow_pets, fn_kwargs={"size": src["size"], "breeds": src["breeds"]},
                              batch_size=16, batch_format="numpy")
    import bpe

    # A tokenizer per job: GPT2BPE caches each word's merges; a warm cache would time lookups.
    ds = ray.data.from_items([{"text": t} for t in src["lines"]], override_num_blocks=blocks)
    return ds.map_batches(to_arrow_text, fn_kwargs={"tokenizer": bpe.GPT2BPE(src["gpt2"]), "max_len": src["max_len"]},
                          batch_size=128, batch_format="numpy")


def single_process(src, uri, so, queue):
    """The baseline, in a spawned process: the same transforms, batch by batch, into the writers."""
    try:
        from loaderx.zrecord import DenseWriter, RaggedBatch, RaggedWriter

        reset_peak()
        t = time.perf_counter()
        if src["job"] == "pets":
            s = src["size"]
            with DenseWriter(f"{uri}/image", np.uint8, (3, s, s), "zstd", storage_options=so) as wi, \
                    DenseWriter(f"{uri}/label", np.int32, (), "zstd", storage_options=so) as wl:
                for i in range(0, len(src["files"]), 16):
                    out = rc.decode_batch({"path": src["files"][i:i + 16]}, s, src["breeds"])
                    wi.append(out["image"])
                    wl.append(out["label"])
        else:
            import bpe

            tok = bpe.GPT2BPE(src["gpt2"])
            with RaggedWriter(f"{uri}/tokens", np.int32, 1, "zstd", storage_options=so) as w:
                for i in range(0, len(src["lines"]), 128):
                    toks = rc.tokenize_batch({"text": src["lines"][i:i + 128]}, tok, src["max_len"])["tokens"]
                    lens = np.array([len(x) for x in toks], np.int64)
                    cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
                    w.append(RaggedBatch(np.concatenate(toks), cu, lens.reshape(-1, 1).astype(np.uint64)))
        queue.put({"seconds": time.perf_counter() - t, "peaks": [peak_mib()]})
    except BaseException as e:  # noqa: BLE001 - reported as the row's error
        queue.put({"error": f"{type(e).__name__}: {e}"})


# ---- reading back -------------------------------------------------------------------------------


def verify(row, uri, so, job, want):
    """Raises unless every record of the output at ``uri`` equals ``want``."""
    from loaderx import Allocator, dtypes
    from loaderx.zrecord import DenseStore, RaggedStore

    if row == "lance":
        import lance

        t = lance.dataset(uri, storage_options=lance_options(so) if so else None).to_table()
        if job == "pets":
            img = t.column("image").combine_chunks().flatten().flatten().flatten().to_numpy()
            assert np.array_equal(img.reshape(want["image"].shape), want["image"]), "images differ"
            assert np.array_equal(t.column("label").to_numpy(), want["label"]), "labels differ"
        else:
            got = t.column("tokens").to_pylist()
            assert len(got) == len(want), f"{len(got)} token records, {len(want)} expected"
            assert all(np.array_equal(np.array(g, np.int32), w) for g, w in zip(got, want)), "tokens differ"
        return
    a = Allocator()

    def store(kind, column):
        if row == "loaderx":  # a dataset of parts
            return kind(uri, column=column, storage_options=so)
        return kind(f"{uri}/{column}", storage_options=so)

    if job == "pets":
        with store(DenseStore, "image") as s:
            assert np.array_equal(dtypes.from_dlpack(s.bind(a)[:]), want["image"]), "images differ"
        with store(DenseStore, "label") as s:
            assert np.array_equal(np.from_dlpack(s.bind(a)[:]), want["label"]), "labels differ"
    else:
        with store(RaggedStore, "tokens") as s:
            got = s.bind(a)[:].to_tensors()
            assert len(got) == len(want), f"{len(got)} token records, {len(want)} expected"
            assert all(np.array_equal(np.from_dlpack(g), w) for g, w in zip(got, want)), "tokens differ"


def written_bytes(uri, so):
    if not so:
        return sum(p.stat().st_size for p in Path(uri).rglob("*") if p.is_file())
    import obstore
    from obstore.store import S3Store

    st = S3Store(BUCKET, endpoint=so["endpoint"], region=so["region"], access_key_id=so["access_key_id"],
                 secret_access_key=so["secret_access_key"], client_options={"allow_http": True})
    prefix = uri[len(f"s3://{BUCKET}/"):] + "/"
    return sum(o["size"] for batch in obstore.list(st, prefix=prefix) for o in batch)


# ---- the cells ----------------------------------------------------------------------------------


def run_once(row, src, want, where, so, workers, rep, work):
    """One repeat of one cell: the conversion timed, its output measured and verified."""
    name = f"{src['job']}-{row}-w{workers}-r{rep}"
    uri = f"s3://{BUCKET}/{name}" if so else str(work / name)
    rss_dir = Path(tempfile.mkdtemp(dir=work, prefix="rss-"))
    out = {"rep": rep}
    try:
        if row == "single-process":
            ctx = mp.get_context("spawn")
            q = ctx.Queue()
            p = ctx.Process(target=single_process, args=(src, uri, so, q))
            p.start()
            got = q.get(timeout=1800)
            p.join(timeout=60)
            if "error" in got:
                raise RuntimeError(got["error"])
            secs, peaks = got["seconds"], got["peaks"]
        else:
            blocks = 4 * workers
            ds = ray_job(src, blocks)
            if row == "loaderx":
                import loaderx.ray as lr

                schema = ({"image": lr.Dense(np.uint8, (3, src["size"], src["size"])), "label": lr.Dense(np.int32)}
                          if src["job"] == "pets" else {"tokens": lr.Ragged(np.int32)})
                sink = loaderx_sink(uri, schema, so, str(rss_dir))
            else:
                sink = lance_sink(uri, max(1, len(want if src["job"] == "text" else want["label"]) // blocks),
                                  lance_options(so) if so else None, str(rss_dir))
            t = time.perf_counter()
            ds.write_datasink(sink)
            secs = time.perf_counter() - t
            peaks = [float(f.read_text()) for f in rss_dir.iterdir()]
        nbytes = written_bytes(uri, so)
        verify(row, uri, so, src["job"], want)
        n = src["rows"]
        out.update({"seconds": round(secs, 3), "rows_per_s": round(n / secs, 1),
                    "mib_written": round(nbytes / 2**20, 3), "mib_s": round(nbytes / 2**20 / secs, 2),
                    "peak_rss_mib": round(max(peaks), 1) if peaks else None, "rss_tasks": len(peaks), "verified": True})
    except Exception as e:  # noqa: BLE001 - the repeat's error, kept in its row
        out.update({"verified": False, "error": f"{type(e).__name__}: {e}"[:400]})
    finally:
        shutil.rmtree(rss_dir, ignore_errors=True)
        if not so:
            shutil.rmtree(uri, ignore_errors=True)
    print(json.dumps({"row": row, "job": src["job"], "where": where, "workers": workers, **out}),
          file=sys.stderr, flush=True)
    return out


def cell_row(row, job, where, workers, n, reps):
    """One table row from a cell's repeats: the fastest verified one's figures, all repeats kept."""
    base = {"row": row, "job": job, "where": where, "workers": workers, "rows": n, "repeats": reps}
    ok = [r for r in reps if r.get("verified")]
    if len(ok) < len(reps):
        return {**base, "verified": False, "error": next(r["error"] for r in reps if "error" in r)}
    best = min(ok, key=lambda r: r["seconds"])
    keys = ("seconds", "rows_per_s", "mib_written", "mib_s", "peak_rss_mib")
    return {**base, **{k: best[k] for k in keys}, "peak_rss_mib": max(r["peak_rss_mib"] or 0 for r in ok),
            "rows_per_s_each": " / ".join(f"{r['rows_per_s']:.0f}" for r in reps), "verified": True}


def sources(a):
    import bpe

    every = sorted(Path(a.pets_dir).glob("*.jpg"))
    if not every:
        raise SystemExit(f"no .jpg under {a.pets_dir}")
    files = [str(f) for f in every[:: max(1, len(every) // a.pets)][: a.pets]]
    lines: list[str] = []
    text = Path(a.text_dir)
    for path in [text / "wikitext2" / "wiki.test.raw.txt", *sorted((text / "supplement").glob("*.txt"))]:
        with open(path, encoding="utf-8") as f:
            lines += [line.rstrip("\n") for line in f if line.strip()][: a.lines - len(lines)]
    breeds = sorted({rc.breed(f) for f in files})
    pets = {"job": "pets", "files": files, "size": a.size, "breeds": breeds, "rows": len(files)}
    t = time.perf_counter()
    want_pets = rc.decode_batch({"path": files}, a.size, breeds)
    want_text = rc.tokenize_batch({"text": lines}, bpe.GPT2BPE(a.gpt2), a.max_len)["tokens"]
    print(f"convert: references in {time.perf_counter() - t:.1f} s", file=sys.stderr, flush=True)
    # Empty tokenisations are dropped by the transform: the text job's rows are its records.
    text_src = {"job": "text", "lines": lines, "gpt2": str(a.gpt2), "max_len": a.max_len, "rows": len(want_text)}
    return [(pets, want_pets), (text_src, want_text)]


def main() -> int:
    corpora = Path(os.environ.get("LOADERX_CORPORA", REPO.parent / "shared" / "corpora"))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pets", type=int, default=400, help="images (evenly spaced in name order)")
    ap.add_argument("--size", type=int, default=128, help="image side after resize + center crop")
    ap.add_argument("--lines", type=int, default=8000, help="text lines")
    ap.add_argument("--max-len", type=int, default=512)
    ap.add_argument("--workers", default="1,2", help="Ray CPUs of the Ray rows")
    ap.add_argument("--where", default="local,seaweedfs")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--pets-dir", type=Path, default=corpora / "oxford-pet")
    ap.add_argument("--text-dir", type=Path, default=corpora / "text")
    ap.add_argument("--gpt2", type=Path, default=None, help="GPT-2 BPE files (default: TEXT_DIR/../gpt2)")
    ap.add_argument("--work", type=Path, default=None)
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args()
    a.gpt2 = a.gpt2 or a.text_dir.parent / "gpt2"
    workers = [int(w) for w in a.workers.split(",")]
    wheres = a.where.split(",")
    try:
        import lance  # noqa: F401

        lance_missing = None
    except ImportError:
        lance_missing = "not measured: pylance not installed (LOADERX_INSTALL_PEERS=1 installs it)"
    srcs = sources(a)
    rows: list[dict] = []
    servers = {"local": None}
    s3 = None
    if "seaweedfs" in wheres:
        from _remote_helpers import Seaweed

        try:
            s3 = Seaweed()
            s3.bucket(BUCKET)
            servers["seaweedfs"] = s3.options()
        except RuntimeError as e:
            for src, _ in srcs:
                rows.append({"row": "loaderx", "job": src["job"], "where": "seaweedfs", "note": f"not measured: {e}"})
    wheres = [w for w in wheres if w in servers]
    with tempfile.TemporaryDirectory(dir=a.work, prefix="convert-") as tmp:
        work = Path(tmp)
        try:
            rows += cells(a, srcs, workers, wheres, servers, lance_missing, work)
        finally:
            if s3 is not None:
                s3.stop()
    for r in rows:
        print(json.dumps({k: v for k, v in r.items() if k != "repeats"}))
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))
    return 0 if all(r.get("verified") is not False for r in rows) else 1


def _warm(batch):
    import importlib

    for m in ("loaderx.ray", "pyarrow", "PIL.Image", "lance", "lance.fragment"):
        try:
            importlib.import_module(m)
        except ImportError:
            pass
    return batch


def cells(a, srcs, workers, wheres, servers, lance_missing, work):
    """Every cell's rows. Repeat r of every cell runs before repeat r + 1 of any (the single-process
    cells, then a Ray cluster per worker count), so a change in the machine's load over the run
    falls on all rows alike."""
    targets = ["loaderx"] + ([] if lance_missing else ["lance"])
    reps: dict[tuple, list] = {}
    for rep in range(a.repeats):
        for where in wheres:
            for src, want in srcs:
                key = ("single-process", src["job"], where, 1)
                reps.setdefault(key, []).append(run_once("single-process", src, want, where, servers[where], 1, rep, work))
        for w in workers:
            ray_repeat(rep, w, srcs, wheres, servers, targets, reps, work)
    rows = []
    for (row, job, where, w), got in reps.items():
        src = next(s for s, _ in srcs if s["job"] == job)
        rows.append(cell_row(row, job, where, w, src["rows"], got))
        if lance_missing and row == "loaderx":
            rows.append({"row": "lance", "job": job, "where": where, "workers": w, "rows": src["rows"],
                         "verified": None, "note": lance_missing})
    return rows


def ray_repeat(rep, w, srcs, wheres, servers, targets, reps, work):
    """Repeat ``rep`` of every Ray cell at ``w`` workers, on a Ray cluster of its own."""
    import bpe
    import ray

    import data2latent

    ray.init(num_cpus=w, include_dashboard=False, log_to_driver=False)
    try:
        for m in (rc, data2latent, bpe, sys.modules[__name__]):
            ray.cloudpickle.register_pickle_by_value(m)
        ctx = ray.data.DataContext.get_current()
        ctx.execution_options.preserve_order = True
        ctx.enable_progress_bars = False
        # Warm-up: start the workers and import what the write tasks import, untimed.
        ray.data.range(4 * w, override_num_blocks=4 * w).map_batches(_warm, batch_size=1).materialize()
        for where in wheres:
            for src, want in srcs:
                for t in targets:
                    out = run_once(t, src, want, where, servers[where], w, rep, work)
                    reps.setdefault((t, src["job"], where, w), []).append(out)
    finally:
        ray.shutdown()


if __name__ == "__main__":
    raise SystemExit(main())
