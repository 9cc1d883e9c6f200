"""Decimal columns turned into Python ``Decimal`` objects once per distinct value.

Dask's conversion of an output partition (``Table.to_pandas``) turns a ``decimal128`` (or
``decimal256``) column into an ``object`` column with one ``Decimal`` per value (``None`` for
a null), made with the GIL held. Lineitem's quantity, discount and tax columns hold
a few dozen distinct values each. Here such a column is dictionary-encoded in Arrow
(``pyarrow.compute.dictionary_encode``, the GIL released), each dictionary entry becomes one
``Decimal`` the way Dask's conversion makes it (pyarrow's conversion of the dictionary), and
the object column is laid out from the indices by ``numpy.take``: the same values, ``None``
at the nulls, rows holding the same value share one object. The column goes into Dask's
conversion as a placeholder (an Arrow ``null`` column, which converts to ``None``s without
making objects) and the object array takes its place in the frame afterwards, at the same
position, so the frame has Dask's dtypes, index and column order.

A column only goes this way when Dask's conversion would make it ``Decimal`` objects: a
``decimal128``/``decimal256`` data column (not an index column) that the types mapper leaves
alone and whose pandas metadata, if any, says ``object`` (``_candidates``). Whether it pays
is estimated from a sample (``pays``): a column whose values are mostly distinct (lineitem's
extended price) keeps the direct conversion, which skips the encoding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

#: The smallest sample ``pays`` takes (non-null values); larger columns get more.
MIN_SAMPLE_ROWS = 1024
#: A column of ``n`` non-null values is sampled at ``SAMPLE_SCALE * sqrt(n)`` of them (at
#: least ``MIN_SAMPLE_ROWS``), so that a column with ``n / 2`` distinct values repeats about
#: ``SAMPLE_SCALE ** 2 / 2 = 32`` sampled values whatever ``n`` (see ``pays``).
SAMPLE_SCALE = 8


def pays(array: pa.Array) -> bool:
    """Whether ``array`` (one decimal column) is worth converting through its dictionary: its
    distinct values are estimated at half its non-null values or fewer.

    A column of at most ``MIN_SAMPLE_ROWS`` non-null values always is (its encoding is cheap
    and exact). Otherwise rows drawn at random (a fixed seed: the same column always gets the
    same answer) give a sample of ``m`` of its ``n`` non-null values, ``r`` of which repeat a
    value sampled before (``m`` minus the sample's distinct count). If value ``i`` is held by
    ``c_i`` rows, the column has ``sum(c_i * (c_i - 1) / 2)`` pairs of rows with the same
    value and the sample about ``(m / n) ** 2`` of them, which is about ``r`` while repeats are
    few; with ``d`` distinct values held evenly (``c_i = n / d``) that is
    ``m * m * (n / d - 1) / (2 * n)``. So ``r >= m * m / (2 * n)`` says ``d <= n / 2``; an
    all-distinct column repeats nothing. A column whose counts are uneven has more pairs than
    an even one with the same ``d``, and goes through its dictionary sooner: most of its rows
    hold a few frequent values, which the dictionary turns into few objects."""
    rows = len(array)
    valid = rows - array.null_count
    if valid <= MIN_SAMPLE_ROWS:
        return True
    wanted = max(MIN_SAMPLE_ROWS, SAMPLE_SCALE * math.sqrt(valid))
    draws = min(rows, math.ceil(wanted * rows / valid))  # nulls are drawn too
    positions = np.unique(np.random.default_rng(0).integers(0, rows, draws))
    sample = array.take(pa.array(positions))
    sampled = len(sample) - sample.null_count
    if sampled == 0:
        return True  # nothing but nulls drawn: the dictionary is small
    repeats = sampled - pc.count_distinct(sample).as_py()
    return 2 * repeats * valid >= sampled * sampled


def objects(array: pa.Array) -> np.ndarray:
    """``array`` (one decimal column) as the ``object`` array Dask's conversion makes of it:
    a ``Decimal`` per value, ``None`` per null; one ``Decimal`` per distinct value, shared by
    the rows that hold it."""
    encoded = pc.dictionary_encode(array)
    # pyarrow's own conversion of each distinct value (Dask's makes the same objects)
    values = encoded.dictionary.to_numpy(zero_copy_only=False)
    indices = encoded.indices
    if indices.null_count:
        table = np.empty(len(values) + 1, dtype=object)  # the last entry stays None: a null
        table[: len(values)] = values
        indices = pc.fill_null(indices, len(values))
    else:
        table = values.astype(object, copy=False)
    return np.take(table, indices.to_numpy(zero_copy_only=False))


def _candidates(table: pa.Table, mapper: Callable[[pa.DataType], Any] | None) -> list[int]:
    """The positions in ``table`` of the decimal columns Dask's conversion makes ``Decimal``
    objects of (pyarrow's rules in ``pandas_compat``: a column is an extension dtype if the
    types mapper maps its type, or its pandas metadata names an extension dtype; index columns
    go to the index)."""
    found = []
    pandas = table.schema.pandas_metadata
    index_names = _index_names(table)
    numpy_types = {
        described.get("field_name", described.get("name")): described.get("numpy_type")
        for described in (pandas or {}).get("columns", [])
    }
    for position, field in enumerate(table.schema):
        kind = field.type
        if not (pa.types.is_decimal128(kind) or pa.types.is_decimal256(kind)):
            continue
        if field.name in index_names or (mapper is not None and mapper(kind) is not None):
            continue
        if pandas is not None and numpy_types.get(field.name) != "object":
            continue
        found.append(position)
    return found


def _index_names(table: pa.Table) -> set[str]:
    """The columns of ``table`` that its pandas metadata makes the index."""
    pandas = table.schema.pandas_metadata or {}
    return {i for i in pandas.get("index_columns", []) if isinstance(i, str)}


@dataclass
class Placement:
    """The object arrays ``place`` puts into the frame: ``(position among the frame's
    columns, column name, values)`` each, and the number of data columns the frame has."""

    columns: list[tuple[int, str, np.ndarray]]
    data_columns: int


def placeholders(
    table: pa.Table, mapper: Callable[[pa.DataType], Any] | None
) -> tuple[pa.Table, Placement | None]:
    """``table`` with each decimal column that Dask's conversion makes objects of and that
    pays (``pays``) replaced by a placeholder, and the object arrays for ``place``
    (``None``: no column replaced). ``mapper``: the types mapper of the conversion (``None``:
    Dask's default, which maps no decimal type)."""
    positions = _candidates(table, mapper)
    if not positions or len(set(table.column_names)) < table.num_columns:
        # (with a name twice, which column the frame holds where is not certain)
        return table, None
    index_names = _index_names(table)
    # a data column's position in the frame: pyarrow takes the index columns out and keeps
    # the others in table order
    data_positions = [p for p, name in enumerate(table.column_names) if name not in index_names]
    columns = []
    for position in positions:
        column = table.column(position)
        array = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
        if not pays(array):
            continue
        values = objects(array)
        name = table.field(position).name
        table = table.set_column(position, pa.field(name, pa.null()), pa.nulls(len(array)))
        columns.append((data_positions.index(position), name, values))
    if not columns:
        return table, None
    return table, Placement(columns, len(data_positions))


def place(df: Any, placement: Placement | None) -> Any:
    """``df`` (the conversion of ``placeholders``' table) with the object arrays in place of
    the placeholders, at the same positions."""
    if placement is None:
        return df
    if len(df.columns) != placement.data_columns:
        raise RuntimeError(
            f"arrow_shards.dask: the conversion gave {len(df.columns)} columns for "
            f"{placement.data_columns} data columns; the decimal columns cannot be placed"
        )
    for at, name, values in placement.columns:
        if df.dtypes.iloc[at] != object:
            raise RuntimeError(
                f"arrow_shards.dask: the placeholder of column {name!r} became "
                f"{df.dtypes.iloc[at]}, not object; its decimals cannot be placed"
            )
        df.isetitem(at, values)
    return df
