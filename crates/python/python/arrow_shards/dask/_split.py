"""The send side's split of an input partition by worker: Dask's frame, split in Rust.

Dask's ``split_by_worker`` (distributed 2026.8, ``shuffle/_shuffle.py``) merges the frame with
each output partition's worker code (``worker_for.cat.codes`` as ``_worker``: a full copy),
converts it with ``to_pyarrow_table_dispatch(preserve_index=True)``, sorts by ``_worker`` and
slices; ``_shard_partition`` writes each slice as an IPC stream into ``bytes``. Here the codes
are looked up with numpy and added with ``assign`` (no copy of the frame's columns under
pandas' copy-on-write), the same conversion makes the same Arrow table (the index as columns,
the pandas metadata naming ``_worker`` as Dask's does), and one Rust call with the GIL
released (``_native._dask_split``) sorts it stably by worker and output partition and writes
one IPC stream per worker, handed back without a copy (a ``pyarrow.Buffer`` over Rust's bytes,
wrapped as a ``_frame.Frame`` so it travels out of band). Rows whose output partition has no
worker (outputs not wanted) are dropped, as Dask's inner merge drops them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._native import _dask_split
from ._frame import Frame

WORKER_COLUMN = "_worker"


class Splitter:
    """Splits input partitions for one run: ``worker_for`` is the run's categorical series
    (output partition -> worker address)."""

    def __init__(self, worker_for: Any, column: str) -> None:
        codes = worker_for.cat.codes
        self.column = column
        self.workers: list[str] = list(worker_for.cat.categories)
        size = int(worker_for.index.max()) + 1 if len(worker_for) else 0
        self._lookup = np.full(size, -1, dtype=codes.dtype)
        self._lookup[np.asarray(worker_for.index, dtype=np.int64)] = codes.to_numpy()

    @staticmethod
    def applies_to(df: Any, worker_for: Any, column: str) -> bool:
        """True for a pandas frame whose partition column and ``worker_for``'s index are
        integers; anything else (cudf, other dtypes) takes Dask's own split."""
        import pandas as pd

        return (
            type(df) is pd.DataFrame
            and column in df.columns
            and WORKER_COLUMN not in df.columns
            and pd.api.types.is_integer_dtype(df[column].dtype)
            and not isinstance(df[column].dtype, pd.api.extensions.ExtensionDtype)
            and pd.api.types.is_integer_dtype(worker_for.index.dtype)
        )

    def codes(self, partitions: np.ndarray) -> np.ndarray:
        """Each row's worker code, -1 for a row whose output partition has no worker."""
        lookup = self._lookup
        inside = (partitions >= 0) & (partitions < len(lookup))
        if inside.all():
            return lookup[partitions]
        out = np.full(len(partitions), -1, dtype=lookup.dtype)
        out[inside] = lookup[partitions[inside]]
        return out

    def split(self, df: Any, local: str | None = None) -> dict[str, Any]:
        """Worker address -> the IPC stream of its rows as a ``Frame`` (the bytes Dask's
        ``split_by_worker`` and ``serialize_table`` make, rows also sorted by output
        partition), or for the worker ``local`` the ``pyarrow.Table`` of its rows; workers
        without rows are left out."""
        from dask.dataframe.dispatch import to_pyarrow_table_dispatch

        codes = self.codes(df[self.column].to_numpy())
        wanted = codes >= 0
        if not wanted.all():
            df, codes = df[wanted], codes[wanted]
        if not len(df):
            return {}
        table = to_pyarrow_table_dispatch(df.assign(**{WORKER_COLUMN: codes}), preserve_index=True)
        del df
        local_code = self.workers.index(local) if local in self.workers else None
        shards = _dask_split(table, WORKER_COLUMN, self.column, len(self.workers), local_code)
        return {
            self.workers[code]: shard if code == local_code else Frame(shard)
            for code, shard in enumerate(shards)
            if shard is not None
        }
