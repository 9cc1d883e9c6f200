"""Decimal columns converted once per distinct value on the plugin's output path
(``arrow_shards.dask._decimals``, issue #46 item 1): the frame equals Dask's own conversion
(``convert_shards``) on random tables, the sharing of objects happens where it should, and the
estimate of whether it pays; no cluster."""

from __future__ import annotations

import decimal
from decimal import Decimal

import pytest

dask = pytest.importorskip("dask")
distributed = pytest.importorskip("distributed")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402
from distributed.shuffle._arrow import convert_shards  # noqa: E402

from arrow_shards.dask import _decimals  # noqa: E402
from arrow_shards.dask._read import ordered_table, to_pandas  # noqa: E402

ID = "__input_partition_id__"

#: The kinds of decimal column the random tables draw from.
KINDS = ["few", "all distinct", "all equal", "all null", "mostly null", "skewed"]


def decimal_type(rng: np.random.Generator) -> pa.DataType:
    """A decimal type: ordinary, a negative scale, precision 38 (the widest decimal128), or a
    decimal256."""
    return [
        pa.decimal128(15, 2),
        pa.decimal128(7, -3),
        pa.decimal128(38, 10),
        pa.decimal128(38, 0),
        pa.decimal128(38, 38),
        pa.decimal256(50, 4),
    ][int(rng.integers(0, 6))]


def unscaled(rng: np.random.Generator, kind: pa.DataType, count: int) -> list[int]:
    """``count`` unscaled values that fit ``kind``'s precision, the extremes included."""
    top = 10 ** kind.precision - 1
    picked = [int(v) for v in rng.integers(-(2**62), 2**62, count)]
    # values beyond 64 bits too, folded into [-top, top]; and the extremes of the precision
    picked = [v * (10 ** int(rng.integers(0, kind.precision))) for v in picked]
    picked = [v % (2 * top + 1) - top for v in picked]
    if count >= 2:
        picked[0], picked[1] = top, -top
    return picked


def decimal_column(rng: np.random.Generator, kind: pa.DataType, what: str, rows: int) -> pa.Array:
    if what == "all distinct":
        values = sorted(set(unscaled(rng, kind, rows * 2)))
        values = [values[int(i)] for i in rng.permutation(len(values))[:rows]]
        assert len(values) == rows
    elif what == "all equal":
        values = unscaled(rng, kind, 1) * rows
    elif what == "skewed":
        pool = unscaled(rng, kind, 200)
        weights = 1 / np.arange(1, 201) ** 1.5
        values = [pool[int(i)] for i in rng.choice(200, rows, p=weights / weights.sum())]
    else:
        pool = unscaled(rng, kind, int(rng.integers(1, 60)))
        values = [pool[int(i)] for i in rng.integers(0, len(pool), rows)]
    nulls = {"all null": 1.0, "mostly null": 0.9}.get(what, float(rng.choice([0.0, 0.1])))
    mask = rng.random(rows) < nulls
    scale = kind.scale
    objs = [
        None if m else Decimal(v).scaleb(-scale, decimal.Context(prec=80))
        for v, m in zip(values, mask)
    ]
    return pa.array(objs, kind)


def random_case(seed: int) -> tuple[pa.Table, pd.DataFrame, list[str]]:
    """A table as the receive side holds it (the input partition id column last, in runs),
    the meta of its collection, and the decimal columns' names."""
    rng = np.random.default_rng(seed)
    rows = int(rng.choice([0, 1, 7, 500, 3000, 6000]))
    names = [f"d{i}" for i in range(int(rng.integers(1, 5)))]
    columns: dict[str, pa.Array] = {"k": pa.array(rng.integers(0, 10, rows))}
    for name in names:
        columns[name] = decimal_column(
            rng, decimal_type(rng), str(rng.choice(KINDS)), rows
        )
    columns["s"] = pa.array([f"s{v}" for v in rng.integers(0, 30, rows)])
    arrow = pa.table(columns)
    # the frame the collection holds: decimals as Arrow dtypes (what read_parquet gives) or as
    # Decimal objects; with an index of its own or not
    df = arrow.to_pandas(types_mapper=pd.ArrowDtype) if rng.random() < 0.5 else arrow.to_pandas()
    df = df.astype({"k": "int64"})
    index = str(rng.choice(["range", "named", "decimal", "none"]))
    if index == "named":
        df.index = pd.Index(rng.integers(0, 100, rows), name="ix")
    elif index == "decimal":
        df = df.set_index(names[0], drop=False).rename_axis("dix")
    if index == "none":
        table = arrow  # no pandas metadata at all
        meta = arrow.slice(0, 0).to_pandas()
    else:
        table = pa.Table.from_pandas(df, preserve_index=True)
        meta = df.iloc[:0]
        if index != "range" and rng.random() < 0.5:
            # the index column first: the frame's columns are the others, in table order
            names_in_table = table.column_names
            table = table.select([names_in_table[-1], *names_in_table[:-1]])
    ids = np.repeat(rng.permutation(8), rows // 8 + 1)[:rows]
    table = table.append_column(ID, pa.array(ids, pa.uint32()))
    cuts = sorted({0, rows, *rng.integers(0, rows + 1, 3).tolist()})
    table = pa.Table.from_batches(
        [b for a, z in zip(cuts, cuts[1:]) for b in table.slice(a, z - a).to_batches()],
        table.schema,
    )
    return table, meta, names


def exact(series: pd.Series) -> list:
    """Each value exactly: a ``Decimal``'s digits and exponent (``==`` ignores the exponent),
    ``None`` kept apart from NaN."""
    def one(v):
        if v is None:
            return ("None",)
        return (type(v).__name__, v.as_tuple() if isinstance(v, Decimal) else v)

    return [one(v) for v in series.tolist()]


@pytest.mark.parametrize("seed", range(60))
def test_decimal_columns_equal_dasks_own_conversion(seed):
    table, meta, names = random_case(seed)
    drop = bool(seed % 2)
    expected = convert_shards([table], meta, "k", drop)
    got = to_pandas(ordered_table([table]), meta, "k", drop)
    pd.testing.assert_frame_equal(got, expected)
    assert list(got.columns) == list(expected.columns)
    assert list(got.dtypes) == list(expected.dtypes)
    for name in names:
        if name in got.columns:
            assert exact(got[name]) == exact(expected[name]), name
    assert exact(got.index.to_series()) == exact(expected.index.to_series())


def test_repeated_values_share_one_object_and_nulls_stay_none():
    rng = np.random.default_rng(7)
    rows = 5000
    few = pa.array(
        [None if i % 13 == 0 else Decimal(int(v)).scaleb(-2) for i, v in
         enumerate(rng.integers(0, 50, rows))],
        pa.decimal128(15, 2),
    )
    spread = pa.array([Decimal(i).scaleb(-2) for i in range(rows)], pa.decimal128(15, 2))
    df = pd.DataFrame({
        "k": np.zeros(rows, "int64"),
        "few": pd.array(few, dtype=pd.ArrowDtype(few.type)),
        "spread": pd.array(spread, dtype=pd.ArrowDtype(spread.type)),
    })
    table = pa.Table.from_pandas(df, preserve_index=True)
    table = table.append_column(ID, pa.array(np.zeros(rows, np.uint32)))
    got = to_pandas(ordered_table([table]), df.iloc[:0], "k", True)
    expected = convert_shards([table], df.iloc[:0], "k", True)
    pd.testing.assert_frame_equal(got, expected)
    # through the dictionary: one object per distinct value
    assert len({id(v) for v in got["few"] if v is not None}) == pc_distinct(few)
    assert all(v is None for v in got["few"].iloc[::13])
    # the mostly distinct column keeps Dask's direct conversion (one object per row)
    assert not _decimals.pays(spread)
    assert len({id(v) for v in got["spread"]}) == rows


def pc_distinct(array: pa.Array) -> int:
    return pc.count_distinct(array).as_py()


@pytest.mark.parametrize(
    ("rows", "distinct", "nulls", "pays"),
    [
        (1_000_000, 50, 0.0, True),  # l_quantity
        (1_000_000, 11, 0.0, True),  # l_discount
        (100_000, 10_000, 0.0, True),  # a tenth distinct
        (100_000, 40_000, 0.0, True),  # 40% distinct
        (100_000, 100_000, 0.0, False),  # all distinct
        (1_000_000, 1_000_000, 0.0, False),
        (100_000, 90_000, 0.0, False),  # mostly distinct
        (100_000, 100_000, 0.95, False),  # mostly null, the rest distinct
        (100_000, 5, 0.95, True),
        (100_000, 0, 1.0, True),  # all null
        (800, 800, 0.0, True),  # small: always (exact and cheap)
        (0, 0, 0.0, True),
    ],
)
def test_the_estimate_goes_by_the_share_of_distinct_values(rows, distinct, nulls, pays):
    rng = np.random.default_rng(rows + distinct)
    if distinct:
        codes = rng.permutation(rows) % distinct
        values = pa.array(codes.astype("int64") * 7 - 3, pa.int64()).cast(pa.decimal128(20, 0))
    else:
        values = pa.nulls(rows, pa.decimal128(20, 0))
    if nulls and distinct:
        mask = pa.array(rng.random(rows) < nulls)
        values = pc.if_else(mask, pa.scalar(None, values.type), values)
    assert _decimals.pays(values) is pays


def test_a_column_dask_keeps_as_an_arrow_dtype_is_left_alone():
    # output_dtypes="meta": meta's decimal128 ArrowDtype is kept, no objects made
    rows = 3000
    dec = pa.array([Decimal(i % 5) for i in range(rows)], pa.decimal128(10, 0))
    df = pd.DataFrame(
        {"k": np.zeros(rows, "int64"), "d": pd.array(dec, dtype=pd.ArrowDtype(dec.type))}
    )
    table = pa.Table.from_pandas(df, preserve_index=True).append_column(
        ID, pa.array(np.zeros(rows, np.uint32)))
    got = to_pandas(ordered_table([table]), df.iloc[:0], "k", False, arrow_dtypes=True)
    assert got["d"].dtype == pd.ArrowDtype(dec.type)
    assert got["d"].tolist() == df["d"].tolist()


def test_objects_keeps_every_value_exactly():
    kind = pa.decimal128(38, 38)
    top = Decimal("0." + "9" * 38)
    array = pa.array([top, None, top.copy_negate(), top, None, Decimal(0)], kind)
    got = _decimals.objects(array)
    assert got.dtype == object
    assert [None if v is None else v.as_tuple() for v in got] == [
        None if v is None else v.as_tuple() for v in array.to_pandas()
    ]
    assert got[0] is got[3]
    assert len(_decimals.objects(pa.array([], kind))) == 0
    assert _decimals.objects(pa.nulls(3, kind)).tolist() == [None] * 3


def test_a_table_with_a_column_name_twice_keeps_dasks_conversion():
    dec = pa.array([Decimal(i % 3) for i in range(10)], pa.decimal128(5, 0))
    table = pa.Table.from_arrays([dec, dec], names=["d", "d"])
    same, placement = _decimals.placeholders(table, None)
    assert same is table and placement is None
    _, placement = _decimals.placeholders(table.rename_columns(["d", "e"]), None)
    assert placement is not None and [at for at, _, _ in placement.columns] == [0, 1]
