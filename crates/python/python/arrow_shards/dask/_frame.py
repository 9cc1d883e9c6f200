"""A peer's shard on the wire: its Arrow IPC stream as an out-of-band pickle buffer.

Dask sends a batch of shards to a peer as one message, ``to_serialize([(input partition,
shard), ...])``, which its serialisation pickles with protocol 5 and a buffer callback; a
``bytes`` shard (what Dask's own split makes) is copied into the pickle stream, and unpickled
by another copy on the receiver. The split here hands a peer's stream over as a ``Frame``: a
``pyarrow.Buffer`` over the bytes Rust wrote (not copied), which pickles as a
``pickle.PickleBuffer`` at protocol 5, so the comms send it as a frame of its own, straight
from that memory, and the receiver gets a ``pyarrow.Buffer`` over the frame it read (no copy
either; ``_native._dask_receive`` decodes it in place). At a lower protocol (stdlib
``pickle.dumps``) it is pickled in band, as pyarrow does. ``dask.sizeof`` counts its bytes, so
Dask's comm buffer and its memory limiter see the shard's real size (a bare
``pyarrow.Buffer`` counts as ~64 bytes there).
"""

from __future__ import annotations

import pickle
from typing import Any

from dask.sizeof import sizeof

#: A message whose shards average less than this is pickled whole, in band, into one
#: ``bytes`` (Dask's own rule in ``ShuffleRun.send``, distributed PR 8318: many small frames
#: cost more over TCP than a copy).
SMALL_SHARDS = 65536


class Frame:
    """A shard for a peer: an Arrow IPC stream held in a ``pyarrow.Buffer``."""

    __slots__ = ("buffer",)

    def __init__(self, buffer: Any) -> None:
        self.buffer = buffer

    @property
    def nbytes(self) -> int:
        return int(self.buffer.size)

    def __reduce_ex__(self, protocol: int) -> Any:
        # unpickles as the pyarrow.Buffer itself (pyarrow's own reduction: a PickleBuffer at
        # protocol 5, out of band when the pickler has a buffer callback)
        return self.buffer.__reduce_ex__(protocol)

    def __repr__(self) -> str:
        return f"Frame({self.nbytes} bytes)"


@sizeof.register(Frame)
def _sizeof_frame(frame: Frame) -> int:
    return frame.nbytes


def nbytes(shard: Any) -> int:
    """A shard's size in bytes: a ``Frame``, a received ``pyarrow.Buffer``, a
    ``pyarrow.Table`` (the local shortcut), or ``bytes`` (Dask's own split)."""
    if isinstance(shard, Frame):
        return shard.nbytes
    size = getattr(shard, "size", None)  # pyarrow.Buffer
    if isinstance(size, int):
        return size
    table_bytes = getattr(shard, "nbytes", None)  # pyarrow.Table
    if isinstance(table_bytes, int):
        return table_bytes
    return memoryview(shard).nbytes


def payload(shards: list[tuple[int, Any]]) -> list[tuple[int, Any]] | bytes:
    """What ``send`` hands to the comms for ``shards``: the list itself (Dask's serialisation
    sends each ``Frame`` out of band), or, for small shards, the list pickled in band into one
    ``bytes`` as Dask does (its receiver unpickles it)."""
    sample = shards[:10]
    if sample and sum(nbytes(s) for _, s in sample) / len(sample) < SMALL_SHARDS:
        return pickle.dumps(shards, protocol=pickle.HIGHEST_PROTOCOL)
    return shards
