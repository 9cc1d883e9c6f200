#!/usr/bin/env bash
# DataFusion's own SQL test suite with the exchange on.
#
# Runs every .slt file that datafusion-sqllogictest 55.2 ships twice through its DataFusion
# engine: in the plain TestContext (4 target partitions) and with with_shard_repartition
# replacing every hash and round-robin RepartitionExec (min_output_partitions 0). Prints the
# counts; writes results.tsv (a row a file) and differences.md (every record that passes
# without the rule and fails with it, EXPLAIN plan text listed apart) into the output
# directory. Exit status 1 if a file passing without the rule differs in more than plan text.
#
#   integrations/datafusion/sqllogictest.sh [--out DIR] [--jobs N] [--timeout SECS]
#       [--mode streaming|materialize] [FILTER...]
#
# FILTER: a substring of the file path (`window`, `joins.slt`). Not in CI: the two runs take
# longer than CI's 45 minutes on a small machine (docs/datafusion.md has the time).
#
# The files read data from a DataFusion checkout, as in DataFusion's repository:
# datafusion/core/tests/data, testing/ (arrow-testing) and parquet-testing/ (submodules).
# DATAFUSION_SRC names such a checkout (tag 55.2.0, with submodules); unset, the script clones
# it once into $SLT_WORK/datafusion-55.2.0. Files whose data is missing fail without the rule
# and are counted as such.
#
# Environment: DATAFUSION_SRC, SLT_WORK (default: $CARGO_TARGET_DIR/sqllogictest, else
# sqllogictest/target/sqllogictest), CARGO_TARGET_DIR.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
crate="$here/sqllogictest"
target="${CARGO_TARGET_DIR:-$crate/target}"
mkdir -p "$target"
target="$(cd "$target" && pwd)"
export CARGO_TARGET_DIR="$target"
work="${SLT_WORK:-$target/sqllogictest}"
mkdir -p "$work"
work="$(cd "$work" && pwd)"

src="${DATAFUSION_SRC:-}"
if [[ -z "$src" ]]; then
    src="$work/datafusion-55.2.0"
    if [[ ! -d "$src/datafusion/core/tests/data" ]]; then
        echo "cloning apache/datafusion 55.2.0 (with submodules) into $src" >&2
        git clone --quiet --depth 1 --branch 55.2.0 --recurse-submodules --shallow-submodules \
            https://github.com/apache/datafusion "$src"
    fi
fi
src="$(cd "$src" && pwd)"
for dir in datafusion/core/tests/data testing/data parquet-testing/data; do
    [[ -d "$src/$dir" ]] || echo "warning: $src/$dir is missing; the files reading it will fail" >&2
done

echo "building arrow-shards-sqllogictest" >&2
cargo build --locked --manifest-path "$crate/Cargo.toml"
bin="$target/debug/arrow-shards-sqllogictest"

# the .slt files and their own data/ from the crate itself
package_dir() {
    cargo metadata --locked --format-version 1 --manifest-path "$crate/Cargo.toml" |
        python3 -c 'import json, os, sys
meta = json.load(sys.stdin)
print(next(os.path.dirname(p["manifest_path"]) for p in meta["packages"]
           if p["name"] == sys.argv[1] and p["version"] == sys.argv[2]))' "$1" "$2"
}
slt="$(package_dir datafusion-sqllogictest 55.2.0)"
arrow_source="$(package_dir datafusion-datasource-arrow 55.2.0)"
[[ -d "$slt/test_files" ]] || { echo "no test_files in $slt" >&2; exit 2; }

# a tree laid out like DataFusion's repository, so that the files' relative paths
# (../core/tests/data, ../../testing, ...) resolve; test_files is copied, not linked, because
# the files write into test_files/scratch
run="$work/run"
rm -rf "$run"
mkdir -p "$run/datafusion/sqllogictest" "$run/datafusion/core/tests" \
    "$run/datafusion/datasource-arrow/tests"
cp -R "$slt/test_files" "$slt/data" "$run/datafusion/sqllogictest/"
chmod -R u+w "$run/datafusion/sqllogictest"
ln -s "$src/datafusion/core/tests/data" "$run/datafusion/core/tests/data"
if [[ -d "$src/datafusion/datasource-arrow/tests/data" ]]; then
    ln -s "$src/datafusion/datasource-arrow/tests/data" "$run/datafusion/datasource-arrow/tests/data"
else
    ln -s "$arrow_source/tests/data" "$run/datafusion/datasource-arrow/tests/data"
fi
ln -s "$src/testing" "$run/testing"
ln -s "$src/parquet-testing" "$run/parquet-testing"

out="$work/results"
args=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --out) out="$2"; shift 2 ;;
        *) args+=("$1"); shift ;;
    esac
done
mkdir -p "$out"
out="$(cd "$out" && pwd)"

cd "$run/datafusion/sqllogictest"
start=$(date +%s)
status=0
ARROW_TEST_DATA="$run/testing/data" PARQUET_TEST_DATA="$run/parquet-testing/data" \
    "$bin" --out "$out" ${args[@]+"${args[@]}"} || status=$?
echo "took $(( $(date +%s) - start )) s; data from $src" >&2
exit "$status"
