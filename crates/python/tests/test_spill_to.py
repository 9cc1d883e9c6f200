"""Spilling past a local quota to an S3-compatible server (moto's, started per test by the
``s3`` fixture of conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import arrow_shards
from conftest import objects

SCHEMA = pa.schema([("seq", pa.int64()), ("payload", pa.string())])


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
