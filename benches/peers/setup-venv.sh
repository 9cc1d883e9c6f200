#!/usr/bin/env bash
# Makes the peer-benchmark venv (default: .venv-peers at the checkout root) with the pinned
# peers of benches/peers/requirements.txt. Usage: bash benches/peers/setup-venv.sh [DIR]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
venv="${1:-$root/.venv-peers}"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip
"$venv/bin/python" -m pip install -q -r "$here/requirements.txt"
echo "$venv"
