"""Datasets of parts from Python: parts written by several processes, committed as versions, read
through the same `DenseStore` / `RaggedStore` as one container (against a NumPy oracle), pickled
into another process at the version it read, resumed by a loader only at that version; racing
appenders (exactly one commit wins each version); the `loaderx` command's info / verify / gc /
commit / append, local and on a real SeaweedFS server."""

import json
import multiprocessing as mp
import pickle
import shutil
import subprocess
import sys

import numpy as np
import pytest
from _remote_helpers import seaweed_with

import loaderx
from loaderx import Allocator, Loader, dataset, dtypes
from loaderx.cli import main as cli
from loaderx.sampler import Sampler
from loaderx.zrecord import DenseStore, DenseWriter, RaggedBatch, RaggedStore, RaggedWriter

pytestmark = pytest.mark.timeout(300)


def part_data(p, n):
    """Part `p`'s records: int32 [2], each naming its part and row."""
    return np.stack([np.full(n, p, np.int32), np.arange(n, dtype=np.int32)], axis=1)


def write_part(root, p, n, storage_options=None):
    name = f"p{p:03d}"
    with DenseWriter(dataset.part_path(root, name), np.int32, (2,), "zstd",
                     storage_options=storage_options) as w:
        w.append(part_data(p, n))
    return name


def _writer(root, first, count):
    return [write_part(root, p, 3 + p % 4) for p in range(first, first + count)]


def test_parts_from_several_processes_commit_once_and_read_as_one_store(tmp_path):
    root = str(tmp_path / "ds")
    with mp.get_context("spawn").Pool(4) as pool:
        names = sum(pool.starmap(_writer, [(root, 10 * w, 5) for w in range(4)]), [])
    assert dataset.info(root) is None  # written, not committed
    m = dataset.commit(root, names)
    oracle = np.concatenate([part_data(10 * w + k, 3 + (10 * w + k) % 4) for w in range(4) for k in range(5)])
    assert (m["version"], m["records"], len(m["parts"])) == (1, len(oracle), 20)
    with DenseStore(root) as s, Allocator() as a:
        assert (len(s), s.version, s.parts, s.item_shape) == (len(oracle), 1, 20, (2,))
        v = s.bind(a)
        idx = np.random.default_rng(0).integers(0, len(oracle), 500)
        np.testing.assert_array_equal(dtypes.from_dlpack(v[idx]), oracle[idx])
        s.verify()
        # Append: the newest version grows, a pinned one and a pickled view keep theirs.
        more = [write_part(root, 90 + k, 4) for k in range(2)]
        assert dataset.append(root, more)["version"] == 2
        v2 = pickle.loads(pickle.dumps(v))
        assert len(v2) == len(oracle)
        with DenseStore(root) as s2:
            assert (s2.version, len(s2)) == (2, len(oracle) + 8)
        with DenseStore(root, version=1) as s1:
            assert len(s1) == len(oracle)
    assert dataset.versions(root) == [1, 2]


def _race(root, name, q):
    q.put(dataset.append(root, [name], retries=100)["version"])


def test_racing_appenders_each_land_exactly_once(tmp_path):
    root = str(tmp_path / "race")
    dataset.commit(root, [write_part(root, 0, 2)])
    names = [write_part(root, p, 2) for p in range(1, 7)]
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_race, args=(root, n, q)) for n in names]
    for p in procs:
        p.start()
    won = sorted(q.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert won == list(range(2, 8)), won  # every version won by exactly one appender
    listed = [p["name"] for p in dataset.info(root)["parts"]]
    assert sorted(listed) == sorted(["p000", *names])
    # Without retries, a conflict is a typed error (an AlreadyExistsError too).
    assert issubclass(loaderx.CommitConflictError, loaderx.AlreadyExistsError)


def test_columns_errors_and_the_loader_state_names_the_version(tmp_path):
    root = str(tmp_path / "cols")
    names = []
    for p, n in enumerate([5, 3]):
        name = f"w{p}"
        with DenseWriter(dataset.part_path(root, name, "label"), np.int64, (), "raw") as w:
            w.append(np.arange(n, dtype=np.int64) + 100 * p)
        with RaggedWriter(dataset.part_path(root, name, "tok"), np.int32, 1, "zstd") as w:
            w.append(RaggedBatch.from_records([np.full(1 + i, p, np.int32) for i in range(n)]))
        names.append(name)
    m = dataset.commit(root, names)
    assert [c["name"] for c in m["columns"]] == ["label", "tok"]
    with pytest.raises(loaderx.InvalidInputError, match="columns: label, tok"):
        DenseStore(root)
    with pytest.raises(loaderx.FormatError):
        RaggedStore(root, column="label")
    alloc = Allocator()
    label = DenseStore(root, column="label")
    tok = RaggedStore(root, column="tok")
    assert np.from_dlpack(label.bind(alloc)[[6, 0]]).tolist() == [101, 0]
    streams = {"label": [label.bind(alloc)], "tok": [tok.bind(alloc)]}
    with Loader(streams, Sampler(8, 4, Sampler.Mode.SEQUENTIAL), lambda s: s) as l:
        next(l)
        state = l.state_dict()
    assert {v.get("version") for s in state["streams"] for v in s["views"]} == {1}
    # A newer version: the state is refused, saying which version to open.
    with DenseWriter(dataset.part_path(root, "w9", "label"), np.int64, (), "raw") as w:
        w.append(np.zeros(8, np.int64))
    with RaggedWriter(dataset.part_path(root, "w9", "tok"), np.int32, 1, "zstd") as w:
        w.append(RaggedBatch.from_records([np.zeros(2, np.int32)] * 8))
    dataset.append(root, ["w9"])
    newer = {"label": [DenseStore(root, column="label").bind(alloc)],
             "tok": [RaggedStore(root, column="tok").bind(alloc)]}
    with Loader(newer, Sampler(8, 4, Sampler.Mode.SEQUENTIAL), lambda s: s) as l:
        with pytest.raises(loaderx.InvalidInputError, match="version 1 of its dataset, this loader reads version 2"):
            l.load_state_dict(state)
    # Unless asked: then the position carries over to version 2's records, here with a sampler
    # over all 16 of them (step 1: records 4-7, as before; step 2: records 8-11, the new part's,
    # where version 1's 8-record sampler would have started its second epoch).
    grown = {"label": [DenseStore(root, column="label").bind(alloc)]}
    with Loader(grown, Sampler(16, 4, Sampler.Mode.SEQUENTIAL)) as l:
        one = {"streams": [s for s in state["streams"] if s["name"] == "label"]}
        with pytest.raises(loaderx.InvalidInputError, match="version 1 of its dataset"):
            l.load_state_dict({**state, **one, "sampler": {**state["sampler"], "len": 16}})
        l.load_state_dict({**state, **one}, allow_other_version=True)
        assert l.state_dict()["step"] == 1
        assert l.state_dict()["streams"][0]["views"][0]["version"] == 2
        got = [np.from_dlpack(next(l)[0]["label"]).tolist() for _ in range(2)]
        assert got == [[4, 100, 101, 102], [0, 0, 0, 0]]
        with pytest.raises(loaderx.InvalidInputError, match="sampler.seed"):
            l.load_state_dict({**state, **one, "sampler": {**state["sampler"], "seed": 99}},
                              allow_other_version=True)
    pinned = {"label": [DenseStore(root, column="label", version=1).bind(alloc)],
              "tok": [RaggedStore(root, column="tok", version=1).bind(alloc)]}
    with Loader(pinned, Sampler(8, 4, Sampler.Mode.SEQUENTIAL), lambda s: s) as l:
        l.load_state_dict(state)
        assert l.state_dict() == state


def test_the_command_inspects_verifies_commits_and_cleans(tmp_path, capsys):
    root = str(tmp_path / "cmd")
    names = [write_part(root, p, 4) for p in range(3)]
    assert cli(["commit", root, *names[:2]]) == 0
    assert "committed version 1" in capsys.readouterr().out
    assert cli(["append", root, names[2]]) == 0
    capsys.readouterr()
    assert cli(["info", root, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["version"], doc["records"], doc["versions"]) == (2, 12, [1, 2])
    assert cli(["info", root]) == 0
    text = capsys.readouterr().out
    assert "12 records in 3 parts" in text and "int32" in text
    assert cli(["verify", root]) == 0
    assert "OK, 12 records in 3 part(s)" in capsys.readouterr().out
    # An unlisted part: listed by a dry run, removed with --delete.
    write_part(root, 7, 2)
    assert cli(["gc", root, "--min-age", "0"]) == 0
    assert "would remove 1" in capsys.readouterr().out
    assert cli(["gc", root, "--min-age", "0", "--delete", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["removed"] == ["p007"]
    # A damaged record: verify fails, naming the part, with a non-zero exit (also as a process).
    shard = tmp_path / "cmd" / "parts" / "p001" / "shard-000.zrd"
    b = bytearray(shard.read_bytes())
    b[len(b) // 2] ^= 0xFF
    shard.write_bytes(bytes(b))
    assert cli(["verify", root]) == 1
    assert "FAILED at part p001" in capsys.readouterr().err
    r = subprocess.run([sys.executable, "-m", "loaderx", "verify", root, "--json"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and json.loads(r.stdout)["part"] == "p001", r
    # A single container works too; a bad option is refused.
    one = str(tmp_path / "one")
    with DenseWriter(one, np.int8, (3,), "raw") as w:
        w.append(np.zeros((5, 3), np.int8))
    assert cli(["info", one]) == 0 and "single container, 5 records" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        cli(["info", one, "--option", "novalue"])


@pytest.fixture(scope="module")
def s3():
    yield from seaweed_with("datasets")


def test_a_dataset_on_object_storage(s3):
    so = s3.options()
    root = "s3://datasets/corpus"
    names = [write_part(root, p, 3 + p, storage_options=so) for p in range(4)]
    m = dataset.commit(root, names[:3], storage_options=so)
    assert m["records"] == 3 + 4 + 5
    # Racing commits of the next version: exactly one conditional PUT wins.
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_race_remote, args=(root, names[3], so, q)) for _ in range(3)]
    for p in procs:
        p.start()
    outcomes = sorted(q.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(timeout=60)
    assert outcomes.count("won") == 1 and outcomes.count("conflict") + outcomes.count("listed") == 2, outcomes
    oracle = np.concatenate([part_data(p, 3 + p) for p in range(4)])
    with DenseStore(root, storage_options=so) as s, Allocator() as a:
        assert (s.version, len(s)) == (2, len(oracle))
        # The open read the version manifest only: a listing and one GET, no request a part
        # (a pinned version: the GET alone); each part costs its own when first touched.
        assert s.request_stats["requests"] == 2, s.request_stats
        with DenseStore(root, storage_options=so, version=1) as pinned:
            assert pinned.request_stats["requests"] == 1, pinned.request_stats
        idx = np.random.default_rng(1).integers(0, len(oracle), 64)
        np.testing.assert_array_equal(dtypes.from_dlpack(s.bind(a)[idx]), oracle[idx])
        s.verify()
    opts = [f"--option={k}={v}" for k, v in so.items()]
    r = subprocess.run([sys.executable, "-m", "loaderx", "info", root, "--json", *opts],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["records"] == len(oracle)
    # An orphan part (a writer that never committed) is found and removed.
    write_part(root, 50, 2, storage_options=so)
    g = dataset.gc(root, min_age_secs=0, dry_run=False, storage_options=so)
    assert g["removed"] == ["p050"] and g["files"] >= 3
    assert dataset.gc(root, min_age_secs=0, storage_options=so)["removed"] == []


def _receipts(root, first, count, so):
    """A writer process: its parts, then their receipts (what it sends the committer)."""
    names = [write_part(root, p, 2 + p % 3, storage_options=so) for p in range(first, first + count)]
    return [dataset.describe_part(root, n, storage_options=so) for n in names]


def test_a_commit_from_writers_receipts_reads_no_part(s3):
    so = s3.options()
    root = "s3://datasets/receipts"
    with mp.get_context("spawn").Pool(4) as pool:
        receipts = sum(pool.starmap(_receipts, [(root, 10 * w, 6, so) for w in range(4)]), [])
    assert all(isinstance(r, bytes) for r in receipts)
    m = dataset.commit(root, receipts, storage_options=so)
    assert (m["version"], len(m["parts"])) == (1, 24)
    oracle = np.concatenate([part_data(10 * w + k, 2 + (10 * w + k) % 3) for w in range(4) for k in range(6)])
    with DenseStore(root, storage_options=so) as s, Allocator() as a:
        assert len(s) == len(oracle)
        np.testing.assert_array_equal(dtypes.from_dlpack(s.bind(a)[np.arange(len(oracle))]), oracle)
        s.verify()
    # The same parts committed by name make the same version (the next one).
    again = dataset.commit(root, [p["name"] for p in m["parts"]], storage_options=so)
    assert again["parts"] == m["parts"] and again["version"] == 2
    # A damaged receipt, a mixed list and a receipt listed twice are refused; nothing is committed.
    bad = bytearray(receipts[0])
    bad[-1] ^= 1
    with pytest.raises(loaderx.CorruptError, match="part receipt"):
        dataset.append(root, [bytes(bad)], storage_options=so)
    with pytest.raises(TypeError):
        dataset.commit(root, [receipts[0], "p000"], storage_options=so)
    with pytest.raises(loaderx.InvalidInputError, match="already listed"):
        dataset.append(root, receipts[:1], storage_options=so)
    assert dataset.versions(root, storage_options=so) == [1, 2]


def test_a_receipt_commit_reads_nothing_and_readers_check_the_parts(tmp_path):
    root = str(tmp_path / "ds")
    names = [write_part(root, p, 3) for p in range(2)]
    receipts = [dataset.describe_part(root, n) for n in names]
    # The second part is gone before the commit: a commit by name refuses it, one from receipts
    # reads nothing and succeeds; a reader names the part when it first needs it.
    shutil.rmtree(dataset.part_path(root, names[1]))
    with pytest.raises(loaderx.FormatError, match=names[1]):
        dataset.commit(root, names)
    dataset.commit(root, receipts)
    with DenseStore(root) as s, Allocator() as a:
        np.testing.assert_array_equal(dtypes.from_dlpack(s.bind(a)[np.arange(3)]), part_data(0, 3))
        with pytest.raises(loaderx.errors.Error, match=names[1]):
            s.bind(a)[np.array([4])]


def _race_remote(root, name, so, q):
    try:
        dataset.append(root, [name], storage_options=so)
        q.put("won")
    except loaderx.CommitConflictError:
        q.put("conflict")
    except loaderx.InvalidInputError:
        q.put("listed")  # it read the newest version after the winner committed it
