"""NodeCache: one directory of verified remote files shared by every process and rank of a node.

Layout under the directory::

    data/<algo>-<digest>     verified files, named by their content checksum (shards, index and metadata files)
    tmp/<key>.<pid>.<hex>    downloads in progress (``.whole`` added once all their bytes are written: read before
                             their check only by waiters that check every record, ``_whole_files``)
    locks/<key>.lock         one download at a time per file, across processes
    small/<name>             manifests, reused for ``ttl`` seconds (their age is their mtime)
    .space.lock              space accounting and eviction, one process at a time

A download goes to a temporary name, is checked (size and checksum), synced and renamed into ``data/``: a killed
downloader leaves only a temporary file, which the next downloader of that file (or an eviction pass) removes.
Processes wanting the same file queue on its lock, so it is downloaded once. A read holds a shared ``flock`` on the
file it copies from (an idle map holds none); eviction takes files least recently used first (by mtime, refreshed
when a file is opened; a file no planned read of a process wants any more, and no other reader holds, is demoted:
its mtime is set a month back) and skips any it cannot lock exclusively, so a file in use is never pulled from
under its reader. A reader that maps a file just as it was evicted notices (its link count is 0) and fetches it
again. A prefetch is not downloaded when it does not fit under the limit; a file larger than the limit is refused.
The directory
is private to its user (``0700``, files ``0600``; one found that another user owns or may write is refused:
``_node_dir``) unless a group shares it on purpose.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import stat
import time
from collections.abc import Callable
from pathlib import Path

from torch_drt.nodecache._node_dir import file_mode, prepare
from torch_drt.nodecache._node_files import (
    close_lock_fd,
    create,
    disk_full,
    free,
    lock_fd,
    locked,
    not_shared,
    too_large,
)
from torch_drt.nodecache._node_small import ManifestCopies
from torch_drt.nodecache._node_space import NodeSpace
from torch_drt.nodecache._whole_files import Receiver, WholeLook, show
from torch_drt.nodecache.pinned_file import PinnedFile

logger = logging.getLogger("torch_drt.cache")

_SHARED: dict[tuple[str, int, int, bool, float | None], NodeCache] = {}  # by directory, limit, pid, group, wait
_WAIT = 60.0  # RemoteConfig.lock_wait's default
_DEMOTED_AGE = 30 * 86400.0  # a demoted file's mtime lies this far back: older than any file in use


class NodeCache(ManifestCopies, NodeSpace):
    """The node-local cache of remote files (see the module docstring for the protocol).

    Args:
        directory: the cache directory (created ``0700`` when missing; one found must be this user's and
            writable by nobody else: ``torch_drt.nodecache._node_dir``); must be local to the node.
        limit: bytes the cache may hold.
        group: share the cache with the directory's group on purpose (``2770`` directories, ``0660`` files).
        lock_wait: seconds to wait for another process's lock (a download, the space accounting, a manifest copy)
            before going on without it (a download is then done again here) and logging the holder's pid; None
            waits forever.

    Raises:
        PermissionError: when the directory belongs to another user or others may write into it.
    """

    def __init__(self, directory: str | Path, limit: int, group: bool = False, lock_wait: float | None = _WAIT) -> None:
        self.directory = Path(directory)
        self.limit = int(limit)
        self.group = group
        self.lock_wait = lock_wait
        self._mode = file_mode(group)
        self._data = str(self.directory / "data")  # the verified files' directory (as a string: pins are hot)
        prepare(self.directory, group)

    def _remake(self) -> None:
        """Make the directory (or the part of it) removed while in use again, with the same checks."""
        logger.warning("node cache %s: its directory was emptied or removed while in use; making it again",
                       self.directory)
        prepare(self.directory, self.group)

    def _lock(self, name: str, polled: Callable[[], None] | None = None) -> contextlib.AbstractContextManager[bool]:
        return locked(self.directory / name, self._mode, self.lock_wait, self._remake, polled)

    def _create(self, path: Path, flags: int) -> int:
        return create(path, flags, self._mode, self._remake)

    def _again(self, step: Callable[[], None]) -> None:
        """``step()``, once more after making the directory again when a part of it is missing."""
        try:
            step()
        except FileNotFoundError:
            self._remake()
            step()

    @classmethod
    def shared(
        cls, directory: str | Path, limit: int, group: bool = False, lock_wait: float | None = _WAIT
    ) -> NodeCache:
        """The one instance of this process for these arguments."""
        key = (str(Path(directory).absolute()), int(limit), os.getpid(), group, lock_wait)
        if key not in _SHARED:
            _SHARED[key] = cls(directory, limit, group, lock_wait)
        return _SHARED[key]

    def __repr__(self) -> str:
        return f"NodeCache({str(self.directory)!r}, limit={self.limit})"

    def path(self, key: str) -> Path:
        """Where the verified file ``key`` lives."""
        return Path(self._file(key))

    def _file(self, key: str) -> str:
        return f"{self._data}/{key}"

    # -- reading ------------------------------------------------------------------------------------------

    def pin(self, key: str, size: int, *, mapped: bool = True) -> PinnedFile | None:
        """Map the verified file ``key`` and hold it against eviction; None when it is not (or no longer) here.
        With ``mapped=False`` it is only held (the prefetcher keeps the files of the next reads so)."""
        path = self._file(key)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        except PermissionError as e:
            raise not_shared(path, e) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            st = os.fstat(fd)
            if st.st_nlink == 0 or st.st_size != size or not stat.S_ISREG(st.st_mode):
                os.close(fd)  # evicted between open and lock (or not the file the manifest says): fetch again
                return None
            with contextlib.suppress(OSError):
                os.utime(fd)  # least recently used goes first
            return PinnedFile(path, fd, size, mapped)
        except BaseException:
            with contextlib.suppress(OSError):
                os.close(fd)
            raise

    def touch(self, key: str) -> None:
        """Mark ``key`` recently used (it is evicted after every file used before it)."""
        with contextlib.suppress(FileNotFoundError):
            os.utime(self._file(key))

    def demote(self, key: str) -> None:
        """Mark ``key`` as wanted by no planned read: it is evicted before every file not demoted (the files
        demoted earlier first). A file some reader holds (another process's next reads need it) is left as it
        is: the caller releases its own holds first."""
        try:  # (a lock file's descriptor: a child forked meanwhile must not keep the exclusive lock, see lock_fd)
            fd = lock_fd(lambda: os.open(self._file(key), os.O_RDONLY | os.O_CLOEXEC))
        except FileNotFoundError:
            return
        try:
            if free(fd):  # only when nobody holds it (closing unlocks)
                old = time.time() - _DEMOTED_AGE
                os.utime(fd, (old, old))
        finally:
            close_lock_fd(fd)

    def discard(self, key: str) -> None:
        """Remove the verified file ``key`` whoever holds it (it is damaged: readers that map it see it gone)."""
        Path(self._file(key)).unlink(missing_ok=True)

    def has(self, key: str, size: int | None) -> bool:
        """True when ``key`` is here (with ``size`` bytes, unless None)."""
        try:
            actual = os.stat(self._file(key)).st_size
        except FileNotFoundError:
            return False
        return size is None or actual == size

    # -- downloading --------------------------------------------------------------------------------------

    def fetch(
        self,
        key: str,
        size: int | None,
        download: Callable[[int], None],
        check: Callable[[Path], None],
        shown: str,
        optional: bool = False,
        whole: Receiver | None = None,
    ) -> bool:
        """Make sure the verified file ``key`` is here: wait for another process downloading it, or download it.

        Args:
            key: the content key (``"sha256-<hex>"``).
            size: its size in bytes (None when unknown: no space is reserved ahead).
            download: writes the file's bytes into the descriptor it is given.
            check: raises (a ``CacheCorruptError``, say) when the downloaded file is not the expected one.
            shown: the file's URL, for messages.
            optional: nobody waits for the file (a prefetch): it is not downloaded when it does not fit under the
                limit now (every other file is in use or downloading).
            whole: while this process waits for another process's download of the file, takes its bytes once
                they are all in and it wants them, before that download's sync, check and rename (not verified:
                for a caller that checks what it reads; ``_whole_files``). Needs ``size``.

        Returns:
            True when the file is here; False when ``optional`` and there was no room for it.

        Raises:
            ValueError: when the file is larger than the cache's limit (nothing is evicted or reserved).
            OSError: with errno ENOSPC when the node's disk is full (nothing is left behind); whatever
                ``download`` and ``check`` raise (the temporary file is removed first).
        """
        if size is not None and size > self.limit:
            raise too_large(self.directory, self.limit, shown, size)
        if self.has(key, size):
            return True
        look = None if whole is None or not size else WholeLook(self.directory / "tmp", key, size, whole)
        with self._lock(f"locks/{key}.lock", look) as held:
            if self.has(key, size):  # another process downloaded it while this one waited
                return True
            if held:
                self._remove_tmp(key)  # a killed downloader's leftovers (this process holds the file's lock)
            tmp = self._reserve(key, size, shown, optional)
            if tmp is None:
                return False
            try:
                fd = os.open(tmp, os.O_RDWR | os.O_CLOEXEC)
                try:
                    download(fd)
                    if size is not None:  # all its bytes are in: the node's waiters may read them now
                        tmp = show(tmp)
                    os.fdatasync(fd)
                    if size is None:  # its size is known now: make it fit under the limit with the others
                        self._fit(os.fstat(fd).st_size, shown)
                finally:
                    os.close(fd)
                check(tmp)
                self._again(lambda: os.rename(tmp, self.path(key)))
                return True
            except OSError as e:
                tmp.unlink(missing_ok=True)
                if e.errno in (errno.ENOSPC, errno.EDQUOT):
                    raise disk_full(self.directory, shown, size or 0) from None
                raise
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise
