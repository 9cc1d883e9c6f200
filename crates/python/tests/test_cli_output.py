"""The `arrow-shards shuffle` command's output read back by pyarrow's own readers: a hive
layout (`--layout hive`) as a partitioned parquet dataset, and the caps per file from the
parquet metadata (docs/cli.md). The command is the workspace's debug build (see `cli`)."""

from __future__ import annotations

import os
import subprocess
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from conftest import REPO


def cli() -> Path:
    """The `arrow-shards` command: the debug build if it is newer than every Rust source of the
    workspace's crates (as after the README's test command, whose Rust tests build it), else
    built now (`cargo build -p arrow-shards-cli`: its features may differ from the test
    build's, so it is not asked for when the test build is fresh)."""
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    exe = target / "debug" / "arrow-shards"
    sources = [REPO / "Cargo.lock", *REPO.glob("crates/*/src/**/*.rs")]
    newest = max(p.stat().st_mtime for p in sources)
    if not exe.exists() or exe.stat().st_mtime < newest:
        subprocess.run(
            ["cargo", "build", "--quiet", "-p", "arrow-shards-cli"], cwd=REPO, check=True
        )
    return exe


def shuffle(tmp_path: Path, *options: str) -> tuple[pa.Table, Path]:
    """Writes 10,000 rows (`k` 0..9999, a string `v`) and shuffles them into 4 partitions on
    `k` with `options`; returns the input and the output directory."""
    table = pa.table(
        {
            "k": pa.array(range(10_000), pa.int64()),
            "v": pa.array([f"row {i}" for i in range(10_000)]),
        }
    )
    source = tmp_path / "in.parquet"
    pq.write_table(table, source)
    out = tmp_path / "out"
    command = [str(cli()), "shuffle", str(source), "--key", "k", "--partitions", "4"]
    subprocess.run([*command, *options, "--quiet", "--output", str(out)], check=True)
    return table, out


def test_a_hive_layout_reads_back_as_a_partitioned_dataset(tmp_path: Path) -> None:
    table, out = shuffle(tmp_path, "--layout", "hive", "--max-rows-per-file", "1000")
    assert sorted(p.name for p in out.iterdir()) == [f"partition={p}" for p in range(4)]
    read = ds.dataset(out, format="parquet", partitioning="hive").to_table()
    assert read.schema.field("partition").type == pa.int32()
    # Every row once, whatever its partition.
    rows = Counter(zip(read["k"].to_pylist(), read["v"].to_pylist()))
    assert rows == Counter(zip(table["k"].to_pylist(), table["v"].to_pylist()))
    # Each key in exactly one partition, and that partition's directory holds all its rows.
    partition_of: dict[int, set[int]] = {}
    for k, p in zip(read["k"].to_pylist(), read["partition"].to_pylist()):
        partition_of.setdefault(k, set()).add(p)
    assert all(len(ps) == 1 for ps in partition_of.values())
    assert len({p for ps in partition_of.values() for p in ps}) > 1


def test_the_rows_cap_per_file_holds_in_the_parquet_metadata(tmp_path: Path) -> None:
    _, out = shuffle(tmp_path, "--max-rows-per-file", "1000", "--row-group-rows", "300")
    files = sorted(out.glob("*.parquet"))
    assert files, "no output file"
    total = 0
    for f in files:
        meta = pq.read_metadata(f)
        assert meta.num_rows <= 1000, f"{f.name}: {meta.num_rows} rows"
        groups = [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]
        assert all(rows <= 300 for rows in groups), f"{f.name}: row groups {groups}"
        total += meta.num_rows
    assert total == 10_000
