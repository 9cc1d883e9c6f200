#!/usr/bin/env bash
# The Python half of the README's test command: brings the virtual environment up to date
# (making it if missing, see setup-venv.sh), then runs the pytest suite (tests/) in it.
#
#   bash crates/python/test.sh [PYTEST ARGS...]
#
# The environment is $ARROW_SHARDS_VENV, default .venv at the root of the checkout. Fails on
# any failing test, and also when pytest collects no test at all (its exit status 5).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
venv="${ARROW_SHARDS_VENV:-$root/.venv}"

bash "$here/setup-venv.sh" "$venv"

cd "$here"
status=0
"$venv/bin/python" -m pytest tests "$@" || status=$?
if [ "$status" -eq 5 ]; then
  echo "test.sh: pytest collected no tests (exit status 5); that is a failure" >&2
  exit 1
fi
exit "$status"
