"""The conversion of decimal columns to pandas alone: Dask's (one ``Decimal`` per value) against
``arrow_shards.dask``'s (one per distinct value, ``_decimals``), no cluster.

    .venv/bin/python benches/dask_decimals.py [--rows 1000000] [--repeat 3]

Four lineitem-like ``decimal128(15, 2)`` columns of ``--rows`` rows: ``l_quantity`` (50
distinct values), ``l_discount`` (11), ``l_tax`` (9) and ``l_extendedprice`` (mostly
distinct). Per column: Dask's conversion (pyarrow's ``to_numpy``, what ``Table.to_pandas``
does for the column), the estimate (``_decimals.pays``: whether the output path takes the
dictionary) and the conversion through the dictionary (``_decimals.objects``, timed for every
column, also where the estimate keeps Dask's). Then the four columns as one table with
pandas metadata (read_parquet's dtypes) through the output path's conversion
(``_read.to_pandas``), without and with the decimal step. Best of ``--repeat`` each, seconds
of wall time; a micro-timing of one process, not a comparison of shuffles.
"""

from __future__ import annotations

import argparse
import timeit

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from arrow_shards.dask import _decimals, _read

DECIMAL = pa.decimal128(15, 2)


def columns(rows: int) -> dict[str, pa.Array]:
    rng = np.random.default_rng(0)

    def cents(values: np.ndarray) -> pa.Array:
        # the unscaled values as little-endian 128-bit integers
        words = np.zeros(2 * len(values), "<i8")
        words[0::2] = values
        words[1::2] = np.where(values < 0, -1, 0)
        return pa.Array.from_buffers(DECIMAL, len(values), [None, pa.py_buffer(words)])

    return {
        "l_quantity": cents(rng.integers(1, 51, rows) * 100),
        "l_discount": cents(rng.integers(0, 11, rows)),
        "l_tax": cents(rng.integers(0, 9, rows)),
        "l_extendedprice": cents(rng.integers(90_000, 10_500_000, rows)),
    }


def best(call, repeat: int) -> float:
    return min(timeit.repeat(call, number=1, repeat=repeat))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    data = columns(args.rows)
    print(f"{args.rows} rows, best of {args.repeat}, seconds")
    print(f"{'column':<16} {'distinct':>9} {'dask':>7} {'pays':>5} {'estimate':>9} "
          f"{'dictionary':>11}")
    for name, array in data.items():
        distinct = pc.count_distinct(array).as_py()
        dask = best(lambda: array.to_numpy(zero_copy_only=False), args.repeat)
        estimate = best(lambda: _decimals.pays(array), args.repeat)
        pays = _decimals.pays(array)
        through = best(lambda: _decimals.objects(array), args.repeat)
        print(f"{name:<16} {distinct:>9} {dask:>7.3f} {str(pays):>5} {estimate:>9.4f} "
              f"{through:>11.3f}")

    df = pd.DataFrame({n: pd.array(a, dtype=pd.ArrowDtype(DECIMAL)) for n, a in data.items()})
    df["k"] = np.zeros(args.rows, "int64")
    table = pa.Table.from_pandas(df, preserve_index=True)
    meta = df.iloc[:0]

    def convert() -> None:
        # a new Table object over the same arrays each time (the conversion self-destructs it)
        _read.to_pandas(pa.Table.from_arrays(table.columns, schema=table.schema), meta, "k", True)

    with_step = best(convert, args.repeat)
    original = _read.placeholders
    _read.placeholders = lambda table, mapper: (table, None)  # Dask's conversion alone
    try:
        without = best(convert, args.repeat)
    finally:
        _read.placeholders = original
    print(f"the four columns through _read.to_pandas: Dask's conversion {without:.3f} s, "
          f"with the decimal step {with_step:.3f} s")


if __name__ == "__main__":
    main()
