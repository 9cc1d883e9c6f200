"""``arrow_shards.dask`` on a cluster of worker processes turned on by configuration alone (the
preload), and a worker killed in the middle of a shuffle."""

from __future__ import annotations

import os
import time

import pytest

dask = pytest.importorskip("dask")
distributed = pytest.importorskip("distributed")

import dask.dataframe as dd  # noqa: E402
import pandas as pd  # noqa: E402
from distributed import Client, LocalCluster  # noqa: E402

import arrow_shards.dask as asd  # noqa: E402
from dask_helpers import (  # noqa: E402
    frame,
    local_directories,
    no_active_runs,
    sorted_rows,
    spill_dirs_under,
    wait_for,
)

BUDGET = 1 << 20


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    scratch = tmp_path_factory.mktemp("scratch")
    settings = {
        "distributed.worker.preload": ["arrow_shards.dask"],
        "arrow-shards.memory-limit": BUDGET,
        "temporary-directory": str(scratch),
    }
    with (
        dask.config.set(settings),
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            memory_limit="2GiB",
            dashboard_address=":0",
        ) as cluster,
        Client(cluster) as client,
    ):
        client.scratch = scratch
        yield client


def test_the_preload_config_turns_it_on(client):
    ddf = dd.from_pandas(frame(rows=20_000), npartitions=6)
    got = ddf.shuffle(on="k", shuffle_method="p2p", npartitions=5).compute()
    pd.testing.assert_frame_equal(sorted_rows(got, ["id"]), sorted_rows(ddf.compute(), ["id"]))
    for worker, m in client.run(asd.metrics).items():
        assert m["memory_limit"] == BUDGET, worker
        assert m["runs"] >= 1 and m["rows_written"] > 0, worker


@pytest.mark.filterwarnings("ignore:Sending large graph")
def test_large_shards_travel_over_tcp_out_of_band_and_arrive_whole(client):
    # shards of ~1 MiB each (over the 64 KiB mean below which a message is pickled in band):
    # each peer's shard is a frame of the TCP message, decoded in place on the receiver
    from arrow_shards.dask._frame import SMALL_SHARDS

    df = frame(rows=120_000)
    ddf = dd.from_pandas(df, npartitions=3)
    assert df.memory_usage(deep=True).sum() / 3 / 2 > 4 * SMALL_SHARDS
    got = ddf.shuffle(on="k", shuffle_method="p2p", npartitions=4).compute()
    pd.testing.assert_frame_equal(sorted_rows(got, ["id"]), sorted_rows(ddf.compute(), ["id"]))


async def _die() -> None:
    os._exit(1)


def _slow(df: pd.DataFrame) -> pd.DataFrame:
    time.sleep(0.2)
    return df


def test_a_worker_killed_mid_shuffle_restarts_the_run(client):
    ddf = dd.from_pandas(frame(rows=40_000), npartitions=24)
    expected = ddf.compute()
    shuffled = ddf.map_partitions(_slow, meta=ddf._meta).shuffle(
        on="k", shuffle_method="p2p", npartitions=8
    )
    future = client.compute(shuffled)
    before = client.run(asd.metrics)
    victim = sorted(before)[0]

    def receiving() -> bool:
        now = client.run(asd.metrics)
        return any(now[w]["rows_written"] > before[w]["rows_written"] for w in now)

    wait_for(receiving, "the shuffle to be under way")
    client.run(_die, workers=[victim], wait=False)  # the process dies, the nanny restarts it
    got = future.result(timeout=120)
    assert victim not in client.scheduler_info()["workers"], "the victim died"
    pd.testing.assert_frame_equal(sorted_rows(got, ["id"]), sorted_rows(expected, ["id"]))
    wait_for(lambda: len(client.scheduler_info()["workers"]) == 2, "the worker to come back")
    wait_for(lambda: no_active_runs(client), "the runs to close")
    # nothing of any run is left: not on the live workers, not in the dead one's directory
    # (Dask removes a dead worker's directory when the next one starts in the same place)
    wait_for(lambda: spill_dirs_under(client.scratch) == [], "no spill directory left")
    assert all(spill_dirs_under(d) == [] for d in local_directories(client).values())
