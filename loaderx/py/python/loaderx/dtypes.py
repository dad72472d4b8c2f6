"""The canonical dtype catalog.

Every schema uses one of these NumPy dtypes (ml_dtypes provides ``bfloat16`` and the float8
family). Structured, subarray, object, metadata-bearing, non-native-endian and zero-itemsize dtypes
are rejected.

NumPy's own DLPack import does not know ``bfloat16`` / float8; use :func:`from_dlpack` (or
``np.from_dlpack(t.bitcast(dtypes.uint16)).view(dtypes.bfloat16)``) to get a typed NumPy array.
"""

from __future__ import annotations

import builtins
from typing import Any

import ml_dtypes
import numpy as np

from . import _loaderx
from .errors import DTypeError

#: ``(name, itemsize, (dlpack_code, bits, lanes))`` rows, in catalog order (from the Rust core).
CATALOG: tuple[tuple[str, int, tuple[int, int, int]], ...] = tuple(
    (name, size, tuple(code)) for name, size, code in _loaderx._DTYPES
)


def _resolve(name: str) -> np.dtype:
    if hasattr(ml_dtypes, name) and name not in ("bool",) and not hasattr(np, name):
        return np.dtype(getattr(ml_dtypes, name))
    return np.dtype(name)


_BY_NAME: dict[str, np.dtype] = {name: _resolve(name) for name, _, _ in CATALOG}

bool = _BY_NAME["bool"]  # noqa: A001  (the catalog name)
int8 = _BY_NAME["int8"]
int16 = _BY_NAME["int16"]
int32 = _BY_NAME["int32"]
int64 = _BY_NAME["int64"]
uint8 = _BY_NAME["uint8"]
uint16 = _BY_NAME["uint16"]
uint32 = _BY_NAME["uint32"]
uint64 = _BY_NAME["uint64"]
float16 = _BY_NAME["float16"]
bfloat16 = _BY_NAME["bfloat16"]
float32 = _BY_NAME["float32"]
float64 = _BY_NAME["float64"]
complex64 = _BY_NAME["complex64"]
complex128 = _BY_NAME["complex128"]
float8_e3m4 = _BY_NAME["float8_e3m4"]
float8_e4m3 = _BY_NAME["float8_e4m3"]
float8_e4m3b11fnuz = _BY_NAME["float8_e4m3b11fnuz"]
float8_e4m3fn = _BY_NAME["float8_e4m3fn"]
float8_e4m3fnuz = _BY_NAME["float8_e4m3fnuz"]
float8_e5m2 = _BY_NAME["float8_e5m2"]
float8_e5m2fnuz = _BY_NAME["float8_e5m2fnuz"]
float8_e8m0fnu = _BY_NAME["float8_e8m0fnu"]

#: Every catalog dtype, in catalog order.
ALL: tuple[np.dtype, ...] = tuple(_BY_NAME.values())
#: Catalog names, in catalog order.
NAMES: tuple[str, ...] = tuple(_BY_NAME)

#: Dtypes NumPy cannot exchange through DLPack (ml_dtypes): name -> unsigned dtype of equal width.
ML_STORAGE: dict[str, np.dtype] = {
    name: (uint16 if _BY_NAME[name].itemsize == 2 else uint8)
    for name, _, (code, _, _) in CATALOG
    if code == 4 or code >= 7
}


def canonical(dtype: Any) -> np.dtype:
    """Returns the catalog dtype equal to ``dtype`` (anything ``np.dtype`` accepts, or a catalog
    name). Raises :class:`~loaderx.errors.DTypeError` for anything outside the catalog."""
    if isinstance(dtype, str) and dtype in _BY_NAME:
        return _BY_NAME[dtype]
    try:
        dt = np.dtype(dtype)
    except (TypeError, ValueError) as e:
        raise DTypeError(f"not a dtype: {dtype!r} ({e})") from None
    if dt.fields is not None:
        raise DTypeError(f"structured dtype {dt} is not supported; store each field as its own stream")
    if dt.subdtype is not None:
        raise DTypeError(f"subarray dtype {dt} is not supported; put the extra axes in item_shape")
    if dt.hasobject:
        raise DTypeError(f"object dtype {dt} is not supported")
    if dt.metadata:
        raise DTypeError(f"dtype {dt} carries metadata {dict(dt.metadata)!r}; metadata-bearing dtypes are not supported")
    if dt.itemsize == 0:
        raise DTypeError(f"zero-itemsize dtype {dt} is not supported")
    if dt.byteorder not in ("=", "|") and not dt.isnative:
        raise DTypeError(f"non-native-endian dtype {dt.str} is not supported; convert with .astype({dt.newbyteorder('=')})")
    ref = _BY_NAME.get(dt.name)
    if ref is None or ref != dt or ref.kind != dt.kind:
        raise DTypeError(f"dtype {dt} is not in the loaderx catalog ({', '.join(NAMES)})")
    return ref


def _canonical_name(dtype: Any) -> str:
    return canonical(dtype).name


def from_dlpack(tensor: Any) -> np.ndarray:
    """``np.from_dlpack`` that also handles the ml_dtypes dtypes (``bfloat16``, float8) of a
    loaderx ``DLTensor``: the bytes are imported as the unsigned integer of equal width and viewed
    as the ml_dtypes type. Zero-copy."""
    dt = getattr(tensor, "dtype", None)
    if isinstance(dt, np.dtype) and dt.name in ML_STORAGE and hasattr(tensor, "bitcast"):
        return np.from_dlpack(tensor.bitcast(ML_STORAGE[dt.name])).view(dt)
    return np.from_dlpack(tensor)


def is_supported(dtype: Any) -> builtins.bool:
    """Whether ``dtype`` canonicalizes to a catalog entry."""
    try:
        canonical(dtype)
    except DTypeError:
        return False
    return True


__all__ = ["ALL", "NAMES", "CATALOG", "ML_STORAGE", "canonical", "from_dlpack", "is_supported", *NAMES]
