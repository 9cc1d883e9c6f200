"""Type stubs of the extension module ``arrow_shards._native`` (re-exported by ``arrow_shards``).

Kept in step with ``src/*.rs`` by ``tests/test_api.py``.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Protocol, TypedDict

import pyarrow

DEFAULT_READ_BATCH_ROWS: int
DEFAULT_SPILL_THRESHOLD: float
DEFAULT_SPILL_TARGET: float
DEFAULT_READ_STALL_TIMEOUT: float
DEFAULT_MAX_SPILL_ROUND_BYTES: int
DEFAULT_SPILL_SEGMENT_BYTES: int
DEFAULT_SPILL_FILE_BYTES: int
DEFAULT_COMPACT_TARGET_ROWS: int
DEFAULT_COMPACT_TARGET_BYTES: int

class ArrowSchemaExportable(Protocol):
    """Anything with ``__arrow_c_schema__`` (the Arrow PyCapsule interface)."""

    def __arrow_c_schema__(self) -> object: ...

class ArrowArrayExportable(Protocol):
    """Anything with ``__arrow_c_array__``: one batch (a struct array)."""

    def __arrow_c_array__(self, requested_schema: object | None = None) -> tuple[object, object]: ...

class ArrowStreamExportable(Protocol):
    """Anything with ``__arrow_c_stream__``: a stream of batches (a table, a data frame)."""

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object: ...

#: What ``write`` and ``write_partitioned`` take.
ArrowData = pyarrow.RecordBatch | pyarrow.Table | pyarrow.RecordBatchReader | ArrowArrayExportable | ArrowStreamExportable
#: Partition ids: a uint32 array (pyarrow, numpy, any ``__arrow_c_array__``), chunked, or ints.
PartitionIds = pyarrow.Array | pyarrow.ChunkedArray | ArrowArrayExportable | ArrowStreamExportable | Sequence[int] | Any
#: A size in bytes: an int, or a string such as ``"256MiB"`` or ``"1GB"``.
Size = int | str

class Metrics(TypedDict):
    """``ShardBuffer.metrics()``: the Rust ``Metrics`` fields."""

    reserved: int
    peak_reserved: int
    pool_reserved: int
    memory_limit: int | None
    batches_written: int
    rows_written: int
    bytes_written: int
    batches_read: int
    rows_read: int
    partitions_read: int
    write_wait: float
    lock_wait: float
    read_wait: float
    read_overdrafts: int
    rows_streamed: int
    spills_voided: int
    rows_discarded: int
    bytes_spilled: int
    direct_writes: int
    bytes_needed_to_target: int
    bytes_on_disk: int
    bytes_written_to_disk: int
    spill_runs: int
    spill_files: int
    spill_time: float
    spill_read_time: float
    spill_error: str | None

class PartitionSize(TypedDict):
    """One entry of ``ShardBuffer.partition_sizes()``: the Rust ``PartitionSize`` fields."""

    memory_bytes: int
    memory_batches: int
    memory_rows: int
    spilled_bytes: int
    spilled_rows: int
    segments: int
    spilling: bool

class MemoryPool:
    """A memory budget that several ``ShardBuffer``s draw from (``memory_pool=``)."""

    def __init__(self, limit: Size | None = None) -> None: ...
    @property
    def limit(self) -> int | None:
        """The pool's limit in bytes, or ``None``."""
    @property
    def reserved(self) -> int:
        """Bytes reserved in the pool now, by all its buffers."""
    @property
    def peak(self) -> int:
        """The most bytes ever reserved in the pool at once."""

class PartitionBatches:
    """The batches of one partition, one at a time (``read_batches`` wraps it in a
    ``pyarrow.RecordBatchReader``)."""

    def __iter__(self) -> Iterator[pyarrow.RecordBatch]: ...
    def __next__(self) -> pyarrow.RecordBatch: ...

class ShardBuffer:
    """A memory-budgeted shuffle buffer of Arrow record batches; see ``help(ShardBuffer)``."""

    def __init__(
        self,
        schema: pyarrow.Schema | ArrowSchemaExportable,
        num_partitions: int,
        *,
        memory_limit: Size | None = None,
        memory_pool: MemoryPool | None = None,
        spill: bool = True,
        spill_dir: str | os.PathLike[str] | None = None,
        spill_to: str | None = None,
        spill_quota: Size | None = None,
        compression: Literal["none", "lz4", "zstd"] | str = "none",
        write_timeout: float | datetime.timedelta | None = None,
        read_stall_timeout: float | datetime.timedelta | None = 60.0,
        read_batch_rows: int | None = 8192,
        spill_threshold: float | None = 0.8,
        spill_target: float | None = 0.6,
        max_spill_round_bytes: Size | None = "64MiB",
        spill_segment_bytes: Size | None = "4MiB",
        spill_file_bytes: Size | None = "1GiB",
        compact_target_rows: int | None = 8192,
        compact_target_bytes: Size | None = "4MiB",
        sweep_on_build: bool = True,
    ) -> None: ...
    @property
    def schema(self) -> pyarrow.Schema:
        """The schema every batch is written and read with."""
    @property
    def num_partitions(self) -> int:
        """The number of partitions."""
    @property
    def spill_dir(self) -> Path | None:
        """The private spill directory, or ``None`` when nothing can spill."""
    @property
    def closed(self) -> bool:
        """Whether ``close()`` was called."""
    def write(self, partition: int, data: ArrowData) -> None:
        """Writes ``data`` to ``partition``, waiting (without the GIL) while memory is full."""
    def write_partitioned(self, data: ArrowData, partition_ids: PartitionIds) -> None:
        """Writes every row of ``data`` to the partition ``partition_ids`` names for it."""
    def seal(self, partition: int) -> None:
        """Accepts no more writes to ``partition``; it may then be read."""
    def finish(self) -> None:
        """Accepts no more writes at all; every partition may then be read."""
    def read(self, partition: int) -> pyarrow.Table:
        """The whole of ``partition``, exactly once."""
    def read_batches(self, partition: int) -> pyarrow.RecordBatchReader:
        """``partition`` as a streaming reader, exactly once."""
    def subscribe(self, partition: int, *, min_rows: int = 0) -> pyarrow.RecordBatchReader:
        """``partition``'s batches while producers still write it, exactly once; with
        ``min_rows``, the open batch too once it holds that many rows."""
    def metrics(self) -> Metrics:
        """A snapshot of the buffer's counters."""
    def partition_sizes(self) -> list[PartitionSize]:
        """Per partition, its bytes, batches and rows in memory and on disk."""
    def wait_for_spills(self) -> None:
        """Waits until every spill round asked for so far is on disk or has failed."""
    def close(self) -> Metrics:
        """Shuts the buffer, removes the spill directory, returns the final metrics."""
    def __enter__(self) -> ShardBuffer: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool: ...

def _bench_rust_write(
    shards: list[tuple[int, pyarrow.RecordBatch]], num_partitions: int, *, memory_limit: int | None = None
) -> dict[str, float]: ...
def _bench_rust_write_partitioned(
    batches: list[pyarrow.RecordBatch],
    ids: list[pyarrow.Array],
    num_partitions: int,
    *,
    memory_limit: int | None = None,
) -> dict[str, float]: ...
