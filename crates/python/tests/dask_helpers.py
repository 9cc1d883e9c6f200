"""Helpers of the ``arrow_shards.dask`` tests: the dataframe of the listed dtypes, result
comparison, and waits for conditions (bounded, no timing assertions)."""

from __future__ import annotations

import decimal
import os
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

DEADLINE_S = 60.0


def frame(rows: int = 2_000, seed: int = 0) -> pd.DataFrame:
    """Ints, object and pyarrow strings, nullable ints, categoricals, tz-aware datetimes."""
    rng = np.random.default_rng(seed)
    keys = rng.integers(0, 97, rows)
    nullable = pd.array(rng.integers(0, 1000, rows), dtype="Int64")
    nullable[::7] = pd.NA
    return pd.DataFrame(
        {
            "id": np.arange(rows, dtype="int64"),
            "k": keys,
            "s_object": pd.Series([f"s{i % 113}" for i in range(rows)], dtype=object),
            "s_arrow": pd.Series([f"t{i % 59}" for i in range(rows)], dtype="string[pyarrow]"),
            "n": nullable,
            "c": pd.Categorical([("a", "b", "c", "d")[i % 4] for i in range(rows)]),
            "t": pd.date_range("2026-01-01", periods=rows, freq="min", tz="Europe/Paris"),
        }
    )


def rich_frame(rows: int = 2_000, seed: int = 0) -> pd.DataFrame:
    """``frame``'s columns with categoricals that have unused categories, and Arrow decimals
    (mostly distinct, and 50 values with nulls, as lineitem's price and quantity) and dates
    (lineitem's types)."""
    import pyarrow as pa

    df = frame(rows, seed)
    rng = np.random.default_rng(seed + 1)
    df["c"] = pd.Categorical(
        rng.choice(["a", "b", "c", "d"], rows), categories=["a", "b", "c", "d", "e", "never"]
    )
    cents = rng.integers(0, 10**6, rows)
    df["dec"] = pd.array(
        pa.array([decimal.Decimal(int(v)).scaleb(-2) for v in cents], pa.decimal128(12, 2)),
        dtype=pd.ArrowDtype(pa.decimal128(12, 2)),
    )
    quantities = [
        None if i % 17 == 0 else decimal.Decimal(int(v)).scaleb(-2)
        for i, v in enumerate(rng.integers(100, 5100, rows) // 100 * 100)
    ]
    df["qty"] = pd.array(
        pa.array(quantities, pa.decimal128(15, 2)), dtype=pd.ArrowDtype(pa.decimal128(15, 2))
    )
    days = pa.array(rng.integers(8000, 11000, rows).astype("int32"), pa.int32()).cast(pa.date32())
    df["day"] = pd.array(days, dtype=pd.ArrowDtype(pa.date32()))
    return df


def ddf_with_empty_partitions(df: pd.DataFrame, npartitions: int = 4) -> Any:
    """``df`` in ``npartitions`` partitions plus two empty ones (first and last)."""
    import dask.dataframe as dd

    empty = dd.from_pandas(df.iloc[:0], npartitions=1)
    return dd.concat([empty, dd.from_pandas(df, npartitions=npartitions), empty])


def gated(df: pd.DataFrame, gate: str, last: int, partition_info: Any = None) -> pd.DataFrame:
    """Holds the last input partition back until the test creates ``gate``, so the shuffle
    cannot finish before the test lets it (bounded, so a broken test fails, not hangs)."""
    if partition_info is not None and partition_info["number"] == last:
        end = time.monotonic() + 300
        while not os.path.exists(gate) and time.monotonic() < end:
            time.sleep(0.05)
    return df


def sorted_rows(df: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    return df.sort_values(by, kind="stable").reset_index(drop=True)


def wait_for(condition: Callable[[], Any], what: str, deadline_s: float = DEADLINE_S) -> Any:
    end = time.monotonic() + deadline_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {deadline_s} s waiting for {what}")
        time.sleep(0.05)


def spill_dirs_under(root: str | Path) -> list[str]:
    """Every arrow-shards spill directory anywhere under ``root``."""
    found = []
    for here, dirs, _files in os.walk(root):
        found += [os.path.join(here, d) for d in dirs if d.startswith("arrow-shards-spill-")]
    return found


def local_directories(client: Any) -> dict[str, str]:
    return client.run(lambda dask_worker: dask_worker.local_directory)


def no_active_runs(client: Any) -> bool:
    """No P2P run left on any worker (the scheduler closes them after a shuffle)."""
    active = client.run(
        lambda dask_worker: len(dask_worker.plugins["shuffle"].shuffle_runs._runs)
    )
    return not any(active.values())


def output_partitions(client, collection) -> list[pd.DataFrame]:
    """Every output partition of ``collection``, in order (persisted, then gathered; a
    ``map_partitions`` over a ``set_index`` deadlocks an in-process cluster on Python 3.11)."""
    from distributed import futures_of

    persisted = collection.persist()
    futures = sorted(futures_of(persisted), key=lambda f: f.key[1])  # keys (name, i)
    assert [f.key[1] for f in futures] == list(range(persisted.npartitions))
    parts = client.gather(futures)
    del persisted, futures
    return parts
