"""The CLI against Polars and DuckDB on one job: parquet in, one parquet file per hash
partition out (snappy), interleaved runs, one table of medians.

Each run is a child process; its peak RSS is the child's own (os.wait4's ru_maxrss), its time
the child's wall clock from start to exit, interpreter start and imports included for the
peers (about 0.1-0.3 s of theirs: stated next to the table). Every output directory is removed
after its run. Usage (see vs_peers.sh, which installs the pinned peers):

    python benches/peers/vs_peers.py FILE --cli target/release/arrow-shards [--runs 3]
"""

import argparse
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
src, out, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
con = duckdb.connect()
con.execute("SET memory_limit='256MB'")
con.execute("SET threads=2")
con.execute(
    f"COPY (SELECT *, hash(l_orderkey) % {n} AS p FROM read_parquet('{src}')) "
    f"TO '{out}' (FORMAT parquet, COMPRESSION snappy, PARTITION_BY (p))"
)
"""


def run_child(argv):
    """Runs argv; (seconds, peak RSS bytes) of the child, or raises on failure."""
    started = time.perf_counter()
    child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - started
    child.returncode = os.waitstatus_to_exitcode(status)
    err = child.stderr.read().decode()
    child.stderr.close()
    if child.returncode != 0:
        raise RuntimeError(f"{argv[0]} failed ({child.returncode}): {err}")
    return seconds, usage.ru_maxrss * 1024


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("file")
    parser.add_argument("--cli", required=True)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--partitions", type=int, nargs="+", default=[64, 1024])
    parser.add_argument("--memory-limit", default="256MiB")
    args = parser.parse_args()

    tools = {
        "arrow-shards": lambda out, n: [
            args.cli, "shuffle", args.file, "--key", "l_orderkey", "--partitions", str(n),
            "--memory-limit", args.memory_limit, "--output", out, "--quiet",
        ],
        "polars": lambda out, n: [sys.executable, "-c", POLARS, args.file, out, str(n)],
        "duckdb": lambda out, n: [sys.executable, "-c", DUCKDB, args.file, out, str(n)],
    }
    results = {}  # (partitions, tool) -> [(s, rss)]
    scratch = tempfile.mkdtemp(prefix="vs-peers-")
    try:
        for run in range(args.runs):
            for n in args.partitions:
                for tool, argv in tools.items():
                    out = os.path.join(scratch, f"{tool}-{n}")
                    s, rss = run_child(argv(out, n))
                    shutil.rmtree(out, ignore_errors=True)
                    results.setdefault((n, tool), []).append((s, rss))
                    print(f"run {run + 1} {n:>5} {tool:<13} {s:6.2f} s {rss / 2**20:7.0f} MiB",
                          file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    print(f"| partitions | tool | median s (min-max) | median peak RSS MiB | ours / tool |")
    print("|---|---|---|---|---|")
    for n in args.partitions:
        ours = statistics.median(s for s, _ in results[(n, "arrow-shards")])
        for tool in tools:
            times = [s for s, _ in results[(n, tool)]]
            rss = statistics.median(r for _, r in results[(n, tool)]) / 2**20
            median = statistics.median(times)
            print(f"| {n} | {tool} | {median:.2f} ({min(times):.2f}-{max(times):.2f}) "
                  f"| {rss:.0f} | {ours / median:.2f}x |")
    small, large = min(args.partitions), max(args.partitions)
    if small != large:
        ratio = (statistics.median(s for s, _ in results[(large, "arrow-shards")])
                 / statistics.median(s for s, _ in results[(small, "arrow-shards")]))
        print(f"\narrow-shards {large} / {small} partitions: {ratio:.2f}x")


if __name__ == "__main__":
    main()
