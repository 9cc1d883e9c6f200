"""P2P shuffles in Dask keep their received shards in ``arrow_shards`` buffers.

Turn it on for a cluster::

    import arrow_shards.dask
    client.register_plugin(arrow_shards.dask.ShufflePlugin(memory_limit="50%"))

or by configuration alone, as a worker preload (``dask worker --preload arrow_shards.dask``,
the ``distributed.worker.preload`` config, ``DASK_DISTRIBUTED__WORKER__PRELOAD``), with its
settings in the ``arrow-shards`` config section. Then DataFrame shuffles, merges and
``set_index`` through P2P write each received shard into a ``ShardBuffer`` on the worker's
shared pool (memory first, disk behind) and read each output partition straight from it, with
no flush. ``client.run(arrow_shards.dask.metrics)`` gives each worker's totals. See
docs/dask.md.
"""

from __future__ import annotations

from ._version import (
    SUPPORTED_DISTRIBUTED,
    UnsupportedDistributedError,
    check_distributed_version,
)

check_distributed_version()

from ._metrics import metrics  # noqa: E402
from ._plugin import PLUGIN_NAME, ShufflePlugin, dask_setup  # noqa: E402

__all__ = [
    "ShufflePlugin",
    "PLUGIN_NAME",
    "metrics",
    "dask_setup",
    "SUPPORTED_DISTRIBUTED",
    "UnsupportedDistributedError",
    "check_distributed_version",
]
