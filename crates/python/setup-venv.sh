#!/usr/bin/env bash
# Makes the Python environment of arrow-shards and installs the package `arrow_shards` into it.
#
#   bash crates/python/setup-venv.sh [DIR]
#
# DIR defaults to .venv at the root of the checkout. The virtual environment is made with
# `python3` (or $PYTHON; 3.11 is what the lock was made with) if DIR has none; the tools are
# installed from the lock next to this script (requirements-dev.txt: maturin, pytest, pyarrow,
# polars, pandas, numpy and their dependencies, every version pinned, nothing else); then the
# package is built and installed with `maturin develop --release`. Only the package registry
# is needed. Running it again brings an existing environment back to the lock and rebuilds the
# package (incrementally), so it is also how the tests get an up-to-date build.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
venv="${1:-$root/.venv}"
python="${PYTHON:-python3}"

if [ ! -x "$venv/bin/python" ]; then
  echo "setup-venv: making $venv with $("$python" --version 2>&1)"
  "$python" -m venv "$venv"
fi
echo "setup-venv: installing the pinned tools into $venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps \
  -r "$here/requirements-dev.txt"
"$venv/bin/python" -m pip check --disable-pip-version-check >/dev/null \
  || { "$venv/bin/python" -m pip check; echo "setup-venv: the lock is incomplete"; exit 1; }

echo "setup-venv: building arrow_shards (maturin develop --release)"
VIRTUAL_ENV="$venv" PATH="$venv/bin:$PATH" \
  "$venv/bin/maturin" develop --release --manifest-path "$here/Cargo.toml"
"$venv/bin/python" -c 'import arrow_shards; print("setup-venv: arrow_shards", arrow_shards.__version__, "from", arrow_shards.__file__)'
