#!/usr/bin/env bash
# Runs distributed's own DataFrame P2P tests (distributed/shuffle/tests/test_shuffle.py and
# test_merge.py) twice: without arrow-shards, and with it turned on by the preload
# configuration alone (DASK_DISTRIBUTED__WORKER__PRELOAD='["arrow_shards.dask"]'), then
# compares the outcomes test by test.
#
#   bash crates/python/dask_upstream_tests.sh SRC [without|with|both] [PYTEST ARGS...]
#
# SRC is a source tree of distributed (a git checkout or archive: the sdist on PyPI has no
# tests) whose distributed/shuffle/*.py must equal the installed, pinned distributed's; the
# script refuses another. Tests are copied into a scratch directory (nothing of them is kept
# in this repository) and made importable as distributed.shuffle.tests, next to the installed
# package; pytest runs there with distributed's own pytest settings (warnings are errors) minus
# the pytest-timeout keys, slow tests skipped as in distributed's CI without --runslow, and
# with --tb=native (pytest's own traceback formatting stopped a run with an INTERNALERROR,
# CPython 3.11's "AST constructor recursion depth mismatch").
# Results: $OUT (default /tmp/arrow-shards-dask-upstream)/{without,with}.xml and .log, and a
# summary of the counts and of every test whose outcome differs.
#
# The environment is $ARROW_SHARDS_VENV, default .venv at the root of the checkout (made by
# setup-venv.sh). Exits non-zero if a test passes without the buffer and fails with it.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
venv="${ARROW_SHARDS_VENV:-$root/.venv}"
py="$venv/bin/python"
src="$(cd "${1:?usage: dask_upstream_tests.sh SRC [without|with|both] [PYTEST ARGS...]}" && pwd)"
mode="${2:-both}"
shift $(( $# >= 2 ? 2 : 1 ))
out="${OUT:-/tmp/arrow-shards-dask-upstream}"

installed="$("$py" -c 'import distributed, os; print(os.path.dirname(distributed.__file__))')"
for f in "$installed"/shuffle/*.py; do
  if ! cmp -s "$f" "$src/distributed/shuffle/$(basename "$f")"; then
    echo "dask_upstream_tests: $src/distributed/shuffle/$(basename "$f") differs from the installed" \
      "distributed $("$py" -c 'import distributed; print(distributed.__version__)'): wrong source tree" >&2
    exit 2
  fi
done

run="$(mktemp -d)"
trap 'rm -rf "$run"' EXIT
mkdir -p "$run/ext/tests" "$out"
for f in __init__.py utils.py test_shuffle.py test_merge.py; do
  cp "$src/distributed/shuffle/tests/$f" "$run/ext/tests/$f"
done
cat >"$run/conftest.py" <<'EOF'
"""Written by arrow-shards' dask_upstream_tests.sh: makes the copied tests importable as
``distributed.shuffle.tests`` and loads distributed's test fixtures."""
import os

import distributed.shuffle

distributed.shuffle.__path__.append(os.path.join(os.path.dirname(__file__), "ext"))

from distributed.utils_test import *  # noqa: E402,F401,F403  (the fixtures)

import pytest  # noqa: E402

ARROW_SHARDS_RUNS = []


def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", help="run slow tests")


def pytest_collection_modifyitems(config, items):
    if not config.getoption("--runslow"):
        for item in items:
            if "slow" in item.keywords:
                item.add_marker(pytest.mark.skip(reason="need --runslow option to run"))


def pytest_configure(config):
    if os.environ.get("ARROW_SHARDS_UPSTREAM_MODE") == "with":
        # count the runs built with arrow-shards: evidence the preload took effect
        from arrow_shards.dask._run import ArrowShardsShuffleRun

        init = ArrowShardsShuffleRun.__init__

        def counted(self, *args, **kwargs):
            init(self, *args, **kwargs)
            ARROW_SHARDS_RUNS.append(1)

        ArrowShardsShuffleRun.__init__ = counted


def pytest_terminal_summary(terminalreporter):
    if os.environ.get("ARROW_SHARDS_UPSTREAM_MODE") == "with":
        terminalreporter.write_line(f"arrow-shards shuffle runs built: {len(ARROW_SHARDS_RUNS)}")
EOF
"$py" - "$src/pyproject.toml" "$run/pytest.ini" <<'EOF'
import sys, tomllib
options = tomllib.load(open(sys.argv[1], "rb"))["tool"]["pytest"]["ini_options"]
addopts = [o for o in options["addopts"].split() if o not in ("--strict-config", "--color=yes")]
with open(sys.argv[2], "w") as ini:
    ini.write("[pytest]\naddopts = " + " ".join(addopts) + "\n")
    ini.write("filterwarnings =\n" + "".join(f"    {w}\n" for w in options["filterwarnings"]))
    ini.write("markers =\n" + "".join(f"    {m}\n" for m in options["markers"]))
EOF

one() {
  local which="$1"; shift
  echo "dask_upstream_tests: running $which arrow-shards (log: $out/$which.log)"
  local status=0
  (
    cd "$run"
    if [ "$which" = with ]; then
      export DASK_DISTRIBUTED__WORKER__PRELOAD='["arrow_shards.dask"]'
    else
      unset DASK_DISTRIBUTED__WORKER__PRELOAD
    fi
    ARROW_SHARDS_UPSTREAM_MODE="$which" "$py" -m pytest --import-mode=importlib -p no:cacheprovider --tb=native \
      --junitxml="$out/$which.xml" ext/tests/test_shuffle.py ext/tests/test_merge.py "$@"
  ) >"$out/$which.log" 2>&1 || status=$?
  tail -n 3 "$out/$which.log"
  [ "$status" -le 1 ] || { echo "dask_upstream_tests: pytest exited with $status" >&2; exit "$status"; }
}
case "$mode" in
  without|with) one "$mode" "$@" ;;
  both) one without "$@"; one with "$@" ;;
  *) echo "dask_upstream_tests: mode is without, with or both, not $mode" >&2; exit 2 ;;
esac

"$py" - "$out" <<'EOF'
import os, sys, xml.etree.ElementTree as ET
out = sys.argv[1]

def outcomes(which):
    path = os.path.join(out, f"{which}.xml")
    if not os.path.exists(path):
        return None
    found = {}
    for case in ET.parse(path).iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        kinds = {child.tag for child in case}
        found[name] = ("failed" if kinds & {"failure", "error"} else
                       "skipped" if "skipped" in kinds else "passed")
    return found

runs = {w: outcomes(w) for w in ("without", "with")}
for which, found in runs.items():
    if found is not None:
        counts = {k: sum(v == k for v in found.values()) for k in ("passed", "failed", "skipped")}
        print(f"{which} arrow-shards: {len(found)} tests, " + ", ".join(f"{v} {k}" for k, v in counts.items()))
if all(runs.values()):
    worse = sorted(n for n, o in runs["without"].items() if o == "passed" and runs["with"].get(n) != "passed")
    better = sorted(n for n, o in runs["with"].items() if o == "passed" and runs["without"].get(n) != "passed")
    for n in worse:
        print(f"passes without, not with: {n}")
    for n in better:
        print(f"passes with, not without: {n}")
    sys.exit(1 if worse else 0)
EOF
