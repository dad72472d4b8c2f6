"""Sequence packing (``Loader.pack``) against naive pure-Python packers.

* the packed batches equal a plain re-implementation of each mode run on the documents a
  non-packing loader delivers (hypothesis over document lengths, ``seq_len``, batch size, pool,
  workers 0 and 2): so every token appears exactly once, in order, no segment crosses a document
  boundary, positions restart per segment;
* first-fit pads no more than a naive packer that emits every open row once a document fits none
  (Grain's first-fit rule);
* resume: ``state_dict()`` after k batches (through JSON), a new loader, ``load_state_dict``, gives
  the uninterrupted run's batches, for concat and first-fit, workers 0 and 2, process_count 2 and
  a mixture;
* refusals name the reason."""

import json
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loaderx import Allocator, Loader, MixtureSource, dtypes
from loaderx.errors import InvalidInputError
from loaderx.sampler import Sampler
from loaderx.zrecord import RaggedBatch, RaggedStore, RaggedWriter

STEP = 8  # records per loader step


def write_docs(path, lens, base=0):
    """Document d holds tokens (base + d) * 10_000 + j, j < lens[d]."""
    docs = [((base + d) * 10_000 + np.arange(n)).astype(np.int32) for d, n in enumerate(lens)]
    with RaggedWriter(path, dtypes.int32, 1, "raw") as w:
        w.append(RaggedBatch.from_records(docs))
    return path


def make_loader(path, n, workers=0, **kw):
    alloc = Allocator("cpu", pool_size=1 << 24)
    store = RaggedStore(path)
    sampler = Sampler(n, STEP, Sampler.Mode.CYCLIC, seed=3)
    return Loader({"t": [store.bind(alloc)]}, sampler, workers=workers, prefetch=2, ordered=True, **kw)


def delivered(loader, steps):
    """The documents a non-packing loader delivers over `steps` steps, in order."""
    docs = []
    for _ in range(steps):
        for shard in next(loader):
            docs += [np.from_dlpack(t).copy() for t in shard["t"].to_tensors()]
    return docs


def as_arrays(batch):
    return tuple(np.from_dlpack(batch[k]).copy() for k in ("tokens", "segment_ids", "positions"))


def render(rows, batch, seq_len):
    """Rows (each a list of token segments) as (tokens, segment_ids, positions), padded."""
    out = [np.zeros((batch, seq_len), np.int32) for _ in range(3)]
    for r, segs in enumerate(rows):
        c = 0
        for k, s in enumerate(segs):
            out[0][r, c:c + len(s)] = s
            out[1][r, c:c + len(s)] = k + 1
            out[2][r, c:c + len(s)] = np.arange(len(s))
            c += len(s)
    return tuple(out)


def concat_oracle(docs, batch, seq_len, batches):
    flat = np.concatenate(docs)
    starts = np.zeros(len(flat), bool)
    starts[np.cumsum([0] + [len(d) for d in docs[:-1]])] = True
    out = []
    for b in range(batches):
        rows = []
        for r in range(batch):
            lo = (b * batch + r) * seq_len
            cuts = [lo] + [i for i in range(lo + 1, lo + seq_len) if starts[i]] + [lo + seq_len]
            rows.append([flat[a:z] for a, z in zip(cuts[:-1], cuts[1:])])
        out.append(render(rows, batch, seq_len))
    return out


def pieces(docs, seq_len):
    for d in docs:
        for a in range(0, len(d), seq_len):
            yield d[a:a + seq_len]


def first_fit_oracle(docs, batch, seq_len, pool, batches):
    """First-fit as documented: a piece goes into the first open row with room; with none and the
    pool full, the fullest open row (the first of equals) is emitted first; a full row is emitted
    at once."""
    it = pieces(docs, seq_len)
    used = lambda row: sum(len(s) for s in row)  # noqa: E731
    open_rows, out = [], []
    for _ in range(batches):
        rows = []
        while len(rows) < batch:
            full = [i for i, r in enumerate(open_rows) if used(r) == seq_len]
            if full:
                rows.append(open_rows.pop(full[0]))
                continue
            c = next(it)
            fit = [i for i, r in enumerate(open_rows) if seq_len - used(r) >= len(c)]
            if fit:
                slot = fit[0]
            else:
                if len(open_rows) >= pool:
                    rows.append(open_rows.pop(max(range(len(open_rows)), key=lambda i: used(open_rows[i]))))
                open_rows.append([])
                slot = len(open_rows) - 1
            open_rows[slot].append(c)
            if used(open_rows[slot]) == seq_len and len(rows) < batch:
                rows.append(open_rows.pop(slot))
        out.append(render(rows, batch, seq_len))
    return out


def grain_style_padding(docs, seq_len, pool, rows_wanted):
    """Padding of the naive first-fit that emits every open row once a piece fits none."""
    open_rows, emitted, pad = [], 0, 0
    for c in pieces(docs, seq_len):
        fit = [i for i, r in enumerate(open_rows) if seq_len - r >= len(c)]
        if fit:
            open_rows[fit[0]] += len(c)
            continue
        if len(open_rows) >= pool:
            for r in open_rows:
                if emitted < rows_wanted:
                    pad += seq_len - r
                    emitted += 1
            open_rows = []
        open_rows.append(len(c))
    return pad if emitted >= rows_wanted else None


@settings(max_examples=30, deadline=None)
@given(
    lens=st.lists(st.integers(1, 300), min_size=24, max_size=80),
    seq_len=st.integers(8, 256),
    batch=st.integers(1, 4),
    pool=st.integers(1, 6),
    workers=st.sampled_from([0, 2]),
)
def test_packed_batches_equal_the_naive_packers(lens, seq_len, batch, pool, workers):
    n = len(lens) - len(lens) % STEP
    total = sum(lens[:n])
    batches = max(1, total // (batch * seq_len))
    with tempfile.TemporaryDirectory() as d:
        path = write_docs(Path(d) / "docs", lens[:n])
        docs = delivered(make_loader(path, n, workers), 3 * n // STEP)
        for mode, oracle in (
            ("concat", concat_oracle(docs, batch, seq_len, batches)),
            ("first_fit", first_fit_oracle(docs, batch, seq_len, pool, batches)),
        ):
            loader = make_loader(path, n, workers).pack("t", seq_len, batch, mode=mode, pool=pool)
            got = [as_arrays(next(loader)) for _ in range(batches)]
            for g, w in zip(got, oracle):
                for a, b in zip(g, w):
                    np.testing.assert_array_equal(a, b)
            if mode == "first_fit":
                pad = sum(int((g[1] == 0).sum()) for g in got)
                naive = grain_style_padding(docs, seq_len, pool, batches * batch)
                if naive is not None:
                    assert pad <= naive
            loader.close()


def test_every_token_of_an_epoch_appears_once_in_order_per_document(tmp_path):
    rng = np.random.default_rng(0)
    lens = rng.integers(1, 900, 256).tolist()
    path = write_docs(tmp_path / "docs", lens)
    loader = make_loader(path, 256).pack("t", 512, 4, mode="first_fit", pool=16)
    seen = {}
    for _ in range(60):
        tok, seg, pos = as_arrays(next(loader))
        assert tok.dtype == np.int32 and seg.dtype == np.int32 and tok.shape == (4, 512)
        for r in range(4):
            for s in range(1, seg[r].max() + 1):
                run = tok[r][seg[r] == s]
                assert (pos[r][seg[r] == s] == np.arange(len(run))).all()
                doc, first = divmod(int(run[0]), 10_000)
                assert (run == run[0] + np.arange(len(run))).all(), "a segment is one document's run"
                seen.setdefault(doc, []).append((first, len(run)))
    # The documents of the first epoch (32 steps of 8) that were packed whole came in pieces
    # that tile them exactly once, in order.
    whole = [d for d, p in seen.items() if sum(n for _, n in p) == lens[d]]
    assert len(whole) > 100
    for d in whole:
        p = sorted(seen[d])
        assert [a for a, _ in p] == list(np.cumsum([0] + [n for _, n in p[:-1]]))


def mixture_loader(paths, workers):
    alloc = Allocator("cpu", pool_size=1 << 24)
    srcs = [
        MixtureSource({"t": [RaggedStore(p).bind(alloc)]}, weight=w, mode=Sampler.Mode.CYCLIC, seed=s)
        for p, w, s in zip(paths, (3.0, 1.0), (1, 2))
    ]
    return Loader.mixture(srcs, batch=16, workers=workers, prefetch=2, ordered=True, schedule=[(5, [1.0, 1.0])])


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    root = tmp_path_factory.mktemp("pack")
    rng = np.random.default_rng(1)
    a = write_docs(root / "a", rng.integers(1, 700, 192).tolist())
    b = write_docs(root / "b", rng.integers(1, 400, 128).tolist(), base=500)
    return a, b


@pytest.mark.parametrize("mode", ["concat", "first_fit"])
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("data", ["plain", "process_count=2", "mixture"])
def test_a_state_saved_after_k_batches_resumes_exactly(stores, mode, workers, data):
    def make():
        if data == "mixture":
            loader = mixture_loader(stores, workers)
        elif data == "process_count=2":
            loader = make_loader(stores[0], 192, workers, process_index=1, process_count=2)
        else:
            loader = make_loader(stores[0], 192, workers)
        return loader.pack("t", 384, 3, mode=mode, pool=4)

    k, m = 5, 6
    with make() as loader:
        want = [as_arrays(next(loader)) for _ in range(k + m)]
    with make() as loader:
        for i in range(k):
            for a, b in zip(as_arrays(next(loader)), want[i]):
                np.testing.assert_array_equal(a, b)
        state = json.loads(json.dumps(loader.state_dict()))
    assert state["pack"]["batches"] == k and state["pack"]["mode"] == mode
    with make() as loader:
        loader.load_state_dict(state)
        for i in range(k, k + m):
            for a, b in zip(as_arrays(next(loader)), want[i]):
                np.testing.assert_array_equal(a, b)


def test_refusals_name_the_reason(stores):
    with pytest.raises(InvalidInputError, match="ordered=True"):
        alloc = Allocator("cpu")
        Loader({"t": [RaggedStore(stores[0]).bind(alloc)]}, Sampler(192, 8, Sampler.Mode.CYCLIC), workers=2).pack("t", 64, 2)
    with pytest.raises(InvalidInputError, match="mode must be"):
        make_loader(stores[0], 192).pack("t", 64, 2, mode="best_fit")
    with pytest.raises(InvalidInputError, match="no stream"):
        make_loader(stores[0], 192).pack("x", 64, 2)
    packed = make_loader(stores[0], 192).pack("t", 64, 2)
    next(packed)
    plain = make_loader(stores[0], 192)
    with pytest.raises(InvalidInputError, match="saved by a packing loader"):
        plain.load_state_dict(packed.state_dict())
    with pytest.raises(InvalidInputError, match="no \"pack\" entry"):
        packed.load_state_dict(plain.state_dict())
    with pytest.raises(InvalidInputError, match="already packs"):
        packed.pack("t", 64, 2)
    with pytest.raises(InvalidInputError, match="allow_other_version does not apply to a packed loader"):
        packed.load_state_dict(packed.state_dict(), allow_other_version=True)
    alloc = Allocator("cpu")
    tf = Loader({"t": [RaggedStore(stores[0]).bind(alloc)]}, Sampler(192, 8, Sampler.Mode.CYCLIC), transform=lambda s: s, workers=0)
    with pytest.raises(InvalidInputError, match="without a transform"):
        next(tf.pack("t", 64, 2))
