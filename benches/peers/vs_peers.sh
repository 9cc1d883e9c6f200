#!/usr/bin/env bash
# The CLI's main job against Polars and DuckDB on equal terms (docs/benchmarks.md, "The CLI
# against Polars and DuckDB"): the SF 1 lineitem file hash-partitioned on l_orderkey into 64
# and 1024 parquet files, one table with snappy and one with zstd level 3, every engine with
# the same columns (the partition number not written), at most 122,880 rows per row group and
# column chunk statistics (vs_peers.py states the rules): the release CLI under
# --memory-limit 256MiB, Polars (sink_parquet with PartitionBy, no limit) and DuckDB (COPY ...
# PARTITION_BY, memory_limit 256MB), interleaved, RUNS runs each; wall and CPU time, peak RSS,
# output bytes and row groups per file, medians.
# Usage: bash benches/peers/vs_peers.sh [RUNS [vs_peers.py flags]]   (makes the venv of the
# pinned peers: .venv-peers at the checkout root, or PEERS_VENV), e.g.
# `bash benches/peers/vs_peers.sh 3 --memory-limit 256MiB none` (the CLI under 256 MiB and
# without a limit), `... 3 --codecs zstd --partitions 64` (one table, one partition count).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
runs="${1:-3}"
shift || true
file=/tmp/arrow-shards-lineitem-sf1.parquet
cli="${CARGO_TARGET_DIR:-$root/target}/release/arrow-shards"
venv="$(bash "$root/benches/peers/setup-venv.sh" ${PEERS_VENV:+"$PEERS_VENV"} | tail -1)"
cargo build -q --release -p arrow-shards-cli --manifest-path "$root/Cargo.toml"
[ -f "$file" ] || "$cli" gen lineitem --scale 1 --output "$file"
"$venv/bin/python" "$root/benches/peers/vs_peers.py" "$file" --cli "$cli" --runs "$runs" "$@"
