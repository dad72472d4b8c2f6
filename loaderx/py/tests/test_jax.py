"""DLPack hand-off between loaderx and JAX (CPU): every catalog dtype, zero-copy (JAX imports without
copying only from 64-byte-aligned buffers, so every exported field's alignment is asserted),
lifetime, Ragged fields, Loader shards, appends from JAX arrays, clean rejection."""

import numpy as np
import pytest
from conftest import as_bytes, read_capsule

jax = pytest.importorskip("jax", reason="jax is not installed (scripts/install-deps.sh installs it)")
import jax.numpy as jnp  # noqa: E402

# int64/uint64/float64/complex128 stay 64-bit only with x64 on (process-wide; harmless for the rest)
jax.config.update("jax_enable_x64", True)

from _interop import Lifetime, append_every_dtype, every_dtype_reads, random_ragged, write_dense, write_ragged  # noqa: E402
from _interop import check_rejects_wrong_dtype_and_shape, three_stream_loader  # noqa: E402
from loaderx import dtypes  # noqa: E402
from loaderx.zrecord import DenseStore, DenseWriter, RaggedStore  # noqa: E402

#: every catalog dtype JAX has (all of them with jax 0.10: ml_dtypes is its dtype library).
JAX = [name for name in dtypes.NAMES if hasattr(jnp, name)]


def test_jax_dtype_matrix():
    assert JAX == list(dtypes.NAMES)


def data_ptr(t):
    """The data pointer a loaderx DLTensor exports (checked 64-byte aligned: JAX's condition)."""
    info = read_capsule(t.__dlpack__(max_version=(1, 0)))
    assert info["byte_offset"] == 0
    assert info["data"] % 64 == 0, f"exported field at {info['data']:#x} is not 64-byte aligned"
    return info["data"]


def jax_bytes(a):
    return np.asarray(a).view(np.uint8).tobytes()


def from_jax_source(a):
    """A JAX array with exactly the bytes of NumPy array `a`."""
    return jnp.asarray(np.ascontiguousarray(a))


@pytest.mark.parametrize("name", JAX)
def test_dense_every_dtype_zero_copy(tmp_path, name, alloc):
    for t, want in every_dtype_reads(tmp_path, name, alloc):
        x = jax.dlpack.from_dlpack(t)
        assert x.dtype == getattr(dtypes, name)
        assert x.shape == t.shape
        assert x.unsafe_buffer_pointer() == data_ptr(t), "jax.dlpack.from_dlpack copied"
        assert jax_bytes(x) == want


@pytest.mark.parametrize("name", JAX)
def test_append_from_jax_every_dtype(tmp_path, name, alloc):
    data, recs, src = append_every_dtype(tmp_path, name, from_jax_source)
    assert src.dtype == getattr(dtypes, name)
    with DenseStore(tmp_path / "d") as s, RaggedStore(tmp_path / "r") as r:
        assert jax_bytes(jax.dlpack.from_dlpack(s.bind(alloc)[:])) == as_bytes(data)
        for got, want in zip(r.bind(alloc)[:].to_tensors(), recs):
            x = jax.dlpack.from_dlpack(got)  # a view into values: not 64-aligned, JAX copies
            assert x.shape == want.shape
            assert jax_bytes(x) == as_bytes(want)


def test_lifetime_array_outlives_store_view_allocator(tmp_path):
    c = Lifetime(tmp_path)
    t = c.view[[9, 3, 99]]
    x = jax.dlpack.from_dlpack(t)
    assert x.unsafe_buffer_pointer() == data_ptr(t)
    b = c.ragged[[4, 39, 0]]
    vals, cu, sh = (jax.dlpack.from_dlpack(f) for f in (b.values, b.cu_seqlens, b.shapes))
    del t, b
    c.release()
    junk = [np.full((100, 64), -1.0, np.float32) for _ in range(8)]
    np.testing.assert_array_equal(np.asarray(x), c.data[[9, 3, 99]])
    assert np.asarray(vals).tolist() == c.packed([4, 39, 0])
    assert np.asarray(cu).tolist() == [0, 5, 10, 11] and np.asarray(sh).tolist() == [[5], [5], [1]]
    assert float(jnp.sum(x)) == float(c.data[[9, 3, 99]].sum())  # JAX computes on the imported buffer
    del junk


def test_export_is_writable_and_jax_shares_it(tmp_path, alloc):
    """The export is not READ_ONLY (flags 0); JAX arrays are immutable by contract, but the import
    is zero-copy, so it sees the batch's bytes (here written through NumPy before JAX reads them)."""
    data = np.arange(40, dtype=np.int32).reshape(10, 4)
    with DenseStore(write_dense(tmp_path, "int32", data)) as s:
        t = s.bind(alloc)[:]
        assert read_capsule(t.__dlpack__(max_version=(1, 0)))["flags"] == 0
        np.from_dlpack(t)[2] = -7
        x = jax.dlpack.from_dlpack(t)
        assert np.asarray(x)[2].tolist() == [-7] * 4
        assert np.asarray(jax.dlpack.from_dlpack(s.bind(alloc)[2])).tolist() == data[2].tolist()


@pytest.mark.parametrize("codec", ["raw", "zstd"])
@pytest.mark.parametrize("ndim", [1, 3])
def test_ragged_fields_aligned(tmp_path, alloc, codec, ndim):
    recs = random_ragged(tmp_path, ndim, codec)
    for want in ([7, 49, 0, 7, 13], [3], list(range(50))):
        with RaggedStore(tmp_path / "r") as s:
            b = s.bind(alloc)[want]
            fields = {}
            for name in ("values", "cu_seqlens", "shapes"):
                t = getattr(b, name)
                fields[name] = jax.dlpack.from_dlpack(t)
                assert fields[name].unsafe_buffer_pointer() == data_ptr(t), name
            vals, cu, sh = fields["values"], fields["cu_seqlens"], fields["shapes"]
            assert vals.dtype == jnp.float32 and cu.dtype == jnp.int32 and sh.dtype == jnp.uint64
            np.testing.assert_array_equal(np.asarray(vals), np.concatenate([recs[i].reshape(-1) for i in want]))
            assert np.asarray(cu).tolist() == [0, *np.cumsum([recs[i].size for i in want]).tolist()]
            assert np.asarray(sh).tolist() == [list(recs[i].shape) for i in want]
            # the packed form feeds JAX's segment ops directly
            seg = jnp.repeat(jnp.arange(len(want)), jnp.diff(cu), total_repeat_length=vals.shape[0])
            sums = jax.ops.segment_sum(vals, seg, num_segments=len(want))
            np.testing.assert_allclose(np.asarray(sums), [recs[i].sum() for i in want], rtol=1e-5, atol=1e-5)


def test_loader_shards_aligned(tmp_path):
    with three_stream_loader(tmp_path) as (x, tok, loader, ref):
        for _ in range(6):
            shards = next(loader)
            want = ref.next().astype(np.int64)
            assert len(shards) == 2
            for k, sh in enumerate(shards):
                jx, ji = jax.dlpack.from_dlpack(sh["x"]), jax.dlpack.from_dlpack(sh["id"])
                assert jx.unsafe_buffer_pointer() == data_ptr(sh["x"])
                assert ji.unsafe_buffer_pointer() == data_ptr(sh["id"])
                np.testing.assert_array_equal(np.asarray(ji), want[16 * k: 16 * (k + 1)])
                np.testing.assert_array_equal(np.asarray(jx), x[np.asarray(ji)])
                rb = sh["tok"]
                vals, cu = jax.dlpack.from_dlpack(rb.values), jax.dlpack.from_dlpack(rb.cu_seqlens)
                assert vals.unsafe_buffer_pointer() == data_ptr(rb.values)
                assert cu.unsafe_buffer_pointer() == data_ptr(rb.cu_seqlens)
                data_ptr(rb.shapes)
                cu, vals = np.asarray(cu), np.asarray(vals)
                for j, i in enumerate(np.asarray(ji).tolist()):
                    assert vals[cu[j]:cu[j + 1]].tolist() == tok[i].tolist()


def test_append_nd_and_ragged_from_jax(tmp_path, alloc):
    key = jax.random.PRNGKey(0)
    imgs = jax.random.randint(key, (6, 3, 8, 6), 0, 256, dtype=jnp.int32).astype(jnp.uint8)
    with DenseWriter(tmp_path / "d", dtypes.uint8, (3, 8, 6), "zstd") as w:
        w.append(imgs[:5])
        w.append(imgs[5:])
    seqs = [jnp.arange(1 + k, dtype=jnp.int64) for k in range(4)]
    write_ragged(tmp_path / "r1", dtypes.int64, 1, "raw", seqs)  # JAX records go through DLPack
    write_ragged(tmp_path / "r3", dtypes.uint8, 3, "zstd", [imgs[k, :, : 2 + k % 5] for k in range(6)])
    with DenseStore(tmp_path / "d") as s, RaggedStore(tmp_path / "r1") as r1, RaggedStore(tmp_path / "r3") as r3:
        np.testing.assert_array_equal(np.asarray(jax.dlpack.from_dlpack(s.bind(alloc)[:])), np.asarray(imgs))
        for t, want in zip(r1.bind(alloc)[:].to_tensors(), seqs):
            np.testing.assert_array_equal(np.asarray(jax.dlpack.from_dlpack(t)), np.asarray(want))
        for k, t in enumerate(r3.bind(alloc)[:].to_tensors()):
            np.testing.assert_array_equal(np.asarray(jax.dlpack.from_dlpack(t)), np.asarray(imgs[k, :, : 2 + k % 5]))


def test_rejects_wrong_dtype_and_shape(tmp_path):
    """JAX arrays export C-contiguous only, so non-contiguous input cannot arise from JAX."""
    check_rejects_wrong_dtype_and_shape(
        tmp_path,
        lambda shape, name: jnp.zeros(shape, dtype=getattr(jnp, name)),
        lambda values, name: jnp.array(values, getattr(jnp, name)),
    )


def test_jax_indices_select(tmp_path, alloc):
    data = np.arange(50, dtype=np.int16)
    with DenseStore(write_dense(tmp_path, "int16", data)) as s:
        v = s.bind(alloc)
        for idx in [jnp.array([4, 1, 4]), jnp.arange(0, 50, 7, dtype=jnp.int32)]:
            assert np.asarray(jax.dlpack.from_dlpack(v[idx])).tolist() == data[np.asarray(idx)].tolist()
