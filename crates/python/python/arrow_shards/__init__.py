"""A memory-first, disk-backed shuffle buffer for Arrow record batches.

Producers write pyarrow, polars or pandas data tagged with an output partition
(``ShardBuffer.write``), or a whole batch with a partition id per row
(``ShardBuffer.write_partitioned``). The buffer keeps the data in memory under a budget, spills
its largest partitions to checksummed files in the background when memory runs short, and hands
each partition back exactly once, in write order, as a ``pyarrow.Table`` (``read``) or a
streaming ``pyarrow.RecordBatchReader`` (``read_batches``). Writes, reads and waits for memory
release the GIL.

>>> import pyarrow as pa, arrow_shards
>>> batch = pa.record_batch({"k": pa.array(range(10), pa.int64())})
>>> with arrow_shards.ShardBuffer(batch.schema, 2, memory_limit="64MiB") as buffer:
...     buffer.write_partitioned(batch, pa.array([k % 2 for k in range(10)], pa.uint32()))
...     buffer.finish()
...     buffer.read(1).column("k").to_pylist()
[1, 3, 5, 7, 9]

Errors are ``ArrowShardsError`` subclasses (``arrow_shards._errors``); a refused write's
exception carries the data back (``err.batch``, ``err.unwritten``). See docs/python.md.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from . import _errors
from ._errors import (
    AlreadyReadError,
    ArrowShardsError,
    ClosedError,
    ConfigError,
    CorruptSpillError,
    DiskFullError,
    FinishedError,
    InternalError,
    MemoryExhaustedError,
    NotCompleteError,
    NotWritableError,
    PartitionIdsError,
    PartitionOutOfRangeError,
    SchemaMismatchError,
    SealedError,
    SpillError,
)
from ._native import (
    DEFAULT_COMPACT_TARGET_BYTES,
    DEFAULT_COMPACT_TARGET_ROWS,
    DEFAULT_MAX_SPILL_ROUND_BYTES,
    DEFAULT_READ_BATCH_ROWS,
    DEFAULT_READ_STALL_TIMEOUT,
    DEFAULT_SPILL_FILE_BYTES,
    DEFAULT_SPILL_SEGMENT_BYTES,
    DEFAULT_SPILL_TARGET,
    DEFAULT_SPILL_THRESHOLD,
    MemoryPool,
    PartitionBatches,
    ShardBuffer,
)

try:
    __version__ = version("arrow-shards")
except PackageNotFoundError:  # pragma: no cover - imported from a source tree
    __version__ = "0+unknown"

__all__ = [
    "ShardBuffer",
    "MemoryPool",
    "PartitionBatches",
    *_errors.__all__,
    "DEFAULT_READ_BATCH_ROWS",
    "DEFAULT_READ_STALL_TIMEOUT",
    "DEFAULT_SPILL_THRESHOLD",
    "DEFAULT_SPILL_TARGET",
    "DEFAULT_MAX_SPILL_ROUND_BYTES",
    "DEFAULT_SPILL_SEGMENT_BYTES",
    "DEFAULT_SPILL_FILE_BYTES",
    "DEFAULT_COMPACT_TARGET_ROWS",
    "DEFAULT_COMPACT_TARGET_BYTES",
]
