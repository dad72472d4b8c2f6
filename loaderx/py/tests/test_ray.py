"""loaderx datasets from and into Ray Data (loaderx.ray) on a real local Ray (ray 2.60, started once
for the module) and a real SeaweedFS: a write committed as one version and read back against a
NumPy oracle, a read -> map_batches -> write round trip byte-identical, read tasks by part and
range with the decoded size, typed errors naming column and row before anything commits, and the
faults: a write task raising once (retried: one part per task in the version), the driver killed
before the commit (no version; gc lists the parts), two jobs committing to one prefix (one wins,
the other gets CommitConflictError), the object store stopped mid-part (nothing partial listed)."""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

if os.environ.get("LOADERX_REQUIRE_RAY") == "1":
    import ray  # scripts/test.sh installs it: a missing Ray fails there instead of skipping
else:
    ray = pytest.importorskip("ray")

from _remote_helpers import seaweed_with

import loaderx
from loaderx import Allocator, dataset, dtypes
from loaderx.ray import Dense, Ragged, ZrecordDatasink, ZrecordDatasource, read_zrecord
from loaderx.zrecord import DenseStore, RaggedStore

pytestmark = pytest.mark.timeout(180)

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    # The test module's sinks (subclasses made here) travel to the workers by value.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ctx = ray.data.DataContext.get_current()
    ctx.execution_options.preserve_order = True
    ctx.enable_progress_bars = False
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()


def oracle(n: int, seed: int = 0) -> dict[str, list]:
    """n rows: an image uint8 [6,5,3], a label, a token array of 1..9 int32, bytes of 1..4."""
    rng = np.random.default_rng(seed)
    return {
        "img": list(rng.integers(0, 256, (n, 6, 5, 3), dtype=np.uint8)),
        "label": list(np.arange(n, dtype=np.int64) * 7),
        "tok": [rng.integers(0, 50_000, 1 + i % 9).astype(np.int32) for i in range(n)],
        "raw": [bytes(rng.integers(0, 256, 1 + i % 4, dtype=np.uint8)) for i in range(n)],
    }


def source(rows: dict[str, list], blocks: int):
    n = len(rows["label"])
    return ray.data.from_items([{k: v[i] for k, v in rows.items()} for i in range(n)], override_num_blocks=blocks)


SCHEMA = {"img": Dense(np.uint8, (6, 5, 3)), "label": Dense(np.int64), "tok": Ragged(np.int32, 1),
          "raw": Ragged(np.uint8, 1)}


def stored(root, storage_options=None) -> dict[str, list]:
    """Every record of every column of the dataset at `root`, read with the loaderx stores."""
    out = {}
    with Allocator() as a:
        for c in dataset.info(root, storage_options=storage_options)["columns"]:
            cls = DenseStore if c["kind"] == "dense" else RaggedStore
            with cls(root, column=c["name"], storage_options=storage_options) as s:
                v = s.bind(a)
                if c["kind"] == "dense":
                    out[c["name"]] = list(dtypes.from_dlpack(v[:]).copy()) if len(v) else []
                else:
                    out[c["name"]] = [np.from_dlpack(t).copy() for t in v[:].to_tensors()]
    return out


def assert_rows(got: dict[str, list], want: dict[str, list]) -> None:
    assert sorted(got) == sorted(want)
    for k, w in want.items():
        assert len(got[k]) == len(w), k
        for i, (g, x) in enumerate(zip(got[k], w)):
            x = np.frombuffer(x, np.uint8) if isinstance(x, bytes) else np.asarray(x)
            g = np.frombuffer(g, np.uint8) if isinstance(g, bytes) else np.asarray(g)
            assert g.dtype == x.dtype and g.shape == x.shape and g.tobytes() == x.tobytes(), (k, i)


def test_write_commits_one_version_and_reads_back(tmp_path):
    rows = oracle(120)
    root = str(tmp_path / "ds")
    sink = ZrecordDatasink(root, schema=SCHEMA, rows_per_part=25, codec={"img": "raw"})
    source(rows, 4).write_datasink(sink)
    m = dataset.info(root)
    assert dataset.versions(root) == [1] and sink.result["version"] == 1
    assert m["records"] == 120
    # 4 tasks of 30 rows, cut at 25: parts of 25 and 5 rows each, listed in task order.
    assert [p["records"] for p in m["parts"]] == [25, 5] * 4
    assert [p["name"] for p in m["parts"]] == sink.parts
    assert [p["name"].split("-")[2] for p in m["parts"]] == ["t00000"] * 2 + ["t00001"] * 2 + ["t00002"] * 2 + ["t00003"] * 2
    cols = {c["name"]: c for c in m["columns"]}
    assert (cols["img"]["kind"], cols["img"]["item_shape"], cols["img"]["codec"]) == ("dense", [6, 5, 3], "raw")
    assert (cols["tok"]["kind"], cols["tok"]["dtype"], cols["raw"]["dtype"]) == ("ragged", "int32", "uint8")
    assert_rows(stored(root), rows)
    DenseStore(root, column="img").verify()

    # Ray reads it back: tensor columns (fixed and variable shape), bytes as binary.
    back = read_zrecord(root, binary_columns=["raw"])
    types = dict(zip(back.schema().names, back.schema().types))
    assert "ArrowTensorTypeV2(shape=(6, 5, 3), dtype=uint8)" == str(types["img"])
    assert "ArrowVariableShapedTensorType(ndim=1, dtype=int32)" == str(types["tok"])
    got = back.take_all()
    assert_rows({k: [r[k] for r in got] for k in rows}, rows)


def test_read_tasks_by_part_and_range_with_the_decoded_size(tmp_path):
    rows = oracle(60, seed=1)
    root = str(tmp_path / "ds")
    source(rows, 3).write_datasink(ZrecordDatasink(root, schema=SCHEMA))  # 3 parts of 20
    src = ZrecordDatasource(root, binary_columns=["raw"])
    assert src.version == 1
    # Decoded size: Dense exact; Ragged from a sample that, at 60 records, is every record.
    dense = 60 * (6 * 5 * 3 + 8)
    ragged = sum(4 * len(t) + 8 + 8 + 4 for t in rows["tok"]) + sum(len(b) + 8 for b in rows["raw"])
    assert src.estimate_inmemory_data_size() == dense + ragged
    tasks = src.get_read_tasks(7)
    ranges = [r for t in tasks for r in src._pieces(7)[tasks.index(t)]]
    # Every range lies in one part; together they tile 0..60 in order; 7 tasks of at most 9 rows.
    assert ranges[0][0] == 0 and ranges[-1][1] == 60
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
    assert all(a // 20 == (b - 1) // 20 for a, b in ranges)
    assert [t.metadata.num_rows for t in tasks] == [9, 9, 9, 9, 9, 9, 6]
    assert sum(t.metadata.size_bytes for t in tasks) == pytest.approx(src.estimate_inmemory_data_size(), abs=len(tasks))
    # A task carries no store, allocator or client: it pickles to a few KiB and opens its own.
    blob = ray.cloudpickle.dumps(tasks[3])
    assert len(blob) < 64 * 1024
    blocks = list(pickle.loads(blob).read_fn())
    assert sum(b.num_rows for b in blocks) == 9
    assert blocks[0].column("label").to_pylist()[:2] == [int(rows["label"][27]), int(rows["label"][28])]
    # A pinned version keeps reading after a newer one is committed.
    source(oracle(5, seed=2), 1).write_datasink(ZrecordDatasink(root, schema=SCHEMA))
    assert dataset.versions(root) == [1, 2]
    assert ZrecordDatasource(root, version=1).estimate_inmemory_data_size() < ZrecordDatasource(root).estimate_inmemory_data_size()
    assert read_zrecord(root, version=1, columns=["label"]).count() == 60
    assert read_zrecord(root, columns=["label"]).count() == 65


def test_a_damaged_record_fails_the_read_naming_the_part(tmp_path):
    rows = oracle(40, seed=7)
    root = str(tmp_path / "ds")
    sink = ZrecordDatasink(root, schema=SCHEMA, codec={"img": "raw"}, data_shards=1)
    source(rows, 2).write_datasink(sink)
    shard = os.path.join(dataset.part_path(root, sink.parts[1], "img"), "shard-000.zrd")
    with open(shard, "r+b") as f:  # one byte of part 1's record 3 (raw: 64-byte header, 90-byte records)
        f.seek(64 + 3 * 90 + 7)
        b = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([b[0] ^ 0xFF]))
    assert read_zrecord(root, columns=["label"]).count() == 40  # other columns still read
    with pytest.raises(loaderx.CorruptError, match=sink.parts[1]):
        read_zrecord(root, columns=["img"]).take_all()


def test_read_map_batches_write_round_trip_is_byte_identical(tmp_path):
    rows = oracle(90, seed=3)
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    source(rows, 3).write_datasink(ZrecordDatasink(a, schema=SCHEMA, codec="zstd"))
    # Identity through NumPy batches: tensors, variable-shape tensors and bytes go through Ray's
    # conversions both ways.
    ds = read_zrecord(a, binary_columns=["raw"], rows_per_task=16).map_batches(lambda x: x, batch_format="numpy", batch_size=7)
    ds.write_datasink(ZrecordDatasink(b, schema=SCHEMA, codec="zstd"))
    ia, ib = dataset.info(a), dataset.info(b)
    assert ia["columns"] == ib["columns"] and ia["records"] == ib["records"] == 90
    got_a, got_b = stored(a), stored(b)
    assert_rows(got_b, got_a)
    assert_rows(got_a, rows)


def test_a_column_the_schema_cannot_hold_names_column_and_row(tmp_path):
    rows = oracle(12, seed=4)
    root = str(tmp_path / "ds")
    # Inferred schema, one block: an empty token array at row 5.
    bad = dict(rows, tok=[t if i != 5 else np.zeros(0, np.int32) for i, t in enumerate(rows["tok"])])
    with pytest.raises(loaderx.InvalidInputError, match=r"column 'tok' row 5: an empty record"):
        source(bad, 1).write_datasink(ZrecordDatasink(root, schema=SCHEMA))
    # A dtype the schema does not hold.
    with pytest.raises(loaderx.DTypeError, match=r"column 'label' row 0: values are int64, the column holds int32"):
        source(rows, 1).write_datasink(ZrecordDatasink(root, schema=dict(SCHEMA, label=Dense(np.int32))))
    # A shape the schema does not hold: rows 0..11 are [6,5,3], the schema says [6,5,2].
    with pytest.raises(loaderx.InvalidInputError, match=r"column 'img' row 0: shape \(6, 5, 3\), the Dense column holds \(6, 5, 2\)"):
        source(rows, 1).write_datasink(ZrecordDatasink(root, schema=dict(SCHEMA, img=Dense(np.uint8, (6, 5, 2)))))
    # Images of two sizes in a Dense column: the first row of the other size is named.
    mixed = dict(rows, img=[x if i < 8 else x[:4] for i, x in enumerate(rows["img"])])
    with pytest.raises(loaderx.InvalidInputError, match=r"column 'img' row 8: shape \(4, 5, 3\)"):
        source(mixed, 1).write_datasink(ZrecordDatasink(root, schema=SCHEMA))
    # A column kind nothing stores.
    strs = ray.data.from_items([{"s": "text"}])
    with pytest.raises(loaderx.UnsupportedColumnError, match=r"column 's'"):
        strs.write_datasink(ZrecordDatasink(root))
    assert dataset.versions(root) == []  # nothing ever committed


class FailOnceSink(ZrecordDatasink):
    """Raises once, in task 1, after its part was published (the part the failed attempt leaves)."""

    def __init__(self, *a, marker: str, **kw):
        super().__init__(*a, **kw)
        self.marker = marker

    def write(self, blocks, ctx):
        out = super().write(blocks, ctx)
        if ctx.task_idx == 1:
            try:
                os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                return out
            raise RuntimeError(f"injected failure after publishing {out['parts']}")
        return out


@pytest.mark.parametrize("retry", ["task", "in_task"])
def test_a_write_task_that_raises_once_is_retried_and_listed_once(tmp_path, retry):
    """`task`: Ray runs the task again (`max_retries`, `retry_exceptions`); `in_task`: Ray Data runs
    the write again inside the same task (`DataContext.retried_map_errors`)."""
    rows = oracle(80, seed=5)
    root = str(tmp_path / "ds")
    marker = str(tmp_path / "failed-once")
    sink = FailOnceSink(root, schema=SCHEMA, marker=marker)
    ctx = ray.data.DataContext.get_current()
    if retry == "task":
        source(rows, 4).write_datasink(sink, ray_remote_args={"max_retries": 2, "retry_exceptions": True})
    else:
        ctx.retried_map_errors, ctx.max_map_retries = True, 2
        try:
            source(rows, 4).write_datasink(sink)
        finally:
            ctx.retried_map_errors, ctx.max_map_retries = False, 0
    assert os.path.exists(marker)  # the failure happened
    m = dataset.info(root)
    assert m["version"] == 1 and dataset.versions(root) == [1]
    tasks = [p["name"].split("-")[2] for p in m["parts"]]
    assert tasks == ["t00000", "t00001", "t00002", "t00003"]  # one part per task, task 1 once
    assert_rows(stored(root), rows)
    # The failed attempt's part is on disk, listed by no version: gc lists exactly it.
    g = dataset.gc(root, min_age_secs=0)
    assert len(g["removed"]) == 1 and g["removed"][0].split("-")[2] == "t00001"
    assert g["removed"][0] not in sink.parts


def _job(address, mode, root, ctl, tag, rows=40, blocks=2, storage_options=None):
    args = [sys.executable, os.path.join(HERE, "_ray_job.py"), address, mode, root, str(ctl), str(tag), str(rows), str(blocks)]
    if storage_options is not None:
        args.append(json.dumps(storage_options))
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=HERE)


def _wait_for(pred, what: str, timeout: float = 120, proc=None):
    deadline = time.monotonic() + timeout
    while not pred():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the job exited ({proc.returncode}) before {what}: {proc.stdout.read()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_driver_killed_before_the_commit_leaves_no_version(tmp_path, local_ray):
    root, ctl = str(tmp_path / "ds"), tmp_path / "ctl"
    ctl.mkdir()
    job = _job(local_ray, "hang", root, ctl, "k", rows=40, blocks=2)
    try:
        _wait_for(lambda: (ctl / "ready.json").exists(), "the parts to be written", proc=job)
        parts = json.loads((ctl / "ready.json").read_text())
        # Both tasks' parts are on disk, published, before the driver dies.
        assert len(parts) == 2 and sorted(os.listdir(os.path.join(root, "parts"))) == sorted(parts)
        job.send_signal(signal.SIGKILL)
        job.wait(timeout=30)
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
    assert job.returncode == -signal.SIGKILL
    assert dataset.versions(root) == [] and dataset.info(root) is None
    g = dataset.gc(root, min_age_secs=0)
    assert sorted(g["removed"]) == sorted(parts) and g["dry_run"]
    dataset.gc(root, min_age_secs=0, dry_run=False)
    assert os.listdir(os.path.join(root, "parts")) == []


def test_two_jobs_committing_to_one_prefix_one_wins(tmp_path, local_ray):
    root, ctl = str(tmp_path / "ds"), tmp_path / "ctl"
    ctl.mkdir()
    jobs = {t: _job(local_ray, "barrier", root, ctl, t, rows=30, blocks=2) for t in ("1", "2")}
    try:
        for t, j in jobs.items():
            _wait_for(lambda t=t: (ctl / f"ready-{t}").exists(), f"job {t} to reach its commit", proc=j)
        # Both jobs started at version 0 and wrote their parts; now both commit.
        (ctl / "go").write_text("")
        out = {t: json.loads(j.communicate(timeout=120)[0].strip().splitlines()[-1]) for t, j in jobs.items()}
    finally:
        for j in jobs.values():
            if j.poll() is None:
                j.kill()
                j.wait()
    won = [t for t, o in out.items() if "version" in o]
    lost = [t for t, o in out.items() if "error" in o]
    assert len(won) == 1 and len(lost) == 1, out
    w, l = won[0], lost[0]
    assert out[w]["version"] == 1
    assert out[l]["error"] == "CommitConflictError" and "AlreadyExistsError" in out[l]["classes"], out[l]
    assert dataset.versions(root) == [1]
    m = dataset.info(root)
    assert [p["name"] for p in m["parts"]] == out[w]["parts"]
    with DenseStore(root, column="id") as s, Allocator() as a:
        np.testing.assert_array_equal(np.from_dlpack(s.bind(a)[:]), np.arange(30) + 1000 * int(w))
    loser_parts = json.loads((ctl / f"ready-{l}").read_text())
    assert sorted(dataset.gc(root, min_age_secs=0)["removed"]) == sorted(loser_parts)


@pytest.fixture(scope="module")
def s3():
    yield from seaweed_with("ray")


def test_on_object_storage_round_trip(s3, tmp_path):
    rows = oracle(50, seed=6)
    url, so = "s3://ray/rt", s3.options()
    source(rows, 2).write_datasink(ZrecordDatasink(url, schema=SCHEMA, storage_options=so))
    assert dataset.versions(url, storage_options=so) == [1]
    assert_rows(stored(url, so), rows)
    got = read_zrecord(url, storage_options=so, binary_columns=["raw"]).take_all()
    assert_rows({k: [r[k] for r in got] for k in rows}, rows)


def test_object_store_stopped_mid_part_lists_nothing_partial(s3, tmp_path, local_ray):
    url, so = "s3://ray/stop", s3.options()
    # Version 1, written here: what _ray_job.py writes with tag 1.
    ds = ray.data.range(20, override_num_blocks=1).map_batches(
        lambda b: {"id": b["id"] + 1000, "v": np.stack([b["id"] + 1000] * 4, axis=1).astype(np.int32)})
    sink = ZrecordDatasink(url, storage_options=so)
    ds.write_datasink(sink)
    out1 = {"version": sink.result["version"], "parts": sink.parts}
    assert out1["version"] == 1, out1
    ctl = tmp_path / "ctl"
    ctl.mkdir()
    job = _job(local_ray, "stall", url, ctl, "2", rows=20, blocks=1, storage_options=so)
    try:
        _wait_for(lambda: (ctl / "mid").exists(), "the task to be mid-part", proc=job)
        s3.kill()  # the part's upload now meets a dead server
        (ctl / "go").write_text("")
        out2 = json.loads(job.communicate(timeout=150)[0].strip().splitlines()[-1])
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
        if s3.proc.poll() is not None:
            s3.restart()
    assert out2.get("error") and "StorageIOError" in out2["classes"], out2
    assert dataset.versions(url, storage_options=so) == [1]
    m = dataset.info(url, storage_options=so)
    assert [p["name"] for p in m["parts"]] == out1["parts"]
    with DenseStore(url, column="id", storage_options=so) as s, Allocator() as a:
        s.verify()
        np.testing.assert_array_equal(np.from_dlpack(s.bind(a)[:]), np.arange(20) + 1000)
    # Whatever the failed job left is no listed part's (its upload failed at the part's first PUT).
    assert set(dataset.gc(url, min_age_secs=0, storage_options=so)["removed"]).isdisjoint(out1["parts"])
