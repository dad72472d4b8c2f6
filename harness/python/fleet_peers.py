"""The peer rows of the `fleet` table: MosaicML Streaming (``shuffle_algo="py1e"``) and LitData
reading the fleet stores' records from the same SeaweedFS server, each as its docs read S3.

Each peer's copy holds, per record, its id (``id``, int64) and its value (``x``: the int64[8]
array, the sentence's UTF-8 bytes as uint8, the uint8[3,224,224] image), written once per store
and uploaded with boto3 (not counted). A cell is one process running the peer's loader with ``P``
worker processes (torch ``DataLoader`` / LitData ``StreamingDataLoader``, ``num_workers=P``), batch
256, an empty local cache, iterated for ``--seconds`` (at most ``--max-batches`` batches, at least
one): latency is the time between consecutive batches reaching the main process (the first
included), every batch's records are compared with the source by their ids, and the mixing is
measured on those ids as for loaderx. Requests are the GETs SeaweedFS counted during the cell
(``SeaweedFS_s3_request_total{type="GET"}`` from its metrics port: at the server); wire bytes are
the bytes the peer left in its local cache (whole shards or chunks: both download whole objects).

Streaming runs in its own venv (``$LOADERX_STREAMING_VENV`` or ``.venv-streaming``: it pins NumPy
< 2.2); LitData in the harness venv.
"""

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import fleet_bench as fb

HERE = Path(__file__).resolve()


def streaming_python():
    venv = os.environ.get("LOADERX_STREAMING_VENV") or str(HERE.parents[2] / ".venv-streaming")
    py = Path(venv) / "bin" / "python"
    return str(py) if py.exists() else None


class Source:
    """Record ``i`` of a fleet store, for the peers' writers and checks."""

    def __init__(self, spec, work):
        self.spec = spec
        self.check = fb.Checker({**spec, "work": str(work)})

    def record(self, i):
        store = self.spec["store"]
        if store == "dense":
            return fb.dense_records([i])[0]
        if store == "pet":
            return np.asarray(self.check.images[i])
        k = i % self.check.count
        return np.asarray(self.check.values[self.check.offsets[k]:self.check.offsets[k + 1]])

    def verify(self, ids, xs):
        return all(np.array_equal(np.asarray(x), self.record(int(i))) for i, x in zip(ids, xs))


def write_mds(spec, work, out):
    """Runs in the Streaming venv: MDS shards (default 64 MB size_limit), uncompressed."""
    from streaming import MDSWriter

    src = Source(spec, work)
    col = "ndarray:uint8" if spec["store"] == "text" else None
    if col is None:
        col = "ndarray:int64:8" if spec["store"] == "dense" else "ndarray:uint8:3,224,224"
    with MDSWriter(out=out, columns={"id": "int64", "x": col}, compression=None) as w:
        for i in range(spec["records"]):
            w.write({"id": i, "x": src.record(i)})


_LIT = {}


def lit_record(i, spec, work):
    """Record ``i`` for ``litdata.optimize`` (called in its spawned worker)."""
    if "src" not in _LIT:
        _LIT["src"] = Source(spec, work)
    return {"id": i, "x": _LIT["src"].record(i)}


def write_lit(spec, work, out):
    import functools

    from litdata import optimize

    optimize(fn=functools.partial(lit_record, spec=spec, work=work), inputs=list(range(spec["records"])),
             output_dir=out, num_workers=2, chunk_bytes="64MB", keep_data_ordered=True, mode="overwrite")


def upload(local, prefix, so):
    import boto3

    s3 = boto3.client("s3", endpoint_url=so["endpoint"], aws_access_key_id=so["access_key_id"],
                      aws_secret_access_key=so["secret_access_key"], region_name=so["region"])
    for root, _, files in os.walk(local):
        for f in sorted(files):
            path = os.path.join(root, f)
            s3.upload_file(path, "fleet", f"{prefix}/{os.path.relpath(path, local)}")


def as_list(batch):
    return batch


def dir_bytes(path):
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(path) for f in fs)


def cell(c):
    """One peer cell, in its own process (the peer's venv)."""
    import torch

    src, so = Source(c, c["work"]), c["storage_options"]
    os.environ.update({"AWS_ACCESS_KEY_ID": so["access_key_id"], "AWS_SECRET_ACCESS_KEY": so["secret_access_key"],
                       "AWS_DEFAULT_REGION": so["region"]})
    cache = tempfile.mkdtemp(prefix=f"fleet-{c['peer']}-", dir=c["work"])
    if c["peer"] == "streaming":
        from streaming import StreamingDataset

        # Streaming's S3 downloader reads the endpoint from this variable (base/storage/download.py).
        os.environ["S3_ENDPOINT_URL"] = so["endpoint"]
        ds = StreamingDataset(remote=f"s3://fleet/{c['prefix']}", local=cache, shuffle=True, shuffle_algo="py1e",
                              shuffle_seed=0, batch_size=c["batch"])
        dl = torch.utils.data.DataLoader(ds, batch_size=c["batch"], num_workers=c["procs"], collate_fn=as_list)
    else:
        from litdata import StreamingDataLoader, StreamingDataset

        # LitData passes storage_options to boto3 (litdata/streaming/client.py); its chunk prefetch
        # builds an obstore S3Store without allow_http (streaming/downloader.py), which fails on a
        # plain-http endpoint ("BadScheme"; AWS_ALLOW_HTTP is not read there): its boto3 path, the one
        # it takes when obstore is not installed, is forced instead (the workers fork and inherit it).
        import litdata.streaming.downloader as lit_downloader

        lit_downloader._OBSTORE_AVAILABLE = False
        opts = {"endpoint_url": so["endpoint"], "aws_access_key_id": so["access_key_id"],
                "aws_secret_access_key": so["secret_access_key"], "region_name": so["region"]}
        ds = StreamingDataset(f"s3://fleet/{c['prefix']}", storage_options=opts, cache_dir=cache, shuffle=True,
                              seed=0)
        dl = StreamingDataLoader(ds, batch_size=c["batch"], num_workers=c["procs"], collate_fn=as_list)
    lat, ok, mixing, delivered, wait = [], True, 0.0, 0, 0.0
    start = last = time.perf_counter()
    for batch in dl:
        now = time.perf_counter()
        lat.append(now - last)
        wait += now - last if len(lat) > 1 else 0.0
        ids = np.array([int(s["id"]) for s in batch], np.int64)
        xs = [s["x"] for s in batch]
        ok = ok and src.verify(ids, xs)
        mixing += src.check.mixing(ids)
        delivered += sum(np.asarray(x).nbytes for x in xs) if len(lat) > 1 else 0
        last = time.perf_counter()
        if len(lat) >= c["max_batches"] or last - start >= lat[0] + c["seconds"]:
            break
    # MiB/s after the first batch (which holds the workers' start and the first downloads), over
    # the time spent waiting for batches (the checks excluded, as they are for loaderx).
    return {"latencies": lat, "verified": bool(ok and lat), "mixing": mixing, "delivered": delivered,
            "elapsed": wait, "bytes": dir_bytes(cache)}


def server_gets(metrics):
    import urllib.request

    with urllib.request.urlopen(metrics, timeout=10) as r:
        text = r.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("SeaweedFS_s3_request_total{") and 'type="GET"' in line)


def rows(a, spec, so, work, metrics):
    """The peers' rows of one store: both peers at each process count, or a row saying why not."""
    metric = "entropy bits" if spec["store"] == "pet" else "mean |Δid|"
    out = []
    for peer in ("streaming", "litdata"):
        base = {"row": peer, "store": spec["store"], "records": spec["records"], "batch": 256, "mixing_metric": metric,
                "order": "py1e" if peer == "streaming" else "shuffle=True"}
        py = streaming_python() if peer == "streaming" else sys.executable
        if py is None:
            out += [{**base, "procs": p, "note": "not run: no MosaicML Streaming venv ($LOADERX_STREAMING_VENV; "
                     "scripts/install-deps.sh makes .venv-streaming)"} for p in a.procs]
            continue
        local, prefix = str(work / f"{peer}-{spec['store']}"), f"{peer}-{spec['store']}"
        t = time.perf_counter()
        w = subprocess.run([py, str(HERE), "--write", json.dumps({**spec, "peer": peer, "work": str(work),
                                                                  "out": local})],
                           capture_output=True, text=True, timeout=3600)
        if w.returncode != 0:
            tail = error_line(w.stderr)
            out += [{**base, "procs": p, "verified": False, "error": f"{peer} write exited {w.returncode}: {tail}"}
                    for p in a.procs]
            continue
        upload(local, prefix, so)
        print(f"fleet: {peer} {spec['store']} written and uploaded in {time.perf_counter() - t:.1f} s", file=sys.stderr)
        for procs in a.procs:
            c = {**spec, "peer": peer, "prefix": prefix, "procs": procs, "batch": 256, "storage_options": so,
                 "work": str(work), "seconds": a.seconds, "max_batches": a.max_batches}
            before = server_gets(metrics)
            r = subprocess.run([py, str(HERE), "--cell", json.dumps(c)], capture_output=True, text=True, timeout=1800)
            gets = server_gets(metrics) - before
            try:
                o = json.loads(r.stdout.strip().splitlines()[-1])
            except (IndexError, json.JSONDecodeError):
                tail = error_line(r.stderr)
                out.append({**base, "procs": procs, "verified": False, "error": f"cell exited {r.returncode}: {tail}"})
                continue
            n = len(o["latencies"])
            lat = np.array(o["latencies"])
            out.append({**base, "procs": procs, "batches": n, "requests_per_batch": gets / max(n, 1),
                        "bytes_per_batch": o["bytes"] / max(n, 1),
                        "delivered_per_batch": o["delivered"] / max(n - 1, 1),
                        "mib_s": o["delivered"] / o["elapsed"] / 2**20 if o["elapsed"] > 0 else None,
                        "first_ms": o["latencies"][0] * 1e3 if n else None,
                        "p50_ms": float(np.percentile(lat, 50) * 1e3) if n else None,
                        "p99_ms": float(np.percentile(lat, 99) * 1e3) if n else None,
                        "mixing": o["mixing"] / max(n, 1), "verified": o["verified"], "note": note(peer)})
            print(json.dumps(out[-1]), file=sys.stderr)
    return out


def error_line(stderr):
    """A traceback's exception line (the last line naming an Error or Exception), else its last line."""
    lines = [ln.strip() for ln in stderr.strip().splitlines() if ln.strip()] or ["no output"]
    named = [ln for ln in lines if re.match(r"^[\w.]+(Error|Exception)\b", ln)]
    return (named or lines)[-1][:300]


def note(peer):
    if peer == "streaming":
        return ("Streaming docs, Quick start with a remote + Shuffling: StreamingDataset(remote='s3://...', local=empty "
                "dir, shuffle=True, shuffle_algo='py1e', batch_size=256) in a torch DataLoader(num_workers=P), "
                "S3_ENDPOINT_URL names the server; MDS uncompressed, 64 MB shards downloaded whole; requests: GETs "
                "counted by SeaweedFS (index included); wire: shard bytes in the local dir; latency: batch "
                "inter-arrival, first included")
    return ("LitData README, Stream data from cloud storage: StreamingDataset('s3://...', storage_options=boto3 kwargs, "
            "cache_dir=empty dir, shuffle=True) in a StreamingDataLoader(num_workers=P); optimize(chunk_bytes=64MB); its "
            "boto3 download path forced (0.2.76's obstore prefetch has no allow_http: BadScheme on http://); "
            "requests: GETs counted by SeaweedFS; wire: chunk bytes in the cache dir; latency: batch inter-arrival")


def main():
    if sys.argv[1] == "--write":
        c = json.loads(sys.argv[2])
        (write_mds if c["peer"] == "streaming" else write_lit)(c, Path(c["work"]), c["out"])
        return 0
    c = json.loads(sys.argv[2])
    print(json.dumps(cell(c)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
