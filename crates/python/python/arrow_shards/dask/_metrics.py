"""``metrics()``: a worker's arrow-shards totals since it started."""

from __future__ import annotations

from typing import Any

from ._worker import state_of


def metrics(dask_worker: Any = None) -> dict[str, Any]:
    """This worker's totals since start: ``runs`` (arrow-shards runs made), the Rust ``Metrics``
    counters summed over its runs (``rows_written``, ``rows_read``, ``bytes_spilled``, ...),
    the gauges of its live runs (``reserved``, ``bytes_on_disk``), and its pool's
    ``peak_reserved``, ``pool_reserved`` and ``memory_limit``.

    Run it on the workers: ``client.run(arrow_shards.dask.metrics)`` (which passes
    ``dask_worker``); inside a task it finds the worker itself. Raises ``RuntimeError`` on a
    worker where the plugin is not active.
    """
    if dask_worker is None:
        from distributed import get_worker

        dask_worker = get_worker()
    state = state_of(dask_worker)
    if state is None:
        raise RuntimeError(
            f"arrow_shards.dask is not active on worker {dask_worker.address}"
        )
    return state.metrics()
