"""Dask's P2P receive side on one worker, as a peer for arrow-shards (docs/benchmarks.md).

What `DataFrameShuffleRun` does with received data when `disk=True` (distributed 2026.8), minus
the network: for each received input chunk, the IPC bytes are turned back into a table
(`buffers_to_table`), split by output partition (`split_by_partition`: a sort by the partition
column, then slices), every shard serialized again (`serialize_table`) and handed to
`DiskShardsBuffer.write`, which appends it to one file per output partition; after the inputs
are done and the buffer is flushed, each output partition is read back (`read_from_disk`) and
concatenated. The partition column is computed before the timer starts (Dask computes it on the
sending side). The input is the parquet file `arrow-shards gen lineitem` writes, read into
memory before timing (view strings cast to plain strings: pyarrow has no `take` for them).

    .venv-peers/bin/python benches/peers/dask_disk_buffer.py FILE --partitions 1024 --runs 3

Prints one JSON line per run: seconds, rows, peak RSS of this process.
"""

import argparse
import asyncio
import json
import resource
import tempfile
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from distributed.shuffle._arrow import (
    buffers_to_table,
    concat_tables,
    read_from_disk,
    serialize_table,
)
from distributed.shuffle._disk import DiskShardsBuffer
from distributed.shuffle._limiter import ResourceLimiter
from distributed.shuffle._shuffle import split_by_partition

PARTITION = "_partitions"


def load(path, partitions, chunk_rows):
    table = pq.read_table(path)
    table = table.cast(
        pa.schema(
            [
                pa.field(f.name, pa.string() if f.type == pa.string_view() else f.type)
                for f in table.schema
            ]
        )
    )
    keys = table.column("l_orderkey").to_numpy()
    # a multiplicative hash, as any hash partitioner would spread the keys
    ids = ((keys.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(40)) % np.uint64(
        partitions
    )
    table = table.append_column(PARTITION, pa.array(ids.astype(np.int64)))
    chunks = []
    for i, start in enumerate(range(0, table.num_rows, chunk_rows)):
        # what arrives from the network: (input partition id, IPC bytes)
        chunks.append((i, serialize_table(table.slice(start, chunk_rows))))
    return chunks, table.num_rows


async def run(chunks, partitions, directory):
    limiter = ResourceLimiter(100 * 2**20)  # distributed.p2p.disk default buffer: 100 MiB
    buffer = DiskShardsBuffer(directory=directory, read=read_from_disk, memory_limiter=limiter)
    started = time.perf_counter()
    for chunk in chunks:
        table = buffers_to_table([chunk])
        groups = split_by_partition(table, PARTITION, drop_column=True)
        await buffer.write({str(k): serialize_table(v) for k, v in groups.items()})
    await buffer.flush()
    rows = 0
    for p in range(partitions):
        try:
            tables = buffer.read(str(p))
        except Exception:  # DataUnavailable: an empty partition
            continue
        rows += concat_tables(tables).num_rows
    seconds = time.perf_counter() - started
    await buffer.close()
    return seconds, rows


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("file")
    parser.add_argument("--partitions", type=int, default=1024)
    parser.add_argument("--chunk-rows", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    chunks, total = load(args.file, args.partitions, args.chunk_rows)
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory() as directory:
            seconds, rows = asyncio.run(run(chunks, args.partitions, directory))
        assert rows == total, (rows, total)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        print(
            json.dumps(
                {
                    "peer": "dask DiskShardsBuffer",
                    "partitions": args.partitions,
                    "chunk_rows": args.chunk_rows,
                    "rows": rows,
                    "seconds": round(seconds, 3),
                    "peak_rss_mib": round(peak / 2**20),
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
