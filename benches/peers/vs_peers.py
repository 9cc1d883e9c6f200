"""The CLI against Polars and DuckDB on one job, on equal terms: parquet in, one parquet file
per hash partition out, interleaved runs, one table per codec.

What every engine is asked for (the rules, stated once here and printed above each table):

- the same codec: one table with snappy, one with zstd at level 3 (`--zstd-level`; Polars' and
  DuckDB's default level; the CLI gets `--compression-level`);
- the same columns: every input column is written, the key column (`l_orderkey`) included;
  the partition number is not (Polars `include_key=False`, DuckDB's default for PARTITION_BY);
- the same layout: one directory per partition, `p=N/` (the CLI's `--layout hive --hive-key p`);
- comparable row groups: at most `--row-group-rows` rows (122,880, DuckDB's default; Polars'
  `row_group_size`, DuckDB's ROW_GROUP_SIZE, the CLI's `--row-group-rows`; under a memory
  limit the CLI may cut a row group earlier, at 8,192 rows or more, and DuckDB's value is a
  minimum): the table shows the row groups each engine really wrote;
- statistics per column chunk (the CLI's `--statistics chunk`; Polars `statistics=True`,
  DuckDB always writes them; Polars' files also hold a column index of page statistics, the
  table shows it); DuckDB's bloom filters off (WRITE_BLOOM_FILTER false). The
  table's `stats` column says what the files hold: `chunk` (column chunk statistics),
  `+pages` (page statistics, a column index), `+offsets` (an offset index, which the parquet
  crate always writes), `+bloom` (bloom filters).

Each run is a child process, measured from outside: wall time from start to exit (the peers'
interpreter start and imports included, about 0.1-0.3 s), CPU time as the child's user + sys
(os.wait4's rusage), peak RSS (its ru_maxrss). After each run the outputs' parquet metadata
(pyarrow) gives the output bytes, the files and the row groups per file, and the rows, checked
against the input's; then the output directory is removed. Medians over the runs (min-max for
time). Usage (see vs_peers.sh, which installs the pinned peers):

    python benches/peers/vs_peers.py FILE --cli target/release/arrow-shards [--runs 3]
        [--partitions 64 1024] [--codecs snappy zstd] [--memory-limit 256MiB none]
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

import pyarrow.parquet as pq

POLARS = """
import sys, polars as pl
src, out, n, codec, level, rows = sys.argv[1:7]
n, level, rows = int(n), int(level), int(rows)
pl.scan_parquet(src).sink_parquet(
    pl.PartitionBy(out, key={"p": pl.col("l_orderkey").hash() % n}, include_key=False,
                   approximate_bytes_per_file=None),
    compression=codec, compression_level=level if codec == "zstd" else None,
    statistics=True, row_group_size=rows, mkdir=True)
"""

DUCKDB = """
import sys, duckdb
src, out, n, codec, level, rows, memory, threads = sys.argv[1:9]
con = duckdb.connect()
con.execute(f"SET memory_limit='{memory}'")
con.execute(f"SET threads={threads}")
level = f", COMPRESSION_LEVEL {level}" if codec == "zstd" else ""
con.execute(
    f"COPY (SELECT *, hash(l_orderkey) % {n} AS p FROM read_parquet('{src}')) "
    f"TO '{out}' (FORMAT parquet, COMPRESSION {codec}{level}, ROW_GROUP_SIZE {rows}, "
    f"WRITE_BLOOM_FILTER false, PARTITION_BY (p))"
)
"""


def run_child(argv, cwd):
    """Runs argv in cwd (DuckDB spills into ./.tmp); (wall s, CPU s, peak RSS bytes, the --json
    report or None) of the child, or raises on failure."""
    started = time.perf_counter()
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd)
    out = child.stdout.read().decode()
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - started
    code = os.waitstatus_to_exitcode(status)
    err = child.stderr.read().decode()
    child.stdout.close()
    child.stderr.close()
    if code != 0:
        raise RuntimeError(f"{argv[0]} {' '.join(argv[1:3])} failed ({code}): {err}")
    report = json.loads(out) if out.startswith("{") else None
    return seconds, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024, report


def outputs(out):
    """What the parquet files under `out` hold: bytes, files, row groups per file (list), rows,
    and which statistics and indexes (a set of 'chunk', 'pages', 'offsets', 'bloom')."""
    files = sorted(os.path.join(d, f) for d, _, names in os.walk(out) for f in names
                   if f.endswith(".parquet"))
    groups, rows, size, stats = [], 0, 0, set()
    for path in files:
        meta = pq.read_metadata(path)
        size += os.path.getsize(path)
        rows += meta.num_rows
        groups.append(meta.num_row_groups)
        for g in range(meta.num_row_groups):
            for c in range(meta.num_columns):
                column = meta.row_group(g).column(c)
                if column.is_stats_set:
                    stats.add("chunk")
                if column.has_column_index:
                    stats.add("pages")
                if column.has_offset_index:
                    stats.add("offsets")
                if column.bloom_filter_offset is not None and column.bloom_filter_offset > 0:
                    stats.add("bloom")
    return {"bytes": size, "files": len(files), "groups": groups, "rows": rows, "stats": stats}


def stats_label(stats):
    head = "chunk" if "chunk" in stats else "none"
    return head + "".join(f"+{s}" for s in ("pages", "offsets", "bloom") if s in stats)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("file")
    parser.add_argument("--cli", required=True)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--partitions", type=int, nargs="+", default=[64, 1024])
    parser.add_argument("--codecs", nargs="+", default=["snappy", "zstd"],
                        choices=["snappy", "zstd", "lz4"],
                        help="one table each (lz4: the CLI's LZ4_RAW, Polars' lz4, DuckDB's lz4)")
    parser.add_argument("--zstd-level", type=int, default=3)
    parser.add_argument("--row-group-rows", type=int, default=122_880)
    parser.add_argument("--memory-limit", nargs="+", default=["256MiB"],
                        help="the CLI's limits, one tool each; 'none' runs it without one")
    parser.add_argument("--duckdb-memory", default="256MB",
                        help="DuckDB's memory_limit (its own units: 256MB, 1GB)")
    parser.add_argument("--duckdb-threads", type=int, default=os.cpu_count())
    parser.add_argument("--no-duckdb", action="store_true")
    parser.add_argument("--no-polars", action="store_true")
    args = parser.parse_args()
    # the children run in a scratch directory
    args.file, args.cli = os.path.abspath(args.file), os.path.abspath(args.cli)
    input_rows = pq.read_metadata(args.file).num_rows

    def ours(limit):
        flags = [] if limit == "none" else ["--memory-limit", limit]

        def argv(out, n, codec):
            level = ["--compression-level", str(args.zstd_level)] if codec == "zstd" else []
            return [
                args.cli, "shuffle", args.file, "--key", "l_orderkey", "--partitions", str(n),
                *flags, "--compression", codec, *level,
                "--row-group-rows", str(args.row_group_rows), "--statistics", "chunk",
                "--layout", "hive", "--hive-key", "p", "--output", out, "--json", "--quiet",
            ]
        return argv

    def peer(script, *extra):
        return lambda out, n, codec: [
            sys.executable, "-c", script, args.file, out, str(n), codec, str(args.zstd_level),
            str(args.row_group_rows), *extra,
        ]

    tools = {f"arrow-shards {limit}": ours(limit) for limit in args.memory_limit}
    if not args.no_polars:
        tools["polars"] = peer(POLARS)
    if not args.no_duckdb:
        tools["duckdb " + args.duckdb_memory] = peer(DUCKDB, args.duckdb_memory,
                                                     str(args.duckdb_threads))
    main_tool = next(iter(tools))
    results = {}  # (codec, partitions, tool) -> [dict]
    scratch = tempfile.mkdtemp(prefix="vs-peers-")
    try:
        for run in range(args.runs):
            for codec in args.codecs:
                for n in args.partitions:
                    for tool, argv in tools.items():
                        out = os.path.join(scratch, f"{tool.replace(' ', '-')}-{codec}-{n}")
                        s, cpu, rss, report = run_child(argv(out, n, codec), scratch)
                        files = outputs(out)
                        shutil.rmtree(out, ignore_errors=True)
                        if files["rows"] != input_rows:
                            raise RuntimeError(f"{tool} {codec} {n}: {files['rows']} rows out "
                                               f"of {input_rows}")
                        spilled = report["bytes_spilled"] if report else None
                        results.setdefault((codec, n, tool), []).append(
                            dict(s=s, cpu=cpu, rss=rss, spilled=spilled, **files))
                        extra = f", {spilled / 1e6:.0f} MB spilled" if report else ""
                        print(f"run {run + 1} {codec:<6} {n:>5} {tool:<22} {s:6.2f} s, "
                              f"CPU {cpu:6.2f} s, {rss / 2**20:5.0f} MiB, "
                              f"{files['bytes'] / 1e6:.1f} MB in {files['files']} files, "
                              f"{sum(files['groups'])} row groups{extra}",
                              file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    med = statistics.median
    for codec in args.codecs:
        level = f" level {args.zstd_level}" if codec == "zstd" else ""
        print(f"\n{codec}{level}; at most {args.row_group_rows:,} rows per row group; every "
              f"input column written, the partition number not; medians of {args.runs}\n")
        print("| partitions | tool | wall s (min-max) | CPU s (user+sys) | peak RSS MiB "
              "| output MB | files | row groups per file (min/median/max) | stats "
              f"| MB spilled | {main_tool} / tool (wall) |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for n in args.partitions:
            ours_s = med(r["s"] for r in results[(codec, n, main_tool)])
            for tool in tools:
                rs = results[(codec, n, tool)]
                times = [r["s"] for r in rs]
                groups = sorted(g for r in rs[:1] for g in r["groups"])
                spilled = [r["spilled"] for r in rs if r["spilled"] is not None]
                spilled = f"{med(spilled) / 1e6:.0f}" if spilled else "-"
                print(f"| {n} | {tool} | {med(times):.2f} ({min(times):.2f}-{max(times):.2f}) "
                      f"| {med(r['cpu'] for r in rs):.2f} "
                      f"| {med(r['rss'] for r in rs) / 2**20:.0f} "
                      f"| {med(r['bytes'] for r in rs) / 1e6:.1f} "
                      f"| {rs[0]['files']} "
                      f"| {groups[0]}/{med(groups):g}/{groups[-1]} "
                      f"| {stats_label(rs[0]['stats'])} | {spilled} "
                      f"| {ours_s / med(times):.2f}x |")


if __name__ == "__main__":
    main()
