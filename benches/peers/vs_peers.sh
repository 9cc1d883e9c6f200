#!/usr/bin/env bash
# The CLI's main job against Polars and DuckDB (docs/benchmarks.md, "The CLI against Polars
# and DuckDB"): the SF 1 lineitem file hash-partitioned on l_orderkey into 64 and 1024 parquet
# files, snappy, by the release CLI under --memory-limit 256MiB, Polars (sink_parquet with
# PartitionBy, no limit) and DuckDB (COPY ... PARTITION_BY, memory_limit 256MB, 2 threads),
# interleaved, RUNS runs each; one table of medians.
# Usage: bash benches/peers/vs_peers.sh [RUNS [vs_peers.py flags]]   (makes .venv-peers with the
# pinned peers), e.g. `bash benches/peers/vs_peers.sh 3 --memory-limit 256MiB none` (the
# CLI under 256 MiB and without a limit).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
runs="${1:-3}"
shift || true
file=/tmp/arrow-shards-lineitem-sf1.parquet
cli="${CARGO_TARGET_DIR:-$root/target}/release/arrow-shards"
venv="$(bash "$root/benches/peers/setup-venv.sh" | tail -1)"
cargo build -q --release -p arrow-shards-cli --manifest-path "$root/Cargo.toml"
[ -f "$file" ] || "$cli" gen lineitem --scale 1 --output "$file"
"$venv/bin/python" "$root/benches/peers/vs_peers.py" "$file" --cli "$cli" --runs "$runs" "$@"
