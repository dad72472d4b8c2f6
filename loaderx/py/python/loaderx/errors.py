"""The loaderx exception hierarchy.

Every error raised by the Rust core, and by the binding's own checks of arguments, is an instance of
:class:`Error` (the native module resolves each class below by a typed handle when it is imported;
only PyO3's conversion of a parameter of the wrong basic type, e.g. ``workers="4"``, raises a plain
``TypeError`` / ``OverflowError`` before loaderx sees the call). Where Python convention
expects a builtin category, the class also derives from it (``IndexOutOfRangeError`` is an
``IndexError``, ``InvalidInputError`` a ``ValueError``, ``DTypeError`` a ``TypeError``, ...), so
``except IndexError`` keeps working.
"""

from __future__ import annotations

from pathlib import Path

__all__ = [
    "Error",
    "CorruptError",
    "FormatError",
    "ClosedError",
    "InvalidInputError",
    "InvalidTypeError",
    "DTypeError",
    "UnsupportedDeviceError",
    "IndexOutOfRangeError",
    "AlreadyExistsError",
    "CommitConflictError",
    "LimitExceededError",
    "PoisonedError",
    "AllocationError",
    "StorageIOError",
    "NotFoundError",
    "SamplerError",
    "InternalError",
    "UnsupportedColumnError",
]


class Error(Exception):
    """Base class of every loaderx error."""


class CorruptError(Error):
    """Stored bytes do not match what the container says (checksum, size or structure mismatch).

    The message names the file, shard, record, byte offset and expected vs found values; the same
    facts are attributes, ``None`` where unknown: ``path`` (a :class:`pathlib.Path`), ``shard``,
    ``record``, ``offset`` (ints), ``what`` (what was checked), ``expected`` and ``found`` (str).
    A :class:`FormatError` sets only ``path``."""

    path: Path | None = None
    shard: int | None = None
    record: int | None = None
    offset: int | None = None
    what: str | None = None
    expected: str | None = None
    found: str | None = None


class FormatError(CorruptError):
    """The path is not a usable zrecord container of the requested kind (foreign file, wrong kind,
    newer format version)."""


class ClosedError(Error, ValueError):
    """The store, writer, allocator or loader was closed."""


class InvalidInputError(Error, ValueError):
    """An argument was rejected before anything was written or read (shape, layout, offsets,
    alignment, options)."""


class InvalidTypeError(InvalidInputError, TypeError):
    """An argument has the wrong Python type (a non-integer index, ``dict_bytes`` that are not
    bytes, an object without ``__dlpack__``, ...). Both an :class:`InvalidInputError` and a
    ``TypeError``."""


class DTypeError(Error, TypeError):
    """A dtype is not in the catalog, or does not match the store's dtype."""


class UnsupportedDeviceError(Error, BufferError):
    """A DLPack device other than the CPU was offered or requested."""


class IndexOutOfRangeError(Error, IndexError):
    """A record index is outside ``0..len(view)``."""


class AlreadyExistsError(Error, FileExistsError):
    """The destination of a new container already exists."""


class CommitConflictError(AlreadyExistsError):
    """Another writer committed this version of a dataset first (exactly one commit wins each
    version); nothing was written. Re-read the newest version and retry (``append`` retries by
    itself when asked to)."""


class LimitExceededError(Error, ValueError):
    """A size limit was exceeded (a record over 2 GiB, a ragged batch over INT32_MAX values)."""


class PoisonedError(Error):
    """A writer hit an I/O failure earlier and can no longer be used."""


class AllocationError(Error, MemoryError):
    """The allocator could not provide a region."""


class StorageIOError(Error, OSError):
    """An operating-system I/O call failed (``errno`` / ``filename`` are set when known)."""


class NotFoundError(StorageIOError, FileNotFoundError):
    """A path does not exist."""


class SamplerError(Error):
    """The sampler failed to draw, or drew a batch the loader cannot use."""


class InternalError(Error, RuntimeError):
    """A bug in loaderx: a Rust panic was caught at the boundary. Please report it."""


class UnsupportedColumnError(Error, TypeError):
    """The converter met an Arrow column kind it does not convert."""
