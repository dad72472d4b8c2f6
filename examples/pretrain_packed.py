"""Pretrain a tiny causal LM on WikiText with packed batches, killed and resumed mid-epoch.

WikiText-2 test lines are GPT-2 tokenized (the pure-Python BPE of ``examples/word2vec``, ids
renumbered to a compact vocabulary) into a Ragged store, one document per line. The loader packs
them in Rust (``Loader(...).pack("tokens", SEQ, BATCH, mode="first_fit")``) into ``[BATCH, SEQ]``
tokens with segment ids and positions; the model (embedding, one causal self-attention layer,
output head) attends only within a document (the mask is ``segment_ids`` equal, causal, not
padding), embeds ``positions``, and predicts each next token of the same document.

    python examples/pretrain_packed.py --workdir /tmp/run --steps 40             # train
    python examples/pretrain_packed.py --workdir /tmp/run --steps 40 --resume    # continue
    python examples/pretrain_packed.py --check                                   # the test

``--check`` trains uninterrupted, then runs a trainer in a separate process that checkpoints the
model, the optimizer and ``loader.state_dict()`` (which holds the packer's open rows and its
cursor in the step it was consuming) at step ``--kill-at``, trains two more steps and is killed
with SIGKILL; a third process resumes from the checkpoint. It prints whether the resumed loss
curve equals the uninterrupted one (bit for bit: CPU, one thread, deterministic algorithms) and
exits 1 when it does not.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
SEQ, BATCH, DIM, LR = 128, 4, 32, 3e-3


def corpora_dir() -> Path:
    """$LOADERX_CORPORA, else ../shared/corpora next to the repository (the CI layout)."""
    return Path(os.environ.get("LOADERX_CORPORA", REPO.parent / "shared" / "corpora"))


def prepare(root: Path, lines: int) -> int:
    """The Ragged token store (once) and the vocabulary size."""
    meta = root / "vocab.json"
    if meta.exists():
        return json.loads(meta.read_text())["vocab"]
    sys.path.insert(0, str(REPO / "examples" / "word2vec"))
    from word2vec import sentences  # the word2vec example's tokenizer and compact vocabulary

    from loaderx import dtypes
    from loaderx.zrecord import RaggedBatch, RaggedWriter

    corpora = corpora_dir()
    docs, vocab = sentences(corpora / "text" / "wikitext2" / "wiki.test.raw.txt", corpora / "gpt2", lines, 4 * SEQ)
    with RaggedWriter(root / "tokens", dtypes.int32, 1, "zstd") as w:
        w.append(RaggedBatch.from_records(docs))
    meta.write_text(json.dumps({"vocab": vocab, "docs": len(docs)}))
    return vocab


def make_loader(root: Path):
    from loaderx import Allocator, Loader
    from loaderx.sampler import Sampler
    from loaderx.zrecord import RaggedStore

    store = RaggedStore(root / "tokens")
    docs = len(store)
    sampler = Sampler(docs - docs % 16, 16, Sampler.Mode.CYCLIC, seed=0)
    loader = Loader({"tokens": [store.bind(Allocator("cpu"))]}, sampler, workers=2, ordered=True)
    return loader.pack("tokens", SEQ, BATCH, mode="first_fit", pool=8)


def model_and_opt(torch, vocab: int):
    torch.manual_seed(0)
    nn = torch.nn
    m = nn.ModuleDict({
        "tok": nn.Embedding(vocab, DIM), "pos": nn.Embedding(SEQ, DIM),
        "qkv": nn.Linear(DIM, 3 * DIM), "out": nn.Linear(DIM, vocab),
    })
    return m, torch.optim.Adam(m.parameters(), lr=LR)


def loss_of(torch, m, batch) -> "torch.Tensor":
    tok = torch.from_dlpack(batch["tokens"]).long()
    seg = torch.from_dlpack(batch["segment_ids"]).long()
    pos = torch.from_dlpack(batch["positions"]).long()
    x = m["tok"](tok) + m["pos"](pos)
    q, k, v = m["qkv"](x).chunk(3, dim=-1)
    causal = torch.ones(SEQ, SEQ, dtype=torch.bool).tril()
    mask = (seg[:, :, None] == seg[:, None, :]) & causal & (seg[:, None, :] > 0)
    att = (q @ k.transpose(1, 2)) / DIM**0.5
    att = att.masked_fill(~mask, float("-inf")).softmax(-1).nan_to_num(0.0)
    logits = m["out"](x + att @ v)
    # Predict token t+1 from t only inside one document (the next token is in the same segment).
    keep = (seg[:, 1:] == seg[:, :-1]) & (seg[:, 1:] > 0)
    return torch.nn.functional.cross_entropy(logits[:, :-1][keep], tok[:, 1:][keep])


def train(root: Path, steps: int, resume: bool, checkpoint_at: int | None, die_after: int | None) -> None:
    import torch

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    vocab = json.loads((root / "vocab.json").read_text())["vocab"]
    m, opt = model_and_opt(torch, vocab)
    loader = make_loader(root)
    start, losses = 0, []
    ckpt = root / "ckpt.pt"
    if resume:
        ck = torch.load(ckpt, weights_only=False)
        m.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        loader.load_state_dict(ck["loader"])
        start, losses = ck["step"], ck["losses"]
    for step in range(start, steps):
        loss = loss_of(torch, m, next(loader))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if checkpoint_at is not None and step + 1 == checkpoint_at:
            state = {"model": m.state_dict(), "opt": opt.state_dict(), "loader": loader.state_dict(),
                     "step": step + 1, "losses": list(losses)}
            torch.save(state, root / "ckpt.tmp")
            os.replace(root / "ckpt.tmp", ckpt)
        if die_after is not None and step + 1 == die_after:
            os.kill(os.getpid(), signal.SIGKILL)
    (root / "losses.json").write_text(json.dumps(losses))
    loader.close()


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, timeout=600)


def check(lines: int, steps: int, kill_at: int) -> int:
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        prepare(root, lines)
        docs = json.loads((root / "vocab.json").read_text())["docs"]
        a = run("--workdir", d, "--steps", str(steps))
        assert a.returncode == 0, a.stderr
        want = json.loads((root / "losses.json").read_text())
        (root / "losses.json").unlink()
        b = run("--workdir", d, "--steps", str(steps), "--checkpoint-at", str(kill_at), "--die-after", str(kill_at + 2))
        assert b.returncode == -signal.SIGKILL, f"the trainer was not killed: {b.returncode}\n{b.stderr}"
        assert not (root / "losses.json").exists()
        c = run("--workdir", d, "--steps", str(steps), "--resume")
        assert c.returncode == 0, c.stderr
        got = json.loads((root / "losses.json").read_text())
    same = got == want
    print(json.dumps({"documents": docs, "steps": steps, "killed_after": kill_at + 2, "resumed_from": kill_at,
                      "first_loss": want[0], "last_loss": want[-1], "equal": same}))
    print("the resumed loss curve equals the uninterrupted one" if same else "the resumed loss curve DIFFERS")
    return 0 if same else 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", type=Path)
    ap.add_argument("--lines", type=int, default=400, help="WikiText lines (documents) to tokenize")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--checkpoint-at", type=int)
    ap.add_argument("--die-after", type=int)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--kill-at", type=int, default=13)
    a = ap.parse_args(argv)
    if a.check:
        return check(a.lines, a.steps, a.kill_at)
    if a.workdir is None:
        ap.error("--workdir is needed (or --check)")
    a.workdir.mkdir(parents=True, exist_ok=True)
    prepare(a.workdir, a.lines)
    train(a.workdir, a.steps, a.resume, a.checkpoint_at or (None if a.resume else a.steps // 2), a.die_after)
    return 0


if __name__ == "__main__":
    sys.exit(main())
