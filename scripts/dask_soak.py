"""Soak of ``arrow_shards.dask``: P2P shuffles and merges back to back while worker processes
are killed with SIGKILL.

    .venv/bin/python scripts/dask_soak.py [--shuffles 50] [--kills 20] [--workers 3]
        [--kill-every 4] [--rows 60000] [--partitions 16] [--budget 1MiB]
        [--memory-limit 1GiB] [--shared-spill-dir] [--timeout 300] [--seed 0]
        [--root DIR] [--json PATH]

The cluster is started as docs/dask.md says deployments start one: a ``dask scheduler``
process and ``--workers`` ``dask worker SCHEDULER --preload arrow_shards.dask --nworkers 1
--nthreads 1 --memory-limit LIMIT --local-directory ROOT/scratch`` processes (a nanny and its
worker process each, every one in a session of its own), the plugin's budget (``--budget``,
small so that the runs spill) from ``DASK_ARROW_SHARDS__MEMORY_LIMIT``. With
``--shared-spill-dir`` every worker spills under one ``ROOT/spill``
(``DASK_ARROW_SHARDS__SPILL_DIR``), where a killed process's spill directories are removed by
the sweep of the next process that builds a buffer there; without it each worker spills under
its own ``local_directory``, which Dask removes when the next worker starts in the scratch
space.

A chaos thread waits until every worker is connected, sleeps 0.5-1.5 x ``--kill-every``
seconds, waits for the next shuffle to start and 0-1 s more, and SIGKILLs a worker chosen at
random, one of two ways chosen at random: the worker process alone (its nanny starts a new
one) or the whole ``dask worker`` process group (nanny and worker; the script starts a new
``dask worker``). It counts the kills made while a shuffle ran and the spill directories the
killed process left (their names carry its pid). Meanwhile the main thread runs, one after the
other, a ``df.shuffle(on="k", shuffle_method="p2p")`` and a ``dd.merge(..., on="k",
shuffle_method="p2p")`` on new random data each time (int64 ids and keys, object and pyarrow
strings with nulls, nullable ints, floats with NaN, two Arrow decimals with nulls), until
``--shuffles`` of them have completed and ``--kills`` kills were made. Each one's output
partitions are compared with Dask's own P2P result on the same data, computed without chaos on
an in-process ``LocalCluster`` without the plugin: equal row for row ("exact"), or equal once
each partition is sorted by its ids ("sorted"); anything else is a mismatch. A shuffle that
raises (P2P gives up on a run that keeps losing workers) counts as failed; one that does not
finish within ``--timeout`` seconds counts as hung.

A sampler reads every worker process's RSS every 0.25 s and records any above its memory
limit + 10%. At the end the chaos stops, one more shuffle runs on the quiet cluster (so every
replacement process has built a buffer, and swept), the script waits for every P2P run to close
and then for no ``arrow-shards-spill-*`` directory to be left under ROOT; then it stops the
cluster and checks that nothing but Dask's lock files is left in the scratch space (and the
shared spill root). It prints a line per shuffle and a summary (``--json PATH`` writes it as
JSON too) and exits 1 on any mismatch, hang, leftover, RSS breach, or fewer completed shuffles
or kills than asked for.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

# the driver's reference cluster must be Dask's own, whatever the caller's environment says
os.environ.pop("DASK_DISTRIBUTED__WORKER__PRELOAD", None)
import logging  # noqa: E402

import warnings  # noqa: E402

# the in-process reference cluster's P2P logs each shuffle as a warning
logging.getLogger("distributed.shuffle").setLevel(logging.ERROR)
# the inputs are made here and sent in the graph (a few MiB) on purpose
warnings.filterwarnings("ignore", message="Sending large graph")

import dask  # noqa: E402
import dask.dataframe as dd  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import psutil  # noqa: E402
import pyarrow as pa  # noqa: E402
from dask.utils import parse_bytes  # noqa: E402
from distributed import Client, LocalCluster, futures_of  # noqa: E402

DASK_CLI = Path(sys.executable).with_name("dask")
SPILL_PREFIX = "arrow-shards-spill-"


LOG_LOCK = threading.Lock()


def log(*parts: Any) -> None:
    with LOG_LOCK:
        print(time.strftime("%H:%M:%S"), *parts, flush=True)


class Cluster:
    """The scheduler and worker processes, each in a session of its own, with their logs."""

    def __init__(self, root: Path, args: argparse.Namespace) -> None:
        self.root = root
        self.args = args
        self.scratch = root / "scratch"
        self.scratch.mkdir()
        self.env = {**os.environ, "DASK_ARROW_SHARDS__MEMORY_LIMIT": args.budget}
        if args.shared_spill_dir:
            self.spill = root / "spill"
            self.spill.mkdir()
            self.env["DASK_ARROW_SHARDS__SPILL_DIR"] = str(self.spill)
        self.scheduler_proc: subprocess.Popen[bytes] | None = None
        self.workers: dict[str, subprocess.Popen[bytes]] = {}  # name -> `dask worker` process
        self.dead: list[subprocess.Popen[bytes]] = []
        self.started = 0
        self.lock = threading.Lock()
        self.address = ""

    def _start(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        with open(self.root / f"{name}.log", "wb") as out:
            return subprocess.Popen(
                [str(DASK_CLI), *args],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=self.root,
                start_new_session=True,  # its own process group: the nanny's worker included
            )

    def start_scheduler(self) -> str:
        scheduler_file = self.root / "scheduler.json"
        self.scheduler_proc = self._start(
            "scheduler", "scheduler", "--host", "127.0.0.1", "--port", "0",
            "--no-dashboard", "--scheduler-file", str(scheduler_file),
        )  # fmt: skip

        def address() -> str | None:
            if self.scheduler_proc.poll() is not None:
                raise RuntimeError(f"the scheduler exited\n{self.tail('scheduler')}")
            try:
                return json.loads(scheduler_file.read_text())["address"]
            except (FileNotFoundError, json.JSONDecodeError, KeyError):
                return None

        self.address = wait_for(address, "the scheduler's address", 120)
        return self.address

    def start_worker(self) -> None:
        with self.lock:
            name = f"worker-{self.started}"
            self.started += 1
            self.workers[name] = self._start(
                name, "worker", self.address, "--preload", "arrow_shards.dask",
                "--nworkers", "1", "--nthreads", "1", "--memory-limit", self.args.memory_limit,
                "--host", "127.0.0.1", "--no-dashboard", "--name", name,
                "--local-directory", str(self.scratch),
            )  # fmt: skip

    def kill_group(self, name: str) -> None:
        """SIGKILLs the nanny and its worker (the whole process group) of ``name``."""
        with self.lock:
            proc = self.workers.pop(name)
            self.dead.append(proc)
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
        wait_for(lambda: group_gone(proc.pid), f"{name}'s processes to die", 60)

    def worker_pids(self, name: str | None = None) -> list[int]:
        """The worker processes (the nannies' children, not multiprocessing's resource
        tracker) alive now, of ``name`` or of every worker."""
        with self.lock:
            nannies = [p.pid for n, p in self.workers.items() if name in (None, n)]
        pids = []
        for nanny in nannies:
            try:
                for child in psutil.Process(nanny).children():
                    if not any("resource_tracker" in a for a in child.cmdline()):
                        pids.append(child.pid)
            except psutil.Error:
                pass
        return pids

    def tail(self, name: str, chars: int = 3000) -> str:
        try:
            return (self.root / f"{name}.log").read_text(errors="replace")[-chars:]
        except FileNotFoundError:
            return ""

    def stop(self) -> None:
        """Terminates every process group, then kills what is left; waits for all of them."""
        with self.lock:
            procs = [*self.workers.values(), *self.dead]
        if self.scheduler_proc is not None:
            procs.append(self.scheduler_proc)
        for sig, grace in ((signal.SIGTERM, 20.0), (signal.SIGKILL, 20.0)):
            for proc in procs:
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    pass
            end = time.monotonic() + grace
            for proc in procs:
                try:
                    proc.wait(timeout=max(0.1, end - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pass
            if all(group_gone(proc.pid) for proc in procs):
                return


def group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def wait_for(condition: Callable[[], Any], what: str, deadline_s: float) -> Any:
    end = time.monotonic() + deadline_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > end:
            raise TimeoutError(f"timed out after {deadline_s} s waiting for {what}")
        time.sleep(0.1)


def spill_dirs_under(root: Path) -> list[str]:
    found = []
    for here, dirs, _files in os.walk(root):
        found += [os.path.join(here, d) for d in dirs if d.startswith(SPILL_PREFIX)]
    return found


def left_on_disk(root: Path) -> list[str]:
    """Everything under the workers' scratch space and the shared spill root but Dask's
    ``dask-scratch-space`` directory and its lock files."""
    found = []
    for sub in ("scratch", "spill"):
        for path in sorted((root / sub).rglob("*")):
            if path.name != "dask-scratch-space" and path.suffix not in (".lock", ".dirlock"):
                found.append(str(path))
    return found


class Chaos(threading.Thread):
    """Every 0.5-1.5 x ``every`` seconds, once all workers are connected, SIGKILLs one."""

    def __init__(self, cluster: Cluster, client: Client, workers: int, every: float, seed: int):
        super().__init__(name="chaos", daemon=True)
        self.cluster, self.client, self.workers, self.every = cluster, client, workers, every
        self.rng = random.Random(seed)
        self.stop = threading.Event()
        self.kills = {"worker": 0, "group": 0}
        self.busy = threading.Event()  # set by the main thread while a shuffle runs
        self.mid_shuffle = 0  # kills while a shuffle ran
        self.orphaned: list[str] = []  # spill directories of the killed processes
        self.error: str | None = None

    def connected(self) -> dict[str, Any]:
        return self.client.scheduler_info(n_workers=-1)["workers"]

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                wait_for(
                    lambda: self.stop.is_set() or len(self.connected()) >= self.workers,
                    "every worker to connect",
                    180,
                )
                if self.stop.wait(self.every * self.rng.uniform(0.5, 1.5)):
                    return
                # into the next shuffle, at a random point of its first second (most of them
                # take 1-3 s here); after 30 s without one, at once
                self.busy.wait(30)
                if self.stop.wait(self.rng.uniform(0.0, 1.0)):
                    return
                workers = self.connected()
                if len(workers) < self.workers:
                    continue
                name = self.rng.choice(sorted(self.cluster.workers))
                pids = self.cluster.worker_pids(name)
                if len(pids) != 1:
                    continue
                busy = self.busy.is_set()
                if self.rng.random() < 0.5:
                    # the worker process alone: its nanny starts a new one
                    try:
                        os.kill(pids[0], signal.SIGKILL)
                    except ProcessLookupError:
                        continue
                    self.kills["worker"] += 1
                    log(f"chaos: SIGKILL {name}'s worker process {pids[0]}")
                else:
                    # nanny and worker: a new `dask worker` replaces them
                    self.cluster.kill_group(name)
                    self.kills["group"] += 1
                    self.cluster.start_worker()
                    log(f"chaos: SIGKILL {name} (nanny and worker), started a new one")
                self.mid_shuffle += busy
                orphaned = [
                    d
                    for d in spill_dirs_under(self.cluster.root)
                    if os.path.basename(d).startswith(f"{SPILL_PREFIX}{pids[0]}-")
                ]
                self.orphaned += orphaned
                if orphaned:
                    log(f"chaos: {len(orphaned)} spill directories of process {pids[0]} left")
                # the scheduler notices the lost connection; wait for it before counting
                wait_for(
                    lambda: len(self.connected()) < self.workers or self.stop.is_set(),
                    "the scheduler to see the kill",
                    30,
                )
        except Exception:  # noqa: BLE001 (reported in the summary)
            self.error = traceback.format_exc()
            log("chaos: failed\n" + self.error)


class RssSampler(threading.Thread):
    """Every 0.25 s, each worker process's RSS against its memory limit + 10%."""

    def __init__(self, cluster: Cluster, limit: int) -> None:
        super().__init__(name="rss", daemon=True)
        self.cluster, self.limit = cluster, limit
        self.stop = threading.Event()
        self.peak = 0
        self.breaches: list[tuple[int, int]] = []  # (pid, rss)
        self.samples = 0

    def run(self) -> None:
        while not self.stop.wait(0.25):
            for pid in self.cluster.worker_pids():
                try:
                    rss = psutil.Process(pid).memory_info().rss
                except psutil.Error:
                    continue
                self.samples += 1
                self.peak = max(self.peak, rss)
                if rss > self.limit * 1.1:
                    self.breaches.append((pid, rss))


def make_frame(rows: int, rng: np.random.Generator) -> pd.DataFrame:
    """Ids, keys, strings (object and pyarrow) with nulls, nullable ints, floats with NaN, and
    two Arrow decimals with nulls."""
    nulls = rng.random(rows) < 0.1
    words = np.array([f"w{i}-{'x' * (i % 23)}" for i in range(211)], dtype=object)
    s_object = pd.Series(words[rng.integers(0, 211, rows)], dtype=object)
    s_object[nulls] = None
    s_arrow = pd.Series(words[rng.integers(0, 211, rows)], dtype="string[pyarrow]")
    s_arrow[rng.random(rows) < 0.1] = pd.NA
    n = pd.array(rng.integers(-1000, 1000, rows), dtype="Int64")
    n[rng.random(rows) < 0.1] = pd.NA
    f = rng.normal(size=rows)
    f[rng.random(rows) < 0.05] = np.nan
    cents = rng.integers(0, 10**8, rows)
    texts = pa.array([f"{c // 100}.{c % 100:02d}" for c in cents])
    price = texts.cast(pa.decimal128(12, 2))
    quantities = pa.array(rng.integers(1, 51, rows).astype("int32"), mask=nulls[::-1])
    qty = quantities.cast(pa.decimal128(15, 2))
    return pd.DataFrame(
        {
            "id": np.arange(rows, dtype="int64"),
            "k": rng.integers(0, rows // 4 + 1, rows),
            "s_object": s_object,
            "s_arrow": s_arrow,
            "n": n,
            "f": f,
            "price": pd.array(price, dtype=pd.ArrowDtype(price.type)),
            "qty": pd.array(qty, dtype=pd.ArrowDtype(qty.type)),
        }
    )


def collection(kind: str, seed: int, args: argparse.Namespace) -> tuple[Any, list[str]]:
    """The ``kind`` ("shuffle" or "merge") of data made from ``seed``, and the columns that
    identify a row of its result."""
    rng = np.random.default_rng(seed)
    left = dd.from_pandas(make_frame(args.rows, rng), npartitions=args.input_partitions)
    if kind == "shuffle":
        return left.shuffle(on="k", shuffle_method="p2p", npartitions=args.partitions), ["id"]
    right = make_frame(args.rows // 2, rng)[["id", "k", "s_arrow", "price"]]
    right = dd.from_pandas(right, npartitions=args.input_partitions - 3)
    merged = dd.merge(
        left, right, on="k", how="inner", shuffle_method="p2p", npartitions=args.partitions
    )
    return merged, ["id_x", "id_y"]


def partitions(client: Client, coll: Any, timeout: float) -> list[pd.DataFrame]:
    persisted = client.persist(coll)
    futures = sorted(futures_of(persisted), key=lambda fut: fut.key[1])
    end = time.monotonic() + timeout
    try:
        return [f.result(timeout=max(0.1, end - time.monotonic())) for f in futures]
    finally:
        client.cancel(futures)
        del persisted, futures


def compare(got: list[pd.DataFrame], expected: list[pd.DataFrame], ids: list[str]) -> str:
    """"exact", "sorted", or what differs."""
    if len(got) != len(expected):
        return f"{len(got)} output partitions, Dask's own gives {len(expected)}"
    if all(g.equals(e) and list(g.dtypes) == list(e.dtypes) for g, e in zip(got, expected)):
        return "exact"
    for i, (g, e) in enumerate(zip(got, expected)):
        g = g.sort_values(ids, kind="stable").reset_index(drop=ids != ["id"])
        e = e.sort_values(ids, kind="stable").reset_index(drop=ids != ["id"])
        try:
            pd.testing.assert_frame_equal(g, e)
        except AssertionError as err:
            return f"partition {i} differs: {str(err).splitlines()[0:3]}"
    return "sorted"


def soak(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    summary: dict[str, Any] = {
        "args": vars(args) | {"root": str(root)},
        "completed": 0,
        "exact": 0,
        "failed": [],
        "mismatches": [],
        "hung": [],
        "leftovers": [],
        "rss_breaches": [],
    }
    started = time.monotonic()
    cluster = Cluster(root, args)
    reference_cluster = None
    chaos = sampler = None
    try:
        with dask.config.set({"distributed.worker.preload": []}):
            reference_cluster = LocalCluster(
                n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None
            )
        reference = Client(reference_cluster, set_as_default=False)
        address = cluster.start_scheduler()
        for _ in range(args.workers):
            cluster.start_worker()
        client = Client(address, timeout=120, set_as_default=False)
        wait_for(
            lambda: len(client.scheduler_info(n_workers=-1)["workers"]) == args.workers,
            "every worker to connect",
            180,
        )
        import arrow_shards.dask as asd

        for worker, m in client.run(asd.metrics).items():  # raises unless the preload worked
            assert m["memory_limit"] == parse_bytes(args.budget), (worker, m["memory_limit"])
        log(f"cluster up: {args.workers} workers at {address}, root {root}")

        sampler = RssSampler(cluster, parse_bytes(args.memory_limit))
        sampler.start()
        chaos = Chaos(cluster, client, args.workers, args.kill_every, args.seed)
        chaos.start()

        i = 0
        while summary["completed"] < args.shuffles or sum(chaos.kills.values()) < args.kills:
            if i >= 4 * args.shuffles + 4 * args.kills or chaos.error:
                break
            kind = ("shuffle", "merge")[i % 2]
            seed = args.seed * 1_000_003 + i
            t0 = time.monotonic()
            expected = partitions(reference, collection(kind, seed, args)[0], args.timeout)
            t1 = time.monotonic()
            coll, ids = collection(kind, seed, args)
            chaos.busy.set()
            try:
                got = partitions(client, coll, args.timeout)
            except TimeoutError:
                summary["hung"].append((i, kind))
                log(f"#{i} {kind}: HUNG after {args.timeout} s")
                break
            except Exception as err:  # noqa: BLE001 (a shuffle may fail under kills)
                summary["failed"].append((i, kind, f"{type(err).__name__}: {err}"[:300]))
                log(f"#{i} {kind}: failed: {type(err).__name__}: {str(err)[:200]}")
                i += 1
                continue
            finally:
                chaos.busy.clear()
            verdict = compare(got, expected, ids)
            rows = sum(len(p) for p in got)
            if verdict in ("exact", "sorted"):
                summary["completed"] += 1
                summary["exact"] += verdict == "exact"
            else:
                summary["mismatches"].append((i, kind, verdict))
            log(
                f"#{i} {kind}: {rows} rows, {verdict} (reference {t1 - t0:.1f} s, "
                f"chaos {time.monotonic() - t1:.1f} s), kills so far {sum(chaos.kills.values())}"
            )
            i += 1

        chaos.stop.set()
        chaos.join()
        summary["kills"] = dict(chaos.kills)
        summary["kills_mid_shuffle"] = chaos.mid_shuffle
        summary["orphaned_spill_dirs"] = len(chaos.orphaned)
        if chaos.error:
            summary["chaos_error"] = chaos.error
        # a quiet shuffle: every replacement builds a buffer (and sweeps a shared spill root)
        wait_for(
            lambda: len(client.scheduler_info(n_workers=-1)["workers"]) == args.workers,
            "every worker to connect",
            180,
        )
        coll, ids = collection("shuffle", args.seed * 1_000_003 + i, args)
        expected = partitions(reference, coll, args.timeout)
        verdict = compare(partitions(client, coll, args.timeout), expected, ids)
        summary["final"] = verdict
        if verdict not in ("exact", "sorted"):
            summary["mismatches"].append((i, "final shuffle", verdict))

        def no_runs() -> bool:
            active = client.run(
                lambda dask_worker: len(dask_worker.plugins["shuffle"].shuffle_runs._runs)
            )
            return not any(active.values())

        wait_for(no_runs, "the P2P runs to close", 120)
        try:
            wait_for(lambda: not spill_dirs_under(root), "no spill directory left", 60)
        except TimeoutError:
            summary["leftovers"] = spill_dirs_under(root)
        summary["workers_started"] = cluster.started
        client.close()
    finally:
        if chaos is not None:
            chaos.stop.set()
        if sampler is not None:
            sampler.stop.set()
            sampler.join()
            summary["rss_peak_mib"] = round(sampler.peak / 2**20, 1)
            summary["rss_samples"] = sampler.samples
            summary["rss_breaches"] = sampler.breaches[:20]
        cluster.stop()
        if reference_cluster is not None:
            reference_cluster.close()
    # after a clean stop nothing is left in the scratch space and the spill root but Dask's
    # empty lock files
    summary["leftovers"] += [d for d in left_on_disk(root) if d not in summary["leftovers"]]
    summary["seconds"] = round(time.monotonic() - started, 1)
    summary["loadavg"] = os.getloadavg()
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shuffles", type=int, default=50, help="completed shuffles wanted")
    parser.add_argument("--kills", type=int, default=20, help="worker kills wanted")
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--kill-every", type=float, default=4.0, help="seconds, on average")
    parser.add_argument("--rows", type=int, default=60_000, help="rows of each input")
    parser.add_argument("--input-partitions", type=int, default=12)
    parser.add_argument("--partitions", type=int, default=16, help="output partitions")
    parser.add_argument("--budget", default="1MiB", help="the plugin's memory_limit")
    parser.add_argument("--memory-limit", default="1GiB", help="each worker's")
    parser.add_argument("--shared-spill-dir", action="store_true")
    parser.add_argument("--timeout", type=float, default=300.0, help="per shuffle, seconds")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--root", type=Path, help="default: a new temporary directory")
    parser.add_argument("--json", type=Path, help="also write the summary here")
    args = parser.parse_args()
    root = args.root or Path(tempfile.mkdtemp(prefix="arrow-shards-soak-"))
    root.mkdir(parents=True, exist_ok=True)
    summary = soak(args, root)
    problems = []
    if summary["completed"] < args.shuffles:
        problems.append(f"{summary['completed']} shuffles completed, {args.shuffles} wanted")
    if sum(summary.get("kills", {}).values()) < args.kills:
        problems.append(f"{summary.get('kills')} kills, {args.kills} wanted")
    for key in ("mismatches", "hung", "leftovers", "rss_breaches"):
        if summary[key]:
            problems.append(f"{key}: {summary[key]}")
    if summary.get("chaos_error"):
        problems.append("the chaos thread failed")
    summary["problems"] = problems
    text = json.dumps(summary, indent=2, default=str)
    print(text)
    if args.json:
        args.json.write_text(text)
    if problems:
        print("SOAK FAILED:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 1
    print(
        f"SOAK PASSED: {summary['completed']} shuffles and merges completed, each equal to "
        f"Dask's own P2P ({summary['exact']} exactly, partition by partition), "
        f"{len(summary['failed'])} failed, kills {summary['kills']} "
        f"({summary['kills_mid_shuffle']} while a shuffle ran, leaving "
        f"{summary['orphaned_spill_dirs']} spill directories), "
        f"{summary['workers_started']} worker processes started by the script, no spill "
        f"directory left, RSS peak {summary['rss_peak_mib']} MiB, {summary['seconds']} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
