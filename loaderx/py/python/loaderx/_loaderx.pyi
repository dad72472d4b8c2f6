"""Type stubs for the native module ``loaderx._loaderx`` (re-exported by ``loaderx``,
``loaderx.zrecord`` and ``loaderx.sampler``)."""

from __future__ import annotations

import os
import pathlib
from typing import (
    Any,
    Callable,
    Generic,
    Iterator,
    Literal,
    Mapping,
    NoReturn,
    Sequence,
    TypeVar,
    final,
    type_check_only,
)

from typing_extensions import Self

import numpy as np

__all__ = [
    "Allocator",
    "DenseStore",
    "RaggedStore",
    "DenseView",
    "RaggedView",
    "DenseWriter",
    "RaggedWriter",
    "DLTensor",
    "RaggedBatch",
    "Sampler",
    "Mode",
    "Loader",
    "train_dict",
    "block_buffer_blocks",
    "DEFAULT_DICT_BYTES",
    "DEFAULT_POOL_SIZE",
    "DEFAULT_DATA_SHARDS",
    "_DTYPES",
    "gc",
    "publish",
    "_dataset_commit",
    "_dataset_describe_part",
    "_dataset_gc",
    "_dataset_info",
    "_dataset_new_part_name",
    "_dataset_part_path",
    "_dataset_versions",
]

DEFAULT_DICT_BYTES: int
DEFAULT_POOL_SIZE: int
DEFAULT_DATA_SHARDS: int
_DTYPES: list[tuple[str, int, tuple[int, int, int]]]

_Path = str | os.PathLike[str]
_Index = int | slice | Sequence[int] | tuple[int, ...] | np.ndarray | Any
_Codec = Literal["raw", "zstd", "zstd_dict"]
_StorageOptions = Mapping[str, str | bool | int]
_Transform = Callable[[list[dict[str, Any]]], Any]

@type_check_only
class _Closing:
    """`close()` and a `with` block that closes on exit (and never swallows an exception)."""
    def close(self) -> None: ...
    def __enter__(self) -> Self: ...
    def __exit__(self, *args: object) -> bool: ...

@final
class Allocator(_Closing):
    def __new__(
        cls, device: str = "cpu", device_id: int = 0, *, pool_size: int | None = None
    ) -> Allocator: ...
    @property
    def pool_size(self) -> int: ...
    @property
    def device(self) -> str: ...
    @property
    def device_id(self) -> int: ...
    @property
    def closed(self) -> bool: ...
    def stats(self) -> dict[str, int]: ...

@final
class DLTensor:
    def __dlpack__(
        self,
        *,
        stream: int | None = None,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> Any: ...
    def __dlpack_device__(self) -> tuple[int, int]: ...
    @property
    def shape(self) -> tuple[int, ...]: ...
    @property
    def dtype(self) -> np.dtype: ...
    @property
    def ndim(self) -> int: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def device(self) -> tuple[int, int]: ...
    def __len__(self) -> int: ...
    def bitcast(self, dtype: Any) -> DLTensor: ...

@final
class RaggedBatch:
    def __new__(cls, values: Any, cu_seqlens: Any, shapes: Any) -> RaggedBatch: ...
    @classmethod
    def from_records(cls, records: Any, dtype: Any = None, ndim: int | None = None) -> RaggedBatch: ...
    @property
    def values(self) -> Any: ...
    @property
    def cu_seqlens(self) -> Any: ...
    @property
    def shapes(self) -> Any: ...
    @property
    def dtype(self) -> np.dtype: ...
    @property
    def ndim(self) -> int: ...
    def __len__(self) -> int: ...
    def to_tensors(self) -> list[Any]: ...

# Stores, views and writers come in a Dense and a Ragged kind. What both kinds answer is written once,
# in the `@type_check_only` bases below (no such classes exist at runtime: stubtest checks each
# runtime class against its stub's whole MRO); each final class adds what its kind alone has.

_Batch = TypeVar("_Batch", covariant=True)
_View = TypeVar("_View", covariant=True)

@type_check_only
class _DenseKind:
    @property
    def item_shape(self) -> tuple[int, ...]: ...

@type_check_only
class _RaggedKind:
    @property
    def ndim(self) -> int: ...

@type_check_only
class _Records:
    def __len__(self) -> int: ...
    @property
    def dtype(self) -> np.dtype: ...

@type_check_only
class _Readable(_Records):
    @property
    def codec(self) -> str: ...
    @property
    def closed(self) -> bool: ...
    def buffer_blocks(self, records: int, blocks: int) -> None: ...
    @property
    def block_buffer_stats(self) -> dict[str, int] | None: ...

@type_check_only
class _BoundView(_Readable, Generic[_Batch]):
    def __getitem__(self, key: _Index, /) -> _Batch: ...
    def __iter__(self) -> Iterator[_Batch]: ...

@final
class DenseView(_BoundView[DLTensor], _DenseKind): ...

@final
class RaggedView(_BoundView[RaggedBatch], _RaggedKind): ...

@type_check_only
class _Store(_Readable, _Closing, Generic[_View]):
    def __new__(
        cls,
        path: _Path,
        *,
        mmap: bool | None = None,
        storage_options: _StorageOptions | None = None,
        cache_dir: _Path | None = None,
        cache_bytes: int | None = None,
        cache_block: int | None = None,
        version: int | None = None,
        column: str | None = None,
    ) -> Self: ...
    @property
    def mapped(self) -> bool: ...
    @property
    def version(self) -> int | None: ...
    @property
    def parts(self) -> int: ...
    def verify_part(self, p: int) -> None: ...
    @property
    def cache_stats(self) -> dict[str, int | str | None] | None: ...
    @property
    def request_stats(self) -> dict[str, int] | None: ...
    @property
    def data_shards(self) -> int: ...
    @property
    def path(self) -> pathlib.Path: ...
    @property
    def dictionary(self) -> bytes | None: ...
    def verify(self) -> None: ...
    def __getitem__(self, key: object, /) -> NoReturn: ...
    def bind(self, allocator: Allocator) -> _View: ...

@final
class DenseStore(_Store[DenseView], _DenseKind): ...

@final
class RaggedStore(_Store[RaggedView], _RaggedKind): ...

@type_check_only
class _Writer(_Records):
    @property
    def path(self) -> pathlib.Path: ...
    def close(self) -> None: ...
    def abort(self) -> None: ...
    def __enter__(self) -> Self: ...
    def __exit__(self, exc_type: object = None, exc: object = None, tb: object = None) -> bool: ...

@final
class DenseWriter(_Writer, _DenseKind):
    def __new__(
        cls, path: _Path, dtype: Any, item_shape: Sequence[int], codec: _Codec, data_shards: int = ...,
        dict_bytes: bytes | None = None, *, storage_options: _StorageOptions | None = None,
    ) -> DenseWriter: ...
    def append(self, batch: Any) -> None: ...

@final
class RaggedWriter(_Writer, _RaggedKind):
    def __new__(
        cls, path: _Path, dtype: Any, ndim: int, codec: _Codec, data_shards: int = ...,
        dict_bytes: bytes | None = None, *, storage_options: _StorageOptions | None = None,
    ) -> RaggedWriter: ...
    def append(self, batch: RaggedBatch) -> None: ...

def train_dict(view: DenseView | RaggedView, max_bytes: int = ...) -> bytes: ...
# `_bench_gather(view, idx, iters) -> float` exists only in builds with the `bench-hooks` feature.

@final
class Mode:
    SEQUENTIAL: Mode
    IID: Mode
    CYCLIC: Mode
    BLOCK: Mode

_Mode = Mode

def block_buffer_blocks(block: int, window: int, batch: int, record_bytes: int) -> int | None: ...

@final
class Sampler:
    Mode: type[_Mode]
    def __new__(
        cls, n: int, batch: int, mode: _Mode | Literal["sequential", "iid", "cyclic", "block"],
        seed: int = 0, *, block: int | None = None, window: int | None = None,
        record_bytes: int | None = None,
    ) -> Sampler: ...
    def next(self) -> np.ndarray: ...
    def block_runs(self, step: int) -> np.ndarray: ...
    def window_runs(self, step: int) -> np.ndarray: ...
    def seek(self, step: int) -> None: ...
    def __iter__(self) -> Sampler: ...
    def __next__(self) -> np.ndarray: ...

@final
class Loader(_Closing):
    def __new__(
        cls,
        streams: Mapping[str, Sequence[DenseView | RaggedView]],
        sampler: Any,
        transform: _Transform | None = None, workers: int = 4, prefetch: int = 4,
        *, process_index: int = 0, process_count: int = 1, ordered: bool = False,
    ) -> Loader: ...
    @staticmethod
    def mixture(
        sources: Sequence[Any],
        batch: int,
        transform: _Transform | None = None, workers: int = 4, prefetch: int = 4,
        *, process_index: int = 0, process_count: int = 1, ordered: bool = False,
        schedule: Sequence[tuple[int, Sequence[float]]] | None = None,
    ) -> Loader: ...
    def set_weights(self, weights: Sequence[float], step: int | None = None) -> int: ...
    def next(self) -> Any: ...
    def __iter__(self) -> Loader: ...
    def __next__(self) -> Any: ...
    @property
    def step(self) -> int | None: ...
    @property
    def threads(self) -> int: ...
    @property
    def process_index(self) -> int: ...
    @property
    def process_count(self) -> int: ...
    @property
    def ordered(self) -> bool: ...
    def fingerprint(self) -> dict[str, Any]: ...
    def state_dict(self) -> dict[str, Any]: ...
    def load_state_dict(
        self, state: dict[str, Any], *, allow_other_version: bool = False
    ) -> None: ...
    def pack(
        self, stream: str, seq_len: int, batch_size: int, *, mode: str = "concat", pool: int = 32,
    ) -> Self: ...

def publish(path: _Path, url: str, *, storage_options: _StorageOptions | None = None) -> None: ...
def _dataset_commit(
    root: _Path, parts: list[str] | list[bytes], *, append: bool = False,
    storage_options: _StorageOptions | None = None,
) -> dict[str, Any]: ...
def _dataset_describe_part(
    root: _Path, part: str, *, storage_options: _StorageOptions | None = None,
) -> bytes: ...
def _dataset_versions(root: _Path, *, storage_options: _StorageOptions | None = None) -> list[int]: ...
def _dataset_info(
    root: _Path, version: int | None = None, *, storage_options: _StorageOptions | None = None,
) -> dict[str, Any] | None: ...
def _dataset_gc(
    root: _Path, *, min_age_secs: int = 3600, dry_run: bool = True,
    storage_options: _StorageOptions | None = None,
) -> dict[str, Any]: ...
def _dataset_part_path(root: _Path, part: str, column: str | None = None) -> str: ...
def _dataset_new_part_name(tag: str = "") -> str: ...
def gc(
    url: str,
    *,
    storage_options: _StorageOptions | None = None,
    min_age_secs: int = 3600,
    dry_run: bool = True,
) -> dict[str, list[str] | bool]: ...
