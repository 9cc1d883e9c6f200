"""The exceptions of ``arrow_shards``: one base class and one subclass per Rust error kind.

Every exception has the Rust message (it names the object and the limit) and these attributes,
``None`` where they do not apply:

``batch``
    A refused write's refused batch, as a ``pyarrow.RecordBatch``. A refusal hands the data
    back: nothing of it is in the buffer.
``unwritten``
    A ``pyarrow.Table`` of every batch of the refused call that was not written, the refused
    batch first (a ``write`` of a table or stream writes its batches in order, and stops at the
    first refusal; the batches before it are in the buffer).
``partition_ids``
    For ``write_partitioned``: the ids of the rows of ``unwritten``, as a ``pyarrow.UInt32Array``.
``partition``
    The partition concerned, if one is.

Subclasses add the numbers of their error (``MemoryExhaustedError.needed`` ...). Several also
derive from the built-in exception a Python caller would expect (``ValueError``,
``IndexError``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path

    import pyarrow

__all__ = [
    "ArrowShardsError",
    "ConfigError",
    "SchemaMismatchError",
    "PartitionOutOfRangeError",
    "PartitionIdsError",
    "ClosedError",
    "NotWritableError",
    "SealedError",
    "FinishedError",
    "NotCompleteError",
    "AlreadyReadError",
    "MemoryExhaustedError",
    "SpillError",
    "DiskFullError",
    "CorruptSpillError",
    "InternalError",
]


class ArrowShardsError(Exception):
    """Base class of every error ``arrow_shards`` raises."""

    batch: pyarrow.RecordBatch | None = None
    unwritten: pyarrow.Table | None = None
    partition_ids: pyarrow.UInt32Array | None = None
    partition: int | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickle the message and the attributes (exceptions cross process pools).
        return (type(self), self.args, self.__dict__)


class ConfigError(ArrowShardsError, ValueError):
    """A setting of ``ShardBuffer`` or ``MemoryPool`` is invalid (the message names it): a bad
    size string, a negative number, ``num_partitions=0``, an unknown compression, both
    ``memory_limit`` and ``memory_pool``, a spill threshold outside ``(0, 1]`` ..."""


class SchemaMismatchError(ArrowShardsError, ValueError):
    """The written data's schema does not match the buffer's (field names and types, by
    position; a non-nullable field may be written to a nullable one, metadata is ignored)."""


class PartitionOutOfRangeError(ArrowShardsError, IndexError):
    """A partition (of ``write``, ``seal``, ``read``, or a ``write_partitioned`` id) is not in
    ``range(num_partitions)``. ``num_partitions`` is set, and ``row`` for a scatter id."""

    num_partitions: int | None = None
    row: int | None = None


class PartitionIdsError(ArrowShardsError, ValueError):
    """``write_partitioned``'s ids are not one per row, or one is null (``row`` is set)."""

    row: int | None = None


class ClosedError(ArrowShardsError):
    """The buffer is closed (``close()`` was called or its ``with`` block ended)."""


class NotWritableError(ArrowShardsError):
    """Base of ``SealedError`` and ``FinishedError``: no more writes are accepted here."""


class SealedError(NotWritableError):
    """The partition was sealed (``seal(partition)``): no more writes to it."""


class FinishedError(NotWritableError):
    """The buffer was finished (``finish()``): no more writes at all."""


class NotCompleteError(ArrowShardsError):
    """The partition may not be read yet: seal it or finish the buffer first."""


class AlreadyReadError(ArrowShardsError):
    """The partition was already read; each partition is read exactly once."""


class MemoryExhaustedError(ArrowShardsError):
    """The data does not fit in the memory budget, and waiting for room is not allowed
    (spilling off, no ``write_timeout``) or timed out (``write_timeout``). ``needed``,
    ``reserved`` and ``limit`` are in bytes."""

    needed: int | None = None
    reserved: int | None = None
    limit: int | None = None


class SpillError(ArrowShardsError):
    """Spilling to disk failed (after retries), so a write that would have had to wait for the
    spiller is refused with its data; nothing already written is lost. ``close()`` raises it
    too. Also raised when the spill directory cannot be created."""


class DiskFullError(SpillError):
    """The filesystem of the spill directory is full or the quota is exhausted
    (``spill_dir`` names the directory)."""

    spill_dir: Path | None = None


class CorruptSpillError(SpillError):
    """A spilled segment failed verification when read back (bad checksum, torn or truncated
    frame); nothing of it is returned. ``file``, ``offset`` and ``partition`` say where; for
    ``read`` the rows before the damage are in ``partial``."""

    file: Path | None = None
    offset: int | None = None
    partial: pyarrow.Table | None = None


class InternalError(ArrowShardsError):
    """A bug in arrow-shards (an accounting mismatch, a background thread that died, an Arrow
    kernel that failed on accepted data). Please report it."""
