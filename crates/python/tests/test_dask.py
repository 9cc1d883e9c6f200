"""``arrow_shards.dask`` on an in-process cluster: results equal to Dask's own P2P, spilling
under a tiny budget, one budget for concurrent shuffles, activation and deactivation."""

from __future__ import annotations

import contextlib
import gc
import os
import shutil
import threading
from pathlib import Path

import pytest

dask = pytest.importorskip("dask")
distributed = pytest.importorskip("distributed")

import dask.dataframe as dd  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from distributed import Client, LocalCluster  # noqa: E402
from distributed.shuffle._exceptions import P2POutOfDiskError  # noqa: E402

import arrow_shards.dask as asd  # noqa: E402
from conftest import objects  # noqa: E402
from dask_helpers import (  # noqa: E402
    ddf_with_empty_partitions,
    frame,
    gated,
    local_directories,
    rich_frame,
    no_active_runs,
    output_partitions,
    sorted_rows,
    spill_dirs_under,
    wait_for,
)


@pytest.fixture(scope="module")
def client():
    with (
        dask.config.set({"distributed.scheduler.worker-ttl": None}),
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=False,
            memory_limit="2GiB",
            dashboard_address=":0",
        ) as cluster,
        Client(cluster) as client,
    ):
        yield client


@pytest.fixture
def plugin(client):
    """Registers the plugin with the test's settings (``plugin(**settings)``); unregisters it
    afterwards."""
    registered = []

    def register(**settings):
        client.register_plugin(asd.ShufflePlugin(**settings))
        registered.append(True)

    yield register
    if registered:
        with contextlib.suppress(ValueError):  # the test may have unregistered it itself
            client.unregister_worker_plugin(asd.PLUGIN_NAME)


def runs(client) -> dict[str, int]:
    return {w: m["runs"] for w, m in client.run(asd.metrics).items()}


OPERATIONS = {
    "shuffle": (
        lambda d: d.shuffle(on="k", shuffle_method="p2p", npartitions=7),
        ["id"],
    ),
    "merge": (
        lambda d: dd.merge(
            d, d[["id", "k", "s_arrow"]].rename(columns={"id": "id2"}), on="k",
            shuffle_method="p2p",
        ),
        ["id", "id2"],
    ),
    "set_index": (lambda d: d.set_index("id", shuffle_method="p2p"), ["id"]),
}


@pytest.mark.parametrize("operation", sorted(OPERATIONS))
def test_results_equal_dasks_own_p2p(client, plugin, operation):
    build, key = OPERATIONS[operation]
    ddf = ddf_with_empty_partitions(frame())
    expected = build(ddf).compute()
    plugin(memory_limit="64MiB")
    got = build(ddf).compute()
    assert all(n >= 1 for n in runs(client).values()), "arrow-shards was used on every worker"
    if operation == "set_index":
        expected, got = expected.reset_index(), got.reset_index()
    pd.testing.assert_frame_equal(sorted_rows(got, key), sorted_rows(expected, key))
    assert list(got.dtypes) == list(expected.dtypes)


@pytest.mark.parametrize("budget", ["64MiB", "64KiB"])
@pytest.mark.parametrize("operation", sorted(OPERATIONS))
def test_every_output_partition_equals_dasks_own_exactly(client, plugin, operation, budget):
    # unsorted, index included: the rows of every output partition in Dask's order (by input
    # partition, stably), with the send side's split and the ordered read in Rust; 64 KiB
    # spills, so the read merges disk and memory
    build, _ = OPERATIONS[operation]
    ddf = ddf_with_empty_partitions(rich_frame(rows=3_000), npartitions=9)
    expected = output_partitions(client, build(ddf))
    plugin(memory_limit=budget)
    got = output_partitions(client, build(ddf))
    assert all(n >= 1 for n in runs(client).values()), "arrow-shards was used on every worker"
    assert [len(p) for p in got] == [len(p) for p in expected]
    for mine, theirs in zip(got, expected):
        pd.testing.assert_frame_equal(mine, theirs)
        assert list(mine["c"].cat.categories) == list(theirs["c"].cat.categories)
    if budget == "64KiB":
        assert any(m["bytes_spilled"] > 0 for m in client.run(asd.metrics).values())


def test_a_workers_own_shards_skip_the_comms(client, plugin, monkeypatch):
    # the local shortcut: a worker's own rows go straight into its receive path; only peers'
    # shards are sent
    from arrow_shards.dask._run import ArrowShardsShuffleRun

    sent = []
    original = ArrowShardsShuffleRun.send

    async def recording(self, address, shards):
        sent.append((self.local_address, address))
        return await original(self, address, shards)

    monkeypatch.setattr(ArrowShardsShuffleRun, "send", recording)
    plugin()
    ddf = dd.from_pandas(frame(), npartitions=6)
    got = ddf.shuffle(on="k", shuffle_method="p2p", npartitions=8).compute()
    pd.testing.assert_frame_equal(sorted_rows(got, ["id"]), sorted_rows(ddf.compute(), ["id"]))
    assert sent, "peers' shards go through the comms"
    assert all(sender != receiver for sender, receiver in sent), sent


def test_output_dtypes_meta_gives_metas_arrow_dtypes(client, plugin):
    # Dask's own P2P returns meta's decimal128[pyarrow] column as Python objects; the opt-in
    # keeps meta's dtypes, with the same values
    ddf = ddf_with_empty_partitions(rich_frame(rows=1_000))
    build, _ = OPERATIONS["shuffle"]
    expected = build(ddf).compute()
    assert expected["dec"].dtype == object
    plugin(memory_limit="64MiB", output_dtypes="meta")
    got = build(ddf).compute()
    assert all(n >= 1 for n in runs(client).values()), "arrow-shards was used on every worker"
    assert dict(got.dtypes) == dict(ddf._meta.dtypes)
    as_dasks = got.astype(dict(expected.dtypes))
    # a null of an Arrow dtype is pd.NA, also once cast to object; Dask's objects have None
    for column in ["dec", "qty"]:
        as_dasks[column] = as_dasks[column].where(as_dasks[column].notna(), None)
    pd.testing.assert_frame_equal(sorted_rows(as_dasks, ["id"]), sorted_rows(expected, ["id"]))


def test_a_local_output_partition_is_read_without_trips_through_the_event_loop(
    client, plugin, monkeypatch
):
    # Dask's get_output_partition syncs with the event loop twice per partition
    # (_ensure_output_worker, flush_receive); for a partition of this worker ours does not
    from distributed.shuffle import _core

    trips = []
    original = _core.sync

    def counting(loop, func, *args, **kwargs):
        name = getattr(func, "__name__", repr(func))
        run = getattr(func, "__self__", None)
        if name == "_ensure_output_worker" and run._get_assigned_worker(args[0]) != run.local_address:
            name = "_ensure_output_worker of a partition of another worker"  # Dask reschedules
        trips.append(name)
        return original(loop, func, *args, **kwargs)

    monkeypatch.setattr(_core, "sync", counting)
    plugin()
    ddf = dd.from_pandas(frame(), npartitions=4)
    got = ddf.shuffle(on="k", shuffle_method="p2p", npartitions=8).compute()
    pd.testing.assert_frame_equal(sorted_rows(got, ["id"]), sorted_rows(ddf.compute(), ["id"]))
    assert "_write_to_comm" in trips, "the counter sees the shuffle's trips"
    # every output partition is read on its own worker in the end: Dask's path there would
    # sync flush_receive once per partition
    assert "flush_receive" not in trips and "_ensure_output_worker" not in trips, trips


def test_a_runs_buffers_and_spill_directories_are_made_on_the_workers_event_loop(
    client, plugin, monkeypatch
):
    # where Dask makes a run's directory and where distributed's test_bad_disk removes the
    # worker's local directory mid-shuffle (shutil.rmtree, blocking the loop): a buffer built
    # in a P2P thread made its spill directory during that rmtree once in a few runs, which
    # then failed with ENOTEMPTY; built on the loop, it finds the directory gone and fails the
    # run, as the test expects
    import asyncio

    from arrow_shards.dask import _receive

    made_on = []
    original = _receive.ShardBuffer

    def recording(*args, **kwargs):
        try:
            made_on.append(id(asyncio.get_running_loop()))
        except RuntimeError:
            made_on.append(threading.current_thread().name)  # no loop: a thread of a pool
        return original(*args, **kwargs)

    monkeypatch.setattr(_receive, "ShardBuffer", recording)
    plugin(memory_limit="256KiB")  # spills: every buffer makes its spill directory
    ddf = dd.from_pandas(frame(rows=20_000), npartitions=6)
    got = ddf.shuffle(on="k", shuffle_method="p2p", npartitions=8).compute()
    pd.testing.assert_frame_equal(sorted_rows(got, ["id"]), sorted_rows(ddf.compute(), ["id"]))
    loops = set(client.run(lambda dask_worker: id(dask_worker.loop.asyncio_loop)).values())
    assert made_on, "the recorder sees the buffers built"
    assert set(made_on) <= loops, made_on


def test_every_worker_spills_under_a_tiny_budget_and_cleans_up(client, plugin):
    df = frame(rows=40_000)
    ddf = dd.from_pandas(df, npartitions=8)
    expected = ddf.shuffle(on="k", shuffle_method="p2p", npartitions=16).compute()
    plugin(memory_limit="256KiB", compression="lz4")
    got = ddf.shuffle(on="k", shuffle_method="p2p", npartitions=16).compute()
    pd.testing.assert_frame_equal(sorted_rows(got, ["id"]), sorted_rows(expected, ["id"]))
    metrics = client.run(asd.metrics)
    for worker, m in metrics.items():
        assert m["bytes_spilled"] > 0, worker
        assert m["rows_read"] == m["rows_written"] > 0, worker
    assert sum(m["rows_read"] for m in metrics.values()) == len(df)
    wait_for(lambda: no_active_runs(client), "the runs to close")
    for worker, directory in local_directories(client).items():
        assert spill_dirs_under(directory) == [], worker
    assert all(m["reserved"] == 0 for m in client.run(asd.metrics).values())


def test_two_shuffles_at_once_share_one_budget(client, plugin):
    # received shards of about 100 KiB: each fits the budget (one that did not would go straight
    # to disk, charged while on its way: past the limit, honestly)
    budget = 2 << 20
    plugin(memory_limit=budget)
    df = frame(rows=30_000)
    a = dd.from_pandas(df, npartitions=12).shuffle(on="k", shuffle_method="p2p", npartitions=9)
    b = dd.from_pandas(df, npartitions=10).shuffle(on="id", shuffle_method="p2p", npartitions=4)
    got_a, got_b = dask.compute(a, b)
    expected = dd.from_pandas(df, npartitions=1).compute()
    for got in (got_a, got_b):
        pd.testing.assert_frame_equal(sorted_rows(got, ["id"]), sorted_rows(expected, ["id"]))
    for worker, m in client.run(asd.metrics).items():
        assert m["runs"] == 2, worker
        assert m["memory_limit"] == budget
        assert 0 < m["peak_reserved"] <= budget, worker


def test_unregistering_restores_dasks_own_buffers(client, plugin):
    from distributed.shuffle._shuffle import DataFrameShuffleSpec

    def hook():
        return DataFrameShuffleSpec.create_run_on_worker.__qualname__

    assert hook() == "DataFrameShuffleSpec.create_run_on_worker"
    ddf = dd.from_pandas(frame(), npartitions=4)
    plugin()
    assert hook() == "_create_run_on_worker"
    ddf.shuffle(on="k", shuffle_method="p2p").compute()
    assert all(n == 1 for n in runs(client).values())
    client.unregister_worker_plugin(asd.PLUGIN_NAME)
    with pytest.raises(RuntimeError, match="not active"):
        client.run(asd.metrics)
    assert hook() == "DataFrameShuffleSpec.create_run_on_worker", "Dask's own runs again"
    got = ddf.shuffle(on="k", shuffle_method="p2p").compute()
    pd.testing.assert_frame_equal(sorted_rows(got, ["id"]), sorted_rows(ddf.compute(), ["id"]))


def test_a_buffer_error_fails_the_run_with_a_clear_message(client, plugin, tmp_path):
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    plugin(spill_dir=str(not_a_dir))
    ddf = dd.from_pandas(frame(), npartitions=4)
    with pytest.raises(RuntimeError, match="P2P .* failed") as info:
        ddf.shuffle(on="k", shuffle_method="p2p").compute()
    chain = []
    error = info.value
    while error is not None:
        chain.append(str(error))
        error = error.__cause__
    assert any("spill" in text.lower() for text in chain), chain


def test_a_run_whose_spill_directory_is_removed_fails_at_its_next_receive(
    client, plugin, tmp_path
):
    # as Dask's disk buffer fails its next write once its directory is gone (distributed's
    # test_bad_disk removes the worker's local directory mid-shuffle and expects the transfer
    # to fail): the run could not spill any more, so it could not keep to its budget. Nothing
    # spills here (64 MiB), so only the check of the directory notices.
    root = tmp_path / "spill"
    root.mkdir()
    gate = tmp_path / "gate"
    plugin(memory_limit="64MiB", spill_dir=str(root))
    ddf = dd.from_pandas(frame(rows=8_000), npartitions=8)
    held = ddf.map_partitions(gated, str(gate), 7, meta=ddf._meta)
    persisted = held.shuffle(on="k", shuffle_method="p2p", npartitions=4).persist()
    try:
        made = wait_for(
            lambda: spill_dirs_under(root) if len(spill_dirs_under(root)) >= 2 else None,
            "a buffer on each worker",
        )
        for directory in made:
            shutil.rmtree(directory)
    finally:
        gate.touch()  # the last input partition goes to the workers now
    with pytest.raises(RuntimeError, match="P2P .* failed") as info:
        persisted.compute()
    chain = []
    error = info.value
    while error is not None:
        chain.append(str(error))
        error = error.__cause__
    assert any("spill directory" in text and "removed" in text for text in chain), chain
    del info, error, persisted  # the traceback holds the futures; the runs close without them
    gc.collect()
    wait_for(lambda: no_active_runs(client), "the runs to close")
    assert spill_dirs_under(root) == []


def _frame_part(i: int) -> pd.DataFrame:
    return frame(rows=25_000, seed=i)


def test_a_full_disk_fails_the_shuffle_with_dasks_out_of_disk_error(client, plugin):
    full = os.environ.get("ARROW_SHARDS_FULL_DISK")
    if not full:
        if os.environ.get("CI") == "true":
            pytest.fail("ARROW_SHARDS_FULL_DISK (a small tmpfs, made by .ci/run) is not set")
        pytest.skip("set ARROW_SHARDS_FULL_DISK to a small tmpfs to test a really full disk")
    assert list(Path(full).iterdir()) == [], f"{full} is not empty to begin with"
    # about 15 MiB of shards per worker against a 1 MiB budget and a 4 MiB disk (made by the
    # tasks: a graph holding that much data draws Dask's large-graph warning)
    ddf = dd.from_map(_frame_part, range(12))
    plugin(memory_limit="1MiB", spill_dir=full)
    # P2POutOfDiskError is an OSError, which Dask's send retries (10 times, 1 s to 30 s apart:
    # up to ~2.5 min), and a failed run raises it again to every resent shard, so a send in
    # flight when the disk filled keeps its run open that long: the suite once timed out below
    # waiting for the runs to close while one send was at its 7th attempt (load ~10). Dask's
    # own P2P does the same; the test keeps the retries short (runs read these at creation)
    retries = {
        "distributed.p2p.comm.retry.count": 2,
        "distributed.p2p.comm.retry.delay.min": "10ms",
        "distributed.p2p.comm.retry.delay.max": "50ms",
    }
    with dask.config.set(retries), pytest.raises(P2POutOfDiskError) as info:
        ddf.shuffle(on="k", shuffle_method="p2p", npartitions=8).compute()
    error = info.value
    assert "P2P ran out of available disk space" in str(error)  # Dask's own fixed text
    # ours is its argument (the client gets the exception without its worker-side cause),
    # naming the run, the full spill directory and the OS error
    (message,) = error.args
    assert "ArrowShardsShuffleRun<" in message and "the spill directory is full" in message
    assert f"no space left for spilling in {full}/arrow-shards-spill-" in message
    assert "No space left on device" in message
    # the scheduler closes the runs once the client releases the shuffle's keys; the exception's
    # traceback is a reference cycle through frames that can hold the compute's futures, so it
    # is dropped and collected first (CI once waited 60 s for runs that were never released)
    del info, error
    gc.collect()
    wait_for(lambda: no_active_runs(client), "the runs to close")
    wait_for(lambda: list(Path(full).iterdir()) == [], "the spill directories to be removed")
    assert all(m["reserved"] == 0 for m in client.run(asd.metrics).values())


def test_settings_survive_a_config_reset():
    # distributed's test utilities reset dask.config.config to a copy made at their import, which
    # can predate arrow_shards.dask's defaults; the settings fall back to them
    import copy

    from arrow_shards.dask._settings import DEFAULTS, Settings

    saved = copy.deepcopy(dask.config.config)
    try:
        dask.config.config.pop("arrow-shards", None)
        settings = Settings.from_config()
    finally:
        dask.config.config.clear()
        dask.config.config.update(saved)
    assert settings == Settings(DEFAULTS["memory-limit"], DEFAULTS["compression"], None)


def _part_with_unused_categories(i: int) -> pd.DataFrame:
    rng = np.random.default_rng(i)
    categories = [f"c{j}" for j in range(50)]
    used = rng.choice(categories[:30], 300)  # c30..c49 never occur
    return pd.DataFrame(
        {"id": np.arange(300) + 300 * i, "k": rng.integers(0, 40, 300),
         "c": pd.Categorical(used, categories=categories)}
    )


def test_categoricals_keep_their_unused_categories(client, plugin):
    # the buffer concatenates small batches (compaction, spill, merge); arrow's concat of
    # dictionaries would drop unused values. Dask's own P2P keeps every category, so must we
    ddf = dd.from_map(_part_with_unused_categories, range(20))
    expected = ddf.shuffle(on="k", shuffle_method="p2p", npartitions=6).compute()
    plugin(memory_limit="64MiB")
    got = ddf.shuffle(on="k", shuffle_method="p2p", npartitions=6).compute()
    assert all(n >= 1 for n in runs(client).values())
    assert list(got["c"].cat.categories) == list(expected["c"].cat.categories)
    assert len(got["c"].cat.categories) == 50
    pd.testing.assert_frame_equal(sorted_rows(got, ["id"]), sorted_rows(expected, ["id"]))


def test_a_replaced_dask_run_class_keeps_its_overrides_over_ours(client, plugin, monkeypatch):
    # distributed's own tests replace DataFrameShuffleRun with subclasses that block or fail
    # a run at chosen points; the plugin builds that subclass on top of its own run
    from distributed.shuffle import _shuffle

    from arrow_shards.dask._run import ArrowShardsShuffleRun

    seen = []

    class Recording(_shuffle.DataFrameShuffleRun):
        async def inputs_done(self) -> None:
            seen.append(type(self).__mro__[1:3])
            await super().inputs_done()

    monkeypatch.setattr(_shuffle, "DataFrameShuffleRun", Recording)
    plugin()
    ddf = dd.from_pandas(frame(), npartitions=4)
    got = ddf.shuffle(on="k", shuffle_method="p2p").compute()
    pd.testing.assert_frame_equal(sorted_rows(got, ["id"]), sorted_rows(ddf.compute(), ["id"]))
    assert seen and all(mro == (Recording, ArrowShardsShuffleRun) for mro in seen), seen
    assert all(n == 1 for n in runs(client).values())


def test_a_self_merge_reads_each_partition_twice_and_equals_pandas(client, plugin):
    # df.merge(df): one shuffle serves both sides, so merge_unpack reads every output partition
    # twice in a row (distributed's test_merge_indicator); the second read gets the first
    # read's frame while it is alive
    pdf = pd.DataFrame({"id": range(200), "v": np.arange(200) % 7})
    ddf = dd.from_pandas(pdf, npartitions=4)
    plugin(memory_limit="64MiB")
    before = sum(runs(client).values())
    got = ddf.merge(ddf, on="id", how="outer", indicator=True, shuffle_method="p2p").compute()
    assert sum(runs(client).values()) > before, "arrow-shards ran the shuffle"
    expected = pdf.merge(pdf, on="id", how="outer", indicator=True)
    pd.testing.assert_frame_equal(
        got.sort_values("id", ignore_index=True), expected.sort_values("id", ignore_index=True)
    )
    assert (got["_merge"] == "both").all()


def test_a_repeat_read_gets_the_live_frame_and_fails_clearly_once_it_is_gone():
    import gc

    from arrow_shards import AlreadyReadError
    from arrow_shards.dask._run import _Read

    read = _Read()
    first = pd.DataFrame({"a": [1, 2, 3]})
    read.done(first)
    again = read.again("partition 5")
    pd.testing.assert_frame_equal(again, first)
    assert again is not first
    del first, again
    gc.collect()
    with pytest.raises(AlreadyReadError, match="partition 5 was read before and its frame is gone"):
        read.again("partition 5")

    failed = _Read()
    failed.failed(OSError("disk gone"))
    with pytest.raises(AlreadyReadError, match="that read failed: OSError"):
        failed.again("partition 6")


def test_a_worker_whose_local_quota_is_too_small_shuffles_through_the_object_store(
    client, plugin, s3
):
    df = frame(rows=40_000)
    ddf = dd.from_pandas(df, npartitions=8)
    expected = ddf.shuffle(on="k", shuffle_method="p2p", npartitions=16).compute()
    plugin(memory_limit="256KiB", spill_quota="64KiB", spill_to="s3://spill/dask")
    got = ddf.shuffle(on="k", shuffle_method="p2p", npartitions=16).compute()
    pd.testing.assert_frame_equal(sorted_rows(got, ["id"]), sorted_rows(expected, ["id"]))
    wait_for(lambda: no_active_runs(client), "the runs to close")
    metrics = client.run(asd.metrics)
    assert sum(m["overflow_runs"] for m in metrics.values()) > 0, metrics
    assert sum(m["rows_read"] for m in metrics.values()) == len(df)
    for worker, directory in local_directories(client).items():
        assert spill_dirs_under(directory) == [], worker
    wait_for(lambda: objects(s3) == 0, "the spilled objects to be deleted")
