"""The Python API against the Rust API, in one process, on the same batches.

Writes the TPC-H lineitem table (``arrow-shards gen lineitem``) into a ShardBuffer hashed by
``l_orderkey`` and reads every partition back, at each partition count, two ways:

- ``write``: pre-split shards (each input batch sorted by partition and sliced, outside the
  timing), one ``write(p, shard)`` call per shard;
- ``write_partitioned``: one ``write_partitioned(batch, ids)`` call per input batch.

The same work runs through the Rust API (``arrow_shards._native._bench_rust_*``: the same
``ShardBuffer`` calls made from Rust on the same imported batches, so the difference is the
Python layer: the call, the PyCapsule import, the GIL hand-offs, and the export of each read
partition to a ``pyarrow.Table``). Memory is unlimited unless ``--memory-limit`` is given, so
the figures are the buffer's in-memory path. Prints one line per case and run, then a summary
(medians) as a Markdown table.

    cargo run --release -p arrow-shards-cli -- gen lineitem --scale 1 --output /tmp/lineitem-sf1.parquet
    bash crates/python/setup-venv.sh
    .venv/bin/python benches/python_bench.py /tmp/lineitem-sf1.parquet
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import arrow_shards
from arrow_shards import _native


def partition_ids(batch: pa.RecordBatch, partitions: int) -> np.ndarray:
    """``hash(l_orderkey) % partitions`` as uint32 (a multiplicative hash, seeded by nothing)."""
    keys = batch.column("l_orderkey").to_numpy().astype(np.uint64)
    hashed = (keys * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(32)
    return (hashed % np.uint64(partitions)).astype(np.uint32)


def without_views(schema: pa.Schema) -> pa.Schema:
    """pyarrow's `take` has no kernel for views: sort as plain strings, then cast back."""
    return pa.schema(
        [f.with_type(pa.string()) if f.type == pa.string_view() else f for f in schema],
        metadata=schema.metadata,
    )


def split(batch: pa.RecordBatch, ids: np.ndarray, partitions: int) -> list[tuple[int, pa.RecordBatch]]:
    """The batch's rows grouped by partition (stable), as slices of one sorted batch."""
    order = np.argsort(ids, kind="stable")
    plain = without_views(batch.schema)
    ordered = batch.cast(plain).take(pa.array(order)).cast(batch.schema)
    counts = np.bincount(ids, minlength=partitions)
    shards, offset = [], 0
    for p in range(partitions):
        n = int(counts[p])
        if n:
            shards.append((p, ordered.slice(offset, n)))
        offset += n
    return shards


@dataclass
class Case:
    partitions: int
    mode: str
    python: list[tuple[float, float]] = field(default_factory=list)
    rust: list[tuple[float, float]] = field(default_factory=list)


def python_write(shards, partitions: int, memory_limit: int | None) -> tuple[float, float, int]:  # noqa: ANN001
    buffer = arrow_shards.ShardBuffer(shards[0][1].schema, partitions, memory_limit=memory_limit)
    start = time.perf_counter()
    for p, shard in shards:
        buffer.write(p, shard)
    written = time.perf_counter()
    rows = read_all(buffer)
    return written - start, time.perf_counter() - written, rows


def python_write_partitioned(batches, ids, partitions: int, memory_limit: int | None) -> tuple[float, float, int]:  # noqa: ANN001
    buffer = arrow_shards.ShardBuffer(batches[0].schema, partitions, memory_limit=memory_limit)
    start = time.perf_counter()
    for batch, batch_ids in zip(batches, ids):
        buffer.write_partitioned(batch, batch_ids)
    written = time.perf_counter()
    rows = read_all(buffer)
    return written - start, time.perf_counter() - written, rows


def read_all(buffer: arrow_shards.ShardBuffer) -> int:
    buffer.finish()
    rows = 0
    for p in range(buffer.num_partitions):
        rows += buffer.read(p).num_rows  # a pyarrow.Table, dropped at once
    buffer.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("input", help="lineitem parquet file (arrow-shards gen lineitem)")
    parser.add_argument("--partitions", default="64,1024", help="comma-separated counts")
    parser.add_argument("--runs", type=int, default=3, help="runs of each case (median reported)")
    parser.add_argument("--memory-limit", type=int, default=None, help="bytes; default unlimited")
    args = parser.parse_args()

    table = pq.read_table(args.input)
    batches = table.to_batches()
    print(
        f"input: {table.num_rows} rows, {len(batches)} batches, {table.nbytes / 2**20:.0f} MiB in "
        f"Arrow; pyarrow {pa.__version__}, arrow_shards {arrow_shards.__version__}"
    )
    cases: list[Case] = []
    for partitions in [int(p) for p in args.partitions.split(",")]:
        ids_np = [partition_ids(b, partitions) for b in batches]
        ids = [pa.array(i) for i in ids_np]
        shards = [s for b, i in zip(batches, ids_np) for s in split(b, i, partitions)]
        print(f"{partitions} partitions: {len(shards)} pre-split shards")
        write_case = Case(partitions, "write (pre-split shards)")
        scatter_case = Case(partitions, "write_partitioned")
        for run in range(args.runs):
            # Alternate which side goes first, so neither always runs on a warmer machine.
            order = ("rust", "python") if run % 2 == 0 else ("python", "rust")
            for side in order:
                gc.collect()
                if side == "rust":
                    r = _native._bench_rust_write(shards, partitions, memory_limit=args.memory_limit)
                    w, rd, rows = r["write"], r["read"], r["rows"]
                    write_case.rust.append((w, rd))
                else:
                    w, rd, rows = python_write(shards, partitions, args.memory_limit)
                    write_case.python.append((w, rd))
                assert rows == table.num_rows, rows
                print(f"  run {run} {side:6} write          write {w:6.3f} s  read {rd:6.3f} s")
            for side in order:
                gc.collect()
                if side == "rust":
                    r = _native._bench_rust_write_partitioned(batches, ids, partitions, memory_limit=args.memory_limit)
                    w, rd, rows = r["write"], r["read"], r["rows"]
                    scatter_case.rust.append((w, rd))
                else:
                    w, rd, rows = python_write_partitioned(batches, ids, partitions, args.memory_limit)
                    scatter_case.python.append((w, rd))
                assert rows == table.num_rows, rows
                print(f"  run {run} {side:6} partitioned    write {w:6.3f} s  read {rd:6.3f} s")
        cases += [write_case, scatter_case]
        del shards

    print()
    print("| partitions | write path | Python write + read (s) | Rust write + read (s) | Python / Rust |")
    print("|---:|---|---:|---:|---:|")
    for c in cases:
        py = [w + r for w, r in c.python]
        rs = [w + r for w, r in c.rust]
        pw, pr = statistics.median(w for w, _ in c.python), statistics.median(r for _, r in c.python)
        rw, rr = statistics.median(w for w, _ in c.rust), statistics.median(r for _, r in c.rust)
        ratio = statistics.median(py) / statistics.median(rs)
        print(
            f"| {c.partitions} | {c.mode} | {statistics.median(py):.3f} ({pw:.3f} + {pr:.3f}) "
            f"| {statistics.median(rs):.3f} ({rw:.3f} + {rr:.3f}) | {ratio:.2f}x |"
        )


if __name__ == "__main__":
    main()
