"""Private scratch directories that a later run removes once their owner is gone.

A loader's snapshot directory and a remote publish's staging copy live in the system's temporary directory (or
the one configured). Their owner removes them when it closes or exits normally; a process that is killed, or ends
with ``os._exit`` (a forked child, a test harness), cannot. Left there, a staged cache of gigabytes fills the disk
one crash at a time. So each directory carries its owner's advisory lock for as long as the owner lives, and the
next process that creates a directory of the same kind in the same place first removes those whose lock is free.

What is removed, exactly: an entry ``<prefix><8 characters>`` directly in the parent that is a directory (not a
link), owned by this user, holding the ``.owner`` marker (written only after the lock was taken, so a directory
being created is never taken for an abandoned one), whose lock a probe can take. On a file system without
``flock`` nothing is removed.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import stat
import tempfile
import weakref
from pathlib import Path

logger = logging.getLogger("torch_drt")

MARKER = ".owner"
_SUFFIX = 8  # the random part of ``tempfile.mkdtemp``'s names
_swept: set[tuple[str, str]] = set()  # (prefix, parent) listed by this process already: a shared /tmp can be long


def lock_is_free(fd: int) -> bool | None:
    """Whether the ``flock`` of the directory open at ``fd`` is free (no process holds it): True, False, or None
    where the file system has no ``flock`` on it (NFS on a read-only descriptor). A free lock is taken: closing
    ``fd`` drops it."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError:
        return None
    return True


def _abandoned(path: Path) -> bool:
    """Whether ``path`` is one of this user's scratch directories whose owner is gone (its lock is free)."""
    try:
        st = os.lstat(path)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
            return False
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        marker = os.stat(MARKER, dir_fd=fd, follow_symlinks=False)
        # the owner's lock is on the same directory: held (its owner lives) or no flock here, kept
        return stat.S_ISREG(marker.st_mode) and lock_is_free(fd) is True
    except OSError:  # no marker yet (being created)
        return False
    finally:
        os.close(fd)  # closing drops the probe's lock too


def remove_abandoned(prefix: str, parent: str | Path) -> list[Path]:
    """Remove the scratch directories ``parent/<prefix>XXXXXXXX`` whose owner is gone; return them."""
    removed: list[Path] = []
    try:
        with os.scandir(parent) as listing:
            names = [e.name for e in listing if e.name.startswith(prefix) and len(e.name) == len(prefix) + _SUFFIX]
    except OSError:
        return removed
    for path in (Path(parent) / name for name in names):
        if _abandoned(path):
            shutil.rmtree(path, ignore_errors=True)  # fd-based: a link planted inside is removed, not followed
            removed.append(path)
    if removed:
        logger.info("removed %d scratch directories left by processes that ended without removing them (%s*)",
                    len(removed), Path(parent) / prefix)
    return removed


class ScratchDir:
    """A fresh private directory ``<parent>/<prefix>XXXXXXXX`` (mode 0700), locked until ``close()``.

    The first one of a prefix and parent that a process creates first removes the abandoned ones there
    (``remove_abandoned``; once per process, as listing a shared temporary directory can take a while).
    ``close()`` (or the object's collection, or the interpreter's exit) removes the directory and its lock.

    Args:
        prefix: the kind of directory, e.g. ``"torch_drt-loader-"``.
        parent: where to create it (default: the system's temporary directory).
    """

    def __init__(self, prefix: str, parent: str | Path | None = None) -> None:
        parent = Path(tempfile.gettempdir() if parent is None else parent)
        if (prefix, str(parent)) not in _swept:
            remove_abandoned(prefix, parent)
            _swept.add((prefix, str(parent)))
        self.path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
        fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.close(os.open(MARKER, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600, dir_fd=fd))
        except OSError:  # no flock here: the directory works, only a later run cannot tell it was left
            pass
        self._finalizer = weakref.finalize(self, _remove, str(self.path), fd, os.getpid())

    def close(self) -> None:
        """Remove the directory (idempotent)."""
        self._finalizer()

    def __enter__(self) -> ScratchDir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"ScratchDir({str(self.path)!r})"


def _remove(path: str, fd: int, owner: int) -> None:
    """Remove the directory, then drop its lock (in this order: no probe can find it free while it exists). In a
    forked child (the object copied with the process) only the child's copy of the descriptor is closed: the
    directory is its parent's."""
    try:
        if os.getpid() == owner:
            shutil.rmtree(path, ignore_errors=True)
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)
