#!/usr/bin/env python3
"""The release CLI's small-shard runs, binaries side by side, in interleaved rounds.

    python3 benches/cli_ab.py ROUNDS SPILLDIR BIN [BIN ...]

Each round runs every BIN (order reversed every other round) on the SF 1 lineitem file at 64,
1024 and 4096 partitions, in that order: `/usr/bin/time BIN shuffle
/tmp/arrow-shards-lineitem-sf1.parquet --key l_orderkey --partitions N --memory-limit 256MiB
--quiet`, plus `--spill-dir SPILLDIR` unless SPILLDIR is `-` (the default spill directory).
Prints, per binary and partition count, the medians of wall and user+sys seconds, the peak RSS
range and every run's wall time, then the ratios of the medians to 64 partitions (the
small-shards issue's targets: <= 1.3x at 1024, <= 2x at 4096). Nothing but the standard
library; the file is made by `arrow-shards gen lineitem --scale 1 --output ...`.
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile

FILE = "/tmp/arrow-shards-lineitem-sf1.parquet"
PARTITIONS = ["64", "1024", "4096"]


def run(binary: str, partitions: str, spill_dir: str) -> tuple[float, float, int]:
    """Wall s, user+sys s and peak RSS MiB of one run."""
    with tempfile.NamedTemporaryFile("r") as out:
        cmd = ["/usr/bin/time", "-f", "%e %U %S %M", "-o", out.name, binary, "shuffle", FILE,
               "--key", "l_orderkey", "--partitions", partitions, "--memory-limit", "256MiB",
               "--quiet"]
        if spill_dir != "-":
            cmd += ["--spill-dir", spill_dir]
        subprocess.run(cmd, check=True)
        wall, user, system, rss_kib = out.read().split()[-4:]
    return float(wall), float(user) + float(system), int(rss_kib) // 1024


def main() -> None:
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    rounds, spill_dir, binaries = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
    results: dict[tuple[str, str], list[tuple[float, float, int]]] = {}
    for r in range(rounds):
        for binary in binaries if r % 2 == 0 else binaries[::-1]:
            for partitions in PARTITIONS:
                results.setdefault((binary, partitions), []).append(
                    run(binary, partitions, spill_dir))
    for binary in binaries:
        name = os.path.basename(binary)
        wall = {p: statistics.median(x[0] for x in results[(binary, p)]) for p in PARTITIONS}
        for p in PARTITIONS:
            runs = results[(binary, p)]
            cpu = statistics.median(x[1] for x in runs)
            rss = [x[2] for x in runs]
            print(f"{name} {p:>5} wall {wall[p]:.2f} cpu {cpu:.2f} rss {min(rss)}-{max(rss)} MiB "
                  f"walls {[x[0] for x in runs]}")
        print(f"{name} ratios 1024/64 {wall['1024'] / wall['64']:.2f}x "
              f"4096/64 {wall['4096'] / wall['64']:.2f}x")


if __name__ == "__main__":
    main()
