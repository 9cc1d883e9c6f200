#!/usr/bin/env bash
# The CLI's output writers streaming during the input against waiting for its end,
# SF 1 lineitem under 256 MiB, interleaved; one line of --json figures per run
# (docs/benchmarks.md, "The main job as a pipeline"). Modes: `auto` (the hook unset: the
# switch decides), `0` (ARROW_SHARDS_HOLD_WRITERS=0: streaming forced), `1` (held until the
# input ends).
# Usage: bash benches/pipeline_ab.sh   (with CARGO_TARGET_DIR set as for the release build)
# Environment: RUNS (3), PARTS ("64 1024"), MODES ("auto 0 1"), LIMIT (256MiB), FLAGS (more
# shuffle flags, e.g. "--dictionary-limit off").
B=${CARGO_TARGET_DIR:-target}/release/arrow-shards
RUNS=${RUNS:-3}
PARTS=${PARTS:-64 1024}
MODES=${MODES:-auto 0 1}
LIMIT=${LIMIT:-256MiB}
uptime
for round in $(seq "$RUNS"); do
 for n in $PARTS; do
  for mode in $MODES; do
   rm -rf /tmp/wt-cli-ab-out
   if [ "$mode" = auto ]; then hook=(env -u ARROW_SHARDS_HOLD_WRITERS); else hook=(env ARROW_SHARDS_HOLD_WRITERS="$mode"); fi
   # shellcheck disable=SC2086
   r=$("${hook[@]}" "$B" shuffle /tmp/arrow-shards-lineitem-sf1.parquet --key l_orderkey --partitions "$n" --memory-limit "$LIMIT" $FLAGS --output /tmp/wt-cli-ab-out --json --quiet)
   echo "round $round n $n mode $mode $(echo "$r" | python3 -c "import json,sys; r=json.load(sys.stdin); r['peak_rss_mib']=round(r['peak_rss']/2**20); print(' '.join(f'{k}={r[k]}' for k in ['total_s','input_wall_s','bytes_spilled','peak_rss_mib','peak_reserved','rows_out_during_input','early_row_group_cuts','read_input_s','write_s','write_wait_s','read_s','output_s']))")"
  done
 done
done
rm -rf /tmp/wt-cli-ab-out
uptime
