"""The SHA-256 of a shard file being written, hashed from the page cache as it grows."""

from __future__ import annotations

import hashlib
import mmap
import os
from pathlib import Path

_MAP_FLAGS = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)  # Linux maps every page at once, not page by page


class ShardHash:
    """The SHA-256 of one shard file, hashed from the page cache as it grows (run on the hasher thread).

    Each piece is hashed where it lies in the page cache, through a read-only map of the file (no copy of the bytes
    into a buffer of ours: about a fifth of the hasher's time). The map covers only bytes the writer has written,
    and ``mmap`` looks at the file's size first: a file shortened meanwhile (another process of the same user) is
    an ``OSError``, not a SIGBUS, unless it is shortened in the instant between that look and the hash (the same
    window as a local cache's reads, ``torch_drt.locations.local``).
    """

    _READ_BYTES = 8 << 20  # at most this many bytes are mapped at once

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = os.open(path, os.O_RDONLY)
        self._hash = hashlib.sha256()
        self._done = 0

    def upto(self, end: int) -> None:
        """Hash the shard's bytes up to ``end`` (those before it are hashed already)."""
        while self._done < end:
            self._hash_piece(min(end, self._done + self._READ_BYTES))

    def _hash_piece(self, stop: int) -> None:
        base = self._done - self._done % mmap.ALLOCATIONGRANULARITY  # a map starts at a multiple of this
        try:  # CPython looks at the file's size first, and refuses a map past its end
            mapped = mmap.mmap(self._fd, stop - base, flags=_MAP_FLAGS, prot=mmap.PROT_READ, offset=base)
        except ValueError:
            size = os.fstat(self._fd).st_size
            raise OSError(f"shard {self.path} ends at {size} bytes, {stop} were written") from None
        with mapped, memoryview(mapped) as whole, whole[self._done - base :] as piece:
            self._hash.update(piece)  # the GIL released while it hashes
        self._done = stop

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
