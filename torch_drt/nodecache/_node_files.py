"""File primitives of the node cache: locks, unlinking a file nobody holds, reserving space up front."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import stat
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from torch_drt.nodecache import _path_locks

logger = logging.getLogger("torch_drt.cache")
_MAX_PAUSE = 0.01  # the longest sleep between two tries of a file lock another process holds
_PID_BYTES = 20  # a lock file holds its holder's pid, space-padded to this width
_HELD: set[int] = set()  # descriptors of this process's lock files, while open (see _after_fork_in_child)
_GUARD = threading.Lock()  # held while such a descriptor is opened and recorded: no fork in between


def _after_fork_in_child() -> None:
    """A file lock belongs to the open file, which a forked child shares with its parent through the copies of
    the descriptors it inherits: a lock a thread of the parent held at the fork (a download in flight, a look
    whether one is) would stay held while the child lives, and the child would wait ``lock_wait`` for its own
    copy. The child points its copies at /dev/null (the numbers stay valid for a frame that closes them), so the
    lock goes when the parent drops it."""
    global _GUARD
    _GUARD = threading.Lock()
    if not _HELD:
        return
    null = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    try:
        for fd in _HELD:
            with contextlib.suppress(OSError):
                os.dup2(null, fd, inheritable=False)
    finally:
        os.close(null)
    _HELD.clear()


os.register_at_fork(before=lambda: _GUARD.acquire(), after_in_parent=lambda: _GUARD.release(),
                    after_in_child=_after_fork_in_child)


def lock_fd(open_fd: Callable[[], int]) -> int:
    """``open_fd()``: a descriptor to take a file lock on, recorded so that a forked child drops its copy (see
    ``_after_fork_in_child``); close it with ``close_lock_fd``."""
    with _GUARD:
        fd = open_fd()
        _HELD.add(fd)
    return fd


def close_lock_fd(fd: int) -> None:
    """Close a descriptor of ``lock_fd`` (which drops its lock). Under the guard, as its opening: a fork between
    forgetting the descriptor and closing it would leave the child a copy it does not know of, which holds the
    lock for the child's whole life (the child would wait ``lock_wait`` for each of its own tries of it)."""
    with _GUARD:
        _HELD.discard(fd)
        os.close(fd)


def create(path: str | Path, flags: int, mode: int, remake: Callable[[], None] | None = None) -> int:
    """``os.open`` that never follows a link (another user's link to a file of ours is refused, ``ELOOP``), with
    ``mode`` applied whatever the umask where it grants the group access (a cache shared on purpose) to a regular
    file of this user; a file another user created keeps its mode. ``remake`` makes a missing directory again."""
    try:
        try:
            fd = os.open(path, flags | os.O_NOFOLLOW, mode)
        except FileNotFoundError:
            if remake is None or not flags & os.O_CREAT:
                raise
            remake()
            fd = os.open(path, flags | os.O_NOFOLLOW, mode)
    except PermissionError as e:
        raise not_shared(path, e) from None
    if mode & 0o070:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid():
            os.fchmod(fd, mode)
    return fd


@contextlib.contextmanager
def locked(
    path: Path,
    mode: int = 0o600,
    wait: float | None = None,
    remake: Callable[[], None] | None = None,
    polled: Callable[[], None] | None = None,
) -> Iterator[bool]:
    """Hold the exclusive lock of ``path`` (the holder's pid is written into it); True when held. After ``wait``
    seconds without the lock (its holder stopped or hung: a suspended job, say) it goes on without it (False) and
    logs the holder's pid; the callers' work is safe without it, only done twice. ``remake`` makes the lock's
    directory again when it is missing (removed while in use); ``polled()`` is called at each try while another
    process holds the lock."""
    deadline = None if wait is None else time.monotonic() + wait
    entry, taken = _path_locks.acquire(str(path), wait)  # this process's threads queue here, without polling
    try:
        with _flocked(path, mode, wait, deadline if taken else time.monotonic(), remake, polled) as held:
            yield held
    finally:
        _path_locks.release(str(path), entry, taken)


@contextlib.contextmanager
def _flocked(
    path: Path,
    mode: int,
    wait: float | None,
    deadline: float | None,
    remake: Callable[[], None] | None,
    polled: Callable[[], None] | None,
) -> Iterator[bool]:
    """``locked``'s file lock, against the other processes (waiting until ``deadline``: None waits forever)."""
    fd = lock_fd(lambda: create(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, mode, remake))
    try:
        held = _wait_for(fd, deadline, polled)
        if held:
            with contextlib.suppress(OSError):  # padded to the reader's width: no truncation (a journal write each)
                os.pwrite(fd, f"{os.getpid():<{_PID_BYTES}}".encode(), 0)
        else:
            holder = os.pread(fd, _PID_BYTES, 0).decode(errors="replace").strip() or "unknown"
            logger.warning("node cache lock %s: held for over %.0f s by pid %s (stopped or hung?); going on without "
                           "it", path, wait, holder)
        yield held
    finally:
        close_lock_fd(fd)  # closing drops the lock


def _wait_for(fd: int, deadline: float | None, polled: Callable[[], None] | None = None) -> bool:
    if deadline is None and polled is None:
        fcntl.flock(fd, fcntl.LOCK_EX)
        return True
    pause = 0.001
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if polled is not None:
                polled()
            if deadline is None:
                time.sleep(pause)
            elif time.monotonic() >= deadline:
                return False
            else:
                time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
            pause = min(pause * 2, _MAX_PAUSE)


def remove_unused(path: Path) -> bool:
    """Unlink ``path`` unless a reader holds it; True when it was removed (or was gone)."""
    try:
        fd = lock_fd(lambda: os.open(path, os.O_RDONLY | os.O_CLOEXEC))
    except FileNotFoundError:
        return True
    try:
        if not free(fd):
            return False
        path.unlink(missing_ok=True)  # under the exclusive lock: no reader can take it meanwhile
        return True
    finally:
        close_lock_fd(fd)


def downloading(tmp_dir: Path, key: str) -> bool:
    """True when a live process has a download of ``key`` in ``tmp_dir`` (its name holds the pid): a lock file
    made again after the cache directory was emptied is free while that download still runs."""
    return any(_live(entry.name[len(key) + 1 :].partition(".")[0]) for entry in tmp_dir.glob(f"{key}.*"))


def _live(pid: str) -> bool:
    """True when ``pid`` (a download's name part) is a live process."""
    if not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


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


def not_shared(path: str | Path, error: OSError) -> PermissionError:
    """The error for a node-cache file this user may not open: another user made it and did not share it."""
    return PermissionError(
        error.errno, f"node cache file {path}: {error.strerror}; another user made it and does not share it with "
        "you: give every user of this directory RemoteConfig(shared_node_cache=True) (a group shares it), or use "
        "a cache_dir of your own"
    )


def too_large(directory: Path, limit: int, shown: str, size: int) -> ValueError:
    return ValueError(
        f"{shown} is {size:,} bytes, more than the node cache's limit of {limit:,} bytes ({directory}): raise "
        "RemoteConfig.cache_limit, or read it by ranges (RemoteConfig(read_mode='ranges'))"
    )


def entries(directory: Path) -> list[tuple[float, int, str]]:
    """(mtime, size, path) of each file in ``directory`` (none when it is missing). Every download's space
    accounting scans the cache under the space lock, so this is kept lean: one ``stat`` per file, no ``Path``."""
    out: list[tuple[float, int, str]] = []
    try:
        it = os.scandir(directory)
    except FileNotFoundError:
        return out
    with it:
        for entry in it:
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:  # removed since the listing
                continue
            out.append((st.st_mtime, st.st_size, entry.path))
    return out


def evict(directory: Path, limit: int, need: int, abandoned: Callable[[str], bool]) -> tuple[int, int]:
    """Remove the node cache's abandoned downloads, then its least recently used files nobody holds until ``need``
    more bytes fit under ``limit``; returns the bytes freed and the bytes held after (``NodeCache.evict``)."""
    usage = 0
    for _, size, path in entries(directory / "tmp"):
        key, _, rest = os.path.basename(path).partition(".")
        if not _live(rest.partition(".")[0]) and abandoned(key):  # (a live downloader's file is not abandoned)
            Path(path).unlink(missing_ok=True)
        else:
            usage += size
    data = entries(directory / "data")
    usage += sum(size for _, size, _ in data)
    freed = 0
    if usage + need <= limit:
        return freed, usage
    for _, size, path in sorted(data):
        if usage + need <= limit:
            break
        if remove_unused(Path(path)):
            usage -= size
            freed += size
    return freed, usage
