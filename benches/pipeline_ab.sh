#!/usr/bin/env bash
# Issue #34: the CLI streaming its output during the input against writing it after (the test hook
# ARROW_SHARDS_HOLD_WRITERS=1), SF 1 lineitem under 256 MiB, interleaved, two rounds; one line
# of --json figures per run (docs/benchmarks.md, "The main job as a pipeline").
# Usage: bash benches/pipeline_ab.sh   (with CARGO_TARGET_DIR set as for the release build)
B=${CARGO_TARGET_DIR:-target}/release/arrow-shards
uptime
for round in 1 2; do
 for n in 64 1024; do
  for hold in 0 1; do
   rm -rf /tmp/wt-cli-ab-out
   r=$(ARROW_SHARDS_HOLD_WRITERS=$hold $B shuffle /tmp/arrow-shards-lineitem-sf1.parquet --key l_orderkey --partitions $n --memory-limit 256MiB --output /tmp/wt-cli-ab-out --json --quiet)
   echo "round $round n $n hold $hold $(echo "$r" | python3 -c "import json,sys; r=json.load(sys.stdin); print(' '.join(f'{k}={r[k]}' for k in ['total_s','input_wall_s','bytes_spilled','peak_rss','rows_out_during_input','read_input_s','write_s','write_wait_s','read_s','output_s']))")"
  done
 done
done
rm -rf /tmp/wt-cli-ab-out
uptime
