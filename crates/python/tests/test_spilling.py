"""Spilling under a small memory limit with 4 writer threads and 1 reader thread.

Each writer owns 4 of the 16 partitions and writes numbered rows to them, sealing each
partition after its last batch; the reader reads each partition as soon as it is sealed (half
of them whole, half streamed) while the others are still written. Every row must come back
exactly once, each writer's rows in write order, with bytes spilled, and the spill directory
must be empty after close.
"""

from __future__ import annotations

import queue
import threading
from pathlib import Path

import pyarrow as pa

import arrow_shards

WRITERS = 4
PARTITIONS = 16
BATCHES_PER_PARTITION = 24
ROWS = 500
PAYLOAD = 96  # bytes per row: a batch is ~50 KiB, everything ~19 MiB against a 2 MiB limit

SCHEMA = pa.schema([("writer", pa.int32()), ("seq", pa.int64()), ("payload", pa.string())])


def batch(writer: int, first: int) -> pa.RecordBatch:
    seqs = range(first, first + ROWS)
    return pa.record_batch(
        [
            pa.array([writer] * ROWS, pa.int32()),
            pa.array(seqs, pa.int64()),
            pa.array([f"{writer}:{s}:".ljust(PAYLOAD, "x") for s in seqs]),
        ],
        schema=SCHEMA,
    )


def test_four_writers_one_reader_under_a_small_limit(spill_root: Path) -> None:
    sealed: queue.Queue[int | None] = queue.Queue()
    errors: list[BaseException] = []
    read: dict[int, pa.Table] = {}

    buffer = arrow_shards.ShardBuffer(
        SCHEMA, PARTITIONS, memory_limit="2MiB", spill_dir=spill_root, read_batch_rows=1000
    )

    def writer(w: int) -> None:
        try:
            mine = [p for p in range(PARTITIONS) if p % WRITERS == w]
            seq = 0
            for i in range(BATCHES_PER_PARTITION):
                for p in mine:
                    # The writer's rows are numbered in the order it writes them.
                    data = batch(w, seq)
                    seq += ROWS
                    if i % 2:
                        buffer.write(p, data)
                    else:  # half through the scatter write, all rows to p
                        buffer.write_partitioned(data, pa.array([p] * ROWS, pa.uint32()))
                    if i == BATCHES_PER_PARTITION - 1:
                        buffer.seal(p)
                        sealed.put(p)
        except BaseException as e:  # noqa: BLE001 - reported by the test
            errors.append(e)
            sealed.put(None)

    def reader() -> None:
        try:
            for _ in range(PARTITIONS):
                p = sealed.get(timeout=120)
                if p is None:
                    return
                if p % 2:
                    read[p] = buffer.read(p)
                else:
                    reader = buffer.read_batches(p)
                    read[p] = pa.Table.from_batches(list(reader), schema=SCHEMA)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(w,), daemon=True) for w in range(WRITERS)]
    threads.append(threading.Thread(target=reader, daemon=True))
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
        assert not t.is_alive(), "a thread hung"
    assert not errors, errors

    metrics = buffer.metrics()
    assert metrics["bytes_spilled"] > 0
    assert metrics["spill_runs"] > 0
    assert metrics["peak_reserved"] > 0
    assert sorted(read) == list(range(PARTITIONS))

    total = WRITERS * (PARTITIONS // WRITERS) * BATCHES_PER_PARTITION * ROWS
    seen: set[tuple[int, int]] = set()
    for p, table in read.items():
        assert table.schema.equals(SCHEMA)
        writers = set(table.column("writer").to_pylist())
        assert writers == {p % WRITERS}, "a partition has exactly its writer's rows"
        seqs = table.column("seq").to_pylist()
        assert seqs == sorted(seqs), f"partition {p} out of write order"
        payloads = table.column("payload").to_pylist()
        assert all(v.startswith(f"{p % WRITERS}:{s}:") for s, v in zip(seqs, payloads))
        for s in seqs:
            seen.add((p % WRITERS, s))
        assert len(seqs) == BATCHES_PER_PARTITION * ROWS
    assert len(seen) == total, "every row exactly once"

    final = buffer.close()
    assert final["rows_read"] == total and final["rows_written"] == total
    assert final["reserved"] == 0
    assert list(spill_root.iterdir()) == [], "the spill directory is removed on close"


def test_memory_comes_back_as_batches_are_streamed(spill_root: Path) -> None:
    """``read_batches`` hands batches over one at a time: the memory reserved in the pool (the
    reader's share included) falls as they are consumed, not only at the end."""
    with arrow_shards.ShardBuffer(SCHEMA, 1, read_batch_rows=0, compact_target_rows=0) as buffer:
        for i in range(4):
            buffer.write(0, batch(0, i * ROWS))
        buffer.finish()
        reader = buffer.read_batches(0)
        before = buffer.metrics()["pool_reserved"]
        first = reader.read_next_batch()
        after_one = buffer.metrics()["pool_reserved"]
        assert first.num_rows == ROWS
        assert 0 < after_one < before
        rest = reader.read_all()
        assert rest.num_rows == 3 * ROWS
        assert buffer.metrics()["pool_reserved"] == 0


def test_a_shared_memory_pool(spill_root: Path) -> None:
    pool = arrow_shards.MemoryPool("1MiB")
    a = arrow_shards.ShardBuffer(SCHEMA, 2, memory_pool=pool, spill_dir=spill_root)
    b = arrow_shards.ShardBuffer(SCHEMA, 2, memory_pool=pool, spill_dir=spill_root)
    for i in range(20):
        a.write(i % 2, batch(1, i * ROWS))
        b.write(i % 2, batch(2, i * ROWS))
    a.wait_for_spills()
    b.wait_for_spills()
    assert pool.limit == 1 << 20
    assert a.metrics()["pool_reserved"] == pool.reserved
    assert a.metrics()["bytes_spilled"] + b.metrics()["bytes_spilled"] > 0
    a.finish()
    b.finish()
    assert sum(a.read(p).num_rows + b.read(p).num_rows for p in range(2)) == 40 * ROWS
    a.close()
    b.close()
    assert pool.reserved == 0
    assert list(spill_root.iterdir()) == []
