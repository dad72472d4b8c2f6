"""Weighted mixtures from Python (issue 32): ``Loader.mixture`` over ``MixtureSource``s, each
shard naming its source, the exact apportionment, weights changed mid-run and carried through
``state_dict()``, and the construction errors. The apportionment over long windows and the layout
are tested against integer arithmetic in ``loaderx/tests/mixture.rs``."""

import json

import numpy as np
import pytest

import loaderx
from loaderx import Allocator, Loader, MixtureSource, dtypes
from loaderx.sampler import Sampler
from loaderx.zrecord import DenseStore, DenseWriter, RaggedBatch, RaggedStore, RaggedWriter

SIZES = (700, 300)
OFFSET = 100_000  # source k's ids are k * OFFSET + i
B = 32


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    r = tmp_path_factory.mktemp("mix")
    for k, n in enumerate(SIZES):
        with DenseWriter(r / f"id{k}", dtypes.int64, (), "raw") as w:
            w.append(np.arange(n, dtype=np.int64) + k * OFFSET)
        with RaggedWriter(r / f"tok{k}", dtypes.int32, 1, "zstd") as w:
            w.append(RaggedBatch.from_records([np.full(1 + i % 3, k, np.int32) for i in range(n)]))
    with DenseWriter(r / "wide", dtypes.int64, (2,), "raw") as w:
        w.append(np.zeros((300, 2), np.int64))
    with DenseWriter(r / "float", dtypes.float64, (), "raw") as w:
        w.append(np.zeros(300, np.float64))
    return r


@pytest.fixture
def views(root):
    alloc = Allocator("cpu", pool_size=1 << 22)
    stores = {}

    def bind(name, kind=DenseStore):
        if name not in stores:
            stores[name] = kind(root / name)
        return stores[name].bind(alloc)

    yield bind
    for s in stores.values():
        s.close()
    alloc.close()


def sources(views, weights=(2.0, 1.0), shards=2):
    return [
        MixtureSource(
            {"id": [views(f"id{k}") for _ in range(shards)], "tok": [views(f"tok{k}", RaggedStore) for _ in range(shards)]},
            weight=w,
            mode=Sampler.Mode.CYCLIC if k == 0 else Sampler.Mode.IID,
            seed=3 + k,
        )
        for k, w in enumerate(weights)
    ]


def records(shards):
    """One step as (shard index order, source, id) tuples, checking each shard's source."""
    out = []
    for s in shards:
        k = s["__source__"]
        ids = np.from_dlpack(s["id"]).tolist()
        assert all(i // OFFSET == k for i in ids), (k, ids)
        assert set(np.from_dlpack(s["tok"].values).tolist()) <= {k}
        out.extend((k, i) for i in ids)
    return tuple(out)


def test_each_shard_names_its_source_and_the_counts_follow_the_weights(views):
    with Loader.mixture(sources(views), B, records, workers=2, ordered=True) as l:
        totals = [0, 0]
        for step in range(1, 121):
            for k, _ in next(l):
                totals[k] += 1
            # Weights 2:1: source 0 has given floor(2T/3) of the first T records.
            t = step * B
            assert totals[0] == (2 * t) // 3 and totals[1] == t - (2 * t) // 3, step
        state = l.state_dict()
    assert state["sampler"]["kind"] == "mixture"
    assert state["sampler"]["sources"] == [
        {"len": 700, "mode": "CYCLIC", "seed": 3},
        {"len": 300, "mode": "IID", "seed": 4},
    ]
    assert state["sampler"]["schedule"] == [{"step": 0, "weights": [2.0, 1.0]}]
    assert len(json.dumps(state)) < 2000
    # A Cyclic source's records: a permutation of all of them per epoch.
    with Loader.mixture(sources(views), B, records, workers=0) as l:
        firsts = []
        while len(firsts) < 700:
            firsts += [i for k, i in next(l) if k == 0]
    assert sorted(firsts[:700]) == list(range(700))


def oracle(views, n):
    with Loader.mixture(sources(views), B, records, workers=0, schedule=[(20, [1.0, 3.0])]) as l:
        seq = [next(l) for _ in range(n)]
    return seq


@pytest.mark.parametrize("ordered", [False, True])
@pytest.mark.parametrize("workers", [0, 4])
def test_weights_changed_mid_run_resume_exactly(views, workers, ordered):
    # Completion order delivers at most workers + prefetch steps past the low-water step: 70
    # oracle steps cover everything 50 deliveries can reach.
    want = oracle(views, 70)
    steps = {b: k for k, b in enumerate(want)}
    for at in (7, 20, 31):
        with Loader.mixture(sources(views), B, records, workers=workers, prefetch=2, ordered=ordered) as a:
            assert a.set_weights([1.0, 3.0], 20) == 20
            got = [next(a) for _ in range(at)]
            state = json.loads(json.dumps(a.state_dict()))
        assert state["sampler"]["schedule"][-1] == {"step": 20, "weights": [1.0, 3.0]}
        # Built with the original weights: the state brings the change.
        with Loader.mixture(sources(views), B, records, workers=workers, prefetch=2, ordered=ordered) as b:
            b.load_state_dict(state)
            got += [next(b) for _ in range(50 - at)]
            end = b.state_dict()
        if ordered:
            assert got == want[:50], at
        else:
            seen = [steps[g] for g in got]
            assert len(set(seen)) == len(seen), at
            assert set(seen) == set(range(end["step"])) | set(end["delivered_ahead"]), at


def test_a_mixture_resumes_on_another_process_count(views):
    want = oracle(views, 30)
    old = [Loader.mixture(sources(views), B, records, workers=1, ordered=True, process_index=r, process_count=2,
                          schedule=[(20, [1.0, 3.0])]) for r in range(2)]
    for k in range(10):
        assert sorted(sum((next(l) for l in old), ())) == sorted(want[k])
    state = old[1].state_dict()
    for l in old:
        l.close()
    new = [Loader.mixture(sources(views), B, records, workers=1, ordered=True, process_index=r, process_count=4)
           for r in range(4)]
    for l in new:
        l.load_state_dict(state)
    for k in range(10, 30):
        assert sorted(sum((next(l) for l in new), ())) == sorted(want[k]), k
    for l in new:
        l.close()


def test_bad_mixtures_are_refused(views):
    def refused(srcs, match, **kw):
        with pytest.raises(loaderx.InvalidInputError, match=match):
            Loader.mixture(srcs, B, workers=0, **kw)

    for w, match in [((1.0, 0.0), "weight is 0"), ((-1.0, 1.0), "weight is -1"),
                     ((float("nan"), 1.0), "weight is NaN"), ((1.0, float("inf")), "weight is inf"),
                     ((1000.0, 1.0), "at least one record per global batch")]:
        refused(sources(views, w), match)
    refused([], "at least one source")
    srcs = sources(views)
    refused([srcs[0], MixtureSource({"id": [views("float")] * 2, "tok": srcs[1].streams["tok"]})], "item shape|dtype")
    refused([srcs[0], MixtureSource({"id": [views("wide")] * 2, "tok": srcs[1].streams["tok"]})], r"item shape \[2\]")
    refused([srcs[0], MixtureSource({"tok": srcs[1].streams["tok"], "id": srcs[1].streams["id"]})], "same stream names")
    refused([srcs[0], MixtureSource({"id": srcs[1].streams["id"], "__source__": srcs[1].streams["tok"]})], "reserved")
    with pytest.raises(loaderx.InvalidInputError, match="weights can change"):
        with Loader.mixture(sources(views), B, workers=0, schedule=[(30, [1.0, 1.0]), (10, [1.0, 2.0])]):
            pass
    with pytest.raises(TypeError):
        Loader.mixture([object()], B)
    with Loader(srcs[0].streams, Sampler(700, B, Sampler.Mode.IID), workers=0) as plain:
        with pytest.raises(loaderx.InvalidInputError, match="needs a mixture"):
            plain.set_weights([1.0])
    with Loader.mixture(sources(views), B, workers=0) as l:
        next(l)
        with pytest.raises(loaderx.InvalidInputError, match="already drawn"):
            l.set_weights([1.0, 1.0], 0)
        assert l.set_weights([1.0, 1.0]) == 1
