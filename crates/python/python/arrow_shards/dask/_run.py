"""``ArrowShardsShuffleRun``: Dask's ``DataFrameShuffleRun`` with an arrow-shards receive side.

What changes against Dask's own run (everything else, the send side, the barrier, restarts, is
Dask's, inherited):
- ``_receive``: the received shards (Arrow IPC streams from the senders, one per input
  partition) become one ``pyarrow.Table`` (Dask's ``buffers_to_table``, which adds the input
  partition id column), and go into the ``ReceiveBuffer`` with the scatter write, in the
  worker's P2P thread pool (off the event loop; the write releases the GIL and may wait for
  memory, which holds back the sender as Dask's disk limiter does).
- ``flush_receive``: no flush; it only finishes the buffer (no more writes).
- ``_get_output_partition``: reads that one partition, memory and disk merged, exactly once,
  and converts it with Dask's ``convert_shards`` (which sorts by input partition id, the order
  Dask's P2P gives).
- ``close``: closes the buffer too (its spill directories are removed).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable

import pyarrow as pa
import pyarrow.compute as pc
from distributed.shuffle._arrow import buffers_to_table, convert_shards
from distributed.shuffle._exceptions import P2POutOfDiskError
from distributed.shuffle._limiter import ResourceLimiter
from distributed.shuffle._shuffle import DataFrameShuffleRun
from distributed.sizeof import sizeof

from .._errors import DiskFullError
from ._receive import ReceiveBuffer

logger = logging.getLogger("arrow_shards.dask")


class ArrowShardsShuffleRun(DataFrameShuffleRun):
    def __init__(
        self, *, make_buffer: Callable[[int], ReceiveBuffer], **kwargs: Any
    ) -> None:
        # Dask's receive buffer stays unused: ask for its in-memory one, which holds nothing
        # (two idle tasks, closed with the run), not the disk one, which makes a directory.
        kwargs.update(disk=False, memory_limiter_disk=ResourceLimiter(None))
        super().__init__(**kwargs)
        self._shards = make_buffer(max(self.worker_for.index, default=-1) + 1)

    async def _receive(self, data: list[tuple[int, bytes]]) -> None:
        self.raise_if_closed()
        fresh = []
        for input_partition, shard in data:
            if input_partition in self.received:
                continue  # a resent shard (the sender retried): taken once
            self.received.add(input_partition)
            self.total_recvd += sizeof(shard)
            fresh.append((input_partition, shard))
        del data
        if not fresh:
            return
        try:
            await self.offload(self._write_received, fresh)
        except Exception as e:
            self._exception = e  # fails the run, as in Dask's own _receive
            raise

    def _write_received(self, shards: list[tuple[int, bytes]]) -> None:
        table = buffers_to_table(shards)
        del shards
        ids = pc.cast(table.column(self.column), pa.uint32())
        if self.drop_column:
            table = table.drop_columns([self.column])
        try:
            self._shards.write(table, ids)
        except DiskFullError as e:
            raise P2POutOfDiskError(f"{self}: the spill directory is full: {e}") from e

    async def flush_receive(self) -> None:
        self.raise_if_closed()
        self._shards.finish()

    def _get_output_partition(self, partition_id: int, key: Any, **kwargs: Any) -> Any:
        tables = self._shards.read(partition_id)
        if not tables:
            meta = self.meta.copy()
            return meta.drop(columns=self.column) if self.drop_column else meta
        return convert_shards(tables, self.meta, self.column, self.drop_column)

    def heartbeat(self) -> dict[str, Any]:
        beat = super().heartbeat()
        beat["disk"] = self._shards.heartbeat()
        return beat

    async def close(self) -> None:
        already = self.closed
        await super().close()
        if already:
            return
        try:
            await asyncio.get_running_loop().run_in_executor(None, self._shards.close)
        except Exception:
            logger.exception("%s: closing its arrow-shards buffer failed", self)
