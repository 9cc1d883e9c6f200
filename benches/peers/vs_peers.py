"""The CLI against Polars and DuckDB on one job: parquet in, one parquet file per hash
partition out (snappy), interleaved runs, one table of medians.

Each run is a child process; its peak RSS is the child's own (os.wait4's ru_maxrss), its time
the child's wall clock from start to exit, interpreter start and imports included for the
peers (about 0.1-0.3 s of theirs: stated next to the table). Every output directory is removed
after its run. Usage (see vs_peers.sh, which installs the pinned peers):

    python benches/peers/vs_peers.py FILE --cli target/release/arrow-shards [--runs 3]
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

POLARS = """
import sys, polars as pl
src, out, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
lf = pl.scan_parquet(src).with_columns((pl.col("l_orderkey").hash() % n).alias("p"))
lf.sink_parquet(pl.PartitionBy(out, key="p"), compression="snappy", mkdir=True)
"""

DUCKDB = """
import sys, duckdb
src, out, n, memory = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
con = duckdb.connect()
con.execute(f"SET memory_limit='{memory}'")
con.execute("SET threads=2")
con.execute(
    f"COPY (SELECT *, hash(l_orderkey) % {n} AS p FROM read_parquet('{src}')) "
    f"TO '{out}' (FORMAT parquet, COMPRESSION snappy, PARTITION_BY (p))"
)
"""


def run_child(argv, cwd):
    """Runs argv in cwd (DuckDB spills into ./.tmp); (seconds, peak RSS bytes, the --json
    report or None) of the child, or raises on failure."""
    started = time.perf_counter()
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd)
    out = child.stdout.read().decode()
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - started
    child.returncode = os.waitstatus_to_exitcode(status)
    err = child.stderr.read().decode()
    child.stdout.close()
    child.stderr.close()
    if child.returncode != 0:
        raise RuntimeError(f"{argv[0]} failed ({child.returncode}): {err}")
    report = json.loads(out) if out.startswith("{") else None
    return seconds, usage.ru_maxrss * 1024, report


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("file")
    parser.add_argument("--cli", required=True)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--partitions", type=int, nargs="+", default=[64, 1024])
    parser.add_argument("--memory-limit", nargs="+", default=["256MiB"],
                        help="the CLI's limits, one tool each; 'none' runs it without one")
    parser.add_argument("--duckdb-memory", default="256MB",
                        help="DuckDB's memory_limit (its own units: 256MB, 1GB)")
    args = parser.parse_args()

    def ours(limit):
        flags = [] if limit == "none" else ["--memory-limit", limit]
        return lambda out, n: [
            args.cli, "shuffle", args.file, "--key", "l_orderkey", "--partitions", str(n),
            *flags, "--output", out, "--json", "--quiet",
        ]

    tools = {f"arrow-shards {limit}": ours(limit) for limit in args.memory_limit}
    tools["polars"] = lambda out, n: [sys.executable, "-c", POLARS, args.file, out, str(n)]
    tools["duckdb"] = lambda out, n: [sys.executable, "-c", DUCKDB, args.file, out, str(n),
                                      args.duckdb_memory]
    main_tool = next(iter(tools))
    results = {}  # (partitions, tool) -> [(s, rss)]
    reports = {}  # (partitions, tool) -> [the CLI's --json report]
    scratch = tempfile.mkdtemp(prefix="vs-peers-")
    try:
        for run in range(args.runs):
            for n in args.partitions:
                for tool, argv in tools.items():
                    out = os.path.join(scratch, f"{tool.replace(' ', '-')}-{n}")
                    s, rss, report = run_child(argv(out, n), scratch)
                    shutil.rmtree(out, ignore_errors=True)
                    results.setdefault((n, tool), []).append((s, rss))
                    extra = ""
                    if report:
                        reports.setdefault((n, tool), []).append(report)
                        extra = (f" spilled {report['bytes_spilled'] / 1e6:.0f} MB, "
                                 f"{report['rows_out_during_input']} rows out during the input "
                                 f"(done at {report['input_wall_s']:.2f} s), "
                                 f"{report['early_row_group_cuts']} early cuts, "
                                 f"{report['direct_writes']} direct writes")
                    print(f"run {run + 1} {n:>5} {tool:<20} {s:6.2f} s {rss / 2**20:7.0f} MiB"
                          f"{extra}", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    print(f"| partitions | tool | median s (min-max) | median peak RSS MiB (min-max) "
          f"| median MB spilled | {main_tool} / tool |")
    print("|---|---|---|---|---|---|")
    for n in args.partitions:
        ours_s = statistics.median(s for s, _ in results[(n, main_tool)])
        for tool in tools:
            times = [s for s, _ in results[(n, tool)]]
            rsss = [r / 2**20 for _, r in results[(n, tool)]]
            median = statistics.median(times)
            spilled = reports.get((n, tool))
            spilled = (f"{statistics.median(r['bytes_spilled'] for r in spilled) / 1e6:.0f}"
                       if spilled else "-")
            print(f"| {n} | {tool} | {median:.2f} ({min(times):.2f}-{max(times):.2f}) "
                  f"| {statistics.median(rsss):.0f} ({min(rsss):.0f}-{max(rsss):.0f}) "
                  f"| {spilled} | {ours_s / median:.2f}x |")
    small, large = min(args.partitions), max(args.partitions)
    if small != large:
        ratio = (statistics.median(s for s, _ in results[(large, main_tool)])
                 / statistics.median(s for s, _ in results[(small, main_tool)]))
        print(f"\n{main_tool} {large} / {small} partitions: {ratio:.2f}x")


if __name__ == "__main__":
    main()
