"""``arrow_shards.dask`` on a cluster started the way deployments start one: a
``dask scheduler`` process and two ``dask worker SCHEDULER --preload arrow_shards.dask``
processes (each a nanny and its worker process) over TCP on the loopback. A shuffle equals
Dask's own P2P output; a worker process killed with SIGKILL in the middle of a shuffle still
gives that result and leaves no spill directory in the scratch space.

Every process is started in a session of its own and its whole process group is killed when
the module's tests end, whether they passed or not.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

dask = pytest.importorskip("dask")
distributed = pytest.importorskip("distributed")

import dask.dataframe as dd  # noqa: E402
import pandas as pd  # noqa: E402
from distributed import Client, futures_of  # noqa: E402

import arrow_shards.dask as asd  # noqa: E402
from dask_helpers import (  # noqa: E402
    frame,
    gated,
    local_directories,
    no_active_runs,
    output_partitions,
    spill_dirs_under,
    wait_for,
)

BUDGET = "1MiB"
TESTS = Path(__file__).resolve().parent
DASK_CLI = Path(sys.executable).with_name("dask")


class Deployment:
    """The processes of one cluster, their logs, and what the tests need to know of them."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.scratch = root / "scratch"  # every worker's --local-directory
        self.scratch.mkdir()
        self.procs: list[tuple[str, subprocess.Popen[bytes]]] = []
        self.env = {
            **os.environ,
            # settings of the preloaded plugin come from the workers' config
            "DASK_ARROW_SHARDS__MEMORY_LIMIT": BUDGET,
            # the workers unpickle this module's functions by reference
            "PYTHONPATH": os.pathsep.join(
                p for p in (str(TESTS), os.environ.get("PYTHONPATH", "")) if p
            ),
        }
        self.env.pop("DASK_DISTRIBUTED__WORKER__PRELOAD", None)  # only the command line's

    def start(self, name: str, *args: str) -> None:
        log = open(self.root / f"{name}.log", "wb")  # noqa: SIM115 (closed with the process)
        proc = subprocess.Popen(
            [str(DASK_CLI), *args],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self.env,
            cwd=self.root,
            start_new_session=True,  # its own process group: the nanny's worker included
        )
        log.close()
        self.procs.append((name, proc))

    def logs(self) -> str:
        return "\n".join(
            f"--- {name} (exit {proc.poll()}):\n"
            + (self.root / f"{name}.log").read_text(errors="replace")[-4000:]
            for name, proc in self.procs
        )

    def check_alive(self) -> None:
        dead = [name for name, proc in self.procs if proc.poll() is not None]
        if dead:
            raise AssertionError(f"{', '.join(dead)} exited early\n{self.logs()}")

    def stop(self) -> None:
        """Terminates every process group, then kills what is left; waits for all of them."""
        for sig, grace in ((signal.SIGTERM, 20.0), (signal.SIGKILL, 20.0)):
            for _, proc in self.procs:
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    pass
            end = time.monotonic() + grace
            for _, proc in self.procs:
                try:
                    proc.wait(timeout=max(0.1, end - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pass
            if all(self._group_gone(proc.pid) for _, proc in self.procs):
                return

    @staticmethod
    def _group_gone(pgid: int) -> bool:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        return False


@pytest.fixture(scope="module")
def deployment(tmp_path_factory) -> Iterator[tuple[Deployment, Client]]:
    cluster = Deployment(tmp_path_factory.mktemp("deployment"))
    try:
        scheduler_file = cluster.root / "scheduler.json"
        cluster.start(
            "scheduler", "scheduler", "--host", "127.0.0.1", "--port", "0",
            "--no-dashboard", "--scheduler-file", str(scheduler_file),
        )  # fmt: skip

        def address() -> str | None:
            cluster.check_alive()
            try:
                return json.loads(scheduler_file.read_text())["address"]
            except (FileNotFoundError, json.JSONDecodeError, KeyError):
                return None

        scheduler = wait_for(address, "the scheduler to write its address")
        assert scheduler.startswith("tcp://127.0.0.1:"), scheduler
        for i in range(2):
            cluster.start(
                f"worker-{i}", "worker", scheduler, "--preload", "arrow_shards.dask",
                "--nworkers", "1", "--nthreads", "1", "--memory-limit", "2GiB",
                "--host", "127.0.0.1", "--no-dashboard",
                "--local-directory", str(cluster.scratch),
            )  # fmt: skip
        with Client(scheduler, timeout=60) as client:

            def two_workers() -> bool:
                cluster.check_alive()
                return len(client.scheduler_info()["workers"]) == 2

            wait_for(two_workers, "two workers to connect")
            yield cluster, client
    finally:
        cluster.stop()


def _arrow_shards_runs(dask_worker: Any) -> list[str]:
    """The type of every P2P run on the worker that is an arrow-shards one."""
    from arrow_shards.dask._run import ArrowShardsShuffleRun

    runs = dask_worker.plugins["shuffle"].shuffle_runs._runs
    return [type(r).__name__ for r in list(runs) if isinstance(r, ArrowShardsShuffleRun)]


async def _without_plugin(dask_worker: Any) -> None:
    await dask_worker.plugin_remove(asd.PLUGIN_NAME)


async def _with_plugin_again(dask_worker: Any) -> None:
    await asd.dask_setup(dask_worker)  # what the preload did at the worker's start


def _same(df: pd.DataFrame, tag: str) -> pd.DataFrame:
    return df


def _input(rows: int, npartitions: int, tag: str) -> Any:
    """``frame(rows)`` in ``npartitions``; ``tag`` gives the graph keys of its own, so that no
    computation reuses another's results (the P2P shuffle's keys follow its input's)."""
    ddf = dd.from_pandas(frame(rows=rows), npartitions=npartitions)
    return ddf.map_partitions(_same, tag, meta=ddf._meta)


def _shuffle(ddf: Any) -> Any:
    return ddf.shuffle(on="k", shuffle_method="p2p", npartitions=8)


def _dasks_own(client: Client, collection: Any) -> list[pd.DataFrame]:
    """``collection``'s output partitions with Dask's own P2P buffers (the plugin removed from
    every worker for the computation, then added back as the preload adds it)."""
    client.run(_without_plugin)
    try:
        assert client.run(lambda dask_worker: asd.PLUGIN_NAME in dask_worker.plugins) == {
            w: False for w in client.scheduler_info()["workers"]
        }
        return output_partitions(client, collection)
    finally:
        client.run(_with_plugin_again)


def test_the_preload_turns_it_on_and_a_shuffle_equals_dasks_own(deployment):
    _, client = deployment
    for worker, m in client.run(asd.metrics).items():  # raises where the plugin is not active
        assert m["memory_limit"] == 1 << 20, worker
    before = {w: m["runs"] for w, m in client.run(asd.metrics).items()}
    got = output_partitions(client, _shuffle(_input(80_000, 12, "arrow-shards")))
    after = client.run(asd.metrics)
    for worker, m in after.items():
        assert m["runs"] > before[worker], f"{worker} built no arrow-shards run"
        assert m["rows_written"] > 0 and m["bytes_spilled"] > 0, (worker, m)
    expected = _dasks_own(client, _shuffle(_input(80_000, 12, "dask")))
    assert [len(p) for p in got] == [len(p) for p in expected]
    for mine, theirs in zip(got, expected):
        pd.testing.assert_frame_equal(mine, theirs)  # unsorted, index included


def test_a_worker_process_killed_mid_shuffle_gives_the_right_result_and_no_spill_dir(
    deployment, tmp_path
):
    cluster, client = deployment
    gate = tmp_path / "gate"
    ddf = _input(100_000, 24, "killed")
    shuffled = _shuffle(ddf.map_partitions(gated, str(gate), 23, meta=ddf._meta))
    expected = _dasks_own(client, _shuffle(_input(100_000, 24, "dask")))

    workers = sorted(client.scheduler_info()["workers"])
    victim = workers[0]
    victim_dir = local_directories(client)[victim]
    victim_pid = client.run(os.getpid, workers=[victim])[victim]
    persisted = shuffled.persist()
    try:
        # mid-shuffle: the victim has an arrow-shards run that has spilled received shards (a
        # 1 MiB budget; ~2.3 MiB of Arrow data for it before the gate), and the gated input is
        # not done yet
        wait_for(
            lambda: client.run(_arrow_shards_runs, workers=[victim])[victim],
            "an arrow-shards run on the victim",
        )
        wait_for(lambda: spill_dirs_under(victim_dir), "the victim's run to spill")
        assert not gate.exists()
        os.kill(victim_pid, signal.SIGKILL)
        gate.touch()  # the rest of the shuffle (its restart) may run now
        futures = sorted(futures_of(persisted), key=lambda f: f.key[1])
        distributed.wait(futures, timeout=120)
        got = client.gather(futures)
    finally:
        gate.touch()
        del persisted
    assert victim not in client.scheduler_info()["workers"], "the victim died"
    assert [len(p) for p in got] == [len(p) for p in expected]
    for mine, theirs in zip(got, expected):
        pd.testing.assert_frame_equal(mine, theirs)

    # the nanny starts a new worker process in the same scratch space, which removes the dead
    # one's directory; the runs of the live workers close and remove theirs
    wait_for(lambda: len(client.scheduler_info()["workers"]) == 2, "the worker to come back")
    cluster.check_alive()
    wait_for(lambda: no_active_runs(client), "the runs to close")
    wait_for(lambda: spill_dirs_under(cluster.scratch) == [], "no spill directory left")
    client.run(asd.metrics)  # raises unless the preload turned it on in the new process too
