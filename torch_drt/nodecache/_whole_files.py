"""Downloads whose bytes are all in but not verified yet, shown to the other processes of the node that wait for them.

A download into the node cache ends with a disk sync, a checksum of the file and a rename into ``data/``; another
process waiting for that download (a loading process waiting for its first batch's shards, which its parent
requested before the fork) need not wait for those when it checks every record it reads itself. Once all its bytes
are written, the download's temporary file is renamed ``tmp/<key>.<pid>.<hex>.whole`` (``show``); a waiter polling
the download's lock looks for that name (``WholeLook``) and reads the bytes. Nothing read so is trusted beyond the
reader's own record checks, and the node cache's copy is verified as before.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path
from typing import Protocol

SUFFIX = ".whole"


class Receiver(Protocol):
    """Who takes the bytes of another process's download: ``wanted()`` says whether they are wanted now (they
    are read only then), ``take(data)`` gets them (not verified: the receiver checks what it reads)."""

    def wanted(self) -> bool: ...

    def take(self, data: bytes) -> None: ...


def show(tmp: Path) -> Path:
    """Rename the download ``tmp``, whose bytes are all written, to its whole name; returns its name now (``tmp``
    when the rename failed: the waiters then wait for the verified file)."""
    whole = tmp.with_name(tmp.name + SUFFIX)
    try:
        os.rename(tmp, whole)
    except OSError:
        return tmp
    return whole


class WholeLook:
    """Called at each poll of a download's lock another process holds: once that download's bytes are all in and
    the receiver wants them, it gets them (once).

    Args:
        tmp_dir: the node cache's ``tmp/``.
        key: the file's key.
        size: its size (a file of another size is not the download's).
        receiver: who takes the bytes.
    """

    def __init__(self, tmp_dir: Path, key: str, size: int, receiver: Receiver) -> None:
        self.tmp_dir, self.size, self.receiver = str(tmp_dir), size, receiver
        self._prefix = f"{key}."
        self.done = False

    def __call__(self) -> None:
        if self.done or not self.receiver.wanted():
            return
        for name in self._names():
            data = self._read(f"{self.tmp_dir}/{name}")
            if data is not None:
                self.done = True
                self.receiver.take(data)
                return

    def _names(self) -> list[str]:
        try:
            with os.scandir(self.tmp_dir) as it:
                return [e.name for e in it if e.name.startswith(self._prefix) and e.name.endswith(SUFFIX)]
        except OSError:
            return []

    def _read(self, path: str) -> bytes | None:
        """The file's bytes when it is a regular file of the expected size (it may be renamed away meanwhile, or
        planted by a user sharing the directory: never a FIFO or a link followed); None otherwise."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size != self.size:
                return None
            parts, left = [], self.size
            while left:
                part = os.read(fd, left)
                if not part:
                    return None
                parts.append(part)
                left -= len(part)
            return parts[0] if len(parts) == 1 else b"".join(parts)
        except OSError:
            return None
        finally:
            with contextlib.suppress(OSError):
                os.close(fd)
