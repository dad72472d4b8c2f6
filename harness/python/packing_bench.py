"""The `packing` table: WikiText tokens packed into [batch, seq_len] rows.

Rows, each at seq_len 1,024 and 4,096 and batch 8 and 32:

* ``loaderx-concat`` / ``loaderx-first-fit``: ``Loader(...).pack(...)`` over the Ragged token store
  (2 workers, ordered), tokens, segment ids and positions as DLPack tensors read through NumPy;
* ``numpy-concat-split``: the same documents (already in memory, in the same order) concatenated
  with ``np.concatenate`` and reshaped, segment ids and positions computed with NumPy;
* ``grain-concat-then-split`` / ``grain-first-fit``: Grain 0.2.18's ``ConcatThenSplitIterDataset``
  and ``FirstFitPackIterDataset`` over the same in-memory documents, batched to ``[batch,
  seq_len]``, configured as Grain's API reference documents them (``GRAIN_NOTE``, each row's note:
  every argument at its documented default but ``length_struct`` and first-fit's bin count, 32 as
  loaderx's pool, which the reference leaves to the user); skipped with the reason where grain is
  not installed;
* ``memcpy-limit``: the output bytes of one batch (tokens, segment ids, positions) copied with
  ``np.copyto`` from a 256 MiB source, the bound any packer that writes them meets.

Tokens/s counts real (non-padding) tokens: batches per second times the tokens of a batch less
the padding fraction measured on the verified batches. Every row is verified on its own output: concat rows
must equal the cut of the concatenated documents exactly; first-fit rows must consist of
segments that are each one whole document (or a seq_len piece of one) of the stream, each
used at most as often as the stream holds it, with positions from 0 per segment.

Usage: python packing_bench.py --corpus DIR [--seconds S] [--json OUT]
(DIR: a prepared token corpus, tokens.npy + offsets.npy, as the harness's token stage writes.)
"""

import argparse
import collections
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from loaderx import Allocator, Loader, dtypes
from loaderx.sampler import Sampler
from loaderx.zrecord import RaggedBatch, RaggedStore, RaggedWriter

STEP = 512  # documents per loader step
POOL = 32  # first-fit open rows (loaderx's default; Grain's bins)
GEOMETRY = [(1024, 8), (1024, 32), (4096, 8), (4096, 32)]
GRAIN_DOC = "https://google-grain.readthedocs.io/en/latest/_autosummary/grain.experimental.{}.html"
# The Grain doc each Grain row follows (its API reference, docs/grain.experimental.rst in 0.2.18).
GRAIN_NOTE = {
    "concat": "as Grain's API reference documents ConcatThenSplitIterDataset ("
              + GRAIN_DOC.format("ConcatThenSplitIterDataset")
              + "): length_struct {'t': seq_len}, every other argument at its default; then .batch(batch)",
    "first_fit": "as Grain's API reference documents FirstFitPackIterDataset ("
                 + GRAIN_DOC.format("FirstFitPackIterDataset")
                 + "): length_struct {'t': seq_len}, shuffle_bins and seed at their defaults (True, 0); "
                 "num_packing_bins 32, loaderx's pool (the reference names no count: more bins pad less, "
                 "at the risk of packing two epochs' elements together); then .batch(batch)",
}


def load_docs(corpus):
    tokens = np.load(corpus / "tokens.npy", mmap_mode="r")
    offsets = np.load(corpus / "offsets.npy")
    return [np.asarray(tokens[a:b], dtype=np.int32) for a, b in zip(offsets[:-1], offsets[1:])]


def write_store(path, docs):
    with RaggedWriter(path, dtypes.int32, 1, "raw") as w:
        for k in range(0, len(docs), 4096):
            w.append(RaggedBatch.from_records(docs[k:k + 4096]))


def delivery_order(n, steps):
    """The record order the loader's sampler delivers: `steps` batches of STEP."""
    s = Sampler(n, STEP, Sampler.Mode.CYCLIC, seed=0)
    return np.concatenate([s.next().copy() for _ in range(steps)])


def rows_of(tokens, seg):
    """Each row's segments as byte strings, and the padding count."""
    out, pad = [], 0
    for t, s in zip(tokens, seg):
        pad += int((s == 0).sum())
        cuts = np.flatnonzero(np.diff(s)) + 1
        for piece, ids in zip(np.split(t, cuts), np.split(s, cuts)):
            if ids[0] != 0:
                out.append(piece.tobytes())
    return out, pad


def verify_first_fit(batches, stream_docs, seq_len):
    avail = collections.Counter()
    for d in stream_docs:
        for a in range(0, len(d), seq_len):
            avail[d[a:a + seq_len].tobytes()] += 1
    for tokens, seg, pos in batches:
        for t, s, p in zip(tokens, seg, pos):
            cuts = np.flatnonzero(np.diff(s)) + 1
            for ps, ids in zip(np.split(p, cuts), np.split(s, cuts)):
                if ids[0] != 0 and not (ps == np.arange(len(ps))).all():
                    return False
        pieces, _ = rows_of(tokens, seg)
        for b in pieces:
            if avail[b] == 0:
                return False
            avail[b] -= 1
    return True


def verify_concat(batches, stream_docs, seq_len):
    flat = np.concatenate(stream_docs)
    got = np.concatenate([t.reshape(-1) for t, _, _ in batches])
    if not (got == flat[:len(got)]).all():
        return False
    starts = np.zeros(len(flat) + 1, bool)
    starts[np.cumsum([0] + [len(d) for d in stream_docs])] = True
    for k, (_, s, p) in enumerate(batches):
        lo = k * s.size
        first = starts[lo:lo + s.size].reshape(s.shape).copy()
        first[:, 0] = True
        if not ((p == 0) == first).all():
            return False
    return True


def timed(produce, seconds, units=None):
    """Calls of `produce` per second over at least `seconds` and 3 calls (after one warm-up
    call); with `units`, the units per second, `units(result)` counting each call's."""
    produce()
    calls, n, t0 = 0, 0, time.perf_counter()
    while True:
        r = produce()
        calls += 1
        n += 1 if units is None else units(r)
        el = time.perf_counter() - t0
        if el >= seconds and calls >= 3:
            return n / el


def padding(batches):
    """The padding fraction of verified batches (segment id 0)."""
    return float(np.mean([(s == 0).mean() for _, s, _ in batches]))


def loaderx_row(store, n, mode, seq_len, batch, seconds, stream_docs, check):
    alloc = Allocator("cpu", pool_size=1 << 28)
    st = RaggedStore(store)
    sampler = Sampler(n, STEP, Sampler.Mode.CYCLIC, seed=0)
    with Loader({"t": [st.bind(alloc)]}, sampler, workers=2, prefetch=4, ordered=True) as plain:
        loader = plain.pack("t", seq_len, batch, mode=mode, pool=POOL)
        got = []
        for _ in range(check):
            b = next(loader)
            got.append(tuple(np.from_dlpack(b[k]).copy() for k in ("tokens", "segment_ids", "positions")))
        ok = (verify_concat if mode == "concat" else verify_first_fit)(got, stream_docs, seq_len)

        def one():
            b = next(loader)
            return [np.from_dlpack(b[k]) for k in ("tokens", "segment_ids", "positions")]

        pad = padding(got)
        tps = timed(one, seconds) * batch * seq_len * (1 - pad)
    st.close()
    return tps, pad, ok


def unpacked_row(store, n, seconds, stream_docs):
    """The same loader delivering the same records unpacked (a `RaggedBatch` a step): the rate
    the packer consumes at most, in tokens/s. Verified: the delivered values, concatenated, equal
    the stream's documents."""
    alloc = Allocator("cpu", pool_size=1 << 28)
    st = RaggedStore(store)
    sampler = Sampler(n, STEP, Sampler.Mode.CYCLIC, seed=0)
    with Loader({"t": [st.bind(alloc)]}, sampler, workers=2, prefetch=4, ordered=True) as loader:
        steps = 4
        got = [np.from_dlpack(next(loader)[0]["t"].values).copy() for _ in range(steps)]
        flat = np.concatenate(stream_docs[:steps * STEP])
        ok = bool(np.array_equal(np.concatenate(got), flat))
        tps = timed(lambda: next(loader)[0]["t"].values, seconds,
                    units=lambda v: np.from_dlpack(v).shape[0])
    st.close()
    return tps, 0.0, ok


def numpy_row(docs, seq_len, batch, seconds, check):
    cells = seq_len * batch
    state = {"k": 0, "carry": np.zeros(0, np.int32), "carry_first": np.zeros(0, bool)}

    def one_batch():
        toks, firsts, have = [state["carry"]], [state["carry_first"]], len(state["carry"])
        while have < cells:
            d = docs[state["k"] % len(docs)]
            state["k"] += 1
            f = np.zeros(len(d), bool)
            f[0] = True
            toks.append(d)
            firsts.append(f)
            have += len(d)
        t, f = np.concatenate(toks), np.concatenate(firsts)
        state["carry"], state["carry_first"] = t[cells:], f[cells:]
        t, f = t[:cells].reshape(batch, seq_len), f[:cells].reshape(batch, seq_len).copy()
        f[:, 0] = True
        seg = np.cumsum(f, axis=1, dtype=np.int32)
        idx = np.arange(seq_len, dtype=np.int32)
        start = np.maximum.accumulate(np.where(f, idx, 0), axis=1)
        return t, seg, (idx - start).astype(np.int32)

    got = [one_batch() for _ in range(check)]
    ok = verify_concat(got, docs, seq_len)
    state.update(k=0, carry=np.zeros(0, np.int32), carry_first=np.zeros(0, bool))
    return timed(one_batch, seconds) * cells, 0.0, ok


def grain_row(kind, docs, seq_len, batch, seconds, check):
    import grain
    import grain.experimental as ge

    def dataset():
        ds = grain.MapDataset.source(docs).map(lambda d: {"t": d}).repeat().to_iter_dataset()
        if kind == "concat":
            ds = ge.ConcatThenSplitIterDataset(ds, length_struct={"t": seq_len})
        else:
            ds = ge.FirstFitPackIterDataset(ds, length_struct={"t": seq_len}, num_packing_bins=POOL)
        return iter(ds.batch(batch))

    it = dataset()
    got = []
    for _ in range(check):
        b = next(it)
        got.append((b["t"], b["t_segment_ids"].astype(np.int32), b["t_positions"].astype(np.int32)))
    ok = (verify_concat if kind == "concat" else verify_first_fit)(got, docs * 2, seq_len)
    it = dataset()
    pad = padding(got)
    return timed(lambda: next(it), seconds) * batch * seq_len * (1 - pad), pad, ok


def memcpy_row(seq_len, batch, seconds):
    """One batch's output bytes copied per call, from successive slices of a 256 MiB source (not
    cache-resident, as a packer's input is not) into one reused output."""
    cells = batch * seq_len * 3
    src = np.ones(max(cells, (256 << 20) // 4), np.int32)
    dst = np.empty(cells, np.int32)
    slots = len(src) // cells
    k = [0]

    def one():
        i = k[0] % slots
        np.copyto(dst, src[i * cells:(i + 1) * cells])
        k[0] += 1

    return timed(one, seconds) * batch * seq_len


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", type=Path, required=True)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    docs = load_docs(a.corpus)
    n = len(docs) - len(docs) % STEP
    docs = docs[:n]
    try:
        import grain  # noqa: F401
        grain_skip = None
    except ImportError:
        grain_skip = "grain is not installed (LOADERX_INSTALL_PEERS=1 installs grain 0.2.18)"
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "tokens"
        write_store(store, docs)
        order = delivery_order(n, n // STEP)
        stream = [docs[i] for i in order]
        for seq_len, batch in GEOMETRY:
            check = max(2, 200_000 // (seq_len * batch))
            cells = []
            for mode, name in (("concat", "loaderx-concat"), ("first_fit", "loaderx-first-fit")):
                cells.append((name, *loaderx_row(store, n, mode, seq_len, batch, a.seconds, stream, check)))
            cells.append(("loaderx-unpacked", *unpacked_row(store, n, a.seconds, stream)))
            cells.append(("numpy-concat-split", *numpy_row(stream, seq_len, batch, a.seconds, check)))
            for kind, name in (("concat", "grain-concat-then-split"), ("first_fit", "grain-first-fit")):
                if grain_skip:
                    cells.append((name, None, None, None))
                else:
                    cells.append((name, *grain_row(kind, stream, seq_len, batch, a.seconds, check)))
            cells.append(("memcpy-limit", memcpy_row(seq_len, batch, a.seconds), 0.0, None))
            for name, tps, pad, ok in cells:
                note = grain_skip if tps is None else None
                if name.startswith("grain-") and tps is not None:
                    note = GRAIN_NOTE["concat" if name.endswith("split") else "first_fit"]
                rows.append({"seq_len": seq_len, "batch": batch, "row": name, "tokens_per_s": tps,
                             "padding": pad, "verified": ok, "note": note})
    print("| seq_len | batch | row | M tokens/s | padding | verified |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        tps = "skipped" if r["tokens_per_s"] is None else f"{r['tokens_per_s'] / 1e6:.1f}"
        pad = "" if r["padding"] is None else f"{100 * r['padding']:.2f} %"
        print(f"| {r['seq_len']} | {r['batch']} | {r['row']} | {tps} | {pad} | {r['verified']} |")
    if grain_skip:
        print(f"grain rows skipped: {grain_skip}")
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))
    return 0 if all(r["verified"] is not False for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
