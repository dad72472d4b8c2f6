"""The `fleet` table: IID against block shuffles read from object storage, 1 and 8 reader processes.

Three stores, written once to a SeaweedFS server on loopback (``_remote_helpers.Seaweed``, the one
the object-storage tests and the `scale` table start), codec ``raw``:

* ``dense``: ``--records`` int64 ``[8]`` records (64 B), record ``i`` holding ``8 i .. 8 i + 7``;
* ``text``: ``--records`` Ragged uint8 records, the UTF-8 bytes of WikiText-2's sentences (the
  non-empty lines of ``wiki.test.raw.txt`` and ``wiki.valid.tokens.txt`` under ``--text``, split
  after ". "), repeated in order until there are ``--records`` of them (bytes, not tokens: the
  ``scale`` table's ragged records are untokenised too);
* ``pet``: the Oxford-IIIT Pet images under ``--pets`` sorted by breed (``<Breed>_<n>.jpg``),
  decoded and resized to uint8 ``[3, 224, 224]`` (the dense-vision table's shape), breed = class.

Orders (``loaderx.sampler.Sampler``, seed 0): ``iid``, ``block-default`` (``Sampler(n, batch,
"block")``: block 256, window 64), ``block-adapted`` (``record_bytes=`` the record size) and
``block-narrow`` (a 4-block window). Each cell runs ``P`` spawned reader processes (1 or 8);
process ``p`` opens the store (no node cache), waits at a barrier, then reads steps ``p, p + P, ...``
of the one sampler stream for ``--seconds`` (at most ``--max-batches`` batches): ``view[ids]`` is
timed, then the batch is compared with its source values and its mixing measured (class entropy in
bits for ``pet``, mean |id difference| between consecutive samples otherwise). Requests and bytes
come from ``store.request_stats`` (its open excluded), summed over the processes.

The GET limit of a cell: the same processes, the same count of requests and bytes per batch as the
loaderx cell measured, issued as plain concurrent ranged GETs (obstore, at most 32 in flight, the
remote engine's concurrency) at random offsets of the store's largest object, dropped as they land.
Its MiB/s counts the loaderx cell's delivered bytes per batch over the GETs' time.

Usage: python fleet_bench.py --records 1000000 --pets DIR --text DIR --work DIR --json OUT
"""

import argparse
import json
import multiprocessing as mp
import os
import re
import socket
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import scale_bench

DENSE_WIDTH = 8
PET_SHAPE = (3, 224, 224)
WRITE_CHUNK = 1 << 16
CONCURRENCY = 32


# ---- sources ----------------------------------------------------------------------------------


def dense_records(ids):
    ids = np.asarray(ids, np.int64)
    return ids[:, None] * DENSE_WIDTH + np.arange(DENSE_WIDTH, dtype=np.int64)


def sentences(text_dir):
    out = []
    for name in ("wiki.test.raw.txt", "wiki.valid.tokens.txt"):
        with open(Path(text_dir) / "wikitext2" / name, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if line and not line.startswith("="):
                    out += [s.encode() for s in re.split(r"(?<=\. )", line) if s.strip()]
    if not out:
        raise RuntimeError(f"no WikiText-2 lines under {text_dir}/wikitext2")
    return out


def pet_images(pet_dir):
    from PIL import Image

    names = []
    for n in os.listdir(pet_dir):
        m = re.fullmatch(r"(.+)_(\d+)\.jpg", n, flags=re.IGNORECASE)
        if m:
            names.append((m.group(1), int(m.group(2)), n))
    if not names:
        raise RuntimeError(f"no <Breed>_<n>.jpg files in {pet_dir}")
    names.sort()
    breeds = {b: k for k, b in enumerate(sorted({b for b, _, _ in names}))}
    images = np.empty((len(names),) + PET_SHAPE, np.uint8)
    for i, (_, _, n) in enumerate(names):
        with Image.open(Path(pet_dir) / n) as im:
            images[i] = np.asarray(im.convert("RGB").resize(PET_SHAPE[1:][::-1])).transpose(2, 0, 1)
    return images, np.array([breeds[b] for b, _, _ in names], np.int64)


def prepare(a, work, so):
    """Writes the stores to SeaweedFS and their sources to ``work``; returns the stores' specs."""
    from loaderx.zrecord import DenseWriter, RaggedBatch, RaggedWriter

    specs = []
    n = a.records
    path = "s3://fleet/dense"
    with DenseWriter(path, np.int64, (DENSE_WIDTH,), "raw", storage_options=so) as w:
        for s in range(0, n, WRITE_CHUNK):
            w.append(dense_records(np.arange(s, min(s + WRITE_CHUNK, n))))
    specs.append({"store": "dense", "path": path, "records": n, "record_bytes": 8 * DENSE_WIDTH,
                  "layout": "dense"})
    if a.text:
        sent = sentences(a.text)
        lens = np.array([len(s) for s in sent], np.int64)
        np.save(work / "text-values.npy", np.frombuffer(b"".join(sent), np.uint8))
        np.save(work / "text-offsets.npy", np.concatenate([[0], np.cumsum(lens)]))
        path = "s3://fleet/text"
        with RaggedWriter(path, np.uint8, 1, "raw", storage_options=so) as w:
            for s in range(0, n, WRITE_CHUNK):
                ids = np.arange(s, min(s + WRITE_CHUNK, n)) % len(sent)
                vals = np.frombuffer(b"".join(sent[i] for i in ids), np.uint8)
                cu = np.concatenate([[0], np.cumsum(lens[ids])]).astype(np.int32)
                w.append(RaggedBatch(vals, cu, lens[ids].reshape(-1, 1).astype(np.uint64)))
        reps = np.resize(lens, n)
        specs.append({"store": "text", "path": path, "records": n, "layout": "ragged",
                      "record_bytes": int(reps.mean()), "sentences": len(sent)})
    if a.pets:
        images, labels = pet_images(a.pets)
        np.save(work / "pet-images.npy", images)
        np.save(work / "pet-labels.npy", labels)
        path = "s3://fleet/pet"
        with DenseWriter(path, np.uint8, PET_SHAPE, "raw", storage_options=so) as w:
            for s in range(0, len(images), 64):
                w.append(images[s:s + 64])
        specs.append({"store": "pet", "path": path, "records": len(images), "layout": "dense",
                      "record_bytes": int(np.prod(PET_SHAPE)), "classes": int(labels.max()) + 1})
    return specs


def orders(spec):
    """The orders of a store: name and Sampler keywords (None: IID)."""
    narrow = {"block": 16, "window": 4} if spec["store"] == "pet" else {"block": 256, "window": 4}
    return [("iid", None), ("block-default", {}), ("block-adapted", {"record_bytes": spec["record_bytes"]}),
            ("block-narrow", narrow)]


def block_shape(kw):
    """(block, window) of a block order, as the Sampler derives them (docs/loaderx.md, Defaults)."""
    if "block" in kw:
        return kw["block"], kw["window"]
    if "record_bytes" in kw:
        block = min(max((1 << 20) // kw["record_bytes"], 1), 256)
        return block, min(max((64 << 20) // (block * kw["record_bytes"]), 1), 1024)
    return 256, 64


# ---- one reader process -----------------------------------------------------------------------


class Checker:
    """Compares batches with the source values and measures their mixing."""

    def __init__(self, c):
        self.c = c
        work = Path(c["work"])
        if c["store"] == "text":
            self.values = np.load(work / "text-values.npy", mmap_mode="r")
            self.offsets = np.load(work / "text-offsets.npy")
            self.count = len(self.offsets) - 1
        elif c["store"] == "pet":
            self.images = np.load(work / "pet-images.npy", mmap_mode="r")
            self.labels = np.load(work / "pet-labels.npy")

    def verify(self, ids, got):
        store = self.c["store"]
        if store == "dense":
            return np.array_equal(got, dense_records(ids))
        if store == "pet":
            return np.array_equal(got, self.images[np.asarray(ids, np.int64)])
        src = np.asarray(ids, np.int64) % self.count
        starts, ends = self.offsets[src], self.offsets[src + 1]
        want = np.concatenate([self.values[s:e] for s, e in zip(starts, ends)])
        return np.array_equal(np.diff(got[1]), ends - starts) and np.array_equal(got[0], want)

    def mixing(self, ids):
        if self.c["store"] == "pet":
            counts = np.bincount(self.labels[np.asarray(ids, np.int64)])
            p = counts[counts > 0] / len(ids)
            return float(-(p * np.log2(p)).sum())
        return float(np.abs(np.diff(np.asarray(ids, np.int64))).mean())


def open_store(c):
    from loaderx.zrecord import DenseStore, RaggedStore

    kind = DenseStore if c["layout"] == "dense" else RaggedStore
    store = kind(c["path"], storage_options=c["storage_options"])
    return store, scale_bench.gatherer(store, c["layout"])


def nbytes(got):
    return got.nbytes if isinstance(got, np.ndarray) else got[0].nbytes


def sampler(c):
    from loaderx.sampler import Sampler

    if c["order"] is None:
        return Sampler(c["records"], c["batch"], Sampler.Mode.IID, 0)
    return Sampler(c["records"], c["batch"], Sampler.Mode.BLOCK, 0, **c["order"])


def reader(c, p, barrier, queue):
    try:
        queue.put(read(c, p, barrier))
    except BaseException as e:  # noqa: BLE001 - reported as the cell's error
        barrier.abort()
        queue.put({"error": f"reader {p}: {type(e).__name__}: {e}"})


def buffer_blocks(store, c):
    """Buffers a block order's blocks as a loaderx Loader does (the same rule,
    ``loaderx.sampler.block_buffer_blocks``): the window plus the blocks one batch spans, plus
    one, when they hold at most 256 MiB."""
    from loaderx.sampler import block_buffer_blocks

    if c["order"] is None:
        return
    block, window = block_shape(c["order"])
    held = block_buffer_blocks(block, window, c["batch"], c["record_bytes"])
    if held is not None:
        store.buffer_blocks(block, held)


def read(c, p, barrier):
    store, gather = open_store(c)
    buffer_blocks(store, c)
    s, check = sampler(c), Checker(c)
    before = store.request_stats
    barrier.wait()
    lat, ok, mixing, delivered, step = [], True, 0.0, 0, p
    start = time.perf_counter()
    while len(lat) < c["max_batches"] and time.perf_counter() - start < c["seconds"]:
        s.seek(step)
        ids = s.next().copy()
        t = time.perf_counter()
        got = gather(ids)
        lat.append(time.perf_counter() - t)
        ok = ok and check.verify(ids, got)
        mixing += check.mixing(ids)
        delivered += nbytes(got)
        step += c["procs"]
    elapsed = time.perf_counter() - start
    after = store.request_stats
    return {"latencies": lat, "verified": bool(ok), "mixing": mixing, "delivered": delivered,
            "elapsed": elapsed, "requests": after["requests"] - before["requests"],
            "bytes": after["bytes"] - before["bytes"]}


def get_limit_reader(c, p, barrier, queue):
    """Per batch: `c["get_requests"]` concurrent ranged GETs of `c["get_bytes"]` bytes in all."""
    try:
        import asyncio

        import obstore
        from obstore.store import S3Store

        so = c["storage_options"]
        bucket, prefix = c["path"][len("s3://"):].split("/", 1)
        st = S3Store(bucket, endpoint=so["endpoint"], region=so["region"], access_key_id=so["access_key_id"],
                     secret_access_key=so["secret_access_key"], client_options={"allow_http": True})
        objects = [o for batch in obstore.list(st, prefix=prefix + "/") for o in batch]
        big = max(objects, key=lambda o: o["size"])
        rng = np.random.default_rng(p)
        k = max(1, int(round(c["get_requests"])))
        size = max(1, int(c["get_bytes"] // k))
        size = min(size, big["size"])

        async def batch():
            sem = asyncio.Semaphore(CONCURRENCY)

            async def one(off):
                async with sem:
                    got = await obstore.get_range_async(st, big["path"], start=int(off), length=size)
                    return len(got)

            offs = rng.integers(0, big["size"] - size + 1, k)
            return sum(await asyncio.gather(*(one(o) for o in offs)))

        barrier.wait()
        lat, wire = [], 0
        start = time.perf_counter()
        while len(lat) < c["max_batches"] and time.perf_counter() - start < c["seconds"]:
            t = time.perf_counter()
            wire += asyncio.run(batch())
            lat.append(time.perf_counter() - t)
        queue.put({"latencies": lat, "elapsed": time.perf_counter() - start, "requests": k * len(lat),
                   "bytes": wire, "delivered": c["delivered_per_batch"] * len(lat)})
    except BaseException as e:  # noqa: BLE001 - reported as the cell's error
        barrier.abort()
        queue.put({"error": f"GET limit reader {p}: {type(e).__name__}: {e}"})


def run_cell(c, target=reader):
    """`c["procs"]` spawned readers of one cell; their results summed."""
    ctx = mp.get_context("spawn")
    barrier, queue = ctx.Barrier(c["procs"]), ctx.Queue()
    procs = [ctx.Process(target=target, args=(c, p, barrier, queue)) for p in range(c["procs"])]
    for pr in procs:
        pr.start()
    outs = [queue.get(timeout=600) for _ in procs]
    for pr in procs:
        pr.join(timeout=60)
    errors = [o["error"] for o in outs if "error" in o]
    if errors:
        return {"verified": False, "error": errors[0]}
    lat = np.concatenate([o["latencies"] for o in outs])
    batches = len(lat)
    if batches == 0:
        return {"verified": False, "error": "no batch read"}
    wall = max(o["elapsed"] for o in outs)
    out = {"batches": batches, "requests_per_batch": sum(o["requests"] for o in outs) / batches,
           "bytes_per_batch": sum(o["bytes"] for o in outs) / batches,
           "delivered_per_batch": sum(o["delivered"] for o in outs) / batches,
           "mib_s": sum(o["delivered"] for o in outs) / wall / 2**20,
           "p50_ms": float(np.percentile(lat, 50) * 1e3), "p99_ms": float(np.percentile(lat, 99) * 1e3),
           "first_ms": max(o["latencies"][0] for o in outs if o["latencies"]) * 1e3}
    if target is reader:
        out["verified"] = all(o["verified"] for o in outs)
        out["mixing"] = sum(o["mixing"] for o in outs) / batches
    return out


# ---- the rows ---------------------------------------------------------------------------------


def rows_for(a, spec, so, work):
    rows = []
    metric = "entropy bits" if spec["store"] == "pet" else "mean |Δid|"
    cells = [(order, kw, procs, 256) for order, kw in orders(spec) for procs in a.procs]
    if spec["store"] != "pet":
        cells += [("iid", None, 1, 1024), ("block-default", {}, 1, 1024)]
    for order, kw, procs, batch in cells:
        c = {**spec, "order": kw, "procs": procs, "batch": batch, "storage_options": so, "work": str(work),
             "seconds": a.seconds, "max_batches": a.max_batches}
        base = {"store": spec["store"], "records": spec["records"], "order": order, "procs": procs,
                "batch": batch, "mixing_metric": metric}
        if kw is not None:
            base["block"], base["window"] = block_shape(kw)
        r = run_cell(c)
        rows.append({**base, "row": "loaderx", **r})
        print(json.dumps(rows[-1]), file=sys.stderr)
        if "error" in r:
            continue
        g = run_cell({**c, "get_requests": r["requests_per_batch"] / 1, "get_bytes": r["bytes_per_batch"],
                      "delivered_per_batch": r["delivered_per_batch"]}, target=get_limit_reader)
        rows.append({**base, "row": "get-limit", **g, "verified": None})
        print(json.dumps(rows[-1]), file=sys.stderr)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--procs", default="1,8")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--max-batches", type=int, default=2000)
    ap.add_argument("--pets", type=Path)
    ap.add_argument("--text", type=Path)
    ap.add_argument("--work", type=Path)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--peers", action="store_true")
    a = ap.parse_args()
    a.procs = [int(p) for p in a.procs.split(",")]
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "loaderx/py/tests"))
    from _remote_helpers import Seaweed

    rows = []
    # SeaweedFS's Prometheus port: the peers' requests are counted there (fleet_peers.py).
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    metrics_port = probe.getsockname()[1]
    probe.close()
    try:
        s3 = Seaweed(extra_args=(f"-metricsPort={metrics_port}",))
    except RuntimeError as e:
        rows.append({"row": "loaderx", "store": "dense", "note": f"not measured: {e}"})
    else:
        try:
            s3.bucket("fleet")
            so = s3.options()
            with tempfile.TemporaryDirectory(dir=a.work) as tmp:
                t = time.perf_counter()
                specs = prepare(a, Path(tmp), so)
                print(f"fleet: stores written in {time.perf_counter() - t:.1f} s", file=sys.stderr)
                for spec in specs:
                    rows += rows_for(a, spec, so, Path(tmp))
                if a.peers:
                    import fleet_peers

                    for spec in specs:
                        rows += fleet_peers.rows(a, spec, so, Path(tmp), f"http://127.0.0.1:{metrics_port}/metrics")
        finally:
            s3.stop()
    return scale_bench.finish(rows, a.json)


if __name__ == "__main__":
    sys.exit(main())
