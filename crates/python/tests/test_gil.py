"""The GIL is released while a writer waits for memory.

A writer blocks on a full buffer (spilling off, a long ``write_timeout``) until the main thread
reads a partition and so frees memory. A second Python thread counts meanwhile. If the writer
held the GIL while it waits, neither the counter nor the main thread could run: the writer would
time out, its write would be refused, and the test fails (after ``WAIT_S``). No timing is
asserted: only that the counter moved and the write succeeded after the read.
"""

from __future__ import annotations

import threading
import time

import pyarrow as pa

import arrow_shards
from conftest import int_batch, keys

ROWS = 8192  # 64 KiB of int64: stored as written (the compaction target)
#: How long the blocked writer may wait: it only bounds the failure when the GIL is held.
WAIT_S = 60.0


def test_a_waiting_writer_lets_other_threads_run() -> None:
    limit = ROWS * 8 + ROWS * 4  # room for one batch, not two
    buffer = arrow_shards.ShardBuffer(
        pa.schema([("k", pa.int64())]), 2, memory_limit=limit, spill=False, write_timeout=WAIT_S
    )
    buffer.write(0, int_batch(0, ROWS))

    outcome: dict[str, object] = {}
    started = threading.Event()
    finished = threading.Event()

    def writer() -> None:
        started.set()
        try:
            buffer.write(1, int_batch(ROWS, ROWS))  # must wait: memory is full
            outcome["result"] = "written"
        except BaseException as e:  # noqa: BLE001
            outcome["result"] = e
        finished.set()

    count = 0
    stop = threading.Event()

    def counter() -> None:
        nonlocal count
        while not stop.is_set():
            count += 1
            time.sleep(0.001)  # each step gives the GIL away, so the writer gets in at once

    counting = threading.Thread(target=counter, daemon=True)
    writing = threading.Thread(target=writer, daemon=True)
    try:
        counting.start()
        writing.start()
        started.wait()
        at_start = count
        # Progress of the counter while the writer is (or is about to be) waiting.
        while count < at_start + 50 and not finished.is_set():
            time.sleep(0.001)
        assert not finished.is_set(), f"the writer finished before memory was freed: {outcome}"
        progress = count - at_start

        buffer.seal(0)
        assert keys(buffer.read(0)) == list(range(ROWS))  # frees the room the writer waits for
        writing.join(WAIT_S * 2)
    finally:
        stop.set()
        counting.join()

    assert outcome.get("result") == "written", outcome
    assert progress >= 50
    metrics = buffer.metrics()
    assert metrics["write_wait"] > 0, "the writer waited for memory"
    buffer.finish()
    assert keys(buffer.read(1)) == list(range(ROWS, 2 * ROWS))
    buffer.close()


def test_threads_write_and_read_at_once() -> None:
    """Several Python threads use one buffer at the same time (writes and reads release the
    GIL; the class is thread-safe)."""
    buffer = arrow_shards.ShardBuffer(pa.schema([("k", pa.int64())]), 8)
    errors: list[BaseException] = []

    def work(t: int) -> None:
        try:
            for i in range(50):
                buffer.write(t, int_batch(t * 1000 + i * 10, 10))
            buffer.seal(t)
            assert keys(buffer.read(t)) == list(range(t * 1000, t * 1000 + 500))
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,), daemon=True) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert buffer.close()["rows_read"] == 8 * 500
