"""Dask's own P2P shuffle against ``arrow_shards.dask``, side by side in one cluster.

    .venv/bin/python benches/dask_p2p.py LINEITEM.parquet [--runs 3] [--partitions 64 1024]
        [--row-groups N] [--fits 1536MiB] [--spills 350MiB] [--meta] [--threads 1]

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
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time

import dask
import dask.dataframe as dd
import psutil
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
    args = parser.parse_args()
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
