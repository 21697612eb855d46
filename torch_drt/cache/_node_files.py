"""File primitives of the node cache: locks, unlinking a file nobody holds, reserving space up front."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
from collections.abc import Iterator
from pathlib import Path

__all__ = ["create", "disk_full", "entries", "free", "locked", "preallocate", "remove_unused", "too_large"]


def create(path: str | Path, flags: int, mode: int) -> int:
    """``os.open`` that never follows a link (another user's link to a file of ours is refused, ``ELOOP``), with
    ``mode`` applied whatever the umask where it grants the group access (a cache shared on purpose) to a regular
    file of this user; a file another user created keeps its mode."""
    fd = os.open(path, flags | os.O_NOFOLLOW, mode)
    if mode & 0o070:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid():
            os.fchmod(fd, mode)
    return fd


@contextlib.contextmanager
def locked(path: Path, flags: int = fcntl.LOCK_EX, mode: int = 0o600) -> Iterator[int]:
    fd = create(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, mode)
    try:
        fcntl.flock(fd, flags)
        yield fd
    finally:
        os.close(fd)  # closing drops the lock


def remove_unused(path: Path) -> bool:
    """Unlink ``path`` unless a reader holds it; True when it was removed (or was gone)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return True
    try:
        if not free(fd):
            return False
        path.unlink(missing_ok=True)  # under the exclusive lock: no reader can take it meanwhile
        return True
    finally:
        os.close(fd)


def free(fd: int) -> bool:
    """Take an exclusive lock on ``fd`` if nobody holds one (it goes with the descriptor); False when held."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def preallocate(fd: int, size: int) -> None:
    """Reserve ``size`` bytes now, so that a full disk fails before any download (sparse where unsupported)."""
    if size == 0:
        return
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as e:
        if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            raise
        os.ftruncate(fd, size)


def disk_full(directory: Path, shown: str, size: int) -> OSError:
    return OSError(
        errno.ENOSPC,
        f"node cache {directory}: no space left on the device for {shown} ({size:,} bytes); free space there, "
        "lower RemoteConfig.cache_limit, or choose another cache_dir",
    )


def too_large(directory: Path, limit: int, shown: str, size: int) -> ValueError:
    return ValueError(
        f"{shown} is {size:,} bytes, more than the node cache's limit of {limit:,} bytes ({directory}): raise "
        "RemoteConfig.cache_limit, or read it by ranges (RemoteConfig(read_mode='ranges'))"
    )


def entries(directory: Path) -> list[tuple[float, int, Path]]:
    """(mtime, size, path) of each file in ``directory`` (none when it is missing)."""
    out = []
    with contextlib.suppress(FileNotFoundError), os.scandir(directory) as it:
        for entry in it:
            with contextlib.suppress(FileNotFoundError):
                st = entry.stat(follow_symlinks=False)
                out.append((st.st_mtime, st.st_size, Path(entry.path)))
    return out
