"""The `scale` table: stores of many tiny records, as a dataset of parts and as one container.

Records (each encodes its global id ``i``, so a batch is verified by recomputing it):

* ``dense``: int32 ``[2]``, ``(i mod 2^31, i div 2^31)``;
* ``ragged``: uint16 1-D of 1..8 values, its length and values from ``h = i * 0x9E3779B97F4A7C15``
  (mod 2^64): length ``1 + (h >> 61)``, value ``k`` the 16 bits of ``h`` at ``48 - 16 * (k % 4)``
  xor ``k`` (the top bits depend on every bit of ``i``).

For each size (``--sizes``) and layout the same records are written as a dataset of parts
(``--part-records`` records a part, one commit) and as ONE container (the eager-index baseline),
codec ``raw``, locally and, with ``--remote``, on a SeaweedFS server on loopback (for sizes up to
``--remote-max``). Every cell runs in a fresh process (``--cell``): VmRSS from /proc/self/status
after the imports, open time and RSS after open, first-batch latency (256 random ids), then 1,000
random batches of 256, and more until 0.5 s of gathers (steady gathers/s over the gather calls
alone: the median of ten consecutive
groups' rates, see ``steady_rate``), RSS after them; on SeaweedFS (no node cache) the steady loop
stops at 1,000 batches or ``--remote-seconds`` of gathers. Every batch is compared with its
recomputed content after its timer stops. Locally, up to ``--repeat-max`` records, the two loaderx
cells run ``--loaderx-repeats`` times, alternating (parts, one container, parts, ...): a row is the
run with the median rate, every run kept under ``repeats``.

Peers on the same records, local only, when installed (``--peers``): Lance (``lance.write_dataset``
default write; ``lance.dataset`` open + ``take`` of the same 256 ids), Parquet (pyarrow
``write_table`` defaults; ``ParquetFile`` open + ``read_row_group`` of the group holding each id of
a batch) and MosaicML Streaming (its own venv, ``$LOADERX_STREAMING_VENV`` or ``.venv-streaming``:
``MDSWriter`` with one ``ndarray`` column, uncompressed; ``StreamingDataset(local=dir)`` start-up
as the open, then ``ds[np.ndarray]`` of the same 256 ids), for sizes up to ``--streaming-max``
(its writer takes a Python call per record). Their steady loop stops at 1,000 batches or
``--peer-seconds``, whichever comes first.

One more row: ``--writer-parts`` parts written by 8 spawned writer processes and committed once
(write time, commit time, then the dataset opened and one batch verified); with ``--remote`` the
same for ``--remote-writer-parts`` parts on SeaweedFS.

``--giant N`` adds one Dense size, local rows as above (MosaicML Streaming above
``--streaming-max`` is not written) and, with ``--remote``, a dataset of ``N / --part-records``
parts on SeaweedFS written by the 8 writer processes (the writers' row at that size) and then read
by a loaderx cell: the full matrix's 10^9 records as 10^4 parts.

Usage: python scale_bench.py --sizes 1000000,10000000 [--remote] [--peers] --json OUT
"""

import argparse
import json
import multiprocessing as mp
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

BATCH = 256
BATCHES = 1000
# A steady loop runs at least BATCHES batches and this many seconds of gathers (unless a budget
# stops it first): 1,000 fast gathers take ~30 ms, within one scheduling hiccup of a shared machine.
MIN_STEADY_S = 0.5
GOLD = np.uint64(0x9E3779B97F4A7C15)
WRITE_CHUNK = 1 << 20
WRITERS = 8


def rss_mib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def dense_records(ids):
    ids = np.asarray(ids, np.int64)
    return np.stack([ids & 0x7FFFFFFF, ids >> 31], axis=1).astype(np.int32)


def ragged_records(ids):
    """The records of `ids`: their lengths and their values, concatenated."""
    h = np.asarray(ids, np.uint64) * GOLD
    lens = (1 + (h >> np.uint64(61))).astype(np.int64)
    owner = np.repeat(np.arange(len(lens)), lens)
    k = np.arange(lens.sum()) - np.repeat(np.cumsum(lens) - lens, lens)
    shift = (48 - 16 * (k % 4)).astype(np.uint64)
    vals = ((h[owner] >> shift) & np.uint64(0xFFFF)).astype(np.uint16) ^ k.astype(np.uint16)
    return lens, vals


def write_container(path, layout, first, count, storage_options=None):
    from loaderx.zrecord import DenseWriter, RaggedBatch, RaggedWriter

    so = {"storage_options": storage_options} if storage_options else {}
    if layout == "dense":
        w = DenseWriter(path, np.int32, (2,), "raw", **so)
    else:
        w = RaggedWriter(path, np.uint16, 1, "raw", **so)
    with w:
        for a in range(first, first + count, WRITE_CHUNK):
            ids = np.arange(a, min(a + WRITE_CHUNK, first + count))
            if layout == "dense":
                w.append(dense_records(ids))
            else:
                lens, vals = ragged_records(ids)
                cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
                w.append(RaggedBatch(vals, cu, lens.reshape(-1, 1).astype(np.uint64)))


def write_parts(root, layout, first_part, parts, per_part, storage_options=None):
    """Writes parts `first_part..+parts` (`per_part` records each, ids continuing part by part)."""
    from loaderx import dataset

    names = []
    for p in range(first_part, first_part + parts):
        name = f"part-{p:05d}"
        write_container(dataset.part_path(root, name), layout, p * per_part, per_part, storage_options)
        names.append(name)
    return names


# ---- one cell, in its own process -------------------------------------------------------------


def verify(layout, ids, got):
    if layout == "dense":
        return np.array_equal(got, dense_records(ids))
    lens, vals = ragged_records(ids)
    return np.array_equal(np.diff(got[1]), lens) and np.array_equal(got[0], vals)


def gatherer(store, layout):
    """A function of record ids that gathers them from `store` (bound to a CPU allocator) as
    NumPy arrays: one array for a Dense store, (values, cu_seqlens) for a Ragged one."""
    from loaderx import Allocator, dtypes

    view = store.bind(Allocator())
    if layout == "dense":
        def gather(ids):
            return dtypes.from_dlpack(view[ids])
    else:
        def gather(ids):
            b = view[ids]
            return np.from_dlpack(b.values), np.from_dlpack(b.cu_seqlens)
    return gather


def cell_loaderx(c):
    from loaderx.zrecord import DenseStore, RaggedStore

    kind = DenseStore if c["layout"] == "dense" else RaggedStore
    so = {"storage_options": c["storage_options"]} if c.get("storage_options") else {}
    base = rss_mib()
    t = time.perf_counter()
    store = kind(c["path"], **so)
    open_s = time.perf_counter() - t
    open_rss = rss_mib() - base
    assert len(store) == c["records"], (len(store), c["records"])
    gather = gatherer(store, c["layout"])
    return run_batches(c, gather, open_s, open_rss, base, c.get("budget"))


def run_batches(c, gather, open_s, open_rss, base, budget=None):
    rng = np.random.default_rng(c["seed"])
    ids = rng.integers(0, c["records"], BATCH)
    t = time.perf_counter()
    got = gather(ids)
    first_s = time.perf_counter() - t
    ok = verify(c["layout"], ids, got)
    times, spent = [], 0.0
    while (len(times) < BATCHES or spent < MIN_STEADY_S) and (budget is None or spent < budget):
        ids = rng.integers(0, c["records"], BATCH)
        t = time.perf_counter()
        got = gather(ids)
        times.append(time.perf_counter() - t)
        spent += times[-1]
        ok = ok and verify(c["layout"], ids, got)
    return {"open_ms": open_s * 1e3, "open_rss_mib": open_rss, "epoch_rss_mib": rss_mib() - base,
            "first_batch_ms": first_s * 1e3, "gathers_per_s": steady_rate(times),
            "batches": len(times) + 1, "verified": bool(ok)}


def steady_rate(times, groups=10):
    """Gathers per second of the batches timed `times` (seconds each, in order): the median of the
    rates of `groups` consecutive groups of them (each its batches over their summed time), so a
    stall of the shared machine during one group moves the figure no more than a slow group does.
    Fewer batches than groups: all of them as one group."""
    n = len(times)
    if n < groups:
        return n / sum(times)
    bounds = [n * g // groups for g in range(groups + 1)]
    rates = sorted((b - a) / sum(times[a:b]) for a, b in zip(bounds, bounds[1:]))
    mid = groups // 2
    return rates[mid] if groups % 2 else (rates[mid - 1] + rates[mid]) / 2


def from_arrow(layout, col):
    """An Arrow list column as the batch `verify` reads: rows of 2, or (values, offsets)."""
    if layout == "dense":
        return col.flatten().to_numpy().reshape(-1, 2)
    return col.flatten().to_numpy(), np.concatenate([[0], np.cumsum(col.value_lengths().to_numpy())])


def cell_lance(c):
    import lance

    base = rss_mib()
    t = time.perf_counter()
    ds = lance.dataset(c["path"])
    open_s = time.perf_counter() - t
    open_rss = rss_mib() - base

    def gather(ids):
        return from_arrow(c["layout"], ds.take(ids, columns=["r"]).column("r").combine_chunks())

    return run_batches(c, gather, open_s, open_rss, base, c["budget"])


def cell_parquet(c):
    import pyarrow as pa
    import pyarrow.parquet as pq

    base = rss_mib()
    t = time.perf_counter()
    f = pq.ParquetFile(c["path"])
    md = f.metadata
    starts = np.cumsum([0] + [md.row_group(g).num_rows for g in range(md.num_row_groups)])
    open_s = time.perf_counter() - t
    open_rss = rss_mib() - base

    def gather(ids):
        groups = np.searchsorted(starts, ids, side="right") - 1
        cols = {int(g): f.read_row_group(int(g), columns=["r"]).column("r").combine_chunks()
                for g in np.unique(groups)}
        return from_arrow(c["layout"], pa.concat_arrays(
            [cols[int(g)].slice(int(i - starts[g]), 1) for i, g in zip(ids, groups)]))

    return run_batches(c, gather, open_s, open_rss, base, c["budget"])


def spawn_cell(cell, python=None):
    """Runs one cell in a fresh interpreter; its result, or a failed one naming the error."""
    r = subprocess.run([python or sys.executable, __file__, "--cell", json.dumps(cell)],
                       capture_output=True, text=True, timeout=1800)
    try:
        return json.loads(r.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        tail = (r.stderr.strip().splitlines() or ["no output"])[-1]
        return {"verified": False, "error": f"cell exited {r.returncode}: {tail}"}


def streaming_python():
    """The MosaicML Streaming venv's Python (it pins NumPy < 2.2), or None."""
    venv = os.environ.get("LOADERX_STREAMING_VENV") or str(Path(__file__).resolve().parents[2] / ".venv-streaming")
    py = Path(venv) / "bin" / "python"
    return str(py) if py.exists() else None


def write_mds(path, layout, n):
    """Runs in the Streaming venv: the records as MDS shards, one ``ndarray`` column, uncompressed."""
    from streaming import MDSWriter

    col = "ndarray:int32:2" if layout == "dense" else "ndarray:uint16"
    with MDSWriter(out=path, columns={"r": col}, compression=None) as w:
        for a in range(0, n, WRITE_CHUNK):
            ids = np.arange(a, min(a + WRITE_CHUNK, n))
            if layout == "dense":
                for rec in dense_records(ids):
                    w.write({"r": rec})
            else:
                lens, vals = ragged_records(ids)
                for rec in np.split(vals, np.cumsum(lens)[:-1]):
                    w.write({"r": rec})


def cell_streaming(c):
    from streaming import StreamingDataset

    base = rss_mib()
    t = time.perf_counter()
    ds = StreamingDataset(local=c["path"], batch_size=BATCH, shuffle=False)
    open_s = time.perf_counter() - t
    open_rss = rss_mib() - base
    assert ds.num_samples == c["records"], (ds.num_samples, c["records"])

    def gather(ids):
        recs = [s["r"] for s in ds[np.asarray(ids, np.int64)]]
        if c["layout"] == "dense":
            return np.stack(recs)
        return np.concatenate(recs), np.concatenate([[0], np.cumsum([len(r) for r in recs])])

    return run_batches(c, gather, open_s, open_rss, base, c["budget"])


# ---- peers' copies of the records -------------------------------------------------------------


def arrow_table(layout, n):
    import pyarrow as pa

    chunks = []
    for a in range(0, n, WRITE_CHUNK):
        ids = np.arange(a, min(a + WRITE_CHUNK, n))
        if layout == "dense":
            arr = pa.FixedSizeListArray.from_arrays(pa.array(dense_records(ids).reshape(-1)), 2)
        else:
            lens, vals = ragged_records(ids)
            offs = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
            arr = pa.ListArray.from_arrays(pa.array(offs), pa.array(vals))
        chunks.append(arr)
    return pa.table({"r": pa.chunked_array(chunks)})


def peers_available():
    out = {}
    for name, mod in (("lance", "lance"), ("parquet", "pyarrow.parquet")):
        try:
            __import__(mod)
            out[name] = None
        except ImportError:
            out[name] = f"{mod} is not installed (LOADERX_INSTALL_PEERS=1 installs pylance 14.0.2)"
    out["streaming"] = None if streaming_python() else (
        "no MosaicML Streaming venv ($LOADERX_STREAMING_VENV; scripts/install-deps.sh makes .venv-streaming)")
    return out


# ---- the rows ---------------------------------------------------------------------------------


def loaderx_note(parts):
    if parts == 1:
        return ("one container: its index checked whole at open up to 4 Mi records, above that "
                "a page (4,096 entries) at a time as reads first need it")
    return (f"one version of {parts} parts: open reads the version manifest; a part is opened "
            "and checked on its first touch")


def streaming_row(work, base, n, budget, streaming_max):
    """The MosaicML Streaming row: MDS written and read by the Streaming venv's Python."""
    if n > streaming_max:
        return {**base, "row": "streaming", "note": f"not written above --streaming-max {streaming_max:,} "
                "records: MDSWriter takes a Python call per record"}
    py, path = streaming_python(), work / f"{base['layout']}-{n}.mds"
    t = time.perf_counter()
    w = subprocess.run([py, __file__, "--write-mds", str(path), "--layouts", base["layout"], "--sizes", str(n)],
                       capture_output=True, text=True, timeout=7200)
    write_s = time.perf_counter() - t
    if w.returncode != 0:
        tail = (w.stderr.strip().splitlines() or ["no output"])[-1]
        return {**base, "row": "streaming", "verified": False, "error": f"MDS write exited {w.returncode}: {tail}"}
    shards = len(list(path.glob("shard.*.mds")))
    r = spawn_cell({**base, "impl": "streaming", "path": str(path), "budget": budget}, python=py)
    shutil.rmtree(path, ignore_errors=True)
    return {**base, "row": "streaming", "write_s": write_s, **r,
            "note": f"MDSWriter, one ndarray column, uncompressed ({shards} shard files); StreamingDataset(local=dir) "
                    "start-up as the open, ds[np.ndarray] per batch (Streaming docs, Quick start and "
                    "Dataset Format: MDS)"}


def median_run(runs):
    """The run of `runs` (cell results) with the median steady rate, all its figures from that run,
    with every run's figures kept under `repeats`."""
    order = sorted(runs, key=lambda r: r.get("gathers_per_s") or 0.0)
    return {**order[(len(order) - 1) // 2], "repeats": runs}


def local_rows(work, layout, n, per_part, peers, budget, streaming_max, repeats=1):
    from loaderx import dataset

    rows = []
    parts = max(1, n // per_part)
    single, root = work / f"{layout}-{n}-single", work / f"{layout}-{n}-parts"
    t = time.perf_counter()
    write_container(str(single), layout, 0, n)
    single_write = time.perf_counter() - t
    t = time.perf_counter()
    names = write_parts(str(root), layout, 0, parts, n // parts)
    dataset.commit(str(root), names)
    parts_write = time.perf_counter() - t
    base = {"layout": layout, "records": n, "where": "local", "seed": n % 9973}
    cells = (("loaderx-parts", root, parts, parts_write), ("loaderx-single", single, 1, single_write))
    # The two loaderx cells alternate `repeats` times (parts, one container, parts, ...), each
    # run a fresh process; the row is the median run.
    runs = {impl: [] for impl, *_ in cells}
    for _ in range(repeats):
        for impl, path, *_ in cells:
            runs[impl].append(spawn_cell({**base, "impl": "loaderx", "path": str(path)}))
    for impl, path, nparts, w in cells:
        r = median_run(runs[impl])
        rows.append({**base, "row": impl, "parts": nparts, "write_s": w, "note": loaderx_note(nparts), **r})
    shutil.rmtree(single, ignore_errors=True)
    shutil.rmtree(root, ignore_errors=True)
    for peer in ("lance", "parquet"):
        skip = peers.get(peer, "not asked for (--peers)")
        if skip:
            rows.append({**base, "row": peer, "note": skip})
            continue
        path = work / f"{layout}-{n}.{peer}"
        t = time.perf_counter()
        table = arrow_table(layout, n)
        if peer == "lance":
            import lance

            lance.write_dataset(table, str(path))
            frags = len(lance.dataset(str(path)).get_fragments())
            note = (f"lance.write_dataset defaults ({frags} fragments); lance.dataset + take "
                    "(Lance docs, Read and Write)")
        else:
            import pyarrow.parquet as pq

            pq.write_table(table, str(path))
            groups = pq.ParquetFile(str(path)).metadata.num_row_groups
            note = (f"pq.write_table defaults ({groups} row groups); ParquetFile + read_row_group "
                    "(Arrow docs, Reading and Writing the Apache Parquet Format)")
        del table
        w = time.perf_counter() - t
        r = spawn_cell({**base, "impl": peer, "path": str(path), "budget": budget})
        rows.append({**base, "row": peer, "write_s": w, "note": note, **r})
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    skip = peers.get("streaming", "not asked for (--peers)")
    rows.append({**base, "row": "streaming", "note": skip} if skip else
                streaming_row(work, base, n, budget, streaming_max))
    return rows


def remote_rows(s3, layout, n, per_part, budget):
    from loaderx import dataset

    so = s3.options()
    parts = max(1, n // per_part)
    single, root = f"s3://scale/{layout}-{n}-single", f"s3://scale/{layout}-{n}-parts"
    t = time.perf_counter()
    write_container(single, layout, 0, n, so)
    single_write = time.perf_counter() - t
    t = time.perf_counter()
    dataset.commit(root, write_parts(root, layout, 0, parts, n // parts, so), storage_options=so)
    parts_write = time.perf_counter() - t
    base = {"layout": layout, "records": n, "where": "seaweedfs", "seed": n % 9973}
    rows = []
    for impl, path, nparts, w in (("loaderx-parts", root, parts, parts_write),
                                  ("loaderx-single", single, 1, single_write)):
        r = spawn_cell({**base, "impl": "loaderx", "path": path, "storage_options": so, "budget": budget})
        rows.append({**base, "row": impl, "parts": nparts, "write_s": w, "note": loaderx_note(nparts), **r})
    return rows


def remote_giant(s3, n, per_part, budget):
    """`n` Dense records as `n / per_part` parts written to SeaweedFS by the writer processes and
    committed once (the writers' row), then read by a loaderx cell."""
    so, parts = s3.options(), n // per_part
    root = f"s3://scale/dense-{n}-parts"
    w = writers_row(root, parts, per_part, "seaweedfs", so)
    base = {"layout": "dense", "records": n, "where": "seaweedfs", "seed": n % 9973}
    r = spawn_cell({**base, "impl": "loaderx", "path": root, "storage_options": so, "budget": budget})
    return [w, {**base, "row": "loaderx-parts", "parts": parts, "write_s": w["write_s"],
                "note": loaderx_note(parts) + f"; written by the {WRITERS} writers' row", **r}]


def _writer(root, first, count, per_part, so):
    """A writer process: its parts, and their receipts (what it hands the committer)."""
    from loaderx import dataset

    names = write_parts(root, "dense", first, count, per_part, so)
    return [dataset.describe_part(root, n, storage_options=so) for n in names]


def writers_row(root, parts, per_part, where, so=None):
    """`parts` parts from WRITERS spawned processes, committed once; then one verified batch."""
    from loaderx import Allocator, dataset, dtypes
    from loaderx.zrecord import DenseStore

    share = -(-parts // WRITERS)
    jobs = [(root, a, min(share, parts - a), per_part, so) for a in range(0, parts, share)]
    t = time.perf_counter()
    with mp.get_context("spawn").Pool(WRITERS) as pool:
        receipts = sum(pool.starmap(_writer, jobs), [])
    write_s = time.perf_counter() - t
    t = time.perf_counter()
    m = dataset.commit(root, receipts, storage_options=so)
    commit_s = time.perf_counter() - t
    # The same parts committed by name (each part's manifest read), as the next version.
    t = time.perf_counter()
    by_name = dataset.commit(root, [p["name"] for p in m["parts"]], storage_options=so)
    by_name_s = time.perf_counter() - t
    n = parts * per_part
    kw = {"storage_options": so} if so else {}
    with DenseStore(root, **kw) as s:
        ids = np.random.default_rng(7).integers(0, n, BATCH)
        ok = (m["records"] == n and len(m["parts"]) == parts and s.parts == parts
              and by_name["parts"] == m["parts"]
              and np.array_equal(dtypes.from_dlpack(s.bind(Allocator())[ids]), dense_records(ids)))
    return {"row": "loaderx-8-writers", "layout": "dense", "records": n, "parts": parts, "where": where,
            "write_s": write_s, "commit_ms": commit_s * 1e3, "commit_by_name_ms": by_name_s * 1e3,
            "verified": bool(ok),
            "note": f"{WRITERS} spawned writer processes, {per_part} records a part, one commit of "
                    f"their receipts (by name, reading each part: {by_name_s * 1e3:.0f} ms); "
                    "verified: the version's record and part counts, the same parts by name, one "
                    "random batch"}


CELLS = {"loaderx": cell_loaderx, "lance": cell_lance, "parquet": cell_parquet,
         "streaming": cell_streaming}


def finish(rows, json_path) -> int:
    """Prints `rows` (one JSON line each), writes them to `json_path` when given, and returns the
    exit code: 1 when any row failed its check."""
    for r in rows:
        print(json.dumps(r))
    if json_path:
        json_path.write_text(json.dumps(rows, indent=1))
    return 0 if all(r.get("verified") is not False for r in rows) else 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cell")
    ap.add_argument("--sizes", default="1000000")
    ap.add_argument("--part-records", type=int, default=100_000)
    ap.add_argument("--layouts", default="dense,ragged")
    ap.add_argument("--remote", action="store_true")
    ap.add_argument("--remote-max", type=int, default=1_000_000)
    ap.add_argument("--remote-seconds", type=float, default=2.0)
    ap.add_argument("--peers", action="store_true")
    ap.add_argument("--peer-seconds", type=float, default=3.0)
    ap.add_argument("--streaming-max", type=int, default=10_000_000)
    ap.add_argument("--write-mds")
    ap.add_argument("--writer-parts", type=int, default=1000)
    ap.add_argument("--remote-writer-parts", type=int, default=100)
    ap.add_argument("--giant", type=int, default=0)
    ap.add_argument("--loaderx-repeats", type=int, default=3)
    ap.add_argument("--repeat-max", type=int, default=100_000_000)
    ap.add_argument("--work", type=Path)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    if a.write_mds:
        write_mds(a.write_mds, a.layouts, int(a.sizes))
        return 0
    if a.cell:
        c = json.loads(a.cell)
        print(json.dumps(CELLS[c["impl"]](c)))
        return 0
    sizes = [int(float(s)) for s in a.sizes.split(",")]
    if any(n % a.part_records and n > a.part_records for n in sizes + [a.giant]):
        ap.error("every size above --part-records must be a multiple of it")
    peers = peers_available() if a.peers else {}
    rows = []
    with tempfile.TemporaryDirectory(dir=a.work) as tmp:
        work = Path(tmp)
        local = [(n, layout) for n in sizes for layout in a.layouts.split(",")]
        for n, layout in local + ([(a.giant, "dense")] if a.giant else []):
            reps = a.loaderx_repeats if n <= a.repeat_max else 1
            rows += local_rows(work, layout, n, a.part_records, peers, a.peer_seconds, a.streaming_max,
                               reps)
        rows.append(writers_row(str(work / "writers"), a.writer_parts, 1000, "local"))
        if a.remote:
            sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "loaderx/py/tests"))
            from _remote_helpers import Seaweed

            try:
                s3 = Seaweed()
            except RuntimeError as e:
                rows.append({"row": "loaderx-parts", "where": "seaweedfs", "note": f"not measured: {e}"})
            else:
                try:
                    s3.bucket("scale")
                    for n in (s for s in sizes if s <= a.remote_max):
                        for layout in a.layouts.split(","):
                            rows += remote_rows(s3, layout, n, a.part_records, a.remote_seconds)
                    rows.append(writers_row("s3://scale/writers", a.remote_writer_parts, 1000,
                                            "seaweedfs", s3.options()))
                    if a.giant:
                        rows += remote_giant(s3, a.giant, a.part_records, a.remote_seconds)
                finally:
                    s3.stop()
    return finish(rows, a.json)


if __name__ == "__main__":
    sys.exit(main())
