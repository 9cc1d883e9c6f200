"""Round trips: what is written comes back equal, exactly once, in write order.

Every Arrow type the Rust tests cover (and more) from pyarrow, then polars (through the
PyCapsule interface) and pandas (through pyarrow, and its own ``__arrow_c_stream__``), in
batches that are sliced, empty, or small enough to be compacted, read back whole and streamed.
"""

from __future__ import annotations

import datetime as dt
import decimal
import random
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import arrow_shards
from conftest import keys

ROWS = 300


def _maybe_null(rng: random.Random, value: Any) -> Any:
    return None if rng.random() < 0.15 else value


def all_types_table(rows: int = ROWS, seed: int = 7) -> pa.Table:
    """One column per type, with nulls in every nullable column, and ``k`` (the row number)."""
    rng = random.Random(seed)
    r = range(rows)

    def col(make: Any) -> list[Any]:
        return [_maybe_null(rng, make(i)) for i in r]

    utc = dt.timezone.utc
    dictionary_values = ["alpha", "beta", "gamma", "delta"]
    columns: dict[str, pa.Array] = {
        "k": pa.array(r, pa.int64()),
        "i8": pa.array(col(lambda i: i % 100 - 50), pa.int8()),
        "i16": pa.array(col(lambda i: i * 7 - 900), pa.int16()),
        "i32": pa.array(col(lambda i: i * 1_000), pa.int32()),
        "u8": pa.array(col(lambda i: i % 256), pa.uint8()),
        "u32": pa.array(col(lambda i: i * 3), pa.uint32()),
        "u64": pa.array(col(lambda i: 2**63 + i), pa.uint64()),
        "f16": pa.array(np.arange(rows, dtype=np.float16) / np.float16(4), mask=np.arange(rows) % 6 == 0),
        "f32": pa.array(col(lambda i: i / 4), pa.float32()),
        "f64": pa.array(col(lambda i: i * 0.5 - 3.25), pa.float64()),
        "bool": pa.array(col(lambda i: i % 3 == 0), pa.bool_()),
        "utf8": pa.array(col(lambda i: f"row {i} " + "é" * (i % 5)), pa.string()),
        "large_utf8": pa.array(col(lambda i: "x" * (i % 40)), pa.large_string()),
        "utf8_view": pa.array(col(lambda i: f"a string longer than twelve bytes {i}" if i % 2 else f"s{i}"), pa.string_view()),
        "binary": pa.array(col(lambda i: bytes([i % 256]) * (i % 7)), pa.binary()),
        "large_binary": pa.array(col(lambda i: b"\x00\xff" * (i % 3)), pa.large_binary()),
        "binary_view": pa.array(col(lambda i: bytes(range(i % 20))), pa.binary_view()),
        "fixed_binary": pa.array(col(lambda i: i.to_bytes(4, "little")), pa.binary(4)),
        "date32": pa.array(col(lambda i: dt.date(2020, 1, 1) + dt.timedelta(days=i)), pa.date32()),
        "date64": pa.array(col(lambda i: dt.date(1999, 12, 31) + dt.timedelta(days=i)), pa.date64()),
        "time64": pa.array(col(lambda i: dt.time(i % 24, i % 60, 0, i)), pa.time64("us")),
        "ts_paris": pa.array(col(lambda i: dt.datetime(2024, 3, 31, 0, 0, tzinfo=utc) + dt.timedelta(minutes=17 * i)), pa.timestamp("us", tz="Europe/Paris")),
        "ts_utc_ns": pa.array(col(lambda i: dt.datetime(2001, 1, 1, tzinfo=utc) + dt.timedelta(microseconds=i)), pa.timestamp("ns", tz="UTC")),
        "ts_offset": pa.array(col(lambda i: dt.datetime(2010, 6, 1, tzinfo=utc) + dt.timedelta(seconds=i)), pa.timestamp("s", tz="+05:30")),
        "ts_naive": pa.array(col(lambda i: dt.datetime(1970, 1, 1) + dt.timedelta(milliseconds=i)), pa.timestamp("ms")),
        "duration": pa.array(col(lambda i: dt.timedelta(seconds=i)), pa.duration("ms")),
        "decimal128": pa.array(col(lambda i: decimal.Decimal(i * 1_000_003) / 1000), pa.decimal128(20, 3)),
        "decimal128_38": pa.array(col(lambda i: decimal.Decimal(10) ** 30 + i), pa.decimal128(38, 0)),
        "decimal256": pa.array(col(lambda i: decimal.Decimal(-(10**60) - i) / 10**10), pa.decimal256(76, 10)),
        "list_i32": pa.array(col(lambda i: [j for j in range(i % 5)] + [None]), pa.list_(pa.int32())),
        "large_list_str": pa.array(col(lambda i: [f"e{j}" for j in range(i % 3)]), pa.large_list(pa.string())),
        "fixed_list": pa.array(col(lambda i: [i * 1.0, None, -i]), pa.list_(pa.float64(), 3)),
        "struct": pa.array(col(lambda i: {"a": i, "b": _maybe_null(rng, f"b{i}")}), pa.struct([("a", pa.int32()), ("b", pa.string())])),
        "map": pa.array(col(lambda i: [(f"key{j}", j * i) for j in range(i % 4)]), pa.map_(pa.string(), pa.int64())),
        "nested": pa.array(
            col(lambda i: [{"xs": [i, None, i + 1], "tag": _maybe_null(rng, f"t{i}")} for _ in range(i % 3)]),
            pa.list_(pa.struct([("xs", pa.list_(pa.int64())), ("tag", pa.string_view())])),
        ),
        "dict_utf8": pa.array(col(lambda i: dictionary_values[i % 4])).dictionary_encode(),
        "dict_i8": pa.DictionaryArray.from_arrays(
            pa.array(col(lambda i: i % 3), pa.int8()), pa.array(["x", "y", "z"])
        ),
        "null": pa.nulls(rows),
    }
    return pa.table(columns)


def write_in_pieces(buffer: arrow_shards.ShardBuffer, table: pa.Table, partitions: int) -> list[list[int]]:
    """Writes ``table`` as slices of varying length (an empty one among them), partition by
    partition in turn; returns the keys each partition should read back, in order."""
    expected: list[list[int]] = [[] for _ in range(partitions)]
    whole = table.combine_chunks().to_batches()[0]
    lengths = [1, 0, 17, 3, 64, 2, 0, 40]
    offset, i = 0, 0
    while offset < table.num_rows:
        n = min(lengths[i % len(lengths)], table.num_rows - offset)
        p = i % partitions
        piece = whole.slice(offset, n)
        # Alternate the three ways in: a sliced RecordBatch, a Table, a RecordBatchReader.
        data: Any
        if i % 3 == 0:
            data = piece
        elif i % 3 == 1:
            data = pa.Table.from_batches([piece])
        else:
            data = pa.RecordBatchReader.from_batches(piece.schema, [piece])
        buffer.write(p, data)
        expected[p].extend(range(offset, offset + n))
        offset += n
        i += 1
    return expected


def equal_rows(got: pa.Table, table: pa.Table, rows: list[int]) -> None:
    """``got`` has ``table``'s schema and its rows ``rows``, in that order, value for value."""
    assert got.schema.equals(table.schema, check_metadata=True), (got.schema, table.schema)
    assert got.num_rows == len(rows)
    for name in table.column_names:
        column = table.column(name).to_pylist()
        assert got.column(name).to_pylist() == [column[r] for r in rows], name


@pytest.mark.parametrize(
    "settings",
    [
        pytest.param({}, id="defaults"),
        pytest.param({"read_batch_rows": 0, "compact_target_rows": 0}, id="as-written"),
        pytest.param({"read_batch_rows": 7, "compact_target_rows": 5}, id="tiny-targets"),
    ],
)
def test_every_type_round_trips_from_pyarrow(settings: dict[str, Any]) -> None:
    table = all_types_table()
    partitions = 3
    with arrow_shards.ShardBuffer(table.schema, partitions, memory_limit="64MiB", **settings) as buffer:
        expected = write_in_pieces(buffer, table, partitions)
        buffer.finish()
        for p in range(partitions):
            got = buffer.read(p) if p != 1 else buffer.read_batches(p).read_all()
            assert keys(got) == expected[p], "exactly once, in write order"
            equal_rows(got, table, expected[p])
        assert buffer.metrics()["rows_read"] == table.num_rows


def test_scatter_write_of_every_type() -> None:
    table = all_types_table()
    ids = pa.array([(k * 7) % 4 for k in range(table.num_rows)], pa.uint32())
    with arrow_shards.ShardBuffer(table.schema, 4) as buffer:
        buffer.write_partitioned(table, ids)
        buffer.finish()
        for p in range(4):
            want = [k for k in range(table.num_rows) if (k * 7) % 4 == p]
            got = buffer.read(p)
            assert keys(got) == want
            equal_rows(got, table, want)


def test_empty_partitions_and_batches_read_as_empty_tables() -> None:
    table = all_types_table(rows=5)
    with arrow_shards.ShardBuffer(table.schema, 3) as buffer:
        buffer.write(0, table.slice(0, 0))
        buffer.write(0, pa.RecordBatch.from_pylist([], schema=table.schema))
        buffer.write_partitioned(table.slice(0, 0), pa.array([], pa.uint32()))
        buffer.seal(0)
        got = buffer.read(0)
        assert got.num_rows == 0 and got.schema.equals(table.schema)
        buffer.finish()
        assert buffer.read_batches(1).read_all().num_rows == 0
        assert buffer.metrics()["rows_written"] == 0


def test_zero_copy_both_ways() -> None:
    """A batch at the compaction target is kept as written: with read_batch_rows=0 the very
    buffers written come back (no copy into Rust, none out)."""
    rows = arrow_shards.DEFAULT_COMPACT_TARGET_ROWS
    batch = pa.record_batch({"k": pa.array(range(rows), pa.int64())})
    with arrow_shards.ShardBuffer(batch.schema, 1, read_batch_rows=0) as buffer:
        buffer.write(0, batch)
        buffer.finish()
        got = buffer.read(0).column("k").chunk(0)
        assert got.buffers()[1].address == batch.column(0).buffers()[1].address


@pytest.mark.parametrize("via", ["capsule", "pyarrow"])
def test_polars_round_trip(via: str) -> None:
    pl = pytest.importorskip("polars")
    from polars.testing import assert_frame_equal

    n = 200
    df = pl.DataFrame(
        {
            "k": pl.Series(range(n), dtype=pl.Int64),
            "i32": pl.Series([None if i % 9 == 0 else i for i in range(n)], dtype=pl.Int32),
            "u16": pl.Series([i % 65536 for i in range(n)], dtype=pl.UInt16),
            "f64": [i / 3 if i % 5 else None for i in range(n)],
            "s": [f"text {i}" * (i % 4) if i % 7 else None for i in range(n)],
            "b": [bool(i % 2) if i % 11 else None for i in range(n)],
            "bin": pl.Series([bytes([i % 256]) * (i % 5) for i in range(n)], dtype=pl.Binary),
            "cat": pl.Series([["red", "green", "blue"][i % 3] for i in range(n)], dtype=pl.Categorical),
            "enum": pl.Series([["lo", "hi"][i % 2] for i in range(n)], dtype=pl.Enum(["lo", "hi"])),
            "date": pl.Series([dt.date(2023, 1, 1) + dt.timedelta(days=i) for i in range(n)]),
            "ts": pl.Series([dt.datetime(2024, 10, 27, 0, 30) + dt.timedelta(minutes=10 * i) for i in range(n)]).dt.replace_time_zone("Europe/Paris", ambiguous="earliest", non_existent="null"),
            "dur": pl.Series([dt.timedelta(milliseconds=i) for i in range(n)]),
            "dec": pl.Series([decimal.Decimal(i) / 100 for i in range(n)], dtype=pl.Decimal(12, 2)),
            "list": [[j for j in range(i % 4)] if i % 6 else None for i in range(n)],
            "struct": [{"x": i, "y": f"y{i}"} for i in range(n)],
        }
    )
    schema = pa.table(df).schema  # the schema polars exports
    pieces = [df.slice(0, 0), df.slice(0, 10), df.slice(10, 1), df.slice(11, 120), df.slice(131, n - 131)]
    with arrow_shards.ShardBuffer(schema, 2) as buffer:
        for i, piece in enumerate(pieces):
            data = piece if via == "capsule" else piece.to_arrow(compat_level=pl.CompatLevel.newest())
            buffer.write(i % 2, data)
        buffer.finish()
        got = [pl.from_arrow(buffer.read(p)) for p in range(2)]
    want = [pl.concat([pieces[i] for i in range(len(pieces)) if i % 2 == p]) for p in range(2)]
    for g, w in zip(got, want):
        assert_frame_equal(g, w)


def test_polars_scatter_write() -> None:
    pl = pytest.importorskip("polars")
    df = pl.DataFrame({"k": range(1000), "s": [f"s{i}" for i in range(1000)]})
    ids = (df["k"] % 5).cast(pl.UInt32)
    with arrow_shards.ShardBuffer(pa.table(df).schema, 5) as buffer:
        buffer.write_partitioned(df, ids)  # a polars Series of ids, through its capsule
        buffer.finish()
        for p in range(5):
            assert keys(buffer.read(p)) == list(range(p, 1000, 5))


def pandas_frame(n: int = 150):  # noqa: ANN201 - pandas is optional
    pd = pytest.importorskip("pandas")
    return pd.DataFrame(
        {
            "k": pd.Series(range(n), dtype="int64"),
            "nullable": pd.array([None if i % 4 == 0 else i for i in range(n)], dtype="Int32"),
            "f": [float(i) / 8 for i in range(n)],
            "s": pd.array([None if i % 5 == 0 else f"s{i}" for i in range(n)], dtype="string"),
            "cat": pd.Categorical([["a", "b", "c"][i % 3] for i in range(n)]),
            "ts": pd.date_range("2024-03-30 23:00", periods=n, freq="37min", tz="Europe/Paris"),
            "naive": pd.date_range("2000-01-01", periods=n, freq="h"),
            "td": pd.to_timedelta(range(n), unit="s"),
            "flag": [i % 2 == 0 for i in range(n)],
        }
    )


def test_pandas_round_trip_via_pyarrow() -> None:
    pd = pytest.importorskip("pandas")
    df = pandas_frame()
    table = pa.Table.from_pandas(df, preserve_index=False)
    with arrow_shards.ShardBuffer(table.schema, 2) as buffer:
        buffer.write(1, table.slice(0, 70))
        buffer.write(0, table.slice(70, 0))
        buffer.write(1, pa.Table.from_pandas(df.iloc[70:], schema=table.schema, preserve_index=False))
        buffer.finish()
        assert buffer.read(0).num_rows == 0
        got = buffer.read(1).to_pandas()
    pd.testing.assert_frame_equal(got, df)


def test_pandas_frame_through_its_own_capsule() -> None:
    pd = pytest.importorskip("pandas")
    df = pandas_frame()
    if not hasattr(df, "__arrow_c_stream__"):
        pytest.skip("this pandas has no __arrow_c_stream__")
    schema = pa.table(df).schema
    with arrow_shards.ShardBuffer(schema, 1) as buffer:
        buffer.write(0, df)
        buffer.finish()
        got = buffer.read(0).to_pandas()
    pd.testing.assert_frame_equal(got.reset_index(drop=True), df)


def test_numpy_ids_zero_copy_scatter() -> None:
    np = pytest.importorskip("numpy")
    batch = pa.record_batch({"k": pa.array(range(100), pa.int64())})
    ids = (np.arange(100) % 3).astype(np.uint32)
    with arrow_shards.ShardBuffer(batch.schema, 3) as buffer:
        buffer.write_partitioned(batch, ids)
        buffer.write_partitioned(batch.slice(0, 3), [2, 2, 0])  # a list of ints works too
        buffer.finish()
        assert keys(buffer.read(0)) == list(range(0, 100, 3)) + [2]
        assert keys(buffer.read(2)) == list(range(2, 100, 3)) + [0, 1]
