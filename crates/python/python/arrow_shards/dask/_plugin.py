"""Activation: the worker plugin, and the preload hooks that add it by configuration alone."""

from __future__ import annotations

from typing import Any

from distributed.diagnostics.plugin import WorkerPlugin

from ._settings import OUTPUT_DTYPES, Settings, seconds
from ._version import check_distributed_version
from ._worker import activate, deactivate, state_of

PLUGIN_NAME = "arrow-shards-shuffle"


class ShufflePlugin(WorkerPlugin):
    """Makes P2P DataFrame shuffles keep received shards in arrow-shards buffers.

    ``client.register_plugin(ShufflePlugin(memory_limit="50%"))`` turns it on for every worker,
    present and future; ``client.unregister_worker_plugin(PLUGIN_NAME)`` turns it off. An
    argument left ``None`` is taken from the worker's ``arrow-shards.*`` dask config.
    ``output_dtypes="meta"`` keeps meta's Arrow dtypes in the output partitions (default
    ``"dask"``: Dask's own P2P dtypes; see docs/dask.md). ``read_stall_timeout`` (seconds, a
    duration string such as ``"90s"``, or a ``timedelta``) is how long a read of a spilled
    segment may wait for memory with nothing released before it fails (default 60 s).
    ``spill_to`` (``"s3://bucket/prefix"``) and ``spill_quota`` (a size): an object store
    behind each buffer's local spill directory, used once that holds ``spill_quota`` bytes or
    is full (as the ``ShardBuffer`` arguments of the same names).
    """

    name = PLUGIN_NAME

    def __init__(
        self,
        memory_limit: str | int | float | None = None,
        compression: str | None = None,
        spill_dir: str | None = None,
        output_dtypes: str | None = None,
        read_stall_timeout: Any = None,
        spill_to: str | None = None,
        spill_quota: str | int | None = None,
    ) -> None:
        check_distributed_version()
        if output_dtypes is not None and output_dtypes not in OUTPUT_DTYPES:
            raise ValueError(
                f"output_dtypes {output_dtypes!r}: expected one of "
                f"{', '.join(map(repr, OUTPUT_DTYPES))}"
            )
        self.memory_limit = memory_limit
        self.compression = compression
        self.spill_dir = spill_dir
        self.output_dtypes = output_dtypes
        seconds(read_stall_timeout, "read_stall_timeout")  # raises if it is not a duration
        self.read_stall_timeout = read_stall_timeout
        self.spill_to = spill_to
        self.spill_quota = spill_quota

    def setup(self, worker: Any) -> None:
        check_distributed_version()
        settings = Settings.from_config().overridden(
            memory_limit=self.memory_limit,
            compression=self.compression,
            spill_dir=self.spill_dir,
            output_dtypes=self.output_dtypes,
            read_stall_timeout=self.read_stall_timeout,
            spill_to=self.spill_to,
            spill_quota=self.spill_quota,
        )
        activate(worker, settings)

    def teardown(self, worker: Any) -> None:
        deactivate(worker)


async def dask_setup(worker: Any) -> None:
    """The preload hook (``dask worker --preload arrow_shards.dask``, or the
    ``distributed.worker.preload`` config): adds ``ShufflePlugin`` with the config's settings."""
    from distributed import Worker

    if not isinstance(worker, Worker):
        raise TypeError(
            f"arrow_shards.dask is a worker preload, not a {type(worker).__name__} one"
        )
    check_distributed_version()
    if state_of(worker) is None:
        await worker.plugin_add(ShufflePlugin(), name=PLUGIN_NAME, catch_errors=False)
