"""A worker's totals since start: the closed runs' final metrics, summed.

Locking: ``Totals._lock`` is a leaf lock, held only to add or copy numbers (never across a
buffer call, I/O or a call into Dask).
"""

from __future__ import annotations

import threading
from typing import Any

#: Rust ``Metrics`` fields that are gauges of one buffer now (summed over live buffers only).
GAUGES = frozenset({"reserved", "bytes_on_disk"})
#: The Rust ``Metrics`` counters, summed over runs (0 before any run).
COUNTERS = (
    "batches_written", "rows_written", "bytes_written", "batches_read", "rows_read",
    "partitions_read", "write_wait", "lock_wait", "bytes_spilled", "bytes_needed_to_target",
    "bytes_written_to_disk", "spill_runs", "spill_files", "spill_time", "spill_read_time",
    "overflow_runs", "overflow_bytes_written", "overflow_spill_time",
)
#: Fields about the pool, not one buffer: taken from the worker's pool.
POOL_FIELDS = frozenset({"peak_reserved", "pool_reserved", "memory_limit"})


class Totals:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sums: dict[str, float] = {}
        self._runs = 0
        self._last_error: str | None = None

    def run_started(self) -> None:
        with self._lock:
            self._runs += 1

    def add_closed(self, metrics: dict[str, Any]) -> None:
        """Adds a buffer's final metrics (from ``ShardBuffer.close``)."""
        with self._lock:
            _add(self._sums, metrics, with_gauges=False)
            if metrics.get("spill_error"):
                self._last_error = str(metrics["spill_error"])

    def snapshot(self, live: list[dict[str, Any]], pool: Any) -> dict[str, Any]:
        """The totals plus the ``live`` buffers' metrics now, with the pool's figures."""
        with self._lock:
            out: dict[str, Any] = {name: 0 for name in COUNTERS}
            out.update(self._sums)
            runs, error = self._runs, self._last_error
        for gauge in GAUGES:
            out[gauge] = 0
        for metrics in live:
            _add(out, metrics, with_gauges=True)
            error = str(metrics["spill_error"]) if metrics.get("spill_error") else error
        out["runs"] = runs
        out["peak_reserved"] = pool.peak
        out["pool_reserved"] = pool.reserved
        out["memory_limit"] = pool.limit
        out["spill_error"] = error
        return out


def _add(into: dict[str, Any], metrics: dict[str, Any], *, with_gauges: bool) -> None:
    for name, value in metrics.items():
        if name in POOL_FIELDS or (name in GAUGES and not with_gauges):
            continue
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            into[name] = into.get(name, 0) + value
