"""The ordered read of an output partition: Dask's order from Rust, then Dask's own conversion.

Dask's ``convert_shards`` (distributed 2026.8, ``shuffle/_arrow.py``) concatenates a partition's
tables, sorts them by ``__input_partition_id__`` (pyarrow ``sort_by``: a full copy with the GIL
held), drops that column, converts to pandas and reconciles the dtypes with ``meta``. Here the
concatenation and the stable sort are one Rust call with the GIL released
(``_native._dask_order``, which gives one contiguous table); the conversion to pandas and the
dtype reconciliation below are ``convert_shards``' own steps, so the frames are Dask's (dtypes,
categories, index), except that columns already of the reconciled dtype are not cast again and
a frame with nothing to cast is returned as it is (Dask's ``astype`` rebuilds it).

With ``arrow_dtypes`` (the opt-in ``output-dtypes: meta``), a column whose meta dtype is an
Arrow dtype (``pd.ArrowDtype``: ``date32[pyarrow]``, ``decimal128(15, 2)[pyarrow]``, ...) comes
back as that dtype, the Arrow data wrapped without conversion. Dask's own conversion turns a
``decimal128`` column into Python ``Decimal`` objects (one per value) and then reconciles it
with meta to ``object``, so its result's dtype differs from its own meta (with distributed
2026.8 and pandas 3 a ``date32`` column comes back as ``date32[pyarrow]`` already, restored by
the pandas metadata; docs/dask.md, "Output dtypes").

Where Dask's conversion makes ``Decimal`` objects, a decimal column whose values repeat is
converted once per distinct value instead (``_decimals``): the same frame, fewer objects.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from distributed.shuffle._arrow import _INPUT_PARTITION_ID_COLUMN, concat_tables

from .._native import _dask_order
from ._decimals import place, placeholders


def ordered_table(tables: list[pa.Table]) -> pa.Table:
    """``tables`` (one partition's, one per schema) as one table in Dask's order, without the
    input partition id column. Tables of several schemas are concatenated first with Dask's
    permissive promotion."""
    table = tables[0] if len(tables) == 1 else concat_tables(tables)
    return _dask_order(table, _INPUT_PARTITION_ID_COLUMN)


def to_pandas(
    table: pa.Table, meta: Any, column: str, drop_column: bool, arrow_dtypes: bool = False
) -> Any:
    """``convert_shards``' conversion of a sorted table without the id column (distributed
    2026.8): pandas through ``from_pyarrow_table_dispatch``, then the dtypes reconciled with
    ``meta``. ``arrow_dtypes``: meta's Arrow dtypes are kept (see the module docs)."""
    import pandas as pd
    from dask.dataframe._compat import PANDAS_GE_300
    from dask.dataframe.dispatch import from_pyarrow_table_dispatch
    from pandas.core.dtypes.cast import find_common_type  # type: ignore[attr-defined]

    if drop_column:
        meta = meta.drop(columns=column)
    kept = _arrow_types_mapper(meta) if arrow_dtypes else None
    placement = None
    if type(meta) is pd.DataFrame:
        # decimal columns converted once per distinct value (_decimals); the table is rebound
        # so that the conversion's self_destruct frees the other columns as it goes
        table, placement = placeholders(table, kept)
    if kept is None:
        df = from_pyarrow_table_dispatch(meta, table, self_destruct=True)
    else:
        df = from_pyarrow_table_dispatch(meta, table, self_destruct=True, types_mapper=kept)
        if isinstance(df.index.dtype, pd.ArrowDtype) and df.index.dtype != meta.index.dtype:
            # the mapper goes by Arrow type, not by column: an index meta does not give an
            # Arrow dtype gets Dask's conversion back
            df.index = df.index.astype(meta.index.dtype)
    df = place(df, placement)
    reconciled_dtypes = {}
    for name, dtype in meta.dtypes.items():
        actual = df[name].dtype
        if actual == dtype:
            continue
        # the specific string dtype of meta (string[pyarrow])
        if isinstance(actual, pd.StringDtype) and isinstance(dtype, pd.StringDtype):
            reconciled_dtypes[name] = dtype
            continue
        # meta may not know the actual categories (Dask skips them too)
        if isinstance(actual, pd.CategoricalDtype) and isinstance(dtype, pd.CategoricalDtype):
            continue
        common = find_common_type([actual, dtype])
        # a column already of the common dtype (a decimal column, object in both) is left as
        # it is: the same frame as Dask's, without the copy
        if common != actual:
            reconciled_dtypes[name] = common
    if not reconciled_dtypes:
        # Dask's astype of nothing rebuilds the frame column by column (~5% of a worker's time
        # at 1,024 partitions); the frame is ours alone, so it is returned as it is
        return df
    kwargs = {} if PANDAS_GE_300 else {"copy": False}
    return df.astype(reconciled_dtypes, **kwargs)


def _arrow_types_mapper(meta: Any) -> Any:
    """The ``types_mapper`` that keeps meta's Arrow dtypes (``None`` when meta has none, or is
    not a pandas frame): each Arrow type some column of meta has as a ``pd.ArrowDtype`` maps
    to that dtype; other types go as in Dask's own mapper (strings to ``string[pyarrow]``
    when meta has that dtype). A column of such a type whose meta dtype is another is set back
    to it by the reconciliation after the conversion."""
    import pandas as pd

    if type(meta) is not pd.DataFrame:
        return None
    kept = {
        dtype.pyarrow_dtype: dtype
        for dtype in meta.dtypes.values
        if isinstance(dtype, pd.ArrowDtype)
    }
    if not kept:
        return None
    pyarrow_strings = pd.StringDtype("pyarrow") in meta.dtypes.values

    def mapper(pyarrow_dtype: pa.DataType) -> Any:
        found = kept.get(pyarrow_dtype)
        if found is not None:
            return found
        # dask's default_types_mapper (dask/dataframe/backends.py, 2026.8)
        if pyarrow_strings and pyarrow_dtype in {pa.large_string(), pa.string()}:
            return pd.StringDtype("pyarrow")
        return None

    return mapper
