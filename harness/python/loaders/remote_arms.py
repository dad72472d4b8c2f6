"""The peer rows of the object-storage tables (``harness remote``): LitData, MosaicML Streaming and
Lance reading the table's records from the SeaweedFS server the harness started on loopback, each
the way its docs read S3 (checked against the installed versions' source; the row's note names the
doc). The data is the one the loader tables' arms write (same writers, same settings), uploaded
once per server and table under ``s3://$LOADERX_REMOTE_BUCKET/<peer>-<kind>-<records>/`` with
boto3; every row then starts with an empty local cache of its own (a temp dir), so "cold" means
the same for them as for zrecord: nothing of the table on the reader's side.

The S3 gateway is ``$LOADERX_REMOTE_ENDPOINT``; credentials are the ``AWS_*`` variables the
harness sets. Timing and verification are the loader tables' (``common.timed``: warm-up, then
blocks of timed batches after untimed drained ones, every timed batch compared in full with the
source arrays)."""

from __future__ import annotations

import os
import tempfile

import numpy as np

from .common import Job, Source, timed, timed_loader

DONE = ".uploaded"


def endpoint() -> str:
    return os.environ["LOADERX_REMOTE_ENDPOINT"]


def bucket() -> str:
    return os.environ.get("LOADERX_REMOTE_BUCKET", "bench")


def upload_dir(local: str, prefix: str) -> None:
    """Every file under ``local`` to ``s3://bucket/prefix/<relative path>`` (the harness's own
    ``.complete`` markers left out), then the marker ``prefix/.uploaded``; skipped when the marker
    is there (an earlier repeat uploaded it to this server)."""
    import boto3
    import botocore.exceptions

    s3 = boto3.client("s3", endpoint_url=endpoint(), region_name=os.environ.get("AWS_DEFAULT_REGION", "us-east-1"))
    try:
        s3.head_object(Bucket=bucket(), Key=f"{prefix}/{DONE}")
        return
    except botocore.exceptions.ClientError:
        pass
    for root, _, files in os.walk(local):
        for f in sorted(files):
            if f == ".complete":
                continue
            path = os.path.join(root, f)
            s3.upload_file(path, bucket(), f"{prefix}/{os.path.relpath(path, local)}")
    s3.put_object(Bucket=bucket(), Key=f"{prefix}/{DONE}", Body=b"")


def empty_cache(job: Job, name: str) -> str:
    """A fresh, empty local cache directory for this row (under the peer dir, removed with it)."""
    os.makedirs(job.peer_dir, exist_ok=True)
    return tempfile.mkdtemp(prefix=f"{name}-cache-", dir=job.peer_dir)


def compare_dirs(written: str, local: str) -> str:
    """What a reader's local copy holds against the files that were uploaded: the files that differ
    (by SHA-256) or are missing, so a mismatch says whether the download or the read went wrong."""
    import hashlib

    def sha(path: str) -> str:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        return h.hexdigest()

    differ, missing, same = [], [], 0
    for root, _, files in os.walk(written):
        for f in sorted(files):
            if f == ".complete":
                continue
            rel = os.path.relpath(os.path.join(root, f), written)
            there = os.path.join(local, rel)
            if not os.path.exists(there):
                missing.append(rel)
            elif sha(there) != sha(os.path.join(root, f)):
                differ.append(f"{rel} ({os.path.getsize(there)} of {os.path.getsize(os.path.join(root, f))} bytes)")
            else:
                same += 1
    extra = sorted(set(os.listdir(local)) - set(os.listdir(written)))
    return (
        f"local copy after the run: {same} files equal to the uploaded ones, differ: {differ or 'none'}, "
        f"not downloaded: {missing or 'none'}, other files: {extra or 'none'}"
    )


def run_streaming(job: Job, src: Source, draws: np.ndarray) -> dict:
    from importlib.metadata import version

    from streaming import StreamingDataset

    from .streaming_arm import MdsBatches, write_mds
    from .torch_arms import data_loader, workers_of

    prefix = f"mds-{job.kind}-{len(src)}"
    # Streaming's S3 downloader reads the endpoint from this variable (base/storage/download.py).
    os.environ["S3_ENDPOINT_URL"] = endpoint()
    workers = workers_of(job.arm)
    written = write_mds(job, src)
    upload_dir(written, prefix)
    local = empty_cache(job, "streaming")
    ds = StreamingDataset(remote=f"s3://{bucket()}/{prefix}", local=local, batch_size=256, shuffle=False)
    dl, note = data_loader(MdsBatches(ds), draws, workers, job.dense)
    out = timed_loader(job, src, draws, dl)
    if out.get("mismatch"):
        out["error"] += "; " + compare_dirs(written, local)
    out["config"] = (
        f"Streaming docs, Quick start with a remote (StreamingDataset(remote='s3://...', local=dir) in a torch DataLoader "
        f"with workers; S3_ENDPOINT_URL names the server): mosaicml-streaming {version('mosaicml-streaming')}, MDS "
        f"ndarray column, uncompressed 64 MB shards (a miss downloads the whole shard into local), no cache_limit "
        f"(the default: no eviction); a map-style view whose __getitems__ is ds[np.ndarray]; {note}"
    )
    return out


def run_litdata(job: Job, src: Source, draws: np.ndarray) -> dict:
    from importlib.metadata import version

    from litdata import StreamingDataset

    from .litdata_arm import LitBatches, write_litdata
    from .torch_arms import data_loader, workers_of

    prefix = f"litdata-{job.kind}-{len(src)}"
    upload_dir(write_litdata(job, src), prefix)
    # LitData passes storage_options to boto3 (litdata/streaming/client.py).
    storage_options = {
        "endpoint_url": endpoint(),
        "aws_access_key_id": os.environ["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": os.environ["AWS_SECRET_ACCESS_KEY"],
        "region_name": os.environ.get("AWS_DEFAULT_REGION", "us-east-1"),
    }
    workers = workers_of(job.arm)
    ds = StreamingDataset(
        f"s3://{bucket()}/{prefix}",
        storage_options=storage_options,
        cache_dir=empty_cache(job, "litdata"),
        batch_decode=False,
    )
    dl, note = data_loader(LitBatches(ds), draws, workers, job.dense)
    out = timed_loader(job, src, draws, dl)
    out["config"] = (
        f"LitData README, Stream data from cloud storage (StreamingDataset('s3://...', storage_options=boto3 kwargs, "
        f"cache_dir=dir) in a DataLoader with workers): litdata {version('litdata')}, optimize(chunk_bytes=64MB, "
        f"keep_data_ordered=True), batch_decode=False; a map-style view whose __getitems__ loops ds[i] (LitData has no "
        f"batched fetch); {note}"
    )
    return out


def run_lance(job: Job, src: Source, draws: np.ndarray) -> dict:
    import lance

    from .lance_arm import taker, write_lance

    prefix = f"lance-{job.kind}-{len(src)}/records.lance"
    upload_dir(write_lance(job, src), prefix)
    # Lance's object-store keys (the ones zrecord's storage_options take too).
    storage_options = {
        "endpoint": endpoint(),
        "region": os.environ.get("AWS_DEFAULT_REGION", "us-east-1"),
        "allow_http": "true",
        "access_key_id": os.environ["AWS_ACCESS_KEY_ID"],
        "secret_access_key": os.environ["AWS_SECRET_ACCESS_KEY"],
    }
    ds = lance.dataset(f"s3://{bucket()}/{prefix}", storage_options=storage_options)
    out = timed(job, src, draws, taker(ds, src, draws, job.dense))
    threads = os.environ.get("LANCE_IO_THREADS", "default (64 for object stores)")
    out["config"] = (
        f"Lance docs, Object store configuration + Read and write data (random access: take): pylance "
        f"{lance.__version__}, one large_binary column read from s3:// with storage_options (endpoint, region, "
        f"allow_http, keys), dataset.take(indices) in-process on Lance's own I/O threads (LANCE_IO_THREADS={threads}); "
        f"no local cache (Lance has none), no workers, nothing read ahead, step order"
    )
    return out


RUNS = {"streaming-s3": run_streaming, "litdata-s3": run_litdata, "lance-s3": run_lance}


def run(job: Job) -> dict:
    src = job.source()
    draws = job.draws()
    family = job.arm.rsplit("-w", 1)[0] if "-w" in job.arm else job.arm.rsplit("-", 1)[0]
    out = RUNS[family](job, src, draws)
    # Logical bytes per step over the steps the run drew (the timed ones are a sample of them).
    if src.dense is not None:
        per_record = src.dense[0].nbytes
        out["mean_batch_bytes"] = float(per_record * draws.shape[1])
    else:
        itemsize = src.tokens.dtype.itemsize
        lens = src.offsets[draws + 1] - src.offsets[draws]
        out["mean_batch_bytes"] = float(lens.sum(axis=1).mean() * itemsize)
    return out
