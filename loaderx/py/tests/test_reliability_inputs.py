"""Reliability plan T8 from Python: bad-input API calls (hypothesis).

test_inputs.py checks one defect per call in isolation against a fresh writer; here calls are mixed
valid/invalid sequences on one writer, every accepted call is verified by reading the container back
after close + reopen (0 silent accepts), every rejection must leave the writer unchanged, and no
exception may be a PanicException or escape the Exception hierarchy. The loader fault matrix (T11)
is test_reliability_loader.py.
"""

import os

import ml_dtypes
import numpy as np
import pytest
from conftest import FakeDevice
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loaderx import Allocator, Loader, dtypes
from loaderx.sampler import Sampler
from loaderx.zrecord import DenseStore, DenseWriter, RaggedBatch, RaggedStore, RaggedWriter

STATS = {"t8": {}}

# ----------------------------------------------------------------------------------------------
# T8
# ----------------------------------------------------------------------------------------------

T8_TOTAL = 2000
SETTINGS = dict(deadline=None, suppress_health_check=list(HealthCheck), derandomize=False)

# Writer dtypes that NumPy can read back through DLPack.
W_DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
            "float16", "float32", "float64", "complex64"]
# Input dtypes: the writer's, any other, and ones the library must never take.
ODD_DTYPES = [np.dtype(">f4"), np.dtype(">i8"), np.dtype(object), np.dtype(ml_dtypes.bfloat16),
              np.dtype(ml_dtypes.float8_e4m3fn), np.dtype("V4"), np.dtype("U2"), np.dtype("S3"),
              np.dtype("datetime64[s]")]


def count(name):
    STATS["t8"][name] = STATS["t8"].get(name, 0) + 1


def check_exception(e):
    """A rejection must be an ordinary Exception, never a (BaseException) PanicException."""
    assert isinstance(e, Exception), repr(e)
    for cls in type(e).__mro__:
        assert cls.__name__ != "PanicException", repr(e)


def attempt(fn):
    """(accepted, exception)."""
    try:
        return True, fn()
    except BaseException as e:  # noqa: B036 - PanicException derives from BaseException
        check_exception(e)
        return False, e


class CudaArrayInterface:
    """Only a __cuda_array_interface__ (no DLPack, no buffer)."""

    def __init__(self, shape):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": "<f4", "data": (0, False), "version": 3}


LAYOUTS = ["C", "C", "C", "readonly", "F", "T", "slice", "misaligned", "bytes", "memoryview-ro",
           "bytearray", "memoryview-rw", "fake-cuda", "cai", "list", "scalar"]


@st.composite
def dense_call(draw, wdt, item):
    """(input object, equivalent ndarray or None, verdict) with verdict in {valid, invalid, either}."""
    layout = draw(st.sampled_from(LAYOUTS))
    n = draw(st.integers(0, 4))
    if draw(st.integers(0, 3)) == 0:
        dt = draw(st.sampled_from([np.dtype(d) for d in W_DTYPES] + ODD_DTYPES))
    else:
        dt = np.dtype(wdt)
    shape = (n, *item)
    if draw(st.integers(0, 4)) == 0:  # perturb the shape
        shape = tuple(draw(st.lists(st.integers(0, 4), min_size=0, max_size=4)))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)

    def make(dtype, shp):
        size = int(np.prod(shp, dtype=np.int64))
        if dtype.kind == "O":
            return np.array([object()] * size, dtype=object).reshape(shp)
        if dtype.kind in "USVM":
            return np.zeros(shp, dtype=dtype)
        raw = rng.integers(0, 256, size=size * dtype.itemsize, dtype=np.uint8)
        if dtype.kind == "b":
            raw &= 1
        return raw.view(dtype).reshape(shp)

    if layout in ("C", "readonly"):
        arr = make(dt, shape)
        if layout == "readonly":
            arr.flags.writeable = False
        return arr, arr, "model"
    if layout == "F":
        arr = np.asfortranarray(make(dt, shape))
        return arr, arr, "model"
    if layout == "T":
        arr = make(dt, shape[::-1]).T
        return arr, arr, "model"
    if layout == "slice":
        step = draw(st.integers(2, 3))
        big = make(dt, (shape[0] * step, *shape[1:])) if shape else make(dt, (step,))
        arr = big[::step]
        return arr, arr, "model"
    if layout == "misaligned":
        base = make(dt, shape)
        if dt.itemsize < 2 or dt.kind in "OUSVM" or base.size == 0:
            return base, base, "model"
        buf = np.zeros(base.nbytes + dt.itemsize, dtype=np.uint8)
        arr = np.frombuffer(buf.data, dtype=dt, count=base.size, offset=1).reshape(shape)
        return arr, None, "invalid"
    if layout in ("bytes", "memoryview-ro"):
        raw = rng.integers(0, 256, size=n * 3, dtype=np.uint8).tobytes()
        obj = raw if layout == "bytes" else memoryview(raw)
        return obj, np.frombuffer(raw, dtype=np.uint8), "model"
    if layout == "bytearray":
        return bytearray(n * 4), None, "invalid"
    if layout == "memoryview-rw":
        return memoryview(bytearray(n * 4)), None, "invalid"
    if layout == "fake-cuda":
        return FakeDevice((draw(st.sampled_from([2, 3, 4, 10, 13])), draw(st.integers(0, 3)))), None, "invalid"
    if layout == "cai":
        return CudaArrayInterface(shape), None, "invalid"
    if layout == "list":
        return make(np.dtype(wdt), shape).tolist(), None, "invalid"
    obj = draw(st.sampled_from([1, 2.5, None, "x", b"", object()]))
    if obj == b"":  # an empty read-only buffer: 0 uint8 records
        return obj, np.zeros(0, np.uint8), "model"
    return obj, None, "invalid"


def valid_for(arr, wdt, item):
    """The documented acceptance rule for an ndarray-equivalent input."""
    return (arr.dtype == np.dtype(wdt) and arr.dtype.isnative and arr.ndim == len(item) + 1
            and tuple(arr.shape[1:]) == tuple(item) and arr.flags.c_contiguous and arr.flags.aligned)


def strictly_c_contiguous(arr):
    """C-contiguous by strides (not NumPy's relaxed flag that ignores size-1 and size-0 dims)."""
    want = arr.itemsize
    for dim, stride in zip(reversed(arr.shape), reversed(arr.strides)):
        if dim > 1 and stride != want:
            return False
        want *= dim
    return True


@st.composite
def dense_case(draw):
    wdt = draw(st.sampled_from(W_DTYPES))
    item = tuple(draw(st.lists(st.integers(1, 3), min_size=0, max_size=2)))
    calls = draw(st.lists(dense_call(wdt, item), min_size=1, max_size=4))
    return wdt, item, calls


@pytest.fixture(scope="module")
def t8_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("t8")


@pytest.fixture(scope="module")
def t8_alloc():
    with Allocator("cpu", pool_size=1 << 20) as a:
        yield a


@settings(max_examples=800, **SETTINGS)
@given(case=dense_case())
def test_t8_dense_writer_call_sequences(t8_dir, t8_alloc, case):
    wdt, item, calls = case
    path = t8_dir / f"d{os.urandom(6).hex()}"
    w = DenseWriter(path, getattr(dtypes, wdt), item, "raw", data_shards=1)
    expected = []
    for obj, equiv, verdict in calls:
        before = len(w)
        ok, res = attempt(lambda: w.append(obj))
        if verdict == "model" and equiv is not None:
            valid = valid_for(equiv, wdt, item)
            degenerate = equiv.size == 0 or (valid and not strictly_c_contiguous(equiv))
            if not valid and not degenerate:
                assert not ok, f"silent accept of {equiv.dtype} {equiv.shape} {equiv.strides} into {wdt} {item}"
            if valid and equiv.size > 0 and strictly_c_contiguous(equiv):
                assert ok, f"valid call refused: {res!r}"
        elif verdict == "invalid":
            assert not ok, f"silent accept of {type(obj).__name__}"
        if ok:
            # Accepted: the equivalent array must be exactly what the container holds from now on.
            assert equiv is not None, f"accepted {obj!r}"
            assert valid_for(equiv, wdt, item), f"accepted {equiv.dtype} {equiv.shape} into {wdt} {item}"
            expected.append(np.array(equiv, copy=True))
            assert len(w) == before + equiv.shape[0]
        else:
            assert len(w) == before, f"a rejected call changed the writer: {res!r}"
    if not any(e.shape[0] for e in expected):
        w.abort()
        assert not path.exists()
        count("dense")
        return
    w.close()
    want = np.concatenate(expected)
    with DenseStore(path) as s:
        assert len(s) == want.shape[0]
        got = np.from_dlpack(s.bind(t8_alloc)[:])
    assert got.dtype == want.dtype and got.shape == want.shape
    assert got.tobytes() == want.tobytes(), "read-back differs from what was accepted"
    count("dense")


RAGGED_DEFECTS = ["none", "none", "none", "empty-record", "zero-dim", "no-records", "first-nonzero",
                  "decreasing", "negative-cu", "end-short", "end-long", "shape-mismatch", "cu-int64",
                  "shapes-int64", "values-dtype", "shapes-rank", "shapes-cols", "values-2d",
                  "values-misaligned", "values-bytearray", "values-memoryview-rw", "values-cuda",
                  "cu-cuda", "cu-noncontig", "values-fortran", "values-readonly"]


@st.composite
def ragged_call(draw, ndim):
    n = draw(st.integers(1, 4))
    shapes = [tuple(draw(st.lists(st.integers(1, 3), min_size=ndim, max_size=ndim))) for _ in range(n)]
    sizes = [int(np.prod(s)) for s in shapes]
    cu = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int32)
    seed = draw(st.integers(0, 2**31))
    values = np.random.default_rng(seed).integers(-1000, 1000, size=int(cu[-1]), dtype=np.int32)
    shp = np.array(shapes, dtype=np.uint64).reshape(n, ndim)
    defect = draw(st.sampled_from(RAGGED_DEFECTS))
    records = [(values[cu[i]:cu[i + 1]].copy(), shapes[i]) for i in range(n)]
    verdict = "invalid"
    if defect == "none":
        verdict = "valid"
    elif defect == "values-readonly":
        values = values.copy()
        values.flags.writeable = False
        verdict = "valid"
    elif defect in ("empty-record", "zero-dim"):
        i = draw(st.integers(0, n - 1))
        s = list(shapes[i])
        s[draw(st.integers(0, ndim - 1))] = 0
        shapes[i] = tuple(s)
        sizes = [int(np.prod(x)) for x in shapes]
        cu = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int32)
        values = values[: cu[-1]].copy()
        shp = np.array(shapes, dtype=np.uint64).reshape(n, ndim)
    elif defect == "no-records":
        values, cu, shp = np.zeros(0, np.int32), np.zeros(1, np.int32), np.zeros((0, ndim), np.uint64)
        records, verdict = [], "either"
    elif defect == "first-nonzero":
        cu = cu + 1
        values = np.zeros(cu[-1], np.int32)
    elif defect == "decreasing":
        if n < 2:
            cu = cu[::-1].copy()
        else:
            cu = cu.copy()
            cu[1], cu[2] = cu[2], cu[1]
    elif defect == "negative-cu":
        cu = cu.copy()
        cu[1] = -1
    elif defect == "end-short":
        values = values[:-1].copy()
    elif defect == "end-long":
        values = np.concatenate([values, [7]]).astype(np.int32)
    elif defect == "shape-mismatch":
        shp = shp.copy()
        shp[draw(st.integers(0, n - 1)), 0] += 1
    elif defect == "cu-int64":
        cu = cu.astype(np.int64)
    elif defect == "shapes-int64":
        shp = shp.astype(np.int64)
    elif defect == "values-dtype":
        values = values.astype(draw(st.sampled_from([np.float32, np.int64, np.uint32, np.int16])))
    elif defect == "shapes-rank":
        shp = shp.reshape(-1)
        if ndim == 1:
            shp = shp.reshape(1, -1) if n > 1 else shp.reshape(1, 1, 1)
    elif defect == "shapes-cols":
        shp = np.concatenate([shp, np.ones((n, 1), np.uint64)], axis=1)
    elif defect == "values-2d":
        values = values.reshape(1, -1)
    elif defect == "values-misaligned":
        buf = np.zeros(values.nbytes + 4, np.uint8)
        mis = np.frombuffer(buf.data, dtype=np.int32, count=values.size, offset=1)
        if values.size == 0:
            values = mis
            verdict = "either"
        else:
            values = mis
    elif defect == "values-bytearray":
        values = bytearray(values.tobytes())
    elif defect == "values-memoryview-rw":
        values = memoryview(bytearray(values.tobytes()))
    elif defect == "values-cuda":
        values = FakeDevice((2, 0))
    elif defect == "cu-cuda":
        cu = FakeDevice((2, 0))
    elif defect == "cu-noncontig":
        cu = np.repeat(cu, 2)[::2]
    elif defect == "values-fortran":
        values = np.asfortranarray(np.stack([values, values]))[0]  # a row of an F-order array: strided
        if values.size <= 1:
            verdict = "either"
    return values, cu, shp, records, verdict, defect


@st.composite
def ragged_case(draw):
    ndim = draw(st.integers(1, 2))
    return ndim, draw(st.lists(ragged_call(ndim), min_size=1, max_size=3))


@settings(max_examples=450, **SETTINGS)
@given(case=ragged_case())
def test_t8_ragged_writer_call_sequences(t8_dir, t8_alloc, case):
    ndim, calls = case
    path = t8_dir / f"r{os.urandom(6).hex()}"
    w = RaggedWriter(path, dtypes.int32, ndim, "raw", data_shards=1)
    expected = []
    for values, cu, shp, records, verdict, defect in calls:
        before = len(w)
        ok, res = attempt(lambda: w.append(RaggedBatch(values, cu, shp)))
        if verdict == "valid":
            assert ok, f"valid ragged call refused: {res!r}"
        elif verdict == "invalid":
            assert not ok, f"silent accept of ragged defect {defect}"
        if ok:
            expected.extend(records)
            assert len(w) == before + len(records)
        else:
            assert len(w) == before, f"rejected call changed the writer ({defect}): {res!r}"
    if not expected:
        w.abort()
        count("ragged")
        return
    w.close()
    with RaggedStore(path) as s:
        assert len(s) == len(expected)
        rb = s.bind(t8_alloc)[:]
        vals = np.from_dlpack(rb.values)
        cu = np.from_dlpack(rb.cu_seqlens)
        shapes = np.from_dlpack(rb.shapes)
    assert vals.dtype == np.int32 and cu.dtype == np.int32 and shapes.dtype == np.uint64
    assert shapes.tolist() == [list(r[1]) for r in expected]
    assert vals.tobytes() == np.concatenate([r[0] for r in expected]).tobytes()
    assert cu.tolist() == np.concatenate([[0], np.cumsum([r[0].size for r in expected])]).tolist()
    count("ragged")


IDX_N = 29


@pytest.fixture(scope="module")
def idx_views(tmp_path_factory, t8_alloc):
    d = tmp_path_factory.mktemp("idx")
    ref = np.arange(IDX_N * 2, dtype=np.float32).reshape(IDX_N, 2)
    with DenseWriter(d / "d", dtypes.float32, (2,), "raw", data_shards=2) as w:
        w.append(ref)
    recs = [np.full(1 + i % 3, i, np.int32) for i in range(IDX_N)]
    with RaggedWriter(d / "r", dtypes.int32, 1, "raw", data_shards=2) as w:
        w.append(RaggedBatch.from_records(recs))
    ds, rs = DenseStore(d / "d"), RaggedStore(d / "r")
    yield ds.bind(t8_alloc), rs.bind(t8_alloc), ref, recs, d / "d"
    ds.close()
    rs.close()


INT_DTYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]
small_int = st.one_of(st.integers(-4, IDX_N + 4), st.integers(-(2**70), 2**70),
                      st.sampled_from([2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63)]))


@st.composite
def index_key(draw):
    kind = draw(st.sampled_from(["int", "npint", "list", "tuple", "array", "array", "slice", "bool",
                                 "float", "none", "str", "2d", "floatarray", "boolarray", "objarray",
                                 "ellipsis", "list-mixed"]))
    if kind == "int":
        return draw(small_int)
    if kind == "npint":
        dt = draw(st.sampled_from(INT_DTYPES))
        v = draw(st.integers(np.iinfo(dt).min, np.iinfo(dt).max) | st.integers(0, IDX_N + 2))
        return dt(min(max(v, np.iinfo(dt).min), np.iinfo(dt).max))
    if kind in ("list", "tuple"):
        lst = draw(st.lists(st.integers(-3, IDX_N + 3), max_size=6))
        return lst if kind == "list" else tuple(lst)
    if kind == "array":
        dt = draw(st.sampled_from(INT_DTYPES))
        info = np.iinfo(dt)
        vals = draw(st.lists(st.integers(max(info.min, -3), min(info.max, IDX_N + 3)), max_size=6))
        arr = np.array(vals, dtype=dt)
        if draw(st.booleans()) and arr.size > 1:
            arr = np.repeat(arr, 2)[::2]  # non-contiguous
        return arr
    if kind == "slice":
        b = st.none() | st.integers(-IDX_N - 3, IDX_N + 3)
        return slice(draw(b), draw(b), draw(st.none() | st.integers(-4, 4)))
    if kind == "bool":
        return draw(st.booleans())
    if kind == "float":
        return draw(st.floats(allow_nan=True))
    if kind == "none":
        return None
    if kind == "str":
        return draw(st.sampled_from(["0", "", "a"]))
    if kind == "2d":
        return np.zeros((draw(st.integers(1, 2)), draw(st.integers(1, 3))), np.int64)
    if kind == "floatarray":
        return np.array(draw(st.lists(st.integers(0, IDX_N - 1), max_size=3)), dtype=np.float64)
    if kind == "boolarray":
        return np.ones(draw(st.integers(0, IDX_N)), dtype=bool)
    if kind == "objarray":
        return np.array([1, 2], dtype=object)
    if kind == "ellipsis":
        return Ellipsis
    return [0, draw(st.sampled_from([1.5, None, "1", [1]]))]


def model_index(key, n):
    """Expected record indices for `key`, or None when it must be rejected."""
    if isinstance(key, slice):
        if key.step == 0:
            return None
        return list(range(n))[key]
    if isinstance(key, (bool, np.bool_)):
        return None
    if isinstance(key, (int, np.integer)):
        return [int(key)] if 0 <= int(key) < n else None
    if isinstance(key, np.ndarray):
        if key.dtype.kind not in "iu" or key.ndim > 1:
            return None
        vals = key.reshape(-1).tolist()
    elif isinstance(key, (list, tuple)):
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in key):
            return None
        vals = list(key)
    else:
        return None
    return vals if all(0 <= v < n for v in vals) else None


@settings(max_examples=550, **SETTINGS)
@given(key=index_key())
def test_t8_view_indices(idx_views, key):
    dv, rv, ref, recs, _ = idx_views
    want = model_index(key, IDX_N)
    scalar = isinstance(key, (int, np.integer)) or (isinstance(key, np.ndarray) and key.ndim == 0)
    ok, res = attempt(lambda: dv[key])
    if want is None:
        assert not ok, f"silent accept of index {key!r}"
    else:
        assert ok, f"valid index {key!r} refused: {res!r}"
        got = np.from_dlpack(res)
        exp = ref[want[0]] if scalar else ref[want]
        assert got.shape == exp.shape and got.tobytes() == exp.tobytes(), key
    ok, res = attempt(lambda: rv[key])
    if want is None:
        assert not ok, f"silent accept of ragged index {key!r}"
    else:
        assert ok, f"valid ragged index {key!r} refused: {res!r}"
        got = [np.from_dlpack(t) for t in res.to_tensors()]
        assert len(got) == len(want)
        for g, i in zip(got, want):
            np.testing.assert_array_equal(g, recs[i])
    count("index")


CLOSED_OPS = ["store.bind", "store.verify", "store.close", "view.get", "view.iter", "view.len",
              "writer.append", "writer.append-bad", "writer.len", "writer.close", "writer.abort",
              "loader.next", "loader.step", "loader.close", "alloc.stats", "alloc.bind", "alloc.close",
              "ragged.append", "ragged.len"]


@settings(max_examples=250, **SETTINGS)
@given(ops=st.lists(st.sampled_from(CLOSED_OPS), min_size=1, max_size=8),
       writer_close=st.sampled_from(["close", "abort"]))
def test_t8_operations_on_closed_objects(t8_dir, idx_views, ops, writer_close):
    _, _, _, _, dense_path = idx_views
    p = t8_dir / f"c{os.urandom(6).hex()}"
    # Closed store (own handle, so the shared fixture stays open) and a view bound before closing.
    store = DenseStore(dense_path)
    a = Allocator("cpu", pool_size=1 << 16)
    view = store.bind(a)
    store.close()
    w = DenseWriter(p, dtypes.float32, (2,), "raw", data_shards=1)
    w.append(np.ones((1, 2), np.float32))
    getattr(w, writer_close)()
    rw = RaggedWriter(t8_dir / f"c{os.urandom(6).hex()}", dtypes.int32, 1, "raw", data_shards=1)
    rw.abort()
    s2 = DenseStore(dense_path)
    loader = Loader({"x": [s2.bind(a)]}, Sampler(IDX_N, 2, Sampler.Mode.IID), workers=1, prefetch=1)
    loader.close()
    a2 = Allocator("cpu")
    a2.close()
    must_raise = {
        "store.bind": lambda: store.bind(a),
        "store.verify": store.verify,
        "view.get": lambda: view[0],
        "view.iter": lambda: list(view),
        "writer.append": lambda: w.append(np.ones((1, 2), np.float32)),
        "writer.append-bad": lambda: w.append(bytearray(8)),
        "writer.len": lambda: len(w),
        "loader.next": lambda: next(loader),
        "alloc.stats": a2.stats,
        "alloc.bind": lambda: s2.bind(a2),
        "ragged.append": lambda: rw.append(RaggedBatch.from_records([np.ones(2, np.int32)])),
        "ragged.len": lambda: len(rw),
    }
    may_succeed = {  # idempotent closes and plain metadata
        "store.close": store.close,
        "view.len": lambda: len(view),
        "writer.close": w.close,
        "writer.abort": w.abort,
        "loader.step": lambda: loader.step,
        "loader.close": loader.close,
        "alloc.close": a2.close,
    }
    try:
        for op in ops:
            if op in must_raise:
                ok, res = attempt(must_raise[op])
                assert not ok, f"{op} on a closed object succeeded: {res!r}"
            else:
                attempt(may_succeed[op])
        # Nothing reached the closed writer: the published container holds only the first append.
        if writer_close == "close":
            with DenseStore(p) as s:
                assert len(s) == 1
                np.testing.assert_array_equal(np.from_dlpack(s.bind(a)[:]), np.ones((1, 2), np.float32))
        else:
            assert not p.exists()
    finally:
        s2.close()
        a.close()
    count("closed")


def test_zz_summary():
    """Runs last (file order): the T8 case total and a summary line for docs/reliability.md."""
    t8 = STATS["t8"]
    if set(t8) != {"dense", "ragged", "index", "closed"}:
        pytest.skip("summary needs the whole file")
    total = sum(t8.values())
    print(f"\nT8-Python cases {total} {t8}")
    assert total >= T8_TOTAL, t8
