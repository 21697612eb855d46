"""PinnedFile: a verified file of the node cache, mapped read-only and locked shared while a reader holds it."""

from __future__ import annotations

import contextlib
import fcntl
import mmap
import os


class PinnedFile:
    """A verified file of the node cache, mapped read-only and locked shared (so it is not evicted) until closed
    or unlocked (an idle map: the node cache may evict the file; ``relock`` tells whether it did).

    Attributes:
        path: the file.
        size: its size.
    """

    def __init__(self, path: str, fd: int, size: int, mapped: bool = True) -> None:
        self.path, self.size, self._fd = path, size, fd
        self.map: mmap.mmap | bytes = mmap.mmap(fd, 0, access=mmap.ACCESS_READ) if size and mapped else b""

    def size_now(self) -> int:
        """The file's size now (it differs from ``size`` when the file was truncated or grown while pinned);
        ``size`` once closed."""
        return os.fstat(self._fd).st_size if self._fd >= 0 else self.size

    def unlock(self) -> None:
        """Let the node cache evict the file while it stays mapped (an idle map: ``relock`` before reading)."""
        if self._fd >= 0:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def relock(self) -> bool:
        """Hold the file against eviction again; False when it was evicted (or replaced) while unlocked: the map
        is then of a file no longer in the cache (close it, map the cache's file anew)."""
        if self._fd < 0:
            return False
        fcntl.flock(self._fd, fcntl.LOCK_SH)
        return not self.gone()

    def gone(self) -> bool:
        """True when the file is no longer in the node cache (evicted, removed, or its directory emptied)."""
        if self._fd < 0:
            return True
        try:
            st = os.fstat(self._fd)
            return st.st_nlink == 0 or st.st_size != self.size
        except OSError:
            return True

    def close(self) -> None:
        """Unmap and unlock (a slice still alive keeps its own copy; a view keeps the map until it goes)."""
        if isinstance(self.map, mmap.mmap):
            with contextlib.suppress(BufferError):
                self.map.close()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
