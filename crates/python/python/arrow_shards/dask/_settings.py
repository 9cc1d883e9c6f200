"""The plugin's settings: arguments of ``ShufflePlugin``, else the ``arrow-shards.*`` dask config.

``memory-limit`` is the budget all shuffle runs on a worker share: a percentage (``"50%"``) or
a fraction (``0.5``) of the worker's memory limit, or a size (``"2GiB"``, an ``int`` of bytes).
``compression`` is of spilled data (``"none"``, ``"lz4"``, ``"zstd"``, ``"zstd:LEVEL"``).
``spill-dir`` is where each run's private spill directory is made; ``None``: the worker's
``local_directory``. ``spill-to`` is an object store behind it (``"s3://bucket/prefix"``,
credentials from the worker's ``AWS_*`` environment): each buffer's runs go there once its
local spill directory holds ``spill-quota`` bytes (a size; ``None``: no quota) or is full.
``output-dtypes`` is ``"dask"`` (output partitions have the dtypes Dask's
own P2P gives) or ``"meta"`` (columns whose meta dtype is an Arrow dtype keep it instead of
becoming Python objects; see ``_read``). ``read-stall-timeout`` is the buffers'
``read_stall_timeout``: how long a read of a spilled segment may wait for memory with nothing
released before it fails (seconds, a Dask duration string such as ``"90s"``, or a
``timedelta``); ``None``: the buffers' default, 60 s.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import dask.config

#: The defaults of the ``arrow-shards`` config section.
DEFAULTS: dict[str, Any] = {
    "memory-limit": "50%",
    "compression": "none",
    "spill-dir": None,
    "output-dtypes": "dask",
    "read-stall-timeout": None,
    "spill-to": None,
    "spill-quota": None,
}

#: The values ``output-dtypes`` takes.
OUTPUT_DTYPES = ("dask", "meta")

dask.config.update_defaults({"arrow-shards": DEFAULTS})


@dataclass(frozen=True)
class Settings:
    memory_limit: str | int | float
    compression: str
    spill_dir: str | None
    output_dtypes: str = "dask"
    read_stall_timeout: Any = None
    spill_to: str | None = None
    spill_quota: str | int | None = None

    def __post_init__(self) -> None:
        if self.output_dtypes not in OUTPUT_DTYPES:
            raise ValueError(
                f"arrow-shards output-dtypes {self.output_dtypes!r}: expected one of "
                f"{', '.join(map(repr, OUTPUT_DTYPES))}"
            )
        self.read_stall_seconds()  # raises if it is not a duration

    def read_stall_seconds(self) -> float | None:
        """``read-stall-timeout`` in seconds (``None``: the buffers' default)."""
        return seconds(self.read_stall_timeout, "read-stall-timeout")

    @classmethod
    def from_config(cls) -> Settings:
        """The ``arrow-shards.*`` config of this process (``DASK_ARROW_SHARDS__...`` too).

        A key missing from the config takes its default: code that resets ``dask.config.config``
        to a copy made before this module was imported (distributed's test utilities do, before
        each test cluster) drops the defaults installed above."""

        def get(key: str) -> Any:
            return dask.config.get(f"arrow-shards.{key}", default=DEFAULTS[key])

        return cls(
            memory_limit=get("memory-limit"),
            compression=get("compression"),
            spill_dir=get("spill-dir"),
            output_dtypes=get("output-dtypes"),
            read_stall_timeout=get("read-stall-timeout"),
            spill_to=get("spill-to"),
            spill_quota=get("spill-quota"),
        )

    def overridden(self, **given: Any) -> Settings:
        """These settings with the arguments that are not ``None``."""
        return replace(self, **{k: v for k, v in given.items() if v is not None})

    def budget(self, worker_memory_limit: int | None) -> int | str:
        """The worker's shuffle budget: bytes, or a size string the pool parses."""
        limit = self.memory_limit
        fraction: float | None = None
        if isinstance(limit, str) and limit.strip().endswith("%"):
            fraction = _number(limit.strip()[:-1], limit) / 100
        elif isinstance(limit, float):
            fraction = limit
        if fraction is None:
            if isinstance(limit, bool) or not isinstance(limit, (int, str)):
                raise TypeError(f"arrow-shards memory-limit {limit!r}: expected a size or a fraction")
            return limit
        if not 0 < fraction <= 1:
            raise ValueError(f"arrow-shards memory-limit {limit!r}: a fraction must be in (0, 1]")
        if not worker_memory_limit:
            raise ValueError(
                f"arrow-shards memory-limit {limit!r} is a share of the worker's memory limit, "
                "but this worker has none: give the budget as a size (e.g. '2GiB')"
            )
        return int(worker_memory_limit * fraction)


def _number(text: str, whole: Any) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"arrow-shards memory-limit {whole!r}: not a percentage") from None


def seconds(value: Any, key: str) -> float | None:
    """``value`` (seconds, a Dask duration string such as ``"90s"``, or a ``timedelta``) as
    seconds: ``ValueError`` unless it is finite and at least 0 (``None`` stays ``None``)."""
    import datetime

    from dask.utils import parse_timedelta

    if value is None:
        return None
    try:
        if isinstance(value, bool):
            raise TypeError
        if isinstance(value, datetime.timedelta):
            got = value.total_seconds()
        elif isinstance(value, str):
            got = float(parse_timedelta(value, default="seconds"))
        else:
            got = float(value)
    except (TypeError, ValueError, KeyError, OverflowError):
        raise ValueError(
            f"arrow-shards {key} {value!r}: expected seconds, a duration such as '90s', or a "
            "timedelta"
        ) from None
    if not 0 <= got <= 1e9:  # the buffers' range; NaN fails too
        raise ValueError(
            f"arrow-shards {key} {value!r}: must be a finite duration >= 0 (at most 1e9 s)"
        )
    return got
