"""The examples/ scripts, run as a user runs them (a fresh interpreter each), on small inputs.

The corpora are found at $LOADERX_CORPORA, else ../shared/corpora next to the repository (the CI
layout); tests that need them skip when they are absent.
"""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = REPO / "examples"
CORPORA = Path(os.environ.get("LOADERX_CORPORA", REPO.parent / "shared" / "corpora"))
PETS = ["Abyssinian_1.jpg", "Abyssinian_34.jpg", "Abyssinian_5.jpg", "Bengal_10.jpg", "pug_16.jpg", "beagle_10.jpg"]


def need(module):
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed (scripts/install-deps.sh installs it)")


def need_corpus(*parts):
    p = CORPORA.joinpath(*parts)
    if not p.exists():
        pytest.skip(f"corpus {p} is absent (set LOADERX_CORPORA)")
    return p


def run(script, *args, expect=0):
    r = subprocess.run([sys.executable, str(EXAMPLES / script), *map(str, args)],
                       capture_output=True, text=True, timeout=240, env=dict(os.environ, LOADERX_CORPORA=str(CORPORA)))
    assert r.returncode == expect, f"{script} {args}: exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r


def last_json(stdout):
    return json.loads([line for line in stdout.splitlines() if line.startswith("{")][-1])


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_dlpack_roundtrip_cpu(framework):
    need(framework)
    r = run("dlpack_roundtrip.py", "--framework", framework, "--memory", "cpu", "--records", 16)
    lines = r.stdout.splitlines()
    assert sum(line.endswith(": equal") for line in lines) == 7, r.stdout  # 5 Dense + 2 Ragged
    assert "DIFFERENT" not in r.stdout and lines[-1] == "all equal"


def test_dlpack_roundtrip_gpu_says_when_there_is_none():
    need("torch")
    import torch

    if torch.cuda.is_available():
        run("dlpack_roundtrip.py", "--framework", "torch", "--memory", "gpu", "--records", 16)
    else:
        r = run("dlpack_roundtrip.py", "--framework", "torch", "--memory", "gpu", expect=2)
        assert "no CUDA GPU" in r.stderr


@pytest.fixture(scope="module")
def d2l_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("d2l")


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_data2latent_dense_and_ragged_agree(framework, d2l_dir):
    need(framework)
    need("PIL")
    need_corpus("oxford-pet", PETS[0])
    r = run("data2latent/data2latent.py", "--framework", framework, "--files", ",".join(PETS),
            "--size", 64, "--batch", 4, "--out", d2l_dir)
    res = last_json(r.stdout)
    assert res["records"] == len(PETS) and res["inputs_equal"] is True
    assert res["max_abs_diff"] <= 1e-6
    dense = np.load(d2l_dir / f"latents_dense_{framework}.npy")
    ragged = np.load(d2l_dir / f"latents_ragged_{framework}.npy")
    assert dense.shape == (len(PETS), 32) and np.all(np.isfinite(dense)) and np.abs(dense).max() > 0
    np.testing.assert_allclose(dense, ragged, rtol=0, atol=1e-6)
    assert len({row.tobytes() for row in dense}) == len(PETS)  # distinct images, distinct latents


def test_data2latent_torch_and_jax_agree(d2l_dir):
    """Same NumPy-drawn weights: the two frameworks compute the same latents (float32 tolerance)."""
    paths = [d2l_dir / f"latents_dense_{f}.npy" for f in ("torch", "jax")]
    if not all(p.exists() for p in paths):
        pytest.skip("needs both data2latent runs above")
    np.testing.assert_allclose(np.load(paths[0]), np.load(paths[1]), rtol=1e-4, atol=1e-4)


def test_word2vec_padded_and_packed_agree(tmp_path):
    need("torch")
    need_corpus("text", "wikitext2", "wiki.test.raw.txt")
    need_corpus("gpt2", "encoder.json")
    r = run("word2vec/word2vec.py", "--lines", 48, "--steps", 10, "--batch", 8, "--dim", 16, "--out", tmp_path / "w2v")
    res = last_json(r.stdout)
    padded, packed = np.array(res["padded"]), np.array(res["packed"])
    assert len(padded) == len(packed) == 10 and np.all(np.isfinite(padded))
    np.testing.assert_allclose(packed, padded, rtol=1e-5, atol=1e-6)
    assert padded[0] == pytest.approx(np.log(res["vocab"]), rel=0.05)  # starts near uniform
    assert padded[5:].min() < padded[0]  # and learns


def test_word2vec_bpe_is_gpt2():
    need_corpus("gpt2", "encoder.json")
    sys.path.insert(0, str(EXAMPLES / "word2vec"))
    try:
        from bpe import GPT2BPE
    finally:
        sys.path.pop(0)
    bpe = GPT2BPE(CORPORA / "gpt2")
    assert bpe.encode("Hello world") == [15496, 995]
    assert bpe.encode(" = Robert Boulter =\n")[:2] == bpe.encode(" = Robert")


def test_pretrain_packed_resumes_mid_epoch_to_the_same_loss_curve():
    need("torch")
    need_corpus("text", "wikitext2", "wiki.test.raw.txt")
    r = run("pretrain_packed.py", "--check", "--lines", 200, "--steps", 24, "--kill-at", 9)
    res = last_json(r.stdout)
    assert res["equal"] is True and res["resumed_from"] == 9 and res["killed_after"] == 11
    assert res["last_loss"] < res["first_loss"]
    assert r.stdout.strip().endswith("the resumed loss curve equals the uninterrupted one")


def test_ray_convert_pets_and_wikitext_into_datasets_of_parts(tmp_path):
    """examples/ray_convert.py: Oxford-Pet images decoded to uint8 [3,32,32] and WikiText lines
    tokenized to Ragged int32 by Ray into two loaderx datasets, every record checked against the
    same work done in the driver, then read by the Loader (images) and the packer (tokens)."""
    need("ray")
    need_corpus("oxford-pet")
    need_corpus("text", "wikitext2", "wiki.test.raw.txt")
    r = run("ray_convert.py", "--pets", 40, "--lines", 300, "--size", 32, "--steps", 4, "--out", tmp_path / "conv", "--check")
    s = last_json(r.stdout)
    assert s["check"] == "equal"
    every = sorted(p.name for p in need_corpus("oxford-pet").glob("*.jpg"))
    breeds = {f.rsplit("_", 1)[0] for f in every[:: len(every) // 40][:40]}
    assert (s["pets"]["records"], s["pets"]["version"], s["pets"]["breeds"]) == (40, 1, len(breeds))
    assert (s["text"]["records"], s["text"]["version"]) == (300, 1)
    assert s["train"]["steps"] == 4 and s["train"]["packed_tokens"] == 4 * 8 * 128
    from loaderx import dataset

    cols = {c["name"]: c for c in dataset.info(tmp_path / "conv" / "pets")["columns"]}
    assert cols["image"]["item_shape"] == [3, 32, 32] and cols["label"]["dtype"] == "int32"
    assert dataset.info(tmp_path / "conv" / "wikitext")["columns"][0]["kind"] == "ragged"
