"""Shared helpers of the arrow_shards tests.

Tests make no timing assertions: waits are for conditions, bounded by generous deadlines that
only turn a hang into a failure.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pytest

import arrow_shards

#: The root of the repository (tests read a few Rust sources to check the API mirrors them).
REPO = Path(__file__).resolve().parents[3]

#: Upper bound for waiting on a condition that should hold almost at once.
DEADLINE_S = 60.0


@pytest.fixture
def spill_root(tmp_path: Path) -> Iterator[Path]:
    """A directory for one buffer's spill directory; the test checks it is empty afterwards."""
    root = tmp_path / "spill"
    root.mkdir()
    yield root


def int_batch(first: int, rows: int, payload: int = 0) -> pa.RecordBatch:
    """Rows ``first..first+rows`` as ``k: int64`` and, with ``payload``, ``v: string`` of that
    many bytes per row."""
    columns = {"k": pa.array(range(first, first + rows), pa.int64())}
    if payload:
        columns["v"] = pa.array([f"{i:0{payload}d}"[-payload:] for i in range(first, first + rows)])
    return pa.record_batch(columns)


def keys(table: pa.Table | pa.RecordBatch) -> list[int]:
    return table.column("k").to_pylist()


def wait_until(condition: Callable[[], bool], what: str) -> None:
    """Waits (sleeping, so other threads run) until ``condition()`` holds."""
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.002)


def spill_until_on_disk(buffer: arrow_shards.ShardBuffer) -> None:
    """Waits until no partition is being spilled, so the files on disk are complete."""
    wait_until(
        lambda: not any(s["spilling"] for s in buffer.partition_sizes()),
        "the spiller to finish its round",
    )


def ci() -> bool:
    return os.environ.get("CI") == "true"


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A moto S3 server (``pip install 'moto[server]'``) on a free localhost port with bucket
    ``spill``; yields its endpoint, with the AWS_* variables set for it. Skipped without
    ``moto_server`` on PATH, except under ``CI=true``, where that fails."""
    program = shutil.which("moto_server")
    if program is None:
        message = "no moto_server on PATH (pip install 'moto[server]')"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    endpoint = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [program, "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(urllib.request.Request(f"{endpoint}/spill", method="PUT"))
                break
            except OSError:
                assert time.monotonic() < deadline, "moto_server did not start"
                time.sleep(0.1)
        for name, value in {
            "AWS_ACCESS_KEY_ID": "test",
            "AWS_SECRET_ACCESS_KEY": "test",
            "AWS_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ALLOW_HTTP": "true",
        }.items():
            monkeypatch.setenv(name, value)
        yield endpoint
    finally:
        server.kill()
        server.wait()


def objects(endpoint: str) -> int:
    with urllib.request.urlopen(f"{endpoint}/spill?list-type=2") as response:
        return response.read().decode().count("<Key>")




def objects(endpoint: str) -> int:
    """Objects in the bucket ``spill`` of the server at ``endpoint``."""
    with urllib.request.urlopen(f"{endpoint}/spill?list-type=2") as response:
        return response.read().decode().count("<Key>")
