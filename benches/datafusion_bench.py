#!/usr/bin/env python3
"""DataFusion's own RepartitionExec against ShardRepartitionExec, side by side in one run.

    python3 benches/datafusion_bench.py FILE.parquet [--runs 3] [--partitions 64,1024]

Builds integrations/datafusion's `repartition_bench` example (release, feature
`parquet-bench`), then runs it once per case and round, rounds interleaved (the order of the
cases reversed every other round), each run its own process. A case: output partitions N, the
session's memory pool (none, or a 256 MiB FairSpillPool / GreedyMemoryPool), how the outputs
are driven (`all` at once, or `sequential`: one after another, as a next stage reads them) and
the exchange (DataFusion's, ours streaming (the default), ours with the barrier
(`ExchangeMode::Materialize`)). Prints every run's JSON line, then one table of medians (time, peak RSS, spilled
bytes) with ours over DataFusion's for the same case. Nothing but the standard library.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CRATE = ROOT / "integrations" / "datafusion"
EXE = CRATE / "target" / "release" / "examples" / "repartition_bench"


def cases(partitions: list[int]) -> list[tuple[int, str, str]]:
    out = []
    for n in partitions:
        for pool in ("none", "fair:256"):
            out.append((n, pool, "all"))
    big = max(partitions)
    out.append((big, "greedy:256", "all"))
    for pool in ("none", "fair:256"):
        out.append((big, pool, "sequential"))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--partitions", default="64,1024")
    args = parser.parse_args()
    subprocess.run(
        ["cargo", "build", "--release", "-q", "--features", "parquet-bench",
         "--example", "repartition_bench"],
        cwd=CRATE, check=True,
    )
    todo = [
        (n, pool, drive, exchange)
        for (n, pool, drive) in cases([int(p) for p in args.partitions.split(",")])
        for exchange in ("datafusion", "shards", "shards-barrier")
    ]
    results: dict[tuple, list[dict]] = {c: [] for c in todo}
    for round_ in range(args.runs):
        order = todo if round_ % 2 == 0 else list(reversed(todo))
        for n, pool, drive, exchange in order:
            cmd = [str(EXE), args.file, "--exchange", exchange, "--partitions", str(n),
                   "--pool", pool, "--drive", drive]
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode != 0:
                line = {"error": done.stderr.strip().splitlines()[-1:] or ["?"]}
                print(f"run {round_} {n} {pool} {drive} {exchange}: FAILED {line['error'][0]}",
                      flush=True)
            else:
                line = json.loads(done.stdout.strip().splitlines()[-1])
                print(f"run {round_} {json.dumps(line)}", flush=True)
            results[(n, pool, drive, exchange)].append(line)

    print()
    print("| N | pool | drive | exchange | time s (median) | peak RSS MiB | spilled MiB |"
          " ours / DataFusion time |")
    print("|---:|---|---|---|---:|---:|---:|---:|")
    for n, pool, drive, exchange in todo:
        ok = [r for r in results[(n, pool, drive, exchange)] if "error" not in r]
        failed = len(results[(n, pool, drive, exchange)]) - len(ok)
        if not ok:
            print(f"| {n} | {pool} | {drive} | {exchange} | failed x{failed} | | | |")
            continue
        t = statistics.median(r["seconds"] for r in ok)
        rss = statistics.median(r["peak_rss"] for r in ok) / 2**20
        spilled = statistics.median(r["spilled_bytes"] for r in ok) / 2**20
        ratio = ""
        if exchange.startswith("shards"):
            theirs = [r for r in results[(n, pool, drive, "datafusion")] if "error" not in r]
            if theirs:
                ratio = f"{t / statistics.median(r['seconds'] for r in theirs):.2f}x"
        rows = {r["rows"] for r in ok}
        note = f" (rows {sorted(rows)})" if len(rows) != 1 else ""
        note += f" ({failed} failed)" if failed else ""
        print(f"| {n} | {pool} | {drive} | {exchange}{note} | {t:.2f} | {rss:.0f} |"
              f" {spilled:.0f} | {ratio} |")


if __name__ == "__main__":
    sys.exit(main())
