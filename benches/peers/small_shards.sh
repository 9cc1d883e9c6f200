#!/usr/bin/env bash
# The small-shard targets of docs/benchmarks.md, side by side in one run: the release CLI on
# the SF 1 lineitem file at 64/1024/4096 partitions under a 256 MiB limit (and 1024 with no
# limit), then Dask's disk buffer (benches/peers/dask_disk_buffer.py) at 1024 partitions.
# Usage: bash benches/peers/small_shards.sh [RUNS]   (needs bash benches/peers/setup-venv.sh)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
runs="${1:-3}"
file=/tmp/arrow-shards-lineitem-sf1.parquet
cli="$root/target/release/arrow-shards"
cargo build -q --release -p arrow-shards-cli --manifest-path "$root/Cargo.toml"
[ -f "$file" ] || "$cli" gen lineitem --scale 1 --output "$file"
summary='import json,sys; d=json.loads(sys.stdin.read()); print(json.dumps({"partitions": int(sys.argv[1]), "limit": sys.argv[2], "seconds": d["total_s"], "peak_rss_mib": round(d["peak_rss"]/2**20), "peak_reserved_mib": round(d["peak_reserved"]/2**20), "spilled_mib": round(d["bytes_spilled"]/2**20)}))'
for run in $(seq "$runs"); do
  for p in 64 1024 4096; do
    "$cli" shuffle "$file" --key l_orderkey --partitions "$p" --memory-limit 256MiB --json --quiet \
      | python3 -c "$summary" "$p" 256MiB
  done
  "$cli" shuffle "$file" --key l_orderkey --partitions 1024 --json --quiet | python3 -c "$summary" 1024 none
  "$root/.venv-peers/bin/python" "$root/benches/peers/dask_disk_buffer.py" "$file" --partitions 1024 --runs 1
done
