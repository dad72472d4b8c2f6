"""DLPack round trips for every catalog dtype: Dense and Ragged, every codec, every index form."""

import numpy as np
import pytest
from conftest import as_bytes, random_array, read_capsule

import loaderx
from loaderx import Allocator, dtypes
from loaderx.zrecord import DenseStore, DenseWriter, DLTensor, RaggedBatch, RaggedStore, RaggedWriter

CODECS = ["raw", "zstd", "zstd_dict"]


@pytest.fixture(scope="session")
def zdict(tmp_path_factory):
    """A dictionary trained on a representative (repetitive) sample; any dictionary works for any dtype."""
    rng = np.random.default_rng(11)
    base = rng.integers(0, 256, size=64, dtype=np.uint8)
    arr = np.stack([np.roll(base, k % 13) ^ (k % 3) for k in range(600)]).astype(np.uint8)
    p = tmp_path_factory.mktemp("dict") / "dict-src"
    with DenseWriter(p, arr.dtype, arr.shape[1:], "raw") as w:
        w.append(arr)
    with DenseStore(p) as s, Allocator() as a:
        return loaderx.zrecord.train_dict(s.bind(a), 4096)


def _to_numpy(t):
    return dtypes.from_dlpack(t)


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("name", dtypes.NAMES)
def test_dense_roundtrip_every_dtype(tmp_path, name, codec, zdict):
    dt = getattr(dtypes, name)
    rng = np.random.default_rng(hash(name) % 2**32)
    data = random_array(dt, (40, 3, 5), rng)
    kw = {"dict_bytes": zdict} if codec == "zstd_dict" else {}
    with DenseWriter(tmp_path / "s", dt, (3, 5), codec, data_shards=3, **kw) as w:
        w.append(data[:25])
        w.append(data[25:])
    with DenseStore(tmp_path / "s") as s, Allocator("cpu") as a:
        v = s.bind(a)
        assert len(v) == 40 and v.dtype == dt and v.item_shape == (3, 5)
        idx_forms = {
            "int": (7, [7]),
            "numpy-int": (np.int64(9), [9]),
            "tuple": ((0, 5, 2), [0, 5, 2]),
            "list": ([39, 0, 39], [39, 0, 39]),
            "ndarray": (np.array([3, 1, 4, 1, 5], dtype=np.int32), [3, 1, 4, 1, 5]),
            "uint64": (np.array([10, 20], dtype=np.uint64), [10, 20]),
            "strided": (np.arange(0, 40, dtype=np.int64)[::7], list(range(0, 40, 7))),
            "slice": (slice(5, 12), list(range(5, 12))),
            "slice-step": (slice(None, None, 9), list(range(0, 40, 9))),
            "all": (slice(None), list(range(40))),
            "empty": ([], []),
        }
        for form, (key, want) in idx_forms.items():
            t = v[key]
            assert isinstance(t, DLTensor)
            single = form in ("int", "numpy-int")
            exp = data[want[0]] if single else data[want]
            assert t.shape == exp.shape, form
            assert t.dtype == dt
            got = _to_numpy(t)
            assert got.dtype == dt
            assert as_bytes(got) == as_bytes(exp), form
        for k, rec in enumerate(v):
            assert as_bytes(_to_numpy(rec)) == as_bytes(data[k])


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("name", dtypes.NAMES)
@pytest.mark.parametrize("ndim", [1, 3])
def test_ragged_roundtrip_every_dtype(tmp_path, name, codec, ndim, zdict):
    dt = getattr(dtypes, name)
    rng = np.random.default_rng(7)
    recs = []
    for k in range(30):
        shape = tuple(int(x) for x in rng.integers(1, 5, size=ndim))
        recs.append(random_array(dt, shape, rng))
    kw = {"dict_bytes": zdict} if codec == "zstd_dict" else {}
    with RaggedWriter(tmp_path / "r", dt, ndim, codec, data_shards=2, **kw) as w:
        w.append(RaggedBatch.from_records(recs[:10]))
        w.append(RaggedBatch.from_records(recs[10:]))
    with RaggedStore(tmp_path / "r") as s, Allocator() as a:
        v = s.bind(a)
        assert len(v) == 30 and v.ndim == ndim and v.dtype == dt
        for key, want in [(4, [4]), ((0, 29, 3), [0, 29, 3]), (np.array([5, 5, 1]), [5, 5, 1]), (slice(2, 9), list(range(2, 9))), ([], [])]:
            b = v[key]
            assert isinstance(b, RaggedBatch) and len(b) == len(want)
            vals = _to_numpy(b.values)
            assert vals.dtype == dt
            exp = np.concatenate([recs[i].reshape(-1) for i in want]) if want else np.empty(0, dt)
            assert as_bytes(vals) == as_bytes(exp)
            cu = np.from_dlpack(b.cu_seqlens)
            assert cu.dtype == np.int32 and cu[0] == 0 and len(cu) == len(want) + 1
            sh = np.from_dlpack(b.shapes)
            assert sh.dtype == np.uint64 and sh.shape == (len(want), ndim)
            for t, i in zip(b.to_tensors(), want):
                assert t.shape == recs[i].shape
                assert as_bytes(_to_numpy(t)) == as_bytes(recs[i])
        # a read batch is already the exact append input
        with RaggedWriter(tmp_path / "copy", dt, ndim, "raw") as w:
            w.append(v[:])
    with RaggedStore(tmp_path / "copy") as s, Allocator() as a:
        b = s.bind(a)[:]
        for t, r in zip(b.to_tensors(), recs):
            assert as_bytes(_to_numpy(t)) == as_bytes(r)


@pytest.mark.parametrize("name", dtypes.NAMES)
def test_capsule_reports_dlpack_codes(tmp_path, name, alloc):
    dt = getattr(dtypes, name)
    code = dict((n, c) for n, _, c in dtypes.CATALOG)[name]
    data = random_array(dt, (4, 2), np.random.default_rng(0))
    with DenseWriter(tmp_path / "s", dt, (2,), "raw") as w:
        w.append(data)
    with DenseStore(tmp_path / "s") as s:
        t = s.bind(alloc)[1, 2]
        for mv, kind in [((1, 0), "dltensor_versioned"), ((1, 1), "dltensor_versioned"), (None, "dltensor"), ((0, 8), "dltensor")]:
            info = read_capsule(t.__dlpack__(max_version=mv))
            assert info["name"] == kind
            assert info["dtype"] == code
            assert info["device"] == (1, 0)
            assert info["shape"] == (2, 2)
            assert info["strides_null"]
            if kind == "dltensor_versioned":
                assert info["version"] == ((1, 1) if mv == (1, 1) else (1, 0))
                assert info["flags"] == 0  # writable: the batch owns an exclusive allocation
    # the real DLPack 1.1 codes
    if name == "bfloat16":
        assert code == (4, 16, 1)
    if name.startswith("float8"):
        assert 7 <= code[0] <= 14 and code[1:] == (8, 1)
    assert t.__dlpack_device__() == (1, 0)


def test_dlpack_zero_copy_and_lifetime(tmp_path):
    data = np.arange(4096, dtype=np.float64).reshape(64, 64)
    with DenseWriter(tmp_path / "s", data.dtype, (64,), "raw") as w:
        w.append(data)
    with DenseStore(tmp_path / "s") as s, Allocator() as a:
        t = s.bind(a)[:]
        x = np.from_dlpack(t)
        y = np.from_dlpack(t)
        assert x.ctypes.data == y.ctypes.data  # zero-copy: both alias the allocation
        assert x.flags.writeable
        del t
        s.close()
        a.close()
    np.testing.assert_array_equal(x, data)  # the array keeps the allocation alive
    # unconsumed capsules are freed by their destructor
    with DenseStore(tmp_path / "s") as s, Allocator() as a:
        t = s.bind(a)[:2]
        for _ in range(1000):
            t.__dlpack__(max_version=(1, 0))
            t.__dlpack__()


def test_dlpack_kwargs(tmp_path, alloc):
    data = np.arange(10, dtype=np.int32)
    with DenseWriter(tmp_path / "s", data.dtype, (), "raw") as w:
        w.append(data)
    with DenseStore(tmp_path / "s") as s:
        t = s.bind(alloc)[:]
        assert t.__dlpack_device__() == (1, 0)
        np.testing.assert_array_equal(np.from_dlpack(t, device="cpu"), data)
        c = np.from_dlpack(t, copy=True)
        assert c.ctypes.data != np.from_dlpack(t).ctypes.data
        np.testing.assert_array_equal(c, data)
        with pytest.raises(BufferError):
            t.__dlpack__(dl_device=(2, 0))
        with pytest.raises(loaderx.UnsupportedDeviceError):
            t.__dlpack__(max_version=(1, 0), dl_device=(10, 0))
        with pytest.raises(BufferError):
            t.__dlpack__(stream=5)
        assert t.__dlpack__(stream=None, max_version=(1, 0), dl_device=(1, 0), copy=False) is not None
        assert not hasattr(t, "__array__") and not hasattr(t, "to_numpy")


def test_bitcast_and_from_dlpack_helper(tmp_path, alloc):
    import ml_dtypes
    x = np.array([1.5, -2.0, 3.25, 0.0], dtype=ml_dtypes.bfloat16)
    with DenseWriter(tmp_path / "s", dtypes.bfloat16, (), "zstd") as w:
        w.append(x)
    with DenseStore(tmp_path / "s") as s:
        t = s.bind(alloc)[:]
        with pytest.raises(Exception):
            np.from_dlpack(t)  # NumPy does not import kDLBfloat
        np.testing.assert_array_equal(np.from_dlpack(t.bitcast(dtypes.uint16)).view(dtypes.bfloat16), x)
        np.testing.assert_array_equal(dtypes.from_dlpack(t), x)
        with pytest.raises(loaderx.DTypeError):
            t.bitcast(dtypes.float32)


def test_torch_roundtrip(tmp_path, alloc):
    torch = pytest.importorskip("torch")
    for name, tdt in [("float32", torch.float32), ("bfloat16", torch.bfloat16), ("int64", torch.int64), ("bool", torch.bool)]:
        src = torch.arange(24).reshape(4, 6).to(tdt)
        p = tmp_path / name
        with DenseWriter(p, getattr(dtypes, name), (6,), "zstd") as w:
            w.append(src)                      # Torch CPU tensor through DLPack
        with DenseStore(p) as s:
            t = s.bind(alloc)[[3, 0]]
            got = torch.from_dlpack(t)
            assert got.dtype == tdt
            assert torch.equal(got, src[[3, 0]])
