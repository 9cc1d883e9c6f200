"""``ArrowShardsShuffleRun``: Dask's ``DataFrameShuffleRun`` with an arrow-shards receive side.

What changes against Dask's own run (everything else, the transfer, the barrier, restarts, is
Dask's, inherited):
- ``_receive``: the received shards (Arrow IPC streams from the senders, one per input
  partition) become one ``pyarrow.Table`` (Dask's ``buffers_to_table``, which adds the input
  partition id column), and go into the ``ReceiveBuffer`` with the scatter write, in the
  worker's P2P thread pool (off the event loop; the write releases the GIL and may wait for
  memory, which holds back the sender as Dask's disk limiter does). A buffer for a schema not
  seen before is built between the decode and the write, on the event loop (see
  ``_receive``).
- ``flush_receive``: no flush; it only finishes the buffer (no more writes).
- ``_get_output_partition``: reads that one partition, memory and disk merged, exactly once,
  in the order Dask's P2P gives (stable by input partition id), converted as Dask's
  ``convert_shards`` converts it. A second read of a partition while the first read's frame is
  still alive gets a shallow copy of that frame (a self-merge, ``df.merge(df, ...)``, has one
  shuffle for both sides, and its ``merge_unpack`` reads each partition twice in a row; Dask's
  disk buffer reads its files again). Only a weak reference is kept, so nothing is held past
  the caller's own use; once the frame is gone, a further read raises ``AlreadyReadError``.
- ``close``: closes the buffer too (its spill directories are removed).

And the per-byte steps around the buffer are Rust calls with the GIL released:
- ``_shard_partition`` (the send side): Dask's frame split by worker and written as one IPC
  stream per worker in one call (``_split.Splitter``; a frame it does not apply to, such as a
  non-integer partition column, takes Dask's own split).
- the local shortcut (``_write_to_comm``): the split hands this worker's own rows back as a
  ``pyarrow.Table``, which goes straight into the run's own ``_receive`` (the same
  deduplication by input partition and the same failure handling as a peer's shard), never
  serialised and never through the comms; the peers' shards go to Dask's comm buffer first,
  so their transfer overlaps the local write.
- ``send``: a peer's shards are ``_frame.Frame``s (the split's IPC streams, not copied), which
  Dask's serialisation sends out of band, each as a comm frame of its own (Dask pickles
  ``bytes`` shards in band: a copy on each side); small shards are pickled into one message
  as Dask does.
- ``_receive``: a message's shards are decoded in place by one Rust call with the GIL released
  (``_receive.received_tables``) and scatter-written.
- the read of an output partition: its rows in Dask's order (stable by input partition id) as
  one contiguous table from Rust, then ``convert_shards``' own conversion to pandas
  (``_read``; decimal columns whose values repeat make one ``Decimal`` per distinct value,
  ``_decimals``); with ``output_dtypes="meta"``, columns whose meta dtype is an Arrow dtype keep
  it instead of becoming Python objects.
- ``get_output_partition``: for a partition assigned to this worker, no trip through the
  event loop (Dask's makes two per partition: ``_ensure_output_worker``, which has nothing to
  do for a local partition, and ``flush_receive``, which here only finishes the Rust buffer,
  a thread-safe call).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import weakref
from time import thread_time
from typing import Any, Callable

import pyarrow as pa
from distributed.metrics import context_meter
from distributed.shuffle._exceptions import P2POutOfDiskError
from distributed.shuffle._limiter import ResourceLimiter
from distributed.shuffle._shuffle import DataFrameShuffleRun
from distributed.sizeof import sizeof
from distributed.utils_comm import retry

from .._errors import AlreadyReadError, DiskFullError
from ._frame import nbytes, payload
from ._read import ordered_table, to_pandas
from ._receive import ReceiveBuffer, received_tables
from ._split import Splitter

logger = logging.getLogger("arrow_shards.dask")


class ArrowShardsShuffleRun(DataFrameShuffleRun):
    def __init__(
        self,
        *,
        make_buffer: Callable[[int], ReceiveBuffer],
        output_dtypes: str = "dask",
        **kwargs: Any,
    ) -> None:
        # Dask's receive buffer stays unused: ask for its in-memory one, which holds nothing
        # (two idle tasks, closed with the run), not the disk one, which makes a directory.
        kwargs.update(disk=False, memory_limiter_disk=ResourceLimiter(None))
        super().__init__(**kwargs)
        self._shards = make_buffer(max(self.worker_for.index, default=-1) + 1)
        # partition id -> its first read; the lock guards the dict only (never held across a
        # read or a wait)
        self._reads: dict[int, _Read] = {}
        self._reads_lock = threading.Lock()
        self._splitter = Splitter(self.worker_for, self.column)
        self._output_dtypes = output_dtypes

    def _shard_partition(
        self, data: Any, partition_id: int, **kwargs: Any
    ) -> dict[str, tuple[int, Any]]:
        if not Splitter.applies_to(data, self.worker_for, self.column):
            return super()._shard_partition(data, partition_id, **kwargs)
        out = {
            worker: (partition_id, shard)
            for worker, shard in self._splitter.split(data, local=self.local_address).items()
        }
        # Dask's own metrics of the split (DataFrameShuffleRun._shard_partition)
        context_meter.digest_metric("p2p-shards", sum(sizeof(b) for _, b in out.values()), "bytes")
        context_meter.digest_metric("p2p-shards", len(out), "count")
        return out

    async def _write_to_comm(self, data: dict[str, tuple[int, Any]]) -> None:
        local = data.pop(self.local_address, None)
        if data:
            await super()._write_to_comm(data)
        if local is not None:
            # awaited: the task finishes once its rows are in the buffer, and a failure fails
            # the run (and this task) as a received shard's write does; overlapping it with
            # the next task would need a second failure path (errors at the barrier)
            await self._receive([local])

    async def send(self, address: str, shards: list[tuple[int, Any]]) -> Any:
        # Dask's send, with the message's payload made by _frame.payload: Frames out of band
        # (Dask's own would ask memoryview() of each shard, which a Frame does not have)
        shards_or_bytes = payload(shards)

        def _send() -> Any:
            # a closure, not a functools.partial: retry() logs the callable's repr on each
            # failed attempt, and a partial's repr holds the whole payload (distributed's
            # test_flaky_connect_recover_with_retry checks those lines stay short)
            return self._send(address, shards_or_bytes)

        return await retry(
            _send,
            count=self.RETRY_COUNT,
            delay_min=self.RETRY_DELAY_MIN,
            delay_max=self.RETRY_DELAY_MAX,
        )

    async def _receive(self, data: list[tuple[int, Any]]) -> None:
        self.raise_if_closed()
        fresh = []
        for input_partition, shard in data:
            if input_partition in self.received:
                continue  # a resent shard (the sender retried): taken once
            self.received.add(input_partition)
            self.total_recvd += nbytes(shard)
            fresh.append((input_partition, shard))
        del data
        if not fresh:
            return
        try:
            received = await self.offload(received_tables, fresh, self.column, self.drop_column)
            del fresh
            # A new schema's buffer is built here, on the event loop: its build makes a spill
            # directory in the worker's local directory, and Dask makes and removes
            # directories there on the loop only (its disk buffer's in the run's constructor,
            # the worker's own). distributed's test_bad_disk removes the local directory with
            # shutil.rmtree on the loop mid-shuffle; a spill directory made from a P2P thread
            # during that rmtree made it fail with ENOTEMPTY (once in a few runs).
            self._shards.prepare([table.schema for table, _ in received])
            await self.offload(self._write_received, received)
        except Exception as e:
            self._exception = e  # fails the run, as in Dask's own _receive
            raise

    def _write_received(self, received: list[tuple[pa.Table, Any]]) -> None:
        try:
            while received:
                table, ids = received.pop(0)
                self._shards.write(table, ids)
                del table, ids
        except DiskFullError as e:
            raise P2POutOfDiskError(f"{self}: the spill directory is full: {e}") from e

    async def flush_receive(self) -> None:
        self.raise_if_closed()
        self._shards.finish()

    def get_output_partition(self, partition_id: int, key: Any, **kwargs: Any) -> Any:
        if not self._reads_here(partition_id):
            return super().get_output_partition(partition_id, key, **kwargs)
        # Dask's get_output_partition (distributed 2026.8, shuffle/_core.py) without its two
        # sync() calls into the event loop: _ensure_output_worker has nothing to do for a
        # partition assigned here, and flush_receive only finishes the buffer (thread-safe)
        self.raise_if_closed()
        if not self.transferred:
            raise RuntimeError("`get_output_partition` called before barrier task")
        self._shards.finish()
        with (
            self._capture_metrics("foreground"),
            context_meter.meter("p2p-get-output-noncpu"),
            context_meter.meter("p2p-get-output-cpu", func=thread_time),
        ):
            return self._get_output_partition(partition_id, key, **kwargs)

    def _reads_here(self, partition_id: int) -> bool:
        """True if the partition is this worker's and the two steps skipped are ours (a
        subclass that overrides them, as distributed's tests do to block a run, keeps them)."""
        cls = type(self)
        return (
            self._get_assigned_worker(partition_id) == self.local_address
            and cls.flush_receive is ArrowShardsShuffleRun.flush_receive
            and cls._ensure_output_worker is DataFrameShuffleRun._ensure_output_worker
        )

    def _get_output_partition(self, partition_id: int, key: Any, **kwargs: Any) -> Any:
        with self._reads_lock:
            first = self._reads.get(partition_id)
            if first is None:
                read = self._reads[partition_id] = _Read()
        if first is not None:
            return first.again(f"{self}: output partition {partition_id}")
        try:
            frame = self._read_partition(partition_id)
        except BaseException as e:
            read.failed(e)
            raise
        read.done(frame)
        return frame

    @functools.cached_property
    def _output_meta(self) -> Any:
        """``meta`` as an output partition has it (the shuffle column dropped if asked), made
        once: dropping it per partition was ~2% of a worker's time at 1,024 partitions."""
        return self.meta.drop(columns=self.column) if self.drop_column else self.meta

    def _read_partition(self, partition_id: int) -> Any:
        tables = self._shards.read(partition_id)
        if not tables:
            return self._output_meta.copy()
        return to_pandas(
            ordered_table(tables),
            self._output_meta,
            self.column,
            drop_column=False,  # _output_meta has it dropped already
            arrow_dtypes=self._output_dtypes == "meta",
        )

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


class _Read:
    """One partition's first read: a second reader waits for it, then gets a shallow copy of
    its frame if the frame is still alive (a weak reference: nothing is kept for it)."""

    def __init__(self) -> None:
        self._over = threading.Event()
        self._frame: weakref.ref[Any] | None = None
        self._error: BaseException | None = None

    def done(self, frame: Any) -> None:
        self._frame = weakref.ref(frame)
        self._over.set()

    def failed(self, error: BaseException) -> None:
        self._error = error
        self._over.set()

    def again(self, what: str) -> Any:
        self._over.wait()
        if self._error is not None:
            raise AlreadyReadError(
                f"{what} was read before, and that read failed: {self._error!r}"
            ) from self._error
        frame = self._frame() if self._frame is not None else None
        if frame is None:
            raise AlreadyReadError(
                f"{what} was read before and its frame is gone: each partition's data is "
                "handed out once (a repeat read gets it only while the first read's frame "
                "is alive)"
            )
        return frame.copy(deep=False)
