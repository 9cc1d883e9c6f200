"""The soak (``scripts/dask_soak.py``) at a small scale: a ``dask scheduler`` and two
``dask worker --preload arrow_shards.dask`` processes run at least 5 shuffles and merges while
at least 2 worker processes are killed with SIGKILL; every completed result equals Dask's own
P2P result on the same data, no spill directory is left (the workers spill under one shared
directory, so a killed process's directories are the next process's sweep to remove), and no
worker's RSS passes its memory limit + 10%. The script is the check; the test runs it and reads
its summary.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import REPO

pytest.importorskip("distributed")

SCRIPT = REPO / "scripts" / "dask_soak.py"


def test_a_short_soak_with_killed_workers_equals_dasks_own_and_leaves_nothing(tmp_path):
    summary = tmp_path / "summary.json"
    command = [
        sys.executable, str(SCRIPT), "--shuffles", "5", "--kills", "2", "--workers", "2",
        "--kill-every", "2", "--rows", "20000", "--partitions", "8", "--shared-spill-dir",
        "--timeout", "120", "--root", str(tmp_path / "soak"), "--json", str(summary),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-6000:]
    result = json.loads(summary.read_text())
    assert result["completed"] >= 5, result
    assert sum(result["kills"].values()) >= 2, result
    for problem in ("mismatches", "hung", "leftovers", "rss_breaches", "problems"):
        assert result[problem] == [], (problem, result)
    assert result["rss_samples"] > 0, result
