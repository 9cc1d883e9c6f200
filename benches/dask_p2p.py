"""Dask's own P2P shuffle against ``arrow_shards.dask``, side by side in one cluster.

    .venv/bin/python benches/dask_p2p.py LINEITEM.parquet [--runs 3] [--partitions 64 1024]
        [--row-groups N] [--fits 1536MiB] [--spills 350MiB] [--meta] [--threads 1]
        [--table lineitem|plain] [--rows 6001215]

A ``LocalCluster`` of 2 worker processes x ``--threads`` threads (default 1), 4 GiB each. Each
run reads the lineitem table with ``dd.read_parquet`` (the first N row groups, default all;
Utf8View strings come out as pandas strings, so Dask's own P2P can take them), shuffles it on
``l_orderkey`` into each partition count and reduces every output partition with ``len``. Three
cases, interleaved run by run (the machine is shared): Dask's own P2P (its disk buffer),
arrow-shards with a budget where everything fits, and arrow-shards with one that spills about
half. Wall time and peak worker RSS (sampled every 50 ms from this process, the max over both
workers, and above the worker's RSS before the run). Prints every run, then the medians.
``--meta`` adds a fourth case: the "fits" budget with ``output_dtypes="meta"`` (lineitem's
decimal columns come back as their Arrow dtype instead of Python ``Decimal`` objects; its dates
are Arrow in both; not Dask's dtypes, so not comparable row for row, see docs/dask.md).

``--table plain``: the parquet path names a generated table without decimals instead, made
there first if the file does not exist (``make_plain_table``): lineitem's 16 columns and
``--rows`` rows (default SF 1's 6,001,215, in row groups of 131,072 rows as ``arrow-shards gen
lineitem`` writes them), with float64 money columns, timestamps for the dates, short strings,
and a high-cardinality ``l_comment`` string; deterministic (seed 0). It shows the shuffle where
Dask's conversion to pandas is cheap (no ``Decimal`` objects).
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time

import dask
import dask.dataframe as dd
import numpy as np
import psutil
import pyarrow as pa
import pyarrow.parquet as pq
from distributed import Client, LocalCluster

import arrow_shards.dask as asd


class RssSampler:
    def __init__(self, pids: list[int]) -> None:
        self.procs = [psutil.Process(p) for p in pids]
        self.base = max(p.memory_info().rss for p in self.procs)
        self.peak = self.base
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            for p in self.procs:
                try:
                    self.peak = max(self.peak, p.memory_info().rss)
                except psutil.Error:
                    pass

    def stop(self) -> tuple[int, int]:
        self._stop.set()
        self._thread.join()
        return self.peak, self.base


#: SF 1 lineitem's rows, and the rows per row group ``arrow-shards gen lineitem`` writes.
LINEITEM_ROWS = 6_001_215
ROW_GROUP_ROWS = 131_072


def random_strings(rng: np.random.Generator, count: int, shortest: int, longest: int) -> pa.Array:
    """``count`` random lower-case strings of ``shortest`` to ``longest`` characters (with
    spaces), built as Arrow buffers directly (no Python string per value)."""
    lengths = rng.integers(shortest, longest + 1, count)
    offsets = np.zeros(count + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])
    alphabet = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz     ", np.uint8)
    data = alphabet[rng.integers(0, len(alphabet), int(offsets[-1]))]
    return pa.Array.from_buffers(
        pa.string(), count, [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    )


def plain_row_group(rng: np.random.Generator, first: int, count: int) -> pa.Table:
    """Rows ``first`` to ``first + count`` of the generated table: lineitem's columns, no
    decimals."""
    rows = np.arange(first, first + count, dtype=np.int64)
    quantity = rng.integers(1, 51, count).astype(np.float64)
    price = np.round(quantity * rng.integers(90_000, 210_000, count) / 100, 2)
    day = np.datetime64("1992-01-01", "us")
    ship = day + rng.integers(0, 2_500, count).astype("timedelta64[D]")
    commit = ship + rng.integers(-60, 60, count).astype("timedelta64[D]")
    receipt = ship + rng.integers(1, 31, count).astype("timedelta64[D]")

    def pick(values: list[str]) -> pa.Array:
        return pa.DictionaryArray.from_arrays(
            pa.array(rng.integers(0, len(values), count).astype(np.int8)), pa.array(values)
        ).cast(pa.string())

    return pa.table({
        "l_orderkey": rows // 4 * 4 + 1,  # 4 lines an order
        "l_partkey": rng.integers(1, 200_001, count),
        "l_suppkey": rng.integers(1, 10_001, count),
        "l_linenumber": (rows % 4 + 1).astype(np.int32),
        "l_quantity": quantity,
        "l_extendedprice": price,
        "l_discount": rng.integers(0, 11, count) / 100,
        "l_tax": rng.integers(0, 9, count) / 100,
        "l_returnflag": pick(["A", "N", "R"]),
        "l_linestatus": pick(["F", "O"]),
        "l_shipdate": pa.array(ship, pa.timestamp("us")),
        "l_commitdate": pa.array(commit, pa.timestamp("us")),
        "l_receiptdate": pa.array(receipt, pa.timestamp("us")),
        "l_shipinstruct": pick(["DELIVER IN PERSON", "COLLECT COD", "NONE", "TAKE BACK RETURN"]),
        "l_shipmode": pick(["REG AIR", "AIR", "RAIL", "SHIP", "TRUCK", "MAIL", "FOB"]),
        "l_comment": random_strings(rng, count, 10, 43),
    })


def make_plain_table(path: str, rows: int = LINEITEM_ROWS) -> None:
    """Writes the generated table (see the module docs) to ``path``, through a temporary file
    next to it (renamed at the end, so a stopped run leaves no partial table)."""
    rng = np.random.default_rng(0)
    temporary = f"{path}.partial"
    schema = plain_row_group(np.random.default_rng(0), 0, 0).schema
    with pq.ParquetWriter(temporary, schema) as writer:
        for first in range(0, rows, ROW_GROUP_ROWS):
            count = min(ROW_GROUP_ROWS, rows - first)
            writer.write_table(plain_row_group(rng, first, count), row_group_size=count)
    os.replace(temporary, path)


def one_run(client, path, row_groups, partitions, case, budgets) -> tuple[float, int, int, int, int]:
    """Wall s, peak RSS, RSS before, ``bytes_spilled`` and ``bytes_written_to_disk`` (both
    workers; the plugin's totals start again with each registration, so they are this run's)."""
    if case != "dask":
        budget, output_dtypes = budgets[case]
        client.register_plugin(
            asd.ShufflePlugin(memory_limit=budget, output_dtypes=output_dtypes)
        )
    try:
        files = dd.read_parquet(path, split_row_groups=True)
        ddf = files.partitions[:row_groups] if row_groups else files
        shuffled = ddf.shuffle(on="l_orderkey", npartitions=partitions, shuffle_method="p2p")
        pids = list(client.run(lambda: __import__("os").getpid()).values())
        sampler = RssSampler(pids)
        start = time.perf_counter()
        rows = sum(shuffled.map_partitions(len).compute())
        wall = time.perf_counter() - start
        peak, base = sampler.stop()
        spilled = to_disk = 0
        if case != "dask":
            metrics = client.run(asd.metrics).values()
            spilled = sum(m["bytes_spilled"] for m in metrics)
            to_disk = sum(m["bytes_written_to_disk"] for m in metrics)
        assert rows > 0
        return wall, peak, base, spilled, to_disk
    finally:
        if case != "dask":
            client.unregister_worker_plugin(asd.PLUGIN_NAME)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("parquet")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--partitions", type=int, nargs="+", default=[64, 1024])
    parser.add_argument("--row-groups", type=int, default=0)
    parser.add_argument("--fits", default="1536MiB")
    parser.add_argument("--spills", default="350MiB")
    parser.add_argument("--meta", action="store_true")
    parser.add_argument("--threads", type=int, default=1, help="threads per worker")
    parser.add_argument(
        "--table", choices=["lineitem", "plain"], default="lineitem",
        help="plain: the parquet path is a generated table without decimals (made if missing)",
    )
    parser.add_argument("--rows", type=int, default=LINEITEM_ROWS,
                        help="rows of the generated table (--table plain)")
    args = parser.parse_args()
    if args.table == "plain" and not os.path.exists(args.parquet):
        print(f"generating {args.rows} rows without decimals into {args.parquet}", flush=True)
        make_plain_table(args.parquet, args.rows)
    print(f"table: {args.table} ({args.parquet})", flush=True)
    budgets = {
        "arrow-shards fits": (args.fits, "dask"),
        "arrow-shards spills": (args.spills, "dask"),
    }
    if args.meta:
        budgets["arrow-shards fits meta dtypes"] = (args.fits, "meta")
    cases = ["dask", *budgets]
    results: dict[tuple[int, str], list[tuple[float, int, int, int, int]]] = {}
    with (
        dask.config.set({"distributed.scheduler.worker-ttl": None}),
        LocalCluster(
            n_workers=2, threads_per_worker=args.threads, processes=True, memory_limit="4GiB",
            dashboard_address=None,
        ) as cluster,
        Client(cluster) as client,
    ):
        # warm-up, untimed: imports and first connections on the workers
        for case in cases:
            one_run(client, args.parquet, 1, 8, case, budgets)
        for run in range(args.runs):
            for partitions in args.partitions:
                order = cases if run % 2 == 0 else cases[::-1]
                for case in order:
                    r = one_run(client, args.parquet, args.row_groups, partitions, case, budgets)
                    results.setdefault((partitions, case), []).append(r)
                    wall, peak, base, spilled, to_disk = r
                    print(
                        f"run {run} partitions {partitions} {case}: {wall:.2f} s, peak RSS "
                        f"{peak / 2**20:.0f} MiB (before {base / 2**20:.0f}), bytes_spilled "
                        f"{spilled / 2**20:.0f} MiB, written to disk {to_disk / 2**20:.0f} MiB",
                        flush=True,
                    )
    print(
        "\n| partitions | case | wall s (median) | peak worker RSS MiB | RSS before MiB | "
        "above before | written to disk MiB | speed-up over Dask |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|")
    for partitions in args.partitions:
        dask_wall = statistics.median(r[0] for r in results[(partitions, "dask")])
        for case in cases:
            rs = results[(partitions, case)]
            wall = statistics.median(r[0] for r in rs)
            peak = statistics.median(r[1] for r in rs) / 2**20
            before = statistics.median(r[2] for r in rs) / 2**20
            above = statistics.median(r[1] - r[2] for r in rs) / 2**20
            to_disk = statistics.median(r[4] for r in rs) / 2**20
            print(
                f"| {partitions} | {case} | {wall:.2f} | {peak:.0f} | {before:.0f} | "
                f"{above:.0f} | {'-' if case == 'dask' else f'{to_disk:.0f}'} | "
                f"{dask_wall / wall:.2f}x |"
            )


if __name__ == "__main__":
    main()
