"""Per-worker state (one pool, the totals, the live runs) and the hook that makes P2P DataFrame
runs use it.

The hook wraps ``DataFrameShuffleSpec.create_run_on_worker``, the one place a worker builds a
run from the spec the scheduler sends: for a worker with the plugin active and a disk-backed
shuffle (``disk=True``, what DataFrame shuffles, merges and ``set_index`` in dask 2026.8 always
ask for) it builds an ``ArrowShardsShuffleRun``; otherwise Dask's own run. It is installed with
the first active worker of the process and removed with the last, so unregistering the plugin
restores Dask's own buffers for new runs (a run already going keeps its buffer to its end).

Locking: ``_lock`` (a leaf lock) guards ``_states`` and the installed hook; it is not held
while a run is built or a buffer is called. ``WorkerState._lock`` guards its set of live
buffers, also a leaf.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from .. import MemoryPool
from ._receive import ReceiveBuffer
from ._settings import Settings
from ._totals import Totals

_lock = threading.Lock()
_states: dict[int, WorkerState] = {}  # id(worker) -> its state
_original: Any = None  # Dask's create_run_on_worker while the hook is installed


class WorkerState:
    def __init__(self, worker: Any, settings: Settings) -> None:
        self.settings = settings
        self.pool = MemoryPool(settings.budget(worker.memory_manager.memory_limit))
        self.spill_root = settings.spill_dir or worker.local_directory
        self.totals = Totals()
        self._lock = threading.Lock()
        self._live: weakref.WeakSet[ReceiveBuffer] = weakref.WeakSet()

    def make_buffer(self, num_partitions: int) -> ReceiveBuffer:
        buffer = ReceiveBuffer(
            num_partitions,
            self.pool,
            self.spill_root,
            self.settings.compression,
            self.totals,
            read_stall_timeout=self.settings.read_stall_seconds(),
            spill_to=self.settings.spill_to,
            spill_quota=self.settings.spill_quota,
        )
        self.totals.run_started()
        with self._lock:
            self._live.add(buffer)
        return buffer

    def metrics(self) -> dict[str, Any]:
        with self._lock:
            live = list(self._live)
        return self.totals.snapshot([m for b in live for m in b.live_metrics()], self.pool)


def activate(worker: Any, settings: Settings) -> WorkerState:
    """Makes ``worker``'s new DataFrame P2P runs use arrow-shards, with a pool of its own."""
    global _original
    from distributed.shuffle._shuffle import DataFrameShuffleSpec

    state = WorkerState(worker, settings)
    with _lock:
        _states[id(worker)] = state
        if _original is None:
            _original = DataFrameShuffleSpec.create_run_on_worker
            DataFrameShuffleSpec.create_run_on_worker = _create_run_on_worker
    return state


def deactivate(worker: Any) -> None:
    """New runs on ``worker`` use Dask's own buffers again."""
    global _original
    from distributed.shuffle._shuffle import DataFrameShuffleSpec

    with _lock:
        _states.pop(id(worker), None)
        if not _states and _original is not None:
            DataFrameShuffleSpec.create_run_on_worker = _original
            _original = None


def state_of(worker: Any) -> WorkerState | None:
    with _lock:
        return _states.get(id(worker))


_composed: dict[type, type] = {}  # a replaced DataFrameShuffleRun -> it, over our run


def _run_class() -> type:
    """``ArrowShardsShuffleRun``; or, if ``distributed.shuffle._shuffle.DataFrameShuffleRun``
    (the class Dask's ``create_run_on_worker`` builds) has been replaced by a subclass of it,
    that subclass on top of ours, so that its overrides keep applying (distributed's own tests
    patch it so to block or fail a run at chosen points)."""
    from distributed.shuffle import _shuffle

    from ._run import ArrowShardsShuffleRun, DataFrameShuffleRun

    current = _shuffle.DataFrameShuffleRun
    if current is DataFrameShuffleRun or not (
        isinstance(current, type) and issubclass(current, DataFrameShuffleRun)
    ):
        return ArrowShardsShuffleRun
    with _lock:
        found = _composed.get(current)
        if found is None:
            found = type(current.__name__, (current, ArrowShardsShuffleRun), {})
            _composed[current] = found
    return found


def _create_run_on_worker(
    spec: Any, run_id: int, span_id: str | None, worker_for: dict[int, str], plugin: Any
) -> Any:
    with _lock:
        state = _states.get(id(plugin.worker))
        original = _original
    if state is None or not spec.disk:
        return original(
            spec, run_id=run_id, span_id=span_id, worker_for=worker_for, plugin=plugin
        )
    worker = plugin.worker
    return _run_class()(
        make_buffer=state.make_buffer,
        output_dtypes=state.settings.output_dtypes,
        worker_for=worker_for,
        column=spec.column,
        meta=spec.meta,
        id=spec.id,
        run_id=run_id,
        span_id=span_id,
        local_address=worker.address,
        directory=worker.local_directory,  # unused: nothing of Dask's goes to disk
        executor=plugin._executor,
        rpc=worker.rpc,
        digest_metric=worker.digest_metric,
        scheduler=worker.scheduler,
        memory_limiter_disk=plugin.memory_limiter_disk,
        memory_limiter_comms=plugin.memory_limiter_comms,
        disk=True,
        drop_column=spec.drop_column,
        loop=worker.loop,
    )
