"""A remote file written into a local file descriptor by ranged requests of ``chunk_bytes``, a few in flight."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch_drt.locations.remote_store import RemoteStore

_CHUNKS_IN_FLIGHT = 4  # byte-range requests in flight for one download


def download(store: RemoteStore, rel: str, fd: int, size: int) -> None:
    """Write the ``size`` bytes of ``store``'s file ``rel`` to ``fd`` at their offsets.

    Raises:
        EOFError: when the file is shorter than ``size``.
    """
    chunk = store.config.chunk_bytes
    starts = list(range(0, size, chunk))
    for g in range(0, len(starts), _CHUNKS_IN_FLIGHT):
        group = starts[g : g + _CHUNKS_IN_FLIGHT]
        ends = [min(s + chunk, size) for s in group]
        for start, end, data in zip(group, ends, store.read_ranges([rel] * len(group), group, ends)):
            if len(data) != end - start:
                raise EOFError(f"{store.join(rel)}: got {len(data)} bytes at offset {start}, expected {end - start}")
            view, offset = memoryview(data), start
            while view:
                written = os.pwrite(fd, view, offset)
                view, offset = view[written:], offset + written
