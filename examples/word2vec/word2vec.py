"""CBOW word2vec on WikiText GPT-2 tokens (torch), fed by loaderx two ways: padded sentences
from a Dense store (+ a length stream) and packed sentences from a Ragged store (cu_seqlens).
Same seed, same draws, same model: both layouts give the same loss at every step.

    python examples/word2vec/word2vec.py                      # both layouts, 200 steps
    python examples/word2vec/word2vec.py --layout packed --lines 5000 --steps 2000

See README.md next to this file.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bpe import GPT2BPE  # noqa: E402

from loaderx import Allocator, Loader, dtypes  # noqa: E402
from loaderx.sampler import Sampler  # noqa: E402
from loaderx.zrecord import DenseStore, DenseWriter, RaggedBatch, RaggedStore, RaggedWriter  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def corpora_dir() -> Path:
    """$LOADERX_CORPORA, else ../shared/corpora next to the repository (the CI layout)."""
    return Path(os.environ.get("LOADERX_CORPORA", REPO.parent / "shared" / "corpora"))


def sentences(text: Path, bpe_dir: Path, lines: int, max_len: int) -> tuple[list[np.ndarray], int]:
    """The first `lines` non-empty lines with at least 2 tokens, GPT-2 tokenized, cut to max_len,
    with ids renumbered 0..V-1 in order of first appearance (a compact vocabulary)."""
    bpe = GPT2BPE(bpe_dir)
    vocab: dict[int, int] = {}
    out = []
    with open(text, encoding="utf-8") as f:
        for line in f:
            if len(out) == lines:
                break
            if not line.strip():
                continue
            ids = bpe.encode(line.rstrip("\n"))[:max_len]
            if len(ids) < 2:
                continue
            out.append(np.array([vocab.setdefault(t, len(vocab)) for t in ids], dtype=np.int32))
    return out, len(vocab)


def prepare(seqs: list[np.ndarray], out: Path, max_len: int) -> None:
    padded = np.zeros((len(seqs), max_len), np.int32)
    for k, s in enumerate(seqs):
        padded[k, : len(s)] = s
    with DenseWriter(out / "padded", dtypes.int32, (max_len,), "zstd") as w:
        w.append(padded)
    with DenseWriter(out / "length", dtypes.int32, (), "raw") as w:
        w.append(np.array([len(s) for s in seqs], np.int32))
    with RaggedWriter(out / "packed", dtypes.int32, 1, "zstd") as w:
        w.append(RaggedBatch.from_records(seqs))


def cbow_padded(torch, emb_in, emb_out, x, lengths, window):
    """x: int64 [B, L] (padding anywhere past lengths), lengths: int64 [B]."""
    B, L = x.shape
    pos = torch.arange(L)
    valid = pos[None, :] < lengths[:, None]
    e = emb_in[x]  # [B, L, D]
    total = torch.zeros_like(e)
    count = torch.zeros(B, L)
    for o in [*range(-window, 0), *range(1, window + 1)]:
        j = pos + o
        ok = valid & (j[None, :] >= 0) & (j[None, :] < lengths[:, None])
        total = total + e[:, j.clamp(0, L - 1)] * ok[..., None]
        count = count + ok
    m = valid & (count > 0)
    h = total[m] / count[m][:, None]
    return torch.nn.functional.cross_entropy(h @ emb_out.T, x[m])


def cbow_packed(torch, emb_in, emb_out, values, cu, window):
    """values: int64 [T] (sentences back to back), cu: int64 [B + 1] (cu_seqlens)."""
    T = values.shape[0]
    seg = torch.repeat_interleave(torch.arange(cu.shape[0] - 1), cu[1:] - cu[:-1])
    start, end = cu[:-1][seg], cu[1:][seg]
    pos = torch.arange(T)
    e = emb_in[values]  # [T, D]
    total = torch.zeros_like(e)
    count = torch.zeros(T)
    for o in [*range(-window, 0), *range(1, window + 1)]:
        j = pos + o
        ok = (j >= start) & (j < end)
        total = total + e[j.clamp(0, T - 1)] * ok[:, None]
        count = count + ok
    m = count > 0
    h = total[m] / count[m][:, None]
    return torch.nn.functional.cross_entropy(h @ emb_out.T, values[m])


def train(out: Path, layout: str, vocab: int, n: int, args) -> list[float]:
    import torch

    torch.manual_seed(args.seed)
    emb_in = (torch.randn(vocab, args.dim) * 0.1).requires_grad_()
    emb_out = (torch.randn(vocab, args.dim) * 0.1).requires_grad_()
    opt = torch.optim.SGD([emb_in, emb_out], lr=args.lr)
    losses = []
    with Allocator("cpu") as alloc:
        if layout == "padded":
            stores = [DenseStore(out / "padded"), DenseStore(out / "length")]
            streams = {"padded": [stores[0].bind(alloc)], "length": [stores[1].bind(alloc)]}
        else:
            stores = [RaggedStore(out / "packed")]
            streams = {"packed": [stores[0].bind(alloc)]}
        sampler = Sampler(n, args.batch, Sampler.Mode.IID, seed=args.seed)
        with Loader(streams, sampler, workers=1, prefetch=4) as loader:
            for _ in range(args.steps):
                sh = next(loader)[0]
                if layout == "padded":
                    x = torch.from_dlpack(sh["padded"]).long()
                    lengths = torch.from_dlpack(sh["length"]).long()
                    loss = cbow_padded(torch, emb_in, emb_out, x, lengths, args.window)
                else:
                    values = torch.from_dlpack(sh["packed"].values).long()
                    cu = torch.from_dlpack(sh["packed"].cu_seqlens).long()
                    loss = cbow_packed(torch, emb_in, emb_out, values, cu, args.window)
                opt.zero_grad()
                loss.backward()
                opt.step()
                losses.append(float(loss))
        for s in stores:
            s.close()
    return losses


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layout", choices=["padded", "packed", "both"], default="both")
    ap.add_argument("--text", type=Path, help="one record per line (default: <corpora>/text/wikitext2/wiki.test.raw.txt)")
    ap.add_argument("--bpe", type=Path, help="directory with encoder.json + vocab.bpe (default: <corpora>/gpt2)")
    ap.add_argument("--lines", type=int, default=2000)
    ap.add_argument("--max-len", type=int, default=64)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--window", type=int, default=2)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--lr", type=float, default=5.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, help="directory for the stores (default: a temp dir)")
    args = ap.parse_args(argv)
    text = args.text or corpora_dir() / "text" / "wikitext2" / "wiki.test.raw.txt"
    bpe_dir = args.bpe or corpora_dir() / "gpt2"
    if not text.is_file() or not (bpe_dir / "encoder.json").is_file():
        print(f"word2vec: need {text} and {bpe_dir}/encoder.json (set LOADERX_CORPORA)", file=sys.stderr)
        return 2
    import torch

    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    t0 = time.perf_counter()
    seqs, vocab = sentences(text, bpe_dir, args.lines, args.max_len)
    layouts = ["padded", "packed"] if args.layout == "both" else [args.layout]
    res = {"records": len(seqs), "tokens": int(sum(len(s) for s in seqs)), "vocab": vocab}

    def go(out: Path) -> None:
        prepare(seqs, out, args.max_len)
        for layout in layouts:
            res[layout] = train(out, layout, vocab, len(seqs), args)

    if args.out:
        args.out.mkdir(parents=True, exist_ok=False)
        go(args.out)
    else:
        with tempfile.TemporaryDirectory() as d:
            go(Path(d))
    res["seconds"] = round(time.perf_counter() - t0, 3)
    ok = True
    if len(layouts) == 2:
        diff = float(np.max(np.abs(np.array(res["padded"]) - np.array(res["packed"]))))
        res["max_abs_diff"] = diff
        ok = diff <= 1e-4 * max(1.0, abs(res["padded"][0]))
    print(json.dumps(res))
    for layout in layouts:
        ls = res[layout]
        print(f"{layout}: loss {ls[0]:.4f} -> {ls[-1]:.4f} over {len(ls)} steps", file=sys.stderr)
    if len(layouts) == 2:
        print("padded and packed losses agree" if ok else "padded and packed losses DIFFER", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
