"""The Rust steps of ``arrow_shards.dask`` against pyarrow's and Dask's own results:
the ordered read (``_dask_order``) against ``Table.sort_by``, the split by worker
(``_dask_split``, ``Splitter``) against ``sort_by`` and Dask's ``split_by_worker`` +
``serialize_table``, the receive side's decode (``_dask_receive``) against Dask's
``buffers_to_table``, on random tables; the shards' out-of-band frames through Dask's own
serialisation; the opt-in Arrow output dtypes; no cluster."""

from __future__ import annotations

import decimal

import pytest

dask = pytest.importorskip("dask")
distributed = pytest.importorskip("distributed")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pyarrow as pa  # noqa: E402
from distributed.shuffle._arrow import (  # noqa: E402
    buffers_to_table,
    convert_shards,
    deserialize_table,
    serialize_table,
)
from distributed.shuffle._shuffle import split_by_worker  # noqa: E402

from arrow_shards._native import _dask_order, _dask_receive, _dask_split  # noqa: E402
from arrow_shards.dask._frame import SMALL_SHARDS, Frame, payload  # noqa: E402
from arrow_shards.dask._read import ordered_table, to_pandas  # noqa: E402
from arrow_shards.dask._receive import received_tables  # noqa: E402
from arrow_shards.dask._split import Splitter  # noqa: E402
from dask_helpers import rich_frame  # noqa: E402

ID = "__input_partition_id__"


def random_table(rng: np.random.Generator, rows: int, ids: np.ndarray) -> pa.Table:
    """Ints with nulls, strings, a dictionary with unused values, a list column and ``ids``,
    as several batches (so several chunks per column), with schema metadata."""
    categories = pa.array([f"c{i}" for i in range(20)])  # c15..c19 unused
    values = rng.integers(-1000, 1000, rows)
    mask = rng.random(rows) < 0.2
    columns = {
        "i": pa.array(values, mask=mask),
        "s": pa.array([f"s{v}" if v % 5 else None for v in values], pa.large_string()),
        "d": pa.DictionaryArray.from_arrays(
            pa.array(rng.integers(0, 15, rows), pa.int8()), categories
        ),
        "l": pa.array([[int(v)] * (int(v) % 3) for v in values]),
        ID: pa.array(ids, pa.uint32()),
    }
    table = pa.table(columns).replace_schema_metadata({b"pandas": b"{\"kept\": true}"})
    cuts = sorted(set(rng.integers(0, rows + 1, 4).tolist()) | {0, rows})
    batches = [b for a, z in zip(cuts, cuts[1:]) for b in table.slice(a, z - a).to_batches()]
    return pa.Table.from_batches(batches, table.schema)


def runs_of_ids(rng: np.random.Generator, rows: int, kinds: int) -> np.ndarray:
    """Ids in runs, as the buffer reads a partition (one run per received shard)."""
    out = []
    while len(out) < rows:
        out += [int(rng.integers(0, kinds))] * int(rng.integers(1, 200))
    return np.array(out[:rows])


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("layout", ["runs", "scattered", "sorted", "one id", "sparse ids"])
def test_ordered_read_equals_pyarrows_sort_by(seed, layout):
    rng = np.random.default_rng(seed)
    rows = int(rng.integers(0, 3000))
    ids = {
        "runs": lambda: runs_of_ids(rng, rows, 40),
        "scattered": lambda: rng.integers(0, 40, rows),
        "sorted": lambda: np.sort(rng.integers(0, 40, rows)),
        "one id": lambda: np.full(rows, 7),
        "sparse ids": lambda: rng.choice([0, 5, 2**31, 2**32 - 1], rows),
    }[layout]()
    table = random_table(rng, rows, ids)
    got = _dask_order(table, ID)
    expected = table.sort_by(ID).drop_columns([ID])
    assert got.schema.equals(expected.schema, check_metadata=True)
    assert got.equals(expected)
    assert all(c.num_chunks == 1 for c in got.columns), "one contiguous table"
    # the dictionary keeps every value, unused ones included
    assert got.column("d").chunk(0).dictionary.equals(table.column("d").chunk(0).dictionary)


def test_ordered_read_refuses_bad_input_with_exceptions():
    table = pa.table({"a": [1, 2], ID: pa.array([1, 0], pa.uint32())})
    with pytest.raises(ValueError, match='no column "nope"'):
        _dask_order(table, "nope")
    with pytest.raises(TypeError, match="must be uint32, got Int64"):
        _dask_order(table, "a")
    with pytest.raises(ValueError, match="1 nulls"):
        _dask_order(pa.table({ID: pa.array([1, None], pa.uint32())}), ID)
    with pytest.raises(TypeError, match="Arrow PyCapsule"):
        _dask_order(object(), ID)
    empty = _dask_order(table.slice(0, 0), ID)
    assert empty.num_rows == 0 and empty.column_names == ["a"]


def _shards_for(df: pd.DataFrame, seed: int) -> list[tuple[int, bytes]]:
    rng = np.random.default_rng(seed)
    pieces = np.array_split(np.arange(len(df)), int(rng.integers(1, 6)))
    return [(int(i), serialize_table(pa.Table.from_pandas(df.iloc[p], preserve_index=True)))
            for i, p in zip(rng.permutation(len(pieces)), pieces)]


@pytest.mark.parametrize("seed", range(4))
def test_ordered_read_and_conversion_equal_dasks_convert_shards(seed):
    df = rich_frame(rows=1500, seed=seed).assign(_partitions=0)
    meta = df.iloc[:0]
    shards = _shards_for(df, seed)
    # as both receive sides keep it: the partition column dropped
    table = buffers_to_table(shards).drop_columns(["_partitions"])
    expected = convert_shards([table], meta, "_partitions", True)
    got = to_pandas(ordered_table([table]), meta, "_partitions", True)
    pd.testing.assert_frame_equal(got, expected)
    assert list(got["c"].cat.categories) == list(expected["c"].cat.categories)


def random_split_table(rng: np.random.Generator, rows: int, workers: int, partitions: int):
    ids = rng.integers(0, partitions, rows)
    table = random_table(rng, rows, np.zeros(rows, np.uint32)).drop_columns([ID])
    worker_of = rng.integers(0, workers, partitions).astype(np.int8)
    return (
        table.append_column("_partitions", pa.array(ids, pa.int64()))
        .append_column("_worker", pa.array(worker_of[ids], pa.int8())),
        worker_of,
    )


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("workers", [1, 2, 5])
def test_split_equals_pyarrows_sort_by_worker_and_partition(seed, workers):
    rng = np.random.default_rng(seed)
    rows = int(rng.integers(0, 4000))
    partitions = int(rng.choice([1, 7, 1024]))
    table, _ = random_split_table(rng, rows, workers, partitions)
    local = int(rng.integers(0, workers))
    got = _dask_split(table, "_worker", "_partitions", workers, local)
    assert len(got) == workers
    ordered = table.sort_by([("_worker", "ascending"), ("_partitions", "ascending")])
    codes = ordered.column("_worker").to_numpy()
    ordered = ordered.drop_columns(["_worker"])
    for worker, shard in enumerate(got):
        expected = ordered.filter(pa.array(codes == worker))
        if expected.num_rows == 0:
            assert shard is None
            continue
        if worker == local:
            assert isinstance(shard, pa.Table)
            mine = shard
        else:
            assert isinstance(shard, pa.Buffer)
            mine = deserialize_table(shard)
        assert mine.schema.equals(expected.schema, check_metadata=True)
        assert mine.equals(expected)


def test_split_refuses_bad_input_with_exceptions():
    table = pa.table({"_partitions": [0, 1], "_worker": pa.array([0, 3], pa.int8())})
    with pytest.raises(ValueError, match="worker code 3 .* there are 2 workers"):
        _dask_split(table, "_worker", "_partitions", 2)
    with pytest.raises(ValueError, match='no column "w"'):
        _dask_split(table, "w", "_partitions", 4)
    with pytest.raises(TypeError, match="must be integers"):
        _dask_split(table.append_column("f", pa.array([0.5, 1.0])), "_worker", "f", 4)
    with pytest.raises(ValueError, match="1 nulls"):
        _dask_split(pa.table({"p": [0, None], "_worker": pa.array([0, 0], pa.int8())}),
                    "_worker", "p", 1)
    assert _dask_split(table.slice(0, 0), "_worker", "_partitions", 4) == [None] * 4


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("index", ["range", "named", "strings", "multi"])
def test_splitter_equals_dasks_split_by_worker_and_serialize_table(seed, index):
    rng = np.random.default_rng(seed)
    npartitions = int(rng.choice([3, 64, 1024]))
    df = rich_frame(rows=int(rng.integers(0, 2000)), seed=seed)
    df["_partitions"] = rng.integers(0, npartitions, len(df))
    if index == "named":
        df.index = pd.Index(np.arange(len(df)) * 3, name="ix")
    elif index == "strings":
        df.index = pd.Index([f"r{i}" for i in range(len(df))])
    elif index == "multi":
        df.index = pd.MultiIndex.from_arrays([np.arange(len(df)) % 3, np.arange(len(df))],
                                             names=["a", "b"])
    workers = ["tcp://a:1", "tcp://b:2", "tcp://c:3"]
    assigned = {p: workers[int(rng.integers(0, 3))] for p in range(npartitions)}
    if seed % 2:  # outputs not wanted: their rows are dropped, as by Dask's inner merge
        for p in range(0, npartitions, 2):
            assigned.pop(p, None)
    worker_for = pd.Series(assigned, name="_workers").astype("category")
    splitter = Splitter(worker_for, "_partitions")
    assert Splitter.applies_to(df, worker_for, "_partitions")
    got = splitter.split(df)
    expected = split_by_worker(df, "_partitions", df.iloc[:0], worker_for)
    assert sorted(got) == sorted(expected)
    for worker, table in expected.items():
        # Dask's wire bytes, and its table sorted stably by output partition too
        theirs = deserialize_table(serialize_table(table)).sort_by("_partitions")
        assert isinstance(got[worker], Frame)
        mine = deserialize_table(got[worker].buffer)
        assert mine.schema.equals(theirs.schema, check_metadata=True), worker
        assert mine.equals(theirs), worker


def test_splitter_leaves_other_frames_to_dask():
    worker_for = pd.Series({0: "a", 1: "b"}, name="_workers").astype("category")
    df = pd.DataFrame({"_partitions": [0.0, 1.0], "x": [1, 2]})
    assert not Splitter.applies_to(df, worker_for, "_partitions")
    nullable = pd.DataFrame({"_partitions": pd.array([0, 1], dtype="Int64")})
    assert not Splitter.applies_to(nullable, worker_for, "_partitions")
    assert not Splitter.applies_to(df.assign(_worker=1), worker_for, "_partitions")


def test_rich_frame_has_the_listed_dtypes():
    df = rich_frame(rows=10)
    assert isinstance(df["dec"].dtype, pd.ArrowDtype)
    assert isinstance(df["dec"].iloc[0], decimal.Decimal)
    quantities = rich_frame(rows=2000)["qty"]
    assert quantities.isna().any() and quantities.nunique() == 50
    assert isinstance(df["day"].dtype, pd.ArrowDtype)
    assert len(df["c"].cat.categories) > df["c"].nunique()


def dasks_received(shards, column, drop_column):
    """What Dask's own run writes for ``shards``: ``buffers_to_table``, the partition column
    cast to the buffer's ids, dropped if asked."""
    table = buffers_to_table(shards)
    ids = pa.compute.cast(table.column(column), pa.uint32())
    return (table.drop_columns([column]) if drop_column else table), ids


def as_frame(kind: str, stream: bytes):
    if kind == "bytes":
        return stream
    if kind == "pyarrow.Buffer":
        return pa.py_buffer(stream)
    # a memoryview at an odd offset of a larger buffer, as a comm's frame may be (not
    # 8-byte aligned: the decoder realigns)
    return memoryview(bytearray(b"x" + stream))[1:].toreadonly()


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("kind", ["bytes", "pyarrow.Buffer", "unaligned memoryview"])
@pytest.mark.parametrize("drop_column", [True, False])
def test_received_shards_decode_as_dasks_buffers_to_table(seed, kind, drop_column):
    rng = np.random.default_rng(seed)
    df = rich_frame(rows=int(rng.integers(1, 1500)), seed=seed)
    df["_partitions"] = rng.integers(0, 1024, len(df))
    table = pa.Table.from_pandas(df, preserve_index=True)
    cuts = sorted(set(rng.integers(0, table.num_rows + 1, 3).tolist()) | {0, table.num_rows})
    pieces = [table.slice(a, z - a) for a, z in zip(cuts, cuts[1:])]
    shards = [(int(rng.integers(0, 50)), serialize_table(p)) for p in pieces]
    got = _dask_receive(
        [(i, as_frame(kind, s)) for i, s in shards], "_partitions", ID, drop_column
    )
    expected_table, expected_ids = dasks_received(shards, "_partitions", drop_column)
    assert len(got) == 1
    mine, ids = got[0]
    assert mine.schema.equals(expected_table.schema, check_metadata=True)
    assert mine.equals(expected_table)
    assert ids.equals(expected_ids.combine_chunks())


def test_received_shards_of_two_schemas_come_back_as_two_groups():
    # an object column infers its Arrow type per input partition (ints here, strings there)
    first = pa.table({"_partitions": [0, 1], "x": [1, 2]})
    second = pa.table({"_partitions": [1], "x": ["a"]})
    third = pa.table({"_partitions": [2, 0], "x": [3, 4]})
    shards = [(0, serialize_table(first)), (1, serialize_table(second)),
              (2, serialize_table(third)), (3, serialize_table(first.slice(0, 0)))]
    got = _dask_receive(shards, "_partitions", ID, True)
    assert [t.num_rows for t, _ in got] == [4, 1]
    assert got[0][0].column(ID).to_pylist() == [0, 0, 2, 2]
    assert got[0][1].to_pylist() == [0, 1, 2, 0]
    assert got[1][0].column("x").to_pylist() == ["a"]


def test_received_tables_take_local_tables_and_frames_in_one_list():
    table = pa.Table.from_pandas(rich_frame(rows=300).assign(p=np.arange(300) % 7),
                                 preserve_index=True)
    first, second = table.slice(0, 100), table.slice(100)
    shards = [(3, serialize_table(first)), (1, serialize_table(second))]
    expected_table, expected_ids = dasks_received(shards, "p", True)
    got = received_tables([(3, Frame(pa.py_buffer(serialize_table(first)))), (1, second)],
                          "p", True)
    mine = pa.concat_tables([t for t, _ in got])
    assert mine.schema.equals(expected_table.schema, check_metadata=True)
    assert mine.equals(expected_table)
    assert pa.chunked_array([i for _, i in got]).equals(expected_ids)


def test_a_bad_received_shard_raises_naming_it():
    good = pa.table({"_partitions": [0, 1], "x": [1, 2]})
    stream = serialize_table(good)
    with pytest.raises(ValueError, match="input partition 9: not a whole Arrow IPC stream"):
        _dask_receive([(9, stream[:-20])], "_partitions", ID, True)
    with pytest.raises(ValueError, match="input partition 9: not a whole Arrow IPC stream"):
        _dask_receive([(9, b"not arrow at all, no")], "_partitions", ID, True)
    with pytest.raises(ValueError, match="input partition 4 has no column"):
        _dask_receive([(4, stream)], "nope", ID, True)
    negative = serialize_table(pa.table({"_partitions": [-1]}))
    with pytest.raises(ValueError, match="input partition 5: output partition -1"):
        _dask_receive([(5, negative)], "_partitions", ID, True)
    floats = serialize_table(pa.table({"_partitions": [0.5]}))
    with pytest.raises(TypeError, match="input partition 6: .* must be integers"):
        _dask_receive([(6, floats)], "_partitions", ID, True)
    with pytest.raises(TypeError):
        _dask_receive([(6, 12)], "_partitions", ID, True)


def test_a_frame_travels_out_of_band_through_dasks_serialisation():
    from dask.sizeof import sizeof
    from distributed.protocol import dumps, loads, to_serialize

    stream = _dask_split(pa.table({"p": np.arange(50_000), "w": np.zeros(50_000, np.int8)}),
                         "w", "p", 1)[0]
    frame = Frame(stream)
    assert sizeof(frame) == stream.size and sizeof((7, frame)) > stream.size
    shards = [(7, frame), (8, frame)]
    assert payload(shards) is shards  # large shards: out of band
    frames = dumps({"data": to_serialize(payload(shards))})
    # the stream's own memory is among the frames (not copied), and the pickle is small
    addresses = [pa.py_buffer(f).address for f in frames]
    assert stream.address in addresses
    assert sum(len(memoryview(f)) for f in frames) < 2 * stream.size + 10_000
    data = loads(frames)["data"]
    assert [i for i, _ in data] == [7, 8]
    assert all(isinstance(b, pa.Buffer) and b.equals(stream) for _, b in data)


def test_small_shards_are_pickled_in_band_into_one_message():
    import pickle

    stream = serialize_table(pa.table({"p": [1, 2, 3]}))
    assert len(stream) < SMALL_SHARDS
    shards = [(1, Frame(pa.py_buffer(stream)))]
    blob = payload(shards)
    assert isinstance(blob, bytes)
    data = pickle.loads(blob)
    assert data[0][0] == 1 and pa.py_buffer(data[0][1]).equals(pa.py_buffer(stream))
    # and at protocol 4 (stdlib pickle's default before 3.14) in band too
    assert pa.py_buffer(pickle.loads(pickle.dumps(shards[0][1], protocol=4))).equals(
        pa.py_buffer(stream))


def test_output_dtypes_meta_keeps_metas_arrow_dtypes():
    df = rich_frame(rows=500)
    meta = df.iloc[:0]
    assert isinstance(meta["day"].dtype, pd.ArrowDtype)
    table = pa.Table.from_pandas(df, preserve_index=True)
    ids = pa.array(np.zeros(len(df), np.uint32))
    ordered = ordered_table([table.append_column(ID, ids)])
    dasks = to_pandas(ordered, meta, "k", False)
    kept = to_pandas(ordered, meta, "k", False, arrow_dtypes=True)
    arrow = [c for c, t in meta.dtypes.items() if isinstance(t, pd.ArrowDtype)]
    assert {"day", "dec", "qty"} <= set(arrow)
    # Dask's own conversion: decimals become Python objects (dates are restored from the
    # pandas metadata); the opt-in keeps every Arrow dtype of meta
    assert dasks["dec"].dtype == object and dasks["day"].dtype == meta["day"].dtype
    for column in arrow:
        assert kept[column].dtype == meta[column].dtype
        # a null is pd.NA in an Arrow dtype, None among Dask's objects
        assert kept[column].astype(object).where(kept[column].notna(), None).tolist() == (
            dasks[column].tolist()
        )
    others = [c for c in meta.columns if c not in arrow]
    pd.testing.assert_frame_equal(kept[others], dasks[others])
    # an index of an Arrow type whose meta dtype is not Arrow keeps Dask's dtype
    indexed = df.set_index(df["day"].astype(object).rename("when"))
    table = pa.Table.from_pandas(indexed, preserve_index=True)
    table = table.set_column(table.schema.get_field_index("when"), "when",
                             table.column("when").cast(pa.date32()))
    got = to_pandas(ordered_table([table.append_column(ID, ids)]), indexed.iloc[:0], "k",
                    False, arrow_dtypes=True)
    assert got.index.dtype == object and got["day"].dtype == meta["day"].dtype


def test_output_dtypes_setting_is_checked():
    from arrow_shards.dask import ShufflePlugin
    from arrow_shards.dask._settings import Settings

    with pytest.raises(ValueError, match="output_dtypes 'arrow'"):
        ShufflePlugin(output_dtypes="arrow")
    with dask.config.set({"arrow-shards.output-dtypes": "pyarrow"}):
        with pytest.raises(ValueError, match="output-dtypes 'pyarrow'"):
            Settings.from_config()
    assert Settings.from_config().output_dtypes == "dask"


def test_read_stall_timeout_setting_is_checked_and_reaches_the_buffers(monkeypatch, tmp_path):
    import datetime

    from arrow_shards.dask import ShufflePlugin, _receive
    from arrow_shards.dask._settings import Settings

    assert Settings.from_config().read_stall_seconds() is None  # the buffers' default
    for given, want in [("90s", 90.0), (2.5, 2.5), (0, 0.0),
                        (datetime.timedelta(minutes=2), 120.0)]:
        with dask.config.set({"arrow-shards.read-stall-timeout": given}):
            assert Settings.from_config().read_stall_seconds() == want
    for bad in [-1, float("nan"), float("inf"), "soon", "-1s", 1e10, True, [1]]:
        with pytest.raises(ValueError, match="read_stall_timeout"):
            ShufflePlugin(read_stall_timeout=bad)
        with dask.config.set({"arrow-shards.read-stall-timeout": bad}):
            with pytest.raises(ValueError, match="read-stall-timeout"):
                Settings.from_config()
    # a worker's receive buffers build their ShardBuffers with it
    made = []

    real = _receive.ShardBuffer

    def recording(*args, **kwargs):
        made.append(kwargs.get("read_stall_timeout"))
        return real(*args, **kwargs)

    monkeypatch.setattr(_receive, "ShardBuffer", recording)
    from types import SimpleNamespace

    from arrow_shards.dask._worker import WorkerState

    worker = SimpleNamespace(memory_manager=SimpleNamespace(memory_limit=2**30),
                             local_directory=str(tmp_path))
    with dask.config.set({"arrow-shards.read-stall-timeout": "1500ms"}):
        state = WorkerState(worker, Settings.from_config())
    buffer = state.make_buffer(2)
    buffer.write(pa.table({"a": [1, 2]}), pa.array([0, 1], pa.uint32()))
    buffer.close()
    assert made == [1.5]
