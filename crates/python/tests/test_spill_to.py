"""Spilling past a local quota to an S3-compatible server (moto's, started per test).

Without ``moto_server`` on PATH (``pip install 'moto[server]'``) the test is skipped, except
under ``CI=true``, where that is a failure.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

import arrow_shards

SCHEMA = pa.schema([("seq", pa.int64()), ("payload", pa.string())])


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A moto server with bucket ``spill``; yields its endpoint, the AWS_* variables set."""
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


def test_runs_past_the_local_quota_go_to_the_object_store(s3: str, tmp_path: Path) -> None:
    buffer = arrow_shards.ShardBuffer(
        SCHEMA,
        4,
        memory_limit="1MiB",
        spill_dir=tmp_path,
        spill_quota="256KiB",
        spill_to="s3://spill/python",
        max_spill_round_bytes="256KiB",
    )
    written: dict[int, list[int]] = {p: [] for p in range(4)}
    for i in range(200):
        p = i % 4
        seqs = list(range(i * 500, i * 500 + 500))
        payload = pa.array([f"{s}".ljust(64, "x") for s in seqs])
        buffer.write(p, pa.record_batch([pa.array(seqs), payload], schema=SCHEMA))
        written[p].extend(seqs)
    buffer.finish()
    for p in range(4):
        table = buffer.read(p)
        assert table.column("seq").to_pylist() == written[p]
    metrics = buffer.metrics()
    assert metrics["overflow_runs"] > 0, metrics
    assert metrics["spill_runs"] > 0, metrics
    buffer.close()
    assert not any(tmp_path.iterdir())
    assert objects(s3) == 0


def test_a_bad_spill_to_names_the_url(tmp_path: Path) -> None:
    with pytest.raises(arrow_shards.ConfigError, match="ftp://nowhere"):
        arrow_shards.ShardBuffer(
            SCHEMA, 2, memory_limit="1MiB", spill_dir=tmp_path, spill_to="ftp://nowhere/x"
        )
