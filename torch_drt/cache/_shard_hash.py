"""The SHA-256 of a shard file being written, read back from the page cache as it grows."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


class ShardHash:
    """The SHA-256 of one shard file, read back from the page cache as it grows (run on the hasher thread).

    It reads through a descriptor of its own, into ``buffer``, shared by the shards of one writer (the hasher runs
    one job at a time) and grown once, so no fresh memory is touched per read.
    """

    _READ_BYTES = 8 << 20

    def __init__(self, path: Path, buffer: bytearray) -> None:
        self.path, self._buffer = path, buffer
        self._fd = os.open(path, os.O_RDONLY)
        self._hash = hashlib.sha256()
        self._done = 0

    def upto(self, end: int) -> None:
        """Hash the shard's bytes up to ``end`` (those before it are hashed already)."""
        buffer = self._buffer
        if len(buffer) < min(self._READ_BYTES, end - self._done):  # grown once, to what the reads need
            buffer.extend(bytes(min(self._READ_BYTES, end - self._done) - len(buffer)))
        view = memoryview(buffer)
        try:
            while self._done < end:
                n = _read_into(self._fd, view[: min(len(view), end - self._done)], self._done)
                if n == 0:
                    raise OSError(f"shard {self.path} ends at {self._done} bytes, {end} were written")
                self._hash.update(view[:n])
                self._done += n
        finally:
            view.release()

    def finish(self, end: int) -> str:
        """Hash the rest (up to ``end``, the shard's size) and return the hex digest; the descriptor is closed."""
        try:
            self.upto(end)
            return self._hash.hexdigest()
        finally:
            self.close()

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _read_into(fd: int, view: memoryview, offset: int) -> int:
    """Read ``fd`` at ``offset`` into ``view`` (the GIL released); the bytes read."""
    if hasattr(os, "preadv"):
        return os.preadv(fd, [view], offset)
    data = os.pread(fd, len(view), offset)
    view[: len(data)] = data
    return len(data)
