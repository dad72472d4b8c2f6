"""loaderx.converter with real datasets.Dataset objects built in the test."""

import os

import numpy as np
import pytest

datasets = pytest.importorskip("datasets")
pa = pytest.importorskip("pyarrow")

import loaderx  # noqa: E402
from loaderx import Allocator  # noqa: E402
from loaderx.converter import convert  # noqa: E402
from loaderx.zrecord import DenseStore, RaggedStore  # noqa: E402


def _all(store_cls, path):
    with store_cls(path) as s, Allocator() as a:
        return s.bind(a)[:], len(s)


def test_mixed_columns(tmp_path):
    from datasets import Dataset, Features, Sequence, Value
    n = 50
    rng = np.random.default_rng(0)
    img = rng.integers(0, 255, size=(n, 2, 3)).astype(np.uint8)
    vol_shapes = [tuple(int(x) for x in rng.integers(1, 4, size=2)) for _ in range(n)]
    vols = [rng.standard_normal(s).astype(np.float32) for s in vol_shapes]
    ds = Dataset.from_dict(
        {
            "label": list(range(n)),
            "score": rng.standard_normal(n).astype(np.float32).tolist(),
            "flag": [bool(i % 2) for i in range(n)],
            "img": img.tolist(),
            "tokens": [list(range(i % 7 + 1)) for i in range(n)],
            "vol": [{"values": v.reshape(-1).tolist(), "shape": list(s)} for v, s in zip(vols, vol_shapes)],
        },
        features=Features({
            "label": Value("int64"),
            "score": Value("float32"),
            "flag": Value("bool"),
            "img": Sequence(Sequence(Value("uint8"), length=3), length=2),
            "tokens": Sequence(Value("int32")),
            "vol": {"values": Sequence(Value("float32")), "shape": Sequence(Value("uint64"), length=2)},
        }),
    )
    root = tmp_path / "out"
    kinds = convert(ds, root, codec="zstd")
    assert kinds == {"label": "dense", "score": "dense", "flag": "dense", "img": "dense", "tokens": "ragged", "vol": "ragged"}
    assert sorted(os.listdir(root)) == sorted(kinds)
    t, _ = _all(DenseStore, root / "label")
    np.testing.assert_array_equal(np.from_dlpack(t), np.arange(n))
    t, _ = _all(DenseStore, root / "flag")
    np.testing.assert_array_equal(np.from_dlpack(t), [bool(i % 2) for i in range(n)])
    t, _ = _all(DenseStore, root / "img")
    assert t.shape == (n, 2, 3)
    np.testing.assert_array_equal(np.from_dlpack(t), img)
    b, _ = _all(RaggedStore, root / "tokens")
    for i, x in enumerate(b.to_tensors()):
        np.testing.assert_array_equal(np.from_dlpack(x), np.arange(i % 7 + 1))
    b, _ = _all(RaggedStore, root / "vol")
    for x, want in zip(b.to_tensors(), vols):
        np.testing.assert_array_equal(np.from_dlpack(x), want)


def test_multi_chunk_and_selection(tmp_path):
    from datasets import Dataset, concatenate_datasets
    parts = [Dataset.from_dict({"tokens": [[i, i + 1] for i in range(k * 10, k * 10 + 10)]}) for k in range(3)]
    ds = concatenate_datasets(parts).select([5, 1, 29, 0])
    convert(ds, tmp_path / "o", codec="raw")
    b, n = _all(RaggedStore, tmp_path / "o" / "tokens")
    assert n == 4
    np.testing.assert_array_equal(np.from_dlpack(b.values), [5, 6, 1, 2, 29, 30, 0, 1])


@pytest.mark.parametrize(
    "data,features",
    [
        ({"s": ["a", "b"]}, None),
        ({"b": [b"x", b"y"]}, None),
        ({"n": [[[1], [2, 3]], [[4]]]}, None),
        ({"st": [{"a": 1}, {"a": 2}]}, None),
    ],
)
def test_unsupported_columns_fail_before_writing(tmp_path, data, features):
    from datasets import Dataset
    ds = Dataset.from_dict({"ok": [1, 2], **data})
    with pytest.raises(loaderx.UnsupportedColumnError):
        convert(ds, tmp_path / "o")
    assert os.listdir(tmp_path) == []


def test_empty_record_and_existing_path(tmp_path):
    from datasets import Dataset
    ds = Dataset.from_dict({"ok": [1, 2, 3], "tokens": [[1], [], [2]]})
    with pytest.raises(loaderx.InvalidInputError, match="row 1"):
        convert(ds, tmp_path / "o")
    assert os.listdir(tmp_path) == []  # nothing published, temp root removed
    (tmp_path / "exists").mkdir()
    with pytest.raises(FileExistsError):
        convert(Dataset.from_dict({"a": [1]}), tmp_path / "exists")
    with pytest.raises(TypeError):
        convert({"a": [1]}, tmp_path / "x")
    with pytest.raises(loaderx.InvalidInputError):
        convert(Dataset.from_dict({"a": []}), tmp_path / "empty")


def test_shape_mismatch_in_struct(tmp_path):
    from datasets import Dataset, Features, Sequence, Value
    ds = Dataset.from_dict(
        {"v": [{"values": [1.0, 2.0, 3.0], "shape": [2, 2]}]},
        features=Features({"v": {"values": Sequence(Value("float32")), "shape": Sequence(Value("uint64"), length=2)}}),
    )
    with pytest.raises(loaderx.InvalidInputError, match="shape"):
        convert(ds, tmp_path / "o")
    assert os.listdir(tmp_path) == []
