"""The receive side of one P2P run: received shards go into ``ShardBuffer``s on the worker's pool.

A received message's shards (Arrow IPC streams in the frames the comms read) are decoded in
place by one Rust call with the GIL released (``received_tables``), and written with the
scatter write (``write_partitioned``: a whole table and the output partition of each row), so
they are split by output partition inside the buffer, with the GIL released, and never
re-serialised. Shards whose schemas differ (pandas ``object`` columns infer their Arrow type
per input partition; an all-null column is ``null``) go to one buffer per distinct schema; a
read takes the partition from every buffer and concatenates them with Dask's permissive type
promotion, as Dask does its disk shards. Dictionary columns (pandas categoricals) need nothing here: the buffer keeps each
dictionary as written wherever it concatenates small batches (compaction, spilled segments,
coalescing on read), each value once and unused values kept, so a categorical keeps all its
categories, as Dask's own P2P does.

Locking: ``ReceiveBuffer._lock`` guards the ``_buffers`` dict; it is not held across a
buffer's build (which makes a directory; the run calls ``prepare`` on its event loop for that),
write, read or close. It is held across
``ShardBuffer.metrics()`` (a short Rust call, no I/O) and while a closed buffer's final metrics
go into the worker's totals and the buffer leaves ``_buffers``, so that a buffer is counted
once, live or closed (lock order: ``ReceiveBuffer._lock``, then ``Totals._lock``).
"""

from __future__ import annotations

import os
import threading
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from distributed.shuffle._arrow import _INPUT_PARTITION_ID_COLUMN

from .. import ShardBuffer, SpillError
from .._native import _dask_receive
from ._frame import Frame
from ._totals import Totals


def received_tables(
    shards: list[tuple[int, Any]], column: str, drop_column: bool
) -> list[tuple[pa.Table, Any]]:
    """The received shards as ``(table, partition_ids)`` pairs for the scatter write: each
    table with the input partition id column (as Dask's ``buffers_to_table`` adds it) and
    without ``column`` if ``drop_column``, its rows' output partitions as ``uint32`` ids.

    Peers' shards (Arrow IPC streams: ``pyarrow.Buffer`` frames as received, or ``bytes``)
    are decoded in one Rust call without copying and with the GIL released
    (``_native._dask_receive``), one pair per distinct schema; a ``pyarrow.Table`` (this
    worker's own shard, from the local shortcut) is taken as it is. A ``Frame`` arrives as it
    was sent when the comms do not serialise (in-process workers, ``inproc://``)."""
    frames = [
        (i, shard.buffer if isinstance(shard, Frame) else shard)
        for i, shard in shards
        if not isinstance(shard, pa.Table)
    ]
    out = (
        [tuple(pair) for pair in _dask_receive(frames, column, _INPUT_PARTITION_ID_COLUMN, drop_column)]
        if frames
        else []
    )
    for input_partition, shard in shards:
        if not isinstance(shard, pa.Table) or not shard.num_rows:
            continue
        ids = pc.cast(shard.column(column), pa.uint32())
        if drop_column:
            shard = shard.drop_columns([column])
        inputs = pa.array(np.full(shard.num_rows, input_partition, dtype=np.uint32))
        out.append((shard.append_column(_INPUT_PARTITION_ID_COLUMN, inputs), ids))
    return out


class ReceiveBuffer:
    def __init__(
        self,
        num_partitions: int,
        pool: Any,
        spill_root: str,
        compression: str,
        totals: Totals,
        read_stall_timeout: float | None = None,
        spill_to: str | None = None,
        spill_quota: str | int | None = None,
    ) -> None:
        self._num_partitions = num_partitions
        self._spill_to = spill_to
        self._spill_quota = spill_quota
        self._read_stall_timeout = read_stall_timeout
        self._pool = pool
        self._spill_root = spill_root
        self._compression = compression
        self._totals = totals
        self._lock = threading.Lock()
        self._buffers: dict[pa.Schema, ShardBuffer] = {}
        self._closed = False
        self.bytes_received = 0
        self.bytes_read = 0

    def _buffer_for(self, schema: pa.Schema) -> ShardBuffer:
        key = schema.remove_metadata()
        with self._lock:
            found = self._buffers.get(key)
        if found is not None:
            return found
        made = ShardBuffer(
            schema,
            self._num_partitions,
            memory_pool=self._pool,
            spill_dir=self._spill_root,
            compression=self._compression,
            read_stall_timeout=self._read_stall_timeout,
            spill_to=self._spill_to,
            spill_quota=self._spill_quota,
        )
        with self._lock:
            closed = self._closed
            kept = None if closed else self._buffers.setdefault(key, made)
        if kept is not made:
            made.close()  # closed meanwhile, or another thread made one first
        if kept is None:
            from .. import ClosedError

            raise ClosedError("the shuffle run's buffer is closed")
        return kept

    def prepare(self, schemas: list[pa.Schema]) -> None:
        """Checks that the spill directories of the buffers built so far are still there, then
        builds the buffer of each schema that has none yet (the caller's thread makes the
        spill directories). A run whose spill directory was removed (distributed's
        test_bad_disk removes the worker's local directory mid-shuffle) could not spill any
        more: like Dask's disk buffer at its next write, it fails, with ``SpillError`` (not an
        ``OSError``, which the sender's ``retry`` would send again for minutes)."""
        for buffer in self._snapshot():
            directory = buffer.spill_dir
            if directory is not None and not os.path.isdir(directory):
                raise SpillError(f"the shuffle run's spill directory was removed: {directory}")
        for schema in schemas:
            self._buffer_for(schema)

    def write(self, table: pa.Table, partition_ids: pa.ChunkedArray | pa.Array) -> None:
        """Writes every row of ``table`` to the partition its id names (waits for memory)."""
        if table.num_rows == 0:
            return
        self._buffer_for(table.schema).write_partitioned(table, partition_ids)
        self.bytes_received += table.nbytes

    def finish(self) -> None:
        """No more writes: every partition may be read now (nothing is flushed)."""
        for buffer in self._snapshot():
            buffer.finish()

    def read(self, partition: int) -> list[pa.Table]:
        """The partition's non-empty tables, one per schema; each partition exactly once."""
        tables = [buffer.read(partition) for buffer in self._snapshot()]
        tables = [t for t in tables if t.num_rows]
        self.bytes_read += sum(t.nbytes for t in tables)
        return tables

    def live_metrics(self) -> list[dict[str, Any]]:
        """The metrics of its buffers not closed yet (a closed one's are in the totals)."""
        with self._lock:
            return [buffer.metrics() for buffer in self._buffers.values()]

    def close(self) -> None:
        """Closes every buffer (removing its spill directory) and adds its metrics to the
        worker's totals; raises the first buffer's error, after closing them all."""
        with self._lock:
            self._closed = True
            buffers = list(self._buffers.items())
        first: BaseException | None = None
        for key, buffer in buffers:
            try:
                final = buffer.close()
            except Exception as e:  # the others are closed all the same
                first = first or e
                final = buffer.metrics()
            with self._lock:
                self._totals.add_closed(final)
                del self._buffers[key]
        if first is not None:
            raise first

    def heartbeat(self) -> dict[str, Any]:
        """The figures Dask's own receive buffers report (``ShardsBuffer.heartbeat``), plus the
        arrow-shards ones, so the scheduler and dashboard see them the same way."""
        live = self.live_metrics()
        memory = sum(m["reserved"] for m in live)
        # "written" is what went to disk, as Dask's disk buffer counts it: the core's
        # bytes_spilled counts each scattered slice at its whole batch's size (see docs/dask.md)
        to_disk = sum(m["bytes_written_to_disk"] for m in live)
        return {
            "memory": memory,
            "total": self.bytes_received,
            "buckets": self._num_partitions,
            "written": to_disk,
            "read": self.bytes_read,
            "avg_size": 0.0,
            "avg_duration": 0.0,
            "memory_limit": self._pool.limit or 0,
            "bytes_spilled": sum(m["bytes_spilled"] for m in live),
            "bytes_on_disk": sum(m["bytes_on_disk"] for m in live),
        }

    def _snapshot(self) -> list[ShardBuffer]:
        with self._lock:
            return list(self._buffers.values())

