"""The streaming read from Python: `subscribe` yields a partition's batches while producers
write, every row once in write order; claims are exclusive; close and drop end it cleanly."""

from __future__ import annotations

import threading
from pathlib import Path

import pyarrow as pa
import pytest

import arrow_shards
from conftest import int_batch, keys

SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.string())])


def test_subscriptions_stream_every_row_once_while_producers_write(spill_root: Path) -> None:
    partitions = 8
    with arrow_shards.ShardBuffer(
        SCHEMA, partitions, memory_limit="1MiB", spill_dir=spill_root
    ) as buffer:
        readers = [buffer.subscribe(p) for p in range(partitions)]
        got: list[list[int]] = [[] for _ in range(partitions)]

        def consume(p: int) -> None:
            for batch in readers[p]:
                assert isinstance(batch, pa.RecordBatch) and batch.num_rows > 0
                got[p].extend(keys(batch))

        threads = [threading.Thread(target=consume, args=(p,)) for p in range(partitions)]
        for i in range(60):
            if i == 30:
                # Consumers start halfway: the first half (~6 MB) cannot stay in 1 MiB and is
                # spilled, so the readers take segments as well as batches from memory.
                for t in threads:
                    t.start()
            batch = int_batch(i * 4096, 4096, payload=40)
            buffer.write_partitioned(batch, pa.array([k % partitions for k in range(i * 4096, (i + 1) * 4096)], pa.uint32()))
        buffer.finish()
        for t in threads:
            t.join()
        metrics = buffer.metrics()
    for p in range(partitions):
        assert got[p] == [k for k in range(60 * 4096) if k % partitions == p]
    assert metrics["rows_read"] == 60 * 4096
    assert metrics["bytes_spilled"] > 0
    assert not any(spill_root.iterdir())


def test_a_subscription_hands_over_complete_batches_before_the_seal() -> None:
    with arrow_shards.ShardBuffer(SCHEMA, 2) as buffer:
        reader = buffer.subscribe(0)
        assert isinstance(reader, pa.RecordBatchReader)
        buffer.write(0, int_batch(0, 8192, payload=3))  # the compaction target: stored whole
        first = reader.read_next_batch()
        assert keys(first) == list(range(8192))
        assert buffer.metrics()["rows_streamed"] == 8192
        buffer.write(0, int_batch(8192, 10, payload=3))
        buffer.seal(0)
        assert keys(reader.read_all()) == list(range(8192, 8202))
        with pytest.raises(arrow_shards.AlreadyReadError):
            buffer.read(0)
        with pytest.raises(arrow_shards.AlreadyReadError):
            buffer.subscribe(0)


def test_a_minimum_hands_over_the_open_batch_once_it_holds_that_many_rows() -> None:
    with arrow_shards.ShardBuffer(SCHEMA, 1) as buffer:
        reader = buffer.subscribe(0, min_rows=100)
        for first in range(0, 120, 40):  # copied into the open batch: under the target
            buffer.write(0, int_batch(first, 40, payload=3))
        assert keys(reader.read_next_batch()) == list(range(120))
        buffer.write(0, int_batch(120, 10, payload=3))
        buffer.seal(0)
        assert keys(reader.read_all()) == list(range(120, 130))
    with arrow_shards.ShardBuffer(SCHEMA, 1) as buffer:
        with pytest.raises(ValueError, match="min_rows must be 0 or more, got -1"):
            buffer.subscribe(0, min_rows=-1)
        buffer.subscribe(0)  # the refusal claimed nothing


def test_dropping_a_subscription_discards_its_partition() -> None:
    with arrow_shards.ShardBuffer(SCHEMA, 2) as buffer:
        reader = buffer.subscribe(1)
        buffer.write(1, int_batch(0, 8192, payload=3))
        del reader
        buffer.write(1, int_batch(0, 100, payload=3))
        buffer.write(0, int_batch(0, 5, payload=3))
        buffer.finish()
        assert keys(buffer.read(0)) == list(range(5))
        metrics = buffer.close()
    assert metrics["rows_discarded"] == 8292
    assert metrics["reserved"] == 0


def test_closing_ends_a_waiting_subscription() -> None:
    buffer = arrow_shards.ShardBuffer(SCHEMA, 1)
    reader = buffer.subscribe(0)
    outcome: list[BaseException] = []

    def wait() -> None:
        try:
            reader.read_next_batch()
        except BaseException as e:  # noqa: BLE001 - the test inspects it
            outcome.append(e)

    t = threading.Thread(target=wait)
    t.start()
    buffer.close()
    t.join()
    assert len(outcome) == 1 and isinstance(outcome[0], arrow_shards.ClosedError), outcome
