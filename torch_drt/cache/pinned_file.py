"""PinnedFile: a verified file of the node cache, mapped read-only and locked shared while a reader holds it."""

from __future__ import annotations

import contextlib
import mmap
import os

__all__ = ["PinnedFile"]


class PinnedFile:
    """A verified file of the node cache, mapped read-only and locked shared (so it is not evicted) until closed.

    Attributes:
        path: the file.
        size: its size.
    """

    def __init__(self, path: str, fd: int, size: int, mapped: bool = True) -> None:
        self.path, self.size, self._fd = path, size, fd
        self.map: mmap.mmap | bytes = mmap.mmap(fd, 0, access=mmap.ACCESS_READ) if size and mapped else b""

    def close(self) -> None:
        """Unmap and unlock (a slice still alive keeps its own copy; a view keeps the map until it goes)."""
        if isinstance(self.map, mmap.mmap):
            with contextlib.suppress(BufferError):
                self.map.close()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
