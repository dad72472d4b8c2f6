"""Stores read without memory maps (``mmap=False``, what a shared or network file system gets),
and a store whose shard is truncated under it: a typed error, never a SIGBUS that ends Python."""

import pickle

import numpy as np
import pytest

import loaderx
from loaderx import Allocator, dtypes
from loaderx.zrecord import DenseStore, DenseWriter, RaggedBatch, RaggedStore, RaggedWriter


def _dense(path, n=300, codec="raw", shards=3):
    rng = np.random.default_rng(5)
    data = rng.integers(0, 2**15, size=(n, 4, 33), dtype=np.int16)
    with DenseWriter(path, data.dtype, data.shape[1:], codec, data_shards=shards) as w:
        w.append(data)
    return data


@pytest.mark.parametrize("codec", ["raw", "zstd"])
def test_unmapped_store_reads_what_was_written(tmp_path, codec):
    data = _dense(tmp_path / "d", codec=codec)
    idx = np.random.default_rng(1).integers(0, len(data), size=257)
    idx[1] = idx[0]
    with DenseStore(tmp_path / "d", mmap=False) as un, DenseStore(tmp_path / "d") as m, Allocator() as a:
        assert un.mapped is False and m.mapped is True
        got = dtypes.from_dlpack(un.bind(a)[idx])
        np.testing.assert_array_equal(got, data[idx])
        np.testing.assert_array_equal(dtypes.from_dlpack(m.bind(a)[idx]), got)
        un.verify()


def test_unmapped_ragged_store(tmp_path):
    rng = np.random.default_rng(2)
    recs = [rng.integers(0, 1000, size=int(rng.integers(1, 60)), dtype=np.int32) for _ in range(500)]
    with RaggedWriter(tmp_path / "r", np.int32, 1, "zstd", data_shards=2) as w:
        w.append(RaggedBatch.from_records(recs))
    with RaggedStore(tmp_path / "r", mmap=False) as s, Allocator() as a:
        assert not s.mapped
        idx = [499, 0, 7, 7, 250]
        b = s.bind(a)[idx]
        vals = dtypes.from_dlpack(b.values)
        cu = dtypes.from_dlpack(b.cu_seqlens)
        for k, i in enumerate(idx):
            np.testing.assert_array_equal(vals[cu[k] : cu[k + 1]], recs[i])


def test_mmap_option_travels_with_pickles(tmp_path):
    data = _dense(tmp_path / "d")
    with DenseStore(tmp_path / "d", mmap=False) as s, Allocator() as a:
        s2 = pickle.loads(pickle.dumps(s))
        assert s2.mapped is False
        v2 = pickle.loads(pickle.dumps(s.bind(a)))
        np.testing.assert_array_equal(dtypes.from_dlpack(v2[[3, 2, 1]]), data[[3, 2, 1]])
        s2.close()


@pytest.mark.parametrize("mmap", [True, False])
def test_shard_truncated_under_an_open_store_raises(tmp_path, mmap):
    _dense(tmp_path / "d", n=64, shards=2)
    with DenseStore(tmp_path / "d", mmap=mmap) as s, Allocator() as a:
        v = s.bind(a)
        v[list(range(64))]
        # The shard holding records (small records fill one block, hence one shard first).
        shard = max((tmp_path / "d").glob("shard-*"), key=lambda p: p.stat().st_size)
        with open(shard, "r+b") as f:
            f.truncate(100)
        with pytest.raises(loaderx.errors.CorruptError) as e:
            v[list(range(64))]
        assert str(shard) in str(e.value) and "length" in str(e.value)
        with pytest.raises(loaderx.errors.CorruptError):
            s.verify()
