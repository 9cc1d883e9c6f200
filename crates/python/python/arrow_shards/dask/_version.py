"""Which ``distributed`` versions ``arrow_shards.dask`` supports, checked at activation.

The plugin subclasses P2P's ``DataFrameShuffleRun`` and reads its private attributes, which
change between releases, so it refuses any version it was not tested with rather than
misbehave silently.
"""

from __future__ import annotations

#: The ``distributed`` releases the plugin was written and tested against (a PEP 440 range).
SUPPORTED_DISTRIBUTED = ">=2026.8.0,<2026.9.0"


class UnsupportedDistributedError(RuntimeError):
    """The installed ``distributed`` is outside ``SUPPORTED_DISTRIBUTED``."""


def check_distributed_version(installed: str | None = None) -> str:
    """Returns the installed ``distributed`` version, or raises ``UnsupportedDistributedError``."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    if installed is None:
        import distributed

        installed = distributed.__version__
    try:
        supported = Version(installed) in SpecifierSet(SUPPORTED_DISTRIBUTED)
    except InvalidVersion:
        supported = False
    if not supported:
        raise UnsupportedDistributedError(
            f"arrow_shards.dask supports distributed {SUPPORTED_DISTRIBUTED}, but "
            f"distributed {installed} is installed; its P2P shuffle internals may differ, so "
            "the plugin is not activated (install a supported distributed, or do not load "
            "arrow_shards.dask)"
        )
    return installed
