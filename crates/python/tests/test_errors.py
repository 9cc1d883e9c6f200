"""Every error: the right class, the Rust message, the data handed back, and never a crash."""

from __future__ import annotations

import os
import pickle
import re
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import arrow_shards
from arrow_shards import (
    AlreadyReadError,
    ArrowShardsError,
    ClosedError,
    ConfigError,
    CorruptSpillError,
    DiskFullError,
    FinishedError,
    MemoryExhaustedError,
    NotCompleteError,
    NotWritableError,
    PartitionIdsError,
    PartitionOutOfRangeError,
    SchemaMismatchError,
    SealedError,
    SpillError,
)
from conftest import ci, int_batch, keys

SCHEMA = pa.schema([("k", pa.int64())])
#: 8192 int64 rows: 64 KiB, at the compaction target, so stored as written.
BIG = 8192


def buffer(partitions: int = 4, **settings: Any) -> arrow_shards.ShardBuffer:
    return arrow_shards.ShardBuffer(SCHEMA, partitions, **settings)


def assert_handed_back(err: ArrowShardsError, data: pa.RecordBatch) -> None:
    assert isinstance(err.batch, pa.RecordBatch)
    assert err.batch.equals(data)
    assert isinstance(err.unwritten, pa.Table)
    assert err.unwritten.to_batches()[0].equals(data) if data.num_rows else True


# --- refused writes ----------------------------------------------------------------------


def test_schema_mismatch() -> None:
    bad = pa.record_batch({"k": pa.array(["not", "ints"])})
    with buffer() as b:
        with pytest.raises(SchemaMismatchError) as info:
            b.write(0, bad)
        assert isinstance(info.value, ValueError)
        assert re.search(r"field `k` has type Int64 in the (buffer|expected schema) but Utf8 in the batch", str(info.value))
        assert_handed_back(info.value, bad)
        assert info.value.partition == 0
        renamed = pa.record_batch({"key": pa.array([1], pa.int64())})
        with pytest.raises(SchemaMismatchError, match=r"named `k` in the (buffer|expected schema) but `key`"):
            b.write_partitioned(renamed, pa.array([0], pa.uint32()))
        assert b.metrics()["rows_written"] == 0


def test_partition_out_of_range() -> None:
    data = int_batch(0, 3)
    with buffer(4) as b:
        for partition in (4, 99, -1, 2**40):
            with pytest.raises(PartitionOutOfRangeError) as info:
                b.write(partition, data)
            assert isinstance(info.value, IndexError)
            assert f"partition {partition} is out of range: the buffer has 4 partitions" in str(info.value)
            assert_handed_back(info.value, data)
            assert info.value.partition == partition
        with pytest.raises(PartitionOutOfRangeError) as info:
            b.write(7, pa.Table.from_batches([data, data]))
        assert info.value.unwritten.num_rows == 6
        with pytest.raises(PartitionOutOfRangeError) as info:
            b.write_partitioned(data, pa.array([0, 7, 1], pa.uint32()))
        assert "row 1 goes to partition 7, which is out of range" in str(info.value)
        assert (info.value.row, info.value.partition, info.value.num_partitions) == (1, 7, 4)
        assert_handed_back(info.value, data)
        assert info.value.partition_ids.to_pylist() == [0, 7, 1]
        for call in (b.seal, b.read, b.read_batches):
            with pytest.raises(PartitionOutOfRangeError, match="out of range"):
                call(4)
            with pytest.raises(PartitionOutOfRangeError):
                call(-3)
        assert b.metrics()["rows_written"] == 0


def test_partition_ids_errors() -> None:
    data = int_batch(0, 4)
    with buffer(2) as b:
        with pytest.raises(PartitionIdsError, match="4 rows but 3 partition ids") as info:
            b.write_partitioned(data, pa.array([0, 1, 0], pa.uint32()))
        assert isinstance(info.value, ValueError)
        assert_handed_back(info.value, data)
        with pytest.raises(PartitionIdsError, match="partition id of row 2 is null") as info:
            b.write_partitioned(data, pa.array([0, 1, None, 0], pa.uint32()))
        assert info.value.row == 2
        assert_handed_back(info.value, data)
        # A table: the count is checked before anything is written.
        table = pa.Table.from_batches([data, int_batch(4, 4)])
        with pytest.raises(PartitionIdsError, match="the data has 8 rows but 5 partition ids") as info:
            b.write_partitioned(table, pa.array([0] * 5, pa.uint32()))
        assert info.value.unwritten.equals(table)
        assert b.metrics()["rows_written"] == 0
        np = pytest.importorskip("numpy")
        for wrong in (pa.array([0, 1, 0, 1], pa.int64()), np.zeros(4, dtype=np.int64)):
            with pytest.raises(TypeError, match="partition_ids must be uint32"):
                b.write_partitioned(data, wrong)
        with pytest.raises((OverflowError, pa.ArrowInvalid, ValueError)):
            b.write_partitioned(data, [0, -1, 0, 1])


def test_scatter_write_of_a_table_hands_back_what_it_did_not_write() -> None:
    first, second = int_batch(0, BIG), int_batch(BIG, BIG)
    ids = pa.array([0] * BIG + [1] * BIG, pa.uint32())
    with buffer(2, memory_limit=BIG * 8 + BIG * 4, spill=False) as b:
        with pytest.raises(MemoryExhaustedError) as info:
            b.write_partitioned(pa.Table.from_batches([first, second]), ids)
        err = info.value
        assert "1 batches, 8192 rows, of this call were written before it" in str(err)
        assert err.batch.equals(second)
        assert err.unwritten.num_rows == BIG
        assert err.partition_ids.to_pylist() == [1] * BIG
        b.finish()
        assert keys(b.read(0)) == keys(first)
        assert b.read(1).num_rows == 0


def test_closed() -> None:
    data = int_batch(0, 2)
    b = buffer()
    b.write(0, data)
    metrics = b.close()
    assert b.closed and metrics["rows_written"] == 2
    with pytest.raises(ClosedError, match="write to partition 1 refused: the buffer is closed") as info:
        b.write(1, data)
    assert_handed_back(info.value, data)
    with pytest.raises(ClosedError):
        b.write_partitioned(data, pa.array([0, 1], pa.uint32()))
    for call in (lambda: b.seal(0), b.finish, lambda: b.read(0), lambda: b.read_batches(1)):
        with pytest.raises(ClosedError):
            call()
    assert b.close()["rows_written"] == 2  # closing twice is harmless
    b.metrics()


def test_sealed_and_finished() -> None:
    data = int_batch(0, 2)
    with buffer(2) as b:
        b.seal(1)
        b.seal(1)
        with pytest.raises(SealedError, match="partition 1 is sealed") as info:
            b.write(1, data)
        assert isinstance(info.value, NotWritableError)
        assert_handed_back(info.value, data)
        with pytest.raises(SealedError) as info:
            b.write_partitioned(data, pa.array([0, 1], pa.uint32()))
        assert_handed_back(info.value, data)
        b.write(0, data)
        b.finish()
        with pytest.raises(FinishedError, match="the buffer is finished") as info:
            b.write(0, data)
        assert isinstance(info.value, NotWritableError)
        assert_handed_back(info.value, data)
        assert keys(b.read(0)) == [0, 1]


def test_not_complete_and_already_read() -> None:
    with buffer(2) as b:
        b.write(0, int_batch(0, 3))
        for call in (b.read, b.read_batches):
            with pytest.raises(NotCompleteError, match="partition 0 is not complete: seal it") as info:
                call(0)
            assert info.value.partition == 0
        b.seal(0)
        reader = b.read_batches(0)
        with pytest.raises(AlreadyReadError, match="partition 0 was already read") as info:
            b.read(0)
        assert info.value.partition == 0
        assert keys(reader.read_all()) == [0, 1, 2]
        b.finish()
        b.read(1)
        with pytest.raises(AlreadyReadError):
            b.read_batches(1)


def test_memory_exhausted_without_spilling() -> None:
    data = int_batch(0, BIG)
    with buffer(1, memory_limit=1000, spill=False) as b:
        with pytest.raises(MemoryExhaustedError, match=r"needs \d+ more bytes with 0 of 1000 bytes") as info:
            b.write(0, data)
        err = info.value
        assert err.needed >= BIG * 8 and err.reserved == 0 and err.limit == 1000
        assert_handed_back(err, data)


def test_memory_exhausted_after_a_write_timeout_and_a_partial_table() -> None:
    batches = [int_batch(i * BIG, BIG) for i in range(3)]
    limit = 2 * BIG * 8 + 4096
    with buffer(1, memory_limit=limit, spill=False, write_timeout=0.01) as b:
        with pytest.raises(MemoryExhaustedError) as info:
            b.write(0, pa.Table.from_batches(batches))
        err = info.value
        assert "2 batches, 16384 rows, of this call were written before it" in str(err)
        assert err.batch.equals(batches[2])
        assert err.unwritten.num_rows == BIG
        assert b.metrics()["rows_written"] == 2 * BIG
        b.finish()
        assert keys(b.read(0)) == list(range(2 * BIG))


def test_a_read_that_waits_read_stall_timeout_for_memory_is_memory_exhausted(
    tmp_path: Path,
) -> None:
    # The Rust test read_budget::a_stalled_read_ends_in_an_error, through Python: the pool is
    # full (another buffer that cannot spill holds it), one reader holds the overdraft (its
    # consumer stopped inside a segment), so the other reader's segment waits for room that
    # never comes, and fails after read_stall_timeout instead of hanging or passing the limit.
    import datetime

    pool = arrow_shards.MemoryPool("4MiB")
    b = arrow_shards.ShardBuffer(
        SCHEMA, 2, memory_pool=pool, spill_dir=tmp_path, compact_target_rows=0,
        read_batch_rows=0, read_stall_timeout=datetime.timedelta(milliseconds=200),
    )
    for i in range(40):
        b.write(i % 2, int_batch(i * 50_000, 50_000))  # 400 KB each: spilled, whole
    b.finish()
    b.wait_for_spills()
    assert all(s["segments"] > 0 for s in b.partition_sizes())
    other = arrow_shards.ShardBuffer(SCHEMA, 1, memory_pool=pool, spill=False)
    with pytest.raises(MemoryExhaustedError):
        for i in range(10_000):
            other.write(0, int_batch(i * 1000, 1000))  # 8 KB each, until the pool is full
    first = b.read_batches(0)
    first.read_next_batch()  # takes the overdraft, kept until its segment is handed over
    assert b.metrics()["read_overdrafts"] == 1
    with pytest.raises(MemoryExhaustedError) as info:
        b.read(1)
    err = info.value
    assert "waited 200ms for memory with nothing released" in str(err)
    assert err.needed > 0 and err.limit == 4 << 20 and err.reserved > err.limit - 8000
    other.close()
    # the first reader goes on to the end
    rest = sum(batch.num_rows for batch in first)
    assert rest + 50_000 == 20 * 50_000
    b.close()


def test_read_stall_timeout_is_a_duration_with_a_default() -> None:
    import datetime

    assert arrow_shards.DEFAULT_READ_STALL_TIMEOUT == 60.0
    for value in (0, 0.5, 1e9, datetime.timedelta(minutes=5), None):
        arrow_shards.ShardBuffer(SCHEMA, 1, read_stall_timeout=value).close()


def write_until_refused(b: arrow_shards.ShardBuffer, batches: int) -> tuple[list[int], ArrowShardsError]:
    """Writes distinct 64 KiB batches round-robin over 4 partitions until one is refused;
    returns the keys accepted and the error."""
    accepted: list[int] = []
    for i in range(batches):
        data = int_batch(i * BIG, BIG)
        try:
            b.write(i % 4, data)
        except ArrowShardsError as err:
            assert_handed_back(err, data)
            return accepted, err
        accepted.extend(keys(data))
    raise AssertionError("no write was refused")


def read_everything(b: arrow_shards.ShardBuffer) -> list[int]:
    b.finish()
    return sorted(k for p in range(b.num_partitions) for k in keys(b.read(p)))


def test_spill_failure_refuses_writers_and_loses_nothing(spill_root: Path) -> None:
    b = buffer(4, memory_limit="1MiB", spill_dir=spill_root)
    assert b.spill_dir is not None and Path(b.spill_dir).parent == spill_root
    shutil.rmtree(b.spill_dir)  # every spill round now fails
    accepted, err = write_until_refused(b, 400)
    assert type(err) is SpillError, err
    assert "spilling failed: spill i/o error on" in str(err)
    assert b.metrics()["spill_error"] is not None
    assert read_everything(b) == accepted
    with pytest.raises(SpillError):
        b.close()
    assert list(spill_root.iterdir()) == []


def test_disk_full(tmp_path: Path) -> None:
    full = os.environ.get("ARROW_SHARDS_FULL_DISK")
    if not full:
        if ci():
            pytest.fail("ARROW_SHARDS_FULL_DISK (a small tmpfs, made by .ci/run) is not set")
        pytest.skip("set ARROW_SHARDS_FULL_DISK to a small tmpfs to test a really full disk")
    b = buffer(4, memory_limit="1MiB", spill_dir=full)
    accepted, err = write_until_refused(b, 2000)
    assert isinstance(err, DiskFullError), err
    assert f"no space left for spilling in {b.spill_dir}" in str(err)
    assert err.spill_dir == b.spill_dir
    assert read_everything(b) == accepted
    with pytest.raises(DiskFullError):
        b.close()
    assert list(Path(full).iterdir()) == []


def test_corrupt_spill_data(spill_root: Path) -> None:
    b = buffer(4, memory_limit="1MiB", spill_dir=spill_root)
    for i in range(40):
        b.write(i % 4, int_batch(i * BIG, BIG))
    b.finish()
    b.wait_for_spills()
    spilled = [p for p, s in enumerate(b.partition_sizes()) if s["segments"]]
    assert spilled, "nothing was spilled"
    files = sorted(Path(b.spill_dir).iterdir())
    for file in files:  # flip every 7th byte: every segment fails its checksum
        data = bytearray(file.read_bytes())
        data[::7] = bytes(x ^ 0xFF for x in data[::7])
        file.write_bytes(bytes(data))
    first, *rest = spilled
    with pytest.raises(CorruptSpillError, match="corrupt spill segment of partition") as info:
        b.read(first)
    err = info.value
    assert isinstance(err, SpillError)
    assert err.partition == first and Path(err.file) in files and err.offset >= 0
    assert f"in {err.file}" in str(err) and f"at offset {err.offset}" in str(err)
    assert isinstance(err.partial, pa.Table) and err.partial.num_rows == 0
    for p in rest:
        with pytest.raises(CorruptSpillError):
            b.read_batches(p).read_all()
    b.close()
    assert list(spill_root.iterdir()) == []


# --- settings ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"memory_limit": "lots"}, "memory_limit = 'lots' is invalid: not a size"),
        ({"memory_limit": "12XB"}, "memory_limit = '12XB' is invalid"),
        ({"memory_limit": ""}, "memory_limit = '' is invalid: empty"),
        ({"memory_limit": -5}, "memory_limit = -5 is invalid: must be at least 0"),
        ({"memory_limit": 2**70}, "memory_limit = 1180591620717411303424 is invalid"),
        ({"spill_threshold": 1.5}, "spill_threshold = 1.5 is invalid: must be in (0, 1]"),
        ({"spill_threshold": 0.0}, "spill_threshold = 0 is invalid"),
        ({"spill_target": 0.9}, "spill_target = 0.9 is invalid: must be in [0, spill_threshold)"),
        ({"compression": "brotli"}, "compression = 'brotli' is invalid"),
        ({"compression": "zstd:99"}, "compression = 'zstd:99' is invalid"),
        ({"max_spill_round_bytes": 0}, "max_spill_round_bytes = 0 is invalid: must be at least 1"),
        ({"spill_segment_bytes": "0B"}, "spill_segment_bytes = 0 is invalid"),
        ({"compact_target_bytes": "2GiB"}, "compact_target_bytes = 2147483648 is invalid: must be in [1, 1 GiB]"),
        ({"read_batch_rows": -1}, "read_batch_rows = -1 is invalid"),
        ({"write_timeout": -1.0}, "write_timeout = -1 is invalid: must be a finite number of seconds"),
        ({"write_timeout": float("inf")}, "write_timeout = inf is invalid"),
        ({"write_timeout": 1e19}, "write_timeout = 10000000000000000000 is invalid"),
        ({"read_stall_timeout": -1}, "read_stall_timeout = -1 is invalid: must be a finite"),
        ({"read_stall_timeout": float("nan")}, "read_stall_timeout = NaN is invalid"),
        ({"read_stall_timeout": float("inf")}, "read_stall_timeout = inf is invalid"),
        ({"read_stall_timeout": 1e10}, "read_stall_timeout = 10000000000 is invalid"),
        ({"read_stall_timeout": 10**400}, "is invalid: must be a finite number of seconds"),
        ({"read_stall_timeout": __import__("datetime").timedelta(seconds=-1)},
         "read_stall_timeout = -1 is invalid"),
        ({"spill": False, "spill_dir": "/tmp"}, "spill_dir = /tmp is invalid: spilling is off"),
        ({"memory_limit": 10, "memory_pool": arrow_shards.MemoryPool(10)}, "memory_pool"),
    ],
)
def test_bad_settings_raise_config_error(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        arrow_shards.ShardBuffer(SCHEMA, 2, **settings)
    assert isinstance(info.value, ValueError)
    assert message in str(info.value)


@pytest.mark.parametrize("partitions", [0, -1, 2**32])
def test_bad_partition_counts(partitions: int) -> None:
    with pytest.raises(ConfigError, match="num_partitions"):
        arrow_shards.ShardBuffer(SCHEMA, partitions)


@pytest.mark.parametrize(
    "settings",
    [
        {"memory_limit": True},
        {"memory_limit": 1.5},
        {"memory_limit": [1]},
        {"read_batch_rows": "10"},
        {"write_timeout": "1s"},
        {"read_stall_timeout": "60s"},
        {"read_stall_timeout": True},
        {"spill_threshold": "high"},
        {"compression": 1},
    ],
)
def test_settings_of_the_wrong_type_raise_type_error(settings: dict[str, Any]) -> None:
    with pytest.raises(TypeError):
        arrow_shards.ShardBuffer(SCHEMA, 2, **settings)


def test_a_spill_dir_that_cannot_be_made(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    with pytest.raises(SpillError, match="cannot create the spill directory"):
        arrow_shards.ShardBuffer(SCHEMA, 2, memory_limit="1MiB", spill_dir=not_a_dir / "sub")


def test_sizes_as_strings_and_ints() -> None:
    for limit, want in (("64MiB", 64 << 20), ("1GB", 10**9), (" 1.5 KiB ", 1536), (4096, 4096), ("0", 0)):
        with arrow_shards.ShardBuffer(SCHEMA, 1, memory_limit=limit) as b:
            assert b.metrics()["memory_limit"] == want
    assert arrow_shards.MemoryPool("2MiB").limit == 2 << 20
    with pytest.raises(ConfigError):
        arrow_shards.MemoryPool("-1MiB")


# --- inputs that are not Arrow data ------------------------------------------------------


def test_not_arrow_data_is_a_type_error() -> None:
    with buffer() as b:
        for bad in ([1, 2, 3], {"k": [1]}, None, 42, "k"):
            with pytest.raises(TypeError, match="__arrow_c_array__ or __arrow_c_stream__"):
                b.write(0, bad)
        with pytest.raises(TypeError, match="Struct"):
            b.write(0, pa.array([1, 2], pa.int64()))  # an array is not a batch
        with pytest.raises(TypeError):
            b.write_partitioned(int_batch(0, 1), object())
        assert b.metrics()["rows_written"] == 0
    with pytest.raises(TypeError):
        arrow_shards.ShardBuffer("k: int64", 2)


def test_a_failing_input_stream() -> None:
    def batches():  # noqa: ANN202
        yield int_batch(0, 2)
        raise RuntimeError("the producer broke")

    with buffer(1) as b:
        with pytest.raises(ValueError, match="after 1 of its batches .2 rows. were written.*the producer broke"):
            b.write(0, pa.RecordBatchReader.from_batches(SCHEMA, batches()))
        b.finish()
        assert keys(b.read(0)) == [0, 1]


def test_exceptions_pickle_with_their_data() -> None:
    data = int_batch(0, 3)
    with buffer(2) as b:
        b.seal(0)
        with pytest.raises(SealedError) as info:
            b.write(0, data)
    copy = pickle.loads(pickle.dumps(info.value))
    assert type(copy) is SealedError and str(copy) == str(info.value)
    assert copy.batch.equals(data) and copy.partition == 0
