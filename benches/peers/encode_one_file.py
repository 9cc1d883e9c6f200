"""One parquet file of the whole table, written by the CLI's parquet writer
and by Polars, side by side; runs interleaved, medians, then what differs in the files.

The CLI writes one partition (`shuffle FILE --key l_orderkey --partitions 1 --output DIR
--json`): its `output_s` is the time spent encoding and writing (one output thread; without a
limit it overlaps the input), its `total_s` the whole run. Polars reads the file first
(`pl.read_parquet`, not timed) and times `write_parquet(OUT, compression=...)` alone, on all
its threads. Usage (the venv of setup-venv.sh):

    .venv-peers/bin/python benches/peers/encode_one_file.py FILE --cli BIN [--runs 3] \
        [--variant NAME=FLAGS ...]
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
import json, sys, time, polars as pl
src, out, codec = sys.argv[1], sys.argv[2], sys.argv[3]
t = time.perf_counter(); df = pl.read_parquet(src); read = time.perf_counter() - t
t = time.perf_counter(); df.write_parquet(out, compression=codec); write = time.perf_counter() - t
print(json.dumps({"read_s": read, "write_s": write}))
"""

DEFAULT_VARIANTS = [
    "cli default=",
    "cli dict off=--dictionary-limit off",
    "cli dict 64KiB=--dictionary-limit 64KiB",
    "cli stats chunk=--statistics chunk",
    "cli stats none=--statistics none",
    "cli no codec=--compression none",
]


def run(argv):
    started = time.perf_counter()
    child = subprocess.run(argv, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if child.returncode != 0:
        raise RuntimeError(f"{argv} failed: {child.stderr}")
    return seconds, json.loads(child.stdout)


def describe(path):
    """Per column: encodings, dictionary page, statistics, compressed bytes; row groups."""
    import pyarrow.parquet as pq
    meta = pq.ParquetFile(path).metadata
    cols = {}
    for g in range(meta.num_row_groups):
        rg = meta.row_group(g)
        for c in range(rg.num_columns):
            col = rg.column(c)
            d = cols.setdefault(col.path_in_schema, {"bytes": 0, "raw": 0, "enc": set(),
                                                     "dict": 0, "stats": 0})
            d["bytes"] += col.total_compressed_size
            d["raw"] += col.total_uncompressed_size
            d["enc"].update(col.encodings)
            d["dict"] += col.has_dictionary_page
            d["stats"] += col.is_stats_set
    groups = meta.num_row_groups
    return meta, groups, cols


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("file")
    parser.add_argument("--cli", required=True)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--variant", action="append",
                        help="NAME=FLAGS of a CLI run (default: a set of writer choices)")
    parser.add_argument("--polars-codec", nargs="+", default=["snappy"])
    args = parser.parse_args()
    variants = [v.split("=", 1) for v in (args.variant or DEFAULT_VARIANTS)]
    scratch = tempfile.mkdtemp(prefix="encode-one-")
    times = {}
    files = {}
    try:
        for r in range(args.runs):
            for name, flags in variants:
                out = os.path.join(scratch, name.replace(" ", "-"))
                shutil.rmtree(out, ignore_errors=True)
                s, rep = run([args.cli, "shuffle", args.file, "--key", "l_orderkey",
                              "--partitions", "1", *flags.split(), "--output", out,
                              "--json", "--quiet"])
                times.setdefault(name, []).append((rep["output_s"], rep["total_s"],
                                                   rep["peak_rss"]))
                files[name] = os.path.join(out, "part-00000.parquet")
                print(f"run {r + 1} {name:<16} output {rep['output_s']:.2f} s, total "
                      f"{rep['total_s']:.2f} s", file=sys.stderr, flush=True)
            for codec in args.polars_codec:
                name = f"polars {codec}"
                out = os.path.join(scratch, f"polars-{codec}.parquet")
                s, rep = run([sys.executable, "-c", POLARS, args.file, out, codec])
                times.setdefault(name, []).append((rep["write_s"], s, None))
                files[name] = out
                print(f"run {r + 1} {name:<16} write {rep['write_s']:.2f} s (read "
                      f"{rep['read_s']:.2f} s)", file=sys.stderr, flush=True)
        print("| writer | encode+write s, median (min-max) | whole run s | file MB | row groups "
              "| columns with a dictionary page |")
        print("|---|---|---|---|---|---|")
        described = {}
        for name in times:
            enc = [t[0] for t in times[name]]
            total = [t[1] for t in times[name]]
            meta, groups, cols = describe(files[name])
            described[name] = cols
            size = os.path.getsize(files[name]) / 1e6
            with_dict = sum(1 for d in cols.values() if d["dict"])
            print(f"| {name} | {statistics.median(enc):.2f} ({min(enc):.2f}-{max(enc):.2f}) "
                  f"| {statistics.median(total):.2f} | {size:.1f} | {groups} "
                  f"| {with_dict} of {len(cols)} |")
        print()
        names = list(described)
        print("| column | " + " | ".join(f"{n}: MB, encodings" for n in names) + " |")
        print("|---|" + "---|" * len(names))
        for col in described[names[0]]:
            cells = []
            for n in names:
                d = described[n].get(col)
                if d is None:
                    cells.append("-")
                    continue
                enc = ",".join(sorted(e.replace("_DICTIONARY", "_DICT") for e in d["enc"]))
                cells.append(f"{d['bytes'] / 1e6:.1f}, {enc}{'' if d['stats'] else ', no stats'}")
            print(f"| {col} | " + " | ".join(cells) + " |")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
