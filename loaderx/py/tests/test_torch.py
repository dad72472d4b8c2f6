"""DLPack hand-off between loaderx and torch (CPU): every catalog dtype torch knows, zero-copy,
lifetime, writability, Ragged fields, Loader shards, appends from torch tensors, clean rejection."""

import numpy as np
import pytest
from conftest import as_bytes, random_array, read_capsule

torch = pytest.importorskip("torch", reason="torch is not installed (scripts/install-deps.sh installs it)")

import loaderx  # noqa: E402
from _interop import Lifetime, append_every_dtype, every_dtype_reads, random_ragged, write_dense, write_ragged  # noqa: E402
from _interop import check_rejects_wrong_dtype_and_shape, three_stream_loader  # noqa: E402
from loaderx import dtypes  # noqa: E402
from loaderx.zrecord import DenseStore, DenseWriter, DLTensor, RaggedBatch, RaggedStore, RaggedWriter  # noqa: E402

#: catalog name -> torch dtype, for every catalog dtype torch has.
TORCH = {
    name: getattr(torch, name)
    for name in dtypes.NAMES
    if isinstance(getattr(torch, name, None), torch.dtype)
}
#: catalog dtypes torch has no dtype for (ml_dtypes-only float8 variants).
NOT_IN_TORCH = [n for n in dtypes.NAMES if n not in TORCH]


def test_torch_dtype_matrix():
    """The matrix this module covers: every catalog dtype except the float8 variants torch lacks."""
    for name in ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                 "float16", "bfloat16", "float32", "float64", "complex64", "complex128",
                 "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu"]:
        assert name in TORCH, name
    assert set(NOT_IN_TORCH) <= {"float8_e3m4", "float8_e4m3", "float8_e4m3b11fnuz"}


def to_torch(a):
    """A torch tensor holding exactly the bytes of NumPy array `a` (ml_dtypes through their bits)."""
    a = np.ascontiguousarray(a)
    tdt = TORCH[dtypes.canonical(a.dtype).name]
    raw = torch.from_numpy(a.view(np.uint8).reshape(-1).copy())
    return raw.view(tdt).reshape(a.shape)


def torch_bytes(t):
    return t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def capsule_data(t):
    return read_capsule(t.__dlpack__(max_version=(1, 0)))["data"]


@pytest.mark.parametrize("name", sorted(TORCH))
def test_dense_every_dtype_zero_copy(tmp_path, name, alloc):
    for t, want in every_dtype_reads(tmp_path, name, alloc):
        x = torch.from_dlpack(t)
        assert x.dtype == TORCH[name]
        assert tuple(x.shape) == t.shape
        assert x.data_ptr() == capsule_data(t), "torch.from_dlpack copied"
        assert x.data_ptr() == torch.from_dlpack(t).data_ptr()  # several imports alias
        assert x.is_contiguous()
        assert torch_bytes(x) == want


@pytest.mark.parametrize("name", sorted(TORCH))
def test_append_from_torch_every_dtype(tmp_path, name, alloc):
    data, recs, _ = append_every_dtype(tmp_path, name, to_torch)
    with DenseStore(tmp_path / "d") as s, RaggedStore(tmp_path / "r") as r:
        assert torch_bytes(torch.from_dlpack(s.bind(alloc)[:])) == as_bytes(data)
        b = r.bind(alloc)[:]
        for got, want in zip(b.to_tensors(), recs):
            x = torch.from_dlpack(got)
            assert tuple(x.shape) == want.shape
            assert torch_bytes(x) == as_bytes(want)


@pytest.mark.parametrize("name", NOT_IN_TORCH)
def test_dtypes_torch_lacks_need_the_numpy_helper(tmp_path, name, alloc):
    """torch has no such dtype: torch.from_dlpack refuses the code, the helper still reads it."""
    dt = getattr(dtypes, name)
    data = random_array(dt, (6, 2), np.random.default_rng(1))
    with DenseStore(write_dense(tmp_path, name, data)) as s:
        t = s.bind(alloc)[:]
        with pytest.raises((BufferError, RuntimeError, TypeError)):
            torch.from_dlpack(t)
        x = torch.from_dlpack(t.bitcast(dtypes.uint8))
        assert x.data_ptr() == capsule_data(t)
        assert x.numpy().tobytes() == as_bytes(data)


def test_lifetime_tensor_outlives_store_view_allocator(tmp_path):
    c = Lifetime(tmp_path)
    x = torch.from_dlpack(c.view[[9, 3, 99]])
    b = c.ragged[[4, 39, 0]]
    vals, cu, sh = torch.from_dlpack(b.values), torch.from_dlpack(b.cu_seqlens), torch.from_dlpack(b.shapes)
    pieces = [torch.from_dlpack(t) for t in b.to_tensors()]
    del b
    c.release()
    junk = [torch.full((100, 64), -1.0) for _ in range(8)]  # reuse freed memory, if any was freed
    assert torch.equal(x, torch.from_numpy(c.data[[9, 3, 99]]))
    assert vals.tolist() == c.packed([4, 39, 0])
    assert cu.tolist() == [0, 5, 10, 11] and sh.tolist() == [[5], [5], [1]]
    assert [p.tolist() for p in pieces] == [c.recs[4].tolist(), c.recs[39].tolist(), c.recs[0].tolist()]
    del junk


def test_writable_as_documented(tmp_path, alloc):
    """Every batch owns its allocation: the import is writable, aliases other imports of the same
    DLTensor, and never reaches the store (a new gather reads the stored bytes)."""
    data = np.arange(40, dtype=np.int32).reshape(10, 4)
    with DenseStore(write_dense(tmp_path, "int32", data)) as s:
        v = s.bind(alloc)
        t = v[:]
        assert read_capsule(t.__dlpack__(max_version=(1, 0)))["flags"] == 0
        x = torch.from_dlpack(t)
        x[2] = -7
        assert np.from_dlpack(t)[2].tolist() == [-7] * 4
        assert torch.from_dlpack(t)[2].tolist() == [-7] * 4
        assert torch.from_dlpack(v[2]).tolist() == data[2].tolist()
        other = torch.from_dlpack(v[:])
        assert other.data_ptr() != x.data_ptr()  # exclusive allocation per batch
        assert torch.equal(other, torch.from_numpy(data))


@pytest.mark.parametrize("codec", ["raw", "zstd"])
@pytest.mark.parametrize("ndim", [1, 3])
def test_ragged_fields(tmp_path, alloc, codec, ndim):
    recs = random_ragged(tmp_path, ndim, codec)
    want = [7, 49, 0, 7, 13]
    with RaggedStore(tmp_path / "r") as s:
        b = s.bind(alloc)[want]
        vals, cu, sh = torch.from_dlpack(b.values), torch.from_dlpack(b.cu_seqlens), torch.from_dlpack(b.shapes)
        assert vals.dtype == torch.float32 and vals.ndim == 1
        assert cu.dtype == torch.int32 and sh.dtype == torch.uint64 and tuple(sh.shape) == (5, ndim)
        for field, t in [(vals, b.values), (cu, b.cu_seqlens), (sh, b.shapes)]:
            assert field.data_ptr() == capsule_data(t)
            assert field.data_ptr() % 64 == 0
        np.testing.assert_array_equal(vals.numpy(), np.concatenate([recs[i].reshape(-1) for i in want]))
        assert cu.tolist() == [0, *np.cumsum([recs[i].size for i in want]).tolist()]
        assert sh.to(torch.int64).tolist() == [list(recs[i].shape) for i in want]
        for k, (piece, i) in enumerate(zip(b.to_tensors(), want)):
            x = torch.from_dlpack(piece)
            assert x.data_ptr() == vals.data_ptr() + 4 * int(cu[k])  # a view into values
            np.testing.assert_array_equal(x.numpy(), recs[i])
        # torch's own segment ops consume the packed form directly
        lengths = (cu[1:] - cu[:-1]).to(torch.int64)
        sums = torch.segment_reduce(vals, "sum", lengths=lengths)
        np.testing.assert_allclose(sums.numpy(), [recs[i].sum() for i in want], rtol=1e-5, atol=1e-5)


def test_loader_shards(tmp_path):
    with three_stream_loader(tmp_path) as (x, tok, loader, ref):
        seen = []
        for _ in range(6):
            shards = next(loader)
            assert len(shards) == 2
            for sh in shards:
                tx, ti = torch.from_dlpack(sh["x"]), torch.from_dlpack(sh["id"])
                assert tx.data_ptr() == capsule_data(sh["x"])
                assert tuple(tx.shape) == (16, 16)
                assert torch.equal(tx, torch.from_numpy(x[ti.numpy()]))
                vals = torch.from_dlpack(sh["tok"].values)
                cu = torch.from_dlpack(sh["tok"].cu_seqlens)
                for k, i in enumerate(ti.tolist()):
                    assert vals[cu[k]:cu[k + 1]].tolist() == tok[i].tolist()
            seen.append(tuple(torch.cat([torch.from_dlpack(sh["id"]) for sh in shards]).tolist()))
        assert seen == [tuple(int(i) for i in ref.next()) for _ in range(6)]  # one worker keeps the order


def test_append_nd_and_ragged_from_torch(tmp_path, alloc):
    imgs = torch.randint(0, 256, (12, 3, 8, 6), dtype=torch.uint8)
    with DenseWriter(tmp_path / "d", dtypes.uint8, (3, 8, 6), "zstd") as w:
        w.append(imgs[:5])
        w.append(imgs[5:])
        w.append(imgs[:1])
    seqs = [torch.arange(1 + k, dtype=torch.int64) for k in range(9)]
    write_ragged(tmp_path / "r1", dtypes.int64, 1, "raw", seqs)  # torch records go through DLPack
    write_ragged(tmp_path / "r3", dtypes.uint8, 3, "zstd", [imgs[k, :, : 2 + k % 5] for k in range(12)])
    with DenseStore(tmp_path / "d") as s, RaggedStore(tmp_path / "r1") as r1, RaggedStore(tmp_path / "r3") as r3:
        got = torch.from_dlpack(s.bind(alloc)[:])
        assert torch.equal(got, torch.cat([imgs, imgs[:1]]))
        for t, want in zip(r1.bind(alloc)[:].to_tensors(), seqs):
            assert torch.equal(torch.from_dlpack(t), want)
        for k, t in enumerate(r3.bind(alloc)[:].to_tensors()):
            assert torch.equal(torch.from_dlpack(t), imgs[k, :, : 2 + k % 5])


def test_rejects_non_contiguous(tmp_path):
    base = torch.arange(6 * 8, dtype=torch.float32).reshape(6, 8)
    w = DenseWriter(tmp_path / "d", dtypes.float32, (4,), "raw")
    for bad in [base.T[:, :4], base[:, ::2], base[:, None, 0].expand(6, 4)]:
        assert not bad.is_contiguous()
        with pytest.raises(loaderx.InvalidInputError, match="not C-contiguous"):
            w.append(bad)
    assert len(w) == 0
    rw = RaggedWriter(tmp_path / "r", dtypes.float32, 1, "raw")
    with pytest.raises(loaderx.InvalidInputError):
        rw.append(RaggedBatch(base[:, 0], torch.tensor([0, 6], dtype=torch.int32), torch.tensor([[6]], dtype=torch.uint64)))
    assert len(rw) == 0
    w.abort()
    rw.abort()


def test_rejects_wrong_dtype_and_shape(tmp_path):
    check_rejects_wrong_dtype_and_shape(
        tmp_path,
        lambda shape, name: torch.zeros(shape, dtype=getattr(torch, name)),
        lambda values, name: torch.tensor(values, dtype=getattr(torch, name)),
    )


def test_rejects_non_cpu_and_non_tensors(tmp_path):
    w = DenseWriter(tmp_path / "d", dtypes.float32, (), "raw")
    # torch's own __dlpack_device__ refuses a meta tensor; the binding passes that ValueError on
    with pytest.raises(ValueError, match="meta"):
        w.append(torch.zeros(3, device="meta"))

    class OnCuda:
        """A torch CPU tensor that says it lives on CUDA (no GPU here to make a real one)."""

        def __init__(self, t):
            self.t = t

        def __dlpack_device__(self):
            return (2, 0)

        def __dlpack__(self, **kw):
            raise AssertionError("exported a non-CPU tensor")

    with pytest.raises(loaderx.UnsupportedDeviceError, match="not supported"):
        w.append(OnCuda(torch.zeros(3)))
    with pytest.raises(TypeError):
        w.append(torch.float32)
    assert len(w) == 0
    w.abort()


def test_torch_indices_select(tmp_path, alloc):
    data = np.arange(50, dtype=np.int16)
    with DenseStore(write_dense(tmp_path, "int16", data)) as s:
        v = s.bind(alloc)
        for idx in [torch.tensor([4, 1, 4]), torch.arange(0, 50, 7, dtype=torch.int32), torch.arange(50)[::5]]:
            assert torch.from_dlpack(v[idx]).tolist() == data[idx.numpy()].tolist()
        assert isinstance(v[torch.tensor([1])], DLTensor)
